//! The HTTP cache of a caching node (issue 11): per cache volume, a directory of entry files and
//! an in-memory index. This module knows nothing of sockets or HTTP parsing; every blocking file
//! operation it has is a plain function its callers run on the volume's pool.
//!
//! - [`key`]: cache key -> 128-bit hash -> `L1/L2/HASH-SLICE` path.
//! - [`entry`]: the on-disk format of one entry (header + page-aligned body) and its checks.
//! - [`store`]: one cache directory's files: open, write through `.tmp/` and rename, delete, walk.
//! - [`index`]: sizes, last use, eviction (sampled LRU) and admission (TinyLFU) per volume.
//! - [`sketch`]: the admission frequency sketch.
//! - [`rebuild`]: the index rebuilt from the directory after a restart.
//! - [`volume`]: one cache volume at run time (store + index + fills + open entries, upkeep).
//! - [`fill`]: one collapsed origin fetch of a slice, written by the pool, read while written.
//! - [`serve`]: the request path of a cache route (freshness, slices, conditionals, ranges).
//! - [`pass`]: objects whose answers were not storable, passed through for a while.
//! - [`purge`]: `POST /cache/purge` on the admin port.

pub mod entry;
pub mod fill;
pub mod index;
pub mod key;
pub mod pass;
pub mod purge;
pub mod rebuild;
pub mod serve;
pub mod sketch;
pub mod store;
pub mod volume;

use crate::config::Config;
use crate::metrics::Metrics;
use anyhow::Context;
use fill::Fill;
use std::sync::Arc;
use volume::CacheVolume;

/// Create a missing cache directory (before the volumes open their roots), as nginx creates a
/// `proxy_cache_path`: the last component only, so a missing parent (a disk not mounted where
/// the configuration says) stops the start naming the path instead of caching elsewhere.
pub fn create_dirs(cfg: &Config) -> anyhow::Result<()> {
    // A directory another node holds, or one inside it, refuses the start before anything is
    // made for the others.
    for v in cfg.volumes.iter().filter(|v| v.cache.is_some()) {
        store::not_inside_another_cache(&v.path)
            .and_then(|()| store::not_held_by_another(&v.path))
            .map_err(|e| anyhow::anyhow!("cache volume {:?}: {e}", v.name))?;
    }
    for v in cfg.volumes.iter().filter(|v| v.cache.is_some()) {
        match std::fs::create_dir(&v.path) {
            Ok(()) => {
                tracing::info!(volume = %v.name, path = %v.path.display(), "created the cache directory");
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                let parent = v.path.parent().unwrap_or(std::path::Path::new("/"));
                let why = if e.kind() == std::io::ErrorKind::NotFound {
                    format!("its parent {} does not exist", parent.display())
                } else {
                    e.to_string()
                };
                anyhow::bail!(
                    "cache volume {:?}: cannot create {}: {why}",
                    v.name,
                    v.path.display()
                );
            }
        }
    }
    Ok(())
}

/// Start-up: one [`CacheVolume`] per cache volume (temporary files removed, rebuild and upkeep
/// started on its pool) and the run-time form of every cache route (with `origins`' clients).
#[allow(clippy::type_complexity)]
pub fn start(
    cfg: &Config,
    volumes: &[crate::volume::Volume],
    origins: &crate::origin::Origins,
    metrics: &Metrics,
) -> anyhow::Result<(
    Vec<Option<Arc<CacheVolume<Fill>>>>,
    Vec<Option<serve::CacheRoute>>,
)> {
    let mut caches = Vec::with_capacity(cfg.volumes.len());
    for (v, vol) in cfg.volumes.iter().zip(volumes) {
        caches.push(match &v.cache {
            Some(c) => {
                let cv = CacheVolume::open(v, c, cfg.volumes.len(), vol.pool().clone(), metrics)?;
                cv.spawn_upkeep().with_context(|| {
                    format!("cache volume {:?}: cannot start its upkeep thread", v.name)
                })?;
                Some(cv)
            }
            None => None,
        });
    }
    let routes = cfg
        .routes
        .iter()
        .map(|r| {
            let name = r.origin.as_ref()?;
            Some(serve::CacheRoute {
                origin: origins.get(name)?,
                policy: Arc::new(r.cache.clone().unwrap_or_default()),
                max_ranges: cfg.http.max_ranges,
                answers_cors: r.http.cors.is_some(),
            })
        })
        .collect();
    Ok((caches, routes))
}

