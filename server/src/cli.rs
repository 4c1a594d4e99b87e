//! The `content-server` command line: `serve --root DIR`, `serve --origin URL --cache-dir DIR...`,
//! `serve --config FILE` (with overrides) and `check-config FILE`. Turns arguments into a validated [`Config`] and hands it to
//! [`crate::runtime::run`]; it must not contain server logic.

use crate::config::listen::{plain_port, ListenIp};
use crate::config::{Config, Listener, Offload};
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "content-server",
    version,
    about = "Static content server: event loop plus one bounded thread pool per volume"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once at start: the size difference of the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve a directory (--root), a caching node (--origin + --cache-dir) or a full
    /// configuration (--config).
    Serve(ServeArgs),
    /// Validate a configuration file and print it normalized (exit 1 and the errors if invalid).
    CheckConfig {
        /// The TOML configuration file.
        file: PathBuf,
    },
}

#[derive(Debug, Args)]
#[command(group(
    // What to serve: a directory, a caching node or a configuration file (one is needed; the
    // conflicts between them are on the arguments).
    clap::ArgGroup::new("what").required(true).multiple(true).args(["root", "origin", "cache_dir", "config"])
))]
pub struct ServeArgs {
    /// Serve this directory with the embedded defaults (one volume `root`, port 8080).
    #[arg(long, value_name = "DIR", conflicts_with = "config")]
    pub root: Option<PathBuf>,
    /// Run a caching node in front of this origin (`http://HOST[:PORT]` or `https://…`):
    /// one origin `origin`, needs at least one --cache-dir.
    #[arg(long, value_name = "URL", conflicts_with = "config")]
    pub origin: Option<String>,
    /// A cache directory (one cache volume and pool each, `cache1`..`cacheN`); repeat it for
    /// several disks. Requests are split evenly over them.
    #[arg(long = "cache-dir", value_name = "DIR", conflicts_with = "config")]
    pub cache_dir: Vec<PathBuf>,
    /// Run this TOML configuration file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Listen on this port (0 = kernel-chosen): replaces the listeners with one socket on
    /// --listen's address, or else on the first configured listener's (0.0.0.0 by default).
    #[arg(long, value_parser = parse_port)]
    pub port: Option<u16>,
    /// Listen on ADDR, ADDR:PORT or [V6]:PORT (ADDR `*`: every IPv4 and IPv6 address):
    /// replaces the listeners with one socket; with a bare ADDR its port is --port's, or else the first configured listener's (8080 by default).
    #[arg(long, value_name = "ADDR[:PORT]", value_parser = check_listen)]
    pub listen: Option<String>,
    /// Pool threads of every volume.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Pool max_queue of every volume (0 = no task waits beyond the threads).
    #[arg(long)]
    pub max_queue: Option<usize>,
    /// Offload mode of every volume: always, never or auto.
    #[arg(long)]
    pub offload: Option<Offload>,
    /// Event-loop workers (0 = one per CPU core).
    #[arg(long)]
    pub workers: Option<usize>,
    /// listen(2) backlog of every listener.
    #[arg(long)]
    pub backlog: Option<u32>,
    /// TCP_DEFER_ACCEPT seconds of every listener (0 = accept at once; default 1).
    #[arg(long, value_name = "SECS")]
    pub defer_accept_secs: Option<u32>,
    /// TCP_NOTSENT_LOWAT bytes of every listener (0 = the kernel's default; default 2 MiB;
    /// sizes as in the config: 2M).
    #[arg(long, value_name = "BYTES", value_parser = crate::config::size_arg::<u64>)]
    pub notsent_lowat_bytes: Option<u64>,
    /// TCP congestion control of every listener's connections, such as cubic or bbr (default:
    /// the host's net.ipv4.tcp_congestion_control).
    #[arg(long, value_name = "NAME")]
    pub congestion_control: Option<String>,
    /// limits.max_connections: open client connections over all workers.
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// limits.sendfile_max_chunk in bytes: the largest single sendfile call (one pool task;
    /// sizes as in the config: 2M).
    #[arg(long, value_name = "BYTES", value_parser = crate::config::size_arg::<usize>)]
    pub sendfile_max_chunk: Option<usize>,
    /// limits.idle_park_ms: quiet time before a connection waiting for a request head leaves
    /// its task for its worker's idle set (0 = never park).
    #[arg(long, value_name = "MS")]
    pub idle_park_ms: Option<u64>,
    /// Admin listener ADDR:PORT; an empty string disables it.
    #[arg(long, value_name = "ADDR:PORT")]
    pub admin_listen: Option<String>,
    /// Log one line per response on stderr (logging.access_log): peer, method, path, status,
    /// bytes, duration_ms and query.
    #[arg(long)]
    pub access_log: bool,
}

