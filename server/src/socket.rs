//! A non-blocking client socket, registered with the worker's epoll (tokio `AsyncFd`) only once
//! it has to wait: a connection whose request is there when it is accepted and whose answer fits
//! in the socket buffer is read, answered and closed without ever being registered (no
//! epoll_ctl add and delete, no readiness slot). The stream is shared through an `Arc` so that a
//! pool thread running sendfile on it keeps the descriptor open even if the connection goes away
//! meanwhile (no fd reuse race).
//!
//! Owns reads, header writes and writability waits; it must not know about HTTP.

use rustix::net::SendFlags;
use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};
use tokio::io::Interest;

type Registration = AsyncFd<Arc<TcpStream>>;

pub struct Socket {
    stream: Arc<TcpStream>,
    /// The epoll registration, made by the first wait. Until then every operation is tried
    /// directly (the socket is believed readable and writable).
    io: OnceLock<Registration>,
    /// Longest wait for the client to accept more bytes (`limits.send_timeout_secs`).
    send_timeout: Duration,
}

impl Socket {
    /// Wrap an accepted non-blocking socket (not registered yet).
    pub fn new(fd: OwnedFd, send_timeout: Duration) -> Socket {
        Socket {
            stream: Arc::new(TcpStream::from(fd)),
            io: OnceLock::new(),
            send_timeout,
        }
    }

    /// The registration, made now if there is none; must run inside the worker's runtime.
    fn registered(&self) -> io::Result<&Registration> {
        if let Some(io) = self.io.get() {
            return Ok(io);
        }
        // SAFETY: the TcpStream owns its descriptor; the Arc keeps it open (and the same) for at
        // least as long as the AsyncFd, which holds one reference.
        let io = unsafe {
            AsyncFd::register_with_interest(
                self.stream.clone(),
                Interest::READABLE | Interest::WRITABLE,
            )
        }?;
        // One task at a time uses the socket, so nothing registered it meanwhile.
        Ok(self.io.get_or_init(|| io))
    }

    /// Whether the socket is registered (has had to wait once).
    pub fn is_registered(&self) -> bool {
        self.io.get().is_some()
    }

    /// Register now (an operation would have blocked), so that the next wait can start.
    pub fn register(&self) -> io::Result<()> {
        self.registered().map(|_| ())
    }

    /// Leave the worker's epoll (deregister, if registered) and give the descriptor back, for a
    /// connection that waits elsewhere. `Err(Some(socket))`, unchanged, while a pool task still
    /// holds the stream; `Err(None)` if it could not be taken after all (the connection is then
    /// closed).
    pub fn into_fd(self) -> Result<OwnedFd, Option<Socket>> {
        // Only this socket hands out clones (`shared`; the registration holds one), so the count
        // of a socket no pool task holds stays what it is.
        let own = 1 + usize::from(self.is_registered());
        if Arc::strong_count(&self.stream) != own {
            return Err(Some(self));
        }
        let Socket { stream, io, .. } = self;
        if let Some(io) = io.into_inner() {
            drop(io.into_inner());
        }
        Arc::try_unwrap(stream).map(OwnedFd::from).map_err(|_| None)
    }

    /// The stream, for a pool task that writes to it.
    pub fn shared(&self) -> Arc<TcpStream> {
        self.stream.clone()
    }

    /// The stream, for a read or write that the caller makes after a readiness wait.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Turn Nagle's algorithm off (TCP_NODELAY), best effort.
    pub fn set_nodelay(&self) {
        let _ = rustix::net::sockopt::set_tcp_nodelay(self.stream(), true);
    }

    /// Send now what writes with MSG_MORE left waiting (a response whose last bytes were
    /// written not knowing they were the last): setting TCP_NODELAY pushes pending frames;
    /// without it they wait for the kernel's 200 ms cork timer.
    pub fn push(&self) {
        self.set_nodelay();
    }

