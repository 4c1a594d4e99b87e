//! The idle set of one worker: connections waiting for a request head that stayed quiet for
//! `limits.idle_park_ms` leave their task and their tokio registration and wait here as a bare
//! descriptor. One epoll instance per worker watches them (level-triggered, so bytes that
//! arrived while a connection was being parked are reported at once), itself one tokio
//! registration; their deadlines sit in two sorted arrays (keep-alive, header: each filled in
//! deadline order, since every entry's deadline is its wait's start plus one fixed timeout)
//! under one timer for the whole set. A parked connection costs a slot (descriptor, deadline,
//! where the part of a head already received is: one buffer holds them all) and a queue entry:
//! a few dozen bytes, where a waiting task costs its state, its registration and its timer.
//!
//! A connection leaves the set on its next bytes (or the peer's close), handed back through the
//! resume function given to [`start`] to a fresh task on this worker, with its deadline; at its
//! deadline (closed silently, or handed back for its 408 when part of a head came); on drain
//! (idle ones closed, partial heads handed back to finish). It must not read, parse or answer.
//!
//! A connection waiting in its own task (quiet for less than `idle_park_ms`, or parking off) is
//! counted here while it waits with nothing of a request received ([`Awaiting`]). At
//! `max_connections` with none parked to close, a new connection is taken over the limit when
//! more of them wait than already owe a place ([`owe`]); the first of them to look next (all are
//! woken) closes to pay for it ([`pay`]), unless its request is arriving.
//!
//! Syscalls per idle transition: park = epoll_ctl DEL (tokio) + epoll_ctl ADD (here); wake =
//! one epoll_wait per batch + epoll_ctl DEL (here) + epoll_ctl ADD (tokio). Expiry is a close.

use crate::shared::Shared;
use rustix::event::epoll;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::rc::Rc;
use std::sync::Arc;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A connection waiting for (the rest of) a request head, outside any task.
pub struct Waiting {
    pub fd: OwnedFd,
    /// No request answered yet on it.
    pub first: bool,
    /// The part of a head already received (empty when idle between requests).
    pub pending: Box<[u8]>,
    /// When its wait ends: keep-alive or header timeout.
    pub until: Instant,
}

/// Hands a woken connection back to a fresh task on the current worker.
pub type Resume = fn(Arc<Shared>, Waiting);

