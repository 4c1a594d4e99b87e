//! Which bytes of a file `sendfile` can send without waiting for the disk: `mincore(2)` over a
//! read-only shared mapping of the file, which the kernel answers per page with "in the page
//! cache *and up to date*" (`mm/mincore.c`, `mincore_page`: `folio_test_uptodate`). A page that
//! readahead has inserted and whose read is still in flight is "not yet" here, where
//! `cachestat(2)` already counts it as cached; a missing page or one past the end of the file is
//! "not yet" too. Nothing is faulted in and no readahead starts.
//!
//! - [`uptodate_prefix`]: over a mapping made and unmapped for the call (one-off checks).
//! - [`uptodate_prefix_kept`]: over windows of the file mapped once and kept per thread, so a hot
//!   body pays one mincore per chunk, not mmap + mincore + munmap.
//! - [`release_closed`]: unmap every thread's windows of files closed since; a mapping keeps a
//!   deleted file's blocks allocated, so whoever deletes files to free space calls it.
//!
//! The mappings are never read or written through (no SIGBUS, no fault): they only name pages.
//! This module never decides where work runs.

use super::nowait::page_size;
use rustix::fd::BorrowedFd;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Bytes per kept window of a file; each window maps [`WINDOW`] + [`MAX_RANGE`] bytes, so any
/// range of at most [`MAX_RANGE`] bytes lies inside the window its start falls in.
const WINDOW: u64 = 64 << 20;

/// Longest range [`uptodate_prefix_kept`] answers from a kept window (longer: a one-off mapping).
pub const MAX_RANGE: u64 = 4 << 20;

/// Windows kept per thread (least recently used dropped first).
const KEPT: usize = 16;

