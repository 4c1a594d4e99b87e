//! File primitives beneath a volume root: the openat2 open ([`open`]), page-cache-only reads and
//! residency checks ([`nowait`]), which bytes sendfile can send without a read ([`mincore`]), reading a directory for a listing ([`listdir`]), keeping the server's own code in memory
//! ([`pin`]), the support probe for them ([`probe`]), the open-file cache
//! ([`cache`]), sendfile of one chunk ([`sendfile`]), the blocks a thread submitted for
//! reading ([`rusage`]) and small configuration files read whole ([`small`]).
//!
//! Each runs wherever its caller puts it (a pool thread or the event loop); this module never
//! decides that and imports nothing above it: no pool, no volume, no offload mode, no HTTP.

pub mod cache;
pub mod listdir;
pub mod mincore;
pub mod nowait;
pub mod open;
pub mod pin;
pub mod probe;
pub mod rusage;
pub mod sendfile;
pub mod small;

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

    /// A file holding `content` in a fresh directory on a disk filesystem, opened for reading.
    pub(crate) fn data_file(content: &[u8]) -> (tempfile::TempDir, std::fs::File) {
        let dir = disk_tempdir();
        let path = dir.path().join("data");
        std::fs::write(&path, content).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        (dir, f)
    }

    /// Set `path`'s access time an hour before its modification time, so that the next read
    /// that updates access times changes it (relatime and strictatime both do then).
    pub(crate) fn age_atime(path: &std::path::Path) {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).unwrap();
        let old = rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec {
                tv_sec: m.mtime() - 3600,
                tv_nsec: 0,
            },
            last_modification: rustix::fs::Timespec {
                tv_sec: m.mtime(),
                tv_nsec: m.mtime_nsec(),
            },
        };
        rustix::fs::utimensat(rustix::fs::CWD, path, &old, rustix::fs::AtFlags::empty()).unwrap();
    }

    /// `path`'s access time (seconds, nanoseconds).
    pub(crate) fn atime(path: &std::path::Path) -> (i64, i64) {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).unwrap();
        (m.atime(), m.atime_nsec())
    }

    /// Precondition of the O_NOATIME tests: on this filesystem a plain read of an aged file
    /// changes its access time (it does not on a `noatime` mount, where such a test could not
    /// fail: it fails here instead, saying why). Leaves the access time aged again.
    pub(crate) fn assert_plain_read_updates_atime(path: &std::path::Path) {
        use std::io::Read;
        age_atime(path);
        let before = atime(path);
        let mut b = [0u8; 1];
        std::fs::File::open(path)
            .unwrap()
            .read_exact(&mut b)
            .unwrap();
        assert_ne!(
            atime(path),
            before,
            "a plain read did not update the access time of {} (noatime mount?): the O_NOATIME \
             tests need a filesystem mounted relatime or strictatime",
            path.display()
        );
        age_atime(path);
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

    /// Evict `f`, then `read` it; returns what the read gave and the blocks this thread
    /// submitted during it. An RWF_NOWAIT read that misses submits the read of what it asked
    /// (measured: 128 blocks for 64 KiB) without waiting, and a disk that answers from its host's
    /// cache can complete it before the read returns: then the read gets its bytes (seen 20 times
    /// in a row on the CI machine), which is no wait either, and the blocks show that it read.
    pub(crate) fn read_evicted<T>(f: &std::fs::File, read: impl FnOnce() -> T) -> (T, i64) {
        evict(f);
        let before = crate::fs::rusage::blocks_read();
        let r = read();
        (r, crate::fs::rusage::blocks_read() - before)
    }

    /// Drop a file's pages from the page cache (written back first). DONTNEED skips pages the
    /// kernel still holds in per-CPU LRU batches or that are under writeback, which happens on a
    /// loaded machine, so this asks again until mincore(2) sees no resident page (up to 3 s).
    pub(crate) fn evict(f: &std::fs::File) {
        f.sync_all().unwrap();
        let len = f.metadata().unwrap().len() as usize;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        loop {
            rustix::fs::fadvise(f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
            let resident = resident_pages(f, len);
            if resident == 0 {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{resident} pages stay resident after DONTNEED"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Pages of the first `len` bytes of `f` in the page cache (mincore(2) on a mapping, which
    /// faults nothing in).
    pub(crate) fn resident_pages(f: &std::fs::File, len: usize) -> usize {
        use std::os::fd::AsRawFd;
        if len == 0 {
            return 0;
        }
        // SAFETY: a read-only shared mapping of a file we own, unmapped before returning; mincore
        // writes one byte per page into a vector of exactly that many bytes.
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            );
            assert_ne!(map, libc::MAP_FAILED, "mmap for mincore");
            let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
            let mut vec = vec![0u8; len.div_ceil(page)];
            let rc = libc::mincore(map, len, vec.as_mut_ptr());
            libc::munmap(map, len);
            assert_eq!(rc, 0, "mincore");
            vec.iter().filter(|&&b| b & 1 == 1).count()
        }
    }
}
