//! The operator's own Prometheus metrics (prefix `contentoperator_`) and its HTTP endpoint
//! (`/metrics`, `/healthz`). The names are a contract with the dashboards:
//! `contentoperator_reconciles_total{result}`, `contentoperator_reconcile_errors_total`,
//! `contentoperator_reconcile_duration_seconds` (histogram),
//! `contentoperator_managed_contentservers` (gauge) and `contentoperator_watch_errors_total`.
//! Must not reconcile anything.

use anyhow::Context as _;
use axum::{routing::get, Router};
use content_server::config::listen::ListenIp;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramTimer, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

/// Result label values of `contentoperator_reconciles_total`.
pub mod result {
    pub const OK: &str = "ok";
    pub const ERROR: &str = "error";
    pub const INVALID: &str = "invalid";
    pub const PAUSED: &str = "paused";
}

/// The operator's metrics.
#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    pub reconciles: IntCounterVec,
    pub errors: IntCounter,
    pub duration: Histogram,
    pub managed: IntGauge,
    /// Failed lists and watches: with the API server unreachable the gauge above cannot say
    /// how many ContentServers there are (it reads what was last seen, 0 at start).
    pub watch_errors: IntCounter,
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let reconciles = IntCounterVec::new(
            Opts::new(
                "contentoperator_reconciles_total",
                "Reconciles of ContentServer resources by result (ok, error, invalid, paused).",
            ),
            &["result"],
        )
        .expect("static metric definition");
        let errors = IntCounter::new(
            "contentoperator_reconcile_errors_total",
            "Reconciles that failed with an error (API error, render failure).",
        )
        .expect("static metric definition");
        let duration = Histogram::with_opts(
            HistogramOpts::new(
                "contentoperator_reconcile_duration_seconds",
                "Time taken by one reconcile.",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
        )
        .expect("static metric definition");
        let managed = IntGauge::new(
            "contentoperator_managed_contentservers",
            "ContentServer resources currently watched.",
        )
        .expect("static metric definition");
        let watch_errors = IntCounter::new(
            "contentoperator_watch_errors_total",
            "Failed lists or watches of ContentServers or their children (API server unreachable, \
             access refused, a watched kind missing); retried with backoff, nothing is reconciled \
             meanwhile.",
        )
        .expect("static metric definition");
        for c in [
            Box::new(reconciles.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(errors.clone()),
            Box::new(duration.clone()),
            Box::new(managed.clone()),
            Box::new(watch_errors.clone()),
        ] {
            registry.register(c).expect("unique metric names");
        }
        for r in [result::OK, result::ERROR, result::INVALID, result::PAUSED] {
            reconciles.with_label_values(&[r]);
        }
        Metrics {
            registry,
            reconciles,
            errors,
            duration,
            managed,
            watch_errors,
        }
    }

    /// A guard measuring one reconcile: when dropped it observes the duration and counts the
    /// result, which is [`result::ERROR`] (also counted in the error counter) unless
    /// [`ReconcileMeasurer::set_result`] said otherwise.
    pub fn measure_reconcile(&self) -> ReconcileMeasurer<'_> {
        ReconcileMeasurer {
            metrics: self,
            result: result::ERROR,
            _timer: self.duration.start_timer(),
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// See [`Metrics::measure_reconcile`].
pub struct ReconcileMeasurer<'a> {
    metrics: &'a Metrics,
    result: &'static str,
    /// Observes the duration histogram when dropped.
    _timer: HistogramTimer,
}

impl ReconcileMeasurer<'_> {
    /// The reconcile finished with `result` (one of [`result`]'s values).
    pub fn set_result(&mut self, result: &'static str) {
        self.result = result;
    }
}

impl Drop for ReconcileMeasurer<'_> {
    fn drop(&mut self) {
        self.metrics
            .reconciles
            .with_label_values(&[self.result])
            .inc();
        if self.result == result::ERROR {
            self.metrics.errors.inc();
        }
    }
}

/// The HTTP router: `/metrics`, `/healthz`.
pub fn router(metrics: Metrics) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
                async move { ([("content-type", "text/plain; version=0.0.4")], m.render()) }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
}

/// The listener of `--metrics-listen`, bound before anything else starts: an address in use
/// stops the process with its name (a pod without /healthz would be restarted in a loop).
pub async fn bind(listen: Listen) -> anyhow::Result<tokio::net::TcpListener> {
    let Listen(ip, port) = listen;
    let target = content_server::bind::Target::of(ip, port);
    let bound = target.listen_std().and_then(|l| {
        l.set_nonblocking(true)?;
        tokio::net::TcpListener::from_std(l)
    });
    let listener = bound.with_context(|| {
        format!(
            "cannot bind the metrics listener on {} (--metrics-listen {listen})",
            target.addr
        )
    })?;
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, dual_stack = target.dual, "metrics listening (/metrics, /healthz)");
    }
    Ok(listener)
}

/// `--metrics-listen`: an address (`*` for every IPv4 and IPv6 address) and a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listen(pub ListenIp, pub u16);

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.with_port(self.1))
    }
}

/// Parse `--metrics-listen` (a malformed value is a usage error, exit 2).
pub fn parse_listen(s: &str) -> Result<Listen, String> {
    let (ip, port) = content_server::config::listen::parse_socket(s)
        .ok_or_else(|| format!("{s:?} is not ADDR:PORT, [V6]:PORT or *:PORT"))?;
    if let Some(v4) = ip.mapped_v4() {
        let instead = ListenIp::Ip(v4.into()).with_port(port);
        return Err(format!("{s:?} {}", ListenIp::mapped_v4_error(instead)));
    }
    Ok(Listen(ip, port))
}

/// Serve the router on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, metrics: Metrics) -> anyhow::Result<()> {
    axum::serve(listener, router(metrics))
        .await
        .context("metrics server")
}
