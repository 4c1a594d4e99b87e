//! Opening one origin connection: servers in order, each with `connect_timeout_ms` for DNS +
//! TCP + TLS; the next server is tried when this step failed (nothing was sent yet). A
//! server whose connect failed (or that took a request and gave no answer head: [`mark_down`],
//! called by [`super::fetch`]) is tried after the others for [`FAIL_TIMEOUT`] (nginx
//! `max_fails=1 fail_timeout=10s`), so a dead or hanging first server does not cost every new
//! connection its timeout; then one request at a time tries it again (a probe) while the
//! others keep to the next server, until one connects. When every server is down they are all
//! tried, in order. Marks are kept on a clock that wall-clock steps do not move. The hyper
//! HTTP/1.1 connection task is spawned on the origin runtime and keeps the connection gauge up
//! while it lives. It must not send requests ([`super::fetch`] does).

use super::{Inner, OriginError, Server};
use bytes::Bytes;
use http_body_util::Empty;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::net::TcpStream;

/// A new connection, ready for its first request.
pub(crate) struct Conn {
    pub(crate) sender: SendRequest<Empty<Bytes>>,
    /// Index of the server in `Inner::servers`.
    pub(crate) server: usize,
}

/// Decrements the `origin_connections` gauge when the connection is gone.
struct OpenGuard(prometheus::IntGauge);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// How long a server whose connect failed is tried after the others.
pub(crate) const FAIL_TIMEOUT: Duration = Duration::from_secs(10);

/// How much longer than its connect and read timeouts a probe of a server whose mark ended
/// keeps the other requests away from it.
const PROBE_SLACK: Duration = Duration::from_secs(1);

// Marks are kept on a monotonic clock (never 0: 0 is "up").
use crate::clock::monotonic_ms as now_ms;

/// A server's down mark now.
enum Mark {
    Up,
    Down,
    /// Its time ended (the mark's value): the next request to claim it probes the server.
    Ended(i64),
}

fn mark(inner: &Inner, i: usize, now: i64) -> Mark {
    match inner.servers[i].down_until_ms.load(Ordering::Relaxed) {
        0 => Mark::Up,
        m if m > now => Mark::Down,
        m => Mark::Ended(m),
    }
}

/// The servers in the order they are tried after `first`: in their configured order, those
/// up first; none in `skip`.
fn order(inner: &Inner, first: usize, skip: &[usize]) -> Vec<usize> {
    let now = now_ms();
    let up = |i: usize| matches!(mark(inner, i, now), Mark::Up);
    let n = inner.servers.len();
    std::iter::once(first)
        .chain((0..n).filter(|&i| i != first && up(i)))
        .chain((0..n).filter(|&i| i != first && !up(i)))
        .filter(|i| !skip.contains(i))
        .collect()
}

