//! The accept path over real sockets: TCP_DEFER_ACCEPT (`listeners[*].defer_accept_secs`, on by
//! default) keeps a connection in the kernel until its first bytes arrive (then it is accepted
//! and answered at once), or about that many seconds, after which it is accepted and gets the
//! header timeout; 0 accepts at once. And many connections whose requests were sent before the
//! server got to them (answered in the accept loop's turn) are all answered in full. And
//! TCP_NOTSENT_LOWAT (`listeners[*].notsent_lowat_bytes`), set on the listener, bounds what every
//! accepted connection queues unsent, as `ss` sees the server's socket. And TCP_CONGESTION
//! (`listeners[*].congestion_control`, `--congestion-control`), set on the listener, is the
//! algorithm of every accepted connection, as `ss` sees it; one the kernel lacks stops the server
//! with the field and the algorithms there are. And a port another socket listens on already
//! stops the server (SO_REUSEPORT would have shared it).

mod common;

use common::*;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

fn server(edit: impl FnOnce(&mut Config)) -> (tempfile::TempDir, Server) {
    let d = tempdir();
    std::fs::write(d.path().join("hello.txt"), b"hello world\n").unwrap();
    std::fs::write(d.path().join("blob"), bytes(300_000, 5)).unwrap();
    let mut cfg = one_volume(1, volume("site", d.path()));
    edit(&mut cfg);
    let s = Server::start(&cfg);
    (d, s)
}

fn accepted(s: &Server) -> f64 {
    s.metrics()
        .get("contentserver_connections_accepted_total", &[])
}

#[test]
fn a_silent_connection_is_accepted_only_after_the_defer_time_then_gets_the_header_timeout() {
    let (_d, s) = server(|c| {
        assert_eq!(c.listeners[0].defer_accept_secs, 1, "the default");
        c.limits.header_read_timeout_secs = 1;
    });
    let base = accepted(&s);
    let mut silent = s.connect();
    let t = Instant::now();
    // A connection that sends its request is accepted and answered meanwhile.
    assert_eq!(s.get("/hello.txt").status, 200);
    assert_eq!(accepted(&s), base + 1.0, "only the one that sent bytes");
    std::thread::sleep(Duration::from_millis(500).saturating_sub(t.elapsed()));
    assert_eq!(
        accepted(&s),
        base + 1.0,
        "the silent one waits in the kernel"
    );
    // After about a second without bytes it is accepted, then closed at the header timeout.
    assert!(wait_until(Duration::from_secs(5), || accepted(&s) == base + 2.0));
    assert!(silent.closed_within(Duration::from_secs(5)));
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(1900), "{took:?}");
    // A connection accepted after its defer time is served like any other.
    let mut late = s.connect();
    std::thread::sleep(Duration::from_millis(1300));
    assert_eq!(late.get("/hello.txt").status, 200);
}

#[test]
fn defer_accept_zero_accepts_at_once() {
    let (_d, s) = server(|c| c.listeners[0].defer_accept_secs = 0);
    let base = accepted(&s);
    let _silent = s.connect();
    assert!(
        wait_until(Duration::from_millis(800), || accepted(&s) == base + 1.0),
        "accepted {}",
        accepted(&s) - base
    );
}

#[test]
fn requests_sent_before_they_are_accepted_are_all_answered_in_full() {
    let (d, s) = server(|_| {});
    let want = std::fs::read(d.path().join("blob")).unwrap();
    // Each sends a request and closes nothing: the server meets them all at once, one with a
    // body larger than the socket buffer (it has to wait for the reader), one small.
    let mut conns: Vec<_> = (0..200)
        .map(|i| {
            let mut c = std::net::TcpStream::connect(s.addr).unwrap();
            let path = if i % 2 == 0 { "/blob" } else { "/hello.txt" };
            c.write_all(format!("GET {path} HTTP/1.0\r\nHost: t\r\n\r\n").as_bytes())
                .unwrap();
            c
        })
        .collect();
    for (i, c) in conns.iter_mut().enumerate() {
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut raw = Vec::new();
        c.read_to_end(&mut raw).unwrap();
        let end = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a head")
            + 4;
        assert!(raw.starts_with(b"HTTP/1.1 200"), "connection {i}");
        let body = &raw[end..];
        if i % 2 == 0 {
            assert!(
                body == want.as_slice(),
                "connection {i}: {} bytes",
                body.len()
            );
        } else {
            assert_eq!(body, b"hello world\n", "connection {i}");
        }
    }
    assert!(wait_until(Duration::from_secs(5), || {
        s.metrics().get("contentserver_connections_active", &[]) == 0.0
    }));
}

