//! What to answer for a file, decided without sockets or files: the method (405 unless GET or
//! HEAD), the conditionals (If-None-Match / If-Modified-Since -> 304, If-Range), the Range
//! (206, 416), and the response head of each outcome. [`crate::serve`] carries a plan out.
//!
//! Pure code: it must not do I/O nor know where the file lives.

use super::conditional;
use super::parse::{Method, Request};
use super::range::{self, RangeOutcome};
use super::response::{self, Head};

/// The extra header of a 405.
pub const ALLOW: (&str, &str) = ("Allow", "GET, HEAD");

/// Whether `method` is served: `Some(head_only)` for GET (false) and HEAD (true), `None` for
/// anything else (405 with [`ALLOW`]).
pub fn head_only(method: &Method) -> Option<bool> {
    match method {
        Method::Get => Some(false),
        Method::Head => Some(true),
        Method::Other(_) => None,
    }
}

/// The file a response is about, as far as HTTP cares.
#[derive(Debug, Clone, Copy)]
pub struct Entity<'a> {
    pub size: u64,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
    /// [`conditional::etag`] of the file.
    pub etag: &'a str,
    /// The `Last-Modified` value ([`super::date::format`] of `mtime`).
    pub last_modified: &'a str,
    pub content_type: &'a str,
}

/// What to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// 304: the client's copy is current; head only.
    NotModified,
    /// 416 with `Content-Range: bytes */size`.
    Unsatisfiable,
    /// 200 (whole file) or 206 (one range): bytes `start..start + len`; `body` is false for HEAD
    /// and for an empty range (head only).
    Send {
        status: u16,
        start: u64,
        len: u64,
        body: bool,
    },
}

/// Plan the answer to `req` (GET, or HEAD when `head_only`) for `file`. If-None-Match /
/// If-Modified-Since come first (RFC 9110 §13.2.2); a Range applies only when If-Range allows.
pub fn plan(req: &Request, head_only: bool, file: &Entity<'_>) -> Plan {
    let (etag, mtime) = (file.etag, file.mtime);
    if conditional::not_modified(
        req.if_none_match.as_deref(),
        req.if_modified_since.as_deref(),
        etag,
        mtime,
    ) {
        return Plan::NotModified;
    }
    let ranged = if conditional::range_allowed(req.if_range.as_deref(), etag, mtime) {
        range::evaluate(req.range.as_deref(), file.size)
    } else {
        RangeOutcome::Full
    };
    let (status, start, len) = match ranged {
        RangeOutcome::Full => (200, 0, file.size),
        RangeOutcome::Partial { start, end } => (206, start, end - start + 1),
        RangeOutcome::Unsatisfiable => return Plan::Unsatisfiable,
    };
    Plan::Send {
        status,
        start,
        len,
        body: !head_only && len > 0,
    }
}

impl Plan {
    /// The status code.
    pub fn status(&self) -> u16 {
        match self {
            Plan::NotModified => 304,
            Plan::Unsatisfiable => 416,
            Plan::Send { status, .. } => *status,
        }
    }

