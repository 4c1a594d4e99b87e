//! HTTP/1.1 pieces used by the connection state machine: request parsing, response heads,
//! ranges, conditional requests, media types and dates. Pure code; no sockets, no files.

pub mod conditional;
pub mod date;
pub mod mime;
pub mod parse;
pub mod range;
pub mod response;