    /// Hold partial segments until the socket closes (TCP_CORK), best effort: for an answer that
    /// ends the connection, so its head, body and FIN leave together in as few segments as the
    /// MSS allows (closing, or shutting down the write side, sends what is held at once).
    pub fn cork_until_close(&self) {
        let _ = rustix::net::sockopt::set_tcp_cork(self.stream(), true);
    }

    /// Ready once the socket is (believed) readable: at once while it never waited. The waker is
    /// kept in the socket's own registration (no waiter stored in the caller's future).
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        match self.io.get() {
            None => Poll::Ready(()),
            Some(io) => io.poll_read_ready(cx).map(|_| ()),
        }
    }

    /// Run `read` (a read of this socket) if it is believed readable; `None` when it would block
    /// (readiness is then cleared, or the socket registered, so [`Socket::poll_read_ready`]
    /// waits for the next edge).
    pub fn try_read_with<R>(&self, read: impl FnOnce() -> io::Result<R>) -> Option<io::Result<R>> {
        let r = match self.io.get() {
            Some(io) => io.try_io(Interest::READABLE, |_| read()),
            None => match read() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return self.register().err().map(Err);
                }
                r => r,
            },
        };
        match r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            r => Some(r),
        }
    }

    /// Read what is available (waits until something is). 0 = peer closed.
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.is_registered() {
            match (&*self.stream).read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return r,
            }
        }
        let io = self.registered()?;
        loop {
            let mut guard = io.readable().await?;
            match guard.try_io(|s| s.get_ref().as_ref().read(buf)) {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }

    /// Write all of `buf`; `more` sets MSG_MORE (a body follows, so the kernel may coalesce).
    /// Fails with `TimedOut` when the client accepts nothing for the send timeout.
    pub async fn write_all(&self, mut buf: &[u8], more: bool) -> io::Result<()> {
        // Most heads go out whole in one send on a socket with room: no timer for those.
        let send = |s: &TcpStream| rustix::net::send(s, buf, send_flags(more));
        let first = match self.io.get() {
            Some(io) => io.try_io(Interest::WRITABLE, |s| send(s).map_err(io::Error::from)),
            None => send(&self.stream).map_err(io::Error::from),
        };
        match first {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) if n == buf.len() => return Ok(()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        write_all_inner(self.registered()?, buf, more, self.send_timeout).await
    }

    /// End the connection with a reset instead of a FIN when it is closed: a body whose end is
    /// its connection's close (no length, no chunks) and that broke off must not look complete.
    pub fn abort(&self) {
        let _ = rustix::net::sockopt::set_socket_linger(self.stream(), Some(Duration::ZERO));
    }

    /// Close politely after a response that ends the connection while the client may still be
    /// sending (a request body, pipelined requests): shut down our side, then read and discard
    /// for a short while, so the kernel does not answer unread data with a reset that could
    /// destroy the response before the client reads it (nginx `lingering_close`).
    pub async fn lingering_close(&self) {
        if rustix::net::sockopt::socket_linger(self.stream()).ok() == Some(Some(Duration::ZERO)) {
            return; // aborted: a shutdown would send the FIN the reset replaces
        }
        let _ = rustix::net::shutdown(self.stream(), rustix::net::Shutdown::Write);
        // On the heap: only closing connections need it, and an array here would be part of every
        // connection's task.
        let mut scratch = vec![0u8; 4096];
        let mut budget = 1usize << 20;
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while budget > 0 {
                match self.read(&mut scratch).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => budget = budget.saturating_sub(n),
                }
            }
        })
        .await;
    }

    /// Wait until the socket is (believed) writable, registering it first if it never waited,
    /// failing with `TimedOut` once the client took nothing for `quiet` (see [`room`]). The
    /// guard's `clear_ready` is tick-safe: it only forgets readiness if no new edge arrived
    /// since the guard was taken.
    pub async fn writable_within(
        &self,
        quiet: Duration,
    ) -> io::Result<AsyncFdReadyGuard<'_, Arc<TcpStream>>> {
        room(self.registered()?, quiet).await
    }
}

