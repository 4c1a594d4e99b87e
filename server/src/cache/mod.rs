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

pub mod entry;
pub mod index;
pub mod key;
pub mod rebuild;
pub mod sketch;
pub mod store;

/// Failpoint `cache_write`: `return(enospc)` fails every cache file write (temporary file
/// creation and body writes) with ENOSPC, as a full disk would.
pub(crate) fn failpoint_write() -> std::io::Result<()> {
    fail::fail_point!("cache_write", |arg: Option<String>| {
        match arg.as_deref() {
            Some("enospc") | None => Err(std::io::Error::from_raw_os_error(libc::ENOSPC)),
            Some(_) => Ok(()),
        }
    });
    Ok(())
}
