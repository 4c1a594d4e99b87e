//! What to answer for a request, decided without sockets or files: the method (405 unless GET or
//! HEAD; `OPTIONS` on a CORS route is 204, `OPTIONS *` 200), the preconditions (RFC 9110 §13.2.2: 412, 304,
//! If-Range), the Range (206 with one range or multipart/byteranges, 416), and every head: the
//! configured headers of the route and media type, CORS, `Vary`, `Content-Encoding` of a
//! precompressed sibling, the 301 of a directory without its slash and a directory listing.
//! [`crate::serve`] carries a plan out for files; a cached object goes through the same planner.
//!
//! Pure code: it must not do I/O nor know where the representation lives; the caller passes the
//! clock.

use super::conditional::{self, Conditions, Current, FileVersion, Precondition};
use super::cors::{self, CorsHeaders, CorsRequest};
use super::headers::HeaderPolicy;
use super::mime::MediaTypes;
use super::multipart::{self, Multipart};
use super::parse::{Method, Request};
use super::range::{self, ByteRange, Ranges};
use super::response::{self, Head, HttpDate};
use super::{encoding, listing, uri};
use crate::config::{Config, Cors, Precompressed};

/// The extra header of a 405.
pub const ALLOW: (&str, &str) = ("Allow", "GET, HEAD");
/// `Allow` on a route with CORS, where `OPTIONS` is answered, and of `OPTIONS *` (the server's
/// methods: GET and HEAD everywhere, OPTIONS for `*` and on CORS routes).
const ALLOW_CORS: &str = "GET, HEAD, OPTIONS";

/// The HTTP options of one route, compiled at start.
#[derive(Debug, Clone, Default)]
struct RoutePolicy {
    cors: Option<Cors>,
    precompressed: Vec<Precompressed>,
    listing: bool,
}

/// Everything the planner needs from the configuration, built once at start.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    headers: HeaderPolicy,
    media: MediaTypes,
    max_ranges: usize,
    etag_inode: bool,
    /// Indexed like `Config::routes` (see `Resolved::route`).
    routes: Vec<RoutePolicy>,
    /// `http.listing_max_entries`.
    pub listing_max_entries: usize,
}

/// What a route adds to an answer it did not make from a file (a cache route's stored or
/// passed-through object): its configured headers (route, media type) and its CORS headers.
/// They replace the object's own fields of the same names (and, on a route with CORS, every
/// `Access-Control-*` field of the object's); `vary` joins the object's `Vary`.
#[derive(Debug, Default)]
pub struct Decoration {
    pub lines: Vec<(String, String)>,
    pub vary: Vec<&'static str>,
    /// The route has CORS configured: its policy, not the object's, answers browsers.
    pub cors: bool,
}

impl Decoration {
    /// Is the object's field `name` replaced (left out) by this decoration?
    pub fn replaces(&self, name: &str) -> bool {
        self.lines.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
            || (self.cors
                && name
                    .get(..15)
                    .is_some_and(|p| p.eq_ignore_ascii_case("access-control-")))
    }
}

/// The file (or cached object) a response is about, as far as HTTP cares.
#[derive(Debug, Clone, Copy)]
pub struct Entity<'a> {
    pub version: FileVersion,
    /// The name the media type comes from (for a precompressed sibling: the original's).
    pub name: &'a [u8],
    /// The sibling's coding, when a precompressed sibling is served.
    pub coding: Option<Precompressed>,
}

/// How a planned response's body is sent after its head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// Head only (HEAD, 304, empty file, or a small response whose body is in the head bytes).
    None,
    /// Bytes `start..start + len` of the representation.
    Range { start: u64, len: u64 },
    /// Part heads and ranges, then the closing delimiter.
    Multipart(Multipart),
}

impl Body {
    /// The first byte range the body reads (what admission looks at).
    pub fn first_range(&self) -> Option<(u64, u64)> {
        match self {
            Body::None => None,
            Body::Range { start, len } => Some((*start, *len)),
            Body::Multipart(m) => m.parts().first().map(|p| (p.range.start, p.range.len())),
        }
    }
}

/// A planned response.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// The response head (for small responses the whole response).
    pub head: Vec<u8>,
    pub body: Body,
}

