//! Giving the allocator's free memory back to the kernel. glibc keeps what is freed in its
//! arenas (one per thread that allocated, up to eight per core) for reuse, and after a burst
//! (hundreds of fills buffering origin bodies, thousands of connections going idle) a process
//! stays at its peak: resident memory counted against a pod's limit that nothing uses.
//! `malloc_trim` hands the free pages back; this module decides when, and owns nothing else.

/// Free heap above which [`trim_if_slack`] trims: below it, keeping memory for reuse is cheaper
/// than giving it back and faulting it in again.
pub const SLACK_BYTES: usize = 32 << 20;

/// Every how often the server looks at its free heap.
pub const CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Give every arena's free memory back to the kernel.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Bytes held free by the allocator in all its arenas (0 where it cannot tell).
pub fn free_heap_bytes() -> usize {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's own statistics.
        let info = unsafe { libc::mallinfo2() };
        info.fordblks
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        0
    }
}

/// Trim when more than [`SLACK_BYTES`] are held free; true when it did.
pub fn trim_if_slack() -> bool {
    let free = free_heap_bytes();
    if free <= SLACK_BYTES {
        return false;
    }
    trim();
    tracing::debug!(free_bytes = free, "gave free heap back to the kernel");
    true
}
