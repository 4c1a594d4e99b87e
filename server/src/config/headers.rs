//! Response headers set from the configuration (nginx `expires` and `add_header`): one
//! [`HeaderRule`] per route (`routes[].http.headers`) and per media type or extension
//! (`http.media_headers`, `routes[].http.media_headers`), and their validation. How rules are
//! merged and applied to a response lives in `http::headers`; this module only defines them.

use super::errors::Errors;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

/// Headers added to successful responses (200, 206, 304) and redirects of the files it applies to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeaderRule {
    /// `Cache-Control` value, e.g. `public, max-age=31536000, immutable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<String>,
    /// Send `Expires: <now + N seconds>` (nginx `expires N`); 0 = already expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_secs: Option<u64>,
    /// Extra headers (name -> value), e.g. security headers. Names the server sets itself
    /// (framing, validators, `Vary`, CORS) are refused: use the dedicated options.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub add: BTreeMap<String, String>,
}

impl HeaderRule {
    pub fn is_empty(&self) -> bool {
        self.cache_control.is_none() && self.expires_secs.is_none() && self.add.is_empty()
    }
}

/// Header names a rule may not set: the server computes them per response.
const RESERVED: &[&str] = &[
    "accept-ranges",
    "age",
    "allow",
    "connection",
    "content-encoding",
    "content-length",
    "content-range",
    "content-type",
    "date",
    "etag",
    "keep-alive",
    "last-modified",
    "location",
    "proxy-connection",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "vary",
    "cache-control",
    "expires",
];

/// RFC 9110 §5.6.2 token characters.
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A field value we can send as is: visible ASCII, spaces and tabs, no leading/trailing space.
pub(crate) fn is_field_value(s: &str) -> bool {
    s == s.trim() && s.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
}

pub(super) fn check_rule(e: &mut Errors, field: &str, r: &HeaderRule) {
    if let Some(cc) = &r.cache_control {
        if cc.is_empty() || !is_field_value(cc) {
            e.push(
                format!("{field}.cache_control"),
                format!("{cc:?} must be a non-empty header value of visible ASCII"),
            );
        }
    }
    if r.expires_secs.is_some_and(|s| s > 10 * 365 * 86_400) {
        e.push(
            format!("{field}.expires_secs"),
            "must be at most 315360000 (ten years)",
        );
    }
    let mut seen = HashSet::new();
    for (name, value) in &r.add {
        let f = format!("{field}.add.{name}");
        let lower = name.to_ascii_lowercase();
        if !is_token(name) {
            e.push(f.clone(), format!("{name:?} is not a header name"));
        } else if lower == "x-cache" {
            // A second X-Cache beside the cache status would make it unreadable.
            e.push(
                f.clone(),
                format!("{name} is set by the server (the cache status of a cache route)"),
            );
        } else if RESERVED.contains(&lower.as_str()) || lower.starts_with("access-control-") {
            e.push(
                f.clone(),
                format!("{name} is set by the server (use cache_control, expires_secs, cors or precompressed)"),
            );
        }
        if !seen.insert(lower) {
            e.push(
                f.clone(),
                format!("{name} is listed twice (names are case-insensitive)"),
            );
        }
        if !is_field_value(value) {
            e.push(
                f,
                format!("{value:?} must be visible ASCII without control characters"),
            );
        }
    }
}

/// A `media_headers` key: a file extension (`m4s`) or a media type (`video/mp2t`, `video/*`).
pub(super) fn check_media_key(e: &mut Errors, field: &str, key: &str) {
    let ok = match key.split_once('/') {
        Some((t, s)) => is_token(t) && t != "*" && (s == "*" || is_token(s)),
        None => {
            !key.is_empty() && key.len() <= 16 && key.bytes().all(|b| b.is_ascii_alphanumeric())
        }
    };
    if !ok {
        e.push(
            field.to_string(),
            format!("{key:?} must be a file extension without the dot (m4s) or a media type (video/mp2t, video/*)"),
        );
    }
}

pub(super) fn check_media_headers(e: &mut Errors, field: &str, m: &BTreeMap<String, HeaderRule>) {
    let mut seen = HashSet::new();
    for (key, rule) in m {
        let f = if key.bytes().all(|b| b.is_ascii_alphanumeric()) {
            format!("{field}.{key}")
        } else {
            format!("{field}.{key:?}")
        };
        check_media_key(e, &f, key);
        if !seen.insert(key.to_ascii_lowercase()) {
            e.push(
                f.clone(),
                format!("{key} is listed twice (keys are case-insensitive)"),
            );
        }
        check_rule(e, &f, rule);
    }
}
