//! Running out of file descriptors: telling it from other errors, the spare descriptor
//! (libev's "accept with a spare descriptor") that lets a listener still accept one connection
//! then, to answer it (a 503, a health probe) instead of leaving it in the backlog, and the
//! share of RLIMIT_NOFILE each volume may keep open.
//!
//! Owns only that; what to answer is the listener's.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
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
