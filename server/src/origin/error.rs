//! Why an origin request failed: each variant names the origin, the server (URL) and what went
//! wrong, so a log line or a 502 reason is enough to find the fault. Types only: what an error
//! leads to (retry, 502/504, serving stale) is decided by the callers.

use std::time::Duration;

/// What a [`OriginError::Timeout`] of a TLS handshake waited for (the server took the TCP
/// connection and never finished TLS).
pub const TLS_HANDSHAKE: &str = "TLS handshake (TCP connected)";

/// An origin request failure (or a start-up failure of the origin client).
#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    /// TCP connect failed (refused, unreachable, name not resolved) on the last server tried.
    #[error("origin {origin:?}: cannot connect to {server}: {source}")]
    Connect {
        origin: String,
        server: String,
        #[source]
        source: std::io::Error,
    },
    /// The TLS handshake failed (unknown CA, wrong name, protocol error).
    #[error("origin {origin:?}: TLS handshake with {server} failed: {source}")]
    Tls {
        origin: String,
        server: String,
        #[source]
        source: std::io::Error,
    },
    /// Nothing came within the configured time: `what` is `connect` (TCP + TLS), `response
    /// head` or `body bytes`.
    #[error("origin {origin:?}: {server}: no {what} within {} ms", after.as_millis())]
    Timeout {
        origin: String,
        server: String,
        what: &'static str,
        after: Duration,
    },
    /// The origin's answer broke HTTP/1.1 or its own announcements (bad head, a 206 without a
    /// usable Content-Range, Content-Length disagreeing with Content-Range, ...), or the
    /// connection failed after the request was sent.
    #[error("origin {origin:?}: {server}: {message}")]
    Protocol {
        origin: String,
        server: String,
        message: String,
    },
    /// The body ended (EOF or reset) before the announced length (Content-Length or the span
    /// of the Content-Range).
    #[error("origin {origin:?}: {server}: body truncated after {got} of {expected} bytes{}", cause.as_deref().map(|c| format!(" ({c})")).unwrap_or_default())]
    Truncated {
        origin: String,
        server: String,
        expected: u64,
        got: u64,
        cause: Option<String>,
    },
    /// The body went on past the announced length.
    #[error("origin {origin:?}: {server}: body longer than the announced {expected} bytes")]
    TooLong {
        origin: String,
        server: String,
        expected: u64,
    },
    /// Reading a body of unknown length failed (reset, malformed chunked encoding).
    #[error(
        "origin {origin:?}: {server}: reading the body failed after {got} bytes: {}",
        error_chain(source)
    )]
    Body {
        origin: String,
        server: String,
        got: u64,
        #[source]
        source: hyper::Error,
    },
    /// This process has no descriptor left for a connection (EMFILE / ENFILE): the node's
    /// fault, not the origin's (not counted against it, no other server tried).
    #[error("origin {origin:?}: cannot open a connection: out of file descriptors ({source})")]
    NoDescriptors {
        origin: String,
        #[source]
        source: std::io::Error,
    },
    /// The request itself cannot be sent (not an origin-form path).
    #[error("origin {origin:?}: invalid request: {message}")]
    Request { origin: String, message: String },
    /// The origin is misconfigured (unreadable or empty `ca_file`, bad URL): start-up only.
    #[error("origin {origin:?}: {message}")]
    Setup { origin: String, message: String },
    /// Not sent ([`super::OriginRequest::only_if_up`]): every server is marked down, none due
    /// for a probe, or its probe taken by another request.
    #[error("origin {origin:?}: not asked: every server is marked down (failed within the last 10 s; one request at a time probes)")]
    AllDown { origin: String },
    /// The origin client's runtime is gone (server shutting down).
    #[error("origin {origin:?}: the origin client has shut down")]
    Shutdown { origin: String },
}

impl OriginError {
    /// True when the request never reached an origin server (connect, TLS or connect timeout):
    /// the origin is down rather than misbehaving.
    pub fn is_connect(&self) -> bool {
        matches!(
            self,
            OriginError::Connect { .. }
                | OriginError::Tls { .. }
                | OriginError::Timeout {
                    what: "connect" | TLS_HANDSHAKE,
                    ..
                }
        )
    }
}

/// An error with its causes (`a: b: c`): hyper's own message says only where it failed
/// ("error reading a body from connection"), its source what happened.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let m = s.to_string();
        if !out.ends_with(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
        source = s.source();
    }
    out
}
