//! One client connection: read request heads (with the header-read and keep-alive timeouts and
//! the drain signal), answer them in order (keep-alive and pipelining), count and log each
//! response, close on errors. It must not do file I/O itself nor decide responses (that is
//! [`crate::serve`]). A new connection's first steps run in the accept loop's turn ([`start`]);
//! it becomes a task only when it has to wait.
//!
//! Memory: a connection waiting for a request holds only its socket, the bytes received and not
//! yet consumed (none between requests, part of a head otherwise, in a vector sized to them) and
//! a small wait (readiness through the socket's own slot, one timer, one drain waiter). Request
//! bytes are read into the worker's buffer and parsed there; everything a request needs while it
//! is answered lives in a boxed future that exists only while it is in flight (nginx likewise
//! frees its request buffers on keep-alive). A wait that stays quiet for `limits.idle_park_ms`
//! ends the task: the bare descriptor waits in the worker's idle set ([`crate::idle`]), which
//! hands it back to [`resume`] on its next bytes, so back-to-back requests never pay for it.

use crate::http::parse::{self, ParseError, Request};
use crate::http::response;
use crate::idle::{self, Waiting};
use crate::serve;
use crate::shared::Shared;
use crate::socket::Socket;
use std::cell::RefCell;
use std::future::Future;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::sync::futures::Notified;
use tokio::time::{sleep_until, Instant as TokioInstant, Sleep};

thread_local! {
    /// This worker's read buffer (`limits.max_header_bytes` long, allocated on first use).
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The sockets of this worker's responses in flight (for [`cut_in_flight`]).
    static IN_FLIGHT: RefCell<Vec<RawFd>> = const { RefCell::new(Vec::new()) };
}

/// A response in flight on this worker, listed while it is answered.
struct InFlight(RawFd);

impl InFlight {
    fn register(sock: &Socket) -> InFlight {
        let fd = sock.stream().as_raw_fd();
        IN_FLIGHT.with_borrow_mut(|v| v.push(fd));
        InFlight(fd)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.with_borrow_mut(|v| {
            if let Some(i) = v.iter().rposition(|fd| *fd == self.0) {
                v.swap_remove(i);
            }
        });
    }
}

/// Cut this worker's responses in flight (the drain's deadline passed): each connection is
/// reset at once (connect(2) to AF_UNSPEC: a reset, no FIN before it), so no cut body looks
/// complete (one whose end is its connection's close would, after a FIN), and its next write
/// fails as a vanished client's would: the response ends the same way, counted and logged with
/// what it sent. (What earlier answers on the connection left unsent goes with it; a response
/// waiting for a disk read or the origin ends when that comes, or with the process.) A socket
/// is listed only while its connection holds it open, so the descriptor is that socket.
pub fn cut_in_flight() -> usize {
    IN_FLIGHT.with_borrow(|v| {
        for &fd in v {
            // SAFETY: a descriptor this worker's connection holds open, borrowed for the call.
            let sock = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            let _ = rustix::net::connect_unspec(sock);
        }
        v.len()
    })
}

/// Why no request came.
enum NoRequest {
    /// Peer closed, read error, idle timeout or drain: close silently.
    Close,
    /// Part of a head arrived but not all of it in time: 408.
    Timeout,
    Parse(ParseError),
    /// Quiet for `limits.idle_park_ms` before its deadline (given): the connection may park.
    Park(TokioInstant),
}

/// Decrements the open-connection count when the connection ends (forgotten when it parks: the
/// idle set then owns the count).
struct ConnGuard<'a>(&'a Shared);

impl Drop for ConnGuard<'_> {
    fn drop(&mut self) {
        self.0.lifecycle.remove_connection();
        self.0.metrics.connections_active.dec();
    }
}

/// Serve a new connection until it closes (or parks). The caller already counted it in the
/// lifecycle. Its first steps run at once, in the caller's (the accept loop's) turn: on a busy
/// server the request is there by the time the connection is accepted and a small answer fits
/// in the socket buffer, so a connection that carries one request is read, answered and closed
/// without a task, a timer, a drain waiter or an epoll registration of its own. Only one that
/// has to wait becomes a task (polled again at once by the runtime, so every waker the first
/// steps left behind is replaced by the task's own).
pub fn start(shared: Arc<Shared>, sock: Socket) {
    let secs = shared.config.limits.header_read_timeout_secs;
    let until = deadline(TokioInstant::now(), Duration::from_secs(secs));
    let mut conn = Box::pin(serve(shared, sock, Vec::new(), true, until, true));
    if conn
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_pending()
    {
        tokio::spawn(conn);
    }
}

