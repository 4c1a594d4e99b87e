//! Overflow and isolation with fault injection (FAILPOINTS in the server process): a stalled
//! pool of 1 thread with max_queue 0 answers the excess with 503 + Retry-After at once and logs
//! the nginx line; other volumes, and the loop itself, stay responsive.
#![cfg(feature = "failpoints")]

mod common;

use common::*;
use std::time::{Duration, Instant};

fn two_volumes(
    slow_threads: usize,
    slow_queue: usize,
    stall_ms: u64,
) -> (tempfile::TempDir, Server) {
    let base = tempdir();
    let slow = base.path().join("slow");
    let fast = base.path().join("fast");
    std::fs::create_dir_all(&slow).unwrap();
    std::fs::create_dir_all(&fast).unwrap();
    std::fs::write(slow.join("a.txt"), b"slow a").unwrap();
    std::fs::write(fast.join("b.txt"), b"fast b").unwrap();
    let volumes = vec![
        volume("slowvol", &slow)
            .offload(Offload::Always)
            .pool(slow_threads, slow_queue),
        volume("fastvol", &fast).offload(Offload::Always).pool(1, 0),
    ];
    let cfg = Config {
        volumes,
        routes: vec![
            route("/slow", "slowvol").strip_prefix(),
            route("/", "fastvol"),
        ],
        ..config(1)
    };
    let s = Server::start_with_failpoints(&cfg, &format!("pool_task=return(slowvol:{stall_ms})"));
    (base, s)
}

fn send_get(s: &Server, path: &str) -> Conn {
    let mut c = s.connect();
    c.send(&request_bytes("GET", path, &[], true));
    c
}

#[test]
fn overflow_gets_503_at_once_and_other_volumes_are_not_blocked() {
    let (_d, s) = two_volumes(1, 0, 1500);
    let t0 = Instant::now();
    let mut stalled = send_get(&s, "/slow/a.txt");
    std::thread::sleep(Duration::from_millis(150));
    // The only thread of slowvol is stalled and nothing may wait: 503 at once.
    let t = Instant::now();
    let r = s.get("/slow/a.txt");
    let overflow_latency = t.elapsed();
    assert_eq!(r.status, 503);
    assert_eq!(r.header("Retry-After"), Some("1"));
    assert!(
        overflow_latency < Duration::from_millis(200),
        "503 took {overflow_latency:?}"
    );
    assert!(
        s.wait_log(
            "thread pool \"slowvol\" queue overflow: 0 tasks waiting",
            Duration::from_secs(2)
        ),
        "{}",
        s.logs()
    );
    // Another volume on the same (single) event loop answers quickly, many times.
    for _ in 0..10 {
        let t = Instant::now();
        let r = s.get("/b.txt");
        assert_eq!((r.status, r.body.as_slice()), (200, b"fast b".as_slice()));
        assert!(
            t.elapsed() < Duration::from_millis(200),
            "fast volume took {:?}",
            t.elapsed()
        );
    }
    // The stalled request itself completes.
    let r = stalled.response(false).unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, b"slow a".as_slice()));
    assert!(t0.elapsed() >= Duration::from_millis(1500));
    // Exactly one overflow line per rejected request.
    assert_eq!(
        s.logs().matches("queue overflow").count(),
        1,
        "{}",
        s.logs()
    );
}

#[test]
fn waiting_tasks_up_to_max_queue_then_503() {
    let (_d, s) = two_volumes(1, 1, 600);
    let mut running = send_get(&s, "/slow/a.txt");
    std::thread::sleep(Duration::from_millis(100));
    let mut queued = send_get(&s, "/slow/a.txt");
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    let r = s.get("/slow/a.txt");
    assert_eq!(r.status, 503);
    assert!(t.elapsed() < Duration::from_millis(200));
    assert!(
        s.wait_log(
            "thread pool \"slowvol\" queue overflow: 1 tasks waiting",
            Duration::from_secs(2)
        ),
        "{}",
        s.logs()
    );
    assert_eq!(running.response(false).unwrap().status, 200);
    assert_eq!(queued.response(false).unwrap().status, 200);
}

#[test]
fn head_of_overflowing_volume_and_keepalive_connection_survive() {
    let (_d, s) = two_volumes(1, 0, 800);
    let _stalled = send_get(&s, "/slow/a.txt");
    std::thread::sleep(Duration::from_millis(100));
    // 503 keeps the connection usable: the next request on it is answered by the fast volume.
    let mut c = s.connect();
    c.send(b"GET /slow/a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).unwrap().status, 503);
    c.send(b"GET /b.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).unwrap().status, 200);
}

/// Admission happens before the head: an admitted response is never cut short by overflow,
/// even when new requests keep the pool full while its body chunks are queued.
#[test]
fn overflow_never_cuts_an_admitted_response_short() {
    let base = tempdir();
    let slow = base.path().join("slow");
    std::fs::create_dir_all(&slow).unwrap();
    let body = bytes(32 * 1024, 7);
    std::fs::write(slow.join("big.bin"), &body).unwrap();
    let mut cfg = one_volume(
        1,
        volume("slowvol", &slow).offload(Offload::Always).pool(2, 0),
    );
    cfg.limits.sendfile_max_chunk = 4096;
    let s = Server::start_with_failpoints(&cfg, "pool_task=return(slowvol:30)");
    // Requests arrive every 25 ms while earlier ones are sending their 8 chunks of 30 ms each.
    let clients: Vec<_> = (0..12)
        .map(|i| {
            std::thread::sleep(Duration::from_millis(25));
            let mut c = send_get(&s, "/big.bin");
            std::thread::spawn(move || match c.response(false) {
                Ok(r) => (i, r.status, r.body.len()),
                Err(e) => panic!("request {i}: {e}"),
            })
        })
        .collect();
    let results: Vec<_> = clients.into_iter().map(|h| h.join().unwrap()).collect();
    for &(i, status, len) in &results {
        match status {
            200 => assert_eq!(len, body.len(), "request {i}: 200 cut short"),
            503 => {}
            other => panic!("request {i}: status {other}"),
        }
    }
    let ok = results.iter().filter(|r| r.1 == 200).count();
    let rejected = results.len() - ok;
    assert!(ok >= 2 && rejected >= 1, "{results:?}");
    assert_eq!(
        s.logs().matches("queue overflow").count(),
        rejected,
        "one overflow line per 503\n{}",
        s.logs()
    );
}