thread_local! {
    /// This worker's set (None: not started, or parking is off).
    static SET: RefCell<Option<Rc<Set>>> = const { RefCell::new(None) };
    /// This worker's connections waiting for a request in their tasks with nothing of one
    /// received, and how many of them owe their place to connections taken over the limit.
    static AWAITING: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// Counts a connection as waiting for a request in its task while it lives (see [`owe`]).
pub struct Awaiting(());

/// Count the current connection as waiting (until the returned value is dropped).
pub fn awaiting() -> Awaiting {
    let (n, owed) = AWAITING.get();
    AWAITING.set((n + 1, owed));
    Awaiting(())
}

impl Drop for Awaiting {
    fn drop(&mut self) {
        let (n, owed) = AWAITING.get();
        let n = n.saturating_sub(1);
        // What those left cannot pay is forgiven: no connection closes for it later.
        AWAITING.set((n, owed.min(n)));
    }
}

/// At `max_connections` with no parked connection to close: whether the new connection may be
/// taken over the limit, one of this worker's connections waiting in their tasks to close for
/// it ([`pay`]) once woken. False when none is left that does not owe its place already.
pub fn owe() -> bool {
    let (n, owed) = AWAITING.get();
    if owed < n {
        AWAITING.set((n, owed + 1));
        true
    } else {
        false
    }
}

/// Whether a connection waiting for a request in its task, woken after [`owe`], must close now
/// to pay for the one taken over the limit: not when bytes of its request have arrived (it goes
/// on to read them). Only those waiting when the newcomer came are woken to pay, never the
/// newcomer itself.
pub fn pay(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    let (n, owed) = AWAITING.get();
    if owed == 0 {
        return false;
    }
    if arriving(fd) {
        return false;
    }
    AWAITING.set((n, owed - 1));
    true
}

/// Whether bytes of a request wait unread on the connection `fd` (its close or an error: no).
fn arriving(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    let mut probe = [0u8; 1];
    let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
    matches!(rustix::net::recv(fd, &mut probe, flags), Ok((k, _)) if k > 0)
}

/// Park `w` in the current worker's set; gives it back when there is no set, the server is
/// draining, or the kernel refused to watch it.
pub fn park(w: Waiting) -> Result<(), Waiting> {
    match SET.with_borrow(|s| s.clone()) {
        Some(set) if !set.shared.lifecycle.is_draining() => set.insert(w),
        _ => Err(w),
    }
}

/// Close an eighth of this worker's parked connections that wait for a request with nothing
/// of one received, at least one and at most `max` (keep-alive ones first, the longest idle
/// first), to make room for a new connection at `max_connections`: nginx's rule for reusing
/// its keep-alive connections ("worker_connections are not enough, reusing connections"). One
/// whose request bytes have just arrived is left to be woken. Returns how many were closed.
pub fn reclaim(max: usize) -> usize {
    let Some(set) = SET.with_borrow(|s| s.clone()) else {
        return 0;
    };
    let candidates: Vec<Due> = {
        let st = set.state.borrow();
        let max = (st.live / 8).clamp(1, max.max(1));
        let quiet = |d: &&Due| {
            let s = &st.slots[d.slot as usize];
            s.token == d.token && s.fd.is_some() && s.head.1 == 0
        };
        st.keepalive
            .iter()
            .filter(quiet)
            .chain(st.header.iter().filter(quiet))
            .take(max)
            .copied()
            .collect()
    };
    let mut closed = 0;
    for d in candidates {
        let Some(w) = set.take(d.slot, d.token) else {
            continue;
        };
        if arriving(w.fd.as_fd()) {
            // Its request is arriving: it goes back to be woken (or, failing that, resumed).
            if let Err(w) = set.insert(w) {
                (set.resume)(set.shared.clone(), w);
            }
        } else {
            set.close(w);
            closed += 1;
        }
    }
    closed
}

/// Create this worker's set (inside its runtime); the returned driver must run on this thread
/// for as long as the worker (the worker's own `block_on` future: the set is not `Send`).
/// Parking stays off on this worker when it fails (logged) and the driver just waits.
pub fn start(shared: Arc<Shared>, resume: Resume) -> impl std::future::Future<Output = ()> {
    let set = match Set::new(shared, resume) {
        Ok(s) => Some(Rc::new(s)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot create the idle set; idle connections keep their tasks");
            None
        }
    };
    SET.with_borrow_mut(|s| s.clone_from(&set));
    async move {
        match set {
            Some(set) => drive(set, resume).await,
            None => std::future::pending().await,
        }
    }
}

/// Where a parked connection is: its descriptor and what it resumes with.
struct Slot {
    fd: Option<OwnedFd>,
    /// Changes on every park, so a stale queue entry or event is recognised.
    token: u32,
    first: bool,
    /// Deadline in ms since the set's epoch.
    due: u64,
    /// The part of a head received, in the set's `heads` (offset, length).
    head: (u32, u32),
}

/// A deadline in a queue; stale (left in place) when its slot's token changed.
#[derive(Clone, Copy)]
struct Due {
    ms: u64,
    slot: u32,
    token: u32,
}

#[derive(Default)]
struct State {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Idle between requests: keep-alive deadlines.
    keepalive: VecDeque<Due>,
    /// No request yet, or part of a head: header-timeout deadlines.
    header: VecDeque<Due>,
    /// Occupied slots.
    live: usize,
    next_token: u32,
    /// The parts of heads of the parked connections, back to back: one allocation for all
    /// (each in its own would pin the pages of the tasks it was allocated among).
    heads: Vec<u8>,
    /// Bytes of `heads` whose connection left; compacted away when they are half of it.
    garbage: usize,
}

impl State {
    /// Take a slot's head bytes out of `heads`.
    fn take_head(&mut self, (off, len): (u32, u32)) -> Box<[u8]> {
        if len == 0 {
            return Box::default();
        }
        let (off, len) = (off as usize, len as usize);
        let out: Box<[u8]> = self.heads[off..off + len].into();
        self.garbage += len;
        if self.garbage == self.heads.len() {
            self.heads = Vec::new();
            self.garbage = 0;
        } else if self.garbage > 64 << 10 && 2 * self.garbage > self.heads.len() {
            let mut heads = Vec::with_capacity(self.heads.len() - self.garbage);
            for s in self
                .slots
                .iter_mut()
                .filter(|s| s.fd.is_some() && s.head.1 > 0)
            {
                let (o, l) = (s.head.0 as usize, s.head.1 as usize);
                s.head.0 = heads.len() as u32;
                heads.extend_from_slice(&self.heads[o..o + l]);
            }
            self.heads = heads;
            self.garbage = 0;
        }
        out
    }
}

struct Set {
    shared: Arc<Shared>,
    /// Hands a connection back to a task (see [`Resume`]).
    resume: Resume,
    epoll: AsyncFd<OwnedFd>,
    epoch: Instant,
    /// Wakes the driver when a new entry became the earliest deadline.
    rearm: Notify,
    state: RefCell<State>,
    /// Parks since the allocator was last asked to return free memory, and the last one's time.
    parks: Cell<u32>,
    last_park: Cell<Instant>,
}

/// After this many parks and [`TRIM_QUIET`] without one, the memory the parked connections'
/// tasks held is given back to the kernel (`malloc_trim`): the allocator keeps freed memory for
/// reuse, so after a burst that left thousands of connections idle their tasks would otherwise
/// stay resident. Under a steady flow of parks there is no quiet and no trim (the memory is
/// being reused anyway).
const TRIM_PARKS: u32 = 1024;
const TRIM_QUIET: std::time::Duration = std::time::Duration::from_millis(200);

/// Events taken per epoll_wait.
const BATCH: usize = 256;

impl Set {
    fn new(shared: Arc<Shared>, resume: Resume) -> std::io::Result<Set> {
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        // SAFETY: the OwnedFd owns the epoll descriptor, which stays open and unchanged until
        // the AsyncFd (its only owner) is dropped.
        let epoll = unsafe { AsyncFd::register_with_interest(ep, Interest::READABLE) }
            .map_err(std::io::Error::from)?;
        Ok(Set {
            shared,
            resume,
            epoll,
            epoch: Instant::now(),
            rearm: Notify::new(),
            state: RefCell::new(State::default()),
            parks: Cell::new(0),
            last_park: Cell::new(Instant::now()),
        })
    }

    /// ms since the epoch, rounded up (a deadline is never brought forward).
    fn ms_ceil(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.epoch);
        d.as_millis() as u64 + u64::from(!d.subsec_nanos().is_multiple_of(1_000_000))
    }

    fn ms_now(&self) -> u64 {
        Instant::now()
            .saturating_duration_since(self.epoch)
            .as_millis() as u64
    }

    fn at(&self, ms: u64) -> Instant {
        self.epoch + std::time::Duration::from_millis(ms)
    }

    fn insert(&self, w: Waiting) -> Result<(), Waiting> {
        let mut st = self.state.borrow_mut();
        let st = &mut *st;
        let slot = match st.free.pop() {
            Some(i) => i,
            None => {
                st.slots.push(Slot {
                    fd: None,
                    token: 0,
                    first: false,
                    due: 0,
                    head: (0, 0),
                });
                (st.slots.len() - 1) as u32
            }
        };
        let head = match (
            u32::try_from(st.heads.len()),
            u32::try_from(st.heads.len() + w.pending.len()),
        ) {
            (Ok(off), Ok(_)) => (off, w.pending.len() as u32),
            _ => {
                st.free.push(slot);
                return Err(w);
            }
        };
        let token = st.next_token;
        st.next_token = token.wrapping_add(1);
        let data = epoll::EventData::new_u64(u64::from(slot) | u64::from(token) << 32);
        if let Err(e) = epoll::add(self.epoll.get_ref(), &w.fd, data, epoll::EventFlags::IN) {
            tracing::debug!(error = %e, "cannot park a connection");
            st.free.push(slot);
            return Err(w);
        }
        let ms = self.ms_ceil(w.until);
        let q = if w.first || !w.pending.is_empty() {
            &mut st.header
        } else {
            &mut st.keepalive
        };
        // Almost always the back: deadlines arrive in order.
        let i = q.partition_point(|d| d.ms <= ms);
        q.insert(i, Due { ms, slot, token });
        st.slots[slot as usize] = Slot {
            fd: Some(w.fd),
            token,
            first: w.first,
            due: ms,
            head,
        };
        st.heads.extend_from_slice(&w.pending);
        st.live += 1;
        self.shared.metrics.connections_parked.inc();
        let parks = self.parks.get().saturating_add(1);
        self.parks.set(parks);
        self.last_park.set(Instant::now());
        if i == 0 || parks == TRIM_PARKS {
            self.rearm.notify_one();
        }
        Ok(())
    }

    /// Take the connection of `slot` out of the set (still open), if `token` is its park.
    fn take(&self, slot: u32, token: u32) -> Option<Waiting> {
        let mut st = self.state.borrow_mut();
        let st = &mut *st;
        let s = st.slots.get_mut(slot as usize)?;
        if s.token != token {
            return None;
        }
        let fd = s.fd.take()?;
        let _ = epoll::delete(self.epoll.get_ref(), &fd);
        let (first, due, head) = (s.first, s.due, std::mem::take(&mut s.head));
        let w = Waiting {
            fd,
            first,
            pending: st.take_head(head),
            until: self.at(due),
        };
        st.free.push(slot);
        st.live -= 1;
        self.shared.metrics.connections_parked.dec();
        // Entries of connections that left stay in the queues until their deadline: compact
        // when they outnumber the parked ones (amortised O(1) per wake).
        if st.keepalive.len() + st.header.len() > 2 * st.live + 64 {
            let slots = &st.slots;
            let current = |d: &Due| {
                let s = &slots[d.slot as usize];
                s.token == d.token && s.fd.is_some()
            };
            st.keepalive.retain(current);
            st.header.retain(current);
        }
        Some(w)
    }

    /// Close a connection taken out of the set (it is no longer counted as open).
    fn close(&self, w: Waiting) {
        drop(w.fd);
        self.shared.lifecycle.remove_connection();
        self.shared.metrics.connections_active.dec();
    }

    /// The earliest deadline still in the queues (stale entries at the fronts are dropped).
    fn next_due(&self) -> Option<u64> {
        let mut st = self.state.borrow_mut();
        let st = &mut *st;
        let mut next = None;
        for q in [&mut st.keepalive, &mut st.header] {
            while let Some(d) = q.front() {
                let s = &st.slots[d.slot as usize];
                if s.token == d.token && s.fd.is_some() {
                    next = Some(next.map_or(d.ms, |n: u64| n.min(d.ms)));
                    break;
                }
                q.pop_front();
            }
        }
        next
    }

    /// When to give freed memory back (see [`TRIM_PARKS`]), if due at all.
    fn trim_at(&self) -> Option<Instant> {
        (self.parks.get() >= TRIM_PARKS).then(|| self.last_park.get() + TRIM_QUIET)
    }

    /// Give the allocator's free memory back to the kernel once the parks stopped for a while.
    fn trim(&self) {
        if self.trim_at().is_some_and(|at| at <= Instant::now()) {
            self.parks.set(0);
            crate::memory::trim();
        }
    }

    /// Entries whose deadline passed, taken out of the set.
    fn expired(&self) -> Vec<Waiting> {
        let now = self.ms_now();
        let mut due = Vec::new();
        {
            let mut st = self.state.borrow_mut();
            let st = &mut *st;
            for q in [&mut st.keepalive, &mut st.header] {
                while q.front().is_some_and(|d| d.ms <= now) {
                    if let Some(d) = q.pop_front() {
                        due.push(d);
                    }
                }
            }
        }
        due.into_iter()
            .filter_map(|d| self.take(d.slot, d.token))
            .collect()
    }

    /// Everything in the set, taken out (drain).
    fn all(&self) -> Vec<Waiting> {
        let parked: Vec<(u32, u32)> = {
            let st = self.state.borrow();
            st.slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.fd.is_some())
                .map(|(i, s)| (i as u32, s.token))
                .collect()
        };
        parked
            .into_iter()
            .filter_map(|(slot, token)| self.take(slot, token))
            .collect()
    }

    /// A connection that leaves without new bytes: idle ones close, partial heads go back to
    /// a task (to finish, or to get their 408 when their deadline passed).
    fn settle(&self, w: Waiting, resume: Resume) {
        if w.pending.is_empty() {
            self.close(w);
        } else {
            resume(self.shared.clone(), w);
        }
    }

    /// Connections whose descriptors became readable (or hung up), taken out of the set.
    fn ready(&self, events: &mut Vec<epoll::Event>) -> std::io::Result<bool> {
        events.clear();
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        epoll::wait(
            self.epoll.get_ref(),
            rustix::buffer::spare_capacity(events),
            Some(&zero),
        )?;
        Ok(events.len() == events.capacity())
    }
}

