//! Which page-cache-only operations a volume may use: [`probe`] tries, once at start, the
//! RESOLVE_CACHED open requests use ([`open_file_cached`]) and an RWF_NOWAIT read
//! ([`read_at`]); EOPNOTSUPP, ENOSYS or EINVAL (old kernels, gVisor, tmpfs, FUSE) mean "no".
//! [`VolumeSupport`] holds the answer and is downgraded at run time when a later call still
//! reports "unsupported" (each downgrade logged once).
//!
//! Owns that support state; it must not decide where work runs (the volume does, from it).

use super::nowait::{is_unsupported, read_at};
use super::open::{open_file_cached, OpenError};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
const UNKNOWN: u8 = 0;
const SUPPORTED: u8 = 1;
const UNSUPPORTED: u8 = 2;

/// Which no-I/O operations one volume may use; shared by the event-loop workers of that volume.
/// Starts from [`probe`]; [`VolumeSupport::read_unsupported`] / [`VolumeSupport::open_unsupported`]
/// downgrade it at run time (logged once per volume and operation).
#[derive(Debug)]
pub struct VolumeSupport {
    volume: String,
    open: AtomicU8,
    read: AtomicU8,
    /// Whether [`all_resident`](super::nowait::all_resident) answers on this volume (assumed until it errs once).
    cachestat: AtomicU8,
    /// Whether [`all_uptodate`](super::nowait::all_uptodate) answers on this volume (assumed until it errs once).
    mincore: AtomicU8,
}

/// What [`probe`] found for one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    Supported,
    /// The kernel or filesystem refused the flag; the text says which errno.
    Unsupported(String),
    /// Nothing to try it on (no regular file found in the volume at start); assumed supported
    /// until a real call says otherwise.
    Unknown,
}

impl VolumeSupport {
    /// Support state from probe results; logs (once, at start) what falls back to the pool.
    pub fn new(volume: &str, open: Probe, read: Probe) -> VolumeSupport {
        let state = |p: &Probe, what: &str| match p {
            Probe::Supported => SUPPORTED,
            Probe::Unknown => UNKNOWN,
            Probe::Unsupported(why) => {
                tracing::warn!(
                    volume,
                    "offload=auto: {what} is not supported on this volume ({why}); \
                     these operations always go to the volume's pool (offload=always behaviour)"
                );
                UNSUPPORTED
            }
        };
        VolumeSupport {
            open: AtomicU8::new(state(&open, "openat2 RESOLVE_CACHED")),
            read: AtomicU8::new(state(&read, "preadv2 RWF_NOWAIT")),
            cachestat: AtomicU8::new(UNKNOWN),
            mincore: AtomicU8::new(UNKNOWN),
            volume: volume.to_owned(),
        }
    }

    /// Probe the volume whose root directory is `root` and build its support state.
    pub fn probe(volume: &str, root: BorrowedFd<'_>) -> VolumeSupport {
        let (open, read) = probe(root);
        VolumeSupport::new(volume, open, read)
    }

    /// True when opens may be tried inline with RESOLVE_CACHED.
    pub fn open_inline(&self) -> bool {
        self.open.load(Ordering::Relaxed) != UNSUPPORTED
    }

    /// True when body reads may be tried inline with RWF_NOWAIT.
    pub fn read_inline(&self) -> bool {
        self.read.load(Ordering::Relaxed) != UNSUPPORTED
    }

    /// Neither operation can run inline: the volume behaves as `offload = always`.
    pub fn fully_unsupported(&self) -> bool {
        !self.open_inline() && !self.read_inline()
    }

    /// True while [`all_resident`](super::nowait::all_resident) may be asked first.
    pub fn cachestat(&self) -> bool {
        self.cachestat.load(Ordering::Relaxed) != UNSUPPORTED
    }

    /// [`all_resident`](super::nowait::all_resident) failed (ENOSYS, EPERM...): reads on this volume go straight to RWF_NOWAIT
    /// (which starts readahead for a missing page from the caller's thread). Logged once.
    pub fn cachestat_failed(&self, err: &io::Error) {
        if self.cachestat.swap(UNSUPPORTED, Ordering::Relaxed) != UNSUPPORTED {
            tracing::info!(volume = %self.volume, "offload=auto: cachestat unavailable ({err}); residency is checked by RWF_NOWAIT reads alone");
        }
    }

    /// True while [`all_uptodate`](super::nowait::all_uptodate) may prove a range resident
    /// before an inline sendfile.
    pub fn mincore(&self) -> bool {
        self.mincore.load(Ordering::Relaxed) != UNSUPPORTED
    }

    /// [`all_uptodate`](super::nowait::all_uptodate) failed (the filesystem cannot mmap...):
    /// resident bytes on this volume are copied with RWF_NOWAIT reads instead. Logged once.
    pub fn mincore_failed(&self, err: &io::Error) {
        if self.mincore.swap(UNSUPPORTED, Ordering::Relaxed) != UNSUPPORTED {
            tracing::info!(volume = %self.volume, "offload=auto: mincore over a mapping unavailable ({err}); resident bytes are copied with RWF_NOWAIT reads");
        }
    }