    /// The bytes of the response head (for a 416 the whole small response, its body omitted for
    /// HEAD).
    pub fn render(&self, file: &Entity<'_>, head_only: bool, keep_alive: bool) -> Vec<u8> {
        match *self {
            Plan::NotModified => Head::new(304)
                .header("ETag", file.etag)
                .header("Last-Modified", file.last_modified)
                .finish(keep_alive),
            Plan::Unsatisfiable => {
                let cr = format!("bytes */{}", file.size);
                response::error(416, head_only, keep_alive, &[("Content-Range", &cr)])
            }
            Plan::Send {
                status, start, len, ..
            } => {
                let mut head = Head::new(status)
                    .header("Content-Type", file.content_type)
                    .header("Content-Length", len)
                    .header("Last-Modified", file.last_modified)
                    .header("ETag", file.etag)
                    .header("Accept-Ranges", "bytes");
                if status == 206 {
                    head = head.header(
                        "Content-Range",
                        format_args!("bytes {}-{}/{}", start, start + len - 1, file.size),
                    );
                }
                head.finish(keep_alive)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{date, parse};

    /// 1994-11-06 08:49:37 UTC, the RFC's example date.
    const MTIME: i64 = 784_111_777;
    const DATE: &str = "Sun, 06 Nov 1994 08:49:37 GMT";

    /// Parse a request head with the given extra header lines, as the connection does.
    fn req(method: &str, headers: &[&str]) -> Request {
        let mut head = format!("{method} /f.txt HTTP/1.1\r\nHost: x\r\n");
        for h in headers {
            head.push_str(h);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        parse::parse(head.as_bytes(), 8192).unwrap().unwrap()
    }

    struct File {
        size: u64,
        etag: String,
        last_modified: String,
    }

    fn file(size: u64) -> File {
        File {
            size,
            etag: conditional::etag(MTIME, size),
            last_modified: date::format(MTIME),
        }
    }

    impl File {
        fn entity(&self) -> Entity<'_> {
            Entity {
                size: self.size,
                mtime: MTIME,
                etag: &self.etag,
                last_modified: &self.last_modified,
                content_type: "text/plain",
            }
        }
    }

    /// Plan and render `req` for a file of `size` bytes; the head as text.
    fn answer(r: &Request, size: u64) -> (Plan, String) {
        let f = file(size);
        let head_only = head_only(&r.method).expect("GET or HEAD");
        let p = plan(r, head_only, &f.entity());
        let out = p.render(&f.entity(), head_only, true);
        (p, String::from_utf8(out).unwrap())
    }

    /// Assert `head` starts with `status_line` and has each of `lines` as a header line.
    fn assert_head(head: &str, status_line: &str, lines: &[&str]) {
        assert!(
            head.starts_with(&format!("{status_line}\r\n")),
            "{status_line} in {head}"
        );
        for line in lines {
            assert!(
                head.contains(&format!("\r\n{line}\r\n")),
                "{line} in {head}"
            );
        }
    }

    fn send(status: u16, start: u64, len: u64, body: bool) -> Plan {
        Plan::Send {
            status,
            start,
            len,
            body,
        }
    }

    #[test]
    fn only_get_and_head_are_served() {
        assert_eq!(head_only(&req("GET", &[]).method), Some(false));
        assert_eq!(head_only(&req("HEAD", &[]).method), Some(true));
        assert_eq!(head_only(&req("POST", &[]).method), None);
        assert_eq!(head_only(&req("DELETE", &[]).method), None);
        let out = response::error(405, false, true, &[ALLOW]);
        let text = String::from_utf8(out).unwrap();
        assert_head(
            &text,
            "HTTP/1.1 405 Method Not Allowed",
            &["Allow: GET, HEAD"],
        );
    }

    #[test]
    fn plain_get_sends_the_whole_file_with_validators() {
        let (p, head) = answer(&req("GET", &[]), 10);
        assert_eq!(p, send(200, 0, 10, true));
        assert_eq!(p.status(), 200);
        assert_head(
            &head,
            "HTTP/1.1 200 OK",
            &[
                "Content-Type: text/plain",
                "Content-Length: 10",
                &format!("Last-Modified: {DATE}"),
                &format!("ETag: {}", conditional::etag(MTIME, 10)),
                "Accept-Ranges: bytes",
                "Connection: keep-alive",
            ],
        );
        assert!(!head.contains("Content-Range"), "{head}");
        assert!(head.ends_with("\r\n\r\n"));
    }

    #[test]
    fn head_has_the_get_head_and_no_body() {
        let (get, get_head) = answer(&req("GET", &[]), 10);
        let (head, head_head) = answer(&req("HEAD", &[]), 10);
        assert_eq!(head, send(200, 0, 10, false));
        assert_eq!(get, send(200, 0, 10, true));
        // Same headers (the Date line may differ by a second).
        let strip = |h: &str| -> Vec<String> {
            h.lines()
                .filter(|l| !l.starts_with("Date:"))
                .map(str::to_owned)
                .collect()
        };
        assert_eq!(strip(&get_head), strip(&head_head));
        // HEAD with a range: 206 head only.
        let (p, _) = answer(&req("HEAD", &["Range: bytes=0-3"]), 10);
        assert_eq!(p, send(206, 0, 4, false));
    }

    #[test]
    fn empty_file_is_200_without_body() {
        let (p, head) = answer(&req("GET", &[]), 0);
        assert_eq!(p, send(200, 0, 0, false));
        assert!(head.contains("\r\nContent-Length: 0\r\n"), "{head}");
    }

    #[test]
    fn if_none_match_and_if_modified_since_give_304() {
        let tag = conditional::etag(MTIME, 10);
        let inm = format!("If-None-Match: {tag}");
        let (p, head) = answer(&req("GET", &[&inm]), 10);
        assert_eq!(p, Plan::NotModified);
        assert_eq!(p.status(), 304);
        assert_head(
            &head,
            "HTTP/1.1 304 Not Modified",
            &[&format!("ETag: {tag}"), &format!("Last-Modified: {DATE}")],
        );
        assert!(!head.contains("Content-Length"), "{head}");
        let ims = format!("If-Modified-Since: {DATE}");
        assert_eq!(answer(&req("GET", &[&ims]), 10).0, Plan::NotModified);
        assert_eq!(answer(&req("HEAD", &[&ims]), 10).0, Plan::NotModified);
        // 304 wins over a range.
        assert_eq!(
            answer(&req("GET", &[&inm, "Range: bytes=0-1"]), 10).0,
            Plan::NotModified
        );
        // Another tag: If-None-Match decides alone (an old If-Modified-Since is not consulted).
        assert_eq!(
            answer(&req("GET", &["If-None-Match: \"other\"", &ims]), 10).0,
            send(200, 0, 10, true)
        );
        // Modified after the client's date: full answer.
        let old = "If-Modified-Since: Sun, 06 Nov 1994 08:49:36 GMT";
        assert_eq!(answer(&req("GET", &[old]), 10).0, send(200, 0, 10, true));
    }

    #[test]
    fn one_range_gives_206_with_content_range() {
        let (p, head) = answer(&req("GET", &["Range: bytes=2-5"]), 10);
        assert_eq!(p, send(206, 2, 4, true));
        assert_head(
            &head,
            "HTTP/1.1 206 Partial Content",
            &["Content-Length: 4", "Content-Range: bytes 2-5/10"],
        );
        assert_eq!(
            answer(&req("GET", &["Range: bytes=-3"]), 10).0,
            send(206, 7, 3, true)
        );
        assert_eq!(
            answer(&req("GET", &["Range: bytes=8-"]), 10).0,
            send(206, 8, 2, true)
        );
        // Several ranges: the whole file.
        assert_eq!(
            answer(&req("GET", &["Range: bytes=0-1,4-5"]), 10).0,
            send(200, 0, 10, true)
        );
    }

    #[test]
    fn unsatisfiable_range_gives_416_with_the_size() {
        let (p, out) = answer(&req("GET", &["Range: bytes=10-"]), 10);
        assert_eq!(p, Plan::Unsatisfiable);
        assert_eq!(p.status(), 416);
        assert_head(
            &out,
            "HTTP/1.1 416 Range Not Satisfiable",
            &["Content-Range: bytes */10"],
        );
        assert!(
            out.ends_with("\r\n\r\n416 Range Not Satisfiable\n"),
            "{out}"
        );
        // HEAD: the same head, no body.
        let (_, out) = answer(&req("HEAD", &["Range: bytes=10-"]), 10);
        assert!(out.ends_with("\r\n\r\n"), "{out}");
    }

    #[test]
    fn if_range_applies_the_range_only_for_the_current_validator() {
        let tag = conditional::etag(MTIME, 10);
        let current = format!("If-Range: {tag}");
        assert_eq!(
            answer(&req("GET", &["Range: bytes=0-3", &current]), 10).0,
            send(206, 0, 4, true)
        );
        let by_date = format!("If-Range: {DATE}");
        assert_eq!(
            answer(&req("GET", &["Range: bytes=0-3", &by_date]), 10).0,
            send(206, 0, 4, true)
        );
        for stale in [
            "If-Range: \"old\"".to_string(),
            format!("If-Range: W/{tag}"),
            "If-Range: Sun, 06 Nov 1994 08:49:36 GMT".to_string(),
        ] {
            assert_eq!(
                answer(&req("GET", &["Range: bytes=0-3", &stale]), 10).0,
                send(200, 0, 10, true),
                "{stale}"
            );
        }
        // A stale If-Range also turns an unsatisfiable range into the whole file.
        assert_eq!(
            answer(&req("GET", &["Range: bytes=50-", "If-Range: \"old\""]), 10).0,
            send(200, 0, 10, true)
        );
    }

    #[test]
    fn connection_header_follows_keep_alive() {
        let f = file(3);
        let p = plan(&req("GET", &[]), false, &f.entity());
        let close = String::from_utf8(p.render(&f.entity(), false, false)).unwrap();
        assert!(close.ends_with("\r\nConnection: close\r\n\r\n"), "{close}");
    }
}
