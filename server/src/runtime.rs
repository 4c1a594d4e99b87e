//! Start-up and shutdown of the whole server, in one place: raise RLIMIT_NOFILE, build the
//! metrics and the lifecycle, open volumes and start their pools, bind the listeners, start one
//! event-loop worker thread per core (each a tokio current-thread runtime with its own
//! SO_REUSEPORT sockets), then wait for SIGTERM/SIGINT/SIGQUIT and drain.
//!
//! Other subsystems (admin listener, event-loop lag probe) hook in here: [`Server`] holds the
//! `Metrics` and `Arc<Lifecycle>` they need. It must not handle requests itself.

use crate::accept;
use crate::config::Config;
use crate::lifecycle::Lifecycle;
use crate::metrics::Metrics;
use crate::resolve::Router;
use crate::shared::Shared;
use crate::volume::Volume;
use anyhow::Context;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A started server: workers are accepting.
pub struct Server {
    pub shared: Arc<Shared>,
    pub metrics: Metrics,
    pub lifecycle: Arc<Lifecycle>,
    pub workers: Vec<std::thread::JoinHandle<()>>,
    /// The admin listener (None when `admin.listen` is empty).
    pub admin: Option<crate::admin::AdminServer>,
}

/// Raise the soft RLIMIT_NOFILE to the hard limit and log both; returns the soft limit now
/// (None: unlimited).
pub fn raise_nofile_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let old = getrlimit(Resource::Nofile);
    let new = Rlimit {
        current: old.maximum,
        maximum: old.maximum,
    };
    let fmt = |v: Option<u64>| v.map_or("unlimited".to_string(), |n| n.to_string());
    if old.current == old.maximum {
        tracing::info!(soft = %fmt(old.current), hard = %fmt(old.maximum), "RLIMIT_NOFILE already at the hard limit");
        return old.maximum;
    }
    match setrlimit(Resource::Nofile, new) {
        Ok(()) => tracing::info!(
            soft_before = %fmt(old.current),
            soft = %fmt(old.maximum),
            hard = %fmt(old.maximum),
            "RLIMIT_NOFILE raised to the hard limit"
        ),
        Err(e) => {
            tracing::warn!(
                soft = %fmt(old.current),
                hard = %fmt(old.maximum),
                error = %e,
                "cannot raise RLIMIT_NOFILE"
            );
            return old.current;
        }
    }
    old.maximum
}

/// Client connections that fit the descriptor limit `limit`: a quarter of it is what volumes
/// keep open (open-file caches, `volume/hot.rs`; cache entries, `cache/volume.rs`; see
/// `descriptors::volume_share`), and up to another quarter (at most 1024) is kept for what the
/// connections send, cache fills, origin connections, the admin listener and logs. Over it,
/// accept() would fail and the admin port with it (health checks, metrics); nginx warns of the
/// same ("worker_connections exceed open file resource limit").
pub fn connections_within(limit: u64) -> u64 {
    limit - limit / 4 - (limit / 4).min(1024)
}

/// `path` with symlinks resolved; a missing last component (a cache directory `create_dirs`
/// is about to make) is resolved through its parent. `None` when neither resolves.
fn resolved_dir(path: &std::path::Path) -> Option<std::path::PathBuf> {
    std::fs::canonicalize(path).ok().or_else(|| {
        let name = path.file_name()?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        Some(std::fs::canonicalize(parent).ok()?.join(name))
    })
}

