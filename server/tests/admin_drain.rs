#![cfg(feature = "failpoints")]
//! Graceful shutdown as Kubernetes sees it: after SIGTERM, while a slow response is still in
//! flight, `/readyz` answers 503 (stop routing here) and `/healthz` stays 200 (do not kill);
//! the in-flight response completes and the process exits 0.
//!
//! Failpoint: `pool_task=return(media:MS)` keeps the in-flight request's pool tasks slow.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn readyz_turns_503_during_drain_while_healthz_stays_200() {
    let dir = content_dir(1, 1000);
    let cfg = Config {
        volumes: vec![volume("media", dir.path())
            .offload(Offload::Always)
            .pool(2, 4)],
        ..config(1)
    };
    let mut server = Server::start_with_failpoints(&cfg, "pool_task=return(media:800)");
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
    let mut last = String::new();
    let unready = wait_until(Duration::from_secs(2), || {
        let r = server.admin_get("/readyz");
        last = format!("{} {}", r.status, r.text());
        r.status == 503
    });
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
