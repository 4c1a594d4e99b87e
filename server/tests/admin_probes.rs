#![cfg(feature = "failpoints")]
//! The admin probes as Kubernetes sees them, under injected faults:
//! - graceful shutdown: after SIGTERM, while a slow response is still in flight, `/readyz`
//!   answers 503 (stop routing here) and `/healthz` stays 200 (do not kill); the in-flight
//!   response completes and the process exits 0 (`pool_task=return(media:MS)` keeps the
//!   request's pool tasks slow);
//! - liveness: `/healthz` means "the event loops are responsive", not just "the process exists":
//!   while the only worker is stuck inside an inline open for longer than the 5 s staleness
//!   bound, `/healthz` answers 503 naming the worker (the admin listener runs on its own thread),
//!   and turns 200 again once the loop runs (`open_file=sleep(MS)` with offload `never` blocks
//!   the worker's loop for MS).

mod common;

use common::*;
use std::time::{Duration, Instant};

/// One volume `media` at `dir` on one event loop, started with `failpoints`.
fn media_server(
    dir: &std::path::Path,
    offload: Offload,
    threads: usize,
    max_queue: usize,
    failpoints: &str,
) -> Server {
    let v = volume("media", dir)
        .offload(offload)
        .pool(threads, max_queue);
    Server::start_with_failpoints(&one_volume(1, v), failpoints)
}

#[test]
fn readyz_turns_503_during_drain_while_healthz_stays_200() {
    let dir = content_dir(1, 1000);
    let mut server = media_server(
        dir.path(),
        Offload::Always,
        2,
        4,
        "pool_task=return(media:800)",
    );
    assert_eq!(server.admin_get("/readyz").status, 200);

    let addr = server.addr;
    let in_flight = std::thread::spawn(move || get(addr, "/f0.bin"));
    assert!(
        wait_until(Duration::from_secs(2), || server
            .metrics()
            .get("contentserver_pool_busy_threads", &[("volume", "media")])
            == 1.0),
        "the slow request never reached the pool"
    );

    server.signal(SIGTERM);
    let (unready, last) = server.wait_admin_status("/readyz", 503, Duration::from_secs(2));
    assert!(unready, "/readyz stayed ready after SIGTERM: {last}");
    assert!(last.contains("draining"), "{last}");
    let h = server.admin_get("/healthz");
    assert_eq!(h.status, 200, "draining is not unhealthy: {}", h.text());

    let r = in_flight.join().expect("client thread");
    assert_eq!(r.status, 200, "the in-flight response finished");
    assert_eq!(r.body.len(), 1000);
    assert_eq!(
        server
            .wait_exit(Duration::from_secs(10))
            .and_then(|st| st.code()),
        Some(0)
    );
}

#[test]
fn healthz_fails_while_the_event_loop_is_stuck_and_recovers() {
    let dir = content_dir(1, 100);
    let server = media_server(dir.path(), Offload::Never, 1, 0, "open_file=sleep(6500)");
    assert_eq!(server.admin_get("/healthz").status, 200);
    let addr = server.addr;
    let started = Instant::now();
    let client = std::thread::spawn(move || get(addr, "/f0.bin").status);

    let (unhealthy, last) = server.wait_admin_status("/healthz", 503, Duration::from_secs(6));
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
        server
            .wait_admin_status("/healthz", 200, Duration::from_secs(1))
            .0,
        "healthy again once the loop runs"
    );
}
