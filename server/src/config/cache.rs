//! Cache settings: `[volumes.cache]` (a volume that stores origin responses) and `[routes.cache]`
//! (the freshness policy of a route that names an origin), with their checks.
//!
//! Owns the types, their defaults, the byte-size syntax of `max_size`, `slice_size` and the
//! other size fields ([`ByteSize`]: an integer or `10G`, rendered back as integer bytes) and
//! the validation of cache volumes and cache routes. Pure: no
//! filesystem access (the free-space default is computed by the cache store at start-up).

use super::errors::Errors;
use super::{Config, Route};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// `[volumes.cache]`: present = the volume stores responses of the origins of its routes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct VolumeCache {
    /// Largest total size of the stored entries; absent = keep 10% of the filesystem free.
    /// A size ([`ByteSize`]): bytes as an integer, or a string such as "10G" or "10 GiB".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_size: Option<ByteSize>,
    /// Entries not used for this long are dropped (nginx `inactive=10m`).
    pub inactive_secs: u64,
    /// Requests for an object before it is stored (admission; nginx `proxy_cache_min_uses`),
    /// 1 to 15.
    pub min_uses: u32,
    /// Bytes per stored slice (the origin gets `Range: bytes=a-b` requests of this size);
    /// 0 = whole objects. A size ([`ByteSize`]), such as 1048576 or "1M".
    #[serde(deserialize_with = "size")]
    #[schemars(with = "ByteSize")]
    pub slice_size: u64,
}

/// 1 MiB, nginx `slice 1m`.
pub const DEFAULT_SLICE_SIZE: u64 = 1024 * 1024;

impl Default for VolumeCache {
    fn default() -> Self {
        VolumeCache {
            max_size: None,
            inactive_secs: 600,
            min_uses: 1,
            slice_size: DEFAULT_SLICE_SIZE,
        }
    }
}

/// A size in bytes. Reads an integer, or a string: digits, optional spaces, then an optional
/// unit, any case: `B`, or `K`, `M`, `G` or `T` alone or followed by `B`, `i` or `iB`. Every
/// unit is binary (K = KB = Ki = KiB = 1024 bytes). Always writes the integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// Parse `"10G"`, `"512M"`, `"1024"`, `"4 KiB"`, `"10Gi"`, `"10 GB"`.
    pub fn parse(s: &str) -> Result<ByteSize, String> {
        let t = s.trim();
        let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(digits);
        let n: u64 = num.parse().map_err(|_| {
            format!("{s:?} is not a size: expected bytes or a number with K, M, G or T (binary; also as KB, Ki, KiB...)")
        })?;
        if unit.starts_with(['.', ',']) && !num.is_empty() {
            return Err(format!(
                "{s:?}: fractions are not accepted; write a whole number of a smaller unit (1536K for 1.5M)"
            ));
        }
        let shift = match unit.trim().to_ascii_uppercase().as_str() {
            "" | "B" => 0,
            "K" | "KB" | "KI" | "KIB" => 10,
            "M" | "MB" | "MI" | "MIB" => 20,
            "G" | "GB" | "GI" | "GIB" => 30,
            "T" | "TB" | "TI" | "TIB" => 40,
            _ => {
                return Err(format!(
                    "{s:?}: unknown size unit {:?} (use B, K, M, G or T, also as KB, Ki or KiB: all binary)",
                    unit.trim()
                ))
            }
        };
        n.checked_mul(1u64 << shift)
            .map(ByteSize)
            .ok_or_else(|| format!("{s:?} is too large"))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a size in bytes (integer) or a string such as \"10G\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("{v} is negative")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for ByteSize {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ByteSize".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Bytes as an integer, or a string with a unit: B, or K, M, G or T alone or followed by B, i or iB, any case, all binary (\"10G\", \"10Gi\", \"10 GiB\" and \"10GB\" are 10 * 2^30).",
            "anyOf": [
                { "type": "integer", "minimum": 0 },
                { "type": "string", "pattern": "^\\s*[0-9]+\\s*([KkMmGgTt][Ii]?[Bb]?|[Bb])?\\s*$" }
            ]
        })
    }
}

/// Deserialize a size field held as an integer type: anything [`ByteSize`] reads, refused
/// when it does not fit `T` (`#[serde(deserialize_with = "size")]`, with
/// `#[schemars(with = "ByteSize")]` so the schema says the same).
pub(super) fn size<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: SizeField,
{
    let ByteSize(n) = ByteSize::deserialize(d)?;
    T::from_bytes(n).map_err(serde::de::Error::custom)
}

/// An integer type a size field is held in.
pub trait SizeField: Sized {
    /// `n` bytes as this type, or why not (its largest value named).
    fn from_bytes(n: u64) -> Result<Self, String>;
}

