//! The HTTP policy of one route (`[routes.http]`): response headers for everything under the
//! prefix and per media type, CORS, precompressed siblings and directory listings. Types,
//! defaults and validation only; the response planner (`http/`) applies them.

use super::cors::{self, Cors};
use super::errors::Errors;
use super::headers::{self, HeaderRule};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

/// What the server does for requests of one route beyond serving the bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteHttp {
    /// Headers for every successful response of the route.
    #[serde(default, skip_serializing_if = "HeaderRule::is_empty")]
    pub headers: HeaderRule,
    /// Per media type or extension, on top of `headers` and of `http.media_headers`
    /// (key: `m3u8`, `video/mp2t` or `video/*`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub media_headers: BTreeMap<String, HeaderRule>,
    /// CORS policy; absent = no CORS headers and `OPTIONS` is 405.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors: Option<Cors>,
    /// Serve `FILE.br` / `FILE.zst` / `FILE.gz` (first acceptable in this order) to clients
    /// accepting that encoding. Empty = off.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub precompressed: Vec<Precompressed>,
    /// Directories without an index file are listed (HTML, or JSON for `Accept:
    /// application/json` or `?format=json`) instead of 404.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub listing: bool,
}

impl RouteHttp {
    pub fn is_default(&self) -> bool {
        self == &RouteHttp::default()
    }
}

/// A content coding with a precompressed sibling file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Precompressed {
    /// Brotli, `FILE.br`.
    Br,
    /// Zstandard, `FILE.zst`.
    Zstd,
    /// gzip, `FILE.gz`.
    Gzip,
}

impl Precompressed {
    /// The `Content-Encoding` / `Accept-Encoding` token.
    pub fn token(self) -> &'static str {
        match self {
            Precompressed::Br => "br",
            Precompressed::Zstd => "zstd",
            Precompressed::Gzip => "gzip",
        }
    }

    /// The sibling's file name suffix.
    pub fn suffix(self) -> &'static str {
        match self {
            Precompressed::Br => ".br",
            Precompressed::Zstd => ".zst",
            Precompressed::Gzip => ".gz",
        }
    }
}

pub(super) fn check(e: &mut Errors, field: &str, h: &RouteHttp) {
    headers::check_rule(e, &format!("{field}.headers"), &h.headers);
    headers::check_media_headers(e, &format!("{field}.media_headers"), &h.media_headers);
    if let Some(c) = &h.cors {
        cors::check(e, &format!("{field}.cors"), c);
    }
    let mut seen = HashSet::new();
    for (i, p) in h.precompressed.iter().enumerate() {
        if !seen.insert(*p) {
            e.push(
                format!("{field}.precompressed[{i}]"),
                format!("{} is listed twice", p.token()),
            );
        }
    }
}
