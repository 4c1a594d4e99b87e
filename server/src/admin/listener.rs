//! The admin port's connections: accepting, bounding and timing them out, then handing each
//! to hyper with the admin router.
//!
//! The admin port is what Kubernetes probes and Prometheus scrapes, and the operator exposes it
//! to the cluster, so it must neither hold descriptors for whoever connects nor stop answering
//! when the data plane uses every descriptor:
//! - at most [`MAX_CONNECTIONS`] at once: one more takes the place of the oldest that is not
//!   being answered (idle, its head unfinished, or its answer begun more than
//!   [`super::activity::ANSWER_MAX`] ago: `activity.rs`), so connections held open by whoever
//!   connects cannot keep a health probe out; when every one is being answered, it is closed
//!   at once;
//! - a request head must arrive within [`HEADER_TIMEOUT`], also between keep-alive requests
//!   (hyper's `header_read_timeout` runs while a connection is idle);
//! - a connection lives at most [`MAX_LIFETIME`]: then it ends after its current answer, and
//!   [`CLOSE_GRACE`] later whatever it does (a client that does not read its `/metrics`);
//! - one spare descriptor is held: when accept fails for want of descriptors, it is let go so
//!   that one connection can be accepted and answered (a health probe still gets its answer),
//!   and taken again afterwards; and the oldest connection not being answered is closed, so
//!   idle connections cannot hold the descriptors a probe needs.
//!
//! It knows nothing of the routes.

use super::activity::Activity;
use crate::descriptors::SpareDescriptor;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

/// Admin connections open at once.
pub const MAX_CONNECTIONS: usize = 64;
/// A request head must be complete within this (also the idle time between requests).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection is asked to close after its current answer once it is this old.
pub const MAX_LIFETIME: Duration = Duration::from_secs(120);
/// And is dropped this long after that, answered or not.
pub const CLOSE_GRACE: Duration = Duration::from_secs(10);

static LAST_EMFILE_LOG: AtomicU64 = AtomicU64::new(0);

/// The admin connections open, oldest first.
#[derive(Default)]
struct Open {
    next: u64,
    slots: VecDeque<Slot>,
}

struct Slot {
    id: u64,
    /// When it was accepted ([`super::activity::now_ms`]).
    accepted_ms: i64,
    activity: Arc<Activity>,
    task: tokio::task::AbortHandle,
}

type Table = Arc<Mutex<Open>>;

fn lock(t: &Table) -> std::sync::MutexGuard<'_, Open> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes room for one more connection: true when there is room, or the oldest connection not
/// being answered was closed for it.
fn room(t: &Table) -> bool {
    lock(t).slots.len() < MAX_CONNECTIONS || close_oldest_idle(t, 0)
}

/// A connection accepted this recently is not closed for want of descriptors: its request may
/// be there, not yet handled (under a burst of probes and scrapes, each new one closed the one
/// before).
const SETTLING_MS: i64 = 250;

/// Close the oldest connection not being answered and accepted at least `min_age_ms` ago (its
/// task aborted: its socket goes when the runtime drops the task); false when there is none.
fn close_oldest_idle(t: &Table, min_age_ms: i64) -> bool {
    let mut open = lock(t);
    let now = super::activity::now_ms();
    match open
        .slots
        .iter()
        .position(|s| now - s.accepted_ms >= min_age_ms && !s.activity.busy(now))
    {
        Some(i) => {
            if let Some(s) = open.slots.remove(i) {
                s.task.abort();
            }
            true
        }
        None => false,
    }
}

/// Start serving `stream` with `app`, in the table.
fn start(
    t: &Table,
    stream: tokio::net::TcpStream,
    app: Router,
    after: impl FnOnce() + Send + 'static,
) {
    let activity = Arc::new(Activity::default());
    let mut open = lock(t);
    let id = open.next;
    open.next += 1;
    let (table, tracked) = (t.clone(), activity.clone());
    let task = tokio::spawn(async move {
        // Leaves the table however the task ends (aborted: it left already).
        let _left = Leave { table, id };
        connection(stream, app, tracked).await;
        after();
    });
    open.slots.push_back(Slot {
        id,
        accepted_ms: super::activity::now_ms(),
        activity,
        task: task.abort_handle(),
    });
}

struct Leave {
    table: Table,
    id: u64,
}

impl Drop for Leave {
    fn drop(&mut self) {
        lock(&self.table).slots.retain(|s| s.id != self.id);
    }
}

/// Serve `app` on `listener` until `stop` resolves; connections still open then get one second
/// to finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    bound: SocketAddr,
    stop: impl std::future::Future<Output = ()>,
) {
    let table: Table = Arc::default();
    let spare = Arc::new(SpareDescriptor::new());
    tokio::pin!(stop);
    loop {
        // Taken again if it was lost (another thread got its number first).
        spare.retake();
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut stop => break,
        };
        let (stream, _) = match accepted {
            Ok(a) => a,
            Err(e) if crate::descriptors::out_of_descriptors(&e) => {
                if crate::logging::once_a_second(&LAST_EMFILE_LOG) {
                    tracing::error!(%bound, error = %e, "admin: accept failed, out of descriptors; closing idle admin connections and answering one with the spare descriptor");
                }
                // A descriptor an idle admin connection holds is worth more to the connection
                // waiting (a probe): the oldest goes, and its number is free for the next turn.
                if close_oldest_idle(&table, SETTLING_MS) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                // Let the spare go for one connection (if it is not in use already).
                if !spare.release() {
                    // In use, or lost: the top of the loop tries to take it again.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                match listener.accept().await {
                    Ok((stream, _)) if room(&table) => {
                        let spare = spare.clone();
                        start(&table, stream, app.clone(), move || spare.retake());
                    }
                    Ok(_) => spare.retake(),
                    Err(_) => {
                        spare.retake();
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                continue;
            }
            Err(e) => {
                tracing::warn!(%bound, error = %e, "admin: accept failed");
                continue;
            }
        };
        if !room(&table) {
            // Every connection is being answered: closed at once.
            drop(stream);
            continue;
        }
        start(&table, stream, app.clone(), || {});
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while !lock(&table).slots.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One admin connection, with the head timeout and the lifetime bound; `activity` says when an
/// answer of it is under way.
async fn connection(stream: tokio::net::TcpStream, app: Router, activity: Arc<Activity>) {
    let _ = stream.set_nodelay(true);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let app = super::activity::tracked(app, activity.clone());
    let io = super::activity::Tracked {
        io: stream,
        activity,
    };
    let conn = http.serve_connection(TokioIo::new(io), TowerToHyperService::new(app));
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = tokio::time::sleep(MAX_LIFETIME) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
}