/// What `ss -tni` says of the server's socket of the established connection(s) to `port`.
fn server_socket_info(port: u16) -> String {
    let out = std::process::Command::new("ss")
        .args([
            "-tniH",
            "state",
            "established",
            &format!("( sport = :{port} )"),
        ])
        .output()
        .expect("ss (iproute2) runs");
    assert!(out.status.success(), "ss failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // The socket's own line (its details follow on the next). A socket that has not sent yet
    // has no `bytes_sent`, so that is not the test.
    assert!(
        text.contains(&format!("127.0.0.1:{port} ")),
        "no server socket in: {text}"
    );
    text
}

/// Bytes the server's socket of the one connection to `port` holds unsent, as `ss -tni` reports
/// them (0 when it prints none), once it stops growing.
fn notsent_of_server_socket(port: u16) -> u64 {
    let read = || {
        server_socket_info(port)
            .split_whitespace()
            .find_map(|w| w.strip_prefix("notsent:"))
            .map_or(0, |n| n.parse::<u64>().expect("a number"))
    };
    let mut last = read();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        let now = read();
        if now == last {
            break;
        }
        last = now;
    }
    last
}

#[test]
fn notsent_lowat_bounds_what_a_connection_queues_unsent() {
    let d = tempdir();
    std::fs::write(d.path().join("big"), bytes(48 << 20, 7)).unwrap();
    let mut queued = Vec::new();
    for lowat in [None, Some(65536), Some(0)] {
        let mut cfg = one_volume(1, volume("site", d.path()));
        if let Some(l) = lowat {
            cfg.listeners[0].notsent_lowat_bytes = l;
        } else {
            assert_eq!(cfg.listeners[0].notsent_lowat_bytes, 2 << 20, "the default");
        }
        let s = Server::start(&cfg);
        // A client that asks for 48 MiB and reads nothing.
        let mut c = s.connect();
        c.send_get("/big");
        queued.push((lowat, notsent_of_server_socket(s.addr.port())));
    }
    let [(_, default), (_, small), (_, off)] = queued[..] else {
        unreachable!()
    };
    assert!(small <= 65536 + (256 << 10), "{queued:?}");
    assert!(
        default > 1 << 20 && default <= (2 << 20) + (256 << 10),
        "{queued:?}"
    );
    // Without the option the kernel queues up to the send buffer (4 MiB by default).
    assert!(off > default + (512 << 10), "{queued:?}");
}

/// The congestion control `ss -tni` shows for the server's socket of the one connection to `port`.
fn congestion_control_of_server_socket(port: u16, known: &[&str]) -> String {
    let text = server_socket_info(port);
    text.split_whitespace()
        .find(|w| known.contains(w))
        .unwrap_or_else(|| panic!("no congestion control of {known:?} in: {text}"))
        .to_string()
}

#[test]
fn congestion_control_is_what_every_accepted_connection_uses() {
    let host = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .expect("the host's default congestion control")
        .trim()
        .to_string();
    // reno is built into every kernel and allowed without privileges; cubic when it is the host's.
    let other = if host == "reno" { "cubic" } else { "reno" };
    let known = ["reno", "cubic", "bbr", host.as_str()];
    let seen = |s: &Server| {
        let mut c = s.connect();
        assert_eq!(c.get("/hello.txt").status, 200);
        // The keep-alive connection stays open while ss looks at it.
        congestion_control_of_server_socket(s.addr.port(), &known)
    };
    let (_d, default) = server(|c| assert_eq!(c.listeners[0].congestion_control, None));
    assert_eq!(
        seen(&default),
        host,
        "without the option: the host's default"
    );
    let (_d, configured) = server(|c| c.listeners[0].congestion_control = Some(other.into()));
    assert_eq!(seen(&configured), other, "listeners[0].congestion_control");
    let d = tempdir();
    std::fs::write(d.path().join("hello.txt"), b"hello world\n").unwrap();
    let cli = Server::root(d.path(), &["--congestion-control", other]);
    assert_eq!(seen(&cli), other, "--congestion-control");
}

