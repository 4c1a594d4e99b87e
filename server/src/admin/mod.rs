//! The admin HTTP listener: `/metrics`, `/healthz`, `/readyz` and `/config` on its own port.
//!
//! Owns the axum router and the thread it runs on. The listener runs on a dedicated thread with
//! its own single-threaded tokio runtime, so a stalled event-loop worker can never starve it: it
//! is exactly the thing that must still answer when the data plane is in trouble. It only reads
//! shared state (metrics, lag probe clocks, lifecycle flags, the configuration); it must not serve
//! content, and it changes nothing in the data plane except through the token-protected purge.
//! Its connections (bounds, timeouts, the spare descriptor) are `listener.rs`'s.
//!
//! - `/metrics`: Prometheus text exposition of [`Metrics::render`].
//! - `/healthz`: 200 while every worker's lag probe ticked recently (process alive and every
//!   event loop responsive), else 503 naming the stuck workers.
//! - `/readyz`: 200 when the listeners are bound, the server is not draining and every volume
//!   root is an accessible directory, the one opened at start; else 503 with the reasons (one
//!   per line).
//! - `/config`: the effective configuration as JSON (it holds no secrets).
//! - `POST /cache/purge?key=PATH` or `?prefix=PATH`: delete cached objects (only when
//!   `admin.purge_token_file` is set; `Authorization: Bearer TOKEN` required, else 401; 500
//!   when the token file cannot be read now; 400 unless the query names exactly one target).

mod activity;
pub mod lag;
mod listener;

use crate::config::Config;
use crate::metrics::Metrics;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use lag::LagProbe;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The content type of the Prometheus text format.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How long `/readyz` waits for a volume root check (a hung mount must not hang the probe).
const VOLUME_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// What `/readyz` needs to know about the data plane's lifecycle.
pub trait ServingState: Send + Sync + 'static {
    /// Every configured listener is bound and accepting.
    fn listeners_bound(&self) -> bool;
    /// Shutdown has begun (SIGTERM/SIGINT): no new work should be routed here.
    fn draining(&self) -> bool;
}

impl ServingState for crate::lifecycle::Lifecycle {
    fn listeners_bound(&self) -> bool {
        // `is_ready` turns false when draining starts; the sockets are still bound then.
        crate::lifecycle::Lifecycle::listeners_bound(self) > 0
            && (self.is_ready() || self.is_draining())
    }
    fn draining(&self) -> bool {
        self.is_draining()
    }
}

/// Errors starting the admin listener.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("admin.listen {0:?} is not an ADDR:PORT, [V6]:PORT or *:PORT socket address")]
    Address(String),
    #[error("cannot bind the admin listener on {addr} (admin.listen)")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the admin thread: {0}")]
    Thread(std::io::Error),
}

/// Everything the admin endpoints read.
#[derive(Clone)]
pub struct AdminState {
    /// The effective configuration (served by `/config`; volume roots checked by `/readyz`).
    pub config: Arc<Config>,
    pub metrics: Metrics,
    pub lag: LagProbe,
    pub serving: Arc<dyn ServingState>,
    /// The cache purge endpoint (None: disabled).
    pub purge: Option<Arc<crate::cache::purge::Purge>>,
    /// Per volume of `config.volumes`, the (device, inode) of the directory the server uses
    /// now (None: not known, not compared).
    pub roots: Vec<HeldRoot>,
}

/// The (device, inode) of the directory a volume uses now: the one opened at start, or for a
/// cache volume the one it made again after it was removed.
pub type HeldRoot = Arc<dyn Fn() -> Option<(u64, u64)> + Send + Sync>;

