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
use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};
use tokio::io::Interest;

pub struct Socket {
    io: AsyncFd<Arc<TcpStream>>,
}

impl Socket {
    /// Wrap an accepted non-blocking socket; must run inside a tokio runtime.
    pub fn new(fd: OwnedFd) -> io::Result<Socket> {
        let stream = Arc::new(TcpStream::from(fd));
        // SAFETY: the TcpStream owns its descriptor; the Arc keeps it open (and the same) for at
        // least as long as the AsyncFd, which holds one reference.
        let io = unsafe {
            AsyncFd::register_with_interest(stream, Interest::READABLE | Interest::WRITABLE)
        }?;
        Ok(Socket { io })
    }

    /// The stream, for a pool task that writes to it.
    pub fn shared(&self) -> Arc<TcpStream> {
        self.io.get_ref().clone()
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
    pub async fn write_all(&self, mut buf: &[u8], more: bool) -> io::Result<()> {
        let mut flags = SendFlags::NOSIGNAL;
        if more {
            flags |= SendFlags::MORE;
        }
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

    /// Wait until the socket is (believed) writable. The guard's `clear_ready` is tick-safe: it
    /// only forgets readiness if no new edge arrived since the guard was taken.
    pub async fn writable(&self) -> io::Result<AsyncFdReadyGuard<'_, Arc<TcpStream>>> {
        self.io.writable().await
    }
}
