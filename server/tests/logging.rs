//! The log never stalls the server: with its stderr a pipe that nobody reads (a full pipe
//! blocks every write to it), a server logging an access line per request keeps answering, drops
//! the lines it cannot write, counts them in `contentserver_log_lines_dropped_total`, and still
//! writes lines once the pipe drains.

mod common;

use common::*;
use std::time::{Duration, Instant};

/// Requests sent while nobody reads stderr: their access lines are far more than a pipe holds
/// (64 KiB, about 400 lines) plus the writer's buffer ([`content_server::logging::BUFFERED_LINES`]).
const REQUESTS: usize = 30_000;

#[test]
fn a_stderr_nobody_reads_drops_log_lines_and_never_stalls_requests() {
    let d = content_dir(1, 16);
    std::fs::write(d.path().join("after-the-drain.txt"), b"after").expect("write");
    let mut cfg = one_volume(1, volume("v", d.path()));
    cfg.logging.access_log = true;
    let mut s = Server::start(&cfg);
    s.pause_log_reader();

    let started = Instant::now();
    let mut c = s.connect();
    for i in 0..REQUESTS {
        let r = c.get("/f0.bin");
        assert_eq!(r.status, 200, "request {i}");
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "only {i} requests in 120 s: the server waits for its stderr"
        );
    }
    let dropped = s
        .metrics()
        .get("contentserver_log_lines_dropped_total", &[]);
    assert!(
        dropped > 0.0,
        "{REQUESTS} access lines into a full pipe, none dropped"
    );
    assert!(dropped <= REQUESTS as f64, "dropped {dropped}");

    // Drain stderr: the writer catches up, and lines logged from then on are written. A request
    // whose line found the writer's buffer still full counts one more dropped line: ask again.
    s.resume_log_reader();
    // (Its line is written after the answer: the drop counter read right after the answer
    // may not count it yet, so what is waited for is the line itself.)
    let marker = "/after-the-drain.txt";
    let written = wait_until(Duration::from_secs(20), || {
        assert_eq!(c.get(marker).status, 200);
        s.logs().contains(marker)
    });
    assert!(
        written,
        "every access line dropped 20 s after the drain began"
    );
    s.signal(SIGTERM);
    let status = s.wait_exit(Duration::from_secs(30)).expect("exits");
    assert!(status.success(), "{status}");
    assert!(
        s.wait_log("drained; exiting", Duration::from_secs(10)),
        "the last line is lost"
    );
    let all = s.logs();
    assert!(
        all.contains(marker),
        "no access line after the drain; the end of stderr:\n{}",
        &all[all.len().saturating_sub(2000)..]
    );
    assert!(!all.contains("panicked"), "{all}");
}

/// The access line names the method as sent (POST, OPTIONS...), while the metrics fold every
/// method but GET and HEAD into `other` (a bounded label).
#[test]
fn the_access_line_names_the_method_as_sent() {
    let d = content_dir(1, 16);
    let mut cfg = one_volume(1, volume("v", d.path()));
    cfg.logging.access_log = true;
    let s = Server::start(&cfg);
    let mut c = s.connect();
    let r = c.request("PROPFIND", "/f0.bin", &[]).expect("an answer");
    assert_eq!(r.status, 405);
    assert!(
        s.wait_log("method=\"PROPFIND\"", Duration::from_secs(5)),
        "{}",
        s.logs()
    );
    let m = s.metrics();
    assert_eq!(
        m.get(
            "contentserver_http_requests_total",
            &[("method", "other"), ("code", "405")]
        ),
        1.0
    );
}

/// A GET whose head is refused past its request line (no Host) is logged and counted as a GET.
#[test]
fn a_bad_head_after_a_get_request_line_is_counted_as_a_get() {
    let d = content_dir(1, 16);
    let mut cfg = one_volume(1, volume("v", d.path()));
    cfg.logging.access_log = true;
    let s = Server::start(&cfg);
    let mut c = s.connect();
    c.send(b"GET /f0.bin HTTP/1.1\r\n\r\n");
    assert_eq!(c.response(false).expect("an answer").status, 400);
    assert!(
        s.wait_log("method=\"GET\" path=\"-\"", Duration::from_secs(5)),
        "{}",
        s.logs()
    );
    let m = s.metrics();
    assert_eq!(
        m.get(
            "contentserver_http_requests_total",
            &[("method", "GET"), ("code", "400")]
        ),
        1.0
    );
}