/// Take back a connection woken in the worker's idle set: register it again and serve it in a
/// fresh task on this worker, its wait going on until its deadline.
pub fn resume(shared: Arc<Shared>, w: Waiting) {
    let send_timeout = Duration::from_secs(shared.config.limits.send_timeout_secs);
    let sock = Socket::new(w.fd, send_timeout);
    let pending = w.pending.into_vec();
    tokio::spawn(serve(shared, sock, pending, w.first, w.until, true));
}

/// The connection loop. `pending`, `first` and `until` describe the wait it starts in;
/// `ready`: bytes are probably there already (try a read before waiting for readiness).
async fn serve(
    shared: Arc<Shared>,
    mut sock: Socket,
    mut pending: Vec<u8>,
    mut first: bool,
    until: TokioInstant,
    ready: bool,
) {
    let guard = ConnGuard(&shared);
    let mut wait = Some((until, ready));
    let mut park = shared.config.limits.idle_park_ms > 0;
    loop {
        let max = shared.config.limits.max_header_bytes;
        let req = match pipelined(&mut pending, max) {
            Some(r) => r,
            None => {
                let now = TokioInstant::now();
                let (until, ready) = wait.take().unwrap_or_else(|| {
                    let lim = &shared.config.limits;
                    let secs = if first || !pending.is_empty() {
                        lim.header_read_timeout_secs
                    } else {
                        lim.keepalive_timeout_secs
                    };
                    (deadline(now, Duration::from_secs(secs)), false)
                });
                ReadHead::new(&shared, &sock, &mut pending, now, until, park, ready).await
            }
        };
        if let Err(NoRequest::Park(until)) = req {
            // Quiet for `idle_park_ms`: wait in the idle set instead (no task, no registration,
            // no timer of its own). Whatever refuses gives the connection back to this task,
            // which then waits here until `until` without parking again.
            park = false;
            wait = Some((until, false));
            let fd = match sock.into_fd() {
                Ok(fd) => fd,
                Err(Some(s)) => {
                    sock = s;
                    continue;
                }
                Err(None) => return,
            };
            let w = Waiting {
                fd,
                first,
                pending: std::mem::take(&mut pending).into_boxed_slice(),
                until,
            };
            match idle::park(w) {
                Ok(()) => {
                    std::mem::forget(guard);
                    return;
                }
                Err(w) => {
                    let send_timeout = Duration::from_secs(shared.config.limits.send_timeout_secs);
                    pending = w.pending.into_vec();
                    sock = Socket::new(w.fd, send_timeout);
                    wait = Some((until, true));
                    continue;
                }
            }
        }
        // Boxed: the state of an answer exists only while it is in flight, so the task of a
        // waiting connection stays small.
        if !Box::pin(answer(&shared, &sock, req, &pending)).await {
            return;
        }
        park = shared.config.limits.idle_park_ms > 0;
        if first {
            // The connection stays for more requests: from now on small responses must not wait
            // for the previous one's acknowledgement (Nagle). Set only here, as nginx does, so a
            // connection that carries one request costs no setsockopt.
            sock.set_nodelay();
            first = false;
        }
    }
}

