//! The admin listener of the real server: `/healthz`, `/readyz` (including a volume root that
//! disappears, or is replaced by another directory), `/config` equal to the configuration file, content types, unknown paths, and the
//! listener switched off with an empty `admin.listen`.

mod common;

use common::*;
use std::time::Duration;

fn server_for(dir: &std::path::Path) -> Server {
    Server::start(&one_volume(
        2,
        volume("media", dir).offload(Offload::Always).pool(4, 16),
    ))
}

#[test]
fn healthz_and_readyz_are_ok_when_serving() {
    let dir = content_dir(1, 100);
    let server = server_for(dir.path());
    let h = server.admin_get("/healthz");
    assert_eq!(h.status, 200, "{}", h.text());
    let r = server.admin_get("/readyz");
    assert_eq!(r.status, 200, "{}", r.text());
    // It is the same process that serves content.
    assert_eq!(server.get("/f0.bin").status, 200);
    assert_eq!(server.admin_get("/nope").status, 404);
    // Purging off (no token file): its endpoint is not there, whatever the method (GET was a
    // 405 with `Allow: POST`, which said it was).
    for method in ["GET", "POST", "DELETE"] {
        let r = request(server.admin(), method, "/cache/purge?key=/f0.bin", &[]);
        assert_eq!(r.status, 404, "{method}");
        assert!(r.header("allow").is_none(), "{method}: {:?}", r.headers);
    }
    let m = server.admin_get("/metrics");
    assert!(
        m.header("content-type")
            .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
        "{:?}",
        m.headers
    );
}

/// An HTTP/1.1 request without a Host field, one with two or with an invalid one is answered
/// 400 on the admin port too, and its connection closed (RFC 9112 §3.2); HTTP/1.0 needs none.
#[test]
fn admin_requests_need_exactly_one_valid_host() {
    use std::io::{Read, Write};
    let dir = content_dir(1, 100);
    let server = server_for(dir.path());
    let ask = |head: &str| {
        let mut c = std::net::TcpStream::connect(server.admin()).expect("connect");
        c.write_all(head.as_bytes()).expect("send");
        let mut out = String::new();
        c.read_to_string(&mut out).expect("read");
        out
    };
    for (head, want) in [
        (
            "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 400",
        ),
        (
            "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 400",
        ),
        (
            "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 200",
        ),
        ("GET /healthz HTTP/1.0\r\n\r\n", "HTTP/1.0 200"),
        // As on the data port: an invalid or empty value, and two fields in any version (no
        // `Connection: close` asked: reading to the end shows the server closed).
        ("GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n", "HTTP/1.1 400"),
        ("GET /healthz HTTP/1.1\r\nHost:\r\n\r\n", "HTTP/1.1 400"),
        (
            "GET /healthz HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n",
            "HTTP/1.0 400",
        ),
        // An absolute-form target's authority is checked too, as on the data port.
        (
            "GET http://user@x/healthz HTTP/1.1\r\nHost: x\r\n\r\n",
            "HTTP/1.1 400",
        ),
        (
            "CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n",
            "HTTP/1.1 400",
        ),
        (
            "GET http://x:9190/healthz HTTP/1.1\r\nHost: x:9190\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 200",
        ),
        (
            "GET /healthz HTTP/1.1\r\nHost: [::1]:9190\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 200",
        ),
    ] {
        let out = ask(head);
        assert!(out.starts_with(want), "{head:?}: {out}");
    }
}

#[test]
fn config_endpoint_is_the_effective_configuration() {
    let dir = content_dir(1, 100);
    let server = server_for(dir.path());
    let r = server.admin_get("/config");
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/json")));
    let served: Config = serde_json::from_slice(&r.body).expect("/config is a Config as JSON");
    let config_path = server.config_path.as_ref().expect("started from a file");
    let mut expected = Config::load(config_path).expect("the test's config is valid");
    // Effective: max_connections lowered to what the descriptor limit leaves (the server
    // raises its soft limit to the hard one, which it inherits from this process).
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass; nothing else is touched.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    if lim.rlim_max != libc::RLIM_INFINITY {
        let fit = content_server::runtime::connections_within(lim.rlim_max).max(1) as usize;
        expected.limits.max_connections = expected.limits.max_connections.min(fit);
    }
    assert_eq!(served, expected);
    // Spot-check the JSON shape operators script against.
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
    assert_eq!(v["volumes"][0]["name"], "media");
    assert_eq!(v["volumes"][0]["pool"]["threads"], 4);
    assert_eq!(v["workers"], 2);
}

