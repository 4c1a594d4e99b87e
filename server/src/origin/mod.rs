//! The origin client of a caching node: HTTP/1.1 (hyper 1) over TCP or rustls, to the servers
//! of each `[[origins]]` entry.
//!
//! Owns connecting (servers in order, on connect errors only), TLS (system roots + `ca_file`,
//! SNI and Host overrides), keep-alive reuse, the `max_connections` cap, the connect and read
//! timeouts, body-length enforcement and the `contentserver_origin_*` series. It must not know
//! about caching: what to fetch, store or serve is the cache's business.
//!
//! **What runs where.** [`Origins::from_config`] starts one small multi-thread tokio runtime
//! (threads named `origin`) shared by all origins. Every origin socket lives there: DNS, TCP
//! connect, the TLS handshake, the hyper connection task, and one task per response that reads
//! the body with the read timeout and hands chunks over a bounded channel. [`Origin::fetch`]
//! and [`OriginResponse::chunk`] only await channel ends, so they work from any runtime (a
//! current-thread worker, a dedicated fill runtime, a test) without a timer or reactor of their
//! own, and an origin connection is never tied to the worker that opened it. Dropping a fetch
//! future aborts the request; dropping an [`OriginResponse`] early closes its connection.
//!
//! Choice: `hyper::client::conn::http1` rather than hyper-util's legacy `Client`: the cap
//! counts connections exactly, failover is "connect errors only" by construction (the request
//! is built after a connection exists, and `try_send_request` says whether it went out), and
//! the SNI/Host overrides and per-server TLS names need no custom connector service.

mod body;
mod connect;
mod error;
mod fetch;
mod headers;
mod pool;
mod runtime;
mod tls;

pub use crate::http::uri::encode_target;
pub use body::OriginResponse;
pub use error::{OriginError, TLS_HANDSHAKE};
pub use headers::{
    content_length, content_range, parse_content_range, unsatisfied_total, ContentRange, Validators,
};

use crate::config::{self, Config};
use crate::metrics::Metrics;
use prometheus::{Histogram, IntCounter, IntGauge};
use rustls::pki_types::ServerName;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Request method sent to an origin (a HEAD miss is fetched with GET by the cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
}

/// One request to an origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginRequest {
    pub method: Method,
    /// Origin-form target, `/path?query`, sent as is.
    pub path_and_query: String,
    /// `Range: bytes=START-END` (both inclusive).
    pub range: Option<(u64, u64)>,
    /// `If-None-Match` value (an ETag as received).
    pub if_none_match: Option<String>,
    /// `If-Modified-Since` value (an HTTP date as received).
    pub if_modified_since: Option<String>,
    /// `If-Match` value (a client's, forwarded as received by a pass-through).
    pub if_match: Option<String>,
    /// `If-Unmodified-Since` value (a client's, forwarded as received by a pass-through).
    pub if_unmodified_since: Option<String>,
    /// `Authorization` value (the client's, forwarded as received; sent marked sensitive).
    pub authorization: Option<String>,
    /// A client's own single `Range` value and its `If-Range`, forwarded as received by a
    /// pass-through (never with `range`).
    pub client_range: Option<(String, Option<String>)>,
    /// The client's `Origin` (CORS), forwarded as received: an origin answering per Origin
    /// says `Vary: Origin`, which keeps its answer out of the cache.
    pub origin: Option<String>,
    /// The client's `Accept-Encoding`, forwarded as received by a pass-through (a fill asks
    /// without one: its answer is for every client).
    pub accept_encoding: Option<String>,
    /// Not sent while every server is marked down and none is due for a probe (or another
    /// request probes it): [`OriginError::AllDown`] at once, for a request that has an answer
    /// of its own then (a stale copy). Otherwise such a request tries the servers anyway.
    pub only_if_up: bool,
}

