//! Graceful shutdown of the real process: on SIGTERM/SIGINT/SIGQUIT it stops accepting, closes idle
//! keep-alive connections, lets in-flight responses finish (up to shutdown_timeout_secs) and
//! exits 0. In-flight requests are kept in flight with the `pool_task` failpoint.
#![cfg(feature = "failpoints")]

mod common;

use common::*;
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn server(stall_ms: u64, shutdown_timeout: u64) -> (tempfile::TempDir, Server, Vec<u8>) {
    let base = tempdir();
    let slow = base.path().join("slow");
    let fast = base.path().join("fast");
    std::fs::create_dir_all(&slow).unwrap();
    std::fs::create_dir_all(&fast).unwrap();
    let data = bytes(200_000, 5);
    std::fs::write(slow.join("big.bin"), &data).unwrap();
    std::fs::write(fast.join("x.txt"), b"x").unwrap();
    let mut cfg = Config {
        volumes: vec![
            volume("slow", &slow).offload(Offload::Always),
            volume("fast", &fast),
        ],
        routes: vec![route("/slow", "slow").strip_prefix(), route("/", "fast")],
        ..config(2)
    };
    cfg.shutdown_timeout_secs = shutdown_timeout;
    let s = Server::start_with_failpoints(&cfg, &format!("pool_task=return(slow:{stall_ms})"));
    (base, s, data)
}

/// SIGTERM, then the exit status within `within` and how long the exit took.
fn terminate(s: &mut Server, within: Duration) -> (std::process::ExitStatus, Duration) {
    let t = Instant::now();
    s.signal(SIGTERM);
    let st = s.wait_exit(within).expect("server did not exit");
    (st, t.elapsed())
}

fn refused(addr: std::net::SocketAddr) -> bool {
    match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
        Err(_) => true,
        Ok(mut s) => {
            // Accepted by the kernel but never served: must be closed/reset, not answered.
            use std::io::{Read, Write};
            let _ = s.write_all(b"GET /x.txt HTTP/1.1\r\nHost: t\r\n\r\n");
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut b = [0u8; 16];
            matches!(s.read(&mut b), Ok(0) | Err(_))
        }
    }
}

