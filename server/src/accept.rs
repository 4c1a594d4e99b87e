//! Listening sockets and the accept loop of one worker.
//!
//! Each worker binds its own socket per listener with SO_REUSEPORT (the kernel spreads new
//! connections across workers, as nginx `reuseport`), with TCP_DEFER_ACCEPT unless
//! `defer_accept_secs = 0` (nginx `deferred`: the kernel hands over a connection once its request
//! arrived, so it is answered in the accept loop's turn without waiting). Accept never blocks:
//! accept4 with SOCK_NONBLOCK on a non-blocking listener driven by epoll, up to
//! [`ACCEPT_BATCH`] per turn. At `limits.max_connections` (counted across all workers) an
//! eighth (1 to [`RECLAIM_BATCH`]) of the idle connections parked on this worker are closed to
//! make room (nginx reuses keep-alive connections so), or else one of those idle in their tasks
//! closes for it (taken over the limit until then: [`crate::idle::owe`]); with none idle, a new
//! connection is answered 503 at once and closed ([`unavailable`]), counted in
//! `connections_refused_total` and logged (at most once per second); so is a connection that
//! cannot be accepted for want of descriptors, which is accepted with a spare one held for that
//! and answered 503 at once. It must not parse HTTP.

use crate::bind::Target;
use crate::config::listen::ListenIp;
use crate::config::{Config, Listener};
use crate::conn;
use crate::descriptors::SpareDescriptor;
use crate::shared::Shared;
use crate::socket::Socket;
use anyhow::Context;
use rustix::io::Errno;
use rustix::net::SocketFlags;
use std::net::TcpListener;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::unix::AsyncFd;

/// Bind one non-blocking SO_REUSEPORT listening socket with `l.backlog`, TCP_DEFER_ACCEPT of
/// `l.defer_accept_secs` and TCP_NOTSENT_LOWAT of `l.notsent_lowat_bytes` when not 0 (both best
/// effort: a kernel that refuses one is logged and the listener works without it), and
/// TCP_CONGESTION of `l.congestion_control` when set (not best effort: a listener asked for an
/// algorithm the kernel lacks or refuses is an error that says which are there).
pub fn bind(t: Target, l: &Listener) -> std::io::Result<TcpListener> {
    let addr = t.addr;
    let fd = t.socket(SocketFlags::NONBLOCK | SocketFlags::CLOEXEC)?;
    rustix::net::sockopt::set_socket_reuseport(&fd, true)?;
    rustix::net::bind(&fd, &addr)?;
    if let Some(cc) = &l.congestion_control {
        set_congestion_control(&fd, cc)?;
    }
    // Set before listen(2): every connection accepted from it inherits the option.
    if l.notsent_lowat_bytes > 0 {
        // At most 1 GiB (validated).
        let lowat = u32::try_from(l.notsent_lowat_bytes).unwrap_or(u32::MAX);
        if let Err(e) = set_tcp_int(&fd, libc::TCP_NOTSENT_LOWAT, lowat) {
            tracing::warn!(addr = %addr, error = %e, "cannot set TCP_NOTSENT_LOWAT; sending without it");
        }
    }
    Ok(TcpListener::from(fd))
}

/// Start listening on a socket [`bind`] made (a connection is refused until then).
pub fn listen(sock: &TcpListener, addr: std::net::SocketAddr, l: &Listener) -> std::io::Result<()> {
    rustix::net::listen(sock, l.backlog.min(i32::MAX as u32) as i32)?;
    if l.defer_accept_secs > 0 {
        if let Err(e) = set_tcp_int(sock, libc::TCP_DEFER_ACCEPT, l.defer_accept_secs) {
            tracing::warn!(addr = %addr, error = %e, "cannot set TCP_DEFER_ACCEPT; accepting at once");
        }
    }
    Ok(())
}

/// One IPPROTO_TCP integer option.
fn set_tcp_int(fd: &impl AsRawFd, opt: libc::c_int, value: u32) -> std::io::Result<()> {
    let v = libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX);
    set_tcp_opt(fd, opt, &v.to_ne_bytes())
}

