//! The server's configuration: the one contract shared by `content-server` and `content-operator`.
//!
//! Owns the serde/schemars types of the TOML file, their defaults, and validation
//! ([`Config::validate`]). The operator renders these same types into ConfigMaps, so a field is
//! defined here once and nowhere else. A table whose fields all have defaults states them once,
//! in its `impl Default` (`#[serde(default)]` on the struct reads them from there). This module
//! must not start anything or touch the filesystem beyond reading the file it is asked to load.

mod cache;
mod cors;
mod errors;
mod headers;
pub mod listen;
mod media;
mod origin;
mod route_http;
mod shape;
mod validate;

pub use cache::{
    never_stored, size_arg, ByteSize, CachePolicy, SizeField, ValidRule, VolumeCache,
    DEFAULT_SLICE_SIZE,
};
pub use cors::{default_expose_headers, Cors};
pub use errors::{ConfigError, FieldError};
pub use headers::HeaderRule;
pub use origin::{host_without_port, parse_server_url, Origin, ServerUrl, DEFAULT_ORIGIN};
pub use route_http::{Precompressed, RouteHttp};
pub use validate::check_log_level;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Largest configuration file read (a config of thousands of routes is a few hundred KiB).
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// A complete server configuration (`content-server serve --config FILE`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Sockets that accept HTTP traffic. At least one.
    #[serde(default = "default_listeners")]
    pub listeners: Vec<Listener>,
    /// Event-loop worker threads; 0 means one per CPU core.
    #[serde(default)]
    pub workers: usize,
    /// Connection and request limits.
    #[serde(default)]
    pub limits: Limits,
    /// HTTP behaviour (index files).
    #[serde(default)]
    pub http: Http,
    /// The admin listener (/metrics, /healthz, /readyz, /config).
    #[serde(default)]
    pub admin: Admin,
    /// Logging (format, level, access log).
    #[serde(default)]
    pub logging: Logging,
    /// Cache of open file descriptors with their stat data (nginx `open_file_cache`).
    #[serde(default)]
    pub open_file_cache: OpenFileCache,
    /// Graceful shutdown: how long in-flight responses may take after SIGTERM/SIGINT.
    #[serde(default = "default_shutdown_timeout_secs")]
    pub shutdown_timeout_secs: u64,
    /// Upstream servers that cache routes fetch misses from (`[[origins]]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub origins: Vec<Origin>,
    /// Mounted volumes; each has its own bounded thread pool. At least one.
    pub volumes: Vec<Volume>,
    /// URI prefix -> volume. Empty with exactly one volume means `/` -> that volume.
    #[serde(default)]
    pub routes: Vec<Route>,
}

/// One listening socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Listener {
    /// IP address to bind (IPv4 or IPv6 literal; `0.0.0.0` or `::` for every address of that
    /// family), or `*` for every IPv4 and IPv6 address (one dual-stack socket; IPv4 alone where
    /// the kernel has no IPv6).
    pub address: String,
    /// TCP port.
    pub port: u16,
    /// listen(2) backlog; the kernel caps it at net.core.somaxconn.
    pub backlog: u32,
    /// TCP_DEFER_ACCEPT (nginx `listen ... deferred`): a connection is accepted only once its
    /// first bytes arrived, or after about this many seconds without any (it then gets the
    /// header timeout as usual), so the worker is woken once per connection, with the request
    /// already there. 0 = accept at once. Default 1 (the value nginx sets).
    pub defer_accept_secs: u32,
    /// TCP_NOTSENT_LOWAT of every connection (set on the listener, inherited by each accepted
    /// socket): a body is handed to the kernel only while fewer than this many bytes wait
    /// unsent in the socket, so the server's own thread transmits what it sends (with a long
    /// unsent queue the kernel transmits it later, from the context that processes the client's
    /// acknowledgements: on a host where clients run, their CPU) and a slow reader holds at most
    /// this much unsent in kernel memory. Bytes in flight are not limited. 0 = the kernel's
    /// default (net.ipv4.tcp_notsent_lowat, unlimited unless set). Default 2 MiB. A size
    /// ([`ByteSize`]): an integer or a string such as "2M".
    #[serde(deserialize_with = "cache::size")]
    #[schemars(with = "ByteSize")]
    pub notsent_lowat_bytes: u64,
    /// TCP congestion control of every connection (TCP_CONGESTION, set on the listener and
    /// inherited by each accepted socket), such as `cubic` or `bbr`; absent = the host's
    /// `net.ipv4.tcp_congestion_control`. The server does not start when the kernel lacks it or
    /// (without CAP_NET_ADMIN) does not allow it (`net.ipv4.tcp_allowed_congestion_control`).
    /// Measured on loopback with the caching-node benchmark, `cubic` against the host's `bbr`:
    /// hot req/s 1.87x, p99 53 -> 27 ms (BBR paces every connection; see README).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub congestion_control: Option<String>,
}

