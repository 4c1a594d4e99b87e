//! A caching node for the cache tests (`tests/cache.rs`, `tests/cache_origin.rs`): the real
//! binary with one cache volume `c1` in front of the origin named `origin`, configured with the
//! server's own types, and what those tests look at — the `X-Cache` of a response, a metric, the
//! admin listener, the files under the cache directory, the end of running fills.
//!
//! Test-only; it knows the server only through its config types, its listeners and its files.

use super::origin::FaultOrigin;
use super::{one_volume, volume, wait_until, Conn, Response, Server};
use content_server::config::{Config, Origin, VolumeCache};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// 64 KiB slices (`slice_size` of a [`config`]'s volume TOML: [`SLICED`]).
pub const SLICE: usize = 65_536;
/// The volume TOML line of 64 KiB slices.
pub const SLICED: &str = "slice_size = 65536";

/// A running caching node and the directory of its cache volume.
pub struct Node {
    pub srv: Server,
    pub cache: PathBuf,
    /// The temporary directory of a [`temp_node`], removed with it.
    _dir: Option<tempfile::TempDir>,
}

/// A node's configuration (two workers): the origin `origin` with `servers` (tried in order),
/// one cache volume `c1` at `cache`, served at `/` by the implicit cache route. `origin` and
/// `vol` are TOML lines of the server's own `Origin` (connect and read timeouts 1 s unless
/// set) and `VolumeCache` types; change the rest through the returned `Config`'s fields.
pub fn config(servers: &[String], cache: &Path, origin: &str, vol: &str) -> Config {
    let servers: Vec<String> = servers.iter().map(|s| format!("{s:?}")).collect();
    let mut o: Origin = toml::from_str(&format!(
        "name = \"origin\"\nservers = [{}]\n{origin}",
        servers.join(", ")
    ))
    .expect("origin TOML");
    if !origin.contains("connect_timeout_ms") {
        o.connect_timeout_ms = 1000;
    }
    if !origin.contains("read_timeout_ms") {
        o.read_timeout_ms = 1000;
    }
    let mut v = volume("c1", cache);
    v.cache = Some(toml::from_str::<VolumeCache>(vol).expect("cache TOML"));
    let mut cfg = one_volume(2, v);
    cfg.origins = vec![o];
    cfg
}

/// [`config`] with the cache at `dir/cache`, started.
pub fn node(dir: &Path, servers: &[String], origin: &str, vol: &str) -> Node {
    Node::start(&config(servers, &dir.join("cache"), origin, vol))
}

/// The programmable test origin and a node in front of it (in a temporary directory of its
/// own), with `vol` as the TOML of its volume's `VolumeCache`.
pub fn origin_and_node(vol: &str) -> (FaultOrigin, Node) {
    let o = FaultOrigin::start();
    let n = temp_node(&[o.url()], "", vol);
    (o, n)
}

/// The `Authorization` header line (with its `\r\n`) that [`origin_and_purge_node`]'s token
/// allows purges with.
pub const PURGE_AUTH: &str = "Authorization: Bearer t0ken\r\n";

/// [`origin_and_node`] with purges enabled: `admin.purge_token_file` is a file in the node's
/// directory holding the token of [`PURGE_AUTH`] (and a newline).
pub fn origin_and_purge_node(vol: &str) -> (FaultOrigin, Node) {
    origin_and_purge_node_with_env(vol, &[])
}

/// [`origin_and_purge_node`] with `env` for the node (FAILPOINTS, say).
pub fn origin_and_purge_node_with_env(vol: &str, env: &[(&str, &str)]) -> (FaultOrigin, Node) {
    let o = FaultOrigin::start();
    let dir = super::tempdir();
    let token = dir.path().join("token");
    std::fs::write(&token, "t0ken\n").expect("write the purge token");
    let mut cfg = config(&[o.url()], &dir.path().join("cache"), "", vol);
    cfg.admin.purge_token_file = token.display().to_string();
    let mut n = Node::start_with_env(&cfg, env);
    n._dir = Some(dir);
    (o, n)
}

/// [`node`] in a temporary directory of its own.
pub fn temp_node(servers: &[String], origin: &str, vol: &str) -> Node {
    let dir = super::tempdir();
    let mut n = node(dir.path(), servers, origin, vol);
    n._dir = Some(dir);
    n
}

impl Node {
    /// Start a node from a [`config`] (its first volume is the cache).
    pub fn start(cfg: &Config) -> Node {
        Node::start_with_env(cfg, &[])
    }

    /// A node started some other way (e.g. in a namespace of its own), its cache directory
    /// where the test sees it.
    pub fn new(srv: Server, cache: PathBuf) -> Node {
        Node {
            srv,
            cache,
            _dir: None,
        }
    }

