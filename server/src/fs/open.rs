//! Opening a file beneath a volume root: openat2 with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
//! relative to the root's O_PATH descriptor (no `..`, absolute path or symlink can leave the
//! volume), O_NONBLOCK so a FIFO never blocks, fstat, directory -> index file, and refusal of
//! anything that is not a regular file before a single byte is read. [`open_file`] may wait for
//! the disk; [`open_file_cached`] (RESOLVE_CACHED) never does and says `WouldBlock` instead.
//!
//! Owns the server's one openat2 call ([`open_beneath`]) and its flags. Runs wherever the caller
//! puts it; it must not decide that (no pool, no volume, no offload mode) nor know about HTTP
//! beyond the error kinds it returns.

use super::nowait::Nowait;
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// An open regular file and the stat data the response needs.
#[derive(Debug, Clone)]
pub struct OpenedFile {
    pub fd: Arc<OwnedFd>,
    pub size: u64,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
    pub mtime_nsec: i64,
    pub ino: u64,
    /// Device of the inode (with `ino`, identifies the file for the open-file cache).
    pub dev: u64,
    /// For a directory request: which `http.index` entry was opened.
    pub via_index: Option<usize>,
}

/// How a file differs from a [`FileVersion`]. A file that shrank was rewritten; one that grew
/// may only have been appended to (its first bytes as they were); one of the same size with
/// another modification time was rewritten in place, or is being appended to this very
/// moment (a write sets the time before it adds bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Same,
    Grew,
    Shrank,
    Touched,
}

/// What a response was planned for: the file's size and modification time when it was opened
/// (or last checked). A file rewritten in place differs in one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileVersion {
    pub size: u64,
    pub mtime: i64,
    pub mtime_nsec: i64,
}

impl OpenedFile {
    pub fn version(&self) -> FileVersion {
        FileVersion {
            size: self.size,
            mtime: self.mtime,
            mtime_nsec: self.mtime_nsec,
        }
    }
}

impl FileVersion {
    /// How `now` differs from `self`.
    pub fn change(self, now: FileVersion) -> Change {
        if now.size < self.size {
            Change::Shrank
        } else if now.size > self.size {
            Change::Grew
        } else if now != self {
            Change::Touched
        } else {
            Change::Same
        }
    }

    /// The version `fd` has now (one fstat: no I/O on a local filesystem).
    pub fn of(fd: &OwnedFd) -> std::io::Result<FileVersion> {
        Ok(FileVersion::of_stat(&rustix::fs::fstat(fd)?))
    }

    /// The version a stat of the file says it has.
    pub fn of_stat(st: &rustix::fs::Stat) -> FileVersion {
        FileVersion {
            size: st.st_size as u64,
            mtime: st.st_mtime,
            mtime_nsec: st.st_mtime_nsec as i64,
        }
    }
}

/// Why a file cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Missing or outside the volume (404).
    #[error("not found")]
    NotFound,
    /// A directory without an index file (a listing, a redirect or 404).
    #[error("directory without an index file")]
    Directory,
    /// Not a regular file (FIFO, device, socket) or permission denied (403).
    #[error("forbidden: {0}")]
    Forbidden(&'static str),
    /// The volume's pool queue is full (503).
    #[error("thread pool overflow")]
    Overflow,
    /// Anything else (500), e.g. EIO.
    #[error("{0}")]
    Io(std::io::Error),
}

pub(crate) fn map_errno(e: Errno) -> OpenError {
    match e {
        Errno::NOENT | Errno::NOTDIR | Errno::NAMETOOLONG | Errno::LOOP | Errno::XDEV => {
            OpenError::NotFound
        }
        Errno::ACCESS | Errno::PERM => OpenError::Forbidden("permission denied"),
        // open(2) of a socket (ENXIO) or a device without a driver (ENODEV).
        Errno::NXIO | Errno::NODEV => OpenError::Forbidden("not a regular file"),
        other => OpenError::Io(other.into()),
    }
}

