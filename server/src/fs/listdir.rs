//! Reading one directory beneath a volume root for a listing (`routes[].http.listing`): the
//! regular files and subdirectories it holds (symlinks, devices and dotfiles are left out), with
//! size and mtime from `fstatat(AT_SYMLINK_NOFOLLOW)`, at most `max` of them. Blocking: the
//! volume runs it where its offload mode says. It must not know about HTTP or rendering.
//!
//! When the directory holds more than `max` entries, the ones kept are the first `max` in the
//! listing's order: directories first, then by name (bytes), the order `http::listing` shows
//! (it sorts again; `fs` may not import `http`, so the order is written here too, and
//! `server/tests/media.rs` checks both agree). The whole directory is read, keeping the `max`
//! smallest in a max-heap (memory for `max` entries, whatever the directory's size), and an
//! entry whose type `readdir` gives is only stat-ed when it ranks among them.

use super::open::{map_errno, OpenError, BENEATH};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
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

/// The listing's order of two entries given as (is a directory, name): directories first, then
/// by name.
fn order(a: (bool, &[u8]), b: (bool, &[u8])) -> Ordering {
    b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1))
}

/// A [`DirEntry`] ordered as the listing shows it (the heap's top is the last one kept).
struct Ranked(DirEntry);

impl Ranked {
    fn key(&self) -> (bool, &[u8]) {
        (self.0.dir, &self.0.name)
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Ranked) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Ranked) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Ranked) -> Ordering {
        order(self.key(), other.key())
    }
}

/// The first `max` entries of a directory in the listing's order, and whether any was left out.
struct Selection {
    heap: BinaryHeap<Ranked>,
    max: usize,
    truncated: bool,
}

impl Selection {
    fn new(max: usize) -> Selection {
        Selection {
            heap: BinaryHeap::with_capacity(max.min(4096)),
            max,
            truncated: false,
        }
    }

    /// Would an entry (is a directory, name) be kept? If not, it counts as left out.
    fn wants(&mut self, dir: bool, name: &[u8]) -> bool {
        if self.heap.len() < self.max {
            return true;
        }
        let ranks = self
            .heap
            .peek()
            .is_some_and(|last| order((dir, name), last.key()) == Ordering::Less);
        if !ranks {
            self.truncated = true;
        }
        ranks
    }

    /// Keep `e` (which [`Selection::wants`]); the last one kept goes when there is no room.
    fn push(&mut self, e: DirEntry) {
        if self.heap.len() == self.max {
            self.heap.pop();
            self.truncated = true;
        }
        self.heap.push(Ranked(e));
    }

    /// The entries kept, in the listing's order, and whether any was left out.
    fn finish(self) -> (Vec<DirEntry>, bool) {
        let entries = self.heap.into_sorted_vec().into_iter().map(|r| r.0);
        (entries.collect(), self.truncated)
    }
}

/// The entries of directory `rel` (empty = the root): the first `max` in the listing's order
/// (directories first, then by name), and whether there were more.
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
    let mut kept = Selection::new(max);
    while let Some(e) = dir.read() {
        let e = e.map_err(map_errno)?;
        let name = e.file_name().to_bytes();
        if name.starts_with(b".") {
            continue;
        }
        // Entries that cannot rank are not stat-ed when readdir says their type (most local
        // filesystems do; DT_UNKNOWN needs the stat).
        match e.file_type() {
            FileType::RegularFile | FileType::Directory => {
                if !kept.wants(e.file_type() == FileType::Directory, name) {
                    continue;
                }
            }
            FileType::Unknown => {}
            _ => continue,
        }
        let st = match rustix::fs::statat(&fd, e.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Removed since readdir saw it.
            Err(_) => continue,
        };
        // The stat decides (the entry may have been replaced since readdir).
        let dir = match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => false,
            FileType::Directory => true,
            _ => continue,
        };
        if !kept.wants(dir, name) {
            continue;
        }
        kept.push(DirEntry {
            name: name.to_vec(),
            dir,
            size: st.st_size as u64,
            mtime: st.st_mtime,
        });
    }
    Ok(kept.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::test_support::disk_tempdir;
    use std::os::fd::AsFd;

    fn names(entries: &[DirEntry]) -> Vec<String> {
        entries
            .iter()
            .map(|e| String::from_utf8_lossy(&e.name).into_owned())
            .collect()
    }

    #[test]
    fn a_long_directory_keeps_its_first_entries_in_listing_order() {
        for tmp in [disk_tempdir(), tempfile::tempdir().unwrap()] {
            let d = tmp.path();
            // Created in an order unlike the listing's (tmpfs reads newest first).
            for i in (0..300).rev() {
                std::fs::write(d.join(format!("f{i:04}")), b"x").unwrap();
            }
            std::fs::create_dir(d.join("zz-dir")).unwrap();
            std::fs::create_dir(d.join("a-dir")).unwrap();
            std::fs::write(d.join(".hidden"), b"x").unwrap();
            std::os::unix::fs::symlink("f0000", d.join("a-link")).unwrap();
            let root = std::fs::File::open(d).unwrap();
            let (entries, truncated) = read_dir(root.as_fd(), b"", 100).unwrap();
            let mut want = vec!["a-dir".to_string(), "zz-dir".to_string()];
            want.extend((0..98).map(|i| format!("f{i:04}")));
            assert_eq!(names(&entries), want);
            assert!(truncated);
            assert!(entries[0].dir && !entries[2].dir);
            assert_eq!(entries[2].size, 1);
            // Room for everything: all of it, in order, not truncated.
            let (entries, truncated) = read_dir(root.as_fd(), b"", 302).unwrap();
            assert_eq!(entries.len(), 302);
            assert_eq!(names(&entries)[301], "f0299");
            assert!(!truncated);
            // Exactly one too many.
            let (entries, truncated) = read_dir(root.as_fd(), b"", 301).unwrap();
            assert_eq!(names(&entries)[300], "f0298");
            assert!(truncated);
        }
    }
}
