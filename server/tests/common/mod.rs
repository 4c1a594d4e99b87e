//! Shared helpers for the data-plane integration tests: start the real `content-server` binary
//! on a kernel-chosen port (it logs `listening addr=...`), capture its log, and speak raw
//! HTTP/1.1 over TcpStream. Nothing here fakes server behaviour.
#![allow(dead_code)]

pub mod origin;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_content-server");

/// A running server process; killed on drop.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    logs: Arc<Mutex<String>>,
}

impl Server {
    /// `content-server ARGS...` with extra environment; waits for the listening line.
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .env_remove("RUST_LOG")
            .env_remove("FAILPOINTS");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn content-server");
        let logs = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("stderr");
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let found = listening_addr(&logs.lock().unwrap());
            if let Some(addr) = found {
                return Server { child, addr, logs };
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!("server exited early ({st}):\n{}", logs.lock().unwrap());
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("server did not start:\n{}", logs.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Serve with a TOML config written to `dir/config.toml`.
    pub fn with_config(dir: &Path, toml: &str, env: &[(&str, &str)]) -> Server {
        let path = dir.join("config.toml");
        std::fs::write(&path, toml).unwrap();
        Server::spawn(&["serve", "--config", path.to_str().unwrap()], env)
    }

    /// `serve --root DIR` on 127.0.0.1 with a free port, no admin listener, plus `extra` args.
    pub fn root(dir: &Path, extra: &[&str]) -> Server {
        let mut args = vec![
            "serve",
            "--root",
            dir.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "",
            "--workers",
            "2",
        ];
        args.extend_from_slice(extra);
        Server::spawn(&args, &[])
    }

    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    /// Wait until the log contains `needle`.
    pub fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.logs().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(rc, 0, "kill failed");
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    pub fn connect(&self) -> Conn {
        Conn::new(self.addr)
    }

    /// One GET on a fresh connection.
    pub fn get(&self, path: &str) -> Response {
        let mut c = self.connect();
        c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes());
        c.response(false).expect("response")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub const SIGTERM: i32 = libc::SIGTERM;
pub const SIGINT: i32 = libc::SIGINT;

fn listening_addr(logs: &str) -> Option<SocketAddr> {
    // Text (`listening addr=A`) or JSON (`"message":"listening","addr":"A"`) logs.
    let rest = ["listening addr=", "\"listening\",\"addr\":\""]
        .iter()
        .find_map(|m| logs.find(m).map(|i| &logs[i + m.len()..]))?;
    let end = rest.find(|c: char| c.is_whitespace() || c == '"' || c == ',')?;
    rest[..end].parse().ok()
}

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A client connection that keeps unread bytes between responses (pipelining).
pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn new(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, raw: &[u8]) {
        self.stream.write_all(raw).expect("write request");
    }

    fn fill(&mut self) -> std::io::Result<usize> {
        let mut tmp = [0u8; 65536];
        let n = self.stream.read(&mut tmp)?;
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(n)
    }

    /// Read one response; `head_request`: no body follows regardless of Content-Length.
    pub fn response(&mut self, head_request: bool) -> std::io::Result<Response> {
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if self.fill()? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("closed before a response head ({} bytes)", self.buf.len()),
                ));
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).to_string();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
        let headers: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
            .collect();
        self.buf.drain(..head_end);
        let mut resp = Response {
            status,
            headers,
            body: Vec::new(),
        };
        let len: usize = if head_request || status == 304 {
            0
        } else {
            resp.header("Content-Length")
                .map(|v| v.parse().unwrap())
                .unwrap_or(0)
        };
        while self.buf.len() < len {
            if self.fill()? == 0 {
                resp.body = std::mem::take(&mut self.buf);
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("body ended after {} of {len} bytes", resp.body.len()),
                ));
            }
        }
        resp.body = self.buf.drain(..len).collect();
        Ok(resp)
    }

    /// True when the server closed the connection (EOF) within `timeout`.
    pub fn closed_within(&mut self, timeout: Duration) -> bool {
        self.stream.set_read_timeout(Some(timeout)).unwrap();
        loop {
            match self.fill() {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }

    /// Bytes received and not yet consumed by `response`.
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }

    /// Read until EOF; returns everything received (including pending bytes).
    pub fn read_to_end(&mut self) -> Vec<u8> {
        while let Ok(n) = self.fill() {
            if n == 0 {
                break;
            }
        }
        std::mem::take(&mut self.buf)
    }
}

/// A temp dir with a few files.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// Deterministic pseudo-random bytes.
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Config TOML head: one 127.0.0.1 listener on a free port, no admin listener.
pub fn config_head(workers: usize) -> String {
    format!(
        "workers = {workers}\n[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n[admin]\nlisten = \"\"\n"
    )
}