/// Build everything and start the workers (returns once they run).
pub fn start(mut config: Config) -> anyhow::Result<Server> {
    config.normalize();
    config.validate()?;
    crate::accept::hold_spare_descriptor();
    if let Some(limit) = raise_nofile_limit() {
        if !config.admin.listen.is_empty() {
            crate::descriptors::reserve_for_admin(limit);
        }
        let fit = connections_within(limit).max(1);
        if config.limits.max_connections as u64 > fit {
            tracing::warn!(
                max_connections = config.limits.max_connections,
                rlimit_nofile = limit,
                lowered_to = fit,
                "limits.max_connections exceeds what the file descriptor limit leaves for connections; lowered"
            );
            config.limits.max_connections = fit as usize;
        }
    }
    let workers = config.effective_workers();
    let names: Vec<&str> = config.volumes.iter().map(|v| v.name.as_str()).collect();
    let metrics = Metrics::new(&names, workers);
    let lifecycle = Arc::new(Lifecycle::new());
    let lag = crate::admin::lag::LagProbe::new(&metrics, workers);
    // A bad purge token file stops the server before it touches a cache directory (its lock,
    // its temporary files, a missing one made) or binds a port.
    crate::cache::purge::check_token_file(&config)?;
    // Validation compared the paths as written; symlinks can still make a cache directory
    // another volume's, or put it inside one. Judged before a missing cache directory is made,
    // so a refused start leaves nothing behind (a path that does not resolve is reported by
    // the volume that opens it).
    let canonical: Vec<_> = config
        .volumes
        .iter()
        .map(|v| resolved_dir(&v.path))
        .collect();
    let overlaps = config.volume_dir_conflicts(&canonical, true);
    if !overlaps.is_empty() {
        return Err(crate::config::ConfigError::Invalid(overlaps))
            .context("volume directories overlap once symlinks are resolved");
    }
    // What can refuse the start without touching a directory comes first: every port bound
    // (not listening until the start cannot fail: a connection meanwhile is refused, as with
    // no server) and the origin clients (their CA files read).
    let listeners = accept::bind_all(&config, workers)?;
    let admin_socket = crate::admin::bind(&config).context("start the admin listener")?;
    let origins = crate::origin::Origins::from_config(&config, &metrics)
        .context("start the origin clients")?;
    crate::cache::create_dirs(&config)?;
    let volumes = config
        .volumes
        .iter()
        .map(|v| Volume::start(v, &config, &metrics))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for v in &config.volumes {
        tracing::info!(
            volume = %v.name, path = %v.path.display(), offload = v.offload.as_str(),
            threads = v.pool.threads, max_queue = v.pool.max_queue, "volume ready"
        );
    }
    let (caches, cache_routes) = crate::cache::start(&config, &volumes, &origins, &metrics)?;
    let router = Router::new(&config);
    let purge = crate::cache::purge::Purge::from_config(&config, &caches)?;
    lifecycle.add_listeners_bound(listeners.sockets.iter().map(Vec::len).sum());
    let http = crate::http::plan::Policy::new(&config);
    let shared = Arc::new(Shared {
        http,
        config,
        metrics: metrics.clone(),
        lifecycle: lifecycle.clone(),
        router,
        volumes,
        caches,
        cache_routes,
    });
    let mut handles = Vec::with_capacity(workers);
    if let Some(a) = &admin_socket {
        a.listen().context("start the admin listener")?;
    }
    listeners.listen(&shared.config)?;
    for (w, socks) in listeners.sockets.into_iter().enumerate() {
        let shared = shared.clone();
        let probe = lag.worker(w);
        let h = std::thread::Builder::new()
            .name(format!("worker-{w}"))
            .spawn(move || worker_main(w, shared, socks, probe))
            .context("spawn worker thread")?;
        handles.push(h);
    }
    let admin_state = crate::admin::AdminState {
        config: Arc::new(shared.config.clone()),
        metrics: metrics.clone(),
        lag,
        serving: lifecycle.clone(),
        purge,
        roots: (shared.volumes.iter().zip(&shared.caches))
            .map(|(v, cache)| -> crate::admin::HeldRoot {
                match cache {
                    Some(cv) => {
                        let store = cv.store.clone();
                        Arc::new(move || store.identity())
                    }
                    None => {
                        let held = v.root_identity();
                        Arc::new(move || held)
                    }
                }
            })
            .collect(),
    };
    let admin = admin_socket
        .map(|socket| crate::admin::serve(admin_state, socket))
        .transpose()
        .context("start the admin listener")?;
    lifecycle.set_ready();
    Ok(Server {
        shared,
        metrics,
        lifecycle,
        workers: handles,
        admin,
    })
}

/// One event-loop worker: a current-thread runtime running the accept loops of its sockets and
/// every connection they accept. Runs until the process exits.
fn worker_main(
    worker: usize,
    shared: Arc<Shared>,
    listeners: Vec<TcpListener>,
    lag_probe: Option<crate::admin::lag::WorkerProbe>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            // Exiting at once: the log writer thread would not get to write the line.
            eprintln!("content-server: worker {worker}: cannot build its runtime: {e}");
            std::process::exit(1);
        }
    };
    rt.block_on(async move {
        if let Some(p) = lag_probe {
            tokio::spawn(p.run());
        }
        // The drain's end: this worker's responses still in flight are cut (and logged).
        let mut cut = shared.lifecycle.subscribe_cut();
        tokio::spawn(async move {
            if cut.wait_for(|c| *c).await.is_ok() {
                crate::conn::cut_in_flight();
            }
        });
        for l in listeners {
            let shared = shared.clone();
            tokio::spawn(async move {
                if let Err(e) = accept::accept_loop(shared, l).await {
                    tracing::error!(worker, error = %e, "accept loop ended");
                }
            });
        }
        // The worker's idle set: its driver is this thread's own future (the set is not Send).
        if shared.config.limits.idle_park_ms > 0 {
            crate::idle::start(shared, crate::conn::resume).await;
        }
        std::future::pending::<()>().await;
    });
}

