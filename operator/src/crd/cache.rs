//! The caching part of the ContentServer API (issue 12): `spec.origin` (the upstream a caching
//! node fetches misses from), per-volume `cache`, the freshness policy of routes that go to the
//! origin, and the purge token. The same options as the server's `[[origins]]`,
//! `[volumes.cache]`, `[routes.cache]` and `admin.purge_token_file` (`content_server::config`),
//! in Kubernetes' camelCase with sizes as Kubernetes quantities; `builders::cache` maps them
//! onto the server's types (for `builders::configmap`) and builds the CA and token mounts (for
//! `builders::workload`), and `validation.rs` checks them (the server's rules plus "the cache
//! fits its claim").
//!
//! Owns the API shape and the quantity -> bytes conversion; it must not render anything itself.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Regex of a Kubernetes quantity (the same as `claimTemplate.size`).
pub const QUANTITY_PATTERN: &str = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$";
/// Directory the origin CA bundle is mounted at (file `ca.pem`).
pub const ORIGIN_CA_DIR: &str = "/etc/content-server-origin";
/// File name of the CA bundle in [`ORIGIN_CA_DIR`].
pub const ORIGIN_CA_FILE: &str = "ca.pem";
/// Directory the purge token is mounted at (file `token`).
pub const PURGE_TOKEN_DIR: &str = "/etc/content-server-purge";
/// File name of the token in [`PURGE_TOKEN_DIR`].
pub const PURGE_TOKEN_FILE: &str = "token";

/// The origin behind every cache route (the server's origin named `origin`).
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OriginSpec {
    /// `http://HOST[:PORT]` or `https://HOST[:PORT]`, tried in order: the next on a connect
    /// error, or when one took a request and gave no answer head (timeout, closed).
    #[schemars(
        length(min = 1, max = 16),
        inner(regex(pattern = r"^https?://[^/?#@\s]+/?$"))
    )]
    pub servers: Vec<String>,
    /// Host header sent to the origin (S3-style buckets); default: the server URL's authority.
    #[schemars(length(min = 1, max = 255))]
    pub host: Option<String>,
    /// TLS server name for https servers; default: `host`, else the URL's host.
    #[schemars(length(min = 1, max = 253))]
    pub sni: Option<String>,
    /// PEM CA bundle trusted for https servers (in addition to the system roots), from a key of
    /// a Secret or a ConfigMap; mounted into the pod and rendered as the origin's `ca_file`.
    pub ca: Option<CaSourceSpec>,
    /// TCP connect + TLS handshake timeout per server.
    #[serde(default = "default_connect_timeout_ms")]
    #[schemars(range(min = 1, max = 600000))]
    pub connect_timeout_ms: u64,
    /// Time allowed for the origin's whole response head once the request is sent, then
    /// between body chunks.
    #[serde(default = "default_read_timeout_ms")]
    #[schemars(range(min = 1, max = 3600000))]
    pub read_timeout_ms: u64,
    /// Concurrent origin connections per pod; more requests wait for a free one.
    #[serde(default = "default_max_connections")]
    #[schemars(range(min = 1, max = 65536))]
    pub max_connections: u32,
    /// Bytes of a passed-through (not storable) answer read ahead of a slow client, in memory,
    /// so that an answer this size or smaller frees its origin connection at the origin's pace.
    #[serde(default = "default_pass_buffer_bytes")]
    #[schemars(range(max = 67108864))]
    pub pass_buffer_bytes: u64,
}

/// Exactly one of the fields.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.secretKeyRef) != has(self.configMapKeyRef)",
    "message": "set exactly one of secretKeyRef and configMapKeyRef"
}]))]
pub struct CaSourceSpec {
    pub secret_key_ref: Option<KeyRefSpec>,
    pub config_map_key_ref: Option<KeyRefSpec>,
}

/// A key of a Secret or ConfigMap in the ContentServer's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyRefSpec {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
}