/// Least a client must take in one `quiet` period for a wait to go on: about 1 KB/s with the
/// default 60 s (a trickle of a few bytes would otherwise hold the connection, and on a cache
/// route an origin connection, for ever).
const MIN_PROGRESS: i64 = 64 * 1024;

/// Wait for room to write, failing with `TimedOut` once the client took (nearly) nothing for
/// `quiet` (the send timeout). Taking bytes is what counts, not the kernel's wake-up: with
/// TCP_NOTSENT_LOWAT the kernel wakes a writer only once the unsent bytes fell below half the
/// mark, which a slow but steady reader may take longer than `quiet` to bring about. So the
/// send queue (SIOCOUTQ) is looked at every [`progress_tick`] of the wait, and the `quiet`
/// period starts again whenever it shrank by [`MIN_PROGRESS`] (or by all it held) since the
/// period's start. Looked at only at the period's end, the bytes the client's kernel takes
/// into its receive buffer right after a write, the application reading nothing, passed for
/// progress: a client that read nothing was dropped after twice the send timeout.
async fn room(
    io: &Registration,
    quiet: Duration,
) -> io::Result<AsyncFdReadyGuard<'_, Arc<TcpStream>>> {
    let tick = progress_tick(quiet);
    let mut mark = (send_queue(io.get_ref()), tokio::time::Instant::now());
    loop {
        if let Ok(guard) = tokio::time::timeout(tick, io.writable()).await {
            return guard;
        }
        let now = send_queue(io.get_ref());
        match (mark.0, now) {
            (Some(before), Some(after))
                if after < before && before - after >= MIN_PROGRESS.min(before) =>
            {
                mark = (now, tokio::time::Instant::now());
            }
            _ if mark.1.elapsed() >= quiet => return Err(io::ErrorKind::TimedOut.into()),
            _ => {}
        }
    }
}

/// How often a wait for room looks at the send queue: a sixteenth of the send timeout, within
/// 50 ms and 1 s (so a client that takes nothing is dropped within that much of the timeout).
/// A connection that waits longer than that costs one timer wake-up and one ioctl per tick:
/// one a second from a send timeout of 16 s (the default is 60 s), 20 a second at most.
fn progress_tick(quiet: Duration) -> Duration {
    (quiet / 16)
        .clamp(Duration::from_millis(50), Duration::from_secs(1))
        .min(quiet)
}

/// Bytes in the socket's send queue, sent or not, that the client has not acknowledged
/// (SIOCOUTQ); None when it cannot be read.
fn send_queue(s: &TcpStream) -> Option<i64> {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SIOCOUTQ is TIOCOUTQ on Linux. SAFETY: it writes one int through the pointer, which
    // outlives the call; the descriptor is open (borrowed from `s`).
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut n as *mut libc::c_int) };
    (r == 0).then_some(i64::from(n))
}

/// The rest of [`Socket::write_all`]: each wait for room may last `quiet` (the send timeout),
/// the whole write as long as the client keeps taking bytes.
async fn write_all_inner(
    io: &Registration,
    mut buf: &[u8],
    more: bool,
    quiet: Duration,
) -> io::Result<()> {
    let flags = send_flags(more);
    while !buf.is_empty() {
        let mut guard = room(io, quiet).await?;
        match guard.try_io(|s| rustix::net::send(s.get_ref(), buf, flags).map_err(io::Error::from))
        {
            Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(Ok(n)) => buf = &buf[n..],
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => continue,
        }
    }
    Ok(())
}

/// MSG_NOSIGNAL, plus MSG_MORE when a body follows (the kernel may coalesce).
fn send_flags(more: bool) -> SendFlags {
    if more {
        SendFlags::NOSIGNAL | SendFlags::MORE
    } else {
        SendFlags::NOSIGNAL
    }
}
