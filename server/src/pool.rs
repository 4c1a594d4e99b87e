//! The bounded thread pool of one volume (nginx `thread_pool NAME threads=N max_queue=M`).
//!
//! Owns the pool threads, the task queue and the overflow rule: new work is admitted when a thread
//! is idle or fewer than `max_queue` tasks are already waiting; otherwise [`Pool::submit`] (or
//! [`Pool::admit`], the same check without a task) fails at once (the caller answers 503) and the
//! error log says `thread pool "NAME" queue overflow: N tasks waiting`. Work of a response already
//! admitted ([`Pool::run_continuation`]: its next body chunk) is never rejected, so a 200 is never
//! cut short by overflow; that lets the queue exceed `max_queue` by at most one task per response
//! in flight (itself bounded by `limits.max_connections`). Results return through a tokio oneshot.
//! It must not know about HTTP or files: a task is any blocking closure.

use crate::metrics::{Metrics, PoolOp};
use prometheus::{Counter, Histogram, IntCounter, IntGauge};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::oneshot;

/// How a task is admitted to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// By the overflow rule; a refusal is counted and logged (a client's 503).
    Counted,
    /// By the same rule; a refusal is neither counted nor logged (optional work).
    Quiet,
    /// Never refused (work of an admitted response, giving space back).
    Always,
}

/// The queue was full: the task was not accepted.
#[derive(Debug, thiserror::Error)]
#[error("thread pool {pool:?} queue overflow: {waiting} tasks waiting")]
pub struct Overflow {
    pub pool: String,
    pub waiting: usize,
}

/// The pool dropped an accepted task without running it (only when a task panicked).
#[derive(Debug, thiserror::Error)]
#[error("thread pool {0:?} lost a task")]
pub struct TaskLost(pub String);

/// A task: runs the work, calls `done` (the thread becomes idle again and the metrics are
/// updated), then hands the result to the waiting connection. Marking the thread idle before
/// the result is delivered means a client that sends its next request as soon as it sees a
/// response never finds the thread still "busy" with the previous one.
type Job = Box<dyn FnOnce(&mut dyn FnMut()) + Send + 'static>;

struct Queued {
    job: Job,
    op: PoolOp,
    queued_at: Instant,
}

struct State {
    queue: VecDeque<Queued>,
    /// Threads blocked waiting for work (not yet claimed by a queued task).
    idle: usize,
}

struct OpMetrics {
    tasks: IntCounter,
    duration: Histogram,
}

struct PoolMetrics {
    busy: IntGauge,
    depth: IntGauge,
    rejected: IntCounter,
    wait: Histogram,
    busy_seconds: Counter,
    ops: [OpMetrics; 3],
}

impl PoolMetrics {
    fn op(&self, op: PoolOp) -> &OpMetrics {
        match op {
            PoolOp::Open => &self.ops[0],
            PoolOp::Read => &self.ops[1],
            PoolOp::Sendfile => &self.ops[2],
        }
    }
}

struct Inner {
    name: String,
    max_queue: usize,
    state: Mutex<State>,
    work: Condvar,
    m: PoolMetrics,
    /// Per thread: up to when (µs since `epoch`) its running task's time is in
    /// `busy_seconds`; 0 while idle. Renders of the metrics bring it up to now, so a pool stuck
    /// in long tasks shows as busy while it is, not when the tasks end.
    running: Vec<AtomicU64>,
    epoch: Instant,
}

/// A handle to a running pool; cheap to clone.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