/// A head not finished in time (408) is logged with the time it took: the header timeout, not
/// the instant of the answer.
#[test]
fn a_timed_out_head_is_logged_with_the_time_it_took() {
    let d = content_dir(1, 16);
    let mut cfg = one_volume(1, volume("v", d.path()));
    cfg.logging.access_log = true;
    cfg.limits.header_read_timeout_secs = 1;
    let s = Server::start(&cfg);
    let mut c = s.connect();
    c.send(b"GET /f0.bin HTTP/1.1\r\nHo");
    assert_eq!(c.response(false).expect("an answer").status, 408);
    assert!(
        s.wait_log("status=408", Duration::from_secs(5)),
        "{}",
        s.logs()
    );
    let logs = s.logs();
    let line = logs.lines().find(|l| l.contains("status=408")).unwrap();
    let ms: f64 = line
        .split("duration_ms=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no duration in {line}"));
    assert!((999.0..1500.0).contains(&ms), "{line}");
}

/// A download the client aborts is logged with the client's address (asked when the request
/// came, not when the line is written: the kernel forgets a reset connection's peer).
#[test]
fn an_aborted_download_is_logged_with_its_peer() {
    use std::io::{Read, Write};
    let d = tempdir();
    let f = std::fs::File::create(d.path().join("big.bin")).unwrap();
    f.set_len(256 << 20).unwrap();
    let mut cfg = one_volume(1, volume("v", d.path()));
    cfg.logging.access_log = true;
    let s = Server::start(&cfg);
    let mut c = std::net::TcpStream::connect(s.addr).expect("connect");
    let me = c.local_addr().unwrap();
    c.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut some = [0u8; 4096];
    c.read_exact(&mut some).unwrap();
    // A reset, as a player that seeks elsewhere.
    let _ = rustix::net::sockopt::set_socket_linger(&c, Some(Duration::ZERO));
    drop(c);
    let line = format!("peer={me} method=\"GET\" path=\"/big.bin\"");
    assert!(s.wait_log(&line, Duration::from_secs(10)), "{}", s.logs());
}

/// A fatal start-up error (here a port another program holds) is said once: as an error line in
/// the configured format (JSON, as a log collector expects), or as a plain line when the log is
/// off. It was said twice, as a log line and as a plain line.
#[test]
fn a_fatal_error_is_said_once_in_the_logs_format() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = busy.local_addr().expect("addr").port();
    let root = tempdir();
    let conf = tempdir();
    for (level, as_log_line) in [("info", true), ("off", false)] {
        let mut cfg = one_volume(1, volume("v", root.path()));
        cfg.listeners[0].port = port;
        cfg.logging.format = LogFormat::Json;
        cfg.logging.level = level.into();
        let path = conf.path().join(format!("{level}.toml"));
        std::fs::write(&path, cfg.to_toml().expect("render")).expect("write");
        let args = ["serve", "--config", path.to_str().expect("utf-8")];
        let err = Server::try_spawn(&args, &[("RUST_LOG", "")])
            .err()
            .unwrap_or_else(|| panic!("started on port {port}, which another socket holds"));
        let said: Vec<&str> = err.lines().filter(|l| l.contains("in use")).collect();
        assert_eq!(
            said.len(),
            1,
            "level {level}: said {} times:\n{err}",
            said.len()
        );
        if as_log_line {
            let line: serde_json::Value = serde_json::from_str(said[0])
                .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {}", said[0]));
            assert_eq!(line["level"], "ERROR", "{line}");
        } else {
            assert!(said[0].starts_with("content-server: "), "{}", said[0]);
        }
    }
}

/// `RUST_LOG=warning` (a bare word that is no level) would be a target name to the filter and
/// silence every line; it is refused like the same `logging.level`: reported, and the
/// configured level used.
#[test]
fn a_rust_log_that_is_no_level_is_reported_and_the_configured_level_used() {
    let root = tempdir();
    let s = Server::spawn(
        &["serve", "--root", root.path().to_str().expect("utf-8")],
        &[("RUST_LOG", "warning")],
    );
    assert!(
        s.wait_log("RUST_LOG is not a valid filter", Duration::from_secs(5)),
        "{}",
        s.logs()
    );
    assert!(
        s.wait_log("listening", Duration::from_secs(5)),
        "info lines still logged:\n{}",
        s.logs()
    );
}
