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
    /// The request target's path (origin form; absolute form reduced to its path), query removed;
    /// `*` for `OPTIONS *` (asterisk-form, [`Request::is_asterisk`]).
    pub path: String,
    /// The query (after `?`, before any `#`), as received.
    pub query: Option<String>,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1 (also for HTTP/1.2-1.9, answered as HTTP/1.1).
    pub minor: u8,
    /// Client allows the connection to stay open after this response.
    pub keep_alive: bool,
    /// The request carries a body (Content-Length > 0 or Transfer-Encoding); we do not read
    /// bodies, so the connection closes after the response.
    pub has_body: bool,
    pub if_match: Option<String>,
    pub if_unmodified_since: Option<String>,
    pub if_none_match: Option<String>,
    pub if_modified_since: Option<String>,
    pub range: Option<String>,
    pub if_range: Option<String>,
    pub origin: Option<String>,
    /// The `Connection` field names `Origin` (RFC 9110 §7.6.1): it is for this hop only, used
    /// here (CORS) but not forwarded to an origin ([`Request::origin_to_forward`]).
    pub origin_hop_by_hop: bool,
    pub access_control_request_method: Option<String>,
    pub access_control_request_headers: Option<String>,
    pub accept: Option<String>,
    pub accept_encoding: Option<String>,
    /// `Authorization` (a cache route must not share answers to it; RFC 9111 §3.5), forwarded
    /// to the origin as received; None when the `Connection` field names it (hop-by-hop: for
    /// this server, which checks no credentials, so the request is an anonymous one).
    pub authorization: Option<String>,
    /// `Cache-Control: only-if-cached` (RFC 9111 §5.2.1.7): a cache route answers from what
    /// it has stored, or 504, never asking the origin. The request's other cache directives
    /// are not honoured (as nginx: a client's no-cache does not reach past the cache).
    pub only_if_cached: bool,
    /// Bytes of the head in the buffer (the next request starts here).
    pub head_len: usize,
}

impl Request {
    /// `OPTIONS *`: a question about the server, not about any resource (RFC 9110 §9.3.7).
    pub fn is_asterisk(&self) -> bool {
        self.path == "*"
    }

    /// The `Origin` to send an origin server: the client's, unless `Connection` named it.
    pub fn origin_to_forward(&self) -> Option<String> {
        self.origin.clone().filter(|_| !self.origin_hop_by_hop)
    }
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
    #[error("expectation not supported")]
    Expectation,
}

impl ParseError {
    pub fn status(self) -> u16 {
        match self {
            ParseError::Bad(_) => 400,
            ParseError::UriTooLong => 414,
            ParseError::HeadersTooLarge => 431,
            ParseError::Version => 505,
            ParseError::Expectation => 417,
        }
    }
}

const MAX_HEADERS: usize = 100;

/// What the request line's version says, when httparse refused it (it knows 1.0 and 1.1 only).
enum OtherVersion {
    /// `HTTP/1.2` .. `HTTP/1.9`: a later minor version of HTTP/1, answered as HTTP/1.1
    /// (RFC 9110 §2.5); at this offset in the buffer is the minor digit.
    LaterMinor(usize),
    /// `HTTP/2.0` and later majors on an HTTP/1 connection: 505.
    Unsupported,
    /// Not a version at all (400), or the request line is not complete yet.
    Bad,
    Incomplete,
}

fn other_version(buf: &[u8]) -> OtherVersion {
    // Empty lines before the request line are skipped, as httparse skips them (RFC 9112 §2.2).
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let Some(eol) = buf[start..].iter().position(|&b| b == b'\n') else {
        return OtherVersion::Incomplete;
    };
    let line = &buf[start..start + eol];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Some(sp) = line.iter().rposition(|&b| b == b' ') else {
        return OtherVersion::Bad;
    };
    match &line[sp + 1..] {
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', d] if (b'2'..=b'9').contains(d) => {
            OtherVersion::LaterMinor(start + sp + 8)
        }
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if (b'2'..=b'9').contains(major) && minor.is_ascii_digit() =>
        {
            OtherVersion::Unsupported
        }
        _ => OtherVersion::Bad,
    }
}

