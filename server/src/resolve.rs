//! URI path -> (volume, path relative to the volume root), and the one canonical form of a
//! request path that routing, the cache key and the origin request all use ([`canonical`]).
//!
//! Owns percent-decoding, dot-segment normalization (`..` may never climb above `/`), NUL
//! rejection, longest-prefix route matching and `split_clients`-style hashing. It must not
//! touch the filesystem: containment on disk is enforced again by openat2(RESOLVE_BENEATH) in
//! fs::open.
//!
//! The contract of a request path, defined once here:
//! - **Canonical form** ([`canonical`], what a cache route keys on and asks its origin for):
//!   split at the literal `/`; in each segment a percent-escape of an unreserved character
//!   (RFC 3986: `A-Z a-z 0-9 - . _ ~`) is decoded (`%6e` -> `n`), every other escape is kept
//!   with upper-case hex (`%2f` -> `%2F`: an encoded `/`, `?`, `%` or sub-delimiter may mean
//!   something else to the origin than the character), and a byte that may not stand bare in
//!   a path (space, `"`, `\`, non-ASCII, ...) is escaped; then empty segments are dropped (`//`
//!   is `/`), `.` segments dropped and `..` segments remove the one before (an error above the
//!   root; `%2e%2e` is `..`, being unreserved). A trailing `/` is kept.
//! - **Routing form** (routes, `split` hashing, static file names): the canonical form fully
//!   decoded, with the empty segments an encoded `/` leaves merged. So both forms agree on the
//!   segments, an encoded `/` is refused (400) where it would not: next to a `.` or `..`
//!   (`..%2F`, which would climb after routing), or inside the segments that match the route's
//!   prefix (`/a%2Fb/x` for a route at `/a/b`, which the origin would be asked for outside it).
//! - NUL (raw or `%00`) and malformed escapes are 400. The query is not part of the path: a
//!   cache key and an origin request carry it after `?` as the client sent it.

