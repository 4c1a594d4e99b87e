//! File primitives beneath a volume root: the openat2 open ([`open`]), page-cache-only reads and
//! residency checks ([`nowait`]), reading a directory for a listing ([`listdir`]), the support probe for them ([`probe`]), the open-file cache
//! ([`cache`]) and sendfile of one chunk ([`sendfile`]).
//!
//! Each runs wherever its caller puts it (a pool thread or the event loop); this module never
//! decides that and imports nothing above it: no pool, no volume, no offload mode, no HTTP.

pub mod cache;
pub mod listdir;
pub mod nowait;
pub mod open;
pub mod probe;
pub mod sendfile;

/// Helpers for unit tests of files on a real disk.
#[cfg(test)]
pub(crate) mod test_support {
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::OwnedFd;

    /// A temp dir on a disk filesystem with RWF_NOWAIT: next to the test binary, in the target
    /// directory (/tmp may be a tmpfs, which has no RWF_NOWAIT).
    pub(crate) fn disk_tempdir() -> tempfile::TempDir {
        let exe = std::env::current_exe().unwrap();
        tempfile::tempdir_in(exe.parent().unwrap()).unwrap()
    }

    /// An O_PATH descriptor of a directory, as a volume's root.
    pub(crate) fn root_fd(path: &std::path::Path) -> OwnedFd {
        rustix::fs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap()
    }

    /// Drop a file's pages from the page cache (written back first).
    pub(crate) fn evict(f: &std::fs::File) {
        f.sync_all().unwrap();
        rustix::fs::fadvise(f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    }
}
