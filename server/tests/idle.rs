//! Connections parked in a worker's idle set (`limits.idle_park_ms`), over real sockets: a
//! parked keep-alive connection is woken by its next request and served (pipelined bytes and
//! the part of a head received before parking are kept), times out at the keep-alive or header
//! timeout as a task would, and is closed on drain. `contentserver_connections_parked` shows
//! that the connection did park. (What parking saves is measured by bench/connmem.sh.)

mod common;

use common::*;
use std::time::{Duration, Instant};

/// One volume with `hello.txt`, `park_ms` of quiet before parking, two workers.
fn server(park_ms: u64, edit: impl FnOnce(&mut Config)) -> (tempfile::TempDir, Server) {
    let d = tempdir();
    std::fs::write(d.path().join("hello.txt"), b"hello world\n").unwrap();
    std::fs::write(d.path().join("blob"), bytes(100_000, 3)).unwrap();
    let mut cfg = one_volume(2, volume("site", d.path()));
    cfg.limits.idle_park_ms = park_ms;
    edit(&mut cfg);
    let s = Server::start(&cfg);
    (d, s)
}

fn parked(s: &Server) -> f64 {
    s.metrics().get("contentserver_connections_parked", &[])
}

/// Wait until `n` connections are parked; panics with the last value otherwise.
fn wait_parked(s: &Server, n: f64) {
    let mut last = -1.0;
    let ok = wait_until(Duration::from_secs(10), || {
        last = parked(s);
        last == n
    });
    assert!(ok, "connections_parked stayed {last}, want {n}");
}

#[test]
fn parked_keepalive_connection_is_woken_by_its_next_request() {
    let (_d, s) = server(100, |_| {});
    let mut c = s.connect();
    assert_eq!(c.get("/hello.txt").body, b"hello world\n");
    wait_parked(&s, 1.0);
    let m = s.metrics();
    assert_eq!(m.get("contentserver_connections_active", &[]), 1.0);
    // Woken by the next request, answered on the same connection.
    assert_eq!(c.get("/blob").body, bytes(100_000, 3));
    assert_eq!(parked(&s), 0.0);
    // Parks again; two pipelined requests in one write wake it and are both answered, in order.
    wait_parked(&s, 1.0);
    c.send(b"GET /blob HTTP/1.1\r\nHost: t\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).unwrap().body, bytes(100_000, 3));
    assert_eq!(c.response(false).unwrap().body, b"hello world\n");
    // A close of the parked connection by the client ends it on the server too.
    wait_parked(&s, 1.0);
    drop(c);
    let mut last = -1.0;
    assert!(
        wait_until(Duration::from_secs(10), || {
            let m = s.metrics();
            last = m.get("contentserver_connections_active", &[]);
            last == 0.0 && m.get("contentserver_connections_parked", &[]) == 0.0
        }),
        "connections_active stayed {last}"
    );
}

#[test]
fn requests_arriving_while_connections_park_are_not_lost() {
    // Many connections send their next request around the moment they park (20 ms of quiet):
    // whatever the request meets (the task, the move, the set), it is answered.
    let (_d, s) = server(20, |_| {});
    let mut conns: Vec<Conn> = (0..40).map(|_| s.connect()).collect();
    for round in 0..3u64 {
        for c in conns.iter_mut() {
            assert_eq!(c.get("/hello.txt").status, 200);
        }
        for (i, c) in conns.iter_mut().enumerate() {
            std::thread::sleep(Duration::from_millis(((i as u64 + round) % 7) * 2));
            c.send_get("/hello.txt");
        }
        for c in conns.iter_mut() {
            let r = c.response(false).unwrap();
            assert_eq!(r.status, 200);
            assert_eq!(r.body, b"hello world\n");
        }
    }
}

#[test]
fn part_of_a_head_received_before_parking_is_kept() {
    let (_d, s) = server(100, |_| {});
    let mut c = s.connect();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHo");
    wait_parked(&s, 1.0);
    c.send(b"st: t\r\n\r\n");
    let r = c.response(false).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello world\n");
    // The same after a first request (the second head arrives in two parts, parked between).
    wait_parked(&s, 1.0);
    c.send(b"GET /blob HTT");
    wait_until(Duration::from_millis(500), || parked(&s) == 0.0);
    wait_parked(&s, 1.0);
    c.send(b"P/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).unwrap().body, bytes(100_000, 3));
}

#[test]
fn many_parked_partial_heads_each_keep_their_own_bytes() {
    // 300 connections park with different partial heads (about 160 KiB together, so each set's
    // buffer of head bytes is compacted while they leave); each is completed in turn and must
    // get its own file.
    let (d, s) = server(100, |_| {});
    let n = 300;
    for i in 0..n {
        std::fs::write(d.path().join(format!("f{i}")), format!("file {i}\n")).unwrap();
    }
    let mut conns: Vec<Conn> = (0..n)
        .map(|i| {
            let mut c = s.connect();
            let pad = "p".repeat(500 + i % 50);
            c.send(format!("GET /f{i} HTTP/1.1\r\nX-Pad: {pad}").as_bytes());
            c
        })
        .collect();
    wait_parked(&s, n as f64);
    for (i, c) in conns.iter_mut().enumerate() {
        c.send(b"\r\nHost: t\r\n\r\n");
        let r = c.response(false).unwrap();
        assert_eq!(r.status, 200, "connection {i}");
        assert_eq!(r.text(), format!("file {i}\n"), "connection {i}");
    }
}

#[test]
fn parked_connections_time_out_like_waiting_ones() {
    let (_d, s) = server(100, |c| {
        c.limits.keepalive_timeout_secs = 1;
        c.limits.header_read_timeout_secs = 2;
    });
    // Idle keep-alive: closed at the keep-alive timeout (counted from the response).
    let mut c = s.connect();
    assert_eq!(c.get("/hello.txt").status, 200);
    let t = Instant::now();
    wait_parked(&s, 1.0);
    assert!(c.closed_within(Duration::from_secs(3)));
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(950), "{took:?}");
    assert!(took < Duration::from_millis(2500), "{took:?}");
    // A head never completed: 408 at the header timeout (counted from its first byte).
    let mut c = s.connect();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHo");
    let t = Instant::now();
    wait_parked(&s, 1.0);
    let r = c.response(false).unwrap();
    assert_eq!(r.status, 408);
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(1950), "{took:?}");
    assert!(took < Duration::from_millis(3500), "{took:?}");
    assert!(c.closed_within(Duration::from_secs(2)));
    // A connection that sends nothing: closed at the header timeout.
    let mut c = s.connect();
    let t = Instant::now();
    wait_parked(&s, 1.0);
    assert!(c.closed_within(Duration::from_secs(4)));
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(1950), "{took:?}");
    // Every close was counted.
    let mut last = -1.0;
    assert!(
        wait_until(Duration::from_secs(5), || {
            last = s.metrics().get("contentserver_connections_active", &[]);
            last == 0.0
        }),
        "connections_active stayed {last}"
    );
    assert_eq!(parked(&s), 0.0);
}

