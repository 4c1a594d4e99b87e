//! `POST /cache/purge` on the admin port: delete one cached object (every slice of it) or every
//! object whose key is under a path prefix (whole segments: `/dir` is not a prefix of
//! `/dirx`), on every cache volume. A purge's path is made canonical as cache keys are
//! ([`crate::resolve::canonical`]): `key=/n1.bin` purges what `/%6e1.bin` or `//n1.bin` stored.
//!
//! Off unless `[admin] purge_token_file` names a file holding a bearer token (a Kubernetes
//! Secret can be mounted there); a request without exactly `Authorization: Bearer TOKEN`
//! changes nothing. The file is checked at start-up (unreadable, empty or more than one line:
//! the server does not start) and read again by every purge request ([`Purge::check`]), so
//! rotating the Secret or deleting the file revokes the old token at once; a file unreadable at
//! request time refuses the purge. Deletions run on each volume's pool. It owns the token check
//! and the purge itself, not the HTTP routing (that is [`crate::admin`]).
//!
//! Guarantee: once a purge answered, nothing fetched from the origin before it is served from
//! the cache. Fills of a purged object still under way are first taken out of reach (new
//! requests start their own fetch) and told to store nothing ([`Fill::purge`]; one already
//! committing is waited for), then the stored files are deleted.

use super::fill::Fill;
use super::key::{under_prefix, CacheKey};
use super::volume::CacheVolume;
use crate::config::Config;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Largest token file read: a bearer token is one short line.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;

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
    /// query as the origin is sent it ([`crate::origin::encode_target`], as keys are).
    pub fn parse(value: &str, prefix: bool) -> Result<Target, crate::resolve::ResolveError> {
        let (path, query) = match value.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (value, None),
        };
        // No request carries a raw control byte (NUL, CR, LF...): such a value names nothing.
        if value.chars().any(char::is_control) {
            return Err(crate::resolve::ResolveError::Bad(
                "a control character (NUL, CR, LF...) is in no request target",
            ));
        }
        // A prefix is taken as written: `.`/`..` would widen it (`/a/..` is every object).
        let dot = |seg: &str| {
            crate::resolve::percent_decode(seg.as_bytes())
                .is_ok_and(|d| d.as_slice() == b"." || d.as_slice() == b"..")
        };
        if prefix && path.split('/').any(dot) {
            return Err(crate::resolve::ResolveError::Bad(
                "a purge prefix has no '.' or '..' segments (it is matched as written)",
            ));
        }
        let mut v = crate::resolve::canonical(path)?;
        if let Some(q) = query {
            v.push('?');
            v.push_str(&crate::origin::encode_target(q));
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

/// Read the bearer token in `path`: the file's one line, surrounding whitespace (a trailing
/// newline) stripped. An unreadable file, one larger than [`MAX_TOKEN_FILE_BYTES`], one holding
/// no token or more than one line, or a token with whitespace, control characters or anything
/// but visible ASCII inside is an error saying so (the token itself is never in the message).
pub fn read_token(path: &Path) -> Result<String, String> {
    let shown = path.display();
    let bytes = crate::fs::small::read(path, MAX_TOKEN_FILE_BYTES, "one token")?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{shown} is not UTF-8 text"))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("{shown} holds no token"));
    }
    if token.contains(['\n', '\r']) {
        return Err(format!(
            "{shown} holds more than one line: it must hold exactly one token (a trailing newline is fine)"
        ));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "the token in {shown} contains whitespace or control characters: a bearer token is one word"
        ));
    }
    // An HTTP field value carries no other characters that a client can send and we can
    // compare (RFC 6750's b64token is narrower still): such a token could never be matched.
    if !token.chars().all(|c| c.is_ascii_graphic()) {
        return Err(format!(
            "the token in {shown} has characters that are not visible ASCII: no Authorization field could carry it"
        ));
    }
    Ok(token.to_string())
}

/// The purge endpoint's state: the token file and the cache volumes.
///
/// The token is not kept: every request reads the file again ([`Purge::check`]; purges are
/// rare, and a read of a small file costs less than getting a cache keyed by its metadata right
/// across a Secret's symlink swap).
pub struct Purge {
    token_file: PathBuf,
    caches: Vec<Arc<CacheVolume<Fill>>>,
}

/// Why a purge request is not let through.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// No or a wrong `Authorization: Bearer` (401).
    Unauthorized,
    /// The token file cannot be read now, or holds no single token: nothing may be purged
    /// (the log names the file and why, never the token; the caller is told neither).
    TokenFile,
}