/// Failpoint `cache_remove`: `return(eacces)` fails every deletion of an entry's file with
/// EACCES, leaving it in place (as an immutable file or a directory the server may not write
/// would).
pub(crate) fn failpoint_remove() -> std::io::Result<()> {
    failpoint_errno("cache_remove", "eacces", libc::EACCES)
}

/// Failpoint `cache_write`: `return(enospc)` fails every cache file write (temporary file
/// creation and body writes) with ENOSPC, as a full disk would.
pub(crate) fn failpoint_write() -> std::io::Result<()> {
    failpoint_errno("cache_write", "enospc", libc::ENOSPC)
}

/// Failpoint `cache_open`: `return(emfile)` fails the opening of an entry for a request with
/// EMFILE, as a process out of descriptors would (`1*return(emfile)`: the next one only).
pub(crate) fn failpoint_open() -> std::io::Result<()> {
    failpoint_errno("cache_open", "emfile", libc::EMFILE)
}

/// Failpoint `cache_prefix_open`: `return(emfile)` fails the opening of an entry a purge by
/// prefix reads the key of with EMFILE, as a process out of descriptors would.
pub(crate) fn failpoint_prefix_open() -> std::io::Result<()> {
    failpoint_errno("cache_prefix_open", "emfile", libc::EMFILE)
}

/// `cache_commit` failpoint (e.g. `sleep(300)`): an entry's commit (on the pool) delayed.
pub(crate) fn failpoint_commit() {
    fail::fail_point!("cache_commit");
}

/// `cache_renamed` failpoint (e.g. `sleep(300)`): a commit delayed after its rename, before
/// the volume records the new file.
pub(crate) fn failpoint_renamed() {
    fail::fail_point!("cache_renamed");
}

/// Failpoint `cache_object_removed`: runs on the pool after an object's files were listed and
/// removed (`sleep(MS)` widens the window in which a fill may commit an entry the listing did
/// not see).
pub(crate) fn failpoint_object_removed() {
    fail::fail_point!("cache_object_removed");
}

/// Failpoint `cache_rebuild_level`: runs on the upkeep thread before each of the 16 steps of
/// the index rebuild after a start (`sleep(MS)` keeps the index unfinished for 16 x MS).
pub(crate) fn failpoint_rebuild_level() {
    fail::fail_point!("cache_rebuild_level");
}

/// Failpoint `cache_fill`: runs on the event loop as a fill's task starts (`1*panic(WHY)`
/// panics the next one).
pub(crate) fn failpoint_fill() {
    fail::fail_point!("cache_fill");
}

/// Failpoint `cache_opened`: runs on the pool right after an entry was opened for a request
/// (`sleep(MS)` widens the window in which an eviction may delete it before it is kept open).
pub(crate) fn failpoint_opened() {
    fail::fail_point!("cache_opened");
}

/// Failpoint `name`: `return` or `return(WORD)` fails with `errno`; another argument passes.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
fn failpoint_errno(name: &str, word: &str, errno: i32) -> std::io::Result<()> {
    fail::fail_point!(name, |arg: Option<String>| {
        match arg.as_deref() {
            None => Err(std::io::Error::from_raw_os_error(errno)),
            Some(a) if a == word => Err(std::io::Error::from_raw_os_error(errno)),
            Some(_) => Ok(()),
        }
    });
    Ok(())
}
