//! URI path -> (volume, path relative to the volume root).
//!
//! Owns percent-decoding, dot-segment normalization (`..` may never climb above `/`; `%2e%2e`
//! and `%2f` are decoded first, so encoded forms get no special treatment), NUL rejection,
//! longest-prefix route matching and `split_clients`-style hashing. It must not touch the
//! filesystem: containment on disk is enforced again by openat2(RESOLVE_BENEATH) in fs::open.

use crate::config::Config;
use std::borrow::Cow;

/// Why a path cannot be routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// 400: bad percent-encoding, NUL byte, or `..` above the root.
    #[error("bad request path: {0}")]
    Bad(&'static str),
    /// 404: no route serves the path.
    #[error("no route for path")]
    NoRoute,
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Index into `Config::volumes`.
    pub volume: usize,
    /// Path beneath the volume root, no leading `/`, empty = the root itself.
    pub rel: Vec<u8>,
    /// Index into `Config::routes` of the route that matched.
    pub route: usize,
}

enum Target {
    One(usize),
    /// Cumulative upper bounds (exclusive) on the 32-bit hash, in order.
    Split(Vec<(u64, usize)>),
}

struct CompiledRoute {
    /// Without trailing `/` (except the root route `/`, stored as empty).
    prefix: Vec<u8>,
    strip: bool,
    target: Target,
    /// Index into `Config::routes`.
    index: usize,
}

/// The routing table, built once from a validated config.
pub struct Router {
    routes: Vec<CompiledRoute>,
}

impl Router {
    /// Compile `cfg.routes` (call [`Config::normalize`] first so a single volume gets `/`).
    pub fn new(cfg: &Config) -> Router {
        let index_of = |name: &str| cfg.volumes.iter().position(|v| v.name == name);
        let mut routes: Vec<CompiledRoute> = cfg
            .routes
            .iter()
            .enumerate()
            .filter_map(|(index, r)| {
                let target = if let Some(v) = &r.volume {
                    Target::One(index_of(v)?)
                } else {
                    let mut cum = 0.0f64;
                    let mut parts = Vec::new();
                    for (i, t) in r.split.iter().enumerate() {
                        let idx = index_of(&t.volume)?;
                        let last = i + 1 == r.split.len();
                        let bound = match t.percent {
                            _ if last => 1u64 << 32,
                            Some(p) => {
                                cum += p;
                                ((cum / 100.0) * 4_294_967_296.0).min(4_294_967_296.0) as u64
                            }
                            None => 1u64 << 32,
                        };
                        parts.push((bound, idx));
                    }
                    Target::Split(parts)
                };
                let p = r.prefix.trim_end_matches('/');
                Some(CompiledRoute {
                    prefix: p.as_bytes().to_vec(),
                    strip: r.strip_prefix,
                    target,
                    index,
                })
            })
            .collect();
        routes.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
        Router { routes }
    }