/// The server a request goes to now, and whether this request probes it: the first in
/// configured order that is up, or whose down mark ended and that this request claims to probe
/// (one request at a time: the others go on to the next server meanwhile, as nginx's
/// `fail_timeout` lets one request try the server; the probe must connect anew, and its answer
/// head clears the mark, [`mark_up`]); every one down: None (the caller tries the first, or
/// gives up). An idle connection to another one (kept from a
/// failover) is not reused, so traffic goes back to a server that recovered once a probe
/// connects, as nginx picks the server before the kept-alive connection.
pub(crate) fn pick(inner: &Inner) -> Option<(usize, bool)> {
    let now = now_ms();
    let probing =
        now + (inner.connect_timeout + inner.read_timeout + PROBE_SLACK).as_millis() as i64;
    for i in 0..inner.servers.len() {
        match mark(inner, i, now) {
            Mark::Up => return Some((i, false)),
            Mark::Down => {}
            Mark::Ended(m) => {
                let claimed = inner.servers[i]
                    .down_until_ms
                    .compare_exchange(m, probing, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok();
                if claimed {
                    return Some((i, true));
                }
            }
        }
    }
    None
}

/// The first server that is up (or, none, the first): one to name in an error, without
/// claiming a probe.
pub(crate) fn first_up(inner: &Inner) -> usize {
    let now = now_ms();
    (0..inner.servers.len())
        .find(|&i| matches!(mark(inner, i, now), Mark::Up))
        .unwrap_or(0)
}

/// Connect to `first` ([`pick`]'s) or else the first other server that accepts, those marked
/// down last, none in `skip` (the servers that left this request unanswered; must run on the
/// origin runtime).
pub(crate) async fn connect(
    inner: &Inner,
    first: usize,
    skip: &[usize],
) -> Result<Conn, OriginError> {
    let order = order(inner, first, skip);
    let mut last = None;
    for (n, &i) in order.iter().enumerate() {
        let server = &inner.servers[i];
        // Where a timeout caught it: a server that accepts TCP but never finishes TLS is not
        // one that could not be reached (nginx: "while SSL handshaking").
        let tls_started = std::sync::atomic::AtomicBool::new(false);
        let e = match tokio::time::timeout(
            inner.connect_timeout,
            connect_one(inner, server, &tls_started),
        )
        .await
        {
            // (Its mark, if any, ends with an answer head: [`mark_up`]. A server that takes
            // connections and never answers is not back.)
            Ok(Ok(sender)) => return Ok(Conn { sender, server: i }),
            // The node's own limit: no server is to blame, none other would do better.
            Ok(Err(e @ OriginError::NoDescriptors { .. })) => return Err(e),
            Ok(Err(e)) => e,
            Err(_) if tls_started.load(Ordering::Relaxed) => {
                inner.timeout(server, super::error::TLS_HANDSHAKE, inner.connect_timeout)
            }
            Err(_) => inner.timeout(server, "connect", inner.connect_timeout),
        };
        mark_down(inner, i, &e, n + 1 < order.len());
        last = Some(e);
    }
    Err(last.unwrap_or_else(|| OriginError::Setup {
        origin: inner.name.clone(),
        message: "no servers".into(),
    }))
}

/// Mark server `i` down for [`FAIL_TIMEOUT`] after `e` (a failed connect, or a request on a
/// new connection that got no answer head), and log it; `next`: another server is tried now.
pub(crate) fn mark_down(inner: &Inner, i: usize, e: &OriginError, next: bool) {
    let server = &inner.servers[i];
    server.down_until_ms.store(
        now_ms() + FAIL_TIMEOUT.as_millis() as i64,
        Ordering::Relaxed,
    );
    log_failure(inner, server, e, !next);
}

/// Server `i` answered a request's head: a mark it had ends (logged).
pub(crate) fn mark_up(inner: &Inner, i: usize) {
    let server = &inner.servers[i];
    if server.down_until_ms.load(Ordering::Relaxed) != 0
        && server.down_until_ms.swap(0, Ordering::Relaxed) != 0
    {
        tracing::info!(origin = %inner.name, server = %server.url, "origin server answers again");
    }
}

/// Bring each server's `origin_server_down` to its mark now (1 while marked down; called before
/// every metrics render, as marks end by time).
pub(crate) fn show_marks(inner: &Inner) {
    let now = now_ms();
    for (i, server) in inner.servers.iter().enumerate() {
        server
            .down
            .set(i64::from(matches!(mark(inner, i, now), Mark::Down)));
    }
}

/// Whether every server is marked down now, none due for a probe (one being probed counts as
/// down until its answer head): the origin is known not to answer for the moment.
pub(crate) fn all_down(inner: &Inner) -> bool {
    let now = now_ms();
    (0..inner.servers.len()).all(|i| matches!(mark(inner, i, now), Mark::Down))
}

/// Whether a server not in `unanswered` is up (not marked down): where a request those
/// servers left unanswered may go instead.
pub(crate) fn another_up(inner: &Inner, unanswered: &[usize]) -> bool {
    let now = now_ms();
    (0..inner.servers.len())
        .any(|j| !unanswered.contains(&j) && !matches!(mark(inner, j, now), Mark::Down))
}

/// Log a failed connect to `server`: the first at once, then at most one line per
/// [`FAIL_TIMEOUT`] per server with the count of those not logged since (while every server is
/// down each request tries them all: a line per server per request would flood the log).
fn log_failure(inner: &Inner, server: &Server, e: &OriginError, last: bool) {
    let Some(also) = server.failure_log.allow() else {
        return;
    };
    if last {
        tracing::warn!(origin = %inner.name, server = %server.url, error = %e, failures_not_logged = also, "origin server failed, and no other is left to try (failures of a server are logged once per 10 s)");
    } else {
        tracing::warn!(origin = %inner.name, server = %server.url, error = %e, failures_not_logged = also, "origin server failed; trying the next (this one is tried after the others for 10 s; failures of a server are logged once per 10 s)");
    }
}

async fn connect_one(
    inner: &Inner,
    server: &Server,
    tls_started: &std::sync::atomic::AtomicBool,
) -> Result<SendRequest<Empty<Bytes>>, OriginError> {
    let connect_err = |source: std::io::Error| OriginError::Connect {
        origin: inner.name.clone(),
        server: server.url.clone(),
        source,
    };
    let addrs: Vec<_> = tokio::net::lookup_host((server.host.as_str(), server.port))
        .await
        .map_err(connect_err)?
        .collect();
    let mut tcp = None;
    let mut err = std::io::Error::new(std::io::ErrorKind::NotFound, "no address for the host");
    for a in addrs {
        match TcpStream::connect(a).await {
            // Every number below the admin port's reserve is taken: out of descriptors.
            Ok(s) if crate::descriptors::in_admin_reserve(s.as_fd()) => {
                err = std::io::Error::from_raw_os_error(libc::EMFILE);
                break;
            }
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => err = e,
        }
    }
    if crate::descriptors::out_of_descriptors(&err) {
        return Err(OriginError::NoDescriptors {
            origin: inner.name.clone(),
            source: err,
        });
    }
    let tcp = tcp.ok_or_else(|| connect_err(err))?;
    let _ = tcp.set_nodelay(true);
    inner.metrics.connections.inc();
    let guard = OpenGuard(inner.metrics.connections.clone());
    match (&inner.tls, &server.tls_name) {
        (Some(tls), Some(name)) => {
            tls_started.store(true, Ordering::Relaxed);
            let stream = tls
                .connector()
                .connect(name.clone(), tcp)
                .await
                .map_err(|source| OriginError::Tls {
                    origin: inner.name.clone(),
                    server: server.url.clone(),
                    source: explained(source),
                })?;
            handshake(stream, guard, inner, server).await
        }
        _ => handshake(tcp, guard, inner, server).await,
    }
}

/// The HTTP/1.1 handshake over `io` (plain TCP or TLS); the connection task is spawned with
/// `guard`, so the gauge counts it while it lives.
async fn handshake<S>(
    io: S,
    guard: OpenGuard,
    inner: &Inner,
    server: &Server,
) -> Result<SendRequest<Empty<Bytes>>, OriginError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = http1::Builder::new()
        .max_buf_size(READ_BUFFER_MAX)
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| OriginError::Protocol {
            origin: inner.name.clone(),
            server: server.url.clone(),
            message: format!("HTTP/1.1 handshake: {e}"),
        })?;
    spawn_conn(conn, guard, inner.name.clone(), server.url.clone());
    Ok(sender)
}