/// Parse the head at the start of `buf`. `Ok(None)`: incomplete, read more (unless the buffer
/// already holds `max` bytes, which is an error here).
pub fn parse(buf: &[u8], max: usize) -> Result<Option<Request>, ParseError> {
    match parse_http1(buf, max) {
        Err(ParseError::Bad("bad HTTP version")) => match other_version(buf) {
            OtherVersion::LaterMinor(at) => {
                // Same length, so head_len and the pipelined remainder are unchanged.
                let mut copy = buf[..buf.len().min(max)].to_vec();
                copy[at] = b'1';
                parse_http1(&copy, max)
            }
            OtherVersion::Unsupported => Err(ParseError::Version),
            OtherVersion::Incomplete if buf.len() < max => Ok(None),
            OtherVersion::Bad | OtherVersion::Incomplete => {
                Err(ParseError::Bad("bad HTTP version"))
            }
        },
        other => other,
    }
}

fn parse_http1(buf: &[u8], max: usize) -> Result<Option<Request>, ParseError> {
    // Tolerate empty lines before a request (RFC 9112 §2.2) only when the whole head fits.
    // Left uninitialised: httparse writes the ones it parses (initialising 100 empty headers
    // cost about 400 instructions per request, a tenth of the parse).
    let mut headers =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let status = match req.parse_with_uninit_headers(buf, &mut headers) {
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
    let (path, query) = origin_path(target)?;
    if path == "*" && method.as_str() != "OPTIONS" {
        // RFC 9112 §3.2.4: the asterisk-form is only used for a server-wide OPTIONS.
        return Err(ParseError::Bad(
            "request target '*' of a method other than OPTIONS",
        ));
    }
    let mut r = Request {
        method,
        path,
        query,
        minor,
        keep_alive: minor == 1,
        has_body: false,
        if_match: None,
        if_unmodified_since: None,
        if_none_match: None,
        if_modified_since: None,
        range: None,
        if_range: None,
        origin: None,
        origin_hop_by_hop: false,
        access_control_request_method: None,
        access_control_request_headers: None,
        accept: None,
        accept_encoding: None,
        authorization: None,
        only_if_cached: false,
        head_len,
    };
    let mut host = 0;
    let mut expect_unsupported = false;
    let mut transfer_encoding: Option<String> = None;
    let mut content_length: Option<u64> = None;
    let mut close = false;
    let mut authorization_hop_by_hop = false;
    let mut range_fields = 0;
    for h in req.headers.iter() {
        // Borrowed for the fields only looked at; owned for the ones the request keeps. A
        // value's obs-text bytes (RFC 9110 §5.5) become U+FFFD: such a value matches none of
        // ours (an ETag, a coding, a media type) and is invalid where syntax is checked (Host).
        let text = || String::from_utf8_lossy(h.value);
        let value = || text().trim().to_owned();
        let name = h.name;
        if name.eq_ignore_ascii_case("host") {
            host += 1;
            if !super::host::valid(text().trim()) {
                return Err(ParseError::Bad("Host is not a valid authority"));
            }
        } else if name.eq_ignore_ascii_case("connection") {
            // `close` wins wherever it appears (RFC 9112 §9.6); keep-alive opts an HTTP/1.0
            // connection in.
            for tok in text().split(',').map(str::trim) {
                if tok.eq_ignore_ascii_case("close") {
                    close = true;
                } else if tok.eq_ignore_ascii_case("keep-alive") && minor == 0 {
                    r.keep_alive = true;
                } else if tok.eq_ignore_ascii_case("origin") {
                    r.origin_hop_by_hop = true;
                } else if tok.eq_ignore_ascii_case("authorization") {
                    authorization_hop_by_hop = true;
                }
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            // 1*DIGIT (RFC 9110 §8.6): no sign, no space inside.
            let v = text();
            let v = v.trim();
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(ParseError::Bad("bad Content-Length"));
            }
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
            transfer_encoding = Some(join(transfer_encoding.take(), value()));
        } else if name.eq_ignore_ascii_case("if-none-match") {
            r.if_none_match = Some(join(r.if_none_match.take(), value()));
        } else if name.eq_ignore_ascii_case("if-modified-since") {
            r.if_modified_since = Some(value());
        } else if name.eq_ignore_ascii_case("range") {
            range_fields += 1;
            r.range = Some(value());
        } else if name.eq_ignore_ascii_case("if-range") {
            // One validator (RFC 9110 §13.1.5): two could splice ranges of two versions.
            if r.if_range.is_some() {
                return Err(ParseError::Bad("more than one If-Range"));
            }
            r.if_range = Some(value());
        } else if name.eq_ignore_ascii_case("if-match") {
            r.if_match = Some(join(r.if_match.take(), value()));
        } else if name.eq_ignore_ascii_case("if-unmodified-since") {
            r.if_unmodified_since = Some(value());
        } else if name.eq_ignore_ascii_case("origin") {
            // Forwarded to an origin as received (and echoed by CORS): bytes that are not
            // UTF-8 cannot be, and U+FFFD in their place would show it another Origin.
            let v =
                std::str::from_utf8(h.value).map_err(|_| ParseError::Bad("Origin is not UTF-8"))?;
            r.origin = Some(v.trim().to_owned());
        } else if name.eq_ignore_ascii_case("access-control-request-method") {
            r.access_control_request_method = Some(value());
        } else if name.eq_ignore_ascii_case("access-control-request-headers") {
            r.access_control_request_headers =
                Some(join(r.access_control_request_headers.take(), value()));
        } else if name.eq_ignore_ascii_case("accept") {
            r.accept = Some(join(r.accept.take(), value()));
        } else if name.eq_ignore_ascii_case("accept-encoding") {
            r.accept_encoding = Some(join(r.accept_encoding.take(), value()));
        } else if name.eq_ignore_ascii_case("cache-control") {
            let v = text();
            if v.split(',')
                .any(|d| d.trim().eq_ignore_ascii_case("only-if-cached"))
            {
                r.only_if_cached = true;
            }
        } else if name.eq_ignore_ascii_case("authorization") {
            // Forwarded to an origin as received: bytes that are not UTF-8 cannot be.
            let v = std::str::from_utf8(h.value)
                .map_err(|_| ParseError::Bad("Authorization is not UTF-8"))?;
            // One credential (RFC 9110 §11.6.2 has no list form); nginx refuses a second
            // line too. Which one to forward would be a guess.
            if r.authorization.is_some() {
                return Err(ParseError::Bad("more than one Authorization"));
            }
            r.authorization = Some(v.trim().to_owned());
        } else if name.eq_ignore_ascii_case("expect") {
            // RFC 9110 §10.1.1: only 100-continue is defined. The final answer is sent without
            // reading a body, which that section allows; HTTP/1.0 requests ignore Expect.
            // Empty list elements (`100-continue,`, an empty field) are none (§5.6.1.2).
            let v = text();
            if minor == 1
                && !v
                    .split(',')
                    .map(str::trim)
                    .all(|t| t.is_empty() || t.eq_ignore_ascii_case("100-continue"))
            {
                expect_unsupported = true;
            }
        }
    }
    if minor == 1 && host != 1 {
        return Err(ParseError::Bad("HTTP/1.1 requires exactly one Host header"));
    }
    // Range is no list (RFC 9110 §14.2): two fields are an invalid Range, which is ignored
    // (the whole representation, 200), not one of them picked.
    if range_fields > 1 {
        r.range = None;
    }
    if host > 1 {
        return Err(ParseError::Bad("more than one Host header"));
    }
    // A body whose length cannot be known (RFC 9112 §6.3: chunked must be the last coding) is
    // a 400 and the connection's end.
    // Chunked once, and last (empty list elements do not count, RFC 9110 §5.6.1).
    if let Some(te) = transfer_encoding {
        let codings: Vec<&str> = te
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .collect();
        let chunked = |t: &str| t.eq_ignore_ascii_case("chunked");
        let times = codings.iter().filter(|t| chunked(t)).count();
        if !codings.last().is_some_and(|t| chunked(t)) || times > 1 {
            return Err(ParseError::Bad(
                "Transfer-Encoding must end in chunked, applied once",
            ));
        }
    }
    if expect_unsupported {
        return Err(ParseError::Expectation);
    }
    if authorization_hop_by_hop {
        r.authorization = None;
    }
    if r.has_body || close {
        r.keep_alive = false;
    }
    Ok(Some(r))
}

/// A list-valued field received on several lines is one comma-separated list (RFC 9110 §5.3).
/// The list-valued fields the request keeps: If-Match, If-None-Match, Accept, Accept-Encoding,
/// Access-Control-Request-Headers. The others it keeps are single values (a date, a range set,
/// an origin, a method, credentials): a repeated line of those is not a list, and the last wins.
fn join(prev: Option<String>, v: String) -> String {
    match prev {
        Some(p) => format!("{p}, {v}"),
        None => v,
    }
}

/// The path and query of an origin-form (`/a/b?q`) or absolute-form (`http://h/a/b?q`) target
/// (RFC 9112 §3.2). The scheme is matched case-insensitively (RFC 3986 §3.1: `HTTP://` is
/// `http://`), and the authority ends at the first `/`, `?` or `#` (§3.2), so `http://h?q` is
/// path `/` with query `q`. The asterisk-form `*` (of `OPTIONS` only, checked by the caller) is
/// kept as the path `*`.
fn origin_path(target: &str) -> Result<(String, Option<String>), ParseError> {
    if target == "*" {
        return Ok(("*".to_owned(), None));
    }
    let rest = if target.starts_with('/') {
        target
    } else if let Some(after) = strip_scheme(target, "http://").or(strip_scheme(target, "https://"))
    {
        let end = after.find(['/', '?', '#']).unwrap_or(after.len());
        // Checked like a Host header, and an http(s) URI must name a host (RFC 9110 §4.2.1).
        let authority = &after[..end];
        if !super::host::valid(authority) {
            return Err(ParseError::Bad("the request target's authority is invalid"));
        }
        &after[end..]
    } else {
        return Err(ParseError::Bad("request target must be a path"));
    };
    let rest = &rest[..rest.find('#').unwrap_or(rest.len())];
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q.to_owned())),
        None => (rest, None),
    };
    // An absolute URI without a path: the empty path of an http(s) URI is `/` (RFC 9110 §4.2.3).
    let path = if path.is_empty() { "/" } else { path };
    Ok((path.to_owned(), query))
}