/// The start-up check of `admin.purge_token_file` (when set): a file that cannot be read or
/// holds no single token ([`read_token`]) stops the server. Run before any cache directory or
/// port is touched.
pub fn check_token_file(cfg: &Config) -> anyhow::Result<()> {
    let path = cfg.admin.purge_token_file.as_str();
    if !path.is_empty() {
        read_token(Path::new(path)).map_err(|e| anyhow::anyhow!("admin.purge_token_file: {e}"))?;
    }
    Ok(())
}

impl Purge {
    /// `None` when purging is disabled (no token file configured); the file itself is checked
    /// by [`check_token_file`] at start and read by every purge.
    pub fn from_config(
        cfg: &Config,
        caches: &[Option<Arc<CacheVolume<Fill>>>],
    ) -> anyhow::Result<Option<Arc<Purge>>> {
        let path = cfg.admin.purge_token_file.as_str();
        if path.is_empty() {
            return Ok(None);
        }
        let token_file = PathBuf::from(path);
        Ok(Some(Arc::new(Purge {
            token_file,
            caches: caches.iter().flatten().cloned().collect(),
        })))
    }

    /// Is `authorization` exactly `Bearer TOKEN` for the token the file holds now? The file is
    /// read off the calling event loop; when it cannot be read the answer is
    /// [`Refused::TokenFile`] (logged), never a pass.
    pub async fn check(&self, authorization: Option<&str>) -> Result<(), Refused> {
        let path = self.token_file.clone();
        let token = match tokio::task::spawn_blocking(move || read_token(&path)).await {
            Ok(r) => r,
            Err(e) => Err(format!("reading {} failed: {e}", self.token_file.display())),
        };
        let token = token.map_err(|e| {
            tracing::error!(
                error = %e,
                "cache purge refused: admin.purge_token_file is unreadable or holds no single token"
            );
            Refused::TokenFile
        })?;
        if authorized(&token, authorization) {
            Ok(())
        } else {
            Err(Refused::Unauthorized)
        }
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
                        Ok(Ok((ids, 0))) => ids,
                        Ok(Ok((ids, unread))) => {
                            failed.push(format!("volume {}: {unread} entries could not be read (out of descriptors): they may be under the prefix and stay; purge again", cv.name));
                            ids
                        }
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
        // (Not a field named `target`: JSON log lines have tracing's own.)
        let (by, path) = match target {
            Target::Key(k) => ("key", k),
            Target::Prefix(p) => ("prefix", p),
        };
        if failed.is_empty() {
            tracing::info!(by, path = %path, files = n, "cache purge");
        } else {
            tracing::error!(by, path = %path, files = n, failed = ?failed, "cache purge incomplete");
        }
        (n, failed)
    }
}

/// True for exactly `Bearer TOKEN` (compared in constant time).
fn authorized(token: &str, authorization: Option<&str>) -> bool {
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
    let (a, b) = (given.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
        let token = "s3cret";
        assert!(authorized(token, Some("Bearer s3cret")));
        assert!(authorized(token, Some("bearer s3cret ")));
        for bad in [
            "",
            "Bearer",
            "Bearer ",
            "Bearer s3cre",
            "Bearer s3cret2",
            "Basic s3cret",
            "s3cret",
        ] {
            assert!(!authorized(token, Some(bad)), "{bad:?}");
        }
        assert!(!authorized(token, None));
    }

    #[test]
    fn a_token_file_holds_one_token() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("token");
        for (text, want) in [
            ("t0ken\n", Ok("t0ken")),
            ("  t0ken \r\n", Ok("t0ken")),
            ("", Err("holds no token")),
            (" \n\t\n", Err("holds no token")),
            ("tok1\ntok2", Err("more than one line")),
            ("tok1\r\ntok2\n", Err("more than one line")),
            ("tok 1", Err("whitespace or control characters")),
            ("tok\u{1}1", Err("whitespace or control characters")),
            // No Authorization field could carry it (a client's bytes are not UTF-8 to us).
            ("t\u{f6}k", Err("not visible ASCII")),
        ] {
            std::fs::write(&f, text).expect("write");
            match (read_token(&f), want) {
                (Ok(t), Ok(w)) => assert_eq!(t, w, "{text:?}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{text:?}: {e}"),
                (got, want) => panic!("{text:?}: {got:?}, want {want:?}"),
            }
        }
        std::fs::write(&f, vec![b'a'; 5000]).expect("write");
        assert!(read_token(&f).is_err_and(|e| e.contains("larger than")));
        let e = read_token(&dir.path().join("gone")).expect_err("missing");
        assert!(e.contains("cannot read") && e.contains("gone"), "{e}");
    }
}
