//! Opening the file a request names, beneath its volume root: openat2 with RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS relative to the root's O_PATH descriptor (no `..`, absolute path or
//! symlink can leave the volume), O_NONBLOCK so a FIFO never blocks, fstat, directory -> index
//! file, and refusal of anything that is not a regular file before a single byte is read.
//!
//! [`open_for_request`] is the one place that decides where the open runs (the volume's pool or
//! inline, by offload mode). It must not know about HTTP beyond the error kinds it returns.

use crate::config::Offload;
use crate::fs::hot::InlineOpen;
use crate::metrics::PoolOp;
use crate::pool::PoolError;
use crate::volume::Volume;
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
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

/// Why a file cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Missing, outside the volume, or a directory without an index file (404).
    #[error("not found")]
    NotFound,
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

fn map_errno(e: Errno) -> OpenError {
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
pub(crate) const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);
/// Open flags for serving a file: read-only, close-on-exec, and non-blocking so that opening a
/// FIFO or device someone placed in the volume cannot hang the caller (it is rejected after fstat).
pub(crate) const OPEN_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NOCTTY);

fn open_beneath(
    root: BorrowedFd<'_>,
    rel: &[u8],
    resolve: ResolveFlags,
) -> Result<OwnedFd, OpenError> {
    let path = if rel.is_empty() { b".".as_slice() } else { rel };
    rustix::fs::openat2(
        root,
        OsStr::from_bytes(path),
        OPEN_FLAGS,
        Mode::empty(),
        resolve,
    )
    .map_err(map_errno)
}

fn regular(fd: OwnedFd, st: &rustix::fs::Stat) -> OpenedFile {
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
) -> Result<crate::fs::nowait::Nowait<OpenedFile>, OpenError> {
    use crate::fs::nowait::Nowait;
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
    crate::fs::failpoint_open()?;
    let fd = open_beneath(root, rel, resolve)?;
    let st = rustix::fs::fstat(&fd).map_err(map_errno)?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Ok(regular(fd, &st)),
        FileType::Directory => {
            drop(fd);
            for (i, name) in index.iter().enumerate() {
                let mut p = rel.to_vec();
                if !p.is_empty() && !p.ends_with(b"/") {
                    p.push(b'/');
                }
                p.extend_from_slice(name.as_bytes());
                let fd = match open_beneath(root, &p, resolve) {
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
            Err(OpenError::NotFound)
        }
        _ => Err(OpenError::Forbidden("not a regular file")),
    }
}

/// The file a request opened, and whether the volume's pool already admitted the request by
/// running its open (then its body needs no second admission check, see `serve::admitted`).
pub struct RequestFile {
    pub file: OpenedFile,
    pub admitted_by_pool: bool,
}

/// Open the file for a request on `vol`: from the open-file cache or, for `auto`, a
/// RESOLVE_CACHED open on the event loop when that needs no I/O ([`crate::fs::hot`]); otherwise
/// on the volume's pool (`always`, `auto` misses) or inline on the event loop (`never`).
pub async fn open_for_request(vol: &Volume, rel: Vec<u8>) -> Result<RequestFile, OpenError> {
    if let InlineOpen::Hit(file) = vol.hot.open_inline(vol.root.as_fd(), &rel, &vol.index)? {
        return Ok(RequestFile {
            file,
            admitted_by_pool: false,
        });
    }
    let key = rel.clone();
    let result = open_blocking(vol, rel).await;
    vol.hot.opened(&key, &result);
    result.map(|file| RequestFile {
        file,
        admitted_by_pool: vol.offload != Offload::Never,
    })
}

async fn open_blocking(vol: &Volume, rel: Vec<u8>) -> Result<OpenedFile, OpenError> {
    match vol.offload {
        Offload::Never => open_file(vol.root.as_fd(), &rel, &vol.index),
        Offload::Always | Offload::Auto => {
            let root = vol.root.clone();
            let index = vol.index.clone();
            match vol
                .pool
                .run(PoolOp::Open, move || open_file(root.as_fd(), &rel, &index))
                .await
            {
                Ok(r) => r,
                Err(PoolError::Overflow(_)) => Err(OpenError::Overflow),
                Err(PoolError::Lost(e)) => Err(OpenError::Io(std::io::Error::other(e))),
            }
        }
    }
}
