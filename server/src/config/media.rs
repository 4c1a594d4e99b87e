//! `http.media_types`: file extensions the built-in media type table lacks or should answer
//! differently (`key = "application/pgp-keys"`). Validation only; the merged table is
//! `http::mime::MediaTypes`.

use super::errors::Errors;
use super::headers::{is_field_value, is_token};
use std::collections::{BTreeMap, HashSet};

/// `type/subtype` followed by optional `; parameters`.
fn valid_media_type(t: &str) -> bool {
    let essence = t.split(';').next().unwrap_or("").trim();
    matches!(essence.split_once('/'), Some((a, b)) if is_token(a) && is_token(b))
        && is_field_value(t)
}

pub(super) fn check(e: &mut Errors, field: &str, m: &BTreeMap<String, String>) {
    let mut seen = HashSet::new();
    for (ext, t) in m {
        // A key that is not letters and digits (not an extension) is shown quoted, as
        // `media_headers` keys are.
        let bare = !ext.is_empty() && ext.bytes().all(|b| b.is_ascii_alphanumeric());
        let f = if bare {
            format!("{field}.{ext}")
        } else {
            format!("{field}.{ext:?}")
        };
        if ext.is_empty() || ext.len() > 16 || !ext.bytes().all(|b| b.is_ascii_alphanumeric()) {
            e.push(
                f.clone(),
                format!(
                    "{ext:?} must be a file extension without the dot (1-16 letters or digits)"
                ),
            );
        }
        if !seen.insert(ext.to_ascii_lowercase()) {
            e.push(
                f.clone(),
                format!("{ext} is listed twice (extensions are case-insensitive)"),
            );
        }
        if !valid_media_type(t) {
            e.push(
                f,
                format!("{t:?} is not a media type (type/subtype[; parameters])"),
            );
        }
    }
}