impl Pool {
    /// Start `threads` threads named `pool-NAME-i`. Metrics are the volume's series.
    pub fn start(
        name: &str,
        threads: usize,
        max_queue: usize,
        metrics: &Metrics,
    ) -> std::io::Result<Pool> {
        let v = [name];
        let op_metrics = |op: PoolOp| OpMetrics {
            tasks: metrics
                .pool_tasks_total
                .with_label_values(&[name, op.as_str()]),
            duration: metrics
                .pool_task_duration_seconds
                .with_label_values(&[name, op.as_str()]),
        };
        let m = PoolMetrics {
            busy: metrics.pool_busy_threads.with_label_values(&v),
            depth: metrics.pool_queue_depth.with_label_values(&v),
            rejected: metrics.pool_rejected_total.with_label_values(&v),
            wait: metrics.pool_queue_wait_seconds.with_label_values(&v),
            busy_seconds: metrics.pool_busy_seconds_total.with_label_values(&v),
            ops: [
                op_metrics(PoolOp::Open),
                op_metrics(PoolOp::Read),
                op_metrics(PoolOp::Sendfile),
            ],
        };
        metrics
            .pool_threads
            .with_label_values(&v)
            .set(threads as i64);
        metrics
            .pool_queue_capacity
            .with_label_values(&v)
            .set(max_queue as i64);
        let inner = Arc::new(Inner {
            name: name.to_owned(),
            max_queue,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                idle: threads.max(1),
            }),
            work: Condvar::new(),
            m,
            running: (0..threads.max(1)).map(|_| AtomicU64::new(0)).collect(),
            epoch: Instant::now(),
        });
        let weak = Arc::downgrade(&inner);
        metrics.on_render(move || {
            if let Some(inner) = weak.upgrade() {
                inner.account_running();
            }
        });
        for i in 0..threads.max(1) {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(format!("pool-{name}-{i}"))
                .spawn(move || inner.run(i))?;
        }
        Ok(Pool { inner })
    }

    /// The pool's (volume's) name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Queue `f`; the receiver yields its result. Fails at once, counting and logging the
    /// overflow, when no thread is idle and `max_queue` tasks already wait.
    pub fn submit<F, R>(&self, op: PoolOp, f: F) -> Result<oneshot::Receiver<R>, Overflow>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.enqueue(op, f, Admission::Counted)
    }

    /// [`Pool::submit`] for the server's own optional work (storing a fetched object, cache
    /// upkeep): refused by the same rule but not counted in `pool_rejected_total` nor logged as
    /// an overflow, which mean a 503 to a client; the caller does without it.
    pub fn submit_optional<F, R>(&self, op: PoolOp, f: F) -> Option<oneshot::Receiver<R>>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.enqueue(op, f, Admission::Quiet).ok()
    }

    /// The overflow check alone, for a response about to start whose work may need the pool
    /// (its open ran inline): `Err` (counted and logged like a rejected task) means answer 503.
    ///
    /// One task of slack over [`Pool::submit`]'s rule: a thread whose task just wrote a previous
    /// response's last bytes is still "busy" for a moment after the client has seen them, so a
    /// client's next request could otherwise be refused by a pool that is about to be idle.
    pub fn admit(&self) -> Result<(), Overflow> {
        match self.inner.room() {
            Ok(()) => Ok(()),
            Err(waiting) => Err(self.inner.overflow(waiting)),
        }
    }

    /// [`Pool::admit`]'s rule without counting or logging anything.
    pub fn has_room(&self) -> bool {
        self.inner.room().is_ok()
    }

    fn enqueue<F, R>(
        &self,
        op: PoolOp,
        f: F,
        admission: Admission,
    ) -> Result<oneshot::Receiver<R>, Overflow>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |done: &mut dyn FnMut()| {
            let r = f();
            done();
            // The receiver may be gone (connection closed); the result is then dropped.
            let _ = tx.send(r);
        });
        let inner = &self.inner;
        let mut st = inner.lock();
        // Tasks no idle thread is about to take: nginx's "N tasks waiting".
        let waiting = st.queue.len();
        if admission != Admission::Always && waiting >= st.idle + inner.max_queue {
            let waiting = waiting - st.idle;
            drop(st);
            return Err(match admission {
                Admission::Quiet => Overflow {
                    pool: inner.name.clone(),
                    waiting,
                },
                _ => inner.overflow(waiting),
            });
        }
        st.queue.push_back(Queued {
            job,
            op,
            queued_at: Instant::now(),
        });
        let depth = st.queue.len().saturating_sub(st.idle);
        drop(st);
        inner.m.depth.set(depth as i64);
        inner.work.notify_one();
        Ok(rx)
    }

    /// Submit and wait for the result.
    pub async fn run<F, R>(&self, op: PoolOp, f: F) -> Result<R, PoolError>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let rx = self.submit(op, f)?;
        rx.await
            .map_err(|_| PoolError::Lost(TaskLost(self.inner.name.clone())))
    }

    /// Queue work that must not be refused (work of an admitted response, or deleting files to
    /// give space back) without waiting for it; the receiver yields its result.
    pub fn submit_continuation<F, R>(
        &self,
        op: PoolOp,
        f: F,
    ) -> Result<oneshot::Receiver<R>, TaskLost>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.enqueue(op, f, Admission::Always)
            .map_err(|_| TaskLost(self.inner.name.clone()))
    }

    /// Submit work of an already admitted response (a later body chunk) and wait: never rejected.
    pub async fn run_continuation<F, R>(&self, op: PoolOp, f: F) -> Result<R, TaskLost>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let rx = self
            .enqueue(op, f, Admission::Always)
            .map_err(|_| TaskLost(self.inner.name.clone()))?;
        rx.await.map_err(|_| TaskLost(self.inner.name.clone()))
    }
}