/// Answer what [`read_request`] gave; false when the connection must close.
async fn answer(
    shared: &Shared,
    sock: &Socket,
    req: Result<Request, NoRequest>,
    pending: &[u8],
) -> bool {
    let req = match req {
        Ok(r) => r,
        Err(e) => {
            // No request to answer: close, silently or after a 408 (head incomplete in time)
            // or the parse error's status (then read what the client still sends).
            let (status, linger) = match e {
                NoRequest::Parse(e) => {
                    tracing::debug!(peer = %Peer(sock), error = %e, "bad request");
                    (e.status(), true)
                }
                NoRequest::Timeout => (408, false),
                NoRequest::Close | NoRequest::Park(_) => return false,
            };
            // The head may be malformed past its request line: a HEAD request still gets no
            // body (RFC 9110 §9.3.2), or a client reading the next response would read it.
            let head_only = pending.trim_ascii_start().starts_with(b"HEAD ");
            let out = response::error(status, head_only, false, &[]);
            let _ = sock.write_all(&out, false).await;
            let len = out.len() as u64;
            // GET and HEAD are named (a request line fine, a header not); other tokens are not
            // known to be a method. The path of a bad head is never logged.
            let method = if head_only {
                "HEAD"
            } else if pending.trim_ascii_start().starts_with(b"GET ") {
                "GET"
            } else {
                "-"
            };
            let asked = Asked {
                method,
                path: "-",
                query: None,
                peer: None,
            };
            // A 408 took the header timeout (counted from the head's first byte, or from the
            // accept for a first request); a refused head is refused as it arrives.
            let now = Instant::now();
            let started = match status {
                408 => {
                    let secs = shared.config.limits.header_read_timeout_secs;
                    now.checked_sub(Duration::from_secs(secs)).unwrap_or(now)
                }
                _ => now,
            };
            record(shared, &asked, status, len, started, sock);
            if linger {
                sock.lingering_close().await;
            }
            return false;
        }
    };
    let started = Instant::now();
    // The peer is asked now, for the access line: once the client is gone (a download it
    // aborted), the kernel no longer knows it.
    let peer = shared
        .config
        .logging
        .access_log
        .then(|| sock.stream().peer_addr().ok())
        .flatten();
    shared.metrics.http_requests_in_flight.inc();
    let in_flight = InFlight::register(sock);
    let served = serve::respond(shared, sock, &req).await;
    drop(in_flight);
    shared.metrics.http_requests_in_flight.dec();
    let asked = Asked {
        method: req.method.as_str(),
        path: &req.path,
        query: req.query.as_deref(),
        peer,
    };
    record(shared, &asked, served.status, served.bytes, started, sock);
    if !served.keep_alive {
        // The client may still be sending (a body, more pipelined requests).
        if served.bytes > 0 && (req.has_body || !pending.is_empty()) {
            sock.lingering_close().await;
        }
        return false;
    }
    true
}

/// The client's address, asked of the kernel only when a log line shows it (not kept per
/// connection). `-` once the connection is gone.
struct Peer<'a>(&'a Socket);

impl std::fmt::Display for Peer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.stream().peer_addr() {
            Ok(a) => shown(a).fmt(f),
            Err(_) => f.write_str("-"),
        }
    }
}

/// A client of a dual-stack (`*`) listener as it is: `::ffff:10.0.0.7` is IPv4's `10.0.0.7`.
fn shown(a: std::net::SocketAddr) -> std::net::SocketAddr {
    std::net::SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// The address known at the request's start, else the socket's now.
struct PeerAt<'a>(Option<std::net::SocketAddr>, &'a Socket);

impl std::fmt::Display for PeerAt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(a) => shown(a).fmt(f),
            None => Peer(self.1).fmt(f),
        }
    }
}

/// What the access line says of the request (its method as sent, a token httparse checked;
/// `-` when no request could be read; the metrics get the bounded label of it).
struct Asked<'a> {
    method: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    /// The client's address when the request came (None: ask the socket now).
    peer: Option<std::net::SocketAddr>,
}

fn record(
    shared: &Shared,
    asked: &Asked<'_>,
    status: u16,
    bytes: u64,
    started: Instant,
    sock: &Socket,
) {
    let Asked {
        method,
        path,
        query,
        peer,
    } = *asked;
    let m = &shared.metrics;
    m.count_response(crate::metrics::method_label(method), status);
    let secs = started.elapsed().as_secs_f64();
    m.http_request_duration_seconds.observe(secs);
    m.http_response_bytes_total.inc_by(bytes);
    if shared.config.logging.access_log {
        tracing::info!(
            target: "access",
            peer = %PeerAt(peer, sock), method, path, status, bytes,
            // Microseconds, so the number prints as such (not 0.022192999999999997).
            duration_ms = (secs * 1e6).round() / 1000.0,
            // Last: the fields before it keep their places for parsers of the text lines.
            query = query.unwrap_or(""),
            "request"
        );
    }
}

/// What one read into the worker's buffer gave (a return value only, never stored: the size of
/// the request variant costs nothing while a connection waits).
#[allow(clippy::large_enum_variant)]
enum Step {
    Request(Request),
    /// Part of a head; it is in the connection's `pending` now.
    Partial,
    Closed,
}

/// Take the request at the start of `pending` if it is complete (pipelined requests), keeping
/// the bytes after it.
fn take_pending(pending: &mut Vec<u8>, max: usize) -> Result<Option<Request>, NoRequest> {
    match parse::parse(pending, max).map_err(NoRequest::Parse)? {
        Some(r) => {
            *pending = unread(&pending[r.head_len..]);
            Ok(Some(r))
        }
        None => Ok(None),
    }
}

