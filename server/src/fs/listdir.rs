//! Reading one directory beneath a volume root for a listing (`routes[].http.listing`): the
//! regular files and subdirectories it holds (symlinks, devices and dotfiles are left out), with
//! size and mtime from `fstatat(AT_SYMLINK_NOFOLLOW)`, at most `max` of them. Blocking: the
//! volume runs it where its offload mode says. It must not know about HTTP or rendering.

use super::open::{map_errno, OpenError, BENEATH};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;

/// One listed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub dir: bool,
    pub size: u64,
    /// Seconds since the epoch.
    pub mtime: i64,
}

/// The entries of directory `rel` (empty = the root) and whether more than `max` were there.
pub fn read_dir(
    root: BorrowedFd<'_>,
    rel: &[u8],
    max: usize,
) -> Result<(Vec<DirEntry>, bool), OpenError> {
    let path = if rel.is_empty() { b".".as_slice() } else { rel };
    let fd = rustix::fs::openat2(
        root,
        OsStr::from_bytes(path),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        BENEATH,
    )
    .map_err(map_errno)?;
    let mut dir = rustix::fs::Dir::read_from(&fd).map_err(map_errno)?;
    let mut out = Vec::new();
    let mut truncated = false;
    while let Some(e) = dir.read() {
        let e = e.map_err(map_errno)?;
        let name = e.file_name().to_bytes();
        if name.starts_with(b".") {
            continue;
        }
        let st = match rustix::fs::statat(&fd, e.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Removed since readdir saw it.
            Err(_) => continue,
        };
        let dir = match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => false,
            FileType::Directory => true,
            _ => continue,
        };
        if out.len() == max {
            truncated = true;
            break;
        }
        out.push(DirEntry {
            name: name.to_vec(),
            dir,
            size: st.st_size as u64,
            mtime: st.st_mtime,
        });
    }
    Ok((out, truncated))
}
