//! Running out of file descriptors: telling it from other errors, the spare descriptor
//! (libev's "accept with a spare descriptor") that lets a listener still accept one connection
//! then, to answer it (a 503, a health probe) instead of leaving it in the backlog, the share of
//! RLIMIT_NOFILE each volume may keep open, and the admin port's reserve: the last descriptor
//! numbers, which the data plane never keeps.
//!
//! Owns only that; what to answer is the listener's.

use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::io::Errno;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// EMFILE / ENFILE: the process's (or system's) limit, not a fault of what was opened.
pub fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Descriptors one of `volumes` volumes may keep open between requests (its open-file cache,
/// or a cache volume's open entries): together a quarter of RLIMIT_NOFILE's soft limit, the
/// share `runtime::connections_within` leaves them.
pub fn volume_share(volumes: usize) -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    (limit / 4 / volumes.max(1) as u64).min(usize::MAX as u64) as usize
}

/// Descriptor numbers from here up are the admin port's reserve ([`reserve_for_admin`]); none
/// until it is set.
static DATA_PLANE_LIMIT: AtomicU64 = AtomicU64::new(u64::MAX);

/// How many descriptors RLIMIT_NOFILE's soft limit `limit` keeps for the admin port: 1/64 of
/// it, 8 at least (a few probes), 72 at most (its 64 connections and what answering them
/// opens), and never more than an eighth (a tiny limit is mostly the data plane's).
pub fn admin_reserve(limit: u64) -> u64 {
    (limit / 64).clamp(8, 72).min(limit / 8)
}

/// Keep the last [`admin_reserve`] descriptor numbers below `limit` (the soft RLIMIT_NOFILE) for
/// the admin port. Its accepts and the data plane's share one descriptor table, and the kernel
/// gives out the lowest free number: with the table full, a number the admin port frees to
/// accept a probe (its spare) could go to a data-plane accept first, again and again under a
/// storm of new connections. With the reserve, the data plane runs out first, at
/// `limit - reserve` ([`in_admin_reserve`]), and the admin port still has numbers to accept on.
pub fn reserve_for_admin(limit: u64) {
    let reserve = admin_reserve(limit);
    DATA_PLANE_LIMIT.store(limit.saturating_sub(reserve), Ordering::Relaxed);
    tracing::info!(
        rlimit_nofile = limit,
        admin_reserve = reserve,
        "the last descriptors are kept for the admin port"
    );
}

/// Is `fd`, which the data plane just got, numbered in the admin port's reserve? The kernel
/// gives out the lowest free number, so then every number below it was taken: the data plane is
/// out of descriptors, as if at its own limit.
pub fn in_admin_reserve(fd: BorrowedFd<'_>) -> bool {
    fd.as_raw_fd() as u64 >= DATA_PLANE_LIMIT.load(Ordering::Relaxed)
}

/// A descriptor the data plane just got (an opened file, a cache entry): closed and EMFILE when
/// it is numbered in the admin port's reserve ([`in_admin_reserve`]), so the data plane never
/// keeps one of those numbers and its callers see what running out looks like.
pub fn for_data_plane(opened: Result<OwnedFd, Errno>) -> Result<OwnedFd, Errno> {
    match opened {
        Ok(fd) if in_admin_reserve(fd.as_fd()) => Err(Errno::MFILE),
        other => other,
    }
}

/// One descriptor (`/dev/null`) held back for the moment every other one is taken.
pub struct SpareDescriptor {
    fd: Mutex<Option<File>>,
    /// No spare held (in use, or its number taken by another thread before it could be opened
    /// again): [`SpareDescriptor::retake`] tries again.
    missing: AtomicBool,
}

impl SpareDescriptor {
    /// None held yet: [`SpareDescriptor::retake`] takes it.
    pub const fn new() -> SpareDescriptor {
        SpareDescriptor {
            fd: Mutex::new(None),
            missing: AtomicBool::new(true),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<File>> {
        self.fd.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Let the spare go, so that one descriptor is free for the caller's next open or accept;
    /// false when none was held.
    pub fn release(&self) -> bool {
        let released = self.lock().take().is_some();
        self.missing.store(true, Ordering::Relaxed);
        released
    }

    /// Take the spare again unless it is held (best effort; cheap when it is: one atomic load).
    pub fn retake(&self) {
        if !self.missing.load(Ordering::Relaxed) {
            return;
        }
        let mut fd = self.lock();
        if fd.is_none() {
            *fd = File::open("/dev/null").ok();
        }
        self.missing.store(fd.is_none(), Ordering::Relaxed);
    }
}

impl Default for SpareDescriptor {
    fn default() -> SpareDescriptor {
        SpareDescriptor::new()
    }
}

#[cfg(test)]
mod tests {
    use super::admin_reserve;

    #[test]
    fn the_admin_reserve_is_a_64th_within_8_and_72_and_never_over_an_eighth() {
        assert_eq!(admin_reserve(256), 8);
        assert_eq!(admin_reserve(1024), 16);
        assert_eq!(admin_reserve(1 << 20), 72);
        assert_eq!(admin_reserve(32), 4);
        assert_eq!(admin_reserve(7), 0);
    }
}
