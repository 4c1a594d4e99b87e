//! The server gives freed heap back to the kernel: after a burst of cache misses (each fill
//! buffers its origin body) its resident memory comes down again instead of staying at the
//! peak, counted against a pod's memory limit.

mod common;

use common::cache::{get, origin_and_node, wait_committed};
use common::origin::{pattern, Object};
use common::wait_until;
use std::time::Duration;

/// Anonymous resident memory of `pid` (the heap; not the binary's mapped pages).
fn rss_anon(pid: u32) -> u64 {
    common::proc_status_bytes(pid, "RssAnon")
}

#[test]
fn freed_heap_goes_back_to_the_kernel_after_a_burst_of_misses() {
    const CLIENTS: usize = 64;
    const EACH: usize = 4;
    let (o, n) = origin_and_node("slice_size = 0");
    for i in 0..CLIENTS * EACH {
        o.put(
            &format!("/m/{i}.bin"),
            Object::new(pattern(1 << 20, i as u8)),
        );
    }
    let pid = n.srv.pid();
    let base = rss_anon(pid);
    std::thread::scope(|scope| {
        for c in 0..CLIENTS {
            let n = &n;
            scope.spawn(move || {
                for k in 0..EACH {
                    let r = get(n, &format!("/m/{}.bin", c * EACH + k), "");
                    assert_eq!((r.status, r.body.len()), (200, 1 << 20));
                }
            });
        }
    });
    wait_committed(&n);
    let peak = rss_anon(pid);
    assert!(
        peak > base + (24 << 20),
        "the burst did not raise the heap ({} -> {} MiB): the test shows nothing",
        base >> 20,
        peak >> 20
    );
    let halfway = base + (peak - base) / 2;
    let came_down = wait_until(Duration::from_secs(15), || rss_anon(pid) < halfway);
    assert!(
        came_down,
        "resident heap still {} MiB 15 s after the burst (base {} MiB, peak {} MiB)",
        rss_anon(pid) >> 20,
        base >> 20,
        peak >> 20
    );
}
