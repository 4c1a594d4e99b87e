//! How many blocks this thread has submitted for reading (`getrusage(RUSAGE_THREAD)`'s
//! `ru_inblock`, counted when a read is submitted to the disk, before it completes): how the
//! event loop tells a disk read of its own from being preempted, and how tests see one. It must
//! not decide anything.

/// Blocks this thread has submitted for reading so far; 0 if it cannot be asked.
pub fn blocks_read() -> i64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the zeroed buffer it is given.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, ru.as_mut_ptr()) } != 0 {
        return 0;
    }
    // SAFETY: zero-initialised and then filled by the kernel: a valid rusage.
    unsafe { ru.assume_init() }.ru_inblock
}