/// Connection and request limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Open client connections across all workers. At it, a new connection takes the place of an
    /// idle keep-alive one, which closes (nginx's reuse); with none idle, it is refused (answered
    /// 503 at once and closed) and counted.
    pub max_connections: usize,
    /// Idle time allowed between requests on a keep-alive connection.
    pub keepalive_timeout_secs: u64,
    /// Time allowed to receive a complete request head once its first byte arrived.
    pub header_read_timeout_secs: u64,
    /// Quiet time (ms) after which a connection waiting for a request head (idle keep-alive,
    /// or a head not yet complete) leaves its task and waits in its worker's idle set: a bare
    /// descriptor in one epoll set per worker, a few dozen bytes, woken by the next bytes.
    /// Its timeouts stay the same. 0 = never park.
    pub idle_park_ms: u64,
    /// Largest request head (request line + headers) in bytes; larger gets 414 or 431. A size
    /// ([`ByteSize`]): an integer or a string such as "8K".
    #[serde(deserialize_with = "cache::size")]
    #[schemars(with = "ByteSize")]
    pub max_header_bytes: usize,
    /// Largest single sendfile/read chunk in bytes (nginx `sendfile_max_chunk`, default 2 MiB).
    /// A size ([`ByteSize`]): an integer or a string such as "2M".
    #[serde(deserialize_with = "cache::size")]
    #[schemars(with = "ByteSize")]
    pub sendfile_max_chunk: usize,
    /// Time a response may wait for the client to accept more bytes before the connection is closed.
    pub send_timeout_secs: u64,
}

/// HTTP behaviour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Http {
    /// Files tried, in order, when a request names a directory. Empty: directories are 404.
    pub index: Vec<String>,
    /// Most ranges served in one request (nginx `max_ranges`): more are answered with the whole
    /// file; several (up to this many) get `multipart/byteranges`. 1 = single ranges only,
    /// 0 = ranges disabled.
    pub max_ranges: usize,
    /// Put the inode in the ETag (`"ino-mtime.nsec-size"`), so a file replaced by one of the same
    /// size and mtime (image builds pin mtimes) never validates against the old tag. Turn off
    /// only when replicas serve copies of the same files on different disks and must agree.
    pub etag_inode: bool,
    /// Most entries shown by a directory listing (`routes[].http.listing`); the rest is cut.
    pub listing_max_entries: usize,
    /// Extension (without the dot) -> Content-Type, added to or overriding the built-in table.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub media_types: BTreeMap<String, String>,
    /// Response headers by extension (`m4s`) or media type (`video/mp2t`, `video/*`), for every
    /// route; a route's own `http.media_headers` take precedence.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub media_headers: BTreeMap<String, HeaderRule>,
}

/// The open-file cache (nginx `open_file_cache`): hot files skip path lookup, open and stat.
/// Each volume has its own cache; an entry holds one file descriptor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct OpenFileCache {
    /// Files kept open per volume (least recently used evicted); 0 disables the cache. The
    /// server lowers it at start if all volumes' caches would take more than a quarter of the
    /// process's file-descriptor limit (RLIMIT_NOFILE).
    pub max_entries: usize,
    /// Milliseconds an entry is trusted before its path is looked up again and compared by
    /// device and inode (a file renamed over the cached one is noticed within this time). With
    /// `offload = never`, or `auto` on a volume with RWF_NOWAIT, every use also fstats the cached
    /// descriptor (no I/O), so a file modified in place, deleted or replaced is noticed at once;
    /// otherwise (no file system call on the event loop) an entry is trusted unchecked for this
    /// long (nginx semantics).
    pub valid_ms: u64,
}

/// The admin HTTP listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Admin {
    /// `ADDR:PORT` (`[V6]:PORT`, `*:PORT` for every IPv4 and IPv6 address) of the admin
    /// listener; an empty string disables it.
    pub listen: String,
    /// Absolute path of a file holding the bearer token of `POST /cache/purge` (one line),
    /// read again by every purge; empty = purge disabled. Needs the admin listener and a cache
    /// volume.
    pub purge_token_file: String,
}