/// The purge token (enables `PURGE` on the admin port with `Authorization: Bearer <token>`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PurgeTokenSpec {
    /// Secret key holding the token; mounted and rendered as `admin.purge_token_file`.
    pub secret_key_ref: KeyRefSpec,
}

/// `volumes[].cache`: the volume stores what the origin answers for the routes using it.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeCacheSpec {
    /// Largest total size of stored entries (a quantity such as `90Gi`); at most the volume's
    /// `claimTemplate.size`, or 90% of its `emptyDir.sizeLimit`. Absent: 90% of
    /// `emptyDir.sizeLimit` on an emptyDir, keep 10% of the filesystem free on a claim or a
    /// hostPath; required on an emptyDir without `sizeLimit` (its filesystem is the node's,
    /// where the kubelet evicts pods at 10% free).
    #[schemars(regex(pattern = QUANTITY_PATTERN))]
    pub max_size: Option<String>,
    /// Entries unused this long are dropped.
    #[serde(default = "default_inactive_secs")]
    #[schemars(range(min = 1, max = 315360000))]
    pub inactive_secs: u64,
    /// Requests for an object before it is stored (1 to 15).
    #[serde(default = "default_min_uses")]
    #[schemars(range(min = 1, max = 15))]
    pub min_uses: u32,
    /// Bytes per stored slice (a quantity such as `1Mi`); `0` = whole objects.
    #[serde(default = "default_slice_size")]
    #[schemars(regex(pattern = QUANTITY_PATTERN))]
    pub slice_size: String,
}

/// `routes[].cache`: present = the prefix is fetched from `spec.origin` through the route's
/// (cache) volumes, with this freshness policy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteCacheSpec {
    /// Freshness by status when the origin says nothing (or always, with ignoreOriginHeaders).
    #[serde(default = "default_valid")]
    #[schemars(length(max = 16))]
    pub valid: Vec<ValidRuleSpec>,
    /// Ignore the origin's Cache-Control and Expires.
    #[serde(default)]
    pub ignore_origin_headers: bool,
    /// Serve stale while one background request revalidates (origin default absent).
    #[serde(default = "default_swr_secs")]
    #[schemars(range(max = 315360000))]
    pub stale_while_revalidate_secs: u64,
    /// Serve stale while the origin fails (origin default absent).
    #[serde(default = "default_sie_secs")]
    #[schemars(range(max = 315360000))]
    pub stale_if_error_secs: u64,
}

/// These statuses stay fresh for `secs` (200-499; 304 and 416 are refused by the server's rules).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidRuleSpec {
    #[schemars(length(min = 1, max = 32), inner(range(min = 200, max = 499)))]
    pub status: Vec<u16>,
    #[schemars(range(max = 315360000))]
    pub secs: u64,
}

fn server_origin() -> content_server::config::Origin {
    content_server::config::Origin::new("", Vec::new())
}
fn default_connect_timeout_ms() -> u64 {
    server_origin().connect_timeout_ms
}
fn default_read_timeout_ms() -> u64 {
    server_origin().read_timeout_ms
}
fn default_pass_buffer_bytes() -> u64 {
    server_origin().pass_buffer_bytes
}
fn default_max_connections() -> u32 {
    u32::try_from(server_origin().max_connections).unwrap_or(u32::MAX)
}
fn default_inactive_secs() -> u64 {
    content_server::config::VolumeCache::default().inactive_secs
}
fn default_min_uses() -> u32 {
    content_server::config::VolumeCache::default().min_uses
}
fn default_slice_size() -> String {
    let b = content_server::config::VolumeCache::default().slice_size;
    if b % (1 << 20) == 0 {
        format!("{}Mi", b >> 20)
    } else {
        b.to_string()
    }
}
fn default_valid() -> Vec<ValidRuleSpec> {
    content_server::config::CachePolicy::default()
        .valid
        .into_iter()
        .map(|r| ValidRuleSpec {
            status: r.status,
            secs: r.secs,
        })
        .collect()
}
fn default_swr_secs() -> u64 {
    content_server::config::CachePolicy::default().stale_while_revalidate_secs
}
fn default_sie_secs() -> u64 {
    content_server::config::CachePolicy::default().stale_if_error_secs
}

