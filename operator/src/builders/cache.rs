//! The caching part of the rendering: `spec.origin`, `volumes[].cache`, `routes[].cache` and
//! `spec.purgeToken` onto the server's `Config` (one origin named `origin`), and the pod volumes
//! and mounts of the origin CA and the purge token.
//!
//! Pure. Sizes are converted from Kubernetes quantities to bytes here; a quantity that does not
//! convert is rendered as 0 bytes, which the server's own checks reject (validation.rs also
//! reports it on the spec path).

use crate::crd::{
    default_cache_bytes, quantity_bytes, CaSourceSpec, ContentServerSpec, ORIGIN_CA_DIR,
    ORIGIN_CA_FILE, PURGE_TOKEN_DIR, PURGE_TOKEN_FILE,
};
use content_server::config::{
    ByteSize, CachePolicy, Config, Origin, ValidRule, VolumeCache, DEFAULT_ORIGIN,
};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, KeyToPath, SecretVolumeSource, Volume, VolumeMount,
};

/// Pod volume name of the origin CA bundle.
pub const CA_VOLUME: &str = "origin-ca";
/// Pod volume name of the purge token.
pub const PURGE_VOLUME: &str = "purge-token";

/// Set the cache fields of `cfg` (built from `spec` by `configmap::server_config`).
pub fn apply(spec: &ContentServerSpec, cfg: &mut Config) {
    if let Some(o) = &spec.origin {
        let mut origin = Origin::new(DEFAULT_ORIGIN, o.servers.clone());
        origin.host.clone_from(&o.host);
        origin.sni.clone_from(&o.sni);
        origin.ca_file =
            o.ca.as_ref()
                .map(|_| format!("{ORIGIN_CA_DIR}/{ORIGIN_CA_FILE}").into());
        origin.connect_timeout_ms = o.connect_timeout_ms;
        origin.read_timeout_ms = o.read_timeout_ms;
        origin.max_connections = o.max_connections as usize;
        origin.pass_buffer_bytes = o.pass_buffer_bytes;
        cfg.origins = vec![origin];
    }
    for (v, out) in spec.volumes.iter().zip(cfg.volumes.iter_mut()) {
        out.cache = v.cache.as_ref().map(|c| VolumeCache {
            max_size: c
                .max_size
                .as_deref()
                .map(|q| ByteSize(quantity_bytes(q).unwrap_or(0)))
                // On an emptyDir the server's default (10% of the filesystem free) would
                // measure the node's disk: the limit's share instead.
                .or_else(|| default_cache_bytes(&v.source).map(ByteSize)),
            inactive_secs: c.inactive_secs,
            min_uses: c.min_uses,
            slice_size: quantity_bytes(&c.slice_size).unwrap_or(u64::MAX),
        });
    }
    for (r, out) in spec.routes.iter().zip(cfg.routes.iter_mut()) {
        let Some(c) = &r.cache else { continue };
        out.origin = Some(DEFAULT_ORIGIN.into());
        out.cache = Some(CachePolicy {
            valid: c
                .valid
                .iter()
                .map(|v| ValidRule {
                    status: v.status.clone(),
                    secs: v.secs,
                })
                .collect(),
            ignore_origin_headers: c.ignore_origin_headers,
            stale_while_revalidate_secs: c.stale_while_revalidate_secs,
            stale_if_error_secs: c.stale_if_error_secs,
        });
    }
    if spec.purge_token.is_some() {
        cfg.admin.purge_token_file = format!("{PURGE_TOKEN_DIR}/{PURGE_TOKEN_FILE}");
    }
}

fn item(key: &str, path: &str) -> Option<Vec<KeyToPath>> {
    Some(vec![KeyToPath {
        key: key.into(),
        path: path.into(),
        mode: None,
    }])
}

/// Pod volumes and read-only mounts of the origin CA and the purge token.
pub fn pod_volumes(spec: &ContentServerSpec) -> (Vec<Volume>, Vec<VolumeMount>) {
    // (volume, where it is mounted read-only)
    let mut vols = Vec::new();
    let ca = spec.origin.as_ref().and_then(|o| o.ca.as_ref());
    if let Some(CaSourceSpec {
        secret_key_ref,
        config_map_key_ref,
    }) = ca
    {
        let v = Volume {
            name: CA_VOLUME.into(),
            secret: secret_key_ref.as_ref().map(|k| SecretVolumeSource {
                secret_name: Some(k.name.clone()),
                items: item(&k.key, ORIGIN_CA_FILE),
                ..SecretVolumeSource::default()
            }),
            config_map: config_map_key_ref
                .as_ref()
                .filter(|_| secret_key_ref.is_none())
                .map(|k| ConfigMapVolumeSource {
                    name: k.name.clone(),
                    items: item(&k.key, ORIGIN_CA_FILE),
                    ..ConfigMapVolumeSource::default()
                }),
            ..Volume::default()
        };
        vols.push((v, ORIGIN_CA_DIR));
    }
    if let Some(t) = &spec.purge_token {
        let v = Volume {
            name: PURGE_VOLUME.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(t.secret_key_ref.name.clone()),
                items: item(&t.secret_key_ref.key, PURGE_TOKEN_FILE),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        };
        vols.push((v, PURGE_TOKEN_DIR));
    }
    let mounts = vols
        .iter()
        .map(|(v, dir)| VolumeMount {
            name: v.name.clone(),
            mount_path: (*dir).into(),
            read_only: Some(true),
            ..VolumeMount::default()
        })
        .collect();
    (vols.into_iter().map(|(v, _)| v).collect(), mounts)
}