/// The set's driver: wakes connections whose bytes arrived, ends those whose deadline passed,
/// and empties the set when draining starts.
async fn drive(set: Rc<Set>, resume: Resume) {
    let lifecycle = set.shared.lifecycle.clone();
    // Created before the flag is checked, so a drain starting in between wakes it.
    let drained = lifecycle.drain_notified();
    tokio::pin!(drained);
    let mut draining = false;
    let sleep = tokio::time::sleep_until(Instant::now());
    tokio::pin!(sleep);
    let mut events: Vec<epoll::Event> = Vec::with_capacity(BATCH);
    loop {
        if !draining && lifecycle.is_draining() {
            draining = true;
            for w in set.all() {
                set.settle(w, resume);
            }
        }
        let next = match (set.next_due().map(|ms| set.at(ms)), set.trim_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(at) = next {
            sleep.as_mut().reset(at);
        }
        tokio::select! {
            _ = &mut drained, if !draining => {}
            _ = &mut sleep, if next.is_some() => {
                for w in set.expired() {
                    set.settle(w, resume);
                }
                set.trim();
            }
            _ = set.rearm.notified() => {}
            g = set.epoll.readable() => {
                let mut guard = match g {
                    Ok(g) => g,
                    Err(e) => {
                        // Not expected; the worker must go on serving its other connections,
                        // and the parked ones go back to tasks of their own (nothing would
                        // wake, expire or close them here any more).
                        tracing::error!(error = %e, "idle set readiness failed; parking stops");
                        SET.with_borrow_mut(|s| *s = None);
                        for w in set.all() {
                            resume(set.shared.clone(), w);
                        }
                        return std::future::pending().await;
                    }
                };
                let more = match set.ready(&mut events) {
                    Ok(more) => more,
                    Err(e) => {
                        tracing::error!(error = %e, "idle set epoll_wait failed");
                        false
                    }
                };
                if !more {
                    // Tick-safe: only forgets readiness if no new event came since the guard.
                    guard.clear_ready();
                }
                drop(guard);
                for e in &events {
                    let data = { e.data }.u64();
                    if let Some(w) = set.take(data as u32, (data >> 32) as u32) {
                        resume(set.shared.clone(), w);
                    }
                }
            }
        }
    }
}