#[test]
fn a_congestion_control_the_kernel_lacks_stops_the_server_naming_it() {
    let d = tempdir();
    let dir = d.path().to_str().unwrap();
    let args = [
        "serve",
        "--root",
        dir,
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "",
        "--congestion-control",
        "nosuchcc9",
    ];
    let log = match Server::try_spawn(&args, &[]) {
        Ok(_) => panic!("a server with an unknown congestion control started"),
        Err(log) => log,
    };
    for want in [
        "listeners[0]",
        "congestion_control = \"nosuchcc9\"",
        "the kernel has no such TCP congestion control",
        "available: ",
    ] {
        assert!(log.contains(want), "{want:?} not in: {log}");
    }
    // A name the kernel could never have is a configuration error, before any socket.
    let bad = Server::try_spawn(
        &["serve", "--root", dir, "--congestion-control", "BBR!"],
        &[],
    )
    .err()
    .expect("an invalid name is refused");
    assert!(
        bad.contains("listeners[0].congestion_control") && bad.contains("\"BBR!\""),
        "{bad}"
    );
}

/// A second server on the port of a running one does not start (its SO_REUSEPORT sockets would
/// have joined the first server's and the kernel would have split the connections between
/// them); the first one keeps serving every connection.
#[test]
fn a_port_another_server_listens_on_is_refused() {
    let (d, first) = server(|_| {});
    let other = tempdir();
    std::fs::write(other.path().join("hello.txt"), b"other\n").unwrap();
    let addr = first.addr.to_string();
    let second = Server::try_spawn(
        &[
            "serve",
            "--root",
            other.path().to_str().unwrap(),
            "--listen",
            &addr,
            "--admin-listen",
            "",
        ],
        &[],
    );
    let err = match second {
        Ok(_) => panic!("a second server started on {addr}"),
        Err(e) => e,
    };
    assert!(
        err.contains("already in use") && err.contains(&addr),
        "{err}"
    );
    for _ in 0..8 {
        assert_eq!(first.get("/hello.txt").body, b"hello world\n");
    }
    drop(d);
}

