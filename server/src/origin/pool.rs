//! Keep-alive reuse and the connection cap of one origin.
//!
//! `max_connections` is a semaphore of request permits: a request holds one permit from before
//! it takes a connection until its body is read to the end (or dropped). A finished connection
//! goes to a small LIFO idle list *before* its permit is released, so the next permit holder
//! finds it; a holder opens a new connection only when the list is empty. Open connections
//! therefore never exceed `max_connections`, and a fill does not pay a handshake per slice.
//! It must not open connections itself ([`super::connect`] does, for the permit holder).

use super::connect::{Conn, IDLE_TIMEOUT};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::OwnedSemaphorePermit;

/// How often the idle connections of an origin are looked over ([`IdlePool::reap`]).
pub(crate) const REAP_EVERY: Duration = Duration::from_secs(5);

/// Most idle connections kept per origin.
pub(crate) const MAX_IDLE: usize = 32;

struct Idle {
    conn: Conn,
    since: Instant,
}

/// The idle connections of one origin.
pub(crate) struct IdlePool {
    conns: Mutex<Vec<Idle>>,
    cap: usize,
}

impl IdlePool {
    pub(crate) fn new(max_connections: usize) -> IdlePool {
        IdlePool {
            conns: Mutex::new(Vec::new()),
            cap: MAX_IDLE.min(max_connections),
        }
    }

    /// The most recently used idle connection to server `server` that is still open and ready
    /// for a request. Those to other servers met on the way are closed (kept from a failover:
    /// the requests go back to the server picked now; a probe of a recovering server takes
    /// none, so the others keep theirs meanwhile).
    pub(crate) async fn take(&self, wait_ready: Duration, server: usize) -> Option<Conn> {
        loop {
            let idle = {
                let mut g = self.conns.lock().unwrap_or_else(|p| p.into_inner());
                g.pop()?
            };
            if idle.since.elapsed() >= IDLE_TIMEOUT
                || idle.conn.sender.is_closed()
                || idle.conn.server != server
            {
                continue;
            }
            let mut conn = idle.conn;
            if let Ok(Ok(())) = tokio::time::timeout(wait_ready, conn.sender.ready()).await {
                return Some(conn);
            }
        }
    }

    /// Keep a connection whose last response was read to the end (drops expired ones too).
    pub(crate) fn put(&self, conn: Conn) {
        if conn.sender.is_closed() {
            return;
        }
        let mut g = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        g.retain(|i| i.since.elapsed() < IDLE_TIMEOUT && !i.conn.sender.is_closed());
        // Full: the longest idle goes (one to a server no longer picked, say, after a
        // failover ended), the one just used stays.
        if g.len() >= self.cap && self.cap > 0 {
            g.remove(0);
        }
        if g.len() < self.cap {
            g.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }

    /// Close the idle connections that expired or that the origin closed (run every
    /// [`REAP_EVERY`], so an origin nobody asks has none left open after [`IDLE_TIMEOUT`]
    /// and a little).
    pub(crate) fn reap(&self) {
        let mut g = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        g.retain(|i| i.since.elapsed() < IDLE_TIMEOUT && !i.conn.sender.is_closed());
    }

    /// Idle connections now (tests and debugging).
    pub(crate) fn len(&self) -> usize {
        self.conns.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// What one request holds: its permit and, once it has one, its connection. Dropped without
/// [`Lease::finish`], the connection is closed (its response was not read to the end).
pub(crate) struct Lease {
    pub(crate) conn: Conn,
    pub(crate) permit: OwnedSemaphorePermit,
}

impl Lease {
    /// The response was read to the end: the connection goes idle, then the permit is freed.
    pub(crate) fn finish(self, pool: &IdlePool) {
        let Lease { conn, permit } = self;
        pool.put(conn);
        drop(permit);
    }
}