macro_rules! size_field {
    ($($t:ty),*) => {$(
        impl SizeField for $t {
            fn from_bytes(n: u64) -> Result<$t, String> {
                <$t>::try_from(n)
                    .map_err(|_| format!("{n} bytes is too large: at most {} here", <$t>::MAX))
            }
        }
    )*};
}
size_field!(u64, usize);

/// A command-line size (`--sendfile-max-chunk 2M`): what the TOML field takes.
pub fn size_arg<T: SizeField>(s: &str) -> Result<T, String> {
    T::from_bytes(ByteSize::parse(s)?.0)
}

/// `[routes.cache]`: how long a cache route keeps what the origin answered (RFC 9111 plus
/// nginx-style per-status defaults). Every field is optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CachePolicy {
    /// Freshness by status when the origin gives none (nginx `proxy_cache_valid`), or always
    /// with `ignore_origin_headers`. A status in no rule is not stored without origin headers.
    pub valid: Vec<ValidRule>,
    /// true: ignore the origin's Cache-Control and Expires (still never store Set-Cookie or
    /// Vary other than Accept-Encoding).
    pub ignore_origin_headers: bool,
    /// Serve stale for this long while one background request revalidates, when the origin's
    /// Cache-Control has no `stale-while-revalidate`.
    pub stale_while_revalidate_secs: u64,
    /// Serve stale for this long when the origin is down, times out or answers 5xx, when the
    /// origin's Cache-Control has no `stale-if-error`.
    pub stale_if_error_secs: u64,
}

/// One `valid` rule: these statuses stay fresh for `secs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidRule {
    /// HTTP status codes (200-499 but 304 and 416: interim answers, those two and 5xx are
    /// never stored).
    pub status: Vec<u16>,
    /// Seconds fresh.
    pub secs: u64,
}

/// Why an answer of `status` is never stored by a cache volume, whatever its lifetime (a
/// `valid` rule naming it is refused; the fill stores no such answer).
pub fn never_stored(status: u16) -> Option<&'static str> {
    match status {
        100..=199 => Some("an interim answer"),
        304 | 416 => Some("it is an answer about a stored entry or a range, not an object"),
        500..=599 => Some("a 5xx passes through, so the next request retries (within stale-if-error a stale entry is served instead)"),
        _ => None,
    }
}

fn default_valid() -> Vec<ValidRule> {
    vec![
        ValidRule {
            status: vec![200, 206, 301, 302],
            secs: 3600,
        },
        ValidRule {
            status: vec![404],
            secs: 60,
        },
    ]
}

impl Default for CachePolicy {
    fn default() -> Self {
        CachePolicy {
            valid: default_valid(),
            ignore_origin_headers: false,
            stale_while_revalidate_secs: 60,
            stale_if_error_secs: 86_400,
        }
    }
}

impl CachePolicy {
    /// Seconds fresh for `status` by the `valid` rules, if a rule names it.
    pub fn valid_for(&self, status: u16) -> Option<u64> {
        self.valid
            .iter()
            .find(|r| r.status.contains(&status))
            .map(|r| r.secs)
    }
}

/// Smallest allowed `slice_size` (other than 0) and `max_size`.
pub const MIN_SLICE_SIZE: u64 = 4096;
/// Largest `min_uses` (the admission sketch's counters stop at 15).
pub const MIN_USES_MAX: u32 = 15;
/// Largest allowed `slice_size`.
pub const MAX_SLICE_SIZE: u64 = 1 << 30;
/// Largest allowed `max_size`: 2^62 bytes (4 EiB), far beyond any disk, so sizes added to it
/// stay within u64 and it fits the i64 of a metrics gauge.
pub const MAX_CACHE_SIZE: u64 = 1 << 62;

/// Largest cache lifetime in seconds (ten years, as `expires_secs`): `inactive_secs`,
/// `valid[].secs`, `stale_while_revalidate_secs`, `stale_if_error_secs`.
pub const MAX_LIFETIME_SECS: u64 = 10 * 365 * 86_400;

