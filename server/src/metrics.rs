//! Every Prometheus series the server exports, defined in one place (names, types, labels, help).
//!
//! Owns the registry and the handles; the data path only increments them. Every series known to
//! exist (per volume, per worker, per operation) is created at start-up so it reads 0 before the
//! first event. Labels are bounded: `volume`, `op`, `worker`, `method`, `code`, `origin`,
//! `server` (an origin server's configured URL), `status`, `source`, `reason`, `version` —
//! never a request's URL.
//! Dashboards and alert rules in `dashboards/` are written against these names; rename nothing
//! without updating them (a lint test checks they match).

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::sync::{Arc, Mutex};

/// Operations a pool task performs (label `op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolOp {
    Open,
    Read,
    Sendfile,
}

impl PoolOp {
    pub const ALL: [PoolOp; 3] = [PoolOp::Open, PoolOp::Read, PoolOp::Sendfile];
    pub fn as_str(self) -> &'static str {
        match self {
            PoolOp::Open => "open",
            PoolOp::Read => "read",
            PoolOp::Sendfile => "sendfile",
        }
    }
}

/// Page-cache probe kinds for `offload = auto` (label `op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOp {
    Open,
    Read,
}

impl CacheOp {
    pub const ALL: [CacheOp; 2] = [CacheOp::Open, CacheOp::Read];
    pub fn as_str(self) -> &'static str {
        match self {
            CacheOp::Open => "open",
            CacheOp::Read => "read",
        }
    }
}

/// Buckets for latencies from tens of microseconds to tens of seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// `code` values of `http_requests_total` created at start for GET and HEAD.
pub const PRECREATED_CODES: [u16; 5] = [200, 206, 304, 404, 503];

/// `status` values of `cache_requests_total` (the `X-Cache` header, lower case).
pub const CACHE_STATUSES: [&str; 6] = ["hit", "miss", "stale", "updating", "revalidated", "bypass"];

/// `code` values of `origin_requests_total`.
pub const ORIGIN_CODES: [&str; 5] = ["2xx", "3xx", "4xx", "5xx", "error"];

/// Work run before each render ([`Metrics::on_render`]).
type RenderHook = Box<dyn Fn() + Send + Sync>;

/// All handles. Cheap to clone (the prometheus types are Arc inside).
#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// Called before every [`Metrics::render`]: counters of work still under way catch up (a
    /// pool's busy seconds of tasks still running).
    before_render: Arc<Mutex<Vec<RenderHook>>>,
    // pools (label volume; op where noted)
    pub pool_threads: IntGaugeVec,
    pub pool_busy_threads: IntGaugeVec,
    pub pool_queue_depth: IntGaugeVec,
    pub pool_queue_capacity: IntGaugeVec,
    pub pool_tasks_total: IntCounterVec,
    pub pool_rejected_total: IntCounterVec,
    pub pool_queue_wait_seconds: HistogramVec,
    pub pool_task_duration_seconds: HistogramVec,
    pub pool_busy_seconds_total: prometheus::CounterVec,
    // event loop (label worker)
    pub event_loop_lag_seconds: HistogramVec,
    pub event_loop_stalls_total: IntCounterVec,
    // HTTP
    pub http_requests_total: IntCounterVec,
    pub http_request_duration_seconds: Histogram,
    pub http_requests_in_flight: IntGauge,
    pub http_response_bytes_total: IntCounter,
    pub connections_accepted_total: IntCounter,
    pub connections_active: IntGauge,
    pub connections_parked: IntGauge,
    pub connections_refused_total: IntCounter,
    // page cache (offload = auto; labels volume, op)
    pub page_cache_hits_total: IntCounterVec,
    pub page_cache_misses_total: IntCounterVec,
    pub build_info: IntGaugeVec,
    // origin client (label origin; code where noted)
    pub origin_requests_total: IntCounterVec,
    pub origin_request_duration_seconds: HistogramVec,
    pub origin_received_bytes_total: IntCounterVec,
    pub origin_connections: IntGaugeVec,
    pub origin_server_down: IntGaugeVec,
    // cache volumes (label volume; status, source, reason where noted)
    pub cache_requests_total: IntCounterVec,
    pub cache_served_bytes_total: IntCounterVec,
    pub cache_fills_in_flight: IntGaugeVec,
    pub cache_collapsed_total: IntCounterVec,
    pub cache_fill_resumes_total: IntCounterVec,
    pub cache_size_bytes: IntGaugeVec,
    pub cache_max_bytes: IntGaugeVec,
    pub cache_entries: IntGaugeVec,
    pub cache_evictions_total: IntCounterVec,
    pub cache_purges_total: IntCounterVec,
    pub cache_store_failures_total: IntCounterVec,
    /// Synced from the log writer's count at each scrape ([`Metrics::sync_log_lines_dropped`]).
    pub log_lines_dropped_total: IntCounter,
    /// `http_requests_total` children of the common (method, code) pairs, resolved once.
    common_responses: std::sync::Arc<Vec<(&'static str, u16, IntCounter)>>,
}

fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: T) -> T {
    // Names are static and unique, so registration cannot collide; a failure would be a bug
    // caught by the unit test below, never an input-driven path.
    r.register(Box::new(c.clone()))
        .expect("metric names are unique");
    c
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace("contentserver")
}

fn hopts(name: &str, help: &str) -> HistogramOpts {
    HistogramOpts::new(name, help)
        .namespace("contentserver")
        .buckets(LATENCY_BUCKETS.to_vec())
}

impl Metrics {
    /// Run `f` before every render (see `before_render`).
    pub fn on_render(&self, f: impl Fn() + Send + Sync + 'static) {
        self.before_render
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(f));
    }

    /// Create every series for the given volumes and worker count, at zero.
    pub fn new(volumes: &[&str], workers: usize) -> Metrics {
        let r = Registry::new();
        let v = &["volume"];
        let vo = &["volume", "op"];
        let mut m = Metrics {
            pool_threads: reg(&r, IntGaugeVec::new(opts("pool_threads", "Configured threads of the volume's pool."), v).unwrap()),
            pool_busy_threads: reg(&r, IntGaugeVec::new(opts("pool_busy_threads", "Pool threads running a task now."), v).unwrap()),
            pool_queue_depth: reg(&r, IntGaugeVec::new(opts("pool_queue_depth", "Tasks waiting in the pool's queue."), v).unwrap()),
            pool_queue_capacity: reg(&r, IntGaugeVec::new(opts("pool_queue_capacity", "Most tasks the queue holds (max_queue) before rejecting."), v).unwrap()),
            pool_tasks_total: reg(&r, IntCounterVec::new(opts("pool_tasks_total", "Tasks completed by the pool, by operation."), vo).unwrap()),
            pool_rejected_total: reg(&r, IntCounterVec::new(opts("pool_rejected_total", "Tasks rejected because the queue was full (answered 503)."), v).unwrap()),
            pool_queue_wait_seconds: reg(&r, HistogramVec::new(hopts("pool_queue_wait_seconds", "Time tasks waited in the queue before a thread took them."), v).unwrap()),
            pool_task_duration_seconds: reg(&r, HistogramVec::new(hopts("pool_task_duration_seconds", "Time a pool thread spent on a task, by operation."), vo).unwrap()),
            pool_busy_seconds_total: reg(&r, prometheus::CounterVec::new(opts("pool_busy_seconds_total", "Thread-seconds the pool spent running tasks."), v).unwrap()),
            event_loop_lag_seconds: reg(&r, HistogramVec::new(hopts("event_loop_lag_seconds", "Lateness of a periodic tick on each event-loop worker."), &["worker"]).unwrap()),
            event_loop_stalls_total: reg(&r, IntCounterVec::new(opts("event_loop_stalls_total", "Ticks later than 100 ms on each event-loop worker."), &["worker"]).unwrap()),
            http_requests_total: reg(&r, IntCounterVec::new(opts("http_requests_total", "Responses sent, by request method and status code."), &["method", "code"]).unwrap()),
            http_request_duration_seconds: reg(&r, Histogram::with_opts(hopts("http_request_duration_seconds", "Time from a complete request head to the last byte of its response.")).unwrap()),
            http_requests_in_flight: reg(&r, IntGauge::with_opts(opts("http_requests_in_flight", "Requests being answered now.")).unwrap()),
            http_response_bytes_total: reg(&r, IntCounter::with_opts(opts("http_response_bytes_total", "Bytes of responses written to clients (headers and bodies).")).unwrap()),
            connections_accepted_total: reg(&r, IntCounter::with_opts(opts("connections_accepted_total", "Client connections accepted.")).unwrap()),
            connections_active: reg(&r, IntGauge::with_opts(opts("connections_active", "Client connections open now.")).unwrap()),
            connections_parked: reg(&r, IntGauge::with_opts(opts("connections_parked", "Client connections waiting in a worker's idle set now (no task, no buffer, no timer of their own); counted in connections_active too.")).unwrap()),
            connections_refused_total: reg(&r, IntCounter::with_opts(opts("connections_refused_total", "Client connections answered 503 at once and closed because max_connections was reached or no descriptor was left to serve them.")).unwrap()),
            page_cache_hits_total: reg(&r, IntCounterVec::new(opts("page_cache_hits_total", "offload=auto: opens and reads served inline on the event loop (no I/O needed)."), vo).unwrap()),
            page_cache_misses_total: reg(&r, IntCounterVec::new(opts("page_cache_misses_total", "offload=auto: opens and reads that needed I/O and went to the pool."), vo).unwrap()),
            build_info: reg(&r, IntGaugeVec::new(opts("build_info", "Always 1; the version label says which build runs."), &["version"]).unwrap()),
            origin_requests_total: reg(&r, IntCounterVec::new(opts("origin_requests_total", "Origin requests by outcome: the status class, or error (connect, timeout, truncated body)."), &["origin", "code"]).unwrap()),
            origin_request_duration_seconds: reg(&r, HistogramVec::new(hopts("origin_request_duration_seconds", "Time from sending an origin request to its response head."), &["origin"]).unwrap()),
            origin_received_bytes_total: reg(&r, IntCounterVec::new(opts("origin_received_bytes_total", "Body bytes received from the origin."), &["origin"]).unwrap()),
            origin_connections: reg(&r, IntGaugeVec::new(opts("origin_connections", "Origin connections open now (busy and idle)."), &["origin"]).unwrap()),
            origin_server_down: reg(&r, IntGaugeVec::new(opts("origin_server_down", "1 while an origin server is marked down (a connect to it failed, or it gave a request no answer head, within the last 10 s; tried after the others, one request probing it after that), else 0."), &["origin", "server"]).unwrap()),
            cache_requests_total: reg(&r, IntCounterVec::new(opts("cache_requests_total", "Cache route requests by cache status (hit, miss, stale, updating, revalidated, bypass)."), &["volume", "status"]).unwrap()),
            cache_served_bytes_total: reg(&r, IntCounterVec::new(opts("cache_served_bytes_total", "Body bytes sent to clients of cache routes, by source (cache = stored entry or a complete fill, origin = a fill under way or a pass-through)."), &["volume", "source"]).unwrap()),
            cache_fills_in_flight: reg(&r, IntGaugeVec::new(opts("cache_fills_in_flight", "Origin fills (one per object slice) running now."), v).unwrap()),
            cache_collapsed_total: reg(&r, IntCounterVec::new(opts("cache_collapsed_total", "Requests that joined a fill already under way instead of asking the origin."), v).unwrap()),
            cache_fill_resumes_total: reg(&r, IntCounterVec::new(opts("cache_fill_resumes_total", "Fills whose origin body broke off and that went on with a Range request for the rest."), v).unwrap()),
            cache_size_bytes: reg(&r, IntGaugeVec::new(opts("cache_size_bytes", "Bytes of stored entries (4 KiB units)."), v).unwrap()),
            cache_max_bytes: reg(&r, IntGaugeVec::new(opts("cache_max_bytes", "Size the volume's entries are kept under (max_size, or 10% of the filesystem free)."), v).unwrap()),
            cache_entries: reg(&r, IntGaugeVec::new(opts("cache_entries", "Stored entries (one per object slice) in the index."), v).unwrap()),
            cache_evictions_total: reg(&r, IntCounterVec::new(opts("cache_evictions_total", "Entries deleted, by reason (size, inactive, invalid, replaced)."), &["volume", "reason"]).unwrap()),
            cache_purges_total: reg(&r, IntCounterVec::new(opts("cache_purges_total", "Entries deleted by POST /cache/purge."), v).unwrap()),
            cache_store_failures_total: reg(&r, IntCounterVec::new(opts("cache_store_failures_total", "Entries that could not be stored (served all the same), by reason (disk_full: ENOSPC; error: any other failure to create, write or commit the file)."), &["volume", "reason"]).unwrap()),
            log_lines_dropped_total: reg(&r, IntCounter::with_opts(opts("log_lines_dropped_total", "Log lines dropped because the log writer thread was behind (stderr slow or not drained); the server never waits for it.")).unwrap()),
            common_responses: Default::default(),
            registry: r,
            before_render: Arc::default(),
        };
        m.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        for vol in volumes {
            for g in [
                &m.pool_threads,
                &m.pool_busy_threads,
                &m.pool_queue_depth,
                &m.pool_queue_capacity,
            ] {
                g.with_label_values(&[vol]);
            }
            m.pool_rejected_total.with_label_values(&[vol]);
            m.pool_queue_wait_seconds.with_label_values(&[vol]);
            m.pool_busy_seconds_total.with_label_values(&[vol]);
            for op in PoolOp::ALL {
                m.pool_tasks_total.with_label_values(&[vol, op.as_str()]);
                m.pool_task_duration_seconds
                    .with_label_values(&[vol, op.as_str()]);
            }
            for op in CacheOp::ALL {
                m.page_cache_hits_total
                    .with_label_values(&[vol, op.as_str()]);
                m.page_cache_misses_total
                    .with_label_values(&[vol, op.as_str()]);
            }
        }
        // The outcomes dashboards divide by (success, partial, not modified, not found,
        // overflow) exist from start-up, so ratios read 0 instead of "no data".
        let mut common = Vec::new();
        for method in ["GET", "HEAD"] {
            for code in PRECREATED_CODES {
                let c = m
                    .http_requests_total
                    .with_label_values(&[method, &code.to_string()]);
                common.push((method, code, c));
            }
        }
        m.common_responses = std::sync::Arc::new(common);
        for w in 0..workers {
            let w = w.to_string();
            m.event_loop_lag_seconds.with_label_values(&[&w]);
            m.event_loop_stalls_total.with_label_values(&[&w]);
        }
        m
    }

    /// Create the series of one origin and its servers at zero (called by the origin client at
    /// start-up).
    pub fn init_origin(&self, origin: &str, servers: &[String]) {
        for server in servers {
            self.origin_server_down.with_label_values(&[origin, server]);
        }
        for code in ORIGIN_CODES {
            self.origin_requests_total
                .with_label_values(&[origin, code]);
        }
        self.origin_request_duration_seconds
            .with_label_values(&[origin]);
        self.origin_received_bytes_total
            .with_label_values(&[origin]);
        self.origin_connections.with_label_values(&[origin]);
    }

    /// Create the series of one cache volume at zero (called when the cache volume starts).
    pub fn init_cache_volume(&self, volume: &str) {
        for status in CACHE_STATUSES {
            self.cache_requests_total
                .with_label_values(&[volume, status]);
        }
        for source in ["cache", "origin"] {
            self.cache_served_bytes_total
                .with_label_values(&[volume, source]);
        }
        for reason in ["size", "inactive", "invalid", "replaced"] {
            self.cache_evictions_total
                .with_label_values(&[volume, reason]);
        }
        for g in [
            &self.cache_fills_in_flight,
            &self.cache_size_bytes,
            &self.cache_max_bytes,
            &self.cache_entries,
        ] {
            g.with_label_values(&[volume]);
        }
        self.cache_collapsed_total.with_label_values(&[volume]);
        self.cache_fill_resumes_total.with_label_values(&[volume]);
        self.cache_purges_total.with_label_values(&[volume]);
        for reason in ["disk_full", "error"] {
            self.cache_store_failures_total
                .with_label_values(&[volume, reason]);
        }
    }

    /// Count one response in `http_requests_total`. The common (method, code) pairs use
    /// counters resolved at start-up: no label hashing or string allocation per request.
    pub fn count_response(&self, method: &str, code: u16) {
        match self
            .common_responses
            .iter()
            .find(|(m, c, _)| *c == code && *m == method)
        {
            Some((_, _, counter)) => counter.inc(),
            None => self
                .http_requests_total
                .with_label_values(&[method, &code.to_string()])
                .inc(),
        }
    }

    /// Bring `log_lines_dropped_total` up to `total` (the log writer's own count, read by the
    /// caller: the log sits above this module). One sync at a time, so two scrapes at once
    /// cannot both add the same lines.
    pub fn sync_log_lines_dropped(&self, total: u64) {
        static SYNC: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = SYNC.lock().unwrap_or_else(|p| p.into_inner());
        let counted = self.log_lines_dropped_total.get();
        if total > counted {
            self.log_lines_dropped_total.inc_by(total - counted);
        }
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        for f in self
            .before_render
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            f();
        }
        let mut buf = Vec::new();
        let families = self.registry.gather();
        if TextEncoder::new().encode(&families, &mut buf).is_err() {
            return String::new();
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// The `method` label: GET and HEAD by name, everything else folded into `other` (bounded).
pub fn method_label(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "HEAD" => "HEAD",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_exists_at_start() {
        let m = Metrics::new(&["disk1", "disk2"], 2);
        m.init_origin("up", &["http://127.0.0.1:1".to_string()]);
        m.init_cache_volume("cache1");
        let text = m.render();
        for needle in [
            "contentserver_pool_queue_depth{volume=\"disk2\"} 0",
            "contentserver_pool_tasks_total{op=\"sendfile\",volume=\"disk1\"} 0",
            "contentserver_event_loop_stalls_total{worker=\"1\"} 0",
            "contentserver_page_cache_misses_total{op=\"read\",volume=\"disk2\"} 0",
            "contentserver_connections_refused_total 0",
            "contentserver_connections_parked 0",
            "contentserver_build_info{version=",
            "contentserver_origin_requests_total{code=\"error\",origin=\"up\"} 0",
            "contentserver_origin_requests_total{code=\"2xx\",origin=\"up\"} 0",
            "contentserver_origin_request_duration_seconds_count{origin=\"up\"} 0",
            "contentserver_origin_received_bytes_total{origin=\"up\"} 0",
            "contentserver_origin_connections{origin=\"up\"} 0",
            "contentserver_origin_server_down{origin=\"up\",server=\"http://127.0.0.1:1\"} 0",
            "contentserver_cache_requests_total{status=\"revalidated\",volume=\"cache1\"} 0",
            "contentserver_cache_served_bytes_total{source=\"origin\",volume=\"cache1\"} 0",
            "contentserver_cache_fills_in_flight{volume=\"cache1\"} 0",
            "contentserver_cache_collapsed_total{volume=\"cache1\"} 0",
            "contentserver_cache_fill_resumes_total{volume=\"cache1\"} 0",
            "contentserver_cache_size_bytes{volume=\"cache1\"} 0",
            "contentserver_cache_max_bytes{volume=\"cache1\"} 0",
            "contentserver_cache_entries{volume=\"cache1\"} 0",
            "contentserver_cache_evictions_total{reason=\"invalid\",volume=\"cache1\"} 0",
            "contentserver_cache_purges_total{volume=\"cache1\"} 0",
            "contentserver_cache_store_failures_total{reason=\"disk_full\",volume=\"cache1\"} 0",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }
}
