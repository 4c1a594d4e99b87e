//! `POST /cache/purge` on the admin port: delete one cached object (every slice of it) or every
//! object whose key is under a path prefix (whole segments: `/dir` is not a prefix of
//! `/dirx`), on every cache volume. A purge's path is made canonical as cache keys are
//! ([`crate::resolve::canonical`]): `key=/n1.bin` purges what `/%6e1.bin` or `//n1.bin` stored.
//!
//! Off unless `[admin] purge_token_file` names a file holding a bearer token (read once at
//! start-up, so a Kubernetes Secret can be mounted there); a request without exactly
//! `Authorization: Bearer TOKEN` changes nothing. Deletions run on each volume's pool. It owns
//! the token check and the purge itself, not the HTTP routing (that is [`crate::admin`]).
//!
//! Guarantee: once a purge answered, nothing fetched from the origin before it is served from
//! the cache. Fills of a purged object still under way are first taken out of reach (new
//! requests start their own fetch) and told to store nothing ([`Fill::purge`]; one already
//! committing is waited for), then the stored files are deleted.

use super::fill::Fill;
use super::key::{under_prefix, CacheKey};
use super::volume::CacheVolume;
use crate::config::Config;
use anyhow::Context;
use std::sync::Arc;

/// What to purge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One cache key: a request path, with `?query` if it had one.
    Key(String),
    /// Every key under this path prefix, by whole path segments ([`under_prefix`]).
    Prefix(String),
}

impl Target {
    /// `key=` (`prefix: false`) or `prefix=` of a purge request, its value already
    /// percent-decoded once from the query string: a request path (percent-encoded, as a client
    /// sends it) with `?query` if any. The path is put in its canonical form
    /// ([`crate::resolve::canonical`], as keys are), so every alias of a path is purged; the
    /// query is kept as it is.
    pub fn parse(value: &str, prefix: bool) -> Result<Target, crate::resolve::ResolveError> {
        let (path, query) = match value.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (value, None),
        };
        let mut v = crate::resolve::canonical(path)?;
        if let Some(q) = query {
            v.push('?');
            v.push_str(q);
        }
        Ok(if prefix {
            Target::Prefix(v)
        } else {
            Target::Key(v)
        })
    }

    /// Does this purge name the object of `fill`?
    fn names(&self, fill: &Fill) -> bool {
        match self {
            Target::Key(k) => *fill.key == *k.as_bytes(),
            Target::Prefix(p) => under_prefix(&fill.key, p.as_bytes()),
        }
    }
}

/// The purge endpoint's state: the token and the cache volumes.
pub struct Purge {
    token: String,
    caches: Vec<Arc<CacheVolume<Fill>>>,
}

impl Purge {
    /// `None` when purging is disabled (no token file configured). A configured file that
    /// cannot be read or holds no token is a start-up error.
    pub fn from_config(
        cfg: &Config,
        caches: &[Option<Arc<CacheVolume<Fill>>>],
    ) -> anyhow::Result<Option<Arc<Purge>>> {
        let path = cfg.admin.purge_token_file.trim();
        if path.is_empty() {
            return Ok(None);
        }
        let token = std::fs::read_to_string(path)
            .with_context(|| format!("admin.purge_token_file: cannot read {path}"))?
            .trim()
            .to_string();
        if token.is_empty() {
            anyhow::bail!("admin.purge_token_file: {path} holds no token");
        }
        Ok(Some(Arc::new(Purge {
            token,
            caches: caches.iter().flatten().cloned().collect(),
        })))
    }

    /// True for exactly `Bearer TOKEN` (compared in constant time).
    pub fn authorized(&self, authorization: Option<&str>) -> bool {
        let Some(v) = authorization.map(str::trim) else {
            return false;
        };
        let Some(given) = v
            .get(..7)
            .filter(|s| s.eq_ignore_ascii_case("bearer "))
            .map(|_| v[7..].trim())
        else {
            return false;
        };
        let (a, b) = (given.as_bytes(), self.token.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }

    /// Delete what `target` names. Returns the number of files deleted, and what could not be
    /// done (one line per failure, naming the volume): a purge with failures has not kept
    /// its guarantee, and its caller must say so.
    pub async fn purge(&self, target: &Target) -> (usize, Vec<String>) {
        let mut n = 0;
        let mut failed = Vec::new();
        for cv in &self.caches {
            for fill in cv.take_fills(|f| target.names(f)) {
                fill.purge().await;
            }
            let hashes = match target {
                Target::Key(k) => vec![CacheKey::new(k.clone().into_bytes()).hash()],
                Target::Prefix(p) => {
                    cv.passes.clear();
                    let store = cv.store.clone();
                    let prefix = p.clone().into_bytes();
                    let ids = match cv.blocking(move || store.find_prefix(&prefix)).await {
                        Ok(Ok(ids)) => ids,
                        Ok(Err(e)) => {
                            failed.push(format!("volume {}: cannot walk the cache: {e}", cv.name));
                            Vec::new()
                        }
                        Err(e) => {
                            failed.push(format!("volume {}: pool: {e}", cv.name));
                            Vec::new()
                        }
                    };
                    let mut hashes: Vec<u128> = ids.iter().map(|i| i.hash()).collect();
                    hashes.sort_unstable();
                    hashes.dedup();
                    hashes
                }
            };
            let mut removed = 0;
            for h in hashes {
                match cv.remove_object(h).await {
                    Ok(k) => removed += k,
                    Err(e) => {
                        removed += e.removed();
                        failed.push(format!("volume {}: {e}", cv.name));
                    }
                }
            }
            cv.m.purges.inc_by(removed as u64);
            n += removed;
        }
        if failed.is_empty() {
            tracing::info!(?target, files = n, "cache purge");
        } else {
            tracing::error!(?target, files = n, failed = ?failed, "cache purge incomplete");
        }
        (n, failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_takes_whole_segments() {
        for (key, prefix, under) in [
            ("/dir", "/dir", true),
            ("/dir/a.bin", "/dir", true),
            ("/dir?v=1", "/dir", true),
            ("/dirx", "/dir", false),
            ("/dirx/a.bin", "/dir", false),
            ("/dir/a.bin", "/dir/", true),
            ("/dir", "/dir/", false),
            ("/dir/", "/dir/", true),
            ("/anything", "/", true),
            ("/d", "/dir", false),
        ] {
            assert_eq!(
                under_prefix(key.as_bytes(), prefix.as_bytes()),
                under,
                "{key} under {prefix}"
            );
        }
    }

    #[test]
    fn only_the_exact_bearer_token_is_authorized() {
        let p = Purge {
            token: "s3cret".into(),
            caches: Vec::new(),
        };
        assert!(p.authorized(Some("Bearer s3cret")));
        assert!(p.authorized(Some("bearer s3cret ")));
        for bad in [
            "",
            "Bearer",
            "Bearer ",
            "Bearer s3cre",
            "Bearer s3cret2",
            "Basic s3cret",
            "s3cret",
        ] {
            assert!(!p.authorized(Some(bad)), "{bad:?}");
        }
        assert!(!p.authorized(None));
    }
}