/// `target` after its scheme prefix `scheme` (lower-case, with `://`), compared without case.
fn strip_scheme<'a>(target: &'a str, scheme: &str) -> Option<&'a str> {
    let head = target.get(..scheme.len())?;
    head.eq_ignore_ascii_case(scheme)
        .then(|| &target[scheme.len()..])
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

    fn status(buf: &[u8]) -> u16 {
        parse(buf, 8192).unwrap_err().status()
    }

    #[test]
    fn later_http1_minor_versions_are_http11() {
        let r = parse(
            b"GET /a?q=1 HTTP/1.9\r\nHost: h\r\n\r\nGET / HTTP/1.1\r\n",
            8192,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.minor, 1);
        assert!(r.keep_alive);
        assert_eq!(r.path, "/a");
        assert_eq!(r.query.as_deref(), Some("q=1"));
        assert_eq!(r.head_len, 32);
        // HTTP/1.2 still needs Host, like 1.1.
        assert_eq!(status(b"GET / HTTP/1.2\r\n\r\n"), 400);
        // Incomplete request line: wait for more.
        assert!(parse(b"GET / HTTP/1.2", 8192).unwrap().is_none());
        // Empty lines before the request line are skipped for these too, as for 1.1.
        let r = parse(b"\r\n\r\nGET /b HTTP/1.2\r\nHost: h\r\n\r\n", 8192)
            .unwrap()
            .unwrap();
        assert_eq!((r.minor, r.path.as_str(), r.head_len), (1, "/b", 32));
        assert_eq!(status(b"\r\nGET / HTTP/2.0\r\nHost: h\r\n\r\n"), 505);
    }

    #[test]
    fn http2_on_http1_is_505_and_garbage_versions_400() {
        for (req, want) in [
            (&b"GET / HTTP/2.0\r\nHost: h\r\n\r\n"[..], 505),
            (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
            (b"GET / HTTP/3.0\r\nHost: h\r\n\r\n", 505),
            (b"GET / HTTP/1.10\r\nHost: h\r\n\r\n", 400),
            (b"GET / HTTP/x.y\r\nHost: h\r\n\r\n", 400),
            (b"GET / FTP/1.1\r\nHost: h\r\n\r\n", 400),
        ] {
            assert_eq!(status(req), want, "{}", String::from_utf8_lossy(req));
        }
    }

    #[test]
    fn host_must_be_one_valid_authority() {
        for req in [
            &b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: u@h\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: h\r\nHost: h\r\n\r\n",
            b"GET / HTTP/1.0\r\nHost: h\r\nHost: h\r\n\r\n",
            b"GET / HTTP/1.0\r\nHost: [::1\r\n\r\n",
            // An empty host, as nginx answers (RFC 9110 §4.2.1; tester: served 200).
            b"GET / HTTP/1.1\r\nHost:\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: \r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: :80\r\n\r\n",
            b"GET / HTTP/1.0\r\nHost:\r\n\r\n",
        ] {
            assert_eq!(status(req), 400, "{}", String::from_utf8_lossy(req));
        }
        for ok in ["h", "h:8080", "h:", "[::1]:80", "127.0.0.1"] {
            let req = format!("GET / HTTP/1.1\r\nHost: {ok}\r\n\r\n");
            assert!(parse(req.as_bytes(), 8192).unwrap().is_some(), "{ok}");
        }
    }

    #[test]
    fn expect() {
        let r = parse(
            b"GET / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\n\r\n",
            8192,
        )
        .unwrap()
        .unwrap();
        assert!(r.keep_alive);
        assert_eq!(
            status(b"GET / HTTP/1.1\r\nHost: h\r\nExpect: teapot\r\n\r\n"),
            417
        );
        // Empty list elements are ignored; an empty field expects nothing.
        for v in [
            "100-continue,",
            ", 100-continue",
            "",
            " , ",
            "100-continue,,teapot",
        ] {
            let req = format!("GET / HTTP/1.1\r\nHost: h\r\nExpect: {v}\r\n\r\n");
            let expected = if v.contains("teapot") { 417 } else { 0 };
            let got = match parse(req.as_bytes(), 8192) {
                Ok(Some(_)) => 0,
                Ok(None) => panic!("{v:?}: incomplete"),
                Err(e) => e.status(),
            };
            assert_eq!(got, expected, "Expect: {v:?}");
        }
        // HTTP/1.0 ignores Expect.
        assert!(parse(b"GET / HTTP/1.0\r\nExpect: teapot\r\n\r\n", 8192)
            .unwrap()
            .is_some());
    }

    #[test]
    fn absolute_form_scheme_is_case_insensitive() {
        for (target, path, query) in [
            ("http://example/x", "/x", None),
            ("HTTP://example/x", "/x", None),
            ("Http://example/x?a=1", "/x", Some("a=1")),
            ("hTtPs://example:443/a/b", "/a/b", None),
            ("http://example", "/", None),
            ("HTTP://example?q", "/", Some("q")),
            ("http://example#frag", "/", None),
            ("/plain?x#f", "/plain", Some("x")),
        ] {
            let req = format!("GET {target} HTTP/1.1\r\nHost: h\r\n\r\n");
            let r = parse(req.as_bytes(), 8192).unwrap().unwrap();
            assert_eq!(
                (r.path.as_str(), r.query.as_deref()),
                (path, query),
                "{target}"
            );
            assert!(!r.is_asterisk());
        }
        for target in [
            "ftp://example/x",
            "http:/x",
            "HTTP:example",
            "httpx://e/x",
            "x",
            // The authority is checked like a Host header, and must name a host.
            "http:///x",
            "http://u@h/x",
            "http://h@evil.example/x",
            "http://h:abc/x",
            "http://[::1/x",
            "http://:80/x",
        ] {
            let req = format!("GET {target} HTTP/1.1\r\nHost: h\r\n\r\n");
            assert_eq!(status(req.as_bytes()), 400, "{target}");
        }
    }

    #[test]
    fn framing_fields_follow_rfc_9112() {
        // Transfer-Encoding whose last coding is not chunked: the body's length is unknown.
        for te in [
            "gzip",
            "identity",
            "chunked, gzip",
            "",
            "chunked, chunked",
            ",",
        ] {
            let req = format!("GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: {te}\r\n\r\n");
            assert_eq!(status(req.as_bytes()), 400, "{te:?}");
        }
        let req = b"GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: Chunked\r\n\r\n";
        let r = parse(req, 8192).unwrap().unwrap();
        assert!(r.has_body && !r.keep_alive);
        // Empty list elements are nothing.
        let req = b"GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked ,\r\n\r\n";
        assert!(parse(req, 8192).unwrap().unwrap().has_body);
        // Content-Length is 1*DIGIT.
        for cl in ["+0", "+5", "-1", " 1 2", "0x10", ""] {
            let req = format!("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: {cl}\r\n\r\n");
            assert_eq!(status(req.as_bytes()), 400, "{cl:?}");
        }
        // `close` wins over a later keep-alive, on one line or two.
        for conn in [
            "Connection: close, keep-alive\r\n",
            "Connection: close\r\nConnection: keep-alive\r\n",
            "Connection: keep-alive, close\r\n",
        ] {
            let req = format!("GET / HTTP/1.0\r\n{conn}\r\n");
            let r = parse(req.as_bytes(), 8192).unwrap().unwrap();
            assert!(!r.keep_alive, "{conn:?}");
        }
    }

    #[test]
    fn two_range_fields_are_ignored() {
        let req = b"GET / HTTP/1.1\r\nHost: h\r\nRange: bytes=0-1\r\nRange: bytes=2-3\r\n\r\n";
        let r = parse(req, 8192).unwrap().unwrap();
        assert_eq!(r.range, None);
    }

    #[test]
    fn two_if_range_fields_are_refused() {
        let req = b"GET / HTTP/1.1\r\nHost: h\r\nRange: bytes=0-1\r\nIf-Range: \"a\"\r\nIf-Range: \"b\"\r\n\r\n";
        assert_eq!(status(req), 400);
    }

    #[test]
    fn obs_text_in_a_field_value_is_no_error() {
        // RFC 9110 §5.5: bytes 0x80-0xFF are allowed in values; they match nothing of ours.
        let r = parse(
            b"GET / HTTP/1.1\r\nHost: h\r\nIf-None-Match: \"caf\xe9\"\r\nAccept: text/\xff\r\n\r\n",
            8192,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.if_none_match.as_deref(), Some("\"caf\u{fffd}\""));
        assert!(r.keep_alive);
        // Where the value is checked (Host) or forwarded as is (Authorization, Origin): 400.
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: h\xe9\r\n\r\n"), 400);
        assert_eq!(
            status(b"GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Basic \xe9\r\n\r\n"),
            400
        );
        assert_eq!(
            status(b"GET / HTTP/1.1\r\nHost: h\r\nOrigin: http://\xe9\r\n\r\n"),
            400
        );
        // UTF-8 goes through as it came.
        let r = parse(
            "GET / HTTP/1.1\r\nHost: h\r\nOrigin: http://\u{e9}.example\r\n\r\n".as_bytes(),
            8192,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.origin.as_deref(), Some("http://\u{e9}.example"));
    }

    #[test]
    fn asterisk_form_is_for_options_only() {
        let r = parse(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", 8192)
            .unwrap()
            .unwrap();
        assert!(r.is_asterisk());
        assert_eq!((r.path.as_str(), r.query), ("*", None));
        for req in [
            &b"GET * HTTP/1.1\r\nHost: h\r\n\r\n"[..],
            b"HEAD * HTTP/1.1\r\nHost: h\r\n\r\n",
            b"options * HTTP/1.1\r\nHost: h\r\n\r\n",
            b"OPTIONS *x HTTP/1.1\r\nHost: h\r\n\r\n",
        ] {
            assert_eq!(status(req), 400, "{}", String::from_utf8_lossy(req));
        }
    }

    #[test]
    fn list_fields_on_several_lines_are_one_list() {
        let r = parse(
            b"GET /a HTTP/1.1\r\nHost: h\r\nIf-None-Match: \"a\"\r\nif-none-match: \"b\", \"c\"\r\n\
              Accept: text/html\r\nAccept: application/json\r\n\
              Access-Control-Request-Headers: range\r\nAccess-Control-Request-Headers: x-a\r\n\r\n",
            8192,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.if_none_match.as_deref(), Some("\"a\", \"b\", \"c\""));
        assert_eq!(r.accept.as_deref(), Some("text/html, application/json"));
        assert_eq!(
            r.access_control_request_headers.as_deref(),
            Some("range, x-a")
        );
    }

    #[test]
    fn validators_cors_and_negotiation_fields() {
        let r = parse(
            b"OPTIONS /a HTTP/1.1\r\nHost: h\r\nIf-Match: \"a\"\r\nIf-Match: \"b\"\r\n\
              If-Unmodified-Since: x\r\nOrigin: https://o.example\r\n\
              Access-Control-Request-Method: GET\r\nAccess-Control-Request-Headers: range\r\n\
              Accept: application/json\r\nAccept-Encoding: br\r\nAccept-Encoding: gzip\r\n\
              authorization: Bearer  t0k \r\n\r\n",
            8192,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.method, Method::Other("OPTIONS".into()));
        assert_eq!(r.if_match.as_deref(), Some("\"a\", \"b\""));
        assert_eq!(r.if_unmodified_since.as_deref(), Some("x"));
        assert_eq!(r.origin.as_deref(), Some("https://o.example"));
        assert_eq!(r.access_control_request_method.as_deref(), Some("GET"));
        assert_eq!(r.access_control_request_headers.as_deref(), Some("range"));
        assert_eq!(r.accept.as_deref(), Some("application/json"));
        assert_eq!(r.accept_encoding.as_deref(), Some("br, gzip"));
        assert_eq!(r.authorization.as_deref(), Some("Bearer  t0k"));
        let two = b"GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer a\r\n\
              Authorization: Bearer b\r\n\r\n";
        assert!(matches!(
            parse(two, 8192),
            Err(ParseError::Bad("more than one Authorization"))
        ));
        assert_eq!(r.query, None);
    }
}