/// The first decision, before anything is opened.
#[derive(Debug, Clone)]
pub enum Start {
    /// GET (false) or HEAD (true): route, open and [`Policy::plan`].
    Serve { head_only: bool },
    /// Answered without a file (405, or 204 for OPTIONS on a CORS route).
    Done(Answer),
}

/// The Content-Types of a listing (chosen by `Accept` / `?format=`).
const HTML: &str = "text/html; charset=utf-8";
const JSON: &str = "application/json";

impl Policy {
    pub fn new(cfg: &Config) -> Policy {
        Policy {
            headers: HeaderPolicy::new(cfg),
            media: MediaTypes::new(&cfg.http.media_types),
            max_ranges: cfg.http.max_ranges,
            etag_inode: cfg.http.etag_inode,
            routes: cfg
                .routes
                .iter()
                .map(|r| RoutePolicy {
                    cors: r.http.cors.clone(),
                    precompressed: r.http.precompressed.clone(),
                    listing: r.http.listing,
                })
                .collect(),
            listing_max_entries: cfg.http.listing_max_entries,
        }
    }

    fn route(&self, route: Option<usize>) -> Option<&RoutePolicy> {
        route.and_then(|i| self.routes.get(i))
    }

    /// Does the route list directories without an index file?
    pub fn lists(&self, route: usize) -> bool {
        self.route(Some(route)).is_some_and(|r| r.listing)
    }

    /// The precompressed codings to try for `req` on `route`, best first (empty: serve the file).
    pub fn codings(&self, route: usize, req: &Request) -> Vec<Precompressed> {
        match self.route(Some(route)) {
            Some(r) if !r.precompressed.is_empty() => {
                encoding::acceptable(req.accept_encoding.as_deref(), &r.precompressed)
            }
            _ => Vec::new(),
        }
    }

    /// Method check. `route`: the request's route when it has one (only `OPTIONS` needs it).
    /// `OPTIONS *` (asterisk-form, RFC 9112 §3.2.4) asks about the server itself: 200 with
    /// `Allow` and no content (RFC 9110 §9.3.7), whatever the routes.
    pub fn start(&self, req: &Request, route: Option<usize>, keep_alive: bool) -> Start {
        if req.is_asterisk() && req.method.as_str() == "OPTIONS" {
            let head = Head::new(200)
                .header("Allow", ALLOW_CORS)
                .header("Content-Length", 0u64);
            return Start::Done(Answer::small(200, head.finish(keep_alive)));
        }
        let head_only = match &req.method {
            Method::Get => false,
            Method::Head => true,
            Method::Other(m) => {
                let cors = self.route(route).and_then(|r| r.cors.as_ref());
                // A 405 of a CORS or precompressed route says what every response of the
                // route says (its CORS headers, `Vary`).
                return Start::Done(match cors {
                    Some(c) if m == "OPTIONS" => self.options(route, c, req, keep_alive),
                    Some(_) => Answer::small(
                        405,
                        self.error(route, req, 405, keep_alive, &[("Allow", ALLOW_CORS)]),
                    ),
                    None => Answer::small(405, self.error(route, req, 405, keep_alive, &[ALLOW])),
                });
            }
        };
        Start::Serve { head_only }
    }

    /// 204 for `OPTIONS` on a CORS route: a preflight's CORS headers, or just `Allow`.
    fn options(&self, route: Option<usize>, c: &Cors, req: &Request, keep_alive: bool) -> Answer {
        let creq = cors_request(req);
        let ch = if creq.is_preflight() {
            cors::preflight(c, &creq)
        } else {
            cors::actual(c, &creq)
        };
        let mut head = Head::new(204).header("Allow", ALLOW_CORS);
        for (n, v) in &ch.headers {
            head = head.header(n, v);
        }
        let coded = self
            .route(route)
            .is_some_and(|r| !r.precompressed.is_empty());
        head = vary(head, &ch.vary, coded, false);
        Answer::small(204, head.finish(keep_alive))
    }

    /// CORS headers of an ordinary response on `route` (and whether it varies by coding).
    fn decoration(&self, route: Option<usize>, req: &Request) -> (CorsHeaders, bool) {
        let r = self.route(route);
        let ch = match r.and_then(|r| r.cors.as_ref()) {
            Some(c) => cors::actual(c, &cors_request(req)),
            None => CorsHeaders::default(),
        };
        (ch, r.is_some_and(|r| !r.precompressed.is_empty()))
    }