/// `openat2` resolve flags of every open beneath a volume root: the result can never name anything
/// outside the root (`..`, absolute symlinks and magic links are refused by the kernel).
pub const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);
/// Open flags for serving a file: read-only, close-on-exec, and non-blocking so that opening a
/// FIFO or device someone placed in the volume cannot hang the caller (it is rejected after fstat).
pub const OPEN_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NOCTTY);

/// The one `openat2` call: open `rel` (relative, no leading `/`; empty = the root itself) beneath
/// the directory `root` with [`OPEN_FLAGS`] and `resolve` ([`BENEATH`], plus
/// `ResolveFlags::CACHED` for a lookup that must not touch the disk: EAGAIN then). Retried on
/// EINTR; errors are openat2's own (ENOENT, ELOOP, EXDEV for an escape attempt...).
pub fn open_beneath(
    root: BorrowedFd<'_>,
    rel: &[u8],
    resolve: ResolveFlags,
) -> Result<OwnedFd, Errno> {
    let path = OsStr::from_bytes(if rel.is_empty() { b"." } else { rel });
    // Without RESOLVE_CACHED, EAGAIN means a rename somewhere on the system raced a `..` step
    // of a scoped lookup (the kernel cannot prove it stayed beneath): worth a few more tries.
    BENEATH_NOATIME.open(OPEN_FLAGS, |flags| {
        let mut raced = 0;
        loop {
            match rustix::fs::openat2(root, path, flags, Mode::empty(), resolve) {
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) if !resolve.contains(ResolveFlags::CACHED) && raced < 32 => {
                    raced += 1;
                }
                r => return crate::descriptors::for_data_plane(r),
            }
        }
    })
}

/// O_NOATIME for every file served while the kernel allows it (the server owns the file or has
/// CAP_FOWNER): a read that updates the access time dirties the inode, and on ext4 that takes a
/// journal handle and may read the inode's table block from the disk, from the event loop in
/// `offload = auto` (relatime does it on the first read after each change and once a day;
/// measured: one inline sendfile of resident pages took 579 ms). One per set of files of one
/// owner: the first file that refuses the flag (EPERM: someone else's file) turns it off for the
/// set, as retrying every open would double the lookups of files owned by another user.
pub struct NoAtime {
    refused: AtomicBool,
}

impl NoAtime {
    pub const fn new() -> NoAtime {
        NoAtime {
            refused: AtomicBool::new(false),
        }
    }

    /// `open(flags | O_NOATIME)` while allowed, else (and after an EPERM) `open(flags)`.
    pub fn open(
        &self,
        flags: OFlags,
        open: impl Fn(OFlags) -> Result<OwnedFd, Errno>,
    ) -> Result<OwnedFd, Errno> {
        if self.refused.load(Ordering::Relaxed) {
            return open(flags);
        }
        match open(flags | OFlags::NOATIME) {
            Err(Errno::PERM) => {
                self.refused.store(true, Ordering::Relaxed);
                open(flags)
            }
            r => r,
        }
    }
}

impl Default for NoAtime {
    fn default() -> Self {
        NoAtime::new()
    }
}

/// The files beneath volume roots ([`open_beneath`]), one set for the process.
static BENEATH_NOATIME: NoAtime = NoAtime::new();

/// No kernel readahead through `fd` (POSIX_FADV_RANDOM), for every file the server serves.
/// Readahead marks one page of each window it reads, and the next read of a marked page starts
/// the following window's reads, even a sendfile of pages that are all in memory: the event
/// loop's inline sendfile of resident pages would allocate pages (reclaim, under a memory limit)
/// and submit disk reads (measured: a loop thread read 1 MiB while sending 192 KiB that mincore
/// had shown resident). With it, a read brings in exactly what it asks and marks nothing, so the
/// pool reads each chunk as one request instead ([`crate::fs::sendfile::read_whole`]). Marks left
/// by another process's reads of the same file can still start reads (the slow-sendfile pause
/// of `crate::volume` covers those). Best effort: an error only loses the hint.
pub fn without_readahead(fd: BorrowedFd<'_>) {
    let _ = rustix::fs::fadvise(fd, 0, None, rustix::fs::Advice::Random);
}