#[test]
fn max_connections_is_lowered_to_fit_the_descriptor_limit_and_the_admin_port_keeps_answering() {
    let d = tempdir();
    std::fs::write(d.path().join("hello.txt"), b"hello world\n").unwrap();
    let cfg = one_volume(1, volume("site", d.path()));
    // 256 descriptors: 128 for connections.
    let s = Server::start_with_nofile(d.path(), &cfg, 256);
    assert!(
        s.wait_log("lowered_to=128", Duration::from_secs(2)),
        "{}",
        s.logs()
    );
    // More connections than that, each holding a started request (so each is accepted).
    let mut held = Vec::new();
    for _ in 0..200 {
        let mut c = std::net::TcpStream::connect(s.addr).expect("connect");
        let _ = c.write_all(b"GET /hello.txt HTTP/1.1\r\n");
        held.push(c);
    }
    // Those over the limit are refused at once (not left hanging in the backlog), and the
    // admin port, with its health check and metrics, still answers.
    let refused = || {
        s.metrics()
            .get("contentserver_connections_refused_total", &[])
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while refused() < 60.0 {
        assert!(Instant::now() < deadline, "refused {}", refused());
        std::thread::sleep(Duration::from_millis(50));
    }
    let h = request(s.admin(), "GET", "/healthz", &[]);
    assert_eq!(h.status, 200);
    // The refused ones were told 503 (their request read first, so no reset overtook it); the
    // others wait for the rest of their heads.
    let mut answers = std::collections::BTreeMap::<String, u32>::new();
    for c in &mut held {
        c.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let mut answer = Vec::new();
        let seen = match c.read_to_end(&mut answer) {
            Ok(_) => String::from_utf8_lossy(answer.get(..12).unwrap_or(&answer)).to_string(),
            Err(e) => format!("{:?}", e.kind()),
        };
        *answers.entry(seen).or_insert(0) += 1;
    }
    assert!(
        answers.get("HTTP/1.1 503").copied().unwrap_or(0) as f64 == refused()
            && answers
                .keys()
                .all(|a| a == "HTTP/1.1 503" || a == "WouldBlock"),
        "{answers:?}, refused {}",
        refused()
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.get("/hello.txt").status, 200);
}

/// A server (two workers) under RLIMIT_NOFILE 256: 128 connections, a reserve of 8 for the
/// admin port. Its volume holds `hello.txt` and 200 files of 8 MiB, `/b0.bin` to `/b199.bin`.
fn low_descriptor_server() -> (tempfile::TempDir, Server) {
    let d = tempdir();
    for i in 0..200 {
        let f = std::fs::File::create(d.path().join(format!("b{i}.bin"))).unwrap();
        f.set_len(8 << 20).unwrap();
    }
    std::fs::write(d.path().join("hello.txt"), b"hello world\n").unwrap();
    let cfg = one_volume(2, volume("site", d.path()));
    let s = Server::start_with_nofile(d.path(), &cfg, 256);
    assert!(
        s.wait_log("lowered_to=128", Duration::from_secs(2)),
        "{}",
        s.logs()
    );
    (d, s)
}

/// 127 downloads of different files of a [`low_descriptor_server`], none read: each holds
/// its socket and its file, so the data plane uses every descriptor it may.
fn stalled_downloads(s: &Server) -> Vec<std::net::TcpStream> {
    (0..127)
        .map(|i| {
            let mut c = std::net::TcpStream::connect(s.addr).expect("connect");
            c.write_all(format!("GET /b{i}.bin HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
                .expect("send");
            c
        })
        .collect()
}

/// Responses of files not in the open-file cache hold a descriptor each, so connections under
/// `max_connections` can still use every descriptor: then a file that cannot be opened is a
/// 503 (not a 500), a connection that cannot be accepted is accepted with the spare descriptor
/// and told 503 at once (not left in the backlog), and the admin port still answers.
#[test]
fn out_of_descriptors_is_503_for_content_and_the_admin_port_answers() {
    let (_d, s) = low_descriptor_server();
    let spares = || {
        std::fs::read_dir(format!("/proc/{}/fd", s.pid()))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| {
                        std::fs::read_link(e.path()).is_ok_and(|l| l == Path::new("/dev/null"))
                    })
                    .count()
            })
            .unwrap_or(0)
    };
    let at_start = spares();
    let mut held = stalled_downloads(&s);
    std::thread::sleep(Duration::from_millis(1500));
    let h = request(s.admin(), "GET", "/healthz", &[]);
    assert_eq!(h.status, 200);
    // Every connection has its status line: 200 or 503, never a 500 nor nothing.
    let mut statuses = std::collections::BTreeMap::new();
    for c in &mut held {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut line = [0u8; 12];
        let status = match c.read_exact(&mut line) {
            Ok(()) => String::from_utf8_lossy(&line[9..12]).to_string(),
            Err(e) => format!("{:?}", e.kind()),
        };
        *statuses.entry(status).or_insert(0) += 1;
    }
    let ok = statuses.get("200").copied().unwrap_or(0);
    let unavailable = statuses.get("503").copied().unwrap_or(0);
    assert!(
        ok + unavailable == 127 && unavailable > 0,
        "{statuses:?}\n{}",
        s.logs()
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(s.get("/b1.bin").status, 200);
    // The spare descriptors (the data plane's and the admin port's) are held again.
    assert_eq!(request(s.admin(), "GET", "/healthz", &[]).status, 200);
    assert!(
        wait_until(Duration::from_secs(5), || spares() == at_start),
        "{} /dev/null descriptors after the pressure, {at_start} before",
        spares()
    );
}

/// A new connection that got `200` for one request and stays open (keep-alive).
fn kept_alive(addr: std::net::SocketAddr) -> std::net::TcpStream {
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    c.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .expect("request");
    let mut buf = [0u8; 4096];
    let n = c.read(&mut buf).unwrap_or(0);
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    c
}

/// At `max_connections`, a new client is not locked out by idle keep-alive connections for
/// their whole `keepalive_timeout` (75 s): parked ones are closed to make room, as nginx reuses
/// its keep-alive connections. A connection in the middle of a request is never one of them.
#[test]
fn idle_keep_alive_connections_make_room_for_new_ones_at_max_connections() {
    let (_d, s) = server(|c| {
        c.workers = 1;
        c.limits.max_connections = 4;
        c.limits.idle_park_ms = 100;
    });
    let mut held: Vec<std::net::TcpStream> = (0..4).map(|_| kept_alive(s.addr)).collect();
    // One of them has sent half a request head: it is not idle, and must keep its place.
    held[3]
        .write_all(b"GET /hello.txt HTTP/1.1\r\n")
        .expect("half a head");
    assert!(wait_until(Duration::from_secs(5), || s
        .metrics()
        .get("contentserver_connections_parked", &[])
        == 4.0));
    let r = get(s.addr, "/hello.txt");
    assert_eq!(r.status, 200, "a new client was refused");
    // nginx's rule: an eighth of the idle ones, at least one (here one of three).
    let closed = held[..3]
        .iter_mut()
        .map(|c| {
            c.set_read_timeout(Some(Duration::from_millis(300)))
                .expect("timeout");
            matches!(c.read(&mut [0u8; 16]), Ok(0))
        })
        .filter(|&eof| eof)
        .count();
    assert_eq!(closed, 1, "idle connections closed for one newcomer");
    assert!(s.wait_log(
        "closed idle keep-alive connections to make room",
        Duration::from_secs(5)
    ));
    held[3]
        .write_all(b"Host: t\r\n\r\n")
        .expect("rest of the head");
    let mut buf = [0u8; 4096];
    let n = held[3]
        .read(&mut buf)
        .expect("answer to the half-sent request");
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    assert_eq!(
        s.metrics()
            .get("contentserver_connections_refused_total", &[]),
        0.0
    );
}

/// Idle keep-alive connections still in their tasks (quiet for less than `idle_park_ms`, or
/// parking off) make room too: one of them closes for each newcomer, as nginx reuses any of
/// its keep-alive connections at once ("worker_connections are not enough, reusing
/// connections"). One in the middle of a request head never does; and with none idle left, a
/// newcomer is refused.
#[test]
fn idle_connections_in_their_tasks_make_room_at_max_connections() {
    for park_ms in [0, 60_000] {
        let (_d, s) = server(|c| {
            c.workers = 1;
            c.limits.max_connections = 3;
            c.limits.idle_park_ms = park_ms;
        });
        let mut held: Vec<std::net::TcpStream> = (0..3)
            .map(|_| {
                let c = kept_alive(s.addr);
                c.set_read_timeout(Some(Duration::from_millis(300)))
                    .expect("timeout");
                c
            })
            .collect();
        held[2]
            .write_all(b"GET /hello.txt HTTP/1.1\r\n")
            .expect("half a head");
        std::thread::sleep(Duration::from_millis(100));
        let mut idle: Vec<std::net::TcpStream> = held.drain(..2).collect();
        // Each newcomer stays (keep-alive, a request in the middle of its head) and holds its
        // place.
        let mut newcomers = Vec::new();
        for round in 1..=2 {
            let mut c = kept_alive(s.addr);
            c.write_all(b"GET /hello.txt HTTP/1.1\r\n")
                .expect("half a head");
            newcomers.push(c);
            idle.retain_mut(|c| !matches!(c.read(&mut [0u8; 16]), Ok(0)));
            assert_eq!(
                idle.len(),
                2 - round,
                "park_ms {park_ms}: newcomer {round} {}",
                s.logs()
            );
        }
        assert!(s.wait_log(
            "closed idle keep-alive connections to make room",
            Duration::from_secs(5)
        ));
        // All three in the middle of a request: nothing idle is left to close for a newcomer.
        assert!(wait_until(Duration::from_secs(5), || s
            .metrics()
            .get("contentserver_connections_active", &[])
            == 3.0));
        let r = get(s.addr, "/hello.txt");
        assert_eq!(r.status, 503, "park_ms {park_ms}");
        for c in newcomers.iter_mut().chain(held.iter_mut()) {
            c.write_all(b"Host: t\r\n\r\n").expect("rest of the head");
            c.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            let mut buf = [0u8; 4096];
            let n = c.read(&mut buf).expect("answer to the half-sent request");
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "park_ms {park_ms}");
        }
        assert_eq!(
            s.metrics()
                .get("contentserver_connections_refused_total", &[]),
            1.0
        );
    }
}

