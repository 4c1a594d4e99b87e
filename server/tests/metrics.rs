//! `/metrics` of the real server: every known series exists from start-up at 0 (the cache and
//! origin series on a server with a cache volume and an origin), the exposition passes
//! `promtool check metrics`, and the HTTP/connection/pool counters follow real traffic.

mod common;

use common::*;
use content_server::config::{ByteSize, CachePolicy, Origin, VolumeCache};
use std::process::{Command, Stdio};

/// Every metric family the server exports (README documents each).
const FAMILIES: &[&str] = &[
    "contentserver_pool_threads",
    "contentserver_pool_busy_threads",
    "contentserver_pool_queue_depth",
    "contentserver_pool_queue_capacity",
    "contentserver_pool_tasks_total",
    "contentserver_pool_rejected_total",
    "contentserver_pool_queue_wait_seconds",
    "contentserver_pool_task_duration_seconds",
    "contentserver_pool_busy_seconds_total",
    "contentserver_event_loop_lag_seconds",
    "contentserver_event_loop_stalls_total",
    "contentserver_http_requests_total",
    "contentserver_http_request_duration_seconds",
    "contentserver_http_requests_in_flight",
    "contentserver_http_response_bytes_total",
    "contentserver_connections_accepted_total",
    "contentserver_connections_active",
    "contentserver_connections_parked",
    "contentserver_connections_refused_total",
    "contentserver_page_cache_hits_total",
    "contentserver_page_cache_misses_total",
    "contentserver_build_info",
    "contentserver_log_lines_dropped_total",
];

/// The families of the caching node: created when a cache volume and its origin start.
const CACHE_FAMILIES: &[&str] = &[
    "contentserver_origin_requests_total",
    "contentserver_origin_request_duration_seconds",
    "contentserver_origin_received_bytes_total",
    "contentserver_origin_connections",
    "contentserver_origin_server_down",
    "contentserver_cache_requests_total",
    "contentserver_cache_served_bytes_total",
    "contentserver_cache_fills_in_flight",
    "contentserver_cache_collapsed_total",
    "contentserver_cache_fill_resumes_total",
    "contentserver_cache_size_bytes",
    "contentserver_cache_max_bytes",
    "contentserver_cache_entries",
    "contentserver_cache_evictions_total",
    "contentserver_cache_purges_total",
    "contentserver_cache_store_failures_total",
];

/// A static volume `disk1` at `/disk1` and a cache volume `cache1` (max_size 1 MiB) serving `/`
/// from the origin `origin`, whose one server refuses connections (it is never asked).
fn cache_server(disk: &std::path::Path, cache: &std::path::Path) -> Server {
    let mut cached = volume("cache1", cache).pool(2, 16);
    cached.cache = Some(VolumeCache {
        max_size: Some(ByteSize(1 << 20)),
        ..VolumeCache::default()
    });
    let mut to_origin = route("/", "cache1");
    to_origin.origin = Some("origin".into());
    to_origin.cache = Some(CachePolicy::default());
    let volumes = vec![volume("disk1", disk).pool(2, 4), cached];
    let mut routes = route_per_volume(&volumes[..1]);
    routes.push(to_origin);
    Server::start(&Config {
        origins: vec![Origin::new("origin", vec![common::origin::refused_url()])],
        routes,
        volumes,
        ..config(2)
    })
}

fn two_volume_server(a: &std::path::Path, b: &std::path::Path) -> Server {
    let volumes = vec![
        volume("disk1", a).offload(Offload::Always).pool(3, 7),
        volume("disk2", b).offload(Offload::Auto).pool(5, 0),
    ];
    Server::start(&Config {
        routes: route_per_volume(&volumes),
        volumes,
        ..config(2)
    })
}

/// The exposition has a `# TYPE` line for every family of `lists`, and none for another family.
fn assert_families(m: &Metrics, lists: &[&[&str]]) {
    let known: Vec<&str> = lists.iter().flat_map(|l| l.iter().copied()).collect();
    for family in &known {
        assert!(
            m.text.contains(&format!("# TYPE {family} ")),
            "family {family} missing in\n{}",
            m.text
        );
    }
    for line in m.text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let name = line.split(' ').nth(2).unwrap_or("");
        assert!(known.contains(&name), "undocumented family {name}");
    }
}

