//! content-server: a static file server built around an event loop plus one bounded thread pool
//! per volume. See ARCHITECTURE.md for the path of a request through these modules.

pub mod admin;
pub mod config;
pub mod fs;
pub mod metrics;
