//! One client connection: read request heads (with the header-read and keep-alive timeouts and
//! the drain signal), answer them in order (keep-alive and pipelining), count and log each
//! response, close on errors. It must not do file I/O itself nor decide responses (that is
//! [`crate::serve`]).

use crate::http::parse::{self, ParseError, Request};
use crate::http::response;
use crate::serve;
use crate::shared::Shared;
use crate::socket::Socket;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::time::{sleep_until, Instant as TokioInstant};

const READ_CHUNK: usize = 4096;

/// Why no request came.
enum NoRequest {
    /// Peer closed, read error, idle timeout or drain: close silently.
    Close,
    /// Part of a head arrived but not all of it in time: 408.
    Timeout,
    Parse(ParseError),
}

/// Decrements the open-connection count when the connection ends.
struct ConnGuard(Arc<Shared>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.lifecycle.remove_connection();
        self.0.metrics.connections_active.dec();
    }
}

/// Serve a connection until it closes. The caller already counted it in the lifecycle.
pub async fn run(shared: Arc<Shared>, sock: Socket, peer: SocketAddr) {
    let _guard = ConnGuard(shared.clone());
    let mut drain = shared.lifecycle.subscribe_drain();
    let lim = &shared.config.limits;
    let header_timeout = Duration::from_secs(lim.header_read_timeout_secs);
    let keepalive = Duration::from_secs(lim.keepalive_timeout_secs);
    let mut buf: Vec<u8> = Vec::new();
    let mut idle_timeout = header_timeout;
    loop {
        let req = read_request(
            &sock,
            &mut buf,
            lim.max_header_bytes,
            idle_timeout,
            header_timeout,
            &mut drain,
        )
        .await;
        let req = match req {
            Ok(r) => r,
            Err(e) => {
                // No request to answer: close, silently or after a 408 (head incomplete in time)
                // or the parse error's status (then read what the client still sends).
                let (status, linger) = match e {
                    NoRequest::Parse(e) => {
                        tracing::debug!(%peer, error = %e, "bad request");
                        (e.status(), true)
                    }
                    NoRequest::Timeout => (408, false),
                    NoRequest::Close => return,
                };
                let out = response::error(status, false, false, &[]);
                let _ = sock.write_all(&out, false).await;
                let len = out.len() as u64;
                record(&shared, "other", status, len, Instant::now(), peer, "-");
                if linger {
                    sock.lingering_close().await;
                }
                return;
            }
        };
        let started = Instant::now();
        shared.metrics.http_requests_in_flight.inc();
        let served = serve::respond(&shared, &sock, &req).await;
        shared.metrics.http_requests_in_flight.dec();
        record(
            &shared,
            crate::metrics::method_label(req.method.as_str()),
            served.status,
            served.bytes,
            started,
            peer,
            &req.path,
        );
        buf.drain(..req.head_len);
        if !served.keep_alive {
            // The client may still be sending (a body, more pipelined requests).
            if served.bytes > 0 && (req.has_body || !buf.is_empty()) {
                sock.lingering_close().await;
            }
            return;
        }
        idle_timeout = keepalive;
    }
}

fn record(
    shared: &Shared,
    method: &str,
    status: u16,
    bytes: u64,
    started: Instant,
    peer: SocketAddr,
    path: &str,
) {
    let m = &shared.metrics;
    m.count_response(method, status);
    let secs = started.elapsed().as_secs_f64();
    m.http_request_duration_seconds.observe(secs);
    m.http_response_bytes_total.inc_by(bytes);
    if shared.config.logging.access_log {
        tracing::info!(
            target: "access",
            %peer, method, path, status, bytes, duration_ms = secs * 1000.0,
            "request"
        );
    }
}

/// Read until `buf` starts with a complete request head.
async fn read_request(
    sock: &Socket,
    buf: &mut Vec<u8>,
    max: usize,
    idle_timeout: Duration,
    header_timeout: Duration,
    drain: &mut watch::Receiver<bool>,
) -> Result<Request, NoRequest> {
    let now = TokioInstant::now();
    let mut deadline = if buf.is_empty() {
        now + idle_timeout
    } else {
        now + header_timeout
    };
    loop {
        if !buf.is_empty() {
            if let Some(r) = parse::parse(buf, max).map_err(NoRequest::Parse)? {
                return Ok(r);
            }
        }
        let old = buf.len();
        let want = max.saturating_sub(old).clamp(1, READ_CHUNK);
        buf.resize(old + want, 0);
        let r = tokio::select! {
            r = sock.read(&mut buf[old..]) => r,
            _ = sleep_until(deadline) => {
                buf.truncate(old);
                return Err(if old == 0 { NoRequest::Close } else { NoRequest::Timeout });
            }
            _ = drain.wait_for(|d| *d), if old == 0 => {
                buf.truncate(old);
                return Err(NoRequest::Close);
            }
        };
        match r {
            Ok(0) | Err(_) => {
                buf.truncate(old);
                return Err(NoRequest::Close);
            }
            Ok(n) => {
                buf.truncate(old + n);
                if old == 0 {
                    deadline = TokioInstant::now() + header_timeout;
                }
            }
        }
    }
}