/// A running admin listener. Dropping it leaves the listener running until the process exits.
pub struct AdminServer {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AdminServer {
    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop serving and wait for the admin thread to finish.
    pub fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The admin listener's socket, bound (not served yet).
pub struct AdminSocket {
    listener: std::net::TcpListener,
    bound: SocketAddr,
}

/// Bind `admin.listen` (`Ok(None)` when the admin listener is disabled: empty `listen`): done
/// at start-up before anything else is made, so a port in use refuses the start before a
/// cache directory is touched. Not listening yet: until [`AdminSocket::listen`], a connection is
/// refused.
pub fn bind(config: &Config) -> Result<Option<AdminSocket>, AdminError> {
    let listen = config.admin.listen.trim();
    if listen.is_empty() {
        return Ok(None);
    }
    let (ip, port) = crate::config::listen::parse_socket(listen)
        .ok_or_else(|| AdminError::Address(listen.to_string()))?;
    let target = crate::bind::Target::of(ip, port);
    let addr = target.addr;
    let listener = target
        .bind_std()
        .map_err(|source| AdminError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| AdminError::Bind { addr, source })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| AdminError::Bind { addr, source })?;
    Ok(Some(AdminSocket { listener, bound }))
}

impl AdminSocket {
    /// Start listening (before the data ports do, so a failure here still refuses the start
    /// before any request is answered).
    pub fn listen(&self) -> Result<(), AdminError> {
        rustix::net::listen(&self.listener, 1024).map_err(|e| AdminError::Bind {
            addr: self.bound,
            source: e.into(),
        })
    }
}

/// Serve the admin `socket` ([`AdminSocket::listen`] called) on a dedicated thread.
pub fn serve(state: AdminState, socket: AdminSocket) -> Result<AdminServer, AdminError> {
    let AdminSocket { listener, bound } = socket;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("admin-blocking")
        .build()
        .map_err(AdminError::Thread)?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let app = router(state);
    let thread = std::thread::Builder::new()
        .name("admin".into())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!("admin listener on {bound} failed: {e}");
                        return;
                    }
                };
                listener::serve(listener, app, bound, async move {
                    let _ = rx.await;
                })
                .await;
            });
        })
        .map_err(AdminError::Thread)?;
    tracing::info!("admin listening on http://{bound} (/metrics /healthz /readyz /config)");
    Ok(AdminServer {
        addr: bound,
        shutdown: Some(tx),
        thread: Some(thread),
    })
}

/// The admin routes (public for tests that drive it without a socket).
pub fn router(state: AdminState) -> Router {
    // Off, the endpoint is not there for any method (a 405 naming POST would say it is).
    let purge_route = match state.purge {
        Some(_) => axum::routing::post(purge),
        None => axum::routing::any(purge_disabled),
    };
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/config", get(config))
        .route("/cache/purge", purge_route)
        .with_state(state)
        .layer(axum::middleware::from_fn(one_host))
}

/// RFC 9112 §3.2, as on the data port (`http::host`): a request with more than one Host
/// field, an HTTP/1.1 one without any, one whose Host (or absolute-form target's authority) is
/// no valid authority is answered 400 and its connection closed; hyper leaves that to the
/// application.
async fn one_host(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let hosts: Vec<_> = req.headers().get_all(header::HOST).iter().collect();
    // An absolute-form target's authority is checked like a Host (`parse.rs` on the data port);
    // an authority-form one (CONNECT) or another scheme names no path here.
    let target_ok = match (req.uri().scheme_str(), req.uri().authority()) {
        (None, None) => true,
        (Some("http" | "https"), Some(a)) => crate::http::host::valid(a.as_str()),
        _ => false,
    };
    let why = match hosts.as_slice() {
        _ if !target_ok => Some("invalid request target\n"),
        [] if req.version() == axum::http::Version::HTTP_11 => Some("missing Host header\n"),
        [] => None,
        [one] => match one.to_str() {
            Ok(v) if crate::http::host::valid(v.trim()) => None,
            _ => Some("invalid Host header\n"),
        },
        _ => Some("more than one Host header\n"),
    };
    if let Some(why) = why {
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONNECTION, "close")],
            why,
        )
            .into_response();
    }
    next.run(req).await
}