/// Why a pool task produced no result.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error(transparent)]
    Overflow(#[from] Overflow),
    #[error(transparent)]
    Lost(#[from] TaskLost),
}

impl Inner {
    /// Admission rule (with its one task of slack): `Err(waiting)` when full.
    fn room(&self) -> Result<(), usize> {
        let st = self.lock();
        let waiting = st.queue.len();
        if waiting > st.idle + self.max_queue {
            Err(waiting - st.idle)
        } else {
            Ok(())
        }
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Bring `busy_seconds` up to now for the tasks still running (each thread's slot moves to
    /// now; the task's end adds only what came after).
    fn account_running(&self) {
        let now = self.now_us();
        for slot in &self.running {
            let since = slot.load(Ordering::Relaxed);
            if since != 0
                && now > since
                && slot
                    .compare_exchange(since, now, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                self.m.busy_seconds.inc_by((now - since) as f64 / 1e6);
            }
        }
    }

    /// Count and log one rejection (the nginx log line).
    fn overflow(&self, waiting: usize) -> Overflow {
        self.m.rejected.inc();
        tracing::error!(
            "thread pool \"{}\" queue overflow: {} tasks waiting",
            self.name,
            waiting
        );
        Overflow {
            pool: self.name.clone(),
            waiting,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a task panicked while we held it (we never do); keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A pool thread: counted idle from the start (so a pool accepts tasks as soon as
    /// [`Pool::start`] returns), busy while it runs a task.
    fn run(&self, thread: usize) {
        let slot = &self.running[thread];
        let mut st = self.lock();
        loop {
            let task = loop {
                if let Some(t) = st.queue.pop_front() {
                    st.idle -= 1;
                    let depth = st.queue.len().saturating_sub(st.idle);
                    self.m.depth.set(depth as i64);
                    break t;
                }
                st = self.work.wait(st).unwrap_or_else(|p| p.into_inner());
            };
            drop(st);
            let start = Instant::now();
            self.m
                .wait
                .observe(start.duration_since(task.queued_at).as_secs_f64());
            self.m.busy.inc();
            slot.store(self.now_us().max(1), Ordering::Relaxed);
            failpoint_stall(&self.name);
            let op = task.op;
            let mut finished = false;
            let mut done = || {
                if finished {
                    return;
                }
                finished = true;
                let secs = start.elapsed().as_secs_f64();
                let since = slot.swap(0, Ordering::Relaxed);
                let now = self.now_us();
                if since != 0 && now > since {
                    self.m.busy_seconds.inc_by((now - since) as f64 / 1e6);
                }
                let om = self.m.op(op);
                om.tasks.inc();
                om.duration.observe(secs);
                // Last: a reader that sees no busy thread sees every task counted.
                self.m.busy.dec();
                self.lock().idle += 1;
            };
            let job = task.job;
            // A panicking task must not kill the thread; its oneshot sender is dropped, so the
            // caller sees TaskLost.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&mut done))).is_err() {
                tracing::error!(pool = %self.name, "thread pool task panicked");
            }
            done();
            st = self.lock();
        }
    }
}

/// Failpoint `pool_task`: `FAILPOINTS="pool_task=return(VOLUME:MS)"` stalls every task of pool
/// VOLUME for MS milliseconds before it runs (other pools are untouched).
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
fn failpoint_stall(pool: &str) {
    fail::fail_point!("pool_task", |arg: Option<String>| {
        if let Some((vol, ms)) = arg.as_deref().and_then(|a| a.split_once(':')) {
            if vol == pool {
                if let Ok(ms) = ms.parse::<u64>() {
                    std::thread::sleep(std::time::Duration::from_millis(ms));
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Busy seconds count while a task runs (each render brings them up to now), and the task's
    /// end adds only the rest: a pool stuck in a long task reads busy, not idle, until it ends.
    #[test]
    fn busy_seconds_count_running_tasks_once() {
        let metrics = Metrics::new(&["p"], 1);
        let pool = Pool::start("p", 1, 0, &metrics).expect("start");
        let busy = || {
            metrics
                .pool_busy_seconds_total
                .with_label_values(&["p"])
                .get()
        };
        let rx = pool
            .submit(PoolOp::Open, || {
                std::thread::sleep(Duration::from_millis(600))
            })
            .expect("submitted");
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(busy(), 0.0, "nothing before a render");
        let _ = metrics.render();
        let mid = busy();
        assert!(
            (0.25..0.45).contains(&mid),
            "{mid} s busy 300 ms into a task"
        );
        rx.blocking_recv().expect("the task's result");
        let _ = metrics.render();
        let all = busy();
        assert!(
            (0.55..0.75).contains(&all),
            "{all} s busy for one 600 ms task"
        );
    }
}