/// One IPPROTO_TCP option given as its bytes.
fn set_tcp_opt(fd: &impl AsRawFd, opt: libc::c_int, value: &[u8]) -> std::io::Result<()> {
    // SAFETY: setsockopt reads `value.len()` bytes from the pointer, on a socket we own.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            opt,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// TCP_CONGESTION `name` on a socket (accepted sockets inherit a listener's); the error names
/// the algorithms the kernel has, or allows this process, from /proc/sys/net/ipv4.
fn set_congestion_control(fd: &OwnedFd, name: &str) -> std::io::Result<()> {
    let Err(e) = set_tcp_opt(fd, libc::TCP_CONGESTION, name.as_bytes()) else {
        return Ok(());
    };
    let sysctl = |n: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{n}"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into())
    };
    let why = match e.raw_os_error() {
        Some(libc::ENOENT) => format!(
            "congestion_control = {name:?}: the kernel has no such TCP congestion control (available: {}; a module such as tcp_{name} may need loading)",
            sysctl("tcp_available_congestion_control")
        ),
        Some(libc::EPERM) => format!(
            "congestion_control = {name:?}: not allowed without CAP_NET_ADMIN (allowed: {}, net.ipv4.tcp_allowed_congestion_control)",
            sysctl("tcp_allowed_congestion_control")
        ),
        _ => format!("congestion_control = {name:?}: TCP_CONGESTION failed: {e}"),
    };
    Err(std::io::Error::new(e.kind(), why))
}

/// Fail when a socket already listens on `addr`. The workers' SO_REUSEPORT sockets would
/// otherwise join it without a word (another copy of this server, any SO_REUSEPORT program of
/// the same user) and the kernel would split the connections between the two.
fn ensure_free(t: Target) -> std::io::Result<()> {
    let fd = t.socket(SocketFlags::CLOEXEC)?;
    match rustix::net::bind(&fd, &t.addr) {
        Err(Errno::ADDRINUSE) => Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "address already in use: another socket listens on it (sharing it through SO_REUSEPORT would split the connections with that program)",
        )),
        r => r.map_err(Into::into),
    }
}

/// Every listener bound once per worker (`sockets[worker][listener]`), not accepting yet.
pub struct Bound {
    pub sockets: Vec<Vec<TcpListener>>,
    /// Each listener's address as bound (a port 0 resolved).
    targets: Vec<Target>,
}

impl Bound {
    /// Listen on every socket, and log each listener's address and settings: once the start
    /// can no longer be refused (until then, connections are refused, not queued for a start
    /// that may fail).
    pub fn listen(&self, cfg: &Config) -> anyhow::Result<()> {
        let workers = self.sockets.len();
        // Asked again, for every port before any listens: a socket that is only bound does not
        // stop another program (another copy of this server starting beside it) from binding
        // and listening there.
        for (i, (t, l)) in self.targets.iter().zip(&cfg.listeners).enumerate() {
            if l.port != 0 {
                ensure_free(*t)
                    .with_context(|| format!("cannot listen on {} (listeners[{i}])", t.addr))?;
            }
        }
        for (i, (t, l)) in self.targets.iter().zip(&cfg.listeners).enumerate() {
            for (w, socks) in self.sockets.iter().enumerate() {
                listen(&socks[i], t.addr, l).with_context(|| {
                    format!("cannot listen on {} (listeners[{i}], worker {w})", t.addr)
                })?;
            }
            tracing::info!(
                addr = %t.addr, dual_stack = t.dual, workers, backlog = l.backlog,
                defer_accept_secs = l.defer_accept_secs,
                notsent_lowat_bytes = l.notsent_lowat_bytes,
                congestion_control = l.congestion_control.as_deref().unwrap_or("(host default)"),
                "listening"
            );
        }
        Ok(())
    }
}

/// Bind every listener once per worker. A listener with port 0 gets a kernel-chosen port on
/// the first bind, which the other workers then share. A port some other socket listens on
/// already is an error ([`ensure_free`]).
pub fn bind_all(cfg: &Config, workers: usize) -> anyhow::Result<Bound> {
    let mut out: Vec<Vec<TcpListener>> = (0..workers).map(|_| Vec::new()).collect();
    let mut targets = Vec::with_capacity(cfg.listeners.len());
    for (i, l) in cfg.listeners.iter().enumerate() {
        let ip: ListenIp = l.address.parse().map_err(|_| {
            anyhow::anyhow!(
                "listeners[{i}].address {:?} is not an IP address (or *)",
                l.address
            )
        })?;
        let mut t = Target::of(ip, l.port);
        // As written (`*:80`), with the socket it means when that differs (`[::]:80`).
        let named = |t: &Target| match ip {
            ListenIp::Any => format!("{} ({})", ip.with_port(t.addr.port()), t.addr),
            ListenIp::Ip(_) => t.addr.to_string(),
        };
        if l.port != 0 {
            ensure_free(t)
                .with_context(|| format!("cannot listen on {} (listeners[{i}])", named(&t)))?;
        }
        for (w, slot) in out.iter_mut().enumerate() {
            let sock = bind(t, l).with_context(|| {
                format!(
                    "cannot listen on {} (listeners[{i}], worker {w})",
                    named(&t)
                )
            })?;
            if w == 0 {
                let port = sock
                    .local_addr()
                    .context("local_addr of a bound listener")?
                    .port();
                t = t.with_port(port);
            }
            slot.push(sock);
        }
        targets.push(t);
    }
    Ok(Bound {
        sockets: out,
        targets,
    })
}

