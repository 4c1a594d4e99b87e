#![cfg(feature = "failpoints")]
//! `/healthz` means "the event loops are responsive", not just "the process exists": while the
//! only worker is stuck inside an inline open for longer than the 5 s staleness bound, `/healthz`
//! answers 503 naming the worker (the admin listener itself runs on its own thread), and turns
//! 200 again once the loop runs.
//!
//! Failpoint: `open_file=sleep(MS)` with offload `never` blocks the worker's loop for MS.

mod common;

use common::*;
use std::time::{Duration, Instant};

#[test]
fn healthz_fails_while_the_event_loop_is_stuck_and_recovers() {
    let dir = content_dir(1, 100);
    let cfg = Config {
        volumes: vec![volume("media", dir.path())
            .offload(Offload::Never)
            .pool(1, 0)],
        ..config(1)
    };
    let server = Server::start_with_failpoints(&cfg, "open_file=sleep(6500)");
    assert_eq!(server.admin_get("/healthz").status, 200);
    let addr = server.addr;
    let started = Instant::now();
    let client = std::thread::spawn(move || get(addr, "/f0.bin").status);

    let mut last = String::new();
    let unhealthy = wait_until(Duration::from_secs(6), || {
        let r = server.admin_get("/healthz");
        last = format!("{} {}", r.status, r.text());
        r.status == 503
    });
    assert!(
        unhealthy,
        "/healthz stayed 200 while the loop was stuck: {last}"
    );
    assert!(
        // The last tick came up to one 50 ms interval before the request.
        started.elapsed() >= Duration::from_millis(4900),
        "unhealthy only after the 5 s bound, was {:?}",
        started.elapsed()
    );
    assert!(last.contains("worker 0"), "{last}");

    assert_eq!(client.join().expect("client"), 200);
    assert!(
        wait_until(Duration::from_secs(1), || server
            .admin_get("/healthz")
            .status
            == 200),
        "healthy again once the loop runs"
    );
}