/// Check `volumes[i].cache.…`.
pub(super) fn check_volume_caches(e: &mut Errors, cfg: &Config) {
    for (i, v) in cfg.volumes.iter().enumerate() {
        let Some(c) = &v.cache else { continue };
        let f = format!("volumes[{i}].cache");
        if c.slice_size != 0 && !(MIN_SLICE_SIZE..=MAX_SLICE_SIZE).contains(&c.slice_size) {
            e.push(
                format!("{f}.slice_size"),
                format!(
                    "{} must be 0 (whole objects) or between {MIN_SLICE_SIZE} bytes and 1 GiB",
                    c.slice_size
                ),
            );
        }
        if let Some(ByteSize(m)) = c.max_size {
            if m > MAX_CACHE_SIZE {
                e.push(
                    format!("{f}.max_size"),
                    format!("{m} bytes is more than {MAX_CACHE_SIZE} (4 EiB, \"4194304T\")"),
                );
            } else if m < MIN_SLICE_SIZE.max(c.slice_size) {
                e.push(
                    format!("{f}.max_size"),
                    format!(
                        "{m} bytes is less than one slice ({} bytes)",
                        MIN_SLICE_SIZE.max(c.slice_size)
                    ),
                );
            }
        }
        if !(1..=MAX_LIFETIME_SECS).contains(&c.inactive_secs) {
            e.push(
                format!("{f}.inactive_secs"),
                format!(
                    "{} must be between 1 and {MAX_LIFETIME_SECS} (ten years)",
                    c.inactive_secs
                ),
            );
        }
        if c.min_uses == 0 || c.min_uses > MIN_USES_MAX {
            // The frequency sketch counts to 15 (4-bit counters).
            e.push(
                format!("{f}.min_uses"),
                format!("must be between 1 and {MIN_USES_MAX} (requests counted per object)"),
            );
        }
    }
}

/// Check a route's cache fields: its origin exists, a cache route uses only cache volumes, a
/// static route uses none, and the policy is sane.
pub(super) fn check_cache_route(
    e: &mut Errors,
    i: usize,
    r: &Route,
    cfg: &Config,
    origins: &HashSet<&str>,
) {
    let f = format!("routes[{i}]");
    let is_cache = |name: &str| {
        cfg.volumes
            .iter()
            .find(|v| v.name == name)
            .map(|v| v.cache.is_some())
    };
    let targets = r
        .volume
        .iter()
        .map(|v| (format!("{f}.volume"), v.as_str()))
        .chain(
            r.split
                .iter()
                .enumerate()
                .map(|(j, t)| (format!("{f}.split[{j}].volume"), t.volume.as_str())),
        );
    match &r.origin {
        Some(o) => {
            if !origins.contains(o.as_str()) {
                e.push(format!("{f}.origin"), format!("no origin named {o:?}"));
            }
            if r.strip_prefix {
                e.push(
                    format!("{f}.strip_prefix"),
                    "a cache route asks the origin for the request's whole path (and keys it so): strip_prefix is for static routes",
                );
            }
            // Files of a directory: a cache route serves objects of its origin.
            if !r.http.precompressed.is_empty() {
                e.push(
                    format!("{f}.http.precompressed"),
                    "a cache route serves the origin's objects, which have no precompressed siblings here: precompressed is for static routes",
                );
            }
            if r.http.listing {
                e.push(
                    format!("{f}.http.listing"),
                    "a cache route cannot list the origin's directories: listing is for static routes",
                );
            }
            for (field, v) in targets {
                if is_cache(v) == Some(false) {
                    e.push(
                        field,
                        format!("{v:?} has no [volumes.cache]; a cache route needs cache volumes"),
                    );
                }
            }
        }
        None => {
            for (field, v) in targets {
                if is_cache(v) == Some(true) {
                    e.push(
                        field,
                        format!("{v:?} is a cache volume; only a route with an origin may use it"),
                    );
                }
            }
            if r.cache.is_some() {
                e.push(
                    format!("{f}.cache"),
                    "a cache policy needs `origin` on the route",
                );
            }
        }
    }
    if let Some(p) = &r.cache {
        for (name, secs) in [
            ("stale_while_revalidate_secs", p.stale_while_revalidate_secs),
            ("stale_if_error_secs", p.stale_if_error_secs),
        ] {
            if secs > MAX_LIFETIME_SECS {
                e.push(
                    format!("{f}.cache.{name}"),
                    format!("{secs} must be at most {MAX_LIFETIME_SECS} (ten years)"),
                );
            }
        }
        let mut seen = HashSet::new();
        for (j, rule) in p.valid.iter().enumerate() {
            if rule.secs > MAX_LIFETIME_SECS {
                e.push(
                    format!("{f}.cache.valid[{j}].secs"),
                    format!(
                        "{} must be at most {MAX_LIFETIME_SECS} (ten years)",
                        rule.secs
                    ),
                );
            }
            if rule.status.is_empty() {
                e.push(
                    format!("{f}.cache.valid[{j}].status"),
                    "list at least one status",
                );
            }
            for s in &rule.status {
                if !(100..=599).contains(s) {
                    e.push(
                        format!("{f}.cache.valid[{j}].status"),
                        format!("{s} is not an HTTP status (100-599)"),
                    );
                } else if let Some(why) = never_stored(*s) {
                    e.push(
                        format!("{f}.cache.valid[{j}].status"),
                        format!("{s} is never stored: {why}"),
                    );
                } else if !seen.insert(*s) {
                    e.push(
                        format!("{f}.cache.valid[{j}].status"),
                        format!("{s} is already in an earlier rule"),
                    );
                }
            }
        }
    }
}