/// The bytes to keep for the next request head: empty lines before a request line are
/// ignored (RFC 9112 §2.2; a client's stray CRLF after a request), so a connection that got
/// only those is idle (keep-alive timeout, closed on drain), not in the middle of a head (the
/// header timeout, then a 408 the client never asked for).
fn unread(rest: &[u8]) -> Vec<u8> {
    let start = rest
        .iter()
        .position(|b| !matches!(b, b'\r' | b'\n'))
        .unwrap_or(rest.len());
    rest[start..].to_vec()
}

/// One read of what the socket holds, then parsed. A connection with nothing pending reads
/// into the worker's buffer and keeps only what a complete head leaves (exactly sized). One in
/// the middle of a head has the new bytes appended to `pending`, parsed only once they may end
/// the head (an empty line among them) or fill `max`: a head trickling in costs each read its
/// own bytes, not the whole head again (a copy and a parse of it per read, quadratic in its
/// size). `WouldBlock` when there was nothing to read after all.
fn read_step(
    sock: &Socket,
    pending: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Result<Step, ParseError>> {
    SCRATCH.with_borrow_mut(|scratch| {
        if scratch.len() < max {
            scratch.resize(max, 0);
        }
        let old = pending.len();
        let n = sock
            .stream()
            .read(&mut scratch[..max.saturating_sub(old)])?;
        if n == 0 {
            return Ok(Ok(Step::Closed));
        }
        let parse_in = |got: &[u8], pending: &mut Vec<u8>| match parse::parse(got, max) {
            Ok(Some(r)) => {
                *pending = unread(&got[r.head_len..]);
                Ok(Step::Request(r))
            }
            Ok(None) => {
                *pending = unread(got);
                Ok(Step::Partial)
            }
            Err(e) => {
                // Kept for the answer: an error to a HEAD request has no body.
                *pending = got.to_vec();
                Err(e)
            }
        };
        if old == 0 {
            return Ok(parse_in(&scratch[..n], pending));
        }
        pending.extend_from_slice(&scratch[..n]);
        let fresh = &pending[old.saturating_sub(2)..];
        let may_end =
            fresh.windows(2).any(|w| w == b"\n\n") || fresh.windows(3).any(|w| w == b"\n\r\n");
        if !may_end && pending.len() < max {
            return Ok(Ok(Step::Partial));
        }
        let got = std::mem::take(pending);
        Ok(parse_in(&got, pending))
    })
}

pin_project_lite::pin_project! {
    /// Waiting for (the rest of) a request head: the socket's readiness (its waker lives in the
    /// socket's registration), one timer and, while idle, the drain (or a call to give its
    /// place at `max_connections`: [`idle::pay`]). A hand-written future so the waiting task
    /// holds little more than the timer and that waiter, both made only when it has to wait (a
    /// head that is already there costs neither).
    struct ReadHead<'a> {
        shared: &'a Shared,
        sock: &'a Socket,
        pending: &'a mut Vec<u8>,
        // When the wait started (the park time counts from it).
        since: TokioInstant,
        // The wait's deadline (keep-alive or header timeout).
        until: TokioInstant,
        // Parking allowed (`limits.idle_park_ms` > 0 and not refused before in this wait).
        park: bool,
        // The timer is at the park time (before `until`).
        parking: bool,
        // Try a read before waiting for readiness (a connection woken in the idle set).
        ready: bool,
        #[pin]
        sleep: Option<Sleep>,
        #[pin]
        drained: Option<Notified<'a>>,
        // Counted as waiting with nothing of a request received (see [`idle::owe`]).
        awaiting: Option<idle::Awaiting>,
    }
}