/// Log output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Logging {
    /// `text` or `json`.
    pub format: LogFormat,
    /// A level (`trace`, `debug`, `info`, `warn`, `error` or `off`), optionally followed by
    /// comma-separated `TARGET=LEVEL` directives such as `info,content_server::cache=debug`;
    /// RUST_LOG overrides it.
    pub level: String,
    /// One line per response (off by default, as it costs a write per request).
    pub access_log: bool,
}

/// Log line format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// A mounted directory and its thread pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Volume {
    /// Unique name; also the name of the volume's thread pool (metrics label `volume`).
    pub name: String,
    /// Absolute path of the directory served.
    pub path: PathBuf,
    /// Where blocking file work runs.
    #[serde(default)]
    pub offload: Offload,
    /// The volume's thread pool.
    #[serde(default)]
    pub pool: Pool,
    /// Present = a cache volume: it stores what its routes' origin answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<VolumeCache>,
}

/// Where a volume's blocking file operations (open, stat, read, sendfile) run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Offload {
    /// Every blocking file operation goes to the volume's pool (nginx `aio threads`).
    Always,
    /// Everything inline on the event loop (nginx without thread pools; a baseline).
    Never,
    /// Page-cache hits inline, misses to the pool (preadv2 RWF_NOWAIT, openat2 RESOLVE_CACHED).
    /// The default: it won every benchmark against `always` (README, Benchmarks).
    #[default]
    Auto,
}

impl Offload {
    pub fn as_str(self) -> &'static str {
        match self {
            Offload::Always => "always",
            Offload::Never => "never",
            Offload::Auto => "auto",
        }
    }
}

impl std::str::FromStr for Offload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "always" => Ok(Offload::Always),
            "never" => Ok(Offload::Never),
            "auto" => Ok(Offload::Auto),
            other => Err(format!(
                "unknown offload mode {other:?}: expected always, never or auto"
            )),
        }
    }
}

/// A bounded thread pool (nginx `thread_pool NAME threads=N max_queue=M`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Pool {
    /// Worker threads, at least 1.
    pub threads: usize,
    /// Tasks allowed to wait beyond the busy threads; 0 = none may wait (as nginx). Excess gets 503.
    pub max_queue: usize,
}

/// Which volume serves a URI prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// URI path prefix, starting with `/`. The longest matching prefix wins.
    pub prefix: String,
    /// Serve the prefix from this one volume. Exactly one of `volume` and `split`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    /// Spread the prefix over several volumes by a stable hash of the URI path (nginx `split_clients`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub split: Vec<SplitTarget>,
    /// Remove the prefix before looking the path up in the volume (nginx `alias`);
    /// false keeps the whole URI path under the volume root (nginx `root`).
    #[serde(default)]
    pub strip_prefix: bool,
    /// Response headers, CORS, precompressed siblings and listings of this route.
    #[serde(default, skip_serializing_if = "RouteHttp::is_default")]
    pub http: RouteHttp,
    /// Present = a cache route: misses are fetched from this origin (`[[origins]]` name) and
    /// stored on the route's volumes, which must all be cache volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Freshness policy of a cache route; absent = the defaults (filled in by `normalize`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CachePolicy>,
}

impl Route {
    /// A route of `prefix` to one volume, no prefix stripping, no origin.
    pub fn to_volume(prefix: impl Into<String>, volume: impl Into<String>) -> Route {
        Route {
            prefix: prefix.into(),
            volume: Some(volume.into()),
            split: Vec::new(),
            strip_prefix: false,
            http: RouteHttp::default(),
            origin: None,
            cache: None,
        }
    }
}

/// One share of a split route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SplitTarget {
    /// Volume name.
    pub volume: String,
    /// Share in percent (0 < percent <= 100). Omitted on at most one (the last) target: "the rest".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
}

fn default_listeners() -> Vec<Listener> {
    vec![Listener::default()]
}
fn default_shutdown_timeout_secs() -> u64 {
    30
}
/// nginx's default pool size.
pub const DEFAULT_THREADS: usize = 32;
/// nginx's default queue bound.
pub const DEFAULT_MAX_QUEUE: usize = 65536;

/// Default `listeners[*].notsent_lowat_bytes`: 2 MiB. Measured with seedbench (hot 4 MiB file, 16
/// connections, client on the same 2 cores): hot req/s 1.39x and 1.42x against no limit in one
/// alternating invocation, the client spending 30% less CPU per response; 512 KiB gave hot
/// p99 of 4.2 s and 0.68 s in its two runs, 128 KiB halved throughput (a wake-up per little).
pub const DEFAULT_NOTSENT_LOWAT: u64 = 2 * 1024 * 1024;