/// Run until SIGTERM/SIGINT/SIGQUIT, then drain: stop accepting, close idle connections, let in-flight
/// responses finish up to `shutdown_timeout_secs`. Returns Ok (exit 0) after draining.
pub fn run(config: Config) -> anyhow::Result<()> {
    let control = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("build control runtime")?;
    control.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        // Install the handlers before anything starts, so an early signal drains too.
        let mut term = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
        let mut int = signal(SignalKind::interrupt()).context("install SIGINT handler")?;
        // nginx's graceful stop (`nginx -s quit`, `STOPSIGNAL SIGQUIT` in its images): its
        // default action is a core dump, cutting every response in flight.
        let mut quit = signal(SignalKind::quit()).context("install SIGQUIT handler")?;
        // Signals whose default action would kill the server at once, without a drain (a
        // reloader sidecar's HUP, an nginx habit): logged and ignored.
        let mut hup = signal(SignalKind::hangup()).context("install SIGHUP handler")?;
        let mut usr1 = signal(SignalKind::user_defined1()).context("install SIGUSR1 handler")?;
        let mut usr2 = signal(SignalKind::user_defined2()).context("install SIGUSR2 handler")?;
        let server = start(config)?;
        tracing::info!(workers = server.workers.len(), "content-server ready");
        let ignored = |sig: &str| {
            tracing::warn!(
                signal = sig,
                "signal ignored: the configuration is read at start only (restart the process to apply a change); SIGTERM, SIGINT or SIGQUIT drains and stops"
            )
        };
        // Free heap left by a burst goes back to the kernel (crate::memory).
        let mut memory = tokio::time::interval(crate::memory::CHECK_EVERY);
        memory.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let sig = loop {
            tokio::select! {
                _ = memory.tick() => {
                    crate::memory::trim_if_slack();
                }
                _ = term.recv() => break "SIGTERM",
                _ = int.recv() => break "SIGINT",
                _ = quit.recv() => break "SIGQUIT",
                _ = hup.recv() => ignored("SIGHUP"),
                _ = usr1.recv() => ignored("SIGUSR1"),
                _ = usr2.recv() => ignored("SIGUSR2"),
            }
        };
        // A second stopping signal while draining (an operator's second Ctrl-C) stops the
        // wait at once, like the shutdown timeout.
        let again = async {
            tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
                _ = quit.recv() => "SIGQUIT",
            }
        };
        drain(&server, sig, again).await;
        Ok(())
    })
}

/// How long responses cut at the drain's end get to end (and be logged) before the exit.
const CUT_WAIT: Duration = Duration::from_millis(500);

async fn drain(server: &Server, signal: &str, again: impl std::future::Future<Output = &str>) {
    let timeout = Duration::from_secs(server.shared.config.shutdown_timeout_secs);
    let lc = &server.lifecycle;
    tracing::info!(
        signal,
        open_connections = lc.connections(),
        timeout_secs = timeout.as_secs(),
        "draining: no longer accepting"
    );
    lc.begin_drain();
    let start = Instant::now();
    // Fills run detached from connections: let them finish too, so what was fetched is stored.
    let fills = || -> usize {
        server
            .shared
            .caches
            .iter()
            .flatten()
            .map(|c| c.fills_in_flight())
            .sum()
    };
    tokio::pin!(again);
    let mut cut = None;
    while (lc.connections() > 0 || fills() > 0) && start.elapsed() < timeout {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            sig = &mut again => {
                cut = Some(sig);
                break;
            }
        }
    }
    let left = lc.connections();
    let fills_left = fills();
    if left > 0 {
        // What is still in flight is cut, each response ending as a vanished client's (its
        // access line written); a moment for that, then the process exits.
        lc.cut();
        let cut_at = Instant::now();
        while lc.connections() > 0 && cut_at.elapsed() < CUT_WAIT {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    if let Some(sig) = cut {
        tracing::warn!(
            signal = sig,
            connections = left,
            fills = fills_left,
            "second signal while draining; closing remaining connections now"
        );
    } else if left > 0 || fills_left > 0 {
        // A fill cut here stores nothing (its temporary file goes at the next start).
        tracing::warn!(
            connections = left,
            fills = fills_left,
            "shutdown timeout reached; closing remaining connections and cutting fills"
        );
    } else {
        tracing::info!(
            elapsed_ms = start.elapsed().as_millis() as u64,
            "drained; exiting"
        );
    }
}