fn regular(fd: OwnedFd, st: &rustix::fs::Stat) -> OpenedFile {
    without_readahead(fd.as_fd());
    OpenedFile {
        fd: Arc::new(fd),
        size: st.st_size as u64,
        mtime: st.st_mtime,
        mtime_nsec: st.st_mtime_nsec as i64,
        ino: st.st_ino,
        dev: st.st_dev,
        via_index: None,
    }
}

/// The blocking work: open `rel` (relative, already normalized, no leading `/`; empty = the
/// root) beneath `root`, fstat it, and for a directory try each `index` name.
pub fn open_file(
    root: BorrowedFd<'_>,
    rel: &[u8],
    index: &[String],
) -> Result<OpenedFile, OpenError> {
    open_file_with(root, rel, index, BENEATH)
}

/// [`open_file`] without I/O (`offload = auto`): RESOLVE_CACHED, so `WouldBlock` when any path
/// lookup (the file, or a directory's index names) would have to read from disk.
pub fn open_file_cached(
    root: BorrowedFd<'_>,
    rel: &[u8],
    index: &[String],
) -> Result<Nowait<OpenedFile>, OpenError> {
    match open_file_with(root, rel, index, BENEATH | ResolveFlags::CACHED) {
        Ok(f) => Ok(Nowait::Ready(f)),
        Err(OpenError::Io(e)) if e.raw_os_error() == Some(libc::EAGAIN) => Ok(Nowait::WouldBlock),
        Err(e) => Err(e),
    }
}

fn open_file_with(
    root: BorrowedFd<'_>,
    rel: &[u8],
    index: &[String],
    resolve: ResolveFlags,
) -> Result<OpenedFile, OpenError> {
    failpoint_open()?;
    let fd = match open_beneath(root, rel, resolve) {
        Ok(fd) => fd,
        // A directory that may be searched but not read (mode 0711) still has an index file
        // to serve, as nginx serves it: look at what it is without reading it.
        Err(Errno::ACCESS) if is_directory_beneath(root, rel, resolve) => {
            return open_index(root, rel, index, resolve)
        }
        Err(e) => return Err(map_errno(e)),
    };
    let st = rustix::fs::fstat(&fd).map_err(map_errno)?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Ok(regular(fd, &st)),
        FileType::Directory => {
            drop(fd);
            open_index(root, rel, index, resolve)
        }
        _ => Err(OpenError::Forbidden("not a regular file")),
    }
}

/// The first of the `index` files in the directory `rel` (`Directory` when none exists).
fn open_index(
    root: BorrowedFd<'_>,
    rel: &[u8],
    index: &[String],
    resolve: ResolveFlags,
) -> Result<OpenedFile, OpenError> {
    for (i, name) in index.iter().enumerate() {
        let mut p = rel.to_vec();
        if !p.is_empty() && !p.ends_with(b"/") {
            p.push(b'/');
        }
        p.extend_from_slice(name.as_bytes());
        let fd = match open_beneath(root, &p, resolve).map_err(map_errno) {
            Ok(fd) => fd,
            Err(OpenError::NotFound) => continue,
            Err(e) => return Err(e),
        };
        let st = rustix::fs::fstat(&fd).map_err(map_errno)?;
        return match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => Ok(OpenedFile {
                via_index: Some(i),
                ..regular(fd, &st)
            }),
            _ => Err(OpenError::NotFound),
        };
    }
    Err(OpenError::Directory)
}

/// Is `rel` a directory beneath `root`? Asked with O_PATH, which needs no read permission.
fn is_directory_beneath(root: BorrowedFd<'_>, rel: &[u8], resolve: ResolveFlags) -> bool {
    let path = OsStr::from_bytes(if rel.is_empty() { b"." } else { rel });
    let flags = OFlags::PATH | OFlags::CLOEXEC | OFlags::DIRECTORY;
    loop {
        match rustix::fs::openat2(root, path, flags, Mode::empty(), resolve) {
            Err(Errno::INTR) => continue,
            r => return r.is_ok(),
        }
    }
}