async fn metrics(State(s): State<AdminState>) -> Response {
    s.metrics
        .sync_log_lines_dropped(crate::logging::dropped_lines());
    (
        [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
        s.metrics.render(),
    )
        .into_response()
}

/// `/cache/purge` with purging off (no `admin.purge_token_file`), whatever the method.
async fn purge_disabled() -> Response {
    (
        StatusCode::NOT_FOUND,
        "purge is disabled (admin.purge_token_file)\n",
    )
        .into_response()
}

/// `POST /cache/purge?key=/path` (one object) or `?prefix=/dir/` (every key under it).
async fn purge(
    State(s): State<AdminState>,
    headers: axum::http::HeaderMap,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    use crate::cache::purge::Refused;
    let Some(p) = &s.purge else {
        return purge_disabled().await;
    };
    // Two credentials: which one is meant would be a guess (the data port answers 400 too).
    if headers.get_all(header::AUTHORIZATION).iter().count() > 1 {
        return (
            StatusCode::BAD_REQUEST,
            "more than one Authorization field\n",
        )
            .into_response();
    }
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match p.check(auth).await {
        Ok(()) => {}
        Err(Refused::Unauthorized) => {
            // Logged (a guess at the token, or a caller with an old one), at most once a second
            // with the count of those not logged since.
            static REFUSED_LOG: std::sync::OnceLock<crate::logging::Throttle> =
                std::sync::OnceLock::new();
            let log = REFUSED_LOG
                .get_or_init(|| crate::logging::Throttle::new(std::time::Duration::from_secs(1)));
            if let Some(left_out) = log.allow() {
                let with = if auth.is_some() { "a wrong" } else { "no" };
                tracing::warn!(left_out, "cache purge refused (401): {with} bearer token (at most one such line a second; left_out: those not logged since)");
            }
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "missing or wrong bearer token\n",
            )
                .into_response()
        }
        // The token cannot be checked: refused, and said so (an operator must fix the file).
        // Why is in the server's log ([`Purge::check`]), not in the answer: the caller has not
        // been authenticated, and the file's path and error are none of its business.
        Err(Refused::TokenFile) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "purge refused: admin.purge_token_file cannot be read or holds no single token (the server's log says why)\n",
            )
                .into_response()
        }
    }
    let target = match purge_target(query.as_deref().unwrap_or("")) {
        Ok(t) => t,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    // Incomplete (a volume's pool full, its files not removable): 500 with what failed, so
    // the caller knows the old content may still be served and can retry. A task of its own:
    // a client that leaves (a timeout) does not stop it half done, unlogged.
    let purge = p.clone();
    let (n, failed) = match tokio::spawn(async move { purge.purge(&target).await }).await {
        Ok(done) => done,
        Err(e) => (0, vec![format!("the purge did not finish: {e}")]),
    };
    if failed.is_empty() {
        Json(serde_json::json!({ "purged_files": n })).into_response()
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(serde_json::json!({ "purged_files": n, "errors": failed })),
        )
            .into_response()
    }
}

/// The purge target of a query: exactly one `key=/PATH` or `prefix=/PATH` (percent-encoded).
/// Both, one given twice, neither, a value not starting with `/` or another parameter is an
/// error saying so (the last one used to win, so `key=/a&prefix=/` purged everything).
fn purge_target(query: &str) -> Result<crate::cache::purge::Target, String> {
    use crate::cache::purge::Target;
    const USAGE: &str = "give exactly one of key=/path or prefix=/path (percent-encoded)";
    let mut target: Option<Target> = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let prefix = match k {
            "key" => false,
            "prefix" => true,
            _ => return Err(format!("unknown parameter {k:?}: {USAGE}")),
        };
        if target.is_some() {
            return Err(format!("{k} given after another key or prefix: {USAGE}"));
        }
        // The query value is the request path percent-encoded once more (`%` as `%25`).
        let v = match crate::resolve::percent_decode(v.as_bytes()).map(String::from_utf8) {
            Ok(Ok(v)) if v.starts_with('/') => v,
            Ok(Ok(_)) => return Err(format!("{k}={v:?} does not start with '/': {USAGE}")),
            Ok(Err(_)) => {
                return Err(format!(
                    "{k}={v:?} decodes to bytes that are not UTF-8: the value is the request \
                     path percent-encoded (a path holding %FF is given as %25FF)"
                ))
            }
            Err(e) => return Err(format!("{k}={v:?}: {e}: {USAGE}")),
        };
        // Canonical like a key: every alias of the path names the same objects.
        target = Some(Target::parse(&v, prefix).map_err(|e| format!("{k}={v:?}: {e}"))?);
    }
    target.ok_or_else(|| USAGE.to_string())
}

