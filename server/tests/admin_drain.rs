#![cfg(feature = "failpoints")]
//! Graceful shutdown as Kubernetes sees it: after SIGTERM, while a slow response is still in
//! flight, `/readyz` answers 503 (stop routing here) and `/healthz` stays 200 (do not kill);
//! the in-flight response completes and the process exits 0.
//!
//! Failpoint: `pool_task=return(media:MS)` keeps the in-flight request's pool tasks slow.

mod admin_support;

use admin_support::*;
use std::time::Duration;

#[test]
fn readyz_turns_503_during_drain_while_healthz_stays_200() {
    let dir = content_dir(1, 1000);
    let mut server = Server::start(
        |port, admin| {
            config_toml(
                port,
                admin,
                1,
                &[Vol {
                    name: "media",
                    path: dir.path(),
                    offload: "always",
                    threads: 2,
                    max_queue: 4,
                }],
            )
        },
        "pool_task=return(media:800)",
    );
    assert_eq!(get(server.admin, "/readyz").status, 200);

    let addr = server.addr;
    let in_flight = std::thread::spawn(move || get(addr, "/f0.bin"));
    assert!(
        wait_until(Duration::from_secs(2), || server
            .metrics()
            .get("contentserver_pool_busy_threads", &[("volume", "media")])
            == 1.0),
        "the slow request never reached the pool"
    );

    server.sigterm();
    let mut last = String::new();
    let unready = wait_until(Duration::from_secs(2), || {
        let r = get(server.admin, "/readyz");
        last = format!("{} {}", r.status, r.body);
        r.status == 503
    });
    assert!(unready, "/readyz stayed ready after SIGTERM: {last}");
    assert!(last.contains("draining"), "{last}");
    let h = get(server.admin, "/healthz");
    assert_eq!(h.status, 200, "draining is not unhealthy: {}", h.body);

    let r = in_flight.join().expect("client thread");
    assert_eq!(r.status, 200, "the in-flight response finished");
    assert_eq!(r.body.len(), 1000);
    assert_eq!(server.wait_exit(Duration::from_secs(10)), Some(0));
}
