//! Page-cache-only file access for `offload = auto`: operations that either complete without
//! any disk I/O or say [`Nowait::WouldBlock`] at once.
//!
//! - [`read_at`]: `preadv2(RWF_NOWAIT)` — the bytes already in the page cache, or `WouldBlock`.
//! - [`open_beneath`]: `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_CACHED)` — opens
//!   only when the whole path lookup is served from the dentry cache.
//! - [`probe`] and [`VolumeSupport`]: whether this kernel and the volume's filesystem support both
//!   (EOPNOTSUPP, ENOSYS, EINVAL on old kernels or gVisor mean "no"), decided once at start and
//!   downgraded at run time if a later call still reports "unsupported"; each downgrade is logged once.
//!
//! This module never blocks on I/O and never decides where work runs; the caller (fs/open.rs,
//! send.rs) goes to the pool when it gets `WouldBlock` or the volume is unsupported.

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::{Errno, ReadWriteFlags};
use std::io::{self, IoSliceMut};
use std::sync::atomic::{AtomicU8, Ordering};

/// The outcome of a no-I/O attempt.
#[derive(Debug, PartialEq, Eq)]
pub enum Nowait<T> {
    /// Done without I/O.
    Ready(T),
    /// Completing it needs I/O (or the lookup left the cache): do it on the pool.
    WouldBlock,
}

/// Errno values by which a kernel or filesystem says "this flag is not supported here".
pub fn is_unsupported(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL)
    )
}