    /// A real RESOLVE_CACHED open reported "unsupported": stop trying (logged once).
    pub fn open_unsupported(&self, err: &io::Error) {
        if self.open.swap(UNSUPPORTED, Ordering::Relaxed) != UNSUPPORTED {
            tracing::warn!(volume = %self.volume, "offload=auto: openat2 RESOLVE_CACHED failed ({err}); opens on this volume go to the pool from now on");
        }
    }

    /// A real `read_at` reported "unsupported": stop trying (logged once).
    pub fn read_unsupported(&self, err: &io::Error) {
        if self.read.swap(UNSUPPORTED, Ordering::Relaxed) != UNSUPPORTED {
            tracing::warn!(volume = %self.volume, "offload=auto: preadv2 RWF_NOWAIT failed ({err}); reads on this volume go to the pool from now on");
        }
    }
}

/// Try both operations on the volume whose root directory is `root`: a RESOLVE_CACHED open of
/// the root itself, and an RWF_NOWAIT read of the first regular file found near the root (a
/// bounded search). Reads nothing but directory entries and at most one byte of one file.
pub fn probe(root: BorrowedFd<'_>) -> (Probe, Probe) {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("nowait::probe", |arg| {
        let why = arg.unwrap_or_else(|| "injected by failpoint".into());
        (Probe::Unsupported(why.clone()), Probe::Unsupported(why))
    });
    // The very open requests use, of the root itself (a directory, so with no index names it
    // answers Directory once opened).
    let open = match open_file_cached(root, b"", &[]) {
        // WouldBlock still proves the kernel knows the flag.
        Ok(_) | Err(OpenError::NotFound | OpenError::Directory) => Probe::Supported,
        Err(OpenError::Io(e)) if is_unsupported(&e) => Probe::Unsupported(e.to_string()),
        // Any other error (EACCES...) is not about support; real opens will report it.
        Err(_) => Probe::Supported,
    };
    let read = match find_regular_file(root) {
        None => Probe::Unknown,
        Some(fd) => {
            let mut byte = [0u8; 1];
            match read_at(fd.as_fd(), &mut byte, 0) {
                Ok(_) => Probe::Supported,
                Err(e) if is_unsupported(&e) => Probe::Unsupported(e.to_string()),
                Err(_) => Probe::Unknown,
            }
        }
    };
    (open, read)
}

/// The first regular file in a breadth-first walk of at most `LIMIT` directory entries beneath
/// `root` (symlinks not followed), opened read-only.
fn find_regular_file(root: BorrowedFd<'_>) -> Option<OwnedFd> {
    const LIMIT: usize = 512;
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK;
    let mut seen = 0usize;
    let mut queue: std::collections::VecDeque<OwnedFd> = std::collections::VecDeque::new();
    queue.push_back(rustix::fs::openat(root, ".", flags | OFlags::DIRECTORY, Mode::empty()).ok()?);
    while let Some(dir) = queue.pop_front() {
        let mut entries = rustix::fs::Dir::read_from(&dir).ok()?;
        while let Some(Ok(ent)) = entries.next() {
            seen += 1;
            if seen > LIMIT {
                return None;
            }
            let name = ent.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let kind = match ent.file_type() {
                rustix::fs::FileType::Unknown => {
                    match rustix::fs::statat(&dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(st) => rustix::fs::FileType::from_raw_mode(st.st_mode),
                        Err(_) => continue,
                    }
                }
                k => k,
            };
            match kind {
                rustix::fs::FileType::RegularFile => {
                    if let Ok(fd) = rustix::fs::openat(&dir, name, flags, Mode::empty()) {
                        return Some(fd);
                    }
                }
                rustix::fs::FileType::Directory if queue.len() < 64 => {
                    if let Ok(fd) =
                        rustix::fs::openat(&dir, name, flags | OFlags::DIRECTORY, Mode::empty())
                    {
                        queue.push_back(fd);
                    }
                }
                _ => {}
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::test_support::{disk_tempdir, root_fd};

    #[test]
    fn probe_finds_support_on_disk() {
        let dir = disk_tempdir();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/f"), b"x").unwrap();
        let root = root_fd(dir.path());
        assert_eq!(probe(root.as_fd()), (Probe::Supported, Probe::Supported));
        let s = VolumeSupport::probe("disk", root.as_fd());
        assert!(s.open_inline() && s.read_inline());
    }

    #[test]
    fn probe_of_an_empty_volume_does_not_know_about_reads() {
        let dir = disk_tempdir();
        let root = root_fd(dir.path());
        assert_eq!(probe(root.as_fd()).1, Probe::Unknown);
        let s = VolumeSupport::probe("empty", root.as_fd());
        assert!(s.read_inline());
        s.read_unsupported(&io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        assert!(!s.read_inline());
        assert!(s.open_inline());
    }

    /// tmpfs has no RWF_NOWAIT for buffered reads on current kernels (EOPNOTSUPP). This checks
    /// the probe reports it; if a future kernel adds it, the assertion says so plainly.
    #[test]
    fn probe_reports_tmpfs_reads_unsupported() {
        let shm = std::path::Path::new("/dev/shm");
        assert!(shm.is_dir(), "/dev/shm (tmpfs) is needed for this test");
        let dir = tempfile::tempdir_in(shm).unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let root = root_fd(dir.path());
        let (_, read) = probe(root.as_fd());
        assert!(
            matches!(read, Probe::Unsupported(_)),
            "tmpfs RWF_NOWAIT: {read:?}"
        );
    }
}
