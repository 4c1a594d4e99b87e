//! The real `content-server` process: started with a [`Config`] (rendered with
//! `Config::to_toml()`) or any command line, its stderr captured line by line, ready once it
//! logs `content-server ready`; the HTTP and admin addresses are read from its `listening
//! addr=…` and `admin listening on http://…` lines (text or JSON logs), so ports are
//! kernel-chosen and tests never race for them. With an admin listener, started also means
//! `/healthz` (every event loop has ticked) and `/readyz` answer 200. Killed on drop. The
//! stderr reader can be paused ([`Server::pause_log_reader`]), leaving the pipe to fill.

use super::http::{self, Conn, Response};
use super::metrics::Metrics;
use content_server::config::Config;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_content-server");

pub const SIGTERM: i32 = libc::SIGTERM;
pub const SIGINT: i32 = libc::SIGINT;

/// How long a server may take to log that it is ready (a loaded machine is slow).
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running server process; killed on drop.
pub struct Server {
    child: Child,
    /// The first HTTP listener.
    pub addr: SocketAddr,
    admin: Option<SocketAddr>,
    /// The configuration file the server was started with ([`Server::start`]).
    pub config_path: Option<PathBuf>,
    logs: Arc<Mutex<String>>,
    log_reader: Option<JoinHandle<()>>,
    /// While true the stderr reader reads nothing more (see [`Server::pause_log_reader`]).
    log_paused: Arc<(Mutex<bool>, Condvar)>,
    _scratch: Option<tempfile::TempDir>,
}

impl Server {
    /// `serve --config FILE` with `cfg` rendered into a scratch dir.
    pub fn start(cfg: &Config) -> Server {
        Server::start_with_env(cfg, &[])
    }

    /// As [`Server::start`] with fault injection: `FAILPOINTS=failpoints` (needs the
    /// `failpoints` feature, e.g. `pool_task=return(VOLUME:MS)`).
    /// `""` means none.
    pub fn start_with_failpoints(cfg: &Config, failpoints: &str) -> Server {
        if failpoints.is_empty() {
            return Server::start(cfg);
        }
        Server::start_with_env(cfg, &[("FAILPOINTS", failpoints)])
    }

    /// As [`Server::start`] with extra environment variables.
    pub fn start_with_env(cfg: &Config, env: &[(&str, &str)]) -> Server {
        Server::try_start_with_env(cfg, env).unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`Server::start_with_env`]; the log of a server that exited or never became ready
    /// as `Err`.
    pub fn try_start_with_env(cfg: &Config, env: &[(&str, &str)]) -> Result<Server, String> {
        let scratch = tempfile::tempdir().expect("tempdir");
        let path = scratch.path().join("server.toml");
        let toml = cfg.to_toml().expect("render the test config");
        std::fs::write(&path, toml).expect("write the test config");
        let mut s = Server::try_spawn(&["serve", "--config", path.to_str().expect("utf-8")], env)?;
        s.config_path = Some(path);
        s._scratch = Some(scratch);
        Ok(s)
    }