async fn healthz(State(s): State<AdminState>) -> Response {
    let stale = s.lag.stale_workers(Instant::now());
    if stale.is_empty() {
        return (StatusCode::OK, "ok\n").into_response();
    }
    let mut body = String::new();
    for (worker, age) in stale {
        match age {
            Some(age) => body.push_str(&format!(
                "worker {worker}: event loop has not ticked for {:.1}s\n",
                age.as_secs_f64()
            )),
            None => body.push_str(&format!("worker {worker}: event loop has not started\n")),
        }
    }
    (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
}

async fn readyz(State(s): State<AdminState>) -> Response {
    let mut problems = Vec::new();
    if s.serving.draining() {
        problems.push("draining: shutting down".to_string());
    }
    if !s.serving.listeners_bound() {
        problems.push("listeners not bound yet".to_string());
    }
    for (i, v) in s.config.volumes.iter().enumerate() {
        let held = s.roots.get(i).and_then(|now| now());
        if let Err(e) = check_volume_root(v.path.clone(), held).await {
            problems.push(format!("volume {:?}: {e}", v.name));
        }
    }
    if problems.is_empty() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        let mut body = problems.join("\n");
        body.push('\n');
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    }
}

async fn config(State(s): State<AdminState>) -> Json<Config> {
    Json(Config::clone(&s.config))
}

