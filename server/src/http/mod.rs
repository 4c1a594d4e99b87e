//! HTTP/1.1 pieces used by the connection ([`crate::conn`]) and the request ([`crate::serve`]):
//! request parsing, the response plan of a file ([`plan`]), response heads, ranges and multipart
//! framing, conditional requests, media types, dates, CORS, header rules, content negotiation of
//! precompressed siblings, directory listings, redirects and cache freshness. Pure code: it must
//! not touch sockets or files, nor import anything of the server but its own pieces and the
//! config types.

pub mod conditional;
pub mod cors;
pub mod date;
pub mod encoding;
pub mod freshness;
pub mod headers;
pub mod host;
pub mod listing;
pub mod mime;
pub mod multipart;
pub mod parse;
pub mod plan;
pub mod range;
pub mod response;
pub mod uri;