    /// `serve --root DIR` on 127.0.0.1 with a free port, no admin listener, two workers, plus
    /// `extra` arguments.
    pub fn root(dir: &Path, extra: &[&str]) -> Server {
        let mut args = vec![
            "serve",
            "--root",
            dir.to_str().expect("utf-8 path"),
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

    /// `content-server ARGS...` with extra environment; waits until it is ready.
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Server {
        Server::try_spawn(args, env).unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`Server::spawn`], run in the directory `cwd` (relative paths in `args` are its).
    pub fn spawn_in(cwd: &Path, args: &[&str]) -> Server {
        let mut cmd = command(args, &[]);
        cmd.current_dir(cwd);
        Server::launch(cmd).unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`Server::spawn`]; the log of a server that exited or never became ready as `Err`.
    pub fn try_spawn(args: &[&str], env: &[(&str, &str)]) -> Result<Server, String> {
        Server::launch(command(args, env))
    }

    /// As [`Server::try_spawn`], started by the command `wrapper` (its program and arguments
    /// first, then this binary's path and `args`), e.g. `unshare ... sh -c SCRIPT`.
    pub fn try_spawn_wrapped(
        wrapper: &[&str],
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Server, String> {
        Server::launch(wrapped(wrapper, args, env))
    }

    /// Serve `cfg` (written to `dir/config.toml`) with RLIMIT_NOFILE lowered to `nofile`
    /// (lowering one's own limit needs no privilege).
    pub fn start_with_nofile(dir: &std::path::Path, cfg: &Config, nofile: u32) -> Server {
        let path = dir.join("config.toml");
        std::fs::write(&path, cfg.to_toml().expect("render the config")).unwrap();
        let script = format!(r#"ulimit -n {nofile} && exec "$@""#);
        let wrapper = ["sh", "-c", script.as_str(), "sh"];
        let args = ["serve", "--config", path.to_str().expect("a UTF-8 path")];
        Server::try_spawn_wrapped(&wrapper, &args, &[])
            .unwrap_or_else(|e| panic!("start under ulimit -n {nofile}: {e}"))
    }

    fn launch(mut cmd: Command) -> Result<Server, String> {
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
        let logs = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("stderr");
        let sink = logs.clone();
        let log_paused = Arc::new((Mutex::new(false), Condvar::new()));
        let paused = log_paused.clone();
        let log_reader = std::thread::spawn(move || {
            let mut lines = BufReader::new(stderr).lines();
            loop {
                {
                    let (flag, wake) = &*paused;
                    let mut p = flag.lock().unwrap();
                    while *p {
                        p = wake.wait(p).unwrap();
                    }
                }
                let Some(Ok(line)) = lines.next() else { break };
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let mut server = Server {
            child,
            addr: ([0, 0, 0, 0], 0).into(),
            admin: None,
            config_path: None,
            logs,
            log_reader: Some(log_reader),
            log_paused,
            _scratch: None,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let logs = server.logs();
            if logs.contains("content-server ready") {
                server.addr = logged_addr(&logs, &["listening addr=", "\"listening\",\"addr\":\""])
                    .ok_or_else(|| format!("ready without a listening address:\n{logs}"))?;
                server.admin = logged_addr(&logs, &["admin listening on http://"]);
                // With an admin listener: also every event loop has ticked (/healthz) and the
                // server is ready (/readyz), so load-dependent start-up order never shows.
                let Some(admin) = server.admin else {
                    return Ok(server);
                };
                let up = |path| http::try_get(admin, path).is_ok_and(|r| r.status == 200);
                if up("/healthz") && up("/readyz") {
                    return Ok(server);
                }
            }
            if let Ok(Some(st)) = server.child.try_wait() {
                return Err(format!("server exited early ({st}):\n{}", server.stop()));
            }
            if Instant::now() >= deadline {
                return Err(format!("server did not start:\n{}", server.stop()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The admin listener's address (panics when the server runs without one).
    pub fn admin(&self) -> SocketAddr {
        self.admin.expect("this server has no admin listener")
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the server logged so far.
    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    /// Wait until the log contains `needle`; whether it did within `timeout`.
    pub fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        super::files::wait_until(timeout, || self.logs().contains(needle))
    }

    /// Stop reading the server's stderr after the line being read: once the pipe is full, every
    /// write the server makes to it would block.
    pub fn pause_log_reader(&self) {
        *self.log_paused.0.lock().unwrap() = true;
    }

    /// Read the server's stderr again (what waited in the pipe first).
    pub fn resume_log_reader(&self) {
        *self.log_paused.0.lock().unwrap() = false;
        self.log_paused.1.notify_all();
    }

    /// Send signal `sig` (e.g. [`SIGTERM`]).
    pub fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) on our own child's pid; no memory is involved.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({sig}) failed");
    }

    /// Wait for the process to exit (up to `timeout`).
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

    /// Kill the process (if still running) and return its whole log.
    pub fn stop(&mut self) -> String {
        self.resume_log_reader();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.log_reader.take() {
            let _ = reader.join();
        }
        self.logs()
    }

    /// A keep-alive connection to the HTTP listener.
    pub fn connect(&self) -> Conn {
        Conn::new(self.addr)
    }

    /// One `GET path` with `Connection: close`, read to EOF.
    pub fn get(&self, path: &str) -> Response {
        http::get(self.addr, path)
    }

    /// One request with `headers` and `Connection: close`, read to EOF.
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
        http::request(self.addr, method, path, headers)
    }

    /// `GET path` on the admin listener.
    pub fn admin_get(&self, path: &str) -> Response {
        http::get(self.admin(), path)
    }

    /// Poll `GET path` on the admin listener until it answers `status` or `within` passes:
    /// whether it did, and the last answer as `"STATUS BODY"`.
    pub fn wait_admin_status(&self, path: &str, status: u16, within: Duration) -> (bool, String) {
        let mut last = String::new();
        let seen = super::files::wait_until(within, || {
            let r = self.admin_get(path);
            last = format!("{} {}", r.status, r.text());
            r.status == status
        });
        (seen, last)
    }

    /// The current `/metrics` samples.
    pub fn metrics(&self) -> Metrics {
        let r = self.admin_get("/metrics");
        assert_eq!(r.status, 200, "/metrics: {}", r.text());
        Metrics::parse(&r.text())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.resume_log_reader();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `content-server ARGS...` with a clean environment plus `env`, stderr piped.
fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    wrapped(&[], args, env)
}

/// `BIN args`, or `wrapper... BIN args`.
fn wrapped(wrapper: &[&str], args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = match wrapper.split_first() {
        Some((program, rest)) => {
            let mut c = Command::new(program);
            c.args(rest).arg(BIN);
            c
        }
        None => Command::new(BIN),
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG")
        .env_remove("FAILPOINTS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// The address after the first of `markers` in `logs`.
fn logged_addr(logs: &str, markers: &[&str]) -> Option<SocketAddr> {
    let rest = markers
        .iter()
        .find_map(|m| logs.find(m).map(|i| &logs[i + m.len()..]))?;
    let end = rest.find(|c: char| c.is_whitespace() || c == '"' || c == ',')?;
    rest[..end].parse().ok()
}

/// A free TCP port on 127.0.0.1 (bound, then released), for the few tests that must name a
/// port before the server starts.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `content-server check-config FILE` on a file holding `toml`: (exit code, stdout, stderr).
pub fn check_config(toml: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.toml");
    std::fs::write(&path, toml).expect("write the config");
    run(&["check-config", path.to_str().expect("utf-8")])
}

/// `check-config` accepts `toml`: its normalized output, parsed. That output is itself a valid
/// config that normalizes to the same text.
pub fn check_config_ok(toml: &str) -> toml::Value {
    let (code, out, err) = check_config(toml);
    assert_eq!(code, 0, "{err}");
    let (code2, out2, _) = check_config(&out);
    assert_eq!((code2, &out2), (0, &out), "the output normalizes to itself");
    toml::from_str(&out).unwrap_or_else(|e| panic!("output is not TOML: {e}\n{out}"))
}

/// `check-config` rejects `toml` (exit 1, nothing on stdout, no panic) and its stderr names each
/// of `wants`; returns the stderr.
pub fn check_config_fails(toml: &str, wants: &[&str]) -> String {
    let (code, out, err) = check_config(toml);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(!err.contains("panicked"), "{err}");
    for want in wants {
        assert!(err.contains(want), "missing {want:?} in\n{err}");
    }
    err
}

/// Run `content-server ARGS...` to completion: (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run content-server");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A size field of `/proc/PID/status` (`VmRSS`, `RssAnon`...) in bytes.
pub fn proc_status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    kb * 1024
}

/// The command prefix that runs the server as `nobody` when the tests run as root (root reads
/// and searches any directory, so permission tests need another user; `setpriv`, util-linux),
/// after giving `owned` to nobody. Empty (the test's own user) otherwise.
pub fn as_nobody_when_root(owned: &[&std::path::Path]) -> &'static [&'static str] {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return &[];
    }
    for p in owned {
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).expect("chown to nobody");
    }
    &[
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ]
}
