//! Rendering response heads (status line + headers) and the small bodies of error responses.
//! It must not write to sockets; the caller sends the bytes.

use std::fmt::Write;

/// Reason phrase of the status codes the server sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        304 => "Not Modified",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        412 => "Precondition Failed",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// A response head under construction.
pub struct Head {
    buf: String,
}

impl Head {
    /// Status line plus `Server` and `Date`.
    pub fn new(status: u16) -> Head {
        let mut buf = String::with_capacity(320);
        let _ = write!(
            buf,
            "HTTP/1.1 {} {}\r\nServer: content-server\r\nDate: {}\r\n",
            status,
            reason(status),
            super::date::now_header()
        );
        Head { buf }
    }

    pub fn header(mut self, name: &str, value: impl std::fmt::Display) -> Head {
        let _ = write!(self.buf, "{name}: {value}\r\n");
        self
    }

    /// Add `Connection` and the terminating empty line.
    pub fn finish(mut self, keep_alive: bool) -> Vec<u8> {
        self.buf.push_str(if keep_alive {
            "Connection: keep-alive\r\n\r\n"
        } else {
            "Connection: close\r\n\r\n"
        });
        self.buf.into_bytes()
    }
}

/// A complete error response: head plus a one-line text body (omitted for HEAD).
pub fn error(status: u16, head_only: bool, keep_alive: bool, extra: &[(&str, &str)]) -> Vec<u8> {
    let body = format!("{} {}\n", status, reason(status));
    let mut h = Head::new(status)
        .header("Content-Type", "text/plain; charset=utf-8")
        .header("Content-Length", body.len());
    for (n, v) in extra {
        h = h.header(n, v);
    }
    let mut out = h.finish(keep_alive);
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}