/// The root must be a directory this process can open, and the one it holds open (`held`:
/// device, inode) when known; checked off the admin loop with a bound.
async fn check_volume_root(path: PathBuf, held: Option<(u64, u64)>) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let shown = path.display().to_string();
    let check = tokio::task::spawn_blocking(move || -> Result<(), String> {
        let meta = std::fs::metadata(&path).map_err(|e| e.to_string())?;
        if !meta.is_dir() {
            return Err("not a directory".into());
        }
        if held.is_some_and(|h| h != (meta.dev(), meta.ino())) {
            return Err("replaced since start: the server still uses the removed directory (restart it to use the new one)".into());
        }
        // What serving needs: search permission (reading the directory is only for listings).
        rustix::fs::access(&path, rustix::fs::Access::EXEC_OK)
            .map_err(|e| format!("cannot search it: {}", std::io::Error::from(e)))?;
        Ok(())
    });
    match tokio::time::timeout(VOLUME_CHECK_TIMEOUT, check).await {
        Ok(Ok(r)) => r.map_err(|e| format!("{shown}: {e}")),
        Ok(Err(e)) => Err(format!("{shown}: check failed: {e}")),
        Err(_) => Err(format!(
            "{shown}: no answer within {}s",
            VOLUME_CHECK_TIMEOUT.as_secs()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Bind, listen and serve, as the server's start does in steps.
    fn start(state: AdminState) -> Result<Option<AdminServer>, AdminError> {
        match bind(&state.config)? {
            Some(socket) => {
                socket.listen()?;
                serve(state, socket).map(Some)
            }
            None => Ok(None),
        }
    }

    struct Flags {
        bound: AtomicBool,
        draining: AtomicBool,
    }
    impl ServingState for Flags {
        fn listeners_bound(&self) -> bool {
            self.bound.load(Ordering::SeqCst)
        }
        fn draining(&self) -> bool {
            self.draining.load(Ordering::SeqCst)
        }
    }

    fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        let code = out[9..12].parse().expect("status code");
        let body = out.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
        (code, body.to_string())
    }

    fn setup(root: &std::path::Path) -> (AdminServer, Arc<Flags>, LagProbe, Config) {
        let mut cfg = Config::for_root(root);
        cfg.admin.listen = "127.0.0.1:0".into();
        cfg.normalize();
        let metrics = Metrics::new(&["root"], 1);
        let lag = LagProbe::with_stale_after(&metrics, 1, Duration::from_millis(300));
        let flags = Arc::new(Flags {
            bound: AtomicBool::new(false),
            draining: AtomicBool::new(false),
        });
        let state = AdminState {
            config: Arc::new(cfg.clone()),
            metrics,
            lag: lag.clone(),
            serving: flags.clone(),
            purge: None,
            roots: Vec::new(),
        };
        let server = start(state).expect("start").expect("enabled");
        (server, flags, lag, cfg)
    }

    #[test]
    fn endpoints_follow_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (server, flags, lag, cfg) = setup(dir.path());
        let addr = server.local_addr();

        // Not bound yet, worker never ticked.
        let (code, body) = get(addr, "/readyz");
        assert_eq!(code, 503, "{body}");
        assert!(body.contains("listeners not bound"), "{body}");
        let (code, body) = get(addr, "/healthz");
        assert_eq!(code, 503, "{body}");
        assert!(body.contains("worker 0"), "{body}");

        flags.bound.store(true, Ordering::SeqCst);
        let w = lag.worker(0).expect("worker 0");
        w.observe(Instant::now(), Instant::now());
        assert_eq!(get(addr, "/readyz").0, 200);
        assert_eq!(get(addr, "/healthz").0, 200);

        // The worker stops ticking: unhealthy after the bound.
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(get(addr, "/healthz").0, 503);

        flags.draining.store(true, Ordering::SeqCst);
        let (code, body) = get(addr, "/readyz");
        assert_eq!(code, 503);
        assert!(body.contains("draining"), "{body}");
        flags.draining.store(false, Ordering::SeqCst);

        // /config is the configuration as JSON.
        let (code, body) = get(addr, "/config");
        assert_eq!(code, 200);
        let got: Config = serde_json::from_str(&body).expect("config JSON");
        assert_eq!(got, cfg);
        server.shutdown();

        // A volume root that disappears makes the server unready.
        let sub = dir.path().join("gone");
        std::fs::create_dir(&sub).expect("mkdir");
        let mut cfg2 = Config::for_root(&sub);
        cfg2.admin.listen = "127.0.0.1:0".into();
        let metrics = Metrics::new(&["root"], 1);
        let state = AdminState {
            config: Arc::new(cfg2),
            metrics: metrics.clone(),
            lag: LagProbe::new(&metrics, 1),
            serving: flags.clone(),
            purge: None,
            roots: Vec::new(),
        };
        let server2 = start(state).expect("start").expect("enabled");
        assert_eq!(get(server2.local_addr(), "/readyz").0, 200);
        std::fs::remove_dir(&sub).expect("rmdir");
        let (code, body) = get(server2.local_addr(), "/readyz");
        assert_eq!(code, 503);
        assert!(body.contains("volume \"root\""), "{body}");

        server2.shutdown();
    }

    #[test]
    fn metrics_are_prometheus_text() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (server, _, _, _) = setup(dir.path());
        let mut s = std::net::TcpStream::connect(server.local_addr()).expect("connect");
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(
            out.to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4"),
            "{out}"
        );
        assert!(out.contains("contentserver_pool_queue_depth{volume=\"root\"} 0"));
        assert_eq!(get(server.local_addr(), "/nope").0, 404);
        server.shutdown();
    }

    #[test]
    fn a_purge_names_exactly_one_target() {
        use crate::cache::purge::Target;
        assert_eq!(purge_target("key=/a.bin"), Ok(Target::Key("/a.bin".into())));
        assert_eq!(
            purge_target("prefix=/d%20x/&"),
            // Canonical, like a key: a space stays encoded.
            Ok(Target::Prefix("/d%20x/".into()))
        );
        for (q, why) in [
            ("key=/a.bin&prefix=/", "after another"),
            ("prefix=/&key=/a.bin", "after another"),
            ("key=/a&key=/b", "after another"),
            ("", "exactly one"),
            ("key=a.bin", "start with '/'"),
            ("key", "start with '/'"),
            ("key=/a%FF", "not UTF-8"),
            ("key=/a%00", "\\0"),
            ("prefix=/a/..", "no '.' or '..' segments"),
            ("key=/a%3F%00", "control character"),
            ("key=/a%0D%0Ab", "control character"),
            ("prefix=/a/%2e%2E/", "no '.' or '..' segments"),
            ("keys=/a", "unknown parameter"),
            ("key=/a&x=1", "unknown parameter"),
        ] {
            let e = purge_target(q).expect_err(q);
            assert!(e.contains(why), "{q}: {e}");
        }
    }

    #[test]
    fn disabled_and_bad_addresses() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cfg = Config::for_root(dir.path());
        let metrics = Metrics::new(&["root"], 1);
        let flags: Arc<dyn ServingState> = Arc::new(Flags {
            bound: AtomicBool::new(true),
            draining: AtomicBool::new(false),
        });
        let mk = |cfg: &Config| AdminState {
            config: Arc::new(cfg.clone()),
            metrics: metrics.clone(),
            lag: LagProbe::new(&metrics, 1),
            serving: flags.clone(),
            purge: None,
            roots: Vec::new(),
        };
        cfg.admin.listen = String::new();
        assert!(start(mk(&cfg)).expect("disabled is fine").is_none());
        cfg.admin.listen = "localhost".into();
        assert!(matches!(start(mk(&cfg)), Err(AdminError::Address(_))));
        // A port in use is a bind error, not a panic.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        cfg.admin.listen = taken.local_addr().expect("addr").to_string();
        assert!(matches!(start(mk(&cfg)), Err(AdminError::Bind { .. })));
    }
}
