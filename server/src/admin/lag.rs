//! Event-loop lag probe: one periodic tick per worker, measuring how late each tick fires.
//!
//! Owns the per-worker "last tick" clocks and the observation of
//! `contentserver_event_loop_lag_seconds{worker}` / `contentserver_event_loop_stalls_total{worker}`.
//! A tick is scheduled every [`TICK_INTERVAL`]; when the worker's loop is busy running something
//! that blocks (an inline file read on a slow disk), the tick fires late and the lateness is the
//! lag — the built-in version of an eBPF funclatency histogram on the loop. `/healthz` asks
//! [`LagProbe::stale_workers`] whether every worker ticked recently.
//!
//! It must not do anything on the loop but read the clock and update metrics: the probe itself
//! must never be the cause of lag.

use crate::metrics::Metrics;
use prometheus::{Histogram, IntCounter};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often each worker's probe ticks.
pub const TICK_INTERVAL: Duration = Duration::from_millis(50);
/// A tick later than this counts as a stall.
pub const STALL_THRESHOLD: Duration = Duration::from_millis(100);
/// `/healthz` fails when a worker has not ticked for this long (its loop is not responsive).
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(5);

/// Shared state of every worker's probe. Cheap to clone.
#[derive(Clone)]
pub struct LagProbe {
    inner: Arc<Inner>,
}

struct Inner {
    /// The zero of the `last_tick` clocks.
    epoch: Instant,
    /// Per worker: microseconds since `epoch` of the last tick (0 = the probe has not started).
    last_tick_us: Vec<AtomicU64>,
    stale_after: Duration,
    metrics: Metrics,
}

/// The probe of one worker: run it on that worker's runtime ([`WorkerProbe::run`]) or call
/// [`WorkerProbe::observe`] from a hand-written loop.
pub struct WorkerProbe {
    probe: LagProbe,
    index: usize,
    lag: Histogram,
    stalls: IntCounter,
}

impl LagProbe {
    /// Probes for `workers` event-loop workers, labelled `0..workers`.
    pub fn new(metrics: &Metrics, workers: usize) -> LagProbe {
        LagProbe::with_stale_after(metrics, workers, DEFAULT_STALE_AFTER)
    }

    /// As [`LagProbe::new`] with a custom staleness bound for `/healthz`.
    pub fn with_stale_after(metrics: &Metrics, workers: usize, stale_after: Duration) -> LagProbe {
        LagProbe {
            inner: Arc::new(Inner {
                epoch: Instant::now(),
                last_tick_us: (0..workers).map(|_| AtomicU64::new(0)).collect(),
                stale_after,
                metrics: metrics.clone(),
            }),
        }
    }

    /// Number of workers probed.
    pub fn workers(&self) -> usize {
        self.inner.last_tick_us.len()
    }

    /// The probe of worker `index`, or `None` when out of range.
    pub fn worker(&self, index: usize) -> Option<WorkerProbe> {
        if index >= self.workers() {
            return None;
        }
        let w = index.to_string();
        let m = &self.inner.metrics;
        Some(WorkerProbe {
            probe: self.clone(),
            index,
            lag: m.event_loop_lag_seconds.with_label_values(&[&w]),
            stalls: m.event_loop_stalls_total.with_label_values(&[&w]),
        })
    }

    /// Workers whose probe has not ticked within the staleness bound at `now` (including those
    /// whose probe never started), with the time since their last tick (`None` = never ticked).
    pub fn stale_workers(&self, now: Instant) -> Vec<(usize, Option<Duration>)> {
        let mut stale = Vec::new();
        for (i, t) in self.inner.last_tick_us.iter().enumerate() {
            let us = t.load(Ordering::Acquire);
            if us == 0 {
                stale.push((i, None));
                continue;
            }
            let last = self.inner.epoch + Duration::from_micros(us);
            let age = now.saturating_duration_since(last);
            if age > self.inner.stale_after {
                stale.push((i, Some(age)));
            }
        }
        stale
    }

    fn record_tick(&self, index: usize, at: Instant) {
        // +1 so a tick at the very epoch is not mistaken for "never ticked".
        let us = at.saturating_duration_since(self.inner.epoch).as_micros() as u64 + 1;
        if let Some(slot) = self.inner.last_tick_us.get(index) {
            slot.store(us, Ordering::Release);
        }
    }
}

