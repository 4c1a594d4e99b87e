//! Parsing one HTTP/1.x request head from the connection buffer with httparse, enforcing
//! `limits.max_header_bytes` (414 for an over-long request line, 431 for over-long headers) and
//! extracting only what the server uses. It must not allocate per header beyond those values.

/// Request method, as far as the server cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Other(String),
}

impl Method {
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Other(m) => m,
        }
    }
}

/// A parsed request head.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    /// The request target's path (origin form; absolute form reduced to its path), query removed.
    pub path: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    /// Client allows the connection to stay open after this response.
    pub keep_alive: bool,
    /// The request carries a body (Content-Length > 0 or Transfer-Encoding); we do not read
    /// bodies, so the connection closes after the response.
    pub has_body: bool,
    pub if_none_match: Option<String>,
    pub if_modified_since: Option<String>,
    pub range: Option<String>,
    pub if_range: Option<String>,
    /// Bytes of the head in the buffer (the next request starts here).
    pub head_len: usize,
}

/// A request that cannot be served; the connection closes after the error response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("malformed request: {0}")]
    Bad(&'static str),
    #[error("request line too long")]
    UriTooLong,
    #[error("request header fields too large")]
    HeadersTooLarge,
    #[error("HTTP version not supported")]
    Version,
}

impl ParseError {
    pub fn status(self) -> u16 {
        match self {
            ParseError::Bad(_) => 400,
            ParseError::UriTooLong => 414,
            ParseError::HeadersTooLarge => 431,
            ParseError::Version => 505,
        }
    }
}

const MAX_HEADERS: usize = 100;