/// Read at `offset` into `buf` only what the page cache holds: `Ready(n)` with `n` bytes (fewer
/// than asked when only part is resident or at EOF; 0 at or past EOF, or when the first page is
/// resident only past EOF), or `WouldBlock` when the first page is not resident. Kernels submit
/// readahead for the missing pages before answering `WouldBlock`, so the pool read that follows
/// often finds I/O already in flight.
///
/// Errors are the read's own, and "unsupported" ones ([`is_unsupported`]) when the filesystem has
/// no RWF_NOWAIT (tmpfs, procfs, FUSE on current kernels).
pub fn read_at(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<Nowait<usize>> {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("nowait::read_at", |arg| {
        match arg.as_deref() {
            Some("wouldblock") => Ok(Nowait::WouldBlock),
            _ => Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
        }
    });
    loop {
        let mut bufs = [IoSliceMut::new(buf)];
        match rustix::io::preadv2(fd, &mut bufs, offset, ReadWriteFlags::NOWAIT) {
            Ok(n) => return Ok(Nowait::Ready(n)),
            Err(Errno::AGAIN) => return Ok(Nowait::WouldBlock),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

fn page_size() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as u64,
        _ => 4096,
    })
}

/// `cachestat(2)` (Linux 6.5+; the number is the same on every architecture).
const SYS_CACHESTAT: libc::c_long = 451;

/// Whether every page of `offset..offset + len` (`len > 0`) is in the page cache, asked with
/// `cachestat(2)`, which only counts pages: unlike an RWF_NOWAIT read of a missing page it
/// starts no readahead, so a miss leaves all I/O (and its block-mapping lookups) to the pool.
/// Errors: ENOSYS before 6.5; EPERM on kernels that allow it only to the file's owner or writers.
pub fn all_resident(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<bool> {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("nowait::all_resident", |_| Err(
        io::Error::from_raw_os_error(libc::EPERM)
    ));
    if len == 0 {
        return Ok(true);
    }
    let page = page_size();
    let pages = (offset + len - 1) / page - offset / page + 1;
    let range = CachestatRange { off: offset, len };
    let mut cs = Cachestat::default();
    // SAFETY: cachestat reads `range` and writes `cs`, both live repr(C) structs with the
    // kernel's layout; flags must be 0. No memory is retained by the kernel.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &range as *const CachestatRange,
            &mut cs as *mut Cachestat,
            0 as libc::c_uint,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cs.nr_cache >= pages)
}

use super::open::{BENEATH, OPEN_FLAGS};

/// Open `rel` (relative, no leading `/`) beneath the directory `root` without any I/O:
/// `Ready(fd)` when every path component was in the dentry cache, `WouldBlock` when the lookup
/// would have to read a directory or inode from disk. Errors as for `openat2` (ENOENT, ELOOP,
/// EXDEV for an escape attempt, ...). The caller checks the file type with fstat (no I/O on an
/// open fd of a local filesystem) and rejects what is not a regular file.
pub fn open_beneath(root: BorrowedFd<'_>, rel: &str) -> io::Result<Nowait<OwnedFd>> {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("nowait::open_beneath", |arg| {
        match arg.as_deref() {
            Some("wouldblock") => Ok(Nowait::WouldBlock),
            _ => Err(io::Error::from_raw_os_error(libc::ENOSYS)),
        }
    });
    let rel = if rel.is_empty() { "." } else { rel };
    loop {
        match rustix::fs::openat2(
            root,
            rel,
            OPEN_FLAGS,
            Mode::empty(),
            BENEATH | ResolveFlags::CACHED,
        ) {
            Ok(fd) => return Ok(Nowait::Ready(fd)),
            Err(Errno::AGAIN) => return Ok(Nowait::WouldBlock),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

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
    /// Whether [`all_resident`] answers on this volume (assumed until it errs once).
    cachestat: AtomicU8,
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

    /// True while [`all_resident`] may be asked first.
    pub fn cachestat(&self) -> bool {
        self.cachestat.load(Ordering::Relaxed) != UNSUPPORTED
    }

    /// [`all_resident`] failed (ENOSYS, EPERM...): reads on this volume go straight to RWF_NOWAIT
    /// (which starts readahead for a missing page from the caller's thread). Logged once.
    pub fn cachestat_failed(&self, err: &io::Error) {
        if self.cachestat.swap(UNSUPPORTED, Ordering::Relaxed) != UNSUPPORTED {
            tracing::info!(volume = %self.volume, "offload=auto: cachestat unavailable ({err}); residency is checked by RWF_NOWAIT reads alone");
        }
    }

    /// A real `open_beneath` reported "unsupported": stop trying (logged once).
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
    let open = match open_beneath(root, ".") {
        // WouldBlock still proves the kernel knows the flag.
        Ok(_) => Probe::Supported,
        Err(e) if is_unsupported(&e) => Probe::Unsupported(e.to_string()),
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
pub(crate) mod tests {
    use super::*;
    use std::fs::File;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    fn dir_fd(path: &std::path::Path) -> OwnedFd {
        rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap()
    }

    fn evict(f: &File) {
        f.sync_all().unwrap();
        rustix::fs::fadvise(f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    }

    /// A temp dir on a disk filesystem with RWF_NOWAIT: next to the test binary, in the target
    /// directory (/tmp may be a tmpfs, which has no RWF_NOWAIT).
    pub(crate) fn disk_tempdir() -> tempfile::TempDir {
        let exe = std::env::current_exe().unwrap();
        tempfile::tempdir_in(exe.parent().unwrap()).unwrap()
    }

    #[test]
    fn resident_file_reads_inline_and_evicted_file_would_block() {
        let dir = disk_tempdir();
        let path = dir.path().join("data");
        let content: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let f = File::open(&path).unwrap();
        // Written just now: resident.
        let mut buf = vec![0u8; 64 * 1024];
        assert_eq!(
            read_at(f.as_fd(), &mut buf, 4096).unwrap(),
            Nowait::Ready(64 * 1024)
        );
        assert_eq!(&buf[..], &content[4096..4096 + 64 * 1024]);
        // Past EOF: 0, not WouldBlock.
        assert_eq!(
            read_at(f.as_fd(), &mut buf, content.len() as u64).unwrap(),
            Nowait::Ready(0)
        );
        evict(&f);
        assert_eq!(
            read_at(f.as_fd(), &mut buf, 128 * 1024).unwrap(),
            Nowait::WouldBlock
        );
    }

    #[test]
    fn all_resident_counts_pages_without_reading() {
        let dir = disk_tempdir();
        let path = dir.path().join("data");
        std::fs::write(&path, vec![1u8; 512 * 1024]).unwrap();
        let f = File::open(&path).unwrap();
        assert!(all_resident(f.as_fd(), 0, 512 * 1024).unwrap());
        assert!(all_resident(f.as_fd(), 1000, 5000).unwrap());
        evict(&f);
        assert!(!all_resident(f.as_fd(), 0, 4096).unwrap());
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::Random).unwrap();
        let mut b = vec![0u8; 8192];
        rustix::io::pread(&f, &mut b, 64 * 1024).unwrap();
        assert!(all_resident(f.as_fd(), 64 * 1024 + 10, 8000).unwrap());
        assert!(!all_resident(f.as_fd(), 60 * 1024, 16 * 1024).unwrap());
        // Asking started no readahead.
        assert!(!all_resident(f.as_fd(), 0, 4096).unwrap());
    }

    #[test]
    fn partially_resident_file_gives_a_short_read() {
        let dir = disk_tempdir();
        let path = dir.path().join("data");
        std::fs::write(&path, vec![7u8; 1024 * 1024]).unwrap();
        let f = File::open(&path).unwrap();
        evict(&f);
        // Make only the first 64 KiB resident, with readahead off so no more comes in.
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::Random).unwrap();
        let mut small = vec![0u8; 64 * 1024];
        rustix::io::pread(&f, &mut small, 0).unwrap();
        let mut buf = vec![0u8; 512 * 1024];
        match read_at(f.as_fd(), &mut buf, 0).unwrap() {
            Nowait::Ready(n) => {
                assert!(
                    (64 * 1024..512 * 1024).contains(&n),
                    "short read expected, got {n}"
                );
                assert!(buf[..n].iter().all(|&b| b == 7));
            }
            Nowait::WouldBlock => panic!("the first pages are resident"),
        }
    }

    #[test]
    fn open_beneath_opens_cached_paths_and_refuses_escapes() {
        let dir = disk_tempdir();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let mut f = File::create(dir.path().join("sub/a.txt")).unwrap();
        f.write_all(b"hello").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("abs")).unwrap();
        std::os::unix::fs::symlink("../..", dir.path().join("sub/up")).unwrap();
        let root = dir_fd(dir.path());
        // Just created: every dentry is cached.
        match open_beneath(root.as_fd(), "sub/a.txt").unwrap() {
            Nowait::Ready(fd) => assert!(fd.as_raw_fd() >= 0),
            Nowait::WouldBlock => panic!("fresh dentries must be cached"),
        }
        // An escape is refused (EXDEV) or, where the scoped `..` walk cannot stay in RCU mode,
        // answered WouldBlock, so the pool's blocking open refuses it; never opened.
        for escape in ["../x", "/etc/hostname", "abs", "sub/up/etc"] {
            match open_beneath(root.as_fd(), escape) {
                Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EXDEV), "{escape}: {e}"),
                Ok(Nowait::WouldBlock) => {
                    let e = rustix::fs::openat2(&root, escape, OPEN_FLAGS, Mode::empty(), BENEATH)
                        .unwrap_err();
                    assert_eq!(e, Errno::XDEV, "{escape}");
                }
                Ok(Nowait::Ready(_)) => panic!("{escape} escaped the root"),
            }
        }
        // A name never looked up has no (negative) dentry yet: the lookup would read the
        // directory, so WouldBlock; once a blocking lookup cached the miss, ENOENT inline.
        match open_beneath(root.as_fd(), "sub/missing") {
            Ok(Nowait::WouldBlock) => {}
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::NotFound),
            Ok(Nowait::Ready(_)) => panic!("opened a missing file"),
        }
        assert!(!dir.path().join("sub/missing").exists());
        let err = open_beneath(root.as_fd(), "sub/missing").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn open_beneath_does_not_hang_on_a_fifo() {
        let dir = disk_tempdir();
        let fifo = dir.path().join("pipe");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let root = dir_fd(dir.path());
        // O_NONBLOCK: returns at once (a FIFO with no writer opens fine for reading).
        let fd = match open_beneath(root.as_fd(), "pipe").unwrap() {
            Nowait::Ready(fd) => fd,
            Nowait::WouldBlock => panic!("cached"),
        };
        let st = rustix::fs::fstat(&fd).unwrap();
        assert_eq!(
            rustix::fs::FileType::from_raw_mode(st.st_mode),
            rustix::fs::FileType::Fifo
        );
    }

    #[test]
    fn probe_finds_support_on_disk() {
        let dir = disk_tempdir();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/f"), b"x").unwrap();
        let root = dir_fd(dir.path());
        assert_eq!(probe(root.as_fd()), (Probe::Supported, Probe::Supported));
        let s = VolumeSupport::probe("disk", root.as_fd());
        assert!(s.open_inline() && s.read_inline());
    }

    #[test]
    fn probe_of_an_empty_volume_does_not_know_about_reads() {
        let dir = disk_tempdir();
        let root = dir_fd(dir.path());
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
        let root = dir_fd(dir.path());
        let (_, read) = probe(root.as_fd());
        assert!(
            matches!(read, Probe::Unsupported(_)),
            "tmpfs RWF_NOWAIT: {read:?}"
        );
    }
}