fn spawn_conn<F>(conn: F, guard: OpenGuard, origin: String, server: String)
where
    F: std::future::Future<Output = hyper::Result<()>> + Send + 'static,
{
    tokio::spawn(async move {
        let _guard = guard;
        match conn.await {
            // Bytes on a connection with no request out (hyper's "unexpected message"): the
            // origin sent more than its last answer. Closed; but had they come just after the
            // next request went out, they would have been taken for its answer (HTTP/1.1
            // cannot tell them apart; nginx neither), so it is the origin's to fix: said at
            // warn, as nginx's "upstream sent more data than specified".
            Err(e) if e.to_string().contains("unexpected message") => {
                tracing::warn!(origin, server, "origin sent bytes after a complete answer, with no request out: connection closed (bytes arriving after the next request went out would be taken for its answer: fix the origin)");
            }
            Err(e) => {
                tracing::debug!(origin, server, error = %e, "origin connection closed with an error")
            }
            Ok(()) => {}
        }
    });
}

/// Most bytes hyper reads from an origin connection at once (its default is ~400 KiB): the
/// body chunks it hands out are slices of that read buffer, so each chunk held (a slow
/// client's pass-through read-ahead, a fill's unwritten tail) kept a whole buffer of up to
/// 400 KiB alive — about 2 MiB per slowly read pass-through whatever `pass_buffer_bytes` said.
/// hyper refuses a head that does not fit it, but only once a read leaves the head unfinished
/// with the buffer full, so a head a little over it passes or not by how the reads fell.
pub(crate) const READ_BUFFER_MAX: usize = 64 * 1024;