    /// As [`Node::start`] with extra environment variables (e.g. `FAILPOINTS`).
    pub fn start_with_env(cfg: &Config, env: &[(&str, &str)]) -> Node {
        Node::new(
            Server::start_with_env(cfg, env),
            cfg.volumes[0].path.clone(),
        )
    }
}

/// One GET on a fresh connection with `extra` header lines (each ending in `\r\n`); Err when
/// the response was cut short (its partial body is in the error text).
pub fn try_get(n: &Node, path: &str, extra: &str) -> std::io::Result<Response> {
    let mut c = n.srv.connect();
    c.send(
        format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n").as_bytes(),
    );
    c.response(false)
}

/// [`try_get`] without extra lines, ended within `within` or None (a response the node never
/// ends, whole or cut); the error of a cut response as text.
pub fn get_within(n: &Node, path: &str, within: Duration) -> Option<Result<u16, String>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let addr = n.srv.addr;
    let path = path.to_string();
    std::thread::spawn(move || {
        let mut c = super::Conn::new(addr);
        c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes());
        let _ = tx.send(
            c.response(false)
                .map(|r| r.status)
                .map_err(|e| e.to_string()),
        );
    });
    rx.recv_timeout(within).ok()
}

/// As [`try_get`], panicking when the response was cut short.
pub fn get(n: &Node, path: &str, extra: &str) -> Response {
    try_get(n, path, extra).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// A request without a body to the admin listener, with `extra` header lines.
pub fn admin(n: &Node, method: &str, path: &str, extra: &str) -> Response {
    let mut c = Conn::new(n.srv.admin());
    c.send(
        format!("{method} {path} HTTP/1.1\r\nHost: a\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    c.response(false).expect("admin response")
}

/// The `X-Cache` header of a response (`-` when absent).
pub fn xcache(r: &Response) -> &str {
    r.header("X-Cache").unwrap_or("-")
}

/// The `/metrics` exposition of the node.
pub fn metrics(n: &Node) -> String {
    n.srv.admin_get("/metrics").text()
}

/// The value of `series` written as the server writes it (`name{a="x",b="y"}`) in `text`.
pub fn series(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// The value of `name` (a series as the server writes it) in a fresh scrape of the node.
pub fn metric(n: &Node, name: &str) -> f64 {
    series(&metrics(n), name)
}

/// A series of the node's cache volume: `name` with the labels `volume="c1"` and `labels`.
pub fn volume_metric(n: &Node, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut all = vec![("volume", "c1")];
    all.extend_from_slice(labels);
    n.srv.metrics().get(name, &all)
}

/// Wait (bounded) until no fill runs: a fill commits its entry after the client has the last
/// byte, so a test that looks at what is stored waits for this first.
pub fn settle(n: &Node) {
    let fills = "contentserver_cache_fills_in_flight{volume=\"c1\"}";
    assert!(
        wait_until(Duration::from_secs(10), || metric(n, fills) == 0.0),
        "a fill is still running after 10 s"
    );
}

/// Wait (bounded) until no fill runs and no temporary file is left either: every fill has
/// committed (renamed) its entry or removed its temporary file.
pub fn wait_committed(n: &Node) {
    let fills = "contentserver_cache_fills_in_flight{volume=\"c1\"}";
    let idle = || cache_files(&n.cache).0 == 0 && metric(n, fills) == 0.0;
    assert!(
        wait_until(Duration::from_secs(5), idle),
        "fills still running after 5 s"
    );
}

/// Files under the cache directory's `.tmp/` and entry files under its levels. The server
/// deletes and renames files while this walks: one gone between readdir and a look at it is
/// not counted.
pub fn cache_files(cache: &Path) -> (usize, usize) {
    let tmp = std::fs::read_dir(cache.join(".tmp")).map_or(0, |d| d.count());
    let entries = walk(cache)
        .iter()
        .filter(|(p, _)| !p.starts_with(cache.join(".tmp")))
        .count();
    (tmp, entries)
}

/// Every file under `dir` with its length but the node's lock file `dir/.lock` (no entry),
/// skipping files removed while walking (eviction and commits race the walk; that is the
/// server working, not an error of the measure).
pub fn walk(dir: &Path) -> Vec<(PathBuf, u64)> {
    let lock = dir.join(".lock");
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(rd) => rd,
            Err(e) if gone(&e) => continue,
            Err(e) => panic!("cannot list {}: {e}", d.display()),
        };
        for e in entries {
            let e = e.unwrap_or_else(|e| panic!("cannot list {}: {e}", d.display()));
            let p = e.path();
            // DirEntry::metadata does not follow links (lstat); NotFound = removed meanwhile.
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(p),
                Ok(_) if p == lock => {}
                Ok(m) => out.push((p, m.len())),
                Err(e) if gone(&e) => {}
                Err(e) => panic!("cannot stat {}: {e}", p.display()),
            }
        }
    }
    out
}