impl Future for ReadHead<'_> {
    type Output = Result<Request, NoRequest>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let max = this.shared.config.limits.max_header_bytes;
        loop {
            let idle = this.pending.is_empty();
            let step = if std::mem::take(this.ready) {
                match read_step(this.sock, this.pending, max) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    r => Some(r),
                }
            } else if this.sock.poll_read_ready(cx).is_ready() {
                match this
                    .sock
                    .try_read_with(|| read_step(this.sock, this.pending, max))
                {
                    None => continue,
                    r => r,
                }
            } else {
                None
            };
            match step {
                None => {}
                Some(Err(_)) | Some(Ok(Ok(Step::Closed))) => {
                    return Poll::Ready(Err(NoRequest::Close))
                }
                Some(Ok(Err(e))) => return Poll::Ready(Err(NoRequest::Parse(e))),
                Some(Ok(Ok(Step::Request(r)))) => return Poll::Ready(Ok(r)),
                Some(Ok(Ok(Step::Partial))) => {
                    // (Only empty lines, ignored: still idle.)
                    if idle && !this.pending.is_empty() {
                        // The first bytes of a head: the header timeout starts now.
                        *this.awaiting = None;
                        let secs = this.shared.config.limits.header_read_timeout_secs;
                        let now = TokioInstant::now();
                        *this.since = now;
                        *this.until = deadline(now, Duration::from_secs(secs));
                        if let Some(sleep) = this.sleep.as_mut().as_pin_mut() {
                            let (at, parking) = timer(this.shared, now, *this.until, *this.park);
                            *this.parking = parking;
                            sleep.reset(at);
                        }
                    }
                    continue;
                }
            }
            if idle {
                if this.awaiting.is_none() {
                    *this.awaiting = Some(idle::awaiting());
                }
                loop {
                    if this.drained.is_none() {
                        // Made before the flags are checked, so a drain or a call to give its
                        // place in between wakes it.
                        this.drained
                            .set(Some(this.shared.lifecycle.idle_notified()));
                    }
                    let woken = this
                        .drained
                        .as_mut()
                        .as_pin_mut()
                        .is_some_and(|d| d.poll(cx).is_ready());
                    if this.shared.lifecycle.is_draining()
                        || woken && idle::pay(this.sock.stream().as_fd())
                    {
                        return Poll::Ready(Err(NoRequest::Close));
                    }
                    if !woken {
                        break;
                    }
                    // Woken for another connection's sake: wait on.
                    this.drained.set(None);
                }
            }
            if this.sleep.is_none() {
                let (at, parking) = timer(this.shared, *this.since, *this.until, *this.park);
                *this.parking = parking;
                this.sleep.set(Some(sleep_until(at)));
            }
            let expired = this
                .sleep
                .as_mut()
                .as_pin_mut()
                .is_some_and(|s| s.poll(cx).is_ready());
            if expired {
                return Poll::Ready(Err(if *this.parking {
                    NoRequest::Park(*this.until)
                } else if idle {
                    NoRequest::Close
                } else {
                    NoRequest::Timeout
                }));
            }
            return Poll::Pending;
        }
    }
}

/// `now + d`, or about 30 years from now (tokio's own "far future") where that would overflow
/// an `Instant`: no configured duration can panic the connection's task.
fn deadline(now: TokioInstant, d: Duration) -> TokioInstant {
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 86_400))
}

/// When a wait that starts `now` and ends at `until` sets its timer: the park time when that
/// comes first.
fn timer(
    shared: &Shared,
    now: TokioInstant,
    until: TokioInstant,
    park: bool,
) -> (TokioInstant, bool) {
    let ms = shared.config.limits.idle_park_ms;
    let at = deadline(now, Duration::from_millis(ms));
    if park && at < until {
        (at, true)
    } else {
        (until, false)
    }
}

/// A complete request head already in `pending` (pipelined requests), taken out of it.
fn pipelined(pending: &mut Vec<u8>, max: usize) -> Option<Result<Request, NoRequest>> {
    if pending.is_empty() {
        return None;
    }
    take_pending(pending, max).transpose()
}

impl<'a> ReadHead<'a> {
    /// Wait until a complete request head arrived (it is taken out of `pending`), or `until`
    /// (the first request and a partly received head get `header_read_timeout_secs`, counted
    /// from the first byte; an idle keep-alive connection `keepalive_timeout_secs`, and closes
    /// silently on drain), or, with `park`, `limits.idle_park_ms` of quiet before that.
    fn new(
        shared: &'a Shared,
        sock: &'a Socket,
        pending: &'a mut Vec<u8>,
        now: TokioInstant,
        until: TokioInstant,
        park: bool,
        ready: bool,
    ) -> Self {
        ReadHead {
            shared,
            sock,
            pending,
            since: now,
            until,
            park,
            parking: false,
            ready,
            sleep: None,
            drained: None,
            awaiting: None,
        }
    }
}

#[cfg(test)]
mod deadline_tests {
    use super::*;

    #[test]
    fn a_deadline_past_the_clock_saturates_instead_of_panicking() {
        let now = TokioInstant::now();
        let far = deadline(now, Duration::from_secs(u64::MAX));
        assert!(far > now + Duration::from_secs(365 * 86_400));
        assert_eq!(
            deadline(now, Duration::from_secs(10)),
            now + Duration::from_secs(10)
        );
    }
}
