//! Building URI references the server sends: percent-encoding a decoded path for a `Location`
//! or a listing link, and the trailing-slash redirect of a directory. The encoded form never
//! starts with `//` and never contains `\`, so a reference we send cannot leave the site.

use std::fmt::Write;

/// Characters kept as they are in a path segment (RFC 3986 unreserved plus a few sub-delims
/// that are safe in paths); everything else is %XX.
fn keep(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b)
}

/// Percent-encode one path segment (a `/` in it is encoded too).
pub fn encode_segment(seg: &[u8]) -> String {
    let mut out = String::with_capacity(seg.len());
    for &b in seg {
        if keep(b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Percent-encode a decoded absolute path, keeping `/` separators and dropping empty segments
/// (so the result starts with exactly one `/`).
pub fn encode_path(path: &[u8]) -> String {
    let mut out = String::with_capacity(path.len() + 1);
    for seg in path.split(|&b| b == b'/').filter(|s| !s.is_empty()) {
        out.push('/');
        out.push_str(&encode_segment(seg));
    }
    if out.is_empty() || path.ends_with(b"/") {
        out.push('/');
    }
    out
}

/// The `Location` of the 301 for a directory requested without its trailing slash: the
/// decoded, normalized request path plus `/`, with the query kept (a relative reference, as
/// RFC 9110 §10.2.2 allows).
pub fn directory_location(path: &[u8], query: Option<&str>) -> String {
    let mut loc = encode_path(path);
    if !loc.ends_with('/') {
        loc.push('/');
    }
    if let Some(q) = query {
        loc.push('?');
        // As received, but a Location is a URI: bytes one may not hold are encoded.
        loc.push_str(&encode_target(q));
    }
    loc
}

/// `target` with every byte a request line may not carry as it is (controls aside, which the
/// request parser refuses: `"`, `<`, `>`, `\`, `^`, `` ` ``, `{`, `|`, `}`, `[`, `]` (only for
/// an IP literal's host, RFC 3986 §3.2.2) and non-ASCII)
/// percent-encoded, as browsers send them (RFC 9112 §3.2: a target is a URI); what an origin
/// decodes is the same. (Also a query the server sends back in a `Location`.)
pub fn encode_target(target: &str) -> std::borrow::Cow<'_, str> {
    let keep = |b: u8| b.is_ascii_graphic() && !b"\"<>\\^`{|}[]".contains(&b);
    if target.bytes().all(keep) {
        return std::borrow::Cow::Borrowed(target);
    }
    let mut out = String::with_capacity(target.len() + 16);
    for b in target.bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_paths() {
        assert_eq!(encode_path(b"/a/b c/%.mp4"), "/a/b%20c/%25.mp4");
        assert_eq!(encode_path(b"/"), "/");
        assert_eq!(encode_path(b""), "/");
        assert_eq!(encode_path(b"/d/"), "/d/");
        assert_eq!(encode_path("/é".as_bytes()), "/%C3%A9");
        assert_eq!(encode_segment(b"a/b?#"), "a%2Fb%3F%23");
    }

    #[test]
    fn directory_redirects_stay_on_site() {
        assert_eq!(directory_location(b"/media/show", None), "/media/show/");
        assert_eq!(
            directory_location(b"/media/show", Some("a=1&b")),
            "/media/show/?a=1&b"
        );
        // A query's bytes a URI may not hold, encoded (what is encoded already stays).
        assert_eq!(
            directory_location(b"/d", Some("<x>`{|}^&y=%20\"")),
            "/d/?%3Cx%3E%60%7B%7C%7D%5E&y=%20%22"
        );
        // Would be a scheme-relative URL (another host) if sent as received.
        assert_eq!(
            directory_location(b"//evil.example", None),
            "/evil.example/"
        );
        assert_eq!(
            directory_location(b"/\\evil.example", None),
            "/%5Cevil.example/"
        );
        assert_eq!(directory_location(b"/a\r\nb", None), "/a%0D%0Ab/");
    }
}