/// The most an answer's head (status line and fields) may take: well inside [`READ_BUFFER_MAX`],
/// so whether a head is refused never depends on how its reads fell (nginx: 4-8 KiB,
/// `proxy_buffer_size`).
pub(crate) const HEAD_MAX: usize = 32 * 1024;

/// Idle connections are dropped after this long (below nginx's 75 s keepalive_timeout, so the
/// origin rarely closes one just as a request goes out on it).
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A handshake error with what to do about it, where rustls' words name no remedy: a server
/// certificate that is itself a CA (`basicConstraints CA:TRUE`, what `openssl req -x509` makes
/// by default for a self-signed one) is refused even when `ca_file` holds it, where OpenSSL
/// (nginx, curl) accepts it; one whose issuer is not trusted (`UnknownIssuer`) needs its CA,
/// or a missing intermediate, in `ca_file`; one whose issuer's name is trusted but whose
/// signature is not that issuer's (`BadSignature`) is most often a self-signed certificate named
/// like a trusted one.
fn explained(e: std::io::Error) -> std::io::Error {
    let rustls_error = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    if let Some(rustls::Error::InvalidCertificate(rustls::CertificateError::BadSignature)) =
        rustls_error
    {
        return std::io::Error::new(
            e.kind(),
            format!(
                "{e}: the origin's certificate names as its issuer a CA this node trusts, but that \
                 CA did not sign it: most often a self-signed certificate whose name matches a \
                 trusted one (CN=localhost, as Debian's ssl-cert snakeoil): put the origin's own \
                 certificate (or the CA that issued it) in ca_file, under a name of its own"
            ),
        );
    }
    if let Some(rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)) =
        rustls_error
    {
        return std::io::Error::new(
            e.kind(),
            format!(
                "{e}: the origin's certificate was not issued by a CA this node trusts (the \
                 system's roots and the origin's ca_file): put the issuing CA's certificate in \
                 ca_file; a server that sends its certificate without the intermediate one needs \
                 the intermediate in ca_file too"
            ),
        );
    }
    let webpki = rustls_error.and_then(|r| match r {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(o)) => {
            o.0.downcast_ref::<webpki::Error>()
        }
        _ => None,
    });
    match webpki {
        Some(webpki::Error::CaUsedAsEndEntity) => std::io::Error::new(
            e.kind(),
            "the origin's certificate is a CA certificate (basicConstraints CA:TRUE, as `openssl \
             req -x509` makes a self-signed one by default) used as its server certificate, \
             which is refused even when ca_file holds it: issue the server certificate with \
             basicConstraints CA:FALSE (`-addext basicConstraints=critical,CA:FALSE`), or sign \
             it with a CA certificate that ca_file holds",
        ),
        _ => e,
    }
}
