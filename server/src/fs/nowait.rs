//! Page-cache-only file access for `offload = auto`: operations that either complete without
//! any disk I/O or say [`Nowait::WouldBlock`] at once.
//!
//! - [`read_at`]: `preadv2(RWF_NOWAIT)` — the bytes already in the page cache, or `WouldBlock`.
//! - [`all_resident`]: `cachestat(2)` — whether a byte range is in the page cache, without reading.
//! - [`super::mincore`] answers the stricter "filled" question (pages readahead inserted but is
//!   still reading are "not yet"), which `sendfile` from the event loop needs.
//! - [`Nowait`] and [`is_unsupported`]: the shared answer shapes (the RESOLVE_CACHED open,
//!   [`super::open::open_file_cached`], answers with them too).
//!
//! This module never blocks on I/O and never decides where work runs; the caller (the volume)
//! goes to the pool when it gets `WouldBlock` or the volume is unsupported.

use rustix::fd::BorrowedFd;
use rustix::io::{Errno, ReadWriteFlags};
use std::io::{self, IoSliceMut};

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

pub(super) fn page_size() -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::test_support::{data_file, evict, read_evicted, resident_pages};
    use std::os::fd::AsFd;

    #[test]
    fn resident_file_reads_inline_and_evicted_file_would_block() {
        let content: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
        let (_dir, f) = data_file(&content);
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
        let (r, submitted) = read_evicted(&f, || read_at(f.as_fd(), &mut buf, 128 * 1024).unwrap());
        match r {
            Nowait::WouldBlock => {}
            // The read it submitted completed before it returned (a fast disk): never a wait.
            Nowait::Ready(n) => {
                assert!(submitted > 0, "evicted bytes came back without a read");
                assert_eq!(&buf[..n], &content[128 * 1024..128 * 1024 + n]);
            }
        }
    }

    #[test]
    fn all_resident_counts_pages_without_reading() {
        let (_dir, f) = data_file(&[1u8; 512 * 1024]);
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
        let (_dir, f) = data_file(&vec![7u8; 1024 * 1024]);
        // Make only the first 64 KiB resident, with readahead off so no more comes in. On a busy
        // machine the kernel may still fill more of the file between the setup and the read (a
        // larger folio, writeback finishing), and then a full read is right too; so the setup is
        // checked with mincore and the case is tried until the read meets a partly resident
        // range. A read that waits for the disk would show as a full read every time.
        let mut seen = Vec::new();
        for _ in 0..20 {
            evict(&f);
            rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::Random).unwrap();
            let mut small = vec![0u8; 64 * 1024];
            rustix::io::pread(&f, &mut small, 0).unwrap();
            let resident = resident_pages(&f, 512 * 1024);
            if !(16..128).contains(&resident) {
                seen.push(format!("setup left {resident} pages"));
                continue;
            }
            let mut buf = vec![0u8; 512 * 1024];
            match read_at(f.as_fd(), &mut buf, 0).unwrap() {
                Nowait::Ready(n) if (64 * 1024..512 * 1024).contains(&n) => {
                    assert!(buf[..n].iter().all(|&b| b == 7));
                    return;
                }
                Nowait::Ready(n) => seen.push(format!("read {n} with {resident} pages resident")),
                Nowait::WouldBlock => panic!("the first pages are resident"),
            }
        }
        panic!("no short read in 20 tries: {seen:?}");
    }
}