#[test]
fn every_known_series_exists_at_start_with_zero_values() {
    let (a, b) = (content_dir(1, 10), content_dir(1, 10));
    let server = two_volume_server(a.path(), b.path());
    let m = server.metrics();

    // Nothing exported that the README does not document.
    assert_families(&m, &[FAMILIES]);

    for (vol, threads, cap) in [("disk1", 3.0, 7.0), ("disk2", 5.0, 0.0)] {
        let v = [("volume", vol)];
        assert_eq!(m.get("contentserver_pool_threads", &v), threads);
        assert_eq!(m.get("contentserver_pool_queue_capacity", &v), cap);
        for zero in [
            "contentserver_pool_busy_threads",
            "contentserver_pool_queue_depth",
            "contentserver_pool_rejected_total",
            "contentserver_pool_busy_seconds_total",
            "contentserver_pool_queue_wait_seconds_count",
        ] {
            assert_eq!(m.get(zero, &v), 0.0, "{zero}{{volume={vol}}}");
        }
        for op in ["open", "read", "sendfile"] {
            let vo = [("volume", vol), ("op", op)];
            assert_eq!(m.get("contentserver_pool_tasks_total", &vo), 0.0);
            assert_eq!(
                m.get("contentserver_pool_task_duration_seconds_count", &vo),
                0.0
            );
        }
        for op in ["open", "read"] {
            let vo = [("volume", vol), ("op", op)];
            assert_eq!(m.get("contentserver_page_cache_hits_total", &vo), 0.0);
            assert_eq!(m.get("contentserver_page_cache_misses_total", &vo), 0.0);
        }
    }
    for w in ["0", "1"] {
        assert_eq!(
            m.get("contentserver_event_loop_stalls_total", &[("worker", w)]),
            0.0
        );
        // The lag histogram exists per worker (the probe may already have ticked).
        m.get(
            "contentserver_event_loop_lag_seconds_count",
            &[("worker", w)],
        );
    }
    assert!(
        m.try_get("contentserver_event_loop_stalls_total", &[("worker", "2")])
            .is_none(),
        "only the configured workers are probed"
    );
    for zero in [
        "contentserver_http_request_duration_seconds_count",
        "contentserver_http_requests_in_flight",
        "contentserver_http_response_bytes_total",
        "contentserver_connections_accepted_total",
        "contentserver_connections_active",
        "contentserver_connections_refused_total",
    ] {
        assert_eq!(m.get(zero, &[]), 0.0, "{zero}");
    }
    for method in ["GET", "HEAD"] {
        for code in ["200", "206", "304", "404", "503"] {
            assert_eq!(
                m.get(
                    "contentserver_http_requests_total",
                    &[("method", method), ("code", code)]
                ),
                0.0
            );
        }
    }
    assert_eq!(
        m.get(
            "contentserver_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
}

#[test]
fn cache_and_origin_series_exist_at_start_with_zero_values() {
    let (disk, cache) = (content_dir(1, 10), tempdir());
    let server = cache_server(disk.path(), cache.path());
    let m = server.metrics();

    assert_families(&m, &[FAMILIES, CACHE_FAMILIES]);

    let o = [("origin", "origin")];
    for code in ["2xx", "3xx", "4xx", "5xx", "error"] {
        let oc = [("origin", "origin"), ("code", code)];
        assert_eq!(m.get("contentserver_origin_requests_total", &oc), 0.0);
    }
    assert_eq!(
        m.get("contentserver_origin_request_duration_seconds_count", &o),
        0.0
    );
    assert_eq!(m.get("contentserver_origin_received_bytes_total", &o), 0.0);
    assert_eq!(m.get("contentserver_origin_connections", &o), 0.0);
    // (Its one server, by its URL: never asked, so not marked down.)
    let down: Vec<_> = m
        .text
        .lines()
        .filter(|l| l.starts_with("contentserver_origin_server_down{"))
        .collect();
    assert_eq!(down.len(), 1, "{down:?}");
    assert!(
        down[0].starts_with(
            "contentserver_origin_server_down{origin=\"origin\",server=\"http://127.0.0.1:"
        ) && down[0].ends_with("} 0"),
        "{down:?}"
    );

    let v = [("volume", "cache1")];
    for status in ["hit", "miss", "stale", "updating", "revalidated", "bypass"] {
        let vs = [("volume", "cache1"), ("status", status)];
        assert_eq!(m.get("contentserver_cache_requests_total", &vs), 0.0);
    }
    for source in ["cache", "origin"] {
        let vs = [("volume", "cache1"), ("source", source)];
        assert_eq!(m.get("contentserver_cache_served_bytes_total", &vs), 0.0);
    }
    for reason in ["size", "inactive", "invalid", "replaced"] {
        let vr = [("volume", "cache1"), ("reason", reason)];
        assert_eq!(m.get("contentserver_cache_evictions_total", &vr), 0.0);
    }
    for reason in ["disk_full", "error"] {
        let vr = [("volume", "cache1"), ("reason", reason)];
        assert_eq!(m.get("contentserver_cache_store_failures_total", &vr), 0.0);
    }
    for zero in [
        "contentserver_cache_fills_in_flight",
        "contentserver_cache_collapsed_total",
        "contentserver_cache_fill_resumes_total",
        "contentserver_cache_size_bytes",
        "contentserver_cache_entries",
        "contentserver_cache_purges_total",
    ] {
        assert_eq!(m.get(zero, &v), 0.0, "{zero}{{volume=cache1}}");
    }
    assert_eq!(
        m.get("contentserver_cache_max_bytes", &v),
        (1u64 << 20) as f64
    );
    // Only cache volumes have cache series; every volume has its pool.
    assert!(m
        .try_get("contentserver_cache_size_bytes", &[("volume", "disk1")])
        .is_none());
    assert_eq!(m.get("contentserver_pool_threads", &v), 2.0);
    assert_promtool_clean(&server.admin_get("/metrics").text());
}

#[test]
fn promtool_check_metrics_reports_nothing() {
    let (a, b) = (content_dir(2, 5000), content_dir(1, 10));
    let server = two_volume_server(a.path(), b.path());
    // Some traffic first, so labelled series created on demand (method, code) are checked too.
    assert_eq!(server.get("/disk1/f0.bin").status, 200);
    assert_eq!(server.get("/disk2/missing").status, 404);
    assert_promtool_clean(&server.admin_get("/metrics").text());
}

/// `promtool check metrics` accepts the exposition `body` and reports nothing.
fn assert_promtool_clean(body: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool must be installed (Debian package `prometheus`, scripts/deps.sh)");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(body.as_bytes()).expect("feed promtool");
    }
    let out = child.wait_with_output().expect("promtool ran");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool failed: {report}\n{body}");
    assert_eq!(report.trim(), "", "promtool found problems");
}

#[test]
fn http_and_connection_counters_follow_traffic() {
    let (a, b) = (content_dir(3, 5000), content_dir(1, 10));
    let server = two_volume_server(a.path(), b.path());
    // Distinct files: a repeated one may be served from the open-file cache without a pool task.
    for i in 0..3 {
        assert_eq!(server.get(&format!("/disk1/f{i}.bin")).status, 200);
    }
    assert_eq!(server.get("/disk2/nope").status, 404);

    let m = server.metrics();
    let code = |c: &str| {
        m.try_get(
            "contentserver_http_requests_total",
            &[("method", "GET"), ("code", c)],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(code("200"), 3.0);
    assert_eq!(code("404"), 1.0);
    assert_eq!(
        m.get("contentserver_http_request_duration_seconds_count", &[]),
        4.0
    );
    assert_eq!(m.get("contentserver_connections_accepted_total", &[]), 4.0);
    let bytes = m.get("contentserver_http_response_bytes_total", &[]);
    assert!(bytes >= 3.0 * 5000.0, "response bytes {bytes}");
    // The opens of disk1 went to its pool (offload = always).
    assert_eq!(
        m.get(
            "contentserver_pool_tasks_total",
            &[("volume", "disk1"), ("op", "open")]
        ),
        3.0
    );
    // Closed connections are no longer active; nothing in flight.
    assert!(wait_until(std::time::Duration::from_secs(2), || {
        let m = server.metrics();
        m.get("contentserver_connections_active", &[]) == 0.0
            && m.get("contentserver_http_requests_in_flight", &[]) == 0.0
    }));
}

#[test]
fn refused_connections_are_counted_and_active_follows_open_connections() {
    use std::io::{Read, Write};
    let dir = content_dir(1, 100);
    let mut cfg = one_volume(
        1,
        volume("media", dir.path())
            .offload(Offload::Always)
            .pool(2, 4),
    );
    cfg.limits.max_connections = 1;
    cfg.limits.idle_park_ms = 0;
    let server = Server::start(&cfg);
    // One keep-alive connection holds the only slot.
    let mut held = std::net::TcpStream::connect(server.addr).expect("connect");
    write!(held, "GET /f0.bin HTTP/1.1\r\nHost: t\r\n\r\n").expect("write");
    let mut buf = [0u8; 4096];
    let n = held.read(&mut buf).expect("response");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    // In the middle of its next request head: not idle, so never closed to make room for the
    // extra ones.
    write!(held, "GET /f0.bin HTTP/1.1\r\n").expect("write");

    // A second connection is answered 503 at once and closed.
    for _ in 0..2 {
        let mut extra = std::net::TcpStream::connect(server.addr).expect("connect");
        extra
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        let _ = write!(extra, "GET /f0.bin HTTP/1.1\r\nHost: t\r\n\r\n");
        let mut out = Vec::new();
        let _ = extra.read_to_end(&mut out);
        let out = String::from_utf8_lossy(&out);
        assert!(
            out.starts_with("HTTP/1.1 503") && out.contains("Retry-After: 1"),
            "a refused connection got {out:?}"
        );
    }
    // The server counts right after it closes, so the client may see the close first.
    assert!(wait_until(std::time::Duration::from_secs(2), || server
        .metrics()
        .get("contentserver_connections_refused_total", &[])
        >= 2.0));
    let m = server.metrics();
    assert_eq!(m.get("contentserver_connections_refused_total", &[]), 2.0);
    assert_eq!(m.get("contentserver_connections_accepted_total", &[]), 1.0);
    assert_eq!(m.get("contentserver_connections_active", &[]), 1.0);

    drop(held);
    assert!(wait_until(std::time::Duration::from_secs(2), || server
        .metrics()
        .get("contentserver_connections_active", &[])
        == 0.0));
}

#[test]
fn an_aborted_download_counts_the_bytes_that_went_out() {
    use std::io::{Read, Write};
    let d = tempdir();
    let size = 32usize << 20;
    std::fs::write(d.path().join("big.bin"), bytes(size, 3)).unwrap();
    let server = Server::start(&one_volume(2, volume("root", d.path())));
    let mut s = std::net::TcpStream::connect(server.addr).unwrap();
    s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    // Take 2 MiB, then leave (a player seeking elsewhere).
    let mut got = 0usize;
    let mut buf = vec![0u8; 64 << 10];
    while got < 2 << 20 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the server closed early");
        got += n;
    }
    drop(s);
    let counted = || {
        let m = server.metrics();
        (
            m.try_get(
                "contentserver_http_requests_total",
                &[("method", "GET"), ("code", "200")],
            )
            .unwrap_or(0.0),
            m.get("contentserver_http_response_bytes_total", &[]),
        )
    };
    assert!(
        wait_until(std::time::Duration::from_secs(20), || counted().0 == 1.0),
        "the aborted response was never counted"
    );
    let bytes = counted().1;
    assert!(
        bytes >= got as f64 && bytes < size as f64,
        "counted {bytes} bytes; the client read {got} of {size}"
    );
}