fn graceful(sig: i32) {
    let (_d, mut s, data) = server(700, 30);
    // An idle keep-alive connection.
    let mut idle = s.connect();
    idle.send(b"GET /x.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(idle.response(false).unwrap().status, 200);
    // An in-flight response (open and each chunk stall 700 ms on the pool).
    let mut busy = s.connect();
    busy.send(b"GET /slow/big.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    s.signal(sig);
    assert!(
        s.wait_log("draining", Duration::from_secs(2)),
        "{}",
        s.logs()
    );
    // Idle connections are closed promptly; new connections are refused.
    assert!(
        idle.closed_within(Duration::from_secs(1)),
        "idle connection not closed"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(refused(s.addr), "new connection accepted while draining");
    // The in-flight response completes in full, then the connection closes.
    let r = busy.response(false).unwrap();
    assert_eq!(r.status, 200);
    assert!(r.body == data, "in-flight body incomplete");
    assert_eq!(r.header("Connection"), Some("close"));
    let st = s
        .wait_exit(Duration::from_secs(10))
        .expect("server did not exit");
    assert_eq!(st.code(), Some(0), "{}", s.logs());
    assert!(t.elapsed() >= Duration::from_millis(400));
    assert!(s.logs().contains("drained; exiting"), "{}", s.logs());
}

#[test]
fn sigterm_drains_in_flight_and_exits_0() {
    graceful(SIGTERM);
}

#[test]
fn sigint_drains_in_flight_and_exits_0() {
    graceful(SIGINT);
}

/// SIGQUIT is nginx's graceful stop: it drains too (its default action, a core dump, cut
/// every response in flight).
#[test]
fn sigquit_drains_in_flight_and_exits_0() {
    graceful(libc::SIGQUIT);
}

#[test]
fn shutdown_deadline_cuts_stuck_responses_and_still_exits_0() {
    let (_d, mut s, _) = server(5000, 1);
    let mut busy = s.connect();
    busy.send(b"GET /slow/big.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    std::thread::sleep(Duration::from_millis(100));
    let (st, took) = terminate(&mut s, Duration::from_secs(4));
    assert_eq!(st.code(), Some(0));
    assert!(took < Duration::from_millis(2500), "{took:?}");
    assert!(
        s.logs().contains("shutdown timeout reached"),
        "{}",
        s.logs()
    );
    assert!(busy.response(false).is_err());
}

/// A second SIGTERM or SIGINT while draining stops the wait for in-flight responses at once
/// (an operator's second Ctrl-C), still exiting 0 and saying so.
#[test]
fn a_second_signal_while_draining_exits_at_once() {
    for second in [SIGTERM, SIGINT] {
        let (_d, mut s, _) = server(5000, 30);
        let mut busy = s.connect();
        busy.send(b"GET /slow/big.bin HTTP/1.1\r\nHost: t\r\n\r\n");
        std::thread::sleep(Duration::from_millis(100));
        s.signal(SIGTERM);
        assert!(
            s.wait_log("draining", Duration::from_secs(2)),
            "{}",
            s.logs()
        );
        // Still draining: the in-flight response holds the process.
        assert!(s.wait_exit(Duration::from_millis(500)).is_none());
        let t = Instant::now();
        s.signal(second);
        let st = s
            .wait_exit(Duration::from_secs(3))
            .expect("server did not exit on the second signal");
        assert_eq!(st.code(), Some(0), "{}", s.logs());
        assert!(
            t.elapsed() < Duration::from_millis(2000),
            "{:?}",
            t.elapsed()
        );
        assert!(
            s.logs().contains("second signal while draining"),
            "{}",
            s.logs()
        );
        assert!(busy.response(false).is_err());
    }
}

#[test]
fn idle_server_exits_at_once() {
    let (_d, mut s, _) = server(0, 30);
    assert_eq!(s.get("/x.txt").status, 200);
    let (st, took) = terminate(&mut s, Duration::from_secs(3));
    assert_eq!(st.code(), Some(0));
    assert!(took < Duration::from_millis(1000));
}

#[test]
fn sighup_and_sigusr_are_ignored_and_logged() {
    let (_d, mut s, data) = server(0, 30);
    for sig in [libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2] {
        s.signal(sig);
    }
    assert!(
        s.wait_log("signal=\"SIGUSR2\"", Duration::from_secs(3))
            || s.wait_log("signal=SIGUSR2", Duration::from_secs(1)),
        "{}",
        s.logs()
    );
    assert!(s.logs().contains("SIGHUP") && s.logs().contains("SIGUSR1"));
    // Still serving, then SIGTERM still drains and exits 0.
    assert!(s.get("/slow/big.bin").body == data);
    let (st, _) = terminate(&mut s, Duration::from_secs(10));
    assert!(st.success(), "{st:?}");
}

/// A directory listing made on the pool while draining began says `Connection: close` (it then
/// closes): it said keep-alive, as cache answers did.
#[test]
fn a_listing_made_after_draining_began_says_close() {
    let base = tempdir();
    let slow = base.path().join("slow");
    std::fs::create_dir_all(slow.join("dir")).unwrap();
    std::fs::write(slow.join("dir/a.txt"), b"a").unwrap();
    let mut r = route("/", "slow");
    r.http.listing = true;
    let cfg = Config {
        volumes: vec![volume("slow", &slow)],
        routes: vec![r],
        ..config(2)
    };
    let s = Server::start_with_failpoints(&cfg, "pool_task=return(slow:700)");
    let mut c = s.connect();
    c.send(b"GET /dir/ HTTP/1.1\r\nHost: t\r\n\r\n");
    // The open takes 700 ms on the pool, then the listing 700 ms more: drained during the
    // listing.
    std::thread::sleep(Duration::from_millis(1000));
    s.signal(SIGTERM);
    let r = c.response(false).unwrap();
    assert_eq!(r.status, 200);
    assert!(String::from_utf8_lossy(&r.body).contains("a.txt"));
    assert_eq!(r.header("Connection"), Some("close"));
}

/// A response cut by the drain's deadline (a download its client stopped reading) still gets
/// its access line, with what it sent, as a client that went away would: the cut ends it, it
/// is not lost with the process.
#[test]
fn a_response_cut_at_the_deadline_is_logged() {
    let base = tempdir();
    let big = base.path().join("big.bin");
    let len: u64 = 256 << 20;
    std::fs::File::create(&big).unwrap().set_len(len).unwrap();
    let mut cfg = Config {
        volumes: vec![volume("v", base.path())],
        ..config(2)
    };
    cfg.shutdown_timeout_secs = 1;
    cfg.logging.access_log = true;
    let mut s = Server::start(&cfg);
    let mut c = s.connect();
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut b = [0u8; 1000];
    let _ = std::io::Read::read(&mut c.stream, &mut b);
    std::thread::sleep(Duration::from_millis(200));
    let (st, took) = terminate(&mut s, Duration::from_secs(5));
    assert_eq!(st.code(), Some(0));
    assert!(took < Duration::from_millis(2500), "{took:?}");
    let logs = s.stop();
    let line = logs
        .lines()
        .find(|l| l.contains("path=/big.bin") || l.contains("path=\"/big.bin\""))
        .unwrap_or_else(|| panic!("no access line for the cut response:\n{logs}"));
    assert!(line.contains("status=200"), "{line}");
    let bytes: u64 = line
        .split("bytes=")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no bytes in {line}"));
    assert!(bytes > 0 && bytes < len, "{line}");
    // Ended with a reset, not a FIN: a cut body never looks complete to its client (one whose
    // end is its connection's close would).
    let mut buf = vec![0u8; 1 << 20];
    let end = loop {
        match std::io::Read::read(&mut c.stream, &mut buf) {
            Ok(0) => break Ok(()),
            Ok(_) => continue,
            Err(e) => break Err(e.kind()),
        }
    };
    assert_eq!(end, Err(std::io::ErrorKind::ConnectionReset));
}
