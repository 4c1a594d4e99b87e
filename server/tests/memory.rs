//! The server gives freed heap back to the kernel: after a burst (slow readers holding their
//! answers' read-ahead) its resident memory comes down again instead of staying at the peak,
//! counted against a pod's memory limit; and what one slowly read answer holds.

mod common;

use common::cache::get;
use common::origin::{pattern, Object};
use common::wait_until;
use std::time::Duration;

/// Anonymous resident memory of `pid` (the heap; not the binary's mapped pages).
fn rss_anon(pid: u32) -> u64 {
    common::proc_status_bytes(pid, "RssAnon")
}

/// A client that asks for `path` (with `extra` header lines), reads the first 1024 bytes of
/// the answer and no more: a 4 KiB receive buffer set before connect, so the node holds the
/// answer, not the kernel. Returns the stream and those bytes.
fn slow_reader(
    addr: std::net::SocketAddr,
    path: &str,
    extra: &str,
) -> (std::net::TcpStream, Vec<u8>) {
    common::http::partly_read(addr, path, extra, Some(4096), 1024)
}

/// Readers that hold `pass_buffer_bytes` each while they do not read (a burst of slow
/// clients on answers passed through), then read to the end: the heap they held is freed, and
/// given back. (A burst of misses was the test's burst before; with 64 KiB origin reads it
/// leaves too little heap behind to tell, whereas these readers hold a known amount.)
#[test]
fn freed_heap_goes_back_to_the_kernel_after_a_burst() {
    use std::io::Read;
    const READERS: usize = 40;
    const SIZE: usize = 4 << 20;
    let o = common::origin::FaultOrigin::start();
    for i in 0..READERS {
        o.put(
            &format!("/p/{i}"),
            Object::new(pattern(SIZE, i as u8)).header("Set-Cookie", "s=1"),
        );
    }
    let n = common::cache::temp_node(&[o.url()], "pass_buffer_bytes = 2097152", "");
    let pid = n.srv.pid();
    assert_eq!(get(&n, "/p/0", "").body.len(), SIZE);
    let base = rss_anon(pid);
    let addr = n.srv.addr;
    let mut readers: Vec<(std::net::TcpStream, Vec<u8>)> = (0..READERS)
        .map(|i| slow_reader(addr, &format!("/p/{i}"), "Connection: close\r\n"))
        .collect();
    // Held: about pass_buffer_bytes per reader (80 MiB together).
    let held = wait_until(Duration::from_secs(10), || {
        rss_anon(pid) > base + (48 << 20)
    });
    let peak = rss_anon(pid);
    assert!(
        held,
        "the slow readers did not raise the heap ({} -> {} MiB): the test shows nothing",
        base >> 20,
        peak >> 20
    );
    for (c, all) in &mut readers {
        c.read_to_end(all).expect("the rest of the answer");
        let body = all
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|p| all.len() - p - 4);
        assert_eq!(body, Some(SIZE), "a whole answer");
    }
    drop(readers);
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

/// A passed-through answer read slowly holds about `pass_buffer_bytes` and the origin
/// connection's read buffer, not more: the chunks in flight are slices of hyper's read buffer,
/// which at its default (~400 KiB) kept 2.1 MiB alive per answer at `pass_buffer_bytes =
/// 65536` (42 MB for 20 slow readers); with a 64 KiB buffer, about 0.4 MiB.
#[test]
fn a_slowly_read_pass_through_holds_about_its_pass_buffer() {
    const READERS: usize = 16;
    let o = common::origin::FaultOrigin::start();
    for i in 0..READERS {
        o.put(
            &format!("/p/{i}"),
            Object::new(pattern(16 << 20, i as u8)).header("Set-Cookie", "s=1"),
        );
    }
    let n = common::cache::temp_node(&[o.url()], "pass_buffer_bytes = 65536", "");
    let pid = n.srv.pid();
    // Warm up the allocator and the connection paths with one answer read whole.
    assert_eq!(get(&n, "/p/0", "").body.len(), 16 << 20);
    let base = rss_anon(pid);
    let addr = n.srv.addr;
    let readers: Vec<std::net::TcpStream> = (0..READERS)
        .map(|i| slow_reader(addr, &format!("/p/{i}"), "").0)
        .collect();
    // Each answer is now held at its origin connection (read-ahead full, client not reading).
    std::thread::sleep(Duration::from_secs(3));
    let grown = rss_anon(pid).saturating_sub(base);
    assert!(
        grown < (READERS as u64) << 20,
        "{READERS} slow pass-through readers grew the heap by {} KiB ({} KiB each)",
        grown >> 10,
        (grown >> 10) / READERS as u64
    );
    drop(readers);
}