/// Parse a `--listen` value: `ADDR:PORT` (IPv4), `[V6]:PORT`, `*:PORT`, or a bare address
/// (IPv4, IPv6 with or without brackets, `*` for both families). PORT is 0-65535 in plain
/// digits.
fn parse_listen(s: &str) -> anyhow::Result<(ListenIp, Option<u16>)> {
    let bad = || {
        anyhow::anyhow!(
            "--listen {s:?} is not ADDR, ADDR:PORT or [V6]:PORT (an IP address or * for every IPv4 and IPv6 address, IPv6 in brackets when a port follows, the port 0-65535 in plain digits)"
        )
    };
    if let Some(rest) = s.strip_prefix('[') {
        let (inner, after) = rest.split_once(']').ok_or_else(bad)?;
        let ip: Ipv6Addr = inner.parse().map_err(|_| bad())?;
        let port = match after {
            "" => None,
            p => Some(plain_port(p.strip_prefix(':').ok_or_else(bad)?).ok_or_else(bad)?),
        };
        return Ok((ListenIp::Ip(IpAddr::V6(ip)), port));
    }
    if let Ok(ip) = s.parse::<ListenIp>() {
        return Ok((ip, None));
    }
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let ip = match host {
        "*" => ListenIp::Any,
        h => ListenIp::Ip(IpAddr::V4(h.parse::<Ipv4Addr>().map_err(|_| bad())?)),
    };
    Ok((ip, Some(plain_port(port).ok_or_else(bad)?)))
}