use crate::config::Config;
use std::borrow::Cow;
use std::fmt::Write as _;

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
    /// The request's [`canonical`] path (origin form, no query): a cache route's key and the
    /// target it asks its origin for.
    pub path: String,
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
        let canonical = canonical(raw_path)?;
        let path = normalized(&canonical)?;
        for r in &self.routes {
            let matches = path.starts_with(&r.prefix)
                && (path.len() == r.prefix.len() || path[r.prefix.len()] == b'/');
            if !matches {
                continue;
            }
            // The prefix's segments must be the request's own, not made by an encoded `/`.
            let depth = r.prefix.iter().filter(|&&b| b == b'/').count();
            if canonical
                .split('/')
                .skip(1)
                .take(depth)
                .any(|seg| seg.contains("%2F"))
            {
                return Err(ResolveError::Bad("encoded '/' in the route's prefix"));
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
                path: canonical,
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

/// RFC 3986 unreserved: the characters whose percent-escape is decoded in [`canonical`].
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Characters that stand bare in a canonical path segment: unreserved, sub-delims, `:`, `@`
/// (RFC 3986 `pchar` without `%`).
fn bare(b: u8) -> bool {
    unreserved(b) || b"!$&'()*+,;=:@".contains(&b)
}

/// The canonical form of a raw (percent-encoded) request path: see the module doc for the
/// contract. Aliases (`/%6e1.bin`, `//n1.bin`, `/./n1.bin`, `/x/../n1.bin`) give one string;
/// `%2F`, `%3F` and other escapes of reserved characters stay encoded.
pub fn canonical(raw: &str) -> Result<String, ResolveError> {
    if is_canonical(raw.as_bytes()) {
        return Ok(raw.to_string());
    }
    let raw = raw.as_bytes();
    if raw.first() != Some(&b'/') {
        return Err(ResolveError::Bad("path must start with '/'"));
    }
    let mut segs: Vec<String> = Vec::new();
    let mut trailing = false;
    for seg in raw[1..].split(|&b| b == b'/') {
        let mut enc = String::with_capacity(seg.len());
        let mut slash = false;
        let mut i = 0;
        while i < seg.len() {
            let b = if seg[i] == b'%' {
                let hi = seg.get(i + 1).copied().and_then(hex);
                let lo = seg.get(i + 2).copied().and_then(hex);
                let (Some(h), Some(l)) = (hi, lo) else {
                    return Err(ResolveError::Bad("bad percent-encoding"));
                };
                i += 3;
                let b = h << 4 | l;
                if !unreserved(b) {
                    if b == 0 {
                        return Err(ResolveError::Bad("NUL byte in path"));
                    }
                    slash |= b == b'/' || b == b'\\';
                    let _ = write!(enc, "%{b:02X}");
                    continue;
                }
                b
            } else {
                i += 1;
                seg[i - 1]
            };
            if b == 0 {
                return Err(ResolveError::Bad("NUL byte in path"));
            }
            // A backslash, raw or encoded, is a separator to some origins (IIS and other
            // Windows stacks): `.` or `..` next to one is refused as next to an encoded `/`.
            slash |= b == b'\\';
            if bare(b) {
                enc.push(b as char);
            } else {
                let _ = write!(enc, "%{b:02X}");
            }
        }
        trailing = false;
        match enc.as_str() {
            "" | "." => trailing = true,
            ".." => {
                if segs.pop().is_none() {
                    return Err(ResolveError::Bad("'..' above the root"));
                }
                trailing = true;
            }
            _ => {
                if slash
                    && enc
                        .replace("%5C", "%2F")
                        .split("%2F")
                        .any(|piece| piece == "." || piece == "..")
                {
                    return Err(ResolveError::Bad(
                        "'.' or '..' next to an encoded '/' or a '\\'",
                    ));
                }
                segs.push(enc);
            }
        }
    }
    let mut out = String::with_capacity(raw.len());
    for s in &segs {
        out.push('/');
        out.push_str(s);
    }
    if out.is_empty() || trailing {
        out.push('/');
    }
    Ok(out)
}

/// True when `raw` is already what [`canonical`] makes of it and has nothing to decode: it
/// starts with `/`, holds only bare characters (no `%`), and no empty, `.` or `..` segment (but
/// for the one after a trailing `/`). The common case: no work beyond this scan.
fn is_canonical(raw: &[u8]) -> bool {
    raw.iter().all(|&b| b == b'/' || bare(b)) && is_normal(raw)
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
    fn canonical_paths() {
        // Aliases of one path are one string.
        for alias in [
            "/n1.bin",
            "/%6e1.bin",
            "/%6E%31%2E%62in",
            "//n1.bin",
            "/./n1.bin",
            "/x/../n1.bin",
            "/x/%2e%2e/n1.bin",
            "/x/%2E/../n1.bin",
        ] {
            assert_eq!(canonical(alias).as_deref(), Ok("/n1.bin"), "{alias}");
        }
        // Reserved characters keep their escapes (upper-case hex); what may not stand bare is
        // escaped; a trailing `/` stays.
        assert_eq!(canonical("/a%2fb%3Fc").unwrap(), "/a%2Fb%3Fc");
        assert_eq!(canonical("/a%20b%25/").unwrap(), "/a%20b%25/");
        assert_eq!(canonical("/a%21b!c").unwrap(), "/a%21b!c");
        assert_eq!(canonical("/\u{e9}\"x").unwrap(), "/%C3%A9%22x");
        assert_eq!(canonical("/").unwrap(), "/");
        assert_eq!(canonical("/d/.").unwrap(), "/d/");
        assert_eq!(canonical("/a/%2Fb").unwrap(), "/a/%2Fb");
        for bad in [
            "/..",
            "/%2e%2e",
            "/a/..%2fb",
            "/a/%2F..",
            "/a/.%2Fb",
            "/a/..%5Cb",
            "/a/%5C..%5Cb",
            "/a/\\..\\b",
            "/a/b\\.",
            "/a%00",
            "/a\0",
            "/a%zz",
            "/a%2",
            "a",
        ] {
            assert!(canonical(bad).is_err(), "{bad}");
        }
        // The fast path gives what the slow one would.
        for p in [
            "/", "/a", "/a/", "/a/b.mp4", "/a!b", "/a//b", "/a b", "/a/.",
        ] {
            let fast = is_canonical(p.as_bytes());
            assert_eq!(fast, p != "/a//b" && p != "/a b" && p != "/a/.", "{p}");
        }
    }

    #[test]
    fn routing_keying_and_forwarding_share_the_canonical_path() {
        let mut cfg: Config = toml::from_str(
            r#"
[[volumes]]
name = "s"
path = "/s"
[[volumes]]
name = "c"
path = "/c"
[[routes]]
prefix = "/static"
volume = "s"
[[routes]]
prefix = "/static/cached"
volume = "c"
"#,
        )
        .unwrap();
        cfg.normalize();
        let router = Router::new(&cfg);
        let r = router.resolve("/static/x/../cached/b.bin").unwrap();
        assert_eq!((r.volume, r.path.as_str()), (1, "/static/cached/b.bin"));
        assert_eq!(r.rel, b"static/cached/b.bin");
        let r = router.resolve("/static/cached/a%2Fb").unwrap();
        assert_eq!((r.volume, r.path.as_str()), (1, "/static/cached/a%2Fb"));
        assert_eq!(r.rel, b"static/cached/a/b");
        // An encoded `/` may not make the route's prefix, nor hide a `..`.
        assert!(router.resolve("/static%2Fcached/b.bin").is_err());
        assert!(router.resolve("/static/cached/..%2F..%2Fsecret").is_err());
        // Outside a prefix it is a file name's `/`, as before.
        let r = router.resolve("/static/sub%2Ff").unwrap();
        assert_eq!((r.volume, r.rel.as_slice()), (0, &b"static/sub/f"[..]));
    }

    #[test]
    fn murmur2_matches_reference() {
        // Reference values of MurmurHash2 with seed 0 (as used by nginx).
        assert_eq!(murmur2(b""), 0);
        assert_eq!(murmur2(b"a"), 0x92685f5e);
        assert_eq!(murmur2(b"hello"), 0xe56129cb);
    }
}