    /// Route a raw (still percent-encoded) request path.
    pub fn resolve(&self, raw_path: &str) -> Result<Resolved, ResolveError> {
        let path = normalized(raw_path)?;
        for r in &self.routes {
            let matches = path.starts_with(&r.prefix)
                && (path.len() == r.prefix.len() || path[r.prefix.len()] == b'/');
            if !matches {
                continue;
            }
            let volume = match &r.target {
                Target::One(v) => *v,
                Target::Split(parts) => {
                    let h = murmur2(&path) as u64;
                    parts
                        .iter()
                        .find(|(bound, _)| h < *bound)
                        .or(parts.last())
                        .map(|(_, v)| *v)
                        .ok_or(ResolveError::NoRoute)?
                }
            };
            let rest = if r.strip {
                &path[r.prefix.len()..]
            } else {
                &path[..]
            };
            let rel = rest.strip_prefix(b"/").unwrap_or(rest).to_vec();
            return Ok(Resolved {
                volume,
                rel,
                route: r.index,
            });
        }
        Err(ResolveError::NoRoute)
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-decode `raw`.
pub fn percent_decode(raw: &[u8]) -> Result<Vec<u8>, ResolveError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let hi = raw.get(i + 1).copied().and_then(hex);
            let lo = raw.get(i + 2).copied().and_then(hex);
            match (hi, lo) {
                (Some(h), Some(l)) => out.push(h << 4 | l),
                _ => return Err(ResolveError::Bad("bad percent-encoding")),
            }
            i += 3;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// Decode and normalize to `/seg/seg` (trailing `/` kept): empty and `.` segments dropped, `..`
/// removes the previous segment and is an error above the root; NUL is an error.
pub fn normalize(raw: &str) -> Result<Vec<u8>, ResolveError> {
    normalized(raw).map(Cow::into_owned)
}

/// True when `raw` is already what [`normalize`] makes of it: it starts with `/`, has nothing
/// to decode, no NUL, and no empty, `.` or `..` segment (but for the one after a trailing `/`).
fn is_normal(raw: &[u8]) -> bool {
    let Some(rest) = raw.strip_prefix(b"/") else {
        return false;
    };
    if rest.iter().any(|&b| b == b'%' || b == 0) {
        return false;
    }
    let mut segs = rest.split(|&b| b == b'/').peekable();
    while let Some(seg) = segs.next() {
        let last = segs.peek().is_none();
        match seg {
            b"" if last => {}
            b"" | b"." | b".." => return false,
            _ => {}
        }
    }
    true
}

/// [`normalize`], borrowing `raw` when it is already normal (the common case: no allocation).
fn normalized(raw: &str) -> Result<Cow<'_, [u8]>, ResolveError> {
    if is_normal(raw.as_bytes()) {
        return Ok(Cow::Borrowed(raw.as_bytes()));
    }
    normalize_slow(raw).map(Cow::Owned)
}

fn normalize_slow(raw: &str) -> Result<Vec<u8>, ResolveError> {
    if !raw.starts_with('/') {
        return Err(ResolveError::Bad("path must start with '/'"));
    }
    let decoded = percent_decode(raw.as_bytes())?;
    if decoded.contains(&0) {
        return Err(ResolveError::Bad("NUL byte in path"));
    }
    let mut segs: Vec<&[u8]> = Vec::new();
    let mut trailing = false;
    for seg in decoded.split(|&b| b == b'/') {
        trailing = false;
        match seg {
            b"" | b"." => trailing = true,
            b".." => {
                if segs.pop().is_none() {
                    return Err(ResolveError::Bad("'..' above the root"));
                }
                trailing = true;
            }
            s => segs.push(s),
        }
    }
    let mut out = Vec::with_capacity(decoded.len());
    for s in &segs {
        out.push(b'/');
        out.extend_from_slice(s);
    }
    if out.is_empty() || trailing {
        out.push(b'/');
    }
    Ok(out)
}

/// MurmurHash2 (32-bit, seed 0) exactly as nginx's `ngx_murmur_hash2`, which `split_clients`
/// uses; the bucket is the first target whose cumulative share of 2^32 exceeds the hash.
pub fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let r = chunks.remainder();
    if r.len() >= 3 {
        h ^= (r[2] as u32) << 16;
    }
    if r.len() >= 2 {
        h ^= (r[1] as u32) << 8;
    }
    if !r.is_empty() {
        h ^= r[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes() {
        assert_eq!(normalize("/a/./b//c").unwrap(), b"/a/b/c");
        assert_eq!(normalize("/a/b/../c").unwrap(), b"/a/c");
        assert_eq!(normalize("/a/").unwrap(), b"/a/");
        assert_eq!(normalize("/").unwrap(), b"/");
        assert_eq!(normalize("/a%20b").unwrap(), b"/a b");
        assert_eq!(normalize("/a/%2e%2e/b").unwrap(), b"/b");
        assert!(normalize("/..").is_err());
        assert!(normalize("/a/../../etc/passwd").is_err());
        assert!(normalize("/%2e%2e%2fetc%2fpasswd").is_err());
        assert!(normalize("/a%00b").is_err());
        assert!(normalize("/a%zz").is_err());
        assert!(normalize("/a%2").is_err());
    }

    #[test]
    fn borrowed_paths_are_what_decoding_gives() {
        for p in [
            "/",
            "/a",
            "/a/",
            "/a/b.mp4",
            "/.well-known/x",
            "/a/.b",
            "/a/..b",
            "/a./b",
            "/a//b",
            "/a/./b",
            "/a/../b",
            "/a/.",
            "/a/..",
            "//",
            "/./",
            "/a%20b",
            "/a%2fb",
            "/a/b/",
        ] {
            let fast = is_normal(p.as_bytes());
            let slow = normalize_slow(p);
            assert_eq!(normalized(p), slow.clone().map(Cow::Owned), "{p}");
            if fast {
                assert_eq!(slow.as_deref(), Ok(p.as_bytes()), "{p} is normal");
            }
        }
        assert!(is_normal(b"/a/b.mp4") && is_normal(b"/a/") && is_normal(b"/"));
        assert!(!is_normal(b"/a//b") && !is_normal(b"/a/./b") && !is_normal(b"/a%41"));
    }

    #[test]
    fn murmur2_matches_reference() {
        // Reference values of MurmurHash2 with seed 0 (as used by nginx).
        assert_eq!(murmur2(b""), 0);
        assert_eq!(murmur2(b"a"), 0x92685f5e);
        assert_eq!(murmur2(b"hello"), 0xe56129cb);
    }
}