    /// The [`Decoration`] of an object answered on `route` (a cache route), named `name` (the
    /// request path: its extension picks media-type headers) with `content_type`.
    pub fn object_decoration(
        &self,
        route: usize,
        req: &Request,
        name: &[u8],
        content_type: Option<&str>,
        now: i64,
    ) -> Decoration {
        let mut lines = Vec::new();
        if self.headers.applies(Some(route)) {
            let ext = super::mime::extension(name);
            let eff = self
                .headers
                .for_response(Some(route), ext.as_deref(), content_type);
            lines.extend(eff.lines(now).into_iter().map(|(n, v)| (n.to_string(), v)));
        }
        let (ch, _) = self.decoration(Some(route), req);
        lines.extend(ch.headers.into_iter().map(|(n, v)| (n.to_string(), v)));
        Decoration {
            lines,
            vary: ch.vary,
            cors: self.route(Some(route)).is_some_and(|r| r.cors.is_some()),
        }
    }

    /// A small error response (404, 403, 500, 503...) after routing: with the route's CORS
    /// headers, so a cross-origin script can read the status. `extra`: e.g. `Retry-After`.
    pub fn error(
        &self,
        route: Option<usize>,
        req: &Request,
        status: u16,
        keep_alive: bool,
        extra: &[(&str, &str)],
    ) -> Vec<u8> {
        let (ch, coded) = self.decoration(route, req);
        let vary_value = vary_value(&ch.vary, coded, false);
        let mut all: Vec<(&str, &str)> = extra.to_vec();
        all.extend(ch.headers.iter().map(|(n, v)| (*n, v.as_str())));
        if let Some(v) = &vary_value {
            all.push(("Vary", v));
        }
        response::error(status, req.method == Method::Head, keep_alive, &all)
    }

    /// Add the configured headers (route, media type), CORS and `Vary` to a head.
    #[allow(clippy::too_many_arguments)]
    fn decorate(
        &self,
        mut head: Head,
        route: Option<usize>,
        req: &Request,
        name: Option<&[u8]>,
        content_type: Option<&str>,
        configured: bool,
        vary_accept: bool,
        now: i64,
    ) -> Head {
        if configured && self.headers.applies(route) {
            let ext = name.and_then(super::mime::extension);
            let eff = self
                .headers
                .for_response(route, ext.as_deref(), content_type);
            for (n, v) in eff.lines(now) {
                head = head.header(n, v);
            }
        }
        let (ch, coded) = self.decoration(route, req);
        for (n, v) in &ch.headers {
            head = head.header(n, v);
        }
        vary(head, &ch.vary, coded, vary_accept)
    }

    /// 301 to the directory's path plus `/` (query kept); `path`: the decoded, normalized path.
    pub fn redirect(
        &self,
        route: Option<usize>,
        req: &Request,
        path: &[u8],
        keep_alive: bool,
        now: i64,
    ) -> Answer {
        let location = uri::directory_location(path, req.query.as_deref());
        let body = "301 Moved Permanently\n";
        let head = Head::new(301)
            .header("Location", &location)
            .header("Content-Type", "text/plain; charset=utf-8")
            .header("Content-Length", body.len());
        let head = self.decorate(head, route, req, None, None, true, false, now);
        let mut out = head.finish(keep_alive);
        if req.method != Method::Head {
            out.extend_from_slice(body.as_bytes());
        }
        Answer::small(301, out)
    }