/// How many bytes from `offset` (at most `len`) lie in pages that are up to date in the page
/// cache, over a mapping made for this call. Errors are the mapping's (ENODEV: the filesystem
/// cannot mmap; EACCES: not opened for reading...): the caller then checks another way.
pub fn uptodate_prefix(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<u64> {
    failpoint()?;
    if len == 0 {
        return Ok(0);
    }
    let page = page_size();
    let start = offset - offset % page;
    let end = offset.checked_add(len).ok_or_else(overflow)?;
    let map = Mapping::new(fd, start, end - start)?;
    map.prefix((offset - start) as usize, len as usize)
}

/// [`uptodate_prefix`] for a file shared as `Arc<OwnedFd>` (the open-file cache's and the
/// responses' handle), over a window of it this thread mapped before and keeps while the file's
/// descriptor lives (at most [`KEPT`] windows; a window whose descriptor was closed is unmapped
/// at the next insertion, or by [`release_closed`]). Ranges longer than [`MAX_RANGE`] use a
/// one-off mapping.
pub fn uptodate_prefix_kept(file: &Arc<OwnedFd>, offset: u64, len: u64) -> io::Result<u64> {
    failpoint()?;
    if len == 0 {
        return Ok(0);
    }
    if len > MAX_RANGE {
        return uptodate_prefix(std::os::fd::AsFd::as_fd(&**file), offset, len);
    }
    let index = offset / WINDOW;
    KEPT_WINDOWS.with(|kept| {
        let mut kept = lock(kept);
        let at = match kept.find(file, index) {
            Some(at) => at,
            None => kept.insert(file, index)?,
        };
        let w = &kept.windows[at];
        w.map
            .prefix((offset - index * WINDOW) as usize, len as usize)
    })
}

/// Unmap the kept windows, on every thread, of files whose descriptor was closed. Until then such
/// a mapping keeps the file's blocks allocated even once it is deleted (an evicted cache entry
/// would not give its space back while the thread that served it is idle).
pub fn release_closed() {
    let all: Vec<Arc<Mutex<Kept>>> = {
        let mut all = lock(&ALL_KEPT);
        all.retain(|k| k.strong_count() > 0);
        all.iter().filter_map(Weak::upgrade).collect()
    };
    for k in all {
        lock(&k).windows.retain(|w| w.file.strong_count() > 0);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn overflow() -> io::Error {
    io::Error::from_raw_os_error(libc::EOVERFLOW)
}

/// Failpoint `mincore`: any action makes every check fail (ENODEV), as on a filesystem that
/// cannot mmap.
fn failpoint() -> io::Result<()> {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("mincore", |_| Err(io::Error::from_raw_os_error(
        libc::ENODEV
    )));
    Ok(())
}

/// A read-only shared mapping, unmapped on drop. Never dereferenced.
struct Mapping {
    addr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    /// Map `len` bytes of `fd` from `offset` (page aligned). Past the end of the file is allowed
    /// (those pages are simply never up to date).
    fn new(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<Mapping> {
        let len = usize::try_from(len).map_err(|_| overflow())?;
        let off = libc::off_t::try_from(offset).map_err(|_| overflow())?;
        // SAFETY: a fresh mapping chosen by the kernel (no fixed address, so nothing existing is
        // replaced), read-only; it is only ever passed to mincore and munmap.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                off,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { addr, len })
    }

    /// Up-to-date bytes from `from` (a byte offset within the mapping), at most `len`.
    fn prefix(&self, from: usize, len: usize) -> io::Result<u64> {
        let page = page_size() as usize;
        let first = from - from % page;
        let end = (from + len).min(self.len);
        let mut vec = [0u8; 256];
        let batch = vec.len() * page;
        let mut at = first;
        while at < end {
            let n = (end - at).min(batch);
            // SAFETY: `at..at + n` lies within the mapping (`at` is page aligned and `end` is at
            // most its length) and covers at most `vec.len()` pages, one byte each written.
            let rc = unsafe {
                libc::mincore(self.addr.cast::<u8>().add(at).cast(), n, vec.as_mut_ptr())
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(i) = vec[..n.div_ceil(page)].iter().position(|b| b & 1 == 0) {
                at += i * page;
                break;
            }
            at += n;
        }
        Ok(at.min(end).saturating_sub(from) as u64)
    }
}

// SAFETY: the mapping is only ever passed to mincore and munmap, which any thread of the process
// may call on it; [`release_closed`] unmaps windows of other threads.
unsafe impl Send for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, which nothing else refers to.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

/// One kept window: `WINDOW + MAX_RANGE` bytes of a file from `index * WINDOW`.
struct Window {
    /// The descriptor the window belongs to. Holding the `Weak` keeps its allocation, so no other
    /// file's `Arc` can have the same address while the window exists.
    file: Weak<OwnedFd>,
    index: u64,
    map: Mapping,
    used: u64,
}

#[derive(Default)]
struct Kept {
    windows: Vec<Window>,
    clock: u64,
}

impl Kept {
    fn find(&mut self, file: &Arc<OwnedFd>, index: u64) -> Option<usize> {
        let at = self
            .windows
            .iter()
            .position(|w| w.index == index && std::ptr::eq(w.file.as_ptr(), Arc::as_ptr(file)))?;
        self.clock += 1;
        self.windows[at].used = self.clock;
        Some(at)
    }

    fn insert(&mut self, file: &Arc<OwnedFd>, index: u64) -> io::Result<usize> {
        let fd = std::os::fd::AsFd::as_fd(&**file);
        let map = Mapping::new(fd, index * WINDOW, WINDOW + MAX_RANGE)?;
        // Windows of closed descriptors go first (their mapping would keep the file open), then
        // the least recently used one when full.
        self.windows.retain(|w| w.file.strong_count() > 0);
        if self.windows.len() >= KEPT {
            if let Some(oldest) = (0..self.windows.len()).min_by_key(|&i| self.windows[i].used) {
                self.windows.swap_remove(oldest);
            }
        }
        self.clock += 1;
        self.windows.push(Window {
            file: Arc::downgrade(file),
            index,
            map,
            used: self.clock,
        });
        Ok(self.windows.len() - 1)
    }
}

/// Every thread's kept windows, for [`release_closed`] (the lock of a thread's own windows is
/// uncontended but for that sweep).
static ALL_KEPT: Mutex<Vec<Weak<Mutex<Kept>>>> = Mutex::new(Vec::new());

thread_local! {
    static KEPT_WINDOWS: Arc<Mutex<Kept>> = {
        let kept = Arc::new(Mutex::new(Kept::default()));
        lock(&ALL_KEPT).push(Arc::downgrade(&kept));
        kept
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::nowait::{read_at, Nowait};
    use crate::fs::test_support::{data_file, disk_tempdir, evict, resident_pages};
    use std::fs::File;
    use std::os::fd::AsFd;

    #[test]
    fn uptodate_prefix_counts_filled_pages_without_reading() {
        let (_dir, f) = data_file(&[3u8; 512 * 1024]);
        // Written just now: all filled, from any offset, up to the end of the file only.
        assert_eq!(
            uptodate_prefix(f.as_fd(), 0, 512 * 1024).unwrap(),
            512 * 1024
        );
        assert_eq!(uptodate_prefix(f.as_fd(), 1000, 5000).unwrap(), 5000);
        assert_eq!(
            uptodate_prefix(f.as_fd(), 500 * 1024 + 1, 64 * 1024).unwrap(),
            12 * 1024 - 1
        );
        assert_eq!(uptodate_prefix(f.as_fd(), 512 * 1024, 4096).unwrap(), 0);
        evict(&f);
        assert_eq!(uptodate_prefix(f.as_fd(), 0, 4096).unwrap(), 0);
        // Only 64 KiB..72 KiB read back (readahead off): the prefix from inside that range ends
        // at its end, and from before it is empty.
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::Random).unwrap();
        let mut b = vec![0u8; 8192];
        rustix::io::pread(&f, &mut b, 64 * 1024).unwrap();
        assert_eq!(
            uptodate_prefix(f.as_fd(), 64 * 1024 + 10, 100 * 1024).unwrap(),
            8 * 1024 - 10
        );
        assert_eq!(uptodate_prefix(f.as_fd(), 60 * 1024, 16 * 1024).unwrap(), 0);
        // Asking started no readahead.
        assert_eq!(uptodate_prefix(f.as_fd(), 0, 4096).unwrap(), 0);
        assert_eq!(resident_pages(&f, 512 * 1024), 2);
    }

    /// While readahead is in flight, what mincore calls filled can be read with RWF_NOWAIT in
    /// full, every time (a page still reading would make that read short or EAGAIN). Sampled
    /// over a 32 MiB readahead started with WILLNEED, as fast as the disk fills it.
    #[test]
    fn uptodate_prefix_during_readahead_is_readable_without_waiting() {
        let len = 32 * 1024 * 1024;
        let (_dir, f) = data_file(&vec![9u8; len]);
        evict(&f);
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::WillNeed).unwrap();
        let mut buf = vec![0u8; 1024 * 1024];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let (mut at, mut progress) = (0u64, std::time::Instant::now());
        while at < len as u64 {
            assert!(
                std::time::Instant::now() < deadline,
                "readahead stuck at {at}"
            );
            let want = (len as u64 - at).min(buf.len() as u64);
            let n = uptodate_prefix(f.as_fd(), at, want).unwrap();
            if n == 0 {
                // WILLNEED reads a bounded amount at a time: ask again for the rest when idle.
                if progress.elapsed() > std::time::Duration::from_millis(100) {
                    let rest = std::num::NonZeroU64::new(len as u64 - at);
                    rustix::fs::fadvise(&f, at, rest, rustix::fs::Advice::WillNeed).unwrap();
                    progress = std::time::Instant::now();
                }
                std::thread::yield_now();
                continue;
            }
            progress = std::time::Instant::now();
            match read_at(f.as_fd(), &mut buf[..n as usize], at).unwrap() {
                Nowait::Ready(got) => assert_eq!(got as u64, n, "short read at {at}"),
                Nowait::WouldBlock => panic!("{n} bytes at {at} called filled would block"),
            }
            at += n;
        }
    }

    #[test]
    fn kept_windows_answer_like_one_off_mappings_and_follow_the_file() {
        let len = 8 * 1024 * 1024;
        let (_dir, f) = data_file(&vec![5u8; len]);
        let fd = Arc::new(OwnedFd::from(f.try_clone().unwrap()));
        assert_eq!(uptodate_prefix_kept(&fd, 0, 1 << 20).unwrap(), 1 << 20);
        assert_eq!(
            uptodate_prefix_kept(&fd, len as u64 - 100, 4096).unwrap(),
            100
        );
        // Past the end of the file, and a range longer than a kept window answers.
        assert_eq!(uptodate_prefix_kept(&fd, len as u64, 4096).unwrap(), 0);
        assert_eq!(uptodate_prefix_kept(&fd, 0, 6 << 20).unwrap(), 6 << 20);
        // The same window sees the pages go and come back.
        evict(&f);
        assert_eq!(uptodate_prefix_kept(&fd, 4096, 1 << 20).unwrap(), 0);
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::Random).unwrap();
        let mut b = vec![0u8; 16384];
        rustix::io::pread(&f, &mut b, 4096).unwrap();
        assert_eq!(
            uptodate_prefix_kept(&fd, 4096 + 7, 1 << 20).unwrap(),
            16384 - 7
        );
        // A window per file: another file's answer is its own.
        let (_dir2, g) = data_file(&vec![6u8; 64 * 1024]);
        let gd = Arc::new(OwnedFd::from(g.try_clone().unwrap()));
        evict(&g);
        assert_eq!(uptodate_prefix_kept(&gd, 0, 4096).unwrap(), 0);
        assert_eq!(uptodate_prefix_kept(&fd, 4096, 4096).unwrap(), 4096);
    }

    #[test]
    fn kept_windows_are_bounded_and_let_closed_files_go() {
        let dir = disk_tempdir();
        let count = |kept: &Kept| kept.windows.len();
        let mut files = Vec::new();
        for i in 0..KEPT + 4 {
            let path = dir.path().join(format!("f{i}"));
            std::fs::write(&path, b"data").unwrap();
            let fd = Arc::new(OwnedFd::from(File::open(&path).unwrap()));
            assert_eq!(uptodate_prefix_kept(&fd, 0, 4).unwrap(), 4);
            files.push(fd);
        }
        assert_eq!(KEPT_WINDOWS.with(|k| count(&lock(k))), KEPT);
        // Close every descriptor but one: their windows go, the open one's stays.
        let keep = files.pop().unwrap();
        drop(files);
        // A sweep unmaps them at once (a deleted file's blocks come back without waiting).
        release_closed();
        assert_eq!(KEPT_WINDOWS.with(|k| count(&lock(k))), 1);
        let path = dir.path().join("last");
        std::fs::write(&path, b"x").unwrap();
        let last = Arc::new(OwnedFd::from(File::open(&path).unwrap()));
        assert_eq!(uptodate_prefix_kept(&last, 0, 1).unwrap(), 1);
        assert_eq!(KEPT_WINDOWS.with(|k| count(&lock(k))), 2);
        assert_eq!(uptodate_prefix_kept(&keep, 0, 4).unwrap(), 4);
    }
}
