//! Validators and conditional requests (RFC 9110 §13): the ETag we send, If-None-Match /
//! If-Modified-Since -> 304, and If-Range deciding whether a Range applies. Pure functions.

use super::date;

/// The entity tag of a file: `"<mtime hex>-<size hex>"`, the same shape nginx uses.
pub fn etag(mtime: i64, size: u64) -> String {
    format!("\"{:x}-{:x}\"", mtime.max(0), size)
}

fn opaque(tag: &str) -> &str {
    tag.trim().strip_prefix("W/").unwrap_or(tag.trim())
}

/// True when the client's copy is current (answer 304). If-None-Match takes precedence; it
/// matches with the weak comparison (`W/` ignored) or `*`.
pub fn not_modified(
    if_none_match: Option<&str>,
    if_modified_since: Option<&str>,
    etag: &str,
    mtime: i64,
) -> bool {
    if let Some(inm) = if_none_match {
        return inm.trim() == "*" || inm.split(',').any(|t| opaque(t) == etag);
    }
    match if_modified_since.and_then(date::parse) {
        Some(since) => mtime <= since,
        None => false,
    }
}

/// True when a Range header may be honoured: no If-Range, or If-Range names the current
/// strong ETag, or exactly the current Last-Modified date.
pub fn range_allowed(if_range: Option<&str>, etag: &str, mtime: i64) -> bool {
    match if_range.map(str::trim) {
        None => true,
        Some(v) if v.starts_with('"') => v == etag,
        Some(v) if v.starts_with("W/") => false,
        Some(v) => date::parse(v) == Some(mtime),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_match_and_modified_since() {
        let tag = etag(784_111_777, 10);
        assert!(not_modified(Some(&tag), None, &tag, 784_111_777));
        assert!(not_modified(
            Some(&format!("\"x\", W/{tag}")),
            None,
            &tag,
            1
        ));
        assert!(not_modified(Some("*"), None, &tag, 1));
        assert!(!not_modified(
            Some("\"other\""),
            Some("Sun, 06 Nov 1994 08:49:37 GMT"),
            &tag,
            1
        ));
        assert!(not_modified(
            None,
            Some("Sun, 06 Nov 1994 08:49:37 GMT"),
            &tag,
            784_111_777
        ));
        assert!(!not_modified(
            None,
            Some("Sun, 06 Nov 1994 08:49:36 GMT"),
            &tag,
            784_111_777
        ));
        assert!(!not_modified(None, Some("garbage"), &tag, 1));
    }

    #[test]
    fn if_range() {
        let tag = etag(5, 10);
        assert!(range_allowed(None, &tag, 5));
        assert!(range_allowed(Some(&tag), &tag, 5));
        assert!(!range_allowed(Some("\"old\""), &tag, 5));
        assert!(!range_allowed(Some(&format!("W/{tag}")), &tag, 5));
    }
}