/// Parse the head at the start of `buf`. `Ok(None)`: incomplete, read more (unless the buffer
/// already holds `max` bytes, which is an error here).
pub fn parse(buf: &[u8], max: usize) -> Result<Option<Request>, ParseError> {
    // Tolerate empty lines before a request (RFC 9112 §2.2) only when the whole head fits.
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let status = match req.parse(buf) {
        Ok(s) => s,
        Err(httparse::Error::TooManyHeaders) => return Err(ParseError::HeadersTooLarge),
        Err(httparse::Error::Version) => return Err(ParseError::Bad("bad HTTP version")),
        Err(httparse::Error::Token) => return Err(ParseError::Bad("bad method or header name")),
        Err(httparse::Error::HeaderName) => return Err(ParseError::Bad("bad header name")),
        Err(httparse::Error::HeaderValue) => return Err(ParseError::Bad("bad header value")),
        Err(httparse::Error::NewLine) => return Err(ParseError::Bad("bad line ending")),
        Err(httparse::Error::Status) => return Err(ParseError::Bad("bad status")),
    };
    let head_len = match status {
        httparse::Status::Partial => {
            if buf.len() >= max {
                let line_done = buf.windows(2).any(|w| w == b"\r\n") || buf.contains(&b'\n');
                return Err(if line_done {
                    ParseError::HeadersTooLarge
                } else {
                    ParseError::UriTooLong
                });
            }
            return Ok(None);
        }
        httparse::Status::Complete(n) => n,
    };
    if head_len > max {
        return Err(ParseError::HeadersTooLarge);
    }
    let method = match req.method {
        Some("GET") => Method::Get,
        Some("HEAD") => Method::Head,
        Some(m) => Method::Other(m.to_owned()),
        None => return Err(ParseError::Bad("no method")),
    };
    let minor = match req.version {
        Some(v @ (0 | 1)) => v,
        _ => return Err(ParseError::Version),
    };
    let target = req.path.ok_or(ParseError::Bad("no request target"))?;
    let path = origin_path(target)?;
    let mut r = Request {
        method,
        path,
        minor,
        keep_alive: minor == 1,
        has_body: false,
        if_none_match: None,
        if_modified_since: None,
        range: None,
        if_range: None,
        head_len,
    };
    let mut host = 0;
    let mut content_length: Option<u64> = None;
    for h in req.headers.iter() {
        let value = || {
            std::str::from_utf8(h.value)
                .map(|v| v.trim().to_owned())
                .map_err(|_| ParseError::Bad("non-ASCII header value"))
        };
        let name = h.name;
        if name.eq_ignore_ascii_case("host") {
            host += 1;
        } else if name.eq_ignore_ascii_case("connection") {
            let v = value()?;
            for tok in v.split(',').map(str::trim) {
                if tok.eq_ignore_ascii_case("close") {
                    r.keep_alive = false;
                } else if tok.eq_ignore_ascii_case("keep-alive") && minor == 0 {
                    r.keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            let v = value()?;
            let n: u64 = v
                .parse()
                .map_err(|_| ParseError::Bad("bad Content-Length"))?;
            if content_length.is_some_and(|c| c != n) {
                return Err(ParseError::Bad("conflicting Content-Length"));
            }
            content_length = Some(n);
            if n > 0 {
                r.has_body = true;
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            r.has_body = true;
        } else if name.eq_ignore_ascii_case("if-none-match") {
            r.if_none_match = Some(value()?);
        } else if name.eq_ignore_ascii_case("if-modified-since") {
            r.if_modified_since = Some(value()?);
        } else if name.eq_ignore_ascii_case("range") {
            r.range = Some(value()?);
        } else if name.eq_ignore_ascii_case("if-range") {
            r.if_range = Some(value()?);
        }
    }
    if minor == 1 && host != 1 {
        return Err(ParseError::Bad("HTTP/1.1 requires exactly one Host header"));
    }
    if r.has_body {
        r.keep_alive = false;
    }
    Ok(Some(r))
}

/// The path of an origin-form (`/a/b?q`) or absolute-form (`http://h/a/b?q`) target.
fn origin_path(target: &str) -> Result<String, ParseError> {
    let rest = if target.starts_with('/') {
        target
    } else if let Some(after) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        match after.find('/') {
            Some(i) => &after[i..],
            None => "/",
        }
    } else {
        return Err(ParseError::Bad("request target must be a path"));
    };
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    Ok(rest[..end].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_and_partial() {
        let r = parse(
            b"GET /a/b?x=1 HTTP/1.1\r\nHost: h\r\nRange: bytes=0-1\r\n\r\nGET",
            8192,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.path, "/a/b");
        assert_eq!(r.range.as_deref(), Some("bytes=0-1"));
        assert!(r.keep_alive);
        assert_eq!(r.head_len, 52);
        assert!(parse(b"GET /a HTTP/1.1\r\nHost", 8192).unwrap().is_none());
    }

    #[test]
    fn errors() {
        assert_eq!(
            parse(b"GET /a HTTP/1.1\r\n\r\n", 8192)
                .unwrap_err()
                .status(),
            400
        );
        assert_eq!(parse(&[b'a'; 300], 256).unwrap_err().status(), 414);
        let mut long = b"GET / HTTP/1.1\r\nX: ".to_vec();
        long.resize(300, b'a');
        assert_eq!(parse(&long, 256).unwrap_err().status(), 431);
        assert_eq!(
            parse(b"GET a HTTP/1.1\r\nHost: h\r\n\r\n", 8192)
                .unwrap_err()
                .status(),
            400
        );
        assert_eq!(
            parse(b"\x01\x02 / HTTP/1.1\r\n\r\n", 8192)
                .unwrap_err()
                .status(),
            400
        );
    }

    #[test]
    fn http10_and_close() {
        let r = parse(b"GET / HTTP/1.0\r\n\r\n", 8192).unwrap().unwrap();
        assert!(!r.keep_alive);
        let r = parse(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 8192)
            .unwrap()
            .unwrap();
        assert!(r.keep_alive);
        let r = parse(
            b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
            8192,
        )
        .unwrap()
        .unwrap();
        assert!(!r.keep_alive);
    }
}