    /// 200 with a directory listing (HTML or JSON by `Accept`/`?format=`).
    #[allow(clippy::too_many_arguments)]
    pub fn listing(
        &self,
        route: usize,
        req: &Request,
        path: &[u8],
        entries: Vec<listing::Entry>,
        truncated: bool,
        keep_alive: bool,
        now: i64,
    ) -> Answer {
        let json = listing::wants_json(req.accept.as_deref(), req.query.as_deref());
        // A listing has no validator: only `*` can match it (RFC 9110 §13.1.1, §13.1.2). The
        // 304 carries the fields its 200 would (§15.4.5); both vary as the 200 does.
        let star = |v: &Option<String>| v.as_deref().map(|v| v.trim() == "*");
        let status = if star(&req.if_match) == Some(false) {
            Some(412)
        } else if star(&req.if_none_match) == Some(true) {
            Some(304)
        } else {
            None
        };
        if let Some(status) = status {
            let mut head = Head::new(status);
            if status == 412 {
                head = head.header("Content-Length", 0usize);
            }
            let ctype = if json { JSON } else { HTML };
            let configured = status == 304;
            let head = self.decorate(
                head,
                Some(route),
                req,
                None,
                Some(ctype),
                configured,
                true,
                now,
            );
            return Answer::small(status, head.finish(keep_alive));
        }
        let entries = listing::arrange(entries);
        let mut dir = path.to_vec();
        if !dir.ends_with(b"/") {
            dir.push(b'/');
        }
        let (ctype, body) = if json {
            (JSON, listing::json(&dir, &entries, truncated))
        } else {
            (HTML, listing::html(&dir, &entries, truncated))
        };
        let head = Head::new(200)
            .header("Content-Type", ctype)
            .header("Content-Length", body.len());
        let head = self.decorate(head, Some(route), req, None, Some(ctype), true, true, now);
        let mut out = head.finish(keep_alive);
        if req.method != Method::Head {
            out.extend_from_slice(body.as_bytes());
        }
        Answer::small(200, out)
    }

    /// Plan the answer to `req` (GET, or HEAD when `head_only`) on `route` for `entity`.
    pub fn plan(
        &self,
        req: &Request,
        route: Option<usize>,
        head_only: bool,
        entity: &Entity<'_>,
        keep_alive: bool,
        now: i64,
    ) -> Answer {
        let v = entity.version;
        let etag = conditional::entity_tag(v, self.etag_inode, entity.coding.map(|c| c.token()));
        // Never later than the Date (RFC 9110 §8.8.2.1); the heads below are dated `now` too.
        let lm = conditional::last_modified(v.mtime, now);
        let last_modified = HttpDate(lm);
        let content_type = self.media.for_name(entity.name);
        let conds = Conditions {
            if_match: req.if_match.as_deref(),
            if_unmodified_since: req.if_unmodified_since.as_deref(),
            if_none_match: req.if_none_match.as_deref(),
            if_modified_since: req.if_modified_since.as_deref(),
            if_range: req.if_range.as_deref(),
        };
        let current = Current::of_file(&etag, lm, now);
        let decorate = |head: Head, configured: bool| {
            self.decorate(
                head,
                route,
                req,
                Some(entity.name),
                Some(content_type),
                configured,
                false,
                now,
            )
        };
        let range_ok = match conditional::evaluate(&conds, &current, true, now) {
            Precondition::Failed => {
                let body = "412 Precondition Failed\n";
                let head = Head::dated(412, now)
                    .header("Content-Type", "text/plain; charset=utf-8")
                    .header("Content-Length", body.len());
                let mut out = decorate(head, false).finish(keep_alive);
                if !head_only {
                    out.extend_from_slice(body.as_bytes());
                }
                return Answer::small(412, out);
            }
            Precondition::NotModified => {
                let head = Head::dated(304, now)
                    .header("ETag", &etag)
                    .header("Last-Modified", last_modified);
                return Answer::small(304, decorate(head, true).finish(keep_alive));
            }
            Precondition::Proceed { range } => range,
        };
        let ranges = if range_ok {
            range::plan(req.range.as_deref(), v.size, self.max_ranges)
        } else {
            Ranges::Full
        };
        let accept_ranges = if self.max_ranges == 0 {
            "none"
        } else {
            "bytes"
        };
        let (status, length, ctype, body) = match ranges {
            Ranges::Unsatisfiable => {
                let body = "416 Range Not Satisfiable\n";
                let head = Head::dated(416, now)
                    .header("Content-Type", "text/plain; charset=utf-8")
                    .header("Content-Length", body.len())
                    .header("Content-Range", format_args!("bytes */{}", v.size));
                let mut out = decorate(head, false).finish(keep_alive);
                if !head_only {
                    out.extend_from_slice(body.as_bytes());
                }
                return Answer::small(416, out);
            }
            Ranges::Full => (
                200,
                v.size,
                None,
                Body::Range {
                    start: 0,
                    len: v.size,
                },
            ),
            Ranges::One(r) => (
                206,
                r.len(),
                None,
                Body::Range {
                    start: r.start,
                    len: r.len(),
                },
            ),
            Ranges::Many(rs) => {
                let m = Multipart::new(&rs, v.size, content_type, multipart::new_boundary());
                (
                    206,
                    m.content_length(),
                    Some(m.content_type()),
                    Body::Multipart(m),
                )
            }
        };
        let mut head = Head::dated(status, now)
            .header("Content-Type", ctype.as_deref().unwrap_or(content_type))
            .header("Content-Length", length);
        if let Some(c) = entity.coding {
            head = head.header("Content-Encoding", c.token());
        }
        head = head
            .header("Last-Modified", last_modified)
            .header("ETag", &etag)
            .header("Accept-Ranges", accept_ranges);
        if let Body::Range { start, len } = body {
            if status == 206 {
                let r = ByteRange {
                    start,
                    end: start + len - 1,
                };
                head = head.header(
                    "Content-Range",
                    format_args!("bytes {}-{}/{}", r.start, r.end, v.size),
                );
            }
        }
        let head = decorate(head, true).finish(keep_alive);
        let body = if head_only || length == 0 {
            Body::None
        } else {
            body
        };
        Answer { status, head, body }
    }
}

