//! The bounded pool through its public API: the nginx overflow rule (idle thread or fewer than
//! max_queue waiting, else an immediate error), the error's text, and the pool metrics.

mod common;

use content_server::metrics::{Metrics, PoolOp};
use content_server::pool::Pool;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The sample `name{volume}` of the registry's exposition.
fn of_volume(m: &Metrics, name: &str, volume: &str) -> f64 {
    common::Metrics::parse(&m.render()).get(name, &[("volume", volume)])
}

/// The sample `name{op, volume}` of the registry's exposition.
fn of_op(m: &Metrics, name: &str, op: &str, volume: &str) -> f64 {
    common::Metrics::parse(&m.render()).get(name, &[("op", op), ("volume", volume)])
}

/// Tasks blocked until their gate (sender) drops, and their results.
type Blocked = (
    Vec<mpsc::Sender<()>>,
    Vec<tokio::sync::oneshot::Receiver<usize>>,
);

/// Occupy the pool's threads (and queue) with tasks blocked until the returned senders drop.
fn block(pool: &Pool, n: usize) -> Blocked {
    let mut gates = Vec::new();
    let mut results = Vec::new();
    for i in 0..n {
        let (tx, rx) = mpsc::channel::<()>();
        gates.push(tx);
        results.push(
            pool.submit(PoolOp::Open, move || {
                let _ = rx.recv();
                i
            })
            .expect("accepted"),
        );
    }
    (gates, results)
}

fn wait_busy(m: &Metrics, name: &str, busy: f64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while of_volume(m, "contentserver_pool_busy_threads", name) != busy {
        assert!(
            Instant::now() < deadline,
            "pool never reached {busy} busy threads"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A pool `name` (its own registry) with every one of its `threads` blocked: the gates that
/// release them and their results.
fn occupied(name: &str, threads: usize, max_queue: usize) -> (Metrics, Pool, Blocked) {
    let m = Metrics::new(&[name], 1);
    let pool = Pool::start(name, threads, max_queue, &m).unwrap();
    let blocked = block(&pool, threads);
    wait_busy(&m, name, threads as f64);
    (m, pool, blocked)
}

#[test]
fn max_queue_zero_rejects_when_all_threads_are_busy() {
    let (m, pool, (gates, results)) = occupied("p", 1, 0);
    let t = Instant::now();
    let err = pool.submit(PoolOp::Read, || 0usize).unwrap_err();
    assert!(t.elapsed() < Duration::from_millis(50));
    assert_eq!(err.waiting, 0);
    assert_eq!(
        err.to_string(),
        "thread pool \"p\" queue overflow: 0 tasks waiting"
    );
    assert_eq!(of_volume(&m, "contentserver_pool_rejected_total", "p"), 1.0);
    drop(gates);
    for r in results {
        assert_eq!(r.blocking_recv().unwrap(), 0);
    }
    // Idle again: accepted.
    assert_eq!(
        pool.submit(PoolOp::Read, || 7usize)
            .unwrap()
            .blocking_recv()
            .unwrap(),
        7
    );
    assert_eq!(of_volume(&m, "contentserver_pool_rejected_total", "p"), 1.0);
    assert_eq!(
        of_op(&m, "contentserver_pool_tasks_total", "open", "p"),
        1.0
    );
    assert_eq!(
        of_op(&m, "contentserver_pool_tasks_total", "read", "p"),
        1.0
    );
    assert_eq!(of_volume(&m, "contentserver_pool_threads", "p"), 1.0);
    assert_eq!(of_volume(&m, "contentserver_pool_queue_capacity", "p"), 0.0);
}

#[test]
fn max_queue_bounds_waiting_tasks() {
    let (m, pool, (gates, results)) = occupied("q", 2, 3);
    let (more_gates, more) = block(&pool, 3);
    assert_eq!(of_volume(&m, "contentserver_pool_queue_depth", "q"), 3.0);
    let err = pool.submit(PoolOp::Sendfile, || 0usize).unwrap_err();
    assert_eq!(err.waiting, 3);
    assert_eq!(of_volume(&m, "contentserver_pool_rejected_total", "q"), 1.0);
    drop(gates);
    drop(more_gates);
    let got: Vec<usize> = results
        .into_iter()
        .chain(more)
        .map(|r| r.blocking_recv().unwrap())
        .collect();
    assert_eq!(got, vec![0, 1, 0, 1, 2]);
    wait_busy(&m, "q", 0.0);
    assert_eq!(of_volume(&m, "contentserver_pool_queue_depth", "q"), 0.0);
}

#[test]
fn many_tasks_all_complete_with_metrics() {
    let m = Metrics::new(&["r"], 1);
    let pool = Pool::start("r", 4, 10_000, &m).unwrap();
    let rxs: Vec<_> = (0..1000u64)
        .map(|i| pool.submit(PoolOp::Read, move || i * 2).unwrap())
        .collect();
    let sum: u64 = rxs.into_iter().map(|r| r.blocking_recv().unwrap()).sum();
    assert_eq!(sum, 999 * 1000);
    assert_eq!(
        of_op(&m, "contentserver_pool_tasks_total", "read", "r"),
        1000.0
    );
    assert_eq!(
        of_op(
            &m,
            "contentserver_pool_task_duration_seconds_count",
            "read",
            "r"
        ),
        1000.0
    );
    assert_eq!(
        of_volume(&m, "contentserver_pool_queue_wait_seconds_count", "r"),
        1000.0
    );
}

#[test]
fn a_panicking_task_does_not_kill_the_pool() {
    let m = Metrics::new(&["s"], 1);
    let pool = Pool::start("s", 1, 4, &m).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let r = rt.block_on(pool.run(PoolOp::Open, || -> usize { panic!("task failure") }));
    assert!(r.is_err());
    let r = rt.block_on(pool.run(PoolOp::Open, || 5usize));
    assert_eq!(r.unwrap(), 5);
}

#[test]
fn a_thread_is_idle_again_before_its_result_arrives() {
    // Request/response clients submit the next task as soon as the previous result is in: with
    // one thread and max_queue 0 that must never overflow.
    let m = Metrics::new(&["t"], 1);
    let pool = Pool::start("t", 1, 0, &m).unwrap();
    for i in 0..2000usize {
        let rx = pool
            .submit(PoolOp::Sendfile, move || i)
            .unwrap_or_else(|e| panic!("task {i}: {e}"));
        assert_eq!(rx.blocking_recv().unwrap(), i);
    }
    assert_eq!(of_volume(&m, "contentserver_pool_rejected_total", "t"), 0.0);
    assert_eq!(
        of_op(&m, "contentserver_pool_tasks_total", "sendfile", "t"),
        2000.0
    );
}