/// Empty lines after a request (a client's stray CRLF) are ignored (RFC 9112 §2.2): the
/// connection is idle, kept for the keep-alive timeout and serving its next request, not a
/// head in progress answered 408 at the header timeout. Parked or not.
#[test]
fn empty_lines_after_a_request_leave_the_connection_idle() {
    for park_ms in [0, 100] {
        let (_d, s) = server(park_ms, |c| {
            c.limits.keepalive_timeout_secs = 5;
            c.limits.header_read_timeout_secs = 1;
        });
        let mut c = s.connect();
        c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n\r\n");
        assert_eq!(c.response(false).unwrap().status, 200);
        c.send(b"\r\n");
        std::thread::sleep(Duration::from_millis(1600));
        c.send(b"\r\nGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        let r = c.response(false).unwrap();
        assert_eq!(
            (r.status, &r.body[..]),
            (200, &b"hello world\n"[..]),
            "park_ms={park_ms}"
        );
        assert!(!s.logs().contains(" 408 "), "{}", s.logs());
    }
}

#[test]
fn parked_connections_close_on_drain() {
    let (_d, mut s) = server(100, |c| c.limits.keepalive_timeout_secs = 60);
    let mut conns: Vec<Conn> = (0..4).map(|_| s.connect()).collect();
    for c in conns.iter_mut() {
        assert_eq!(c.get("/hello.txt").status, 200);
    }
    wait_parked(&s, 4.0);
    let t = Instant::now();
    s.signal(SIGTERM);
    for c in conns.iter_mut() {
        assert!(
            c.closed_within(Duration::from_secs(2)),
            "parked connection not closed on drain"
        );
    }
    let st = s
        .wait_exit(Duration::from_secs(5))
        .expect("server did not exit");
    assert_eq!(st.code(), Some(0), "{}", s.logs());
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(s.logs().contains("drained; exiting"), "{}", s.logs());
}