impl Default for VolumeCacheSpec {
    fn default() -> Self {
        VolumeCacheSpec {
            max_size: None,
            inactive_secs: default_inactive_secs(),
            min_uses: default_min_uses(),
            slice_size: default_slice_size(),
        }
    }
}
impl Default for RouteCacheSpec {
    fn default() -> Self {
        RouteCacheSpec {
            valid: default_valid(),
            ignore_origin_headers: false,
            stale_while_revalidate_secs: default_swr_secs(),
            stale_if_error_secs: default_sie_secs(),
        }
    }
}

/// Percent of an emptyDir's `sizeLimit` a cache may fill: the rest is for fills in flight
/// (their temporary files) and the filesystem, since the kubelet evicts a pod whose emptyDir
/// goes over its limit.
pub const EMPTY_DIR_CACHE_PERCENT: u64 = 90;

/// The most a cache may hold on an emptyDir limited to `size_limit` bytes, and its default
/// `maxSize` there.
pub fn empty_dir_cache_bytes(size_limit: u64) -> u64 {
    u64::try_from(u128::from(size_limit) * u128::from(EMPTY_DIR_CACHE_PERCENT) / 100)
        .unwrap_or(u64::MAX)
}

/// The `maxSize` of a cache on `source` when the spec sets none: [`EMPTY_DIR_CACHE_PERCENT`] of
/// an emptyDir's `sizeLimit`; None elsewhere (the server's own default, keep 10% free).
pub fn default_cache_bytes(source: &crate::crd::VolumeSource) -> Option<u64> {
    let limit = source.empty_dir.as_ref()?.size_limit.as_deref()?;
    Some(empty_dir_cache_bytes(quantity_bytes(limit)?))
}

/// Bytes of a Kubernetes quantity (`100Gi`, `1.5T`, `4096`), rounded down; None when it is not
/// a quantity or does not fit in u64.
pub fn quantity_bytes(q: &str) -> Option<u64> {
    const UNITS: [(&str, u128); 12] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ];
    u64::try_from(scaled(q, &UNITS, 1, false)?).ok()
}

/// The exact value of a quantity in nano-units, rounded up as the API server rounds what is
/// finer than that: two spellings of one size compare equal. The API server keeps a size in
/// its canonical form, which for a size that is not a whole number of bytes is in milli-units
/// (`1.3Gi` comes back as `1395864371200m`, `1.5` as `1500m`). None when it is not a plain
/// quantity (a sign or an exponent) or is too large.
pub fn quantity_nanos(q: &str) -> Option<u128> {
    const G: u128 = 1_000_000_000;
    const UNITS: [(&str, u128); 15] = [
        ("Ki", G << 10),
        ("Mi", G << 20),
        ("Gi", G << 30),
        ("Ti", G << 40),
        ("Pi", G << 50),
        ("Ei", G << 60),
        ("n", 1),
        ("u", 1_000),
        ("m", 1_000_000),
        ("k", G * 1_000),
        ("M", G * 1_000_000),
        ("G", G * 1_000_000_000),
        ("T", G * 1_000_000_000_000),
        ("P", G * 1_000_000_000_000_000),
        ("E", G * 1_000_000_000_000_000_000),
    ];
    scaled(q, &UNITS, G, true)
}

/// `q` (digits, an optional fraction, then one of `units`' suffixes, or none for `plain`) in
/// the units' scale: rounded up with `ceil`, else down.
fn scaled(q: &str, units: &[(&str, u128)], plain: u128, ceil: bool) -> Option<u128> {
    let (num, mult) = units
        .iter()
        .find_map(|(s, m)| q.strip_suffix(s).map(|n| (n, *m)))
        .unwrap_or((q, plain));
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) || (num.contains('.') && frac.is_empty()) {
        return None;
    }
    let whole: u128 = int.parse().ok()?;
    let mut value = whole.checked_mul(mult)?;
    if !frac.is_empty() {
        let scale = 10u128.checked_pow(u32::try_from(frac.len()).ok()?)?;
        let f = frac.parse::<u128>().ok()?.checked_mul(mult)?;
        let part = if ceil { f.div_ceil(scale) } else { f / scale };
        value = value.checked_add(part)?;
    }
    Some(value)
}

