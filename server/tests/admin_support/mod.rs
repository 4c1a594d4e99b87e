//! Helpers for the metrics and admin integration tests: start the real `content-server` binary
//! on free ports with a given configuration (and failpoints), talk HTTP/1.1 over plain
//! `TcpStream`s, and read samples out of the Prometheus text exposition.
//!
//! Test-only; it must not reach into the server's internals — everything goes through sockets.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1 (bound then released; the server retries are in `start`).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One volume of a test configuration.
pub struct Vol<'a> {
    pub name: &'a str,
    pub path: &'a Path,
    pub offload: &'a str,
    pub threads: usize,
    pub max_queue: usize,
}

/// The TOML of a configuration serving `vols` on `port`, admin on `admin_port`.
pub fn config_toml(port: u16, admin_port: u16, workers: usize, vols: &[Vol<'_>]) -> String {
    let mut s = format!(
        "workers = {workers}\nshutdown_timeout_secs = 10\n\n\
         [[listeners]]\naddress = \"127.0.0.1\"\nport = {port}\n\n\
         [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n"
    );
    for v in vols {
        s.push_str(&format!(
            "[[volumes]]\nname = \"{}\"\npath = \"{}\"\noffload = \"{}\"\n\
             [volumes.pool]\nthreads = {}\nmax_queue = {}\n\n",
            v.name,
            v.path.display(),
            v.offload,
            v.threads,
            v.max_queue
        ));
    }
    if vols.len() > 1 {
        for v in vols {
            s.push_str(&format!(
                "[[routes]]\nprefix = \"/{}\"\nvolume = \"{}\"\nstrip_prefix = true\n\n",
                v.name, v.name
            ));
        }
    }
    s
}

/// A running server process; killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub config_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Start with the configuration built by `make(port, admin_port)` and the given failpoints
    /// (`""` for none); wait until `/readyz` answers 200. Retries on a port race.
    pub fn start(make: impl Fn(u16, u16) -> String, failpoints: &str) -> Server {
        Server::start_with(
            |port, admin, dir| {
                let config_path = dir.join("server.toml");
                std::fs::write(&config_path, make(port, admin)).expect("write config");
                vec![
                    "serve".into(),
                    "--config".into(),
                    config_path.display().to_string(),
                ]
            },
            failpoints,
        )
    }

    /// Start with the command line `args(port, admin_port, scratch_dir)`; as [`Server::start`].
    pub fn start_with(args: impl Fn(u16, u16, &Path) -> Vec<String>, failpoints: &str) -> Server {
        let mut last_err = String::new();
        for _ in 0..3 {
            let (port, admin_port) = (free_port(), free_port());
            let dir = tempfile::tempdir().expect("tempdir");
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_content-server"));
            cmd.args(args(port, admin_port, dir.path()))
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            if failpoints.is_empty() {
                cmd.env_remove("FAILPOINTS");
            } else {
                cmd.env("FAILPOINTS", failpoints);
            }
            let child = cmd.spawn().expect("spawn content-server");
            let mut server = Server {
                child,
                addr: ([127, 0, 0, 1], port).into(),
                admin: ([127, 0, 0, 1], admin_port).into(),
                config_path: dir.path().join("server.toml"),
                _dir: dir,
            };
            match server.wait_ready(Duration::from_secs(15)) {
                Ok(()) => return server,
                Err(e) => last_err = e,
            }
        }
        panic!("content-server did not become ready: {last_err}");
    }

    fn wait_ready(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                return Err(format!("exited with {status}: {err}"));
            }
            if let Ok(r) = try_get(self.admin, "/readyz") {
                if r.status == 200 {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        Err("timed out waiting for /readyz".into())
    }

    /// The current `/metrics` text.
    pub fn metrics(&self) -> Metrics {
        let r = get(self.admin, "/metrics");
        assert_eq!(r.status, 200, "/metrics: {}", r.body);
        Metrics::parse(&r.body)
    }

    /// Send SIGTERM.
    pub fn sigterm(&self) {
        // SAFETY: kill(2) with a pid we spawned; no memory is involved.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill SIGTERM");
    }

    /// Wait for the process to exit (up to `within`); its exit code.
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// `GET path` with `Connection: close`, reading to EOF (10 s timeout).
pub fn try_get(addr: SocketAddr, path: &str) -> std::io::Result<Response> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_response(&raw).ok_or_else(|| std::io::Error::other(format!("bad response: {raw:?}")))
}

pub fn get(addr: SocketAddr, path: &str) -> Response {
    try_get(addr, path).unwrap_or_else(|e| panic!("GET {path} on {addr}: {e}"))
}

fn parse_response(raw: &[u8]) -> Option<Response> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Some(Response {
        status,
        headers,
        body: body.to_string(),
    })
}

/// Samples of a Prometheus text exposition: (name, sorted labels) -> value.
pub struct Metrics {
    pub text: String,
    pub samples: BTreeMap<(String, Vec<(String, String)>), f64>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut samples = BTreeMap::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("sample line has a value");
            let value: f64 = value.parse().expect("numeric sample value");
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, parse_labels(rest.trim_end_matches('}'))),
                None => (series, Vec::new()),
            };
            samples.insert((name.to_string(), labels), value);
        }
        Metrics {
            text: text.to_string(),
            samples,
        }
    }

    /// The value of `name{labels}` (labels in any order), if present.
    pub fn try_get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut l: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        l.sort();
        self.samples.get(&(name.to_string(), l)).copied()
    }

    /// As `try_get`, panicking with the exposition when the series is missing.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.try_get(name, labels)
            .unwrap_or_else(|| panic!("no series {name}{labels:?} in\n{}", self.text))
    }

    /// Sum of every sample of `name` whose labels include `filter`.
    pub fn sum(&self, name: &str, filter: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|((n, l), _)| {
                n == name
                    && filter
                        .iter()
                        .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, v)| *v)
            .sum()
    }
}

fn parse_labels(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').expect("label k=v");
        out.push((k.to_string(), v.trim_matches('"').to_string()));
    }
    out.sort();
    out
}

/// Poll `cond` every 20 ms until true or `within` passes; whether it became true.
pub fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A directory with `files` of `size` bytes each, named `f0.bin`, `f1.bin`, ...
pub fn content_dir(files: usize, size: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for i in 0..files {
        std::fs::write(dir.path().join(format!("f{i}.bin")), vec![b'x'; size]).expect("write");
    }
    dir
}