/// `--listen` checked when the command line is read (a syntax error: exit 2 like any other
/// malformed flag value).
fn check_listen(s: &str) -> Result<String, String> {
    parse_listen(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// `--port`: [`plain_port`], with the reason when it is not one.
fn parse_port(p: &str) -> Result<u16, String> {
    plain_port(p).ok_or_else(|| {
        format!("{p:?} is not a port: 0-65535 in plain digits (no sign, no leading zero)")
    })
}

impl ServeArgs {
    /// The configuration to run: file or embedded defaults, then the overrides, normalized and
    /// validated.
    pub fn config(&self) -> anyhow::Result<Config> {
        let mut cfg = match (&self.root, &self.config) {
            _ if self.origin.is_some() || !self.cache_dir.is_empty() => self.cache_config()?,
            (Some(root), _) => {
                let root = std::path::absolute(root)
                    .with_context(|| format!("--root {}", root.display()))?;
                Config::for_root(root)
            }
            (None, Some(file)) => {
                let text = Config::read_text(file)?;
                Config::from_toml(&text).with_context(|| format!("in {}", file.display()))?
            }
            (None, None) => {
                anyhow::bail!(
                    "serve needs --root DIR, --origin URL --cache-dir DIR, or --config FILE"
                )
            }
        };
        let as_read = cfg.clone();
        if self.listen.is_some() || self.port.is_some() {
            // One socket: what --listen and --port name, the rest (the address or port not
            // named, and every other setting) from the first configured listener.
            let base = cfg.listeners.first().cloned().unwrap_or_default();
            let (address, listen_port) = match &self.listen {
                Some(l) => {
                    let (ip, port) = parse_listen(l)?;
                    if let (Some(_), Some(p)) = (port, self.port) {
                        anyhow::bail!(
                            "--listen {l:?} already names a port: give --port {p} with a bare --listen ADDR, or leave it out"
                        );
                    }
                    (ip.to_string(), port)
                }
                None => (base.address.clone(), None),
            };
            let port = listen_port.or(self.port).unwrap_or(base.port);
            cfg.listeners = vec![Listener {
                address,
                port,
                ..base
            }];
        }
        for v in &mut cfg.volumes {
            if let Some(t) = self.threads {
                v.pool.threads = t;
            }
            if let Some(q) = self.max_queue {
                v.pool.max_queue = q;
            }
            if let Some(o) = self.offload {
                v.offload = o;
            }
        }
        if let Some(w) = self.workers {
            cfg.workers = w;
        }
        if let Some(b) = self.backlog {
            for l in &mut cfg.listeners {
                l.backlog = b;
            }
        }
        if let Some(d) = self.defer_accept_secs {
            for l in &mut cfg.listeners {
                l.defer_accept_secs = d;
            }
        }
        if let Some(n) = self.notsent_lowat_bytes {
            for l in &mut cfg.listeners {
                l.notsent_lowat_bytes = n;
            }
        }
        if let Some(cc) = &self.congestion_control {
            for l in &mut cfg.listeners {
                l.congestion_control = Some(cc.clone());
            }
        }
        if let Some(m) = self.max_connections {
            cfg.limits.max_connections = m;
        }
        if let Some(c) = self.sendfile_max_chunk {
            cfg.limits.sendfile_max_chunk = c;
        }
        if let Some(ms) = self.idle_park_ms {
            cfg.limits.idle_park_ms = ms;
        }
        if let Some(a) = &self.admin_listen {
            cfg.admin.listen = a.clone();
        }
        if self.access_log {
            cfg.logging.access_log = true;
        }
        // (Compared as data: a NaN read from the file is never equal to itself.)
        let overridden = serde_json::to_value(&cfg).ok() != serde_json::to_value(&as_read).ok();
        cfg.normalize();
        match (&self.config, &self.root, &self.origin) {
            (Some(file), None, None) if overridden => cfg
                .validate()
                .with_context(|| format!("in {} with this command line", file.display()))?,
            (Some(file), None, None) => cfg
                .validate()
                .with_context(|| format!("in {}", file.display()))?,
            _ => cfg.validate()?,
        }
        Ok(cfg)
    }
}

impl ServeArgs {
    /// The embedded caching node of `--origin URL --cache-dir DIR...`.
    fn cache_config(&self) -> anyhow::Result<Config> {
        if self.root.is_some() {
            anyhow::bail!("--root serves a directory as is; it cannot be combined with --origin or --cache-dir (a caching node is --origin URL --cache-dir DIR)");
        }
        let Some(url) = &self.origin else {
            anyhow::bail!(
                "--cache-dir needs --origin URL: the server the cache fetches misses from"
            );
        };
        if self.cache_dir.is_empty() {
            anyhow::bail!("--origin needs at least one --cache-dir DIR to store what it fetches");
        }
        let dirs = self
            .cache_dir
            .iter()
            .map(|d| std::path::absolute(d).with_context(|| format!("--cache-dir {}", d.display())))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Config::for_cache(url.clone(), &dirs))
    }
}

/// `check-config FILE`: print the normalized TOML, or the errors; the exit code says which.
fn check_config(file: &std::path::Path) -> ExitCode {
    use std::io::Write;
    let fail = |what: &dyn std::fmt::Display| {
        // Written, not printed: a closed stderr ends the run with the same exit code.
        let _ = writeln!(std::io::stderr(), "{}: {what}", file.display());
        ExitCode::FAILURE
    };
    let fail_named = |e: &crate::config::ConfigError| match e {
        // These name the file themselves.
        crate::config::ConfigError::Read { .. } | crate::config::ConfigError::NotUtf8 { .. } => {
            let _ = writeln!(std::io::stderr(), "{e}");
            ExitCode::FAILURE
        }
        _ => fail(e),
    };
    match Config::load(file).and_then(|c| Ok((c.to_toml()?, c.unused()))) {
        Ok((text, unused)) => {
            for w in unused {
                let _ = writeln!(std::io::stderr(), "{}: warning: {w}", file.display());
            }
            // A reader that stopped early (`| head`) or a full disk is an exit code, not a panic.
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&format_args!("cannot write the normalized config: {e}")),
            }
        }
        Err(e) => fail_named(&e),
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { file } => check_config(&file),
        Command::Serve(args) => {
            use std::io::Write;
            let cfg = match args.config() {
                Ok(c) => c,
                Err(e) => {
                    // (Not eprintln!, which panics when stderr is a closed pipe.)
                    let _ = writeln!(std::io::stderr(), "content-server: {e:#}");
                    return ExitCode::FAILURE;
                }
            };
            // Held to the end of `main`: dropping it writes out the lines still waiting.
            let log = crate::logging::init(&cfg.logging);
            for w in cfg.unused() {
                tracing::warn!("{w}");
            }
            match crate::runtime::run(cfg) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    // Said once: as a log line (text or JSON, as the collector expects) unless
                    // the log is off or filters errors out.
                    if log.is_some() && tracing::enabled!(tracing::Level::ERROR) {
                        tracing::error!("fatal: {e:#}");
                    } else {
                        let _ = writeln!(std::io::stderr(), "content-server: {e:#}");
                    }
                    ExitCode::FAILURE
                }
            }
        }
    }
}