/// Connections accepted (and started) per turn of the accept loop before it lets the worker's
/// other tasks run. Large, because with TCP_DEFER_ACCEPT the connections of a burst arrive
/// together, each with its request, and each accepted one is answered in this turn: at 64 per
/// turn the last of 10,000 keep-alive clients waited seconds behind the others' requests (ab -k
/// -c 10000: p99 3.6 s; 0.96 s at 1024, 0.42 s at 4096, 0.37 s without deferred accept). A turn
/// then lasts at most about 4096 small answers (~100 ms on a saturated core).
const ACCEPT_BATCH: usize = 4096;

static LAST_REFUSAL_LOG: AtomicU64 = AtomicU64::new(0);
static LAST_REUSE_LOG: AtomicU64 = AtomicU64::new(0);
static LAST_EMFILE_LOG: AtomicU64 = AtomicU64::new(0);
static LAST_ACCEPT_ERROR_LOG: AtomicU64 = AtomicU64::new(0);

/// Most idle connections closed at once to make room at `max_connections` (nginx: 32).
const RECLAIM_BATCH: usize = 32;

/// At `max_connections`: close idle connections of this worker parked in its idle set
/// ([`idle::reclaim`]) and take the new one's place; with none parked, take it over the limit
/// when one of this worker's connections waiting for a request in its task can close for it
/// ([`idle::owe`]; all are woken to see which); false when neither (the new one is refused).
fn make_room(shared: &Shared, max: usize) -> bool {
    let closed = crate::idle::reclaim(RECLAIM_BATCH);
    let (taken, closing) = if closed > 0 {
        (shared.lifecycle.try_add_connection(max), closed)
    } else if crate::idle::owe() {
        shared.lifecycle.wake_idle();
        shared.lifecycle.add_connection();
        (true, 1)
    } else {
        return false;
    };
    if taken && crate::logging::once_a_second(&LAST_REUSE_LOG) {
        tracing::warn!(
            max_connections = max,
            closed = closing,
            "max_connections reached: closed idle keep-alive connections to make room"
        );
    }
    taken
}

/// Held back for when accept fails for want of descriptors: let go so that the waiting
/// connection can be accepted and told 503 at once, instead of waiting in the backlog until its
/// client gives up.
static SPARE: SpareDescriptor = SpareDescriptor::new();

/// Take the spare descriptor (at start; again after each use and on each accept turn while it
/// is missing).
pub fn hold_spare_descriptor() {
    SPARE.retake();
}

/// Out of descriptors: let the spare go, accept one connection, answer it 503 and close it,
/// then take the spare again. False when there was no spare or nothing to accept.
fn refuse_with_spare(listener: &TcpListener) -> bool {
    if !SPARE.release() {
        return false;
    }
    let accepted = rustix::net::accept_with(listener.as_fd(), SocketFlags::CLOEXEC);
    let ok = match accepted {
        Ok(sock) => {
            unavailable(sock);
            true
        }
        Err(_) => false,
    };
    SPARE.retake();
    ok
}

/// Answer a connection that cannot be served (no descriptors, or `max_connections` reached)
/// `503` at once, and close it.
fn unavailable(sock: OwnedFd) {
    // Its request (there with TCP_DEFER_ACCEPT) is read first: closing a socket with unread
    // bytes sends a reset, which can overtake the 503.
    let _ = rustix::net::sockopt::set_socket_timeout(
        &sock,
        rustix::net::sockopt::Timeout::Send,
        Some(Duration::from_millis(100)),
    );
    let mut buf = [0u8; 4096];
    let n = rustix::net::recv(&sock, &mut buf, rustix::net::RecvFlags::DONTWAIT).map_or(0, |r| r.0);
    // A HEAD gets no body (its request line, if it came, says so).
    let head_only = buf[..n].starts_with(b"HEAD ");
    let out = crate::http::response::error(503, head_only, false, &[("Retry-After", "1")]);
    let _ = rustix::net::send(&sock, &out, rustix::net::SendFlags::NOSIGNAL);
    let _ = rustix::net::shutdown(&sock, rustix::net::Shutdown::Write);
}