impl Default for Listener {
    fn default() -> Self {
        Listener {
            address: "0.0.0.0".into(),
            port: 8080,
            backlog: 4096,
            defer_accept_secs: 1,
            notsent_lowat_bytes: DEFAULT_NOTSENT_LOWAT,
            congestion_control: None,
        }
    }
}
impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 20_000,
            keepalive_timeout_secs: 75,
            header_read_timeout_secs: 10,
            idle_park_ms: 1000,
            max_header_bytes: 8192,
            sendfile_max_chunk: 2 * 1024 * 1024,
            send_timeout_secs: 60,
        }
    }
}
impl Default for Http {
    fn default() -> Self {
        Http {
            index: vec!["index.html".into()],
            max_ranges: 16,
            etag_inode: true,
            listing_max_entries: 1000,
            media_types: BTreeMap::new(),
            media_headers: BTreeMap::new(),
        }
    }
}
impl Default for OpenFileCache {
    fn default() -> Self {
        OpenFileCache {
            max_entries: 2048,
            valid_ms: 1000,
        }
    }
}
impl Default for Admin {
    fn default() -> Self {
        Admin {
            listen: "127.0.0.1:9190".into(),
            purge_token_file: String::new(),
        }
    }
}
impl Default for Logging {
    fn default() -> Self {
        Logging {
            format: LogFormat::Text,
            level: "info".into(),
            access_log: false,
        }
    }
}
impl Default for Pool {
    fn default() -> Self {
        Pool {
            threads: DEFAULT_THREADS,
            max_queue: DEFAULT_MAX_QUEUE,
        }
    }
}

/// Name of the volume `serve --root DIR` creates.
pub const DEFAULT_VOLUME: &str = "root";

impl Config {
    /// The embedded first-run configuration: DIR on 0.0.0.0:8080, one volume `root`, one pool
    /// of 32 threads and max_queue 65536, offload `auto`.
    pub fn for_root(root: impl Into<PathBuf>) -> Config {
        Config {
            listeners: default_listeners(),
            workers: 0,
            limits: Limits::default(),
            http: Http::default(),
            admin: Admin::default(),
            logging: Logging::default(),
            open_file_cache: OpenFileCache::default(),
            shutdown_timeout_secs: default_shutdown_timeout_secs(),
            origins: Vec::new(),
            volumes: vec![Volume {
                name: DEFAULT_VOLUME.into(),
                path: root.into(),
                offload: Offload::default(),
                pool: Pool::default(),
                cache: None,
            }],
            routes: Vec::new(),
        }
    }

    /// The embedded caching node (`serve --origin URL --cache-dir DIR...`): one origin named
    /// `origin`, cache volumes `cache1`..`cacheN` (one per directory, default pool and cache
    /// settings) and one route `/` split evenly over them with `origin = "origin"`.
    pub fn for_cache(origin_url: impl Into<String>, cache_dirs: &[PathBuf]) -> Config {
        let mut cfg = Config::for_root("/");
        cfg.origins = vec![Origin::new(DEFAULT_ORIGIN, vec![origin_url.into()])];
        cfg.volumes = cache_dirs
            .iter()
            .enumerate()
            .map(|(i, dir)| Volume {
                name: format!("cache{}", i + 1),
                path: dir.clone(),
                offload: Offload::default(),
                pool: Pool::default(),
                cache: Some(VolumeCache::default()),
            })
            .collect();
        let n = cfg.volumes.len();
        cfg.routes = vec![Route {
            prefix: "/".into(),
            volume: None,
            split: cfg
                .volumes
                .iter()
                .enumerate()
                .map(|(i, v)| SplitTarget {
                    volume: v.name.clone(),
                    // Equal shares; the last takes the rest so rounding never leaves a gap.
                    percent: (i + 1 < n).then(|| 100.0 / n as f64),
                })
                .collect(),
            strip_prefix: false,
            http: RouteHttp::default(),
            origin: Some(DEFAULT_ORIGIN.into()),
            cache: None,
        }];
        cfg
    }