/// One `GET /healthz` on the admin port, as a kubelet probe sends it (a fresh connection, one
/// second to answer): its status, or why there was none, and how long it took.
fn probe_health(admin: std::net::SocketAddr) -> (String, Duration) {
    let t = Instant::now();
    let request = b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    let status = status_of(admin, request, Duration::from_secs(1), false);
    (status, t.elapsed())
}

/// Send `request` on a new connection to `addr` (connect and each read given `within`): the
/// status code of the answer, or the kind of error that came instead. With `to_end`, the rest
/// is read to the close too (an error there, a reset, is the result).
fn status_of(addr: std::net::SocketAddr, request: &[u8], within: Duration, to_end: bool) -> String {
    let answer = (|| -> std::io::Result<String> {
        let mut c = std::net::TcpStream::connect_timeout(&addr, within)?;
        c.set_read_timeout(Some(within))?;
        c.write_all(request)?;
        let mut line = [0u8; 12];
        c.read_exact(&mut line)?;
        if to_end {
            c.read_to_end(&mut Vec::new())?;
        }
        Ok(String::from_utf8_lossy(&line[9..12]).to_string())
    })();
    answer.unwrap_or_else(|e| format!("{:?}", e.kind()))
}

/// `n` probes ([`probe_health`]), 100 ms apart.
fn probe_health_times(admin: std::net::SocketAddr, n: usize) -> Vec<(String, Duration)> {
    (0..n)
        .map(|_| {
            let p = probe_health(admin);
            std::thread::sleep(Duration::from_millis(100));
            p
        })
        .collect()
}