/// Failpoint `open_file`: `FAILPOINTS="open_file=return(eio)"` makes every open fail with EIO.
fn failpoint_open() -> Result<(), OpenError> {
    fail::fail_point!("open_file", |arg: Option<String>| {
        match arg.as_deref() {
            Some("eio") => Err(OpenError::Io(std::io::Error::from_raw_os_error(libc::EIO))),
            _ => Ok(()),
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::test_support::{disk_tempdir, root_fd};
    use std::fs::File;
    use std::io::{self, Write};
    use std::os::fd::{AsFd, AsRawFd};

    /// [`open_beneath`] with RESOLVE_CACHED, as [`open_file_cached`] calls it.
    fn cached(root: BorrowedFd<'_>, rel: &str) -> io::Result<Nowait<OwnedFd>> {
        match open_beneath(root, rel.as_bytes(), BENEATH | ResolveFlags::CACHED) {
            Ok(fd) => Ok(Nowait::Ready(fd)),
            Err(Errno::AGAIN) => Ok(Nowait::WouldBlock),
            Err(e) => Err(e.into()),
        }
    }

    #[test]
    fn reading_an_opened_file_leaves_its_access_time() {
        let dir = disk_tempdir();
        let path = dir.path().join("a.bin");
        std::fs::write(&path, b"some bytes").unwrap();
        crate::fs::test_support::assert_plain_read_updates_atime(&path);
        let before = crate::fs::test_support::atime(&path);
        let root = root_fd(dir.path());
        let fd = open_beneath(root.as_fd(), b"a.bin", BENEATH).unwrap();
        let mut b = [0u8; 4];
        assert_eq!(rustix::io::pread(&fd, &mut b, 0).unwrap(), 4);
        let mut off = 0u64;
        let out = File::create(dir.path().join("out")).unwrap();
        assert_eq!(
            rustix::fs::sendfile(&out, &fd, Some(&mut off), 10).unwrap(),
            10
        );
        assert_eq!(crate::fs::test_support::atime(&path), before);
    }

    #[test]
    fn open_beneath_opens_cached_paths_and_refuses_escapes() {
        let dir = disk_tempdir();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let mut f = File::create(dir.path().join("sub/a.txt")).unwrap();
        f.write_all(b"hello").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("abs")).unwrap();
        std::os::unix::fs::symlink("../..", dir.path().join("sub/up")).unwrap();
        let root = root_fd(dir.path());
        // Just created: every dentry is cached.
        match cached(root.as_fd(), "sub/a.txt").unwrap() {
            Nowait::Ready(fd) => assert!(fd.as_raw_fd() >= 0),
            Nowait::WouldBlock => panic!("fresh dentries must be cached"),
        }
        // An escape is refused (EXDEV) or, where the scoped `..` walk cannot stay in RCU mode,
        // answered WouldBlock, so the pool's blocking open refuses it; never opened.
        for escape in ["../x", "/etc/hostname", "abs", "sub/up/etc"] {
            match cached(root.as_fd(), escape) {
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
        match cached(root.as_fd(), "sub/missing") {
            Ok(Nowait::WouldBlock) => {}
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::NotFound),
            Ok(Nowait::Ready(_)) => panic!("opened a missing file"),
        }
        assert!(!dir.path().join("sub/missing").exists());
        let err = cached(root.as_fd(), "sub/missing").unwrap_err();
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
        let root = root_fd(dir.path());
        // O_NONBLOCK: returns at once (a FIFO with no writer opens fine for reading).
        let fd = match cached(root.as_fd(), "pipe").unwrap() {
            Nowait::Ready(fd) => fd,
            Nowait::WouldBlock => panic!("cached"),
        };
        let st = rustix::fs::fstat(&fd).unwrap();
        assert_eq!(
            rustix::fs::FileType::from_raw_mode(st.st_mode),
            rustix::fs::FileType::Fifo
        );
    }
}
