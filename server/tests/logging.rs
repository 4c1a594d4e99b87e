//! The log never stalls the server: with its stderr a pipe that nobody reads (a full pipe
//! blocks every write to it), a server logging an access line per request keeps answering, drops
//! the lines it cannot write, counts them in `contentserver_log_lines_dropped_total`, and still
//! writes lines once the pipe drains.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Requests sent while nobody reads stderr: their access lines are far more than a pipe holds
/// (64 KiB, about 400 lines) plus the writer's buffer ([`content_server::logging::BUFFERED_LINES`]).
const REQUESTS: usize = 30_000;

/// The server process, killed when the test ends (a failed assertion included).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_stderr_nobody_reads_drops_log_lines_and_never_stalls_requests() {
    let d = content_dir(1, 16);
    std::fs::write(d.path().join("after-the-drain.txt"), b"after").expect("write");
    let mut cfg = one_volume(1, volume("v", d.path()));
    cfg.logging.access_log = true;
    let scratch = tempdir();
    let path = scratch.path().join("server.toml");
    std::fs::write(&path, cfg.to_toml().expect("render")).expect("write config");
    let mut child = Command::new(BIN)
        .args(["serve", "--config", path.to_str().expect("utf-8")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG")
        .spawn()
        .expect("spawn content-server");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut child = Killed(child);

    // Read until ready (the addresses), then never again until the end.
    let (mut addr, mut admin, mut logs) = (None, None, String::new());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !logs.contains("content-server ready") {
        assert!(Instant::now() < deadline, "not ready:\n{logs}");
        let mut line = String::new();
        if stderr.read_line(&mut line).expect("read stderr") == 0 {
            panic!("server exited:\n{logs}");
        }
        let after = |marker: &str| {
            let rest = &line[line.find(marker)? + marker.len()..];
            rest.split(|c: char| c.is_whitespace()).next()?.parse().ok()
        };
        addr = addr.or_else(|| after("listening addr="));
        admin = admin.or_else(|| after("admin listening on http://"));
        logs.push_str(&line);
    }
    let (addr, admin): (std::net::SocketAddr, std::net::SocketAddr) =
        (addr.expect("listening addr"), admin.expect("admin addr"));

    let started = Instant::now();
    let mut c = Conn::new(addr);
    for i in 0..REQUESTS {
        let r = c.get("/f0.bin");
        assert_eq!(r.status, 200, "request {i}");
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "only {i} requests in 120 s: the server waits for its stderr"
        );
    }
    let m = Metrics::parse(&get(admin, "/metrics").text());
    let dropped = m.get("contentserver_log_lines_dropped_total", &[]);
    assert!(
        dropped > 0.0,
        "{REQUESTS} access lines into a full pipe, none dropped"
    );
    assert!(dropped <= REQUESTS as f64, "dropped {dropped}");

    // Drain stderr: the writer catches up, and lines logged from then on are written. A request
    // whose line found the writer's buffer still full counts one more dropped line: ask again.
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        let _ = stderr.read_to_string(&mut all);
        all
    });
    let marker = "/after-the-drain.txt";
    let mut before = dropped;
    let written = wait_until(Duration::from_secs(20), || {
        assert_eq!(c.get(marker).status, 200);
        let now = Metrics::parse(&get(admin, "/metrics").text())
            .get("contentserver_log_lines_dropped_total", &[]);
        std::mem::replace(&mut before, now) == now
    });
    assert!(
        written,
        "every access line dropped 20 s after the drain began"
    );
    // SAFETY: a signal to the child this test started and has not reaped.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let status = child.0.wait().expect("wait");
    assert!(status.success(), "{status}");
    let all = reader.join().expect("reader");
    assert!(
        all.contains(marker),
        "no access line after the drain; the end of stderr:\n{}",
        &all[all.len().saturating_sub(2000)..]
    );
    assert!(all.contains("drained; exiting"), "the last line is lost");
    assert!(!all.contains("panicked"), "{all}");
}