/// The probes not answered 200 within a second.
fn late(probes: &[(String, Duration)]) -> Vec<&(String, Duration)> {
    probes
        .iter()
        .filter(|(status, took)| status != "200" || *took > Duration::from_secs(1))
        .collect()
}

/// Out of descriptors with new data-port connections arriving all the time: the admin port's
/// health check is still answered, within a probe's second, every time. The data plane keeps
/// clear of the last descriptors (the admin port's), so a new data-port connection cannot take
/// the one an admin connection needs.
#[test]
fn the_admin_port_answers_every_probe_while_new_connections_storm_a_full_descriptor_table() {
    let (_d, s) = low_descriptor_server();
    assert!(s.logs().contains("admin_reserve=8"), "{}", s.logs());
    let held = stalled_downloads(&s);
    std::thread::sleep(Duration::from_millis(500));
    // A new data-port connection every 5 ms.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let storms: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            let addr = s.addr;
            std::thread::spawn(move || {
                let mut statuses = std::collections::BTreeMap::<String, u32>::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let request = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n";
                    let status = status_of(addr, request, Duration::from_secs(2), false);
                    *statuses.entry(status).or_insert(0) += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
                statuses
            })
        })
        .collect();
    let probes = probe_health_times(s.admin(), 30);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut storm = std::collections::BTreeMap::<String, u32>::new();
    for t in storms {
        for (k, v) in t.join().expect("the storm thread") {
            *storm.entry(k).or_insert(0) += v;
        }
    }
    let late = late(&probes);
    assert!(
        late.is_empty(),
        "probes not answered 200 within a second: {late:?}\nall: {probes:?}\nstorm: {storm:?}"
    );
    // The storm's connections were answered (503 or 200), not left in the backlog.
    assert!(
        storm.keys().all(|k| k == "200" || k == "503") && storm.contains_key("503"),
        "{storm:?}"
    );
    // The data plane ran out, the admin port never did: it did not need its spare.
    assert!(
        s.logs()
            .contains("the last ones are kept for the admin port"),
        "{}",
        s.logs()
    );
    assert!(!s.logs().contains("admin: accept failed"), "{}", s.logs());
    drop(held);
}

