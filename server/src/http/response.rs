//! Rendering response heads (status line + headers) and the small bodies of error responses.
//! It must not write to sockets; the caller sends the bytes.

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
        502 => "Bad Gateway",
        504 => "Gateway Timeout",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        // An origin's status passed through (302, 410, 429...): its registered phrase.
        _ => ::http::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("Unknown"),
    }
}

/// Append `v` in decimal (heads are built per response: no formatting machinery).
pub fn push_u64(out: &mut String, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    // Pushed as chars: ASCII needs no UTF-8 validation (from_utf8 cost more than the digits).
    out.reserve(digits.len() - i);
    for &d in &digits[i..] {
        out.push(char::from(d));
    }
}

/// Append `v` in lower-case hexadecimal.
pub fn push_hex(out: &mut String, v: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let nibbles = (64 - v.leading_zeros()).div_ceil(4).max(1);
    out.reserve(nibbles as usize);
    for k in (0..nibbles).rev() {
        out.push(char::from(HEX[((v >> (4 * k)) & 15) as usize]));
    }
}

/// A header value appended to a head: strings and integers without the formatting machinery
/// (heads are built per response), anything else through `format_args!`.
pub trait HeaderValue {
    fn push_to(self, out: &mut String);
}

impl HeaderValue for &str {
    fn push_to(self, out: &mut String) {
        out.push_str(self);
    }
}

impl HeaderValue for &&str {
    fn push_to(self, out: &mut String) {
        out.push_str(self);
    }
}

impl HeaderValue for &String {
    fn push_to(self, out: &mut String) {
        out.push_str(self);
    }
}

impl HeaderValue for String {
    fn push_to(self, out: &mut String) {
        out.push_str(&self);
    }
}

impl HeaderValue for u64 {
    fn push_to(self, out: &mut String) {
        push_u64(out, self);
    }
}

impl HeaderValue for usize {
    fn push_to(self, out: &mut String) {
        push_u64(out, self as u64);
    }
}

impl HeaderValue for u32 {
    fn push_to(self, out: &mut String) {
        push_u64(out, u64::from(self));
    }
}

/// An HTTP date (IMF-fixdate) of seconds since the epoch, written straight into the head.
#[derive(Debug, Clone, Copy)]
pub struct HttpDate(pub i64);

impl HeaderValue for HttpDate {
    fn push_to(self, out: &mut String) {
        super::date::push(out, self.0);
    }
}

impl HeaderValue for std::fmt::Arguments<'_> {
    fn push_to(self, out: &mut String) {
        let _ = std::fmt::Write::write_fmt(out, self);
    }
}

/// A response head under construction.
pub struct Head {
    buf: String,
}

impl Head {
    /// Status line plus `Server` and `Date` (now).
    pub fn new(status: u16) -> Head {
        Head::start(status, super::date::push_now)
    }

    /// Status line plus `Server` and `Date` of the second `now` (seconds since the epoch): for
    /// a head whose other dates were computed from that same clock reading (a Last-Modified
    /// clamped to it, `Expires` = now + N), so they cannot disagree with `Date`.
    pub fn dated(status: u16, now: i64) -> Head {
        Head::start(status, |buf| super::date::push_date(buf, now))
    }

    /// Status line plus `Server` and `Date` as given: a stored answer's own (an IMF-fixdate).
    pub fn dated_as(status: u16, date: &str) -> Head {
        Head::start(status, |buf| buf.push_str(date))
    }

    fn start(status: u16, date: impl FnOnce(&mut String)) -> Head {
        let mut buf = String::with_capacity(320);
        buf.push_str("HTTP/1.1 ");
        push_u64(&mut buf, u64::from(status));
        buf.push(' ');
        buf.push_str(reason(status));
        buf.push_str("\r\nServer: content-server\r\nDate: ");
        date(&mut buf);
        buf.push_str("\r\n");
        Head { buf }
    }

    pub fn header(mut self, name: &str, value: impl HeaderValue) -> Head {
        self.buf.push_str(name);
        self.buf.push_str(": ");
        value.push_to(&mut self.buf);
        self.buf.push_str("\r\n");
        self
    }

    /// `Content-Range: bytes FIRST-LAST/SIZE`.
    pub fn content_range(mut self, first: u64, last: u64, size: u64) -> Head {
        self.buf.push_str("Content-Range: bytes ");
        push_u64(&mut self.buf, first);
        self.buf.push('-');
        push_u64(&mut self.buf, last);
        self.buf.push('/');
        push_u64(&mut self.buf, size);
        self.buf.push_str("\r\n");
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
    let mut body = String::with_capacity(40);
    push_u64(&mut body, u64::from(status));
    body.push(' ');
    body.push_str(reason(status));
    body.push('\n');
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

/// The outcome of one response (for the connection's log, counters and keep-alive decision).
#[derive(Debug, Clone, Copy)]
pub struct Served {
    pub status: u16,
    /// Bytes written (head + body).
    pub bytes: u64,
    /// The connection may carry another request.
    pub keep_alive: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_heads() {
        for v in [0u64, 7, 10, 15, 16, 255, 256, 4096, 1 << 63, u64::MAX] {
            let mut s = String::new();
            push_u64(&mut s, v);
            assert_eq!(s, v.to_string());
            let mut h = String::new();
            push_hex(&mut h, v);
            assert_eq!(h, format!("{v:x}"));
        }
        let out = String::from_utf8(
            Head::new(206)
                .header("Content-Length", 10u64)
                .content_range(5, 14, 100)
                .finish(false),
        )
        .unwrap();
        assert!(out.starts_with("HTTP/1.1 206 Partial Content\r\nServer: content-server\r\nDate: "));
        assert!(out.ends_with(
            "GMT\r\nContent-Length: 10\r\nContent-Range: bytes 5-14/100\r\nConnection: close\r\n\r\n"
        ));
        let err = String::from_utf8(error(404, false, true, &[])).unwrap();
        assert!(err.contains("Content-Length: 14\r\n"));
        assert!(err.ends_with("\r\n\r\n404 Not Found\n"));
    }
}