impl Answer {
    fn small(status: u16, head: Vec<u8>) -> Answer {
        Answer {
            status,
            head,
            body: Body::None,
        }
    }
}

fn cors_request(req: &Request) -> CorsRequest<'_> {
    CorsRequest {
        origin: req.origin.as_deref(),
        request_method: req.access_control_request_method.as_deref(),
        request_headers: req.access_control_request_headers.as_deref(),
    }
}

/// The `Vary` value: CORS's fields, `Accept-Encoding` on precompressed routes, `Accept` for
/// listings; None when the response varies by nothing.
fn vary_value(cors: &[&str], coded: bool, accept: bool) -> Option<String> {
    let mut v: Vec<&str> = cors.to_vec();
    if coded {
        v.push("Accept-Encoding");
    }
    if accept {
        v.push("Accept");
    }
    (!v.is_empty()).then(|| v.join(", "))
}

fn vary(head: Head, cors: &[&str], coded: bool, accept: bool) -> Head {
    match vary_value(cors, coded, accept) {
        Some(v) => head.header("Vary", v),
        None => head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::parse;

    const MTIME: i64 = 784_111_777;
    const NOW: i64 = 1_700_000_000;

    fn policy(extra: &str) -> Policy {
        let mut c = Config::from_toml(&format!(
            "[[volumes]]\nname = \"a\"\npath = \"/a\"\n{extra}"
        ))
        .expect("parses");
        c.normalize();
        c.validate().expect("valid");
        Policy::new(&c)
    }

    fn req(method: &str, headers: &[&str]) -> Request {
        let mut head = format!("{method} /f.m4s HTTP/1.1\r\nHost: x\r\n");
        for h in headers {
            head.push_str(h);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        parse::parse(head.as_bytes(), 8192).unwrap().unwrap()
    }

    fn entity(size: u64) -> Entity<'static> {
        Entity {
            version: FileVersion {
                ino: 7,
                mtime: MTIME,
                mtime_nsec: 0,
                size,
            },
            name: b"v/f.m4s",
            coding: None,
        }
    }

    fn text(a: &Answer) -> String {
        String::from_utf8_lossy(&a.head).into_owned()
    }

    fn answer(p: &Policy, r: &Request, size: u64) -> Answer {
        let head_only = r.method == Method::Head;
        p.plan(r, Some(0), head_only, &entity(size), true, NOW)
    }

    #[test]
    fn plain_get_is_unchanged_by_default() {
        let p = policy("");
        let a = answer(&p, &req("GET", &[]), 10);
        assert_eq!(
            (a.status, a.body.clone()),
            (200, Body::Range { start: 0, len: 10 })
        );
        let h = text(&a);
        for line in [
            "Content-Type: video/iso.segment",
            "Content-Length: 10",
            "ETag: \"7-2ebc98a1-a\"",
            "Accept-Ranges: bytes",
            "Last-Modified: Sun, 06 Nov 1994 08:49:37 GMT",
        ] {
            assert!(h.contains(&format!("\r\n{line}\r\n")), "{line} in {h}");
        }
        for absent in ["Cache-Control", "Vary", "Access-Control", "Expires"] {
            assert!(!h.contains(absent), "{absent} in {h}");
        }
        let a = answer(&p, &req("HEAD", &[]), 10);
        assert_eq!((a.status, a.body), (200, Body::None));
    }

    #[test]
    fn methods_and_options() {
        let p = policy("");
        let Start::Done(a) = p.start(&req("OPTIONS", &[]), Some(0), true) else {
            panic!("answered")
        };
        assert_eq!(a.status, 405);
        assert!(text(&a).contains("Allow: GET, HEAD\r\n"));
        let p = policy(
            "[[routes]]\nprefix = \"/\"\nvolume = \"a\"\n[routes.http.cors]\nallow_origins = [\"*\"]\n",
        );
        let r = req(
            "OPTIONS",
            &[
                "Origin: https://o.example",
                "Access-Control-Request-Method: GET",
            ],
        );
        let Start::Done(a) = p.start(&r, Some(0), true) else {
            panic!("answered")
        };
        assert_eq!(a.status, 204);
        let h = text(&a);
        assert!(h.contains("Access-Control-Allow-Origin: *\r\n"), "{h}");
        assert!(
            h.contains("Access-Control-Allow-Methods: GET, HEAD\r\n"),
            "{h}"
        );
        assert!(!h.contains("Content-Length"), "{h}");
        assert!(matches!(
            p.start(&req("GET", &[]), Some(0), true),
            Start::Serve { head_only: false }
        ));
    }

    #[test]
    fn options_asterisk_is_about_the_server() {
        let r = parse::parse(b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 8192)
            .unwrap()
            .unwrap();
        for p in [
            policy(""),
            policy(
                "[[routes]]\nprefix = \"/\"\nvolume = \"a\"\n[routes.http.cors]\nallow_origins = [\"*\"]\n",
            ),
        ] {
            let Start::Done(a) = p.start(&r, None, true) else {
                panic!("answered")
            };
            assert_eq!((a.status, &a.body), (200, &Body::None));
            let h = text(&a);
            assert!(h.contains("\r\nAllow: GET, HEAD, OPTIONS\r\n"), "{h}");
            assert!(h.contains("\r\nContent-Length: 0\r\n"), "{h}");
            assert!(h.ends_with("\r\n\r\n"), "{h}");
        }
    }

    #[test]
    fn preconditions_and_their_heads() {
        let p = policy("[http.media_headers.m4s]\ncache_control = \"max-age=60\"\n");
        let a = answer(&p, &req("GET", &["If-Match: \"x\""]), 10);
        assert_eq!((a.status, &a.body), (412, &Body::None));
        assert!(text(&a).ends_with("412 Precondition Failed\n"));
        let a = answer(&p, &req("GET", &["If-None-Match: \"7-2ebc98a1-a\""]), 10);
        assert_eq!(a.status, 304);
        let h = text(&a);
        assert!(h.contains("Cache-Control: max-age=60\r\n"), "{h}");
        assert!(!h.contains("Content-Length"), "{h}");
    }

    #[test]
    fn last_modified_is_never_later_than_the_date() {
        let p = policy("");
        let header = |a: &Answer, name: &str| {
            let h = text(a);
            let start = h.find(&format!("\r\n{name}: ")).expect(name) + name.len() + 4;
            h[start..start + h[start..].find("\r\n").unwrap()].to_string()
        };
        let future = Entity {
            version: FileVersion {
                mtime: NOW + 86_400,
                ..entity(10).version
            },
            ..entity(10)
        };
        let now = crate::http::date::format(NOW);
        for r in [
            req("GET", &[]),
            req("GET", &["Range: bytes=0-1"]),
            req("HEAD", &[]),
        ] {
            let a = p.plan(&r, Some(0), r.method == Method::Head, &future, true, NOW);
            assert_eq!(header(&a, "Date"), now);
            assert_eq!(header(&a, "Last-Modified"), now);
        }
        // The date sent, echoed in the same second: 304 with the same dates; the ETag still
        // names the real mtime (2ebc98a1 + 1 day), so it revalidates in any second.
        let ims = format!("If-Modified-Since: {now}");
        let a = p.plan(&req("GET", &[&ims]), Some(0), false, &future, true, NOW);
        assert_eq!(a.status, 304);
        assert_eq!(header(&a, "Last-Modified"), now);
        let tag = header(&a, "ETag");
        let a = p.plan(&req("GET", &[&ims]), Some(0), false, &future, true, NOW + 1);
        assert_eq!(a.status, 200);
        let inm = format!("If-None-Match: {tag}");
        let a = p.plan(&req("GET", &[&inm]), Some(0), false, &future, true, NOW + 1);
        assert_eq!(a.status, 304);
        // If-Range with the date sent: not a strong validator, the whole file.
        let a = p.plan(
            &req("GET", &["Range: bytes=0-1", &format!("If-Range: {now}")]),
            Some(0),
            false,
            &future,
            true,
            NOW,
        );
        assert_eq!(a.status, 200);
        // A past mtime is sent as it is, and If-Range with it applies the range.
        let a = answer(&p, &req("GET", &[]), 10);
        assert_eq!(
            header(&a, "Last-Modified"),
            crate::http::date::format(MTIME)
        );
        let ir = format!("If-Range: {}", crate::http::date::format(MTIME));
        assert_eq!(
            answer(&p, &req("GET", &["Range: bytes=0-1", &ir]), 10).status,
            206
        );
    }

    #[test]
    fn multipart_length_is_exact() {
        let p = policy("");
        let a = answer(&p, &req("GET", &["Range: bytes=0-1,5-6"]), 10);
        assert_eq!(a.status, 206);
        let Body::Multipart(m) = &a.body else {
            panic!("multipart")
        };
        let h = text(&a);
        assert!(
            h.contains(&format!("Content-Length: {}\r\n", m.content_length())),
            "{h}"
        );
        assert!(
            h.contains(&format!("Content-Type: {}\r\n", m.content_type())),
            "{h}"
        );
        assert!(!h.contains("Content-Range"), "{h}");
        assert_eq!(a.body.first_range(), Some((0, 2)));
        let p = policy("[http]\nmax_ranges = 0\n");
        let a = answer(&p, &req("GET", &["Range: bytes=0-1"]), 10);
        assert_eq!(a.status, 200);
        assert!(text(&a).contains("Accept-Ranges: none\r\n"));
    }

    #[test]
    fn precompressed_and_vary() {
        let p = policy(
            "[[routes]]\nprefix = \"/\"\nvolume = \"a\"\n[routes.http]\nprecompressed = [\"gzip\"]\n\
             [routes.http.cors]\nallow_origins = [\"https://o.example\"]\n",
        );
        let r = req(
            "GET",
            &["Accept-Encoding: gzip", "Origin: https://o.example"],
        );
        assert_eq!(p.codings(0, &r), vec![Precompressed::Gzip]);
        let e = Entity {
            coding: Some(Precompressed::Gzip),
            ..entity(4)
        };
        let a = p.plan(&r, Some(0), false, &e, true, NOW);
        let h = text(&a);
        for line in [
            "Content-Encoding: gzip",
            "ETag: \"7-2ebc98a1-4-gzip\"",
            "Vary: Origin, Accept-Encoding",
            "Access-Control-Allow-Origin: https://o.example",
            "Content-Type: video/iso.segment",
        ] {
            assert!(h.contains(&format!("\r\n{line}\r\n")), "{line} in {h}");
        }
        let a = p.error(Some(0), &r, 404, true, &[]);
        let h = String::from_utf8_lossy(&a).into_owned();
        assert!(
            h.contains("Access-Control-Allow-Origin: https://o.example\r\n"),
            "{h}"
        );
    }

    #[test]
    fn redirect_keeps_the_query() {
        let p = policy("");
        let mut r = req("GET", &[]);
        r.query = Some("a=1".into());
        let a = p.redirect(Some(0), &r, b"/v", true, NOW);
        assert_eq!(a.status, 301);
        assert!(text(&a).contains("Location: /v/?a=1\r\n"));
    }
}
