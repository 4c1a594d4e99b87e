//! The media-delivery part of the ContentServer API (issue 13): response headers by route and
//! media type, CORS, precompressed siblings, listings, ranges and ETags. The same options as the
//! server's `[http]` and `[routes.http]` (`content_server::config`), in Kubernetes' camelCase;
//! `builders::configmap` maps them onto the server's types and the server's validation checks
//! them (field paths mapped back by `validation::spec_path`).
//!
//! Owns the API shape only; it must not render or validate anything itself.

use super::default_true;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A coding with a precompressed sibling: the server's own type (`br`, `zstd`, `gzip`).
pub use content_server::config::Precompressed;

/// Server-wide HTTP options (flattened into `spec.server`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerHttpSpec {
    /// Most ranges served per request; more get the whole file. 1 = no multipart, 0 = no ranges.
    #[serde(default = "default_max_ranges")]
    #[schemars(range(min = 0, max = 1024))]
    pub max_ranges: u32,
    /// Put the inode in the ETag (a replaced file with the same size and mtime never matches).
    #[serde(default = "default_true")]
    pub etag_inode: bool,
    /// Most entries a directory listing shows.
    #[serde(default = "default_listing_max_entries")]
    #[schemars(range(min = 1, max = 100000))]
    pub listing_max_entries: u32,
    /// Extension (without the dot) -> Content-Type, added to or overriding the built-in table.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub media_types: BTreeMap<String, String>,
    /// Response headers by extension (`m4s`), media type (`video/mp2t`) or `type/*`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub media_headers: BTreeMap<String, HeaderRuleSpec>,
}

fn default_max_ranges() -> u32 {
    content_server::config::Http::default().max_ranges as u32
}
fn default_listing_max_entries() -> u32 {
    content_server::config::Http::default().listing_max_entries as u32
}

impl Default for ServerHttpSpec {
    fn default() -> Self {
        ServerHttpSpec {
            max_ranges: default_max_ranges(),
            etag_inode: true,
            listing_max_entries: default_listing_max_entries(),
            media_types: BTreeMap::new(),
            media_headers: BTreeMap::new(),
        }
    }
}

/// Headers added to successful responses (200, 206, 304) and redirects.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct HeaderRuleSpec {
    /// `Cache-Control` value, e.g. `public, max-age=31536000, immutable`.
    pub cache_control: Option<String>,
    /// `Expires: now + N seconds`.
    #[schemars(range(min = 0, max = 315360000))]
    pub expires_secs: Option<u64>,
    /// Extra headers (name -> value), e.g. security headers.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub add: BTreeMap<String, String>,
}

/// The HTTP policy of one route.
#[serde_with::skip_serializing_none]
#[serde_with::apply(
    Vec => #[serde(skip_serializing_if = "Vec::is_empty")],
    BTreeMap => #[serde(skip_serializing_if = "BTreeMap::is_empty")],
)]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct RouteHttpSpec {
    /// Headers for every successful response of the route.
    pub headers: HeaderRuleSpec,
    /// Per extension or media type, on top of `headers` and `spec.server.mediaHeaders`.
    pub media_headers: BTreeMap<String, HeaderRuleSpec>,
    /// CORS; absent = off (`OPTIONS` is 405).
    pub cors: Option<CorsSpec>,
    /// Serve FILE.br / FILE.zst / FILE.gz in this order to clients accepting the coding.
    #[schemars(length(max = 3))]
    pub precompressed: Vec<Precompressed>,
    /// List directories that have no index file (HTML or JSON).
    pub listing: bool,
}

/// CORS policy of a route; omitted lists take the server's defaults.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CorsSpec {
    /// `["*"]` or origins `scheme://host[:port]` (`https://*.example.com` for subdomains).
    #[schemars(length(min = 1))]
    pub allow_origins: Vec<String>,
    /// Default `["GET", "HEAD"]`.
    pub allow_methods: Option<Vec<String>>,
    /// Default `["Range"]`; `["*"]` allows any.
    pub allow_headers: Option<Vec<String>>,
    /// Default `["Content-Length", "Content-Range", "Accept-Ranges", "ETag"]`.
    pub expose_headers: Option<Vec<String>>,
    /// `Access-Control-Max-Age`; absent = not sent.
    #[schemars(range(min = 0, max = 86400))]
    pub max_age_secs: Option<u64>,
    /// `Access-Control-Allow-Credentials: true` (not with `*`).
    #[serde(default)]
    pub allow_credentials: bool,
}