impl WorkerProbe {
    /// The worker this probe measures.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Record one tick that was due at `due` and ran at `now`; returns its lateness.
    pub fn observe(&self, due: Instant, now: Instant) -> Duration {
        let late = now.saturating_duration_since(due);
        self.lag.observe(late.as_secs_f64());
        if late > STALL_THRESHOLD {
            self.stalls.inc();
        }
        self.probe.record_tick(self.index, now);
        late
    }

    /// Tick forever on the current tokio runtime (spawn it on the worker's own runtime; on a
    /// multi-thread runtime it measures whichever thread polls it).
    pub async fn run(self) {
        let mut due = Instant::now() + TICK_INTERVAL;
        // Mark the worker alive at once, before the first tick is due.
        self.probe.record_tick(self.index, Instant::now());
        loop {
            tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
            let now = Instant::now();
            self.observe(due, now);
            due = now + TICK_INTERVAL;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> Metrics {
        Metrics::new(&["v"], 2)
    }

    /// The probe of worker `i` of `workers`, with the metrics it writes.
    fn worker(workers: usize, i: usize) -> (Metrics, WorkerProbe) {
        let m = metrics();
        let w = LagProbe::new(&m, workers).worker(i).expect("worker exists");
        (m, w)
    }

    #[test]
    fn late_tick_counts_as_stall_and_lands_in_histogram() {
        let (m, w) = worker(2, 1);
        let due = Instant::now();
        assert_eq!(
            w.observe(due, due + Duration::from_millis(5)),
            Duration::from_millis(5)
        );
        assert_eq!(m.event_loop_stalls_total.with_label_values(&["1"]).get(), 0);
        w.observe(due, due + Duration::from_millis(250));
        assert_eq!(m.event_loop_stalls_total.with_label_values(&["1"]).get(), 1);
        assert_eq!(m.event_loop_stalls_total.with_label_values(&["0"]).get(), 0);
        let h = m.event_loop_lag_seconds.with_label_values(&["1"]);
        assert_eq!(h.get_sample_count(), 2);
        assert!((h.get_sample_sum() - 0.255).abs() < 1e-9);
    }

    #[test]
    fn early_tick_is_zero_lag() {
        let (_m, w) = worker(1, 0);
        let now = Instant::now();
        assert_eq!(
            w.observe(now + Duration::from_millis(10), now),
            Duration::ZERO
        );
    }

    #[test]
    fn out_of_range_worker_is_none() {
        let probe = LagProbe::new(&metrics(), 2);
        assert!(probe.worker(2).is_none());
    }

    #[test]
    fn staleness_follows_last_tick() {
        let m = metrics();
        let probe = LagProbe::with_stale_after(&m, 2, Duration::from_millis(100));
        let now = Instant::now();
        // Nobody ticked yet: both stale, never ticked.
        assert_eq!(probe.stale_workers(now), vec![(0, None), (1, None)]);
        let w0 = probe.worker(0).expect("worker 0");
        let w1 = probe.worker(1).expect("worker 1");
        w0.observe(now, now);
        w1.observe(now, now);
        assert!(probe
            .stale_workers(now + Duration::from_millis(50))
            .is_empty());
        w1.observe(now, now + Duration::from_millis(150));
        let stale = probe.stale_workers(now + Duration::from_millis(200));
        assert_eq!(stale.len(), 1);
        assert_eq!(stale[0].0, 0);
    }

    #[test]
    fn running_probe_ticks_and_blocking_the_runtime_shows_as_lag() {
        let m = metrics();
        let probe = LagProbe::new(&m, 1);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let task = tokio::spawn(probe.worker(0).expect("worker 0").run());
            tokio::time::sleep(Duration::from_millis(120)).await;
            assert!(probe.stale_workers(Instant::now()).is_empty());
            let stalls = m.event_loop_stalls_total.with_label_values(&["0"]);
            assert_eq!(stalls.get(), 0);
            // Block the only thread of this runtime, as an inline read on a slow disk would.
            std::thread::sleep(Duration::from_millis(300));
            tokio::time::sleep(Duration::from_millis(60)).await;
            assert_eq!(stalls.get(), 1);
            let h = m.event_loop_lag_seconds.with_label_values(&["0"]);
            assert!(h.get_sample_sum() >= 0.2, "lag sum {}", h.get_sample_sum());
            task.abort();
        });
    }
}