/// Accept connections on `listener` until draining starts, starting each on the current
/// (worker) runtime ([`conn::start`]: its first steps run here, a task only if it has to wait).
/// Returning drops the listener, which closes it.
pub async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) -> anyhow::Result<()> {
    // SAFETY: the TcpListener owns its descriptor, which stays open and unchanged until the
    // AsyncFd (its only owner) is dropped.
    let afd = unsafe { AsyncFd::register(listener) }
        .map_err(std::io::Error::from)
        .context("register listener with epoll")?;
    let mut drain = shared.lifecycle.subscribe_drain();
    let max = shared.config.limits.max_connections;
    let send_timeout = Duration::from_secs(shared.config.limits.send_timeout_secs);
    loop {
        let mut guard = tokio::select! {
            g = afd.readable() => g.context("listener readiness")?,
            _ = drain.wait_for(|d| *d) => return Ok(()),
        };
        // Accept a batch, then yield so connections on this worker make progress too.
        for _ in 0..ACCEPT_BATCH {
            match rustix::net::accept_with(
                afd.get_ref().as_fd(),
                SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            ) {
                Ok(fd) if crate::descriptors::in_admin_reserve(fd.as_fd()) => {
                    // Every number below the admin port's reserve is taken: out of
                    // descriptors for the data plane.
                    if crate::logging::once_a_second(&LAST_EMFILE_LOG) {
                        tracing::error!("accept: out of descriptors (the last ones are kept for the admin port; raise RLIMIT_NOFILE or lower limits.max_connections); answering 503 while it lasts");
                    }
                    unavailable(fd);
                    shared.metrics.connections_refused_total.inc();
                }
                Ok(fd) => {
                    if !shared.lifecycle.try_add_connection(max) && !make_room(&shared, max) {
                        unavailable(fd);
                        shared.metrics.connections_refused_total.inc();
                        if crate::logging::once_a_second(&LAST_REFUSAL_LOG) {
                            tracing::warn!(
                                max_connections = max,
                                refused_total = shared.metrics.connections_refused_total.get(),
                                "connection refused: max_connections reached"
                            );
                        }
                        continue;
                    }
                    shared.metrics.connections_accepted_total.inc();
                    shared.metrics.connections_active.inc();
                    conn::start(shared.clone(), Socket::new(fd, send_timeout));
                }
                Err(Errno::AGAIN) => {
                    guard.clear_ready();
                    break;
                }
                // accept(2): these are the new connection's, to be retried like EAGAIN (network
                // errors already pending on it, a firewall's EPERM).
                Err(
                    Errno::CONNABORTED
                    | Errno::INTR
                    | Errno::PROTO
                    | Errno::NETDOWN
                    | Errno::NETUNREACH
                    | Errno::HOSTDOWN
                    | Errno::HOSTUNREACH
                    | Errno::NONET
                    | Errno::NOPROTOOPT
                    | Errno::OPNOTSUPP
                    | Errno::PERM,
                ) => continue,
                Err(e @ (Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM)) => {
                    if crate::logging::once_a_second(&LAST_EMFILE_LOG) {
                        tracing::error!(error = %e, "accept failed: out of descriptors or memory (raise RLIMIT_NOFILE or lower limits.max_connections); answering 503 while it lasts");
                    }
                    if matches!(e, Errno::MFILE | Errno::NFILE) && refuse_with_spare(afd.get_ref())
                    {
                        shared.metrics.connections_refused_total.inc();
                        continue;
                    }
                    drop(guard);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    break;
                }
                Err(e) => {
                    // Unexpected (the listener itself broken?): the readiness stays set, so
                    // without a pause this would spin and log on every turn.
                    if crate::logging::once_a_second(&LAST_ACCEPT_ERROR_LOG) {
                        tracing::error!(error = %e, "accept failed");
                    }
                    drop(guard);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    break;
                }
            }
        }
        SPARE.retake();
        tokio::task::yield_now().await;
    }
}
