//! Process lifecycle flags shared by the workers, the signal handler and the admin endpoints:
//! listeners bound, ready, draining (and its end, the cut), and the count of open client
//! connections.
//!
//! Owns only state and the drain broadcast; it must not start or stop anything itself.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tokio::sync::futures::Notified;
use tokio::sync::{watch, Notify};

/// Shared through `Arc<Lifecycle>`.
pub struct Lifecycle {
    ready: AtomicBool,
    draining: AtomicBool,
    listeners_bound: AtomicUsize,
    connections: AtomicUsize,
    drain_tx: watch::Sender<bool>,
    drain_notify: Notify,
    /// Wakes the connections waiting for a request in their tasks: on drain, and when one of
    /// them may have to give its place (the idle set's `owe`).
    idle_notify: Notify,
    cut_tx: watch::Sender<bool>,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self::new()
    }
}

impl Lifecycle {
    pub fn new() -> Lifecycle {
        let (drain_tx, _) = watch::channel(false);
        let (cut_tx, _) = watch::channel(false);
        Lifecycle {
            ready: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            listeners_bound: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            drain_tx,
            drain_notify: Notify::new(),
            idle_notify: Notify::new(),
            cut_tx,
        }
    }

    /// True once every worker accepts connections, until draining starts.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire) && !self.is_draining()
    }

    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// True after SIGTERM/SIGINT: no new connections, in-flight responses finish.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Whether an answer written now keeps its connection: as the request asked
    /// (`keep_alive`), unless draining began (which may be while the answer was being made:
    /// asked again for each answer, when its head is written).
    pub fn keeps(&self, keep_alive: bool) -> bool {
        keep_alive && !self.is_draining()
    }

    /// Start draining (idempotent): workers stop accepting, idle connections close.
    pub fn begin_drain(&self) {
        self.draining.store(true, Ordering::Release);
        self.drain_tx.send_replace(true);
        self.drain_notify.notify_waiters();
        self.idle_notify.notify_waiters();
    }

    /// Completes when draining starts after this call (check [`Lifecycle::is_draining`] after
    /// creating it). Smaller than a [`Lifecycle::subscribe_drain`] wait: for idle connections.
    pub fn drain_notified(&self) -> Notified<'_> {
        self.drain_notify.notified()
    }

    /// Completes when draining starts or [`Lifecycle::wake_idle`] is called after this call:
    /// what a connection waiting for a request in its task waits on besides its socket.
    pub fn idle_notified(&self) -> Notified<'_> {
        self.idle_notify.notified()
    }

    /// Wake every connection waiting for a request in its task, to see whether it must close
    /// to make room (the idle set's `pay`).
    pub fn wake_idle(&self) {
        self.idle_notify.notify_waiters();
    }

    /// A receiver that changes to `true` when draining starts.
    pub fn subscribe_drain(&self) -> watch::Receiver<bool> {
        self.drain_tx.subscribe()
    }

    /// The drain's wait is over (its deadline, or a second signal): responses still in flight
    /// are to be cut now, each ending (and logging) as a client gone would.
    pub fn cut(&self) {
        self.cut_tx.send_replace(true);
    }

    /// A receiver that changes to `true` at [`Lifecycle::cut`].
    pub fn subscribe_cut(&self) -> watch::Receiver<bool> {
        self.cut_tx.subscribe()
    }

    /// Listening sockets bound (one per listener per worker).
    pub fn listeners_bound(&self) -> usize {
        self.listeners_bound.load(Ordering::Acquire)
    }

    pub fn add_listeners_bound(&self, n: usize) {
        self.listeners_bound.fetch_add(n, Ordering::AcqRel);
    }

    /// Open client connections across all workers.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Acquire)
    }

    /// Count a new connection if fewer than `max` are open; false means refuse it.
    pub fn try_add_connection(&self, max: usize) -> bool {
        let prev = self.connections.fetch_add(1, Ordering::AcqRel);
        if prev >= max {
            self.connections.fetch_sub(1, Ordering::AcqRel);
            false
        } else {
            true
        }
    }

    /// Count a new connection over `max_connections`: one waiting connection owes its place
    /// (the idle set's `owe`).
    pub fn add_connection(&self) {
        self.connections.fetch_add(1, Ordering::AcqRel);
    }

    pub fn remove_connection(&self) {
        self.connections.fetch_sub(1, Ordering::AcqRel);
    }
}