/// Idle connections on the admin port (anyone in the cluster may open them) while the data
/// plane holds every descriptor it may: more of them than the admin port's reserve cannot
/// keep a probe out. On running out, the oldest idle one gives its descriptor up.
#[test]
fn idle_admin_connections_cannot_keep_a_probe_out_when_descriptors_run_out() {
    let (_d, s) = low_descriptor_server();
    let held = stalled_downloads(&s);
    std::thread::sleep(Duration::from_millis(500));
    // Idle admin connections, three times the reserve.
    let idle: Vec<_> = (0..24)
        .map(|_| std::net::TcpStream::connect(s.admin()).expect("connect to the admin port"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let probes = probe_health_times(s.admin(), 10);
    let late = late(&probes);
    assert!(
        late.is_empty(),
        "probes not answered 200 within a second: {late:?}\nall: {probes:?}\n{}",
        s.logs()
    );
    drop(idle);
    drop(held);
}

/// A burst of concurrent probes and scrapes on the admin port while the data plane holds
/// every descriptor it may: each is answered, none reset. (Out of descriptors, the admin port
/// closed its oldest connection not yet being answered, which in a burst was the probe
/// accepted just before, its request there but not yet handled.)
#[test]
fn a_burst_of_admin_requests_out_of_descriptors_resets_none() {
    let (_d, s) = low_descriptor_server();
    let held = stalled_downloads(&s);
    std::thread::sleep(Duration::from_millis(500));
    let until = Instant::now() + Duration::from_secs(2);
    let admin = s.admin();
    let bursts: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let path = if i % 2 == 0 { "/healthz" } else { "/metrics" };
                let mut answers = std::collections::BTreeMap::<String, u32>::new();
                while Instant::now() < until {
                    let request =
                        format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
                    let answer = status_of(admin, request.as_bytes(), Duration::from_secs(2), true);
                    *answers.entry(answer).or_insert(0) += 1;
                }
                answers
            })
        })
        .collect();
    let mut answers = std::collections::BTreeMap::<String, u32>::new();
    for b in bursts {
        for (k, v) in b.join().expect("a burst thread") {
            *answers.entry(k).or_insert(0) += v;
        }
    }
    assert!(
        answers.keys().all(|k| k == "200") && answers.get("200") > Some(&20),
        "{answers:?}"
    );
    drop(held);
}

/// A HEAD refused at `max_connections` gets its 503 without a body (RFC 9110 §9.3.2).
#[test]
fn a_head_refused_at_max_connections_gets_no_body() {
    let (_d, s) = server(|c| {
        c.workers = 1;
        c.limits.max_connections = 1;
    });
    let mut first = std::net::TcpStream::connect(s.addr).expect("connect");
    first
        .write_all(b"GET /hello.txt HTTP/1.1\r\n")
        .expect("half a head");
    std::thread::sleep(Duration::from_millis(200));
    let mut c = std::net::TcpStream::connect(s.addr).expect("connect");
    c.write_all(b"HEAD /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .expect("send");
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = Vec::new();
    c.read_to_end(&mut answer)
        .expect("the answer, then the close");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("Retry-After: 1"), "{text}");
    assert!(
        text.ends_with("\r\n\r\n"),
        "a body after the head: {text:?}"
    );
    drop(first);
}