impl OriginRequest {
    /// A plain GET of `path_and_query`.
    pub fn get(path_and_query: impl Into<String>) -> OriginRequest {
        OriginRequest {
            method: Method::Get,
            path_and_query: path_and_query.into(),
            range: None,
            if_none_match: None,
            if_modified_since: None,
            if_match: None,
            if_unmodified_since: None,
            authorization: None,
            client_range: None,
            origin: None,
            accept_encoding: None,
            only_if_up: false,
        }
    }
}

/// Every configured origin, by name.
pub struct Origins {
    by_name: HashMap<String, Arc<Origin>>,
}

impl Origins {
    /// Build the clients of `cfg.origins` (reads each `ca_file`, starts the origin runtime when
    /// there is at least one origin) and create their metric series at zero.
    pub fn from_config(cfg: &Config, metrics: &Metrics) -> Result<Origins, OriginError> {
        let mut by_name = HashMap::new();
        if cfg.origins.is_empty() {
            return Ok(Origins { by_name });
        }
        let rt = Arc::new(
            runtime::OriginRuntime::new().map_err(|e| OriginError::Setup {
                origin: cfg.origins[0].name.clone(),
                message: format!("cannot start the origin runtime: {e}"),
            })?,
        );
        for o in &cfg.origins {
            let origin = Origin::new(o, metrics, rt.clone())?;
            by_name.insert(o.name.clone(), Arc::new(origin));
        }
        Ok(Origins { by_name })
    }

    /// The origin named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Origin>> {
        self.by_name.get(name).cloned()
    }
}

/// The client of one origin. Cheap to share (`Arc`); usable from any tokio runtime.
pub struct Origin {
    inner: Arc<Inner>,
}

/// One server of an origin, resolved from its URL at start-up.
pub(crate) struct Server {
    pub(crate) url: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The Host header: the origin's `host`, else the URL authority.
    pub(crate) host_header: http::HeaderValue,
    /// TLS name for https servers.
    pub(crate) tls_name: Option<ServerName<'static>>,
    /// `scheme://authority` of the URL, and `scheme://Host` when the Host differs, lowercase:
    /// what an absolute `Location` of this server starts with.
    pub(crate) bases: Vec<String>,
    /// Until when (ms on the origin client's monotonic clock) a failed connect leaves it to be
    /// tried after the others ([`connect::FAIL_TIMEOUT`]), or a probe of it keeps the others
    /// away; 0: up.
    pub(crate) down_until_ms: std::sync::atomic::AtomicI64,
    /// `origin_server_down` of this server: 1 while it is marked down ([`connect::show_marks`]).
    pub(crate) down: IntGauge,
    /// Its failures' log lines, one per [`connect::FAIL_TIMEOUT`] at most.
    pub(crate) failure_log: crate::logging::Throttle,
}

/// Metric handles of one origin, resolved once.
pub(crate) struct OriginMetrics {
    /// `code` = 2xx, 3xx, 4xx, 5xx, error.
    pub(crate) requests: [IntCounter; 5],
    pub(crate) duration: Histogram,
    pub(crate) received: IntCounter,
    pub(crate) connections: IntGauge,
}

impl OriginMetrics {
    /// The counter of a response status, or of a failure (None).
    pub(crate) fn count(&self, status: Option<u16>) {
        let i = match status {
            Some(200..=299) => 0,
            Some(300..=399) => 1,
            Some(400..=499) => 2,
            Some(500..=599) => 3,
            _ => 4,
        };
        self.requests[i].inc();
    }
}

pub(crate) struct Inner {
    pub(crate) name: String,
    pub(crate) servers: Vec<Server>,
    pub(crate) tls: Option<tls::Tls>,
    pub(crate) connect_timeout: Duration,
    pub(crate) read_timeout: Duration,
    /// `pass_buffer_bytes`.
    pub(crate) pass_buffer: u64,
    /// Body bytes the body tasks of this origin hold now, and the most they may hold for
    /// read-ahead together (`max_connections` x `pass_buffer_bytes`): past it, bodies are read
    /// at their readers' pace.
    pub(crate) held: std::sync::atomic::AtomicU64,
    pub(crate) held_max: u64,
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) idle: pool::IdlePool,
    pub(crate) metrics: OriginMetrics,
    pub(crate) rt: Arc<runtime::OriginRuntime>,
    /// `origin request failed` and `origin body failed` lines, at most one a second each
    /// (an origin that resets every request would log one per request).
    pub(crate) request_failed_log: crate::logging::Throttle,
    pub(crate) body_failed_log: crate::logging::Throttle,
}