    /// Parse TOML text. Syntax and type errors name the line and the field; call
    /// [`Config::validate`] for the semantic checks.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        shape::check(text).map_err(ConfigError::Parse)?;
        // The field's path is named too (the TOML error alone shows the line).
        let de = toml::Deserializer::parse(text)
            .map_err(|e| ConfigError::Parse(errors::shorten_lines(&e.to_string())))?;
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = errors::shorten_lines(&errors::plain_types(&e.into_inner().to_string()));
            if path.is_empty() || path == "." {
                ConfigError::Parse(inner)
            } else {
                ConfigError::Parse(format!("field {path}: {inner}"))
            }
        })
    }

    /// A configuration file's text (the errors name the file; a byte that is not UTF-8 by its
    /// line and column).
    /// A regular file or a pipe (`--config <(...)`), of at most [`MAX_CONFIG_BYTES`]: a device
    /// (`/dev/zero`) or a socket is refused, not read for ever.
    pub fn read_text(path: &Path) -> Result<String, ConfigError> {
        use std::io::Read;
        use std::os::unix::fs::FileTypeExt;
        let failed = |io| ConfigError::Read {
            path: path.to_owned(),
            io,
        };
        let refused =
            |why: String| failed(std::io::Error::new(std::io::ErrorKind::InvalidInput, why));
        let f = std::fs::File::open(path).map_err(failed)?;
        let kind = f.metadata().map_err(failed)?.file_type();
        if kind.is_char_device() || kind.is_block_device() || kind.is_socket() {
            return Err(refused(
                "it is a device or a socket: a configuration is a file (or a pipe)".into(),
            ));
        }
        if kind.is_dir() {
            return Err(refused("it is a directory".into()));
        }
        let mut bytes = Vec::new();
        f.take(MAX_CONFIG_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(failed)?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(refused(format!(
                "it is larger than {} MiB: no configuration is",
                MAX_CONFIG_BYTES >> 20
            )));
        }
        String::from_utf8(bytes).map_err(|e| ConfigError::NotUtf8 {
            path: path.to_owned(),
            at: errors::utf8_position(e.as_bytes(), &e.utf8_error()),
        })
    }

    /// Read, parse and validate a file; the result is normalized (see [`Config::normalize`]).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = Config::read_text(path)?;
        let mut cfg = Config::from_toml(&text)?;
        cfg.normalize();
        cfg.validate()?;
        Ok(cfg)
    }

    /// Volumes and origins that no route names: accepted (valid, and harmless), but most often a
    /// typo (a volume left out of a `split`), so `serve` and `check-config` warn of each. Call
    /// after [`Config::normalize`] (a single volume's implicit route names it).
    pub fn unused(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, v) in self.volumes.iter().enumerate() {
            let named = |r: &Route| {
                r.volume.as_deref() == Some(v.name.as_str())
                    || r.split.iter().any(|t| t.volume == v.name)
            };
            if !self.routes.iter().any(named) {
                out.push(format!(
                    "volumes[{i}] {:?} is named by no route: it serves nothing",
                    v.name
                ));
            }
        }
        for (i, o) in self.origins.iter().enumerate() {
            if !self
                .routes
                .iter()
                .any(|r| r.origin.as_deref() == Some(o.name.as_str()))
            {
                out.push(format!(
                    "origins[{i}] {:?} is named by no route: it is never asked",
                    o.name
                ));
            }
        }
        out
    }

    /// Fill what defaults depend on other fields: the implicit `/` route of a single volume
    /// (a cache route when that volume is a cache volume and exactly one origin exists), and
    /// the default cache policy of every cache route.
    ///
    /// A single cache volume with no routes and not exactly one origin gets no implicit route:
    /// it would have no origin, and validation says so of the missing route (not of a route
    /// that is not in the file).
    pub fn normalize(&mut self) {
        if let ([v], true) = (self.volumes.as_slice(), self.routes.is_empty()) {
            let mut r = Route::to_volume("/", v.name.clone());
            match (&v.cache, self.origins.as_slice()) {
                (None, _) => self.routes.push(r),
                (Some(_), [o]) => {
                    r.origin = Some(o.name.clone());
                    self.routes.push(r);
                }
                (Some(_), _) => {}
            }
        }
        for r in &mut self.routes {
            if r.origin.is_some() && r.cache.is_none() {
                r.cache = Some(CachePolicy::default());
            }
        }
    }

    /// The origin named `name`.
    pub fn origin(&self, name: &str) -> Option<&Origin> {
        self.origins.iter().find(|o| o.name == name)
    }

    /// Render as TOML (what `check-config` prints and what the operator puts in ConfigMaps).
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        toml::to_string_pretty(self).map_err(|e| ConfigError::Render(e.to_string()))
    }

    /// The number of event-loop workers to run (`workers`, or the CPU count when 0).
    pub fn effective_workers(&self) -> usize {
        if self.workers > 0 {
            self.workers
        } else {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        }
    }

    /// The JSON schema of the file format.
    pub fn json_schema() -> serde_json::Value {
        serde_json::to_value(schemars::schema_for!(Config)).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