#[test]
fn config_endpoint_shows_command_line_overrides() {
    let dir = content_dir(1, 100);
    let root = dir.path().to_path_buf();
    // The ports are named before the start, as /config shows them: retry on a port race.
    let server = (0..3)
        .find_map(|_| {
            let listen = format!("127.0.0.1:{}", free_port());
            let admin = format!("127.0.0.1:{}", free_port());
            Server::try_spawn(
                &[
                    "serve",
                    "--root",
                    root.to_str().expect("utf-8"),
                    "--listen",
                    &listen,
                    "--admin-listen",
                    &admin,
                    "--threads",
                    "3",
                    "--max-queue",
                    "9",
                    "--offload",
                    "never",
                    "--workers",
                    "1",
                ],
                &[],
            )
            .ok()
        })
        .expect("content-server started on named ports");
    let v: serde_json::Value =
        serde_json::from_slice(&server.admin_get("/config").body).expect("json");
    assert_eq!(v["admin"]["listen"], server.admin().to_string());
    assert_eq!(v["listeners"][0]["port"], server.addr.port());
    assert_eq!(v["workers"], 1);
    let vol = &v["volumes"][0];
    assert_eq!(vol["name"], "root");
    assert_eq!(vol["path"], root.display().to_string());
    assert_eq!(vol["offload"], "never");
    assert_eq!(vol["pool"]["threads"], 3);
    assert_eq!(vol["pool"]["max_queue"], 9);
    // The pool's gauges agree with the configuration shown.
    let m = server.metrics();
    assert_eq!(
        m.get("contentserver_pool_threads", &[("volume", "root")]),
        3.0
    );
    assert_eq!(
        m.get("contentserver_pool_queue_capacity", &[("volume", "root")]),
        9.0
    );
}

#[test]
fn readyz_fails_when_a_volume_root_disappears() {
    let parent = tempfile::tempdir().expect("tempdir");
    let root = parent.path().join("media");
    std::fs::create_dir(&root).expect("mkdir");
    let server = server_for(&root);
    assert_eq!(server.admin_get("/readyz").status, 200);
    std::fs::remove_dir(&root).expect("rmdir");
    let r = server.admin_get("/readyz");
    assert_eq!(r.status, 503);
    assert!(r.text().contains("volume \"media\""), "{}", r.text());
    // Liveness is unaffected: restarting would not bring the disk back.
    assert_eq!(server.admin_get("/healthz").status, 200);
    // A new directory at the path is not the one the server holds (and serves from): still
    // not ready, saying why.
    std::fs::create_dir(&root).expect("mkdir again");
    std::fs::write(root.join("new.txt"), b"new").unwrap();
    let r = server.admin_get("/readyz");
    assert_eq!(r.status, 503);
    assert!(r.text().contains("replaced since start"), "{}", r.text());
    assert_eq!(server.get("/new.txt").status, 404);
}

#[test]
fn empty_admin_listen_disables_the_admin_listener() {
    let dir = content_dir(1, 100);
    // A port the admin listener would have had; nothing may listen on it.
    let admin_port = free_port();
    let mut cfg = one_volume(
        1,
        volume("media", dir.path())
            .offload(Offload::Always)
            .pool(1, 1),
    );
    cfg.admin.listen = String::new();
    let mut server = Server::start(&cfg);
    let served = wait_until(Duration::from_secs(10), || {
        try_get(server.addr, "/f0.bin").is_ok_and(|r| r.status == 200)
    });
    let admin_refused = std::net::TcpStream::connect(("127.0.0.1", admin_port)).is_err();
    server.stop();
    assert!(served, "server did not serve content");
    assert!(
        admin_refused,
        "admin port answered although admin.listen is empty"
    );
}

/// Admin connections are bounded in time: a head must arrive within 10 s, also after a
/// keep-alive answer (a scraper or an attacker holding a connection idle does not keep its
/// descriptor), and in number: past 64 at once, a new one takes the place of the oldest that
/// is not being answered (idle, or its head unfinished), so 64 connections held open by anyone
/// cannot keep a health probe out.
#[test]
fn admin_connections_time_out_and_are_bounded() {
    use std::io::{Read, Write};
    let dir = content_dir(1, 100);
    let server = server_for(dir.path());
    let admin = server.admin();
    // One idle after an answer, one that never finishes its head: closed by the server within
    // the head timeout (far under the bound, so by the timeout).
    let mut idle = std::net::TcpStream::connect(admin).expect("connect");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
        .expect("send");
    let mut partial = std::net::TcpStream::connect(admin).expect("connect");
    partial
        .write_all(b"GET /metrics HTTP/1.1\r\nHo")
        .expect("send");
    let started = std::time::Instant::now();
    for (name, c) in [("idle", &mut idle), ("partial", &mut partial)] {
        c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut all = Vec::new();
        let r = c.read_to_end(&mut all);
        let closed = match &r {
            Ok(_) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        };
        let after = started.elapsed();
        assert!(
            closed && after > Duration::from_secs(8) && after < Duration::from_secs(14),
            "{name}: {r:?} after {after:?}"
        );
    }
    // 70 heads begun: past the bound, each closes the oldest.
    let mut more = Vec::new();
    for _ in 0..70 {
        let mut c = std::net::TcpStream::connect(admin).expect("connect");
        let _ = c.write_all(b"GET /healthz HTTP/1.1\r\n");
        more.push(c);
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut closed = 0;
    for c in &mut more {
        c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        match c.read(&mut [0u8; 64]) {
            Ok(0) => closed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            _ => {}
        }
    }
    assert_eq!(closed, 6, "{closed} of 70 closed (64 allowed)");
    for (i, c) in more.iter_mut().enumerate().skip(6) {
        let r = c.read(&mut [0u8; 64]);
        assert!(
            matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "the newer connection {i} was closed: {r:?}"
        );
    }
    // With 64 heads held unfinished, a probe is still answered.
    let probe_started = std::time::Instant::now();
    assert_eq!(server.admin_get("/healthz").status, 200);
    assert!(probe_started.elapsed() < Duration::from_secs(2));
    drop(more);
    // And the port answers as before.
    assert_eq!(server.admin_get("/healthz").status, 200);
}