impl Inner {
    pub(crate) fn timeout(
        &self,
        server: &Server,
        what: &'static str,
        after: Duration,
    ) -> OriginError {
        OriginError::Timeout {
            origin: self.name.clone(),
            server: server.url.clone(),
            what,
            after,
        }
    }
}

impl Origin {
    fn new(
        o: &config::Origin,
        metrics: &Metrics,
        rt: Arc<runtime::OriginRuntime>,
    ) -> Result<Origin, OriginError> {
        let setup = |message: String| OriginError::Setup {
            origin: o.name.clone(),
            message,
        };
        let mut servers = Vec::new();
        let mut any_https = false;
        for s in &o.servers {
            let u = config::parse_server_url(s).map_err(setup)?;
            any_https |= u.https;
            let host_value = o.host.clone().unwrap_or_else(|| u.authority.clone());
            let host_header = http::HeaderValue::from_str(&host_value)
                .map_err(|_| setup(format!("host {host_value:?} is not a header value")))?;
            let tls_name = if u.https {
                let name = match (&o.sni, &o.host) {
                    (Some(sni), _) => sni.clone(),
                    (None, Some(h)) => config::host_without_port(h).to_string(),
                    (None, None) => u.host.clone(),
                };
                Some(ServerName::try_from(name.clone()).map_err(|_| {
                    setup(format!("TLS name {name:?} is not a DNS name or IP address"))
                })?)
            } else {
                None
            };
            let scheme = if u.https { "https" } else { "http" };
            let mut bases = vec![format!("{scheme}://{}", u.authority).to_ascii_lowercase()];
            let by_host = format!("{scheme}://{host_value}").to_ascii_lowercase();
            if by_host != bases[0] {
                bases.push(by_host);
            }
            // `http://h` and `http://h:80` are one server.
            let default_port = if u.https { ":443" } else { ":80" };
            for b in bases.clone() {
                let other = match b.strip_suffix(default_port) {
                    Some(bare) => bare.to_string(),
                    None if !has_port(&b) => format!("{b}{default_port}"),
                    None => continue,
                };
                if !bases.contains(&other) {
                    bases.push(other);
                }
            }
            servers.push(Server {
                bases,
                url: s.clone(),
                host: u.host,
                port: u.port,
                host_header,
                tls_name,
                down_until_ms: std::sync::atomic::AtomicI64::new(0),
                down: metrics
                    .origin_server_down
                    .with_label_values(&[o.name.as_str(), s.as_str()]),
                failure_log: crate::logging::Throttle::new(connect::FAIL_TIMEOUT),
            });
        }
        let tls = if any_https {
            Some(tls::Tls::new(&o.name, o.ca_file.as_deref())?)
        } else {
            None
        };
        metrics.init_origin(&o.name, &o.servers);
        let label = [o.name.as_str()];
        let codes = crate::metrics::ORIGIN_CODES.map(|c| {
            metrics
                .origin_requests_total
                .with_label_values(&[o.name.as_str(), c])
        });
        let om = OriginMetrics {
            requests: codes,
            duration: metrics
                .origin_request_duration_seconds
                .with_label_values(&label),
            received: metrics
                .origin_received_bytes_total
                .with_label_values(&label),
            connections: metrics.origin_connections.with_label_values(&label),
        };
        let inner = Arc::new(Inner {
            name: o.name.clone(),
            servers,
            tls,
            connect_timeout: Duration::from_millis(o.connect_timeout_ms),
            read_timeout: Duration::from_millis(o.read_timeout_ms),
            pass_buffer: o.pass_buffer_bytes,
            held: std::sync::atomic::AtomicU64::new(0),
            held_max: o.pass_buffer_bytes.saturating_mul(o.max_connections as u64),
            permits: Arc::new(Semaphore::new(o.max_connections)),
            idle: pool::IdlePool::new(o.max_connections),
            metrics: om,
            rt,
            request_failed_log: crate::logging::Throttle::new(Duration::from_secs(1)),
            body_failed_log: crate::logging::Throttle::new(Duration::from_secs(1)),
        });
        // `origin_server_down` as the marks are when scraped (they end by time).
        let weak = Arc::downgrade(&inner);
        metrics.on_render(move || {
            if let Some(inner) = weak.upgrade() {
                connect::show_marks(&inner);
            }
        });
        // Idle connections are closed once expired even when no request comes to take them.
        let weak = Arc::downgrade(&inner);
        inner.rt.spawn(async move {
            let mut tick = tokio::time::interval(pool::REAP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                inner.idle.reap();
            }
        });
        Ok(Origin { inner })
    }

