//! A non-blocking client socket registered with the worker's epoll (tokio `AsyncFd`), shared
//! through an `Arc` so that a pool thread running sendfile on it keeps the descriptor open even
//! if the connection goes away meanwhile (no fd reuse race).
//!
//! Owns reads, header writes and writability waits; it must not know about HTTP.

use rustix::net::SendFlags;
use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};
use tokio::io::Interest;

pub struct Socket {
    io: AsyncFd<Arc<TcpStream>>,
    /// Longest wait for the client to accept more bytes (`limits.send_timeout_secs`).
    send_timeout: Duration,
}

impl Socket {
    /// Wrap an accepted non-blocking socket; must run inside a tokio runtime.
    pub fn new(fd: OwnedFd, send_timeout: Duration) -> io::Result<Socket> {
        let stream = Arc::new(TcpStream::from(fd));
        // SAFETY: the TcpStream owns its descriptor; the Arc keeps it open (and the same) for at
        // least as long as the AsyncFd, which holds one reference.
        let io = unsafe {
            AsyncFd::register_with_interest(stream, Interest::READABLE | Interest::WRITABLE)
        }?;
        Ok(Socket { io, send_timeout })
    }

    /// Leave the worker's epoll (deregister) and give the descriptor back, for a connection that
    /// waits elsewhere. `Err(Some(socket))`, unchanged, while a pool task still holds the stream;
    /// `Err(None)` if it could not be taken after all (the connection is then closed).
    pub fn into_fd(self) -> Result<OwnedFd, Option<Socket>> {
        // Only this socket hands out clones (`shared`), so a count of 1 stays 1.
        if Arc::strong_count(self.io.get_ref()) != 1 {
            return Err(Some(self));
        }
        Arc::try_unwrap(self.io.into_inner())
            .map(OwnedFd::from)
            .map_err(|_| None)
    }

    /// The stream, for a pool task that writes to it.
    pub fn shared(&self) -> Arc<TcpStream> {
        self.io.get_ref().clone()
    }

    /// The stream, for a read or write that the caller makes after a readiness wait.
    pub fn stream(&self) -> &TcpStream {
        self.io.get_ref()
    }

    /// Turn Nagle's algorithm off (TCP_NODELAY), best effort.
    pub fn set_nodelay(&self) {
        let _ = rustix::net::sockopt::set_tcp_nodelay(self.stream(), true);
    }

    /// Ready once the socket is (believed) readable. The waker is kept in the socket's own
    /// registration (no waiter stored in the caller's future).
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.io.poll_read_ready(cx).map(|_| ())
    }

    /// Run `read` (a read of this socket) if it is believed readable; `None` when it would block
    /// (readiness is then cleared, so [`Socket::poll_read_ready`] waits for the next edge).
    pub fn try_read_with<R>(&self, read: impl FnOnce() -> io::Result<R>) -> Option<io::Result<R>> {
        match self.io.try_io(Interest::READABLE, |_| read()) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            r => Some(r),
        }
    }

    /// Read what is available (waits until something is). 0 = peer closed.
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.io.readable().await?;
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
        match self.io.try_io(Interest::WRITABLE, |s| {
            rustix::net::send(s, buf, send_flags(more)).map_err(io::Error::from)
        }) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) if n == buf.len() => return Ok(()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        match tokio::time::timeout(self.send_timeout, self.write_all_inner(buf, more)).await {
            Ok(r) => r,
            Err(_) => Err(io::ErrorKind::TimedOut.into()),
        }
    }

    async fn write_all_inner(&self, mut buf: &[u8], more: bool) -> io::Result<()> {
        let flags = send_flags(more);
        while !buf.is_empty() {
            let mut guard = self.io.writable().await?;
            match guard
                .try_io(|s| rustix::net::send(s.get_ref(), buf, flags).map_err(io::Error::from))
            {
                Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(Ok(n)) => buf = &buf[n..],
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Close politely after a response that ends the connection while the client may still be
    /// sending (a request body, pipelined requests): shut down our side, then read and discard
    /// for a short while, so the kernel does not answer unread data with a reset that could
    /// destroy the response before the client reads it (nginx `lingering_close`).
    pub async fn lingering_close(&self) {
        let _ = rustix::net::shutdown(self.io.get_ref().as_ref(), rustix::net::Shutdown::Write);
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

    /// Wait until the socket is (believed) writable. The guard's `clear_ready` is tick-safe: it
    /// only forgets readiness if no new edge arrived since the guard was taken.
    pub async fn writable(&self) -> io::Result<AsyncFdReadyGuard<'_, Arc<TcpStream>>> {
        self.io.writable().await
    }
}

/// MSG_NOSIGNAL, plus MSG_MORE when a body follows (the kernel may coalesce).
fn send_flags(more: bool) -> SendFlags {
    if more {
        SendFlags::NOSIGNAL | SendFlags::MORE
    } else {
        SendFlags::NOSIGNAL
    }
}
