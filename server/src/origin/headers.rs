//! Reading an origin response head: `Content-Range` of a 206, `Content-Length`, and the
//! validators that identify one version of an object (ETag, Last-Modified, total size).
//! Pure functions over `http::HeaderMap`; whether an answer may be stored is
//! `crate::http::freshness`, not here.

use http::header::{CONTENT_LENGTH, CONTENT_RANGE, ETAG, LAST_MODIFIED};
use http::HeaderMap;

/// `Content-Range: bytes START-END/TOTAL` (END inclusive; TOTAL `*` = unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentRange {
    pub start: u64,
    pub end: u64,
    pub total: Option<u64>,
}

impl ContentRange {
    /// Bytes in the range.
    pub fn len(&self) -> u64 {
        self.end - self.start + 1
    }
    /// Never true (a range holds at least one byte); for clippy's `len` convention.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// Parse a satisfied `Content-Range` value; None when malformed, unsatisfied (`bytes */N`) or
/// inconsistent (end before start, end past the total, a length past u64).
pub fn parse_content_range(v: &str) -> Option<ContentRange> {
    let rest = v.trim().strip_prefix("bytes")?;
    let rest = rest.strip_prefix(|c: char| c == ' ')?.trim_start();
    let (span, total) = rest.split_once('/')?;
    let (s, e) = span.trim().split_once('-')?;
    let start: u64 = digits(s)?;
    let end: u64 = digits(e)?;
    let total = match total.trim() {
        "*" => None,
        t => Some(digits(t)?),
    };
    // (The last byte may not be u64::MAX: the range's length would not be countable.)
    if end < start || end == u64::MAX || total.is_some_and(|t| end >= t) {
        return None;
    }
    Some(ContentRange { start, end, total })
}

/// The one value of a field that must appear once (RFC 9110 §5.3): None when it is missing,
/// not text, or repeated with another value (which one is meant would be a guess; two equal
/// lines are one value).
fn singleton(headers: &HeaderMap, name: http::header::HeaderName) -> Option<&str> {
    let mut all = headers.get_all(name).iter();
    let first = all.next()?.to_str().ok()?;
    all.all(|v| v.to_str().is_ok_and(|v| v.trim() == first.trim()))
        .then_some(first)
}

/// The total size from an unsatisfied range answer (`Content-Range: bytes */N` of a 416).
pub fn unsatisfied_total(headers: &HeaderMap) -> Option<u64> {
    let v = singleton(headers, CONTENT_RANGE)?;
    digits(v.trim().strip_prefix("bytes */")?)
}

fn digits(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `Content-Length`, when present and a plain number.
pub fn content_length(headers: &HeaderMap) -> Option<u64> {
    digits(headers.get(CONTENT_LENGTH)?.to_str().ok()?)
}

/// `Content-Range` of the head, parsed (None when two lines disagree).
pub fn content_range(headers: &HeaderMap) -> Option<ContentRange> {
    parse_content_range(singleton(headers, CONTENT_RANGE)?)
}

/// What identifies one version of an object at the origin.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Validators {
    /// The ETag as sent (with quotes, `W/` kept).
    pub etag: Option<String>,
    /// Last-Modified as seconds since the epoch.
    pub last_modified: Option<i64>,
    /// The whole object's size: Content-Range's total for a 206, Content-Length for a 200.
    pub size: Option<u64>,
}

impl Validators {
    /// Read the validators of a response with `status`.
    pub fn of(status: u16, headers: &HeaderMap) -> Validators {
        let etag = headers
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        let last_modified = headers
            .get(LAST_MODIFIED)
            .and_then(|v| v.to_str().ok())
            .and_then(crate::http::date::parse);
        let size = match status {
            206 => content_range(headers).and_then(|r| r.total),
            200 => content_length(headers),
            _ => None,
        };
        Validators {
            etag,
            last_modified,
            size,
        }
    }

    /// True when `other` can be the same version as `self`: no validator both have differs,
    /// and they share at least one (an ETag, or Last-Modified, or the size).
    pub fn same_version(&self, other: &Validators) -> bool {
        fn agree<T: PartialEq>(a: &Option<T>, b: &Option<T>) -> Option<bool> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a == b),
                _ => None,
            }
        }
        let checks = [
            agree(&self.etag, &other.etag),
            agree(&self.last_modified, &other.last_modified),
            agree(&self.size, &other.size),
        ];
        checks.iter().all(|c| *c != Some(false)) && checks.contains(&Some(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, v.parse().unwrap());
        }
        m
    }

    #[test]
    fn content_range_forms() {
        assert_eq!(
            parse_content_range("bytes 0-1023/4096"),
            Some(ContentRange {
                start: 0,
                end: 1023,
                total: Some(4096)
            })
        );
        assert_eq!(
            parse_content_range("bytes 10-19/*"),
            Some(ContentRange {
                start: 10,
                end: 19,
                total: None
            })
        );
        assert_eq!(parse_content_range("bytes 10-19/*").unwrap().len(), 10);
        for bad in [
            "bytes */4096",
            "bytes 5-4/10",
            "bytes 0-10/10",
            "items 0-1/2",
            "bytes 0-/10",
            "bytes -1-2/10",
            "bytes0-1/2",
            // A length past u64 (it wrapped to 0: an empty body taken for the whole span).
            "bytes 0-18446744073709551615/*",
            "",
        ] {
            assert_eq!(parse_content_range(bad), None, "{bad}");
        }
        assert_eq!(
            unsatisfied_total(&h(&[("content-range", "bytes */77")])),
            Some(77)
        );
    }

    #[test]
    fn validators_of_200_and_206() {
        let a = Validators::of(
            200,
            &h(&[
                ("etag", "\"v1\""),
                ("last-modified", "Sun, 06 Nov 1994 08:49:37 GMT"),
                ("content-length", "4096"),
            ]),
        );
        assert_eq!(a.etag.as_deref(), Some("\"v1\""));
        assert_eq!(a.last_modified, Some(784_111_777));
        assert_eq!(a.size, Some(4096));
        let b = Validators::of(
            206,
            &h(&[
                ("etag", "\"v1\""),
                ("content-range", "bytes 0-99/4096"),
                ("content-length", "100"),
            ]),
        );
        assert_eq!(b.size, Some(4096));
        assert!(a.same_version(&b));
        let c = Validators {
            etag: Some("\"v2\"".into()),
            ..b.clone()
        };
        assert!(!a.same_version(&c), "a changed ETag is a new version");
        let d = Validators {
            size: Some(5000),
            ..b.clone()
        };
        assert!(!a.same_version(&d), "a changed size is a new version");
        assert!(
            !Validators::default().same_version(&Validators::default()),
            "nothing to compare"
        );
    }
}