    /// How far a passed-through body is read ahead of its client (`pass_buffer_bytes`).
    pub fn pass_buffer(&self) -> u64 {
        self.inner.pass_buffer
    }

    /// The origin's name (its metrics label).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// A `Location` as this node's clients must see it: an absolute URL on one of the origin's
    /// servers (by its address, or by the Host sent to it) becomes the path it names, which
    /// the client resolves against this node; any other value is kept (nginx
    /// `proxy_redirect default`). Without this, a directory redirect of an origin that writes
    /// absolute ones sends clients to the origin itself.
    pub fn client_location<'v>(&self, v: &'v str) -> &'v str {
        for base in self.inner.servers.iter().flat_map(|s| &s.bases) {
            let Some(head) = v.get(..base.len()) else {
                continue;
            };
            if !head.eq_ignore_ascii_case(base) {
                continue;
            }
            match &v[base.len()..] {
                "" => return "/",
                // Not `//host/...` or `/\host/...`: as a path on this node a browser reads
                // those as another site (an open redirect); kept absolute, they stay on the
                // origin. Nor a path with control characters: browsers drop tabs before
                // reading a URL, so `/<TAB>/host` is `//host` to them.
                rest if rest.starts_with('/')
                    && !rest[1..].starts_with(['/', '\\'])
                    && !rest.bytes().any(|b| b.is_ascii_control()) =>
                {
                    return rest
                }
                _ => {}
            }
        }
        v
    }

    /// Send `req` and return the response head; read the body with [`OriginResponse::chunk`].
    /// Waits for a free connection when `max_connections` are busy. Servers are tried in order
    /// while connecting fails; once a request went out it is never sent again.
    pub async fn fetch(&self, req: OriginRequest) -> Result<OriginResponse, OriginError> {
        let inner = self.inner.clone();
        let mut task = runtime::AbortOnDrop(self.inner.rt.spawn(fetch::fetch(inner, req)));
        match (&mut task.0).await {
            Ok(r) => r,
            Err(_) => Err(OriginError::Shutdown {
                origin: self.inner.name.clone(),
            }),
        }
    }

    /// Whether every server of this origin is known not to answer now: each failed a connect
    /// or left a request unanswered within the last `FAIL_TIMEOUT` (10 s), and none is due
    /// for a probe (one under way counts as down until it answers). A request that would only
    /// wait for the same timeout may answer without the origin (stale-if-error).
    pub fn all_down(&self) -> bool {
        connect::all_down(&self.inner)
    }

    /// Idle keep-alive connections now (for tests of connection reuse).
    pub fn idle_connections(&self) -> usize {
        self.inner.idle.len()
    }
}

/// Whether `scheme://authority` names a port.
fn has_port(base: &str) -> bool {
    let authority = base.split_once("://").map_or(base, |(_, a)| a);
    let after_v6 = authority
        .rsplit_once(']')
        .map_or(authority, |(_, rest)| rest);
    after_v6.contains(':')
}