/// The value of any Kubernetes quantity (as `resources.limits` may hold it: `+8Gi`, `.5Gi`,
/// `1e9`, `1.5E9`, `8589934592000m`), approximately; None when it is not one. For comparisons
/// such as a memory limit; sizes the operator renders use [`quantity_bytes`].
pub fn quantity_value(q: &str) -> Option<f64> {
    const SUFFIXES: [(&str, f64); 16] = [
        ("Ki", 1024.0),
        ("Mi", 1_048_576.0),
        ("Gi", 1_073_741_824.0),
        ("Ti", 1_099_511_627_776.0),
        ("Pi", 1_125_899_906_842_624.0),
        ("Ei", 1_152_921_504_606_846_976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
        ("", 1.0),
    ];
    let q = q.trim();
    let (sign, rest) = match q.strip_prefix('-') {
        Some(r) => (-1.0, r),
        None => (1.0, q.strip_prefix('+').unwrap_or(q)),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    let mult = match suffix.strip_prefix(['e', 'E']) {
        Some(exp) if !exp.is_empty() => 10f64.powi(exp.parse::<i32>().ok()?),
        _ => SUFFIXES.iter().find(|(s, _)| *s == suffix)?.1,
    };
    Some(sign * value * mult)
}

#[cfg(test)]
mod tests {
    use super::{quantity_bytes, quantity_nanos, quantity_value};

    #[test]
    fn any_kubernetes_quantity_has_a_value() {
        for (q, v) in [
            ("8Gi", 8.0 * 1_073_741_824.0),
            ("+8Gi", 8.0 * 1_073_741_824.0),
            (".5Gi", 536_870_912.0),
            ("1e9", 1e9),
            ("1.5E9", 1.5e9),
            ("8589934592000m", 8_589_934_592.0),
            ("512M", 512e6),
            ("100", 100.0),
        ] {
            assert_eq!(quantity_value(q), Some(v), "{q}");
        }
        for bad in ["", "Gi", "1.2.3", "8GB", "1e", "x"] {
            assert_eq!(quantity_value(bad), None, "{bad}");
        }
    }

    #[test]
    fn quantities_convert_to_bytes() {
        assert_eq!(quantity_bytes("100Gi"), Some(100 << 30));
        assert_eq!(quantity_bytes("1Mi"), Some(1 << 20));
        assert_eq!(quantity_bytes("1.5Ki"), Some(1536));
        assert_eq!(quantity_bytes("2G"), Some(2_000_000_000));
        assert_eq!(quantity_bytes("4096"), Some(4096));
        assert_eq!(quantity_bytes("0"), Some(0));
        for bad in ["", "Gi", "1.Gi", "x1", "1Xi", "-1", "1.2.3", "20Ei"] {
            assert_eq!(quantity_bytes(bad), None, "{bad}");
        }
    }

    /// The forms the API server gives back for what a spec says compare equal to it.
    #[test]
    fn canonical_forms_have_the_same_exact_value() {
        for (spec, canonical) in [
            ("1.3Gi", "1395864371200m"),
            ("1.5", "1500m"),
            ("0.1Ti", "109951162777600m"),
            ("1024Mi", "1Gi"),
            ("1.5T", "1500G"),
            ("0.5Ki", "512"),
            ("1.0000000001", "1000000001n"),
        ] {
            assert_eq!(quantity_nanos(spec), quantity_nanos(canonical), "{spec}");
            assert!(quantity_nanos(spec).is_some(), "{spec}");
        }
        assert_ne!(quantity_nanos("1.3Gi"), quantity_nanos("1395864371"));
        for bad in ["", "m", "1e3", "-1", "1.m", "1Xi"] {
            assert_eq!(quantity_nanos(bad), None, "{bad}");
        }
    }
}
