//! The media-delivery options of a ContentServer (issue 13) reach the server's own config:
//! `examples/hls-library.yaml` rendered field by field, defaults left out, and the server's
//! validation reported on spec paths.

mod support;

use content_operator::builders::configmap::server_config;
use content_operator::crd::{CorsSpec, HeaderRuleSpec, RouteHttpSpec};
use content_operator::validation::spec_path;
use content_server::config::Precompressed;
use support::*;

#[test]
fn hls_library_example_renders_into_the_server_config() {
    let cs = example("hls-library.yaml");
    let cfg = server_config(&cs.spec);
    assert_eq!(cfg.http.max_ranges, 16);
    assert!(cfg.http.etag_inode);
    assert_eq!(cfg.http.media_types["key"], "application/octet-stream");
    assert_eq!(
        cfg.http.media_headers["m4s"].cache_control.as_deref(),
        Some("public, max-age=31536000, immutable")
    );
    let root = &cfg.routes[0].http;
    assert_eq!(
        root.precompressed,
        vec![Precompressed::Br, Precompressed::Gzip]
    );
    assert!(root.listing);
    assert_eq!(root.headers.add["X-Content-Type-Options"], "nosniff");
    let cors = root.cors.as_ref().expect("cors");
    assert_eq!(
        cors.allow_origins,
        vec!["https://player.example", "https://*.player.example"]
    );
    assert_eq!(cors.max_age_secs, Some(600));
    // Lists the spec leaves out take the server's defaults.
    assert_eq!(cors.allow_methods, vec!["GET", "HEAD"]);
    assert_eq!(cors.allow_headers, vec!["Range"]);
    assert_eq!(
        cors.expose_headers,
        vec!["Content-Length", "Content-Range", "Accept-Ranges", "ETag"]
    );
    let live = &cfg.routes[1].http;
    assert_eq!(
        live.media_headers["m3u8"].cache_control.as_deref(),
        Some("public, max-age=1")
    );
    assert!(live.cors.as_ref().expect("cors").any_origin());
    // The rendered TOML is what the server reads back.
    let back = rendered_back(&cs.spec);
    assert_eq!(back.routes[0].http, cfg.routes[0].http);
}

#[test]
fn without_http_options_nothing_is_rendered() {
    assert_rendered_without(
        "minimal.yaml",
        &[
            "media_headers",
            "media_types",
            "[routes.http",
            "cors",
            "precompressed",
        ],
    );
}

#[test]
fn server_rules_are_reported_on_spec_paths() {
    let mut cs = example("minimal.yaml");
    cs.spec.server.http.max_ranges = 5000;
    cs.spec.server.http.media_headers.insert(
        "m4s".into(),
        HeaderRuleSpec {
            cache_control: Some("bad\nvalue".into()),
            ..Default::default()
        },
    );
    cs.spec.routes = vec![serde_json::from_value(serde_json::json!({
        "prefix": "/", "volume": "content"
    }))
    .expect("route")];
    cs.spec.routes[0].http = Some(RouteHttpSpec {
        cors: Some(CorsSpec {
            allow_origins: vec!["*".into()],
            allow_credentials: true,
            ..Default::default()
        }),
        ..Default::default()
    });
    assert_invalid_fields(
        &cs.spec,
        &[
            "spec.server.maxRanges",
            "spec.server.mediaHeaders.m4s.cacheControl",
            "spec.routes[0].http.cors.allowCredentials",
        ],
    );
    assert_eq!(
        spec_path("routes[2].http.cors.allow_origins[0]"),
        "spec.routes[2].http.cors.allowOrigins[0]"
    );
    assert_eq!(
        spec_path("http.listing_max_entries"),
        "spec.server.listingMaxEntries"
    );
}
