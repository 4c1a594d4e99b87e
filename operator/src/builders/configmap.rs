//! Renders the server configuration of a ContentServer and the ConfigMap holding it.
//!
//! The file format is `content_server::config::Config`, rendered with `Config::to_toml()`: this
//! module maps spec fields onto that type and never writes TOML by hand. Both listeners bind
//! `*` (every IPv4 and IPv6 address: one dual-stack socket, IPv4 alone on a node without IPv6),
//! so kubelet probes, Services and Prometheus reach the pod in IPv4, IPv6-only and dual-stack
//! clusters alike.

use crate::builders::child_meta;
use crate::crd::{ContentServer, ContentServerSpec, HeaderRuleSpec, LogFormatSpec, RouteHttpSpec};
use content_server::config::{
    Config, ConfigError, Cors, HeaderRule, LogFormat, Pool, Route, RouteHttp, SplitTarget, Volume,
};
use k8s_openapi::api::core::v1::ConfigMap;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Directory the ConfigMap is mounted at.
pub const CONFIG_DIR: &str = "/etc/content-server";
/// Key (file name) of the config in the ConfigMap.
pub const CONFIG_KEY: &str = "config.toml";

/// The rendered config and its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedConfig {
    pub toml: String,
    /// First 16 hex digits of the SHA-256 of `toml`.
    pub hash: String,
}

/// The server's configuration for a spec (not yet validated; see `validation.rs`).
pub fn server_config(spec: &ContentServerSpec) -> Config {
    let mut cfg = Config::for_root("/");
    let s = &spec.server;
    if let Some(l) = cfg.listeners.first_mut() {
        l.address = "*".into();
        l.port = u16::try_from(s.port).unwrap_or(0);
        l.backlog = s.backlog;
        l.congestion_control = s.congestion_control.clone();
    }
    cfg.workers = s.workers as usize;
    cfg.limits.max_connections = s.limits.max_connections as usize;
    cfg.limits.keepalive_timeout_secs = u64::from(s.limits.keepalive_timeout_secs);
    cfg.limits.header_read_timeout_secs = u64::from(s.limits.header_read_timeout_secs);
    cfg.limits.max_header_bytes = s.limits.max_header_bytes as usize;
    cfg.limits.send_timeout_secs = u64::from(s.limits.send_timeout_secs);
    cfg.limits.sendfile_max_chunk = usize::try_from(s.sendfile_max_chunk).unwrap_or(usize::MAX);
    cfg.http.index = s.index.clone();
    cfg.http.max_ranges = s.http.max_ranges as usize;
    cfg.http.etag_inode = s.http.etag_inode;
    cfg.http.listing_max_entries = s.http.listing_max_entries as usize;
    cfg.http.media_types = s.http.media_types.clone();
    cfg.http.media_headers = header_rules(&s.http.media_headers);
    cfg.admin.listen = format!("*:{}", spec.metrics.port);
    cfg.logging.format = match s.log_format {
        LogFormatSpec::Text => LogFormat::Text,
        LogFormatSpec::Json => LogFormat::Json,
    };
    cfg.logging.level = s.log_level.clone();
    cfg.logging.access_log = s.access_log;
    cfg.shutdown_timeout_secs = u64::from(s.shutdown_timeout_secs);
    cfg.volumes = spec
        .volumes
        .iter()
        .map(|v| Volume {
            name: v.name.clone(),
            path: ContentServerSpec::mount_path(v).into(),
            offload: v.pool.offload,
            pool: Pool {
                threads: v.pool.threads as usize,
                max_queue: v.pool.max_queue as usize,
            },
            cache: None,
        })
        .collect();
    cfg.routes = spec
        .routes
        .iter()
        .map(|r| Route {
            prefix: r.prefix.clone(),
            volume: r.volume.clone(),
            split: r
                .split
                .iter()
                .map(|t| SplitTarget {
                    volume: t.volume.clone(),
                    percent: t.percent,
                })
                .collect(),
            strip_prefix: r.strip_prefix,
            http: r.http.as_ref().map(route_http).unwrap_or_default(),
            origin: None,
            cache: None,
        })
        .collect();
    crate::builders::cache::apply(spec, &mut cfg);
    cfg
}

fn header_rule(h: &HeaderRuleSpec) -> HeaderRule {
    HeaderRule {
        cache_control: h.cache_control.clone(),
        expires_secs: h.expires_secs,
        add: h.add.clone(),
    }
}

fn header_rules(m: &BTreeMap<String, HeaderRuleSpec>) -> BTreeMap<String, HeaderRule> {
    m.iter().map(|(k, v)| (k.clone(), header_rule(v))).collect()
}

fn route_http(h: &RouteHttpSpec) -> RouteHttp {
    RouteHttp {
        headers: header_rule(&h.headers),
        media_headers: header_rules(&h.media_headers),
        cors: h.cors.as_ref().map(|c| {
            let mut cors = Cors::with_origins(c.allow_origins.clone());
            for (spec, field) in [
                (&c.allow_methods, &mut cors.allow_methods),
                (&c.allow_headers, &mut cors.allow_headers),
                (&c.expose_headers, &mut cors.expose_headers),
            ] {
                if let Some(list) = spec {
                    field.clone_from(list);
                }
            }
            cors.max_age_secs = c.max_age_secs;
            cors.allow_credentials = c.allow_credentials;
            cors
        }),
        precompressed: h.precompressed.clone(),
        listing: h.listing,
    }
}

/// Render the config to TOML and hash it.
pub fn render(spec: &ContentServerSpec) -> Result<RenderedConfig, ConfigError> {
    let toml = server_config(spec).to_toml()?;
    let hash = config_hash(&toml);
    Ok(RenderedConfig { toml, hash })
}

/// First 16 hex digits of the SHA-256 of the text.
pub fn config_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The ConfigMap holding the rendered config, named after its hash and immutable: a new config
/// is a new ConfigMap (the old one goes after the rollout, `reconcile/configs.rs`).
pub fn configmap(cs: &ContentServer, rendered: &RenderedConfig) -> ConfigMap {
    let name = crate::builders::configmap_name(cs, &rendered.hash);
    let mut meta = child_meta(cs, name);
    meta.annotations = Some(BTreeMap::from([(
        crate::builders::CONFIG_HASH_ANNOTATION.to_string(),
        rendered.hash.clone(),
    )]));
    ConfigMap {
        metadata: meta,
        data: Some(BTreeMap::from([(
            CONFIG_KEY.to_string(),
            rendered.toml.clone(),
        )])),
        immutable: Some(true),
        ..ConfigMap::default()
    }
}
