//! Log output via tracing: text or JSON lines on stderr, level from `logging.level` unless
//! RUST_LOG is set. Access lines use the target `access` (only when `logging.access_log`).
//!
//! Lines are handed to a writer thread (tracing-appender's non-blocking writer) and never written
//! from the thread that logs: an event loop must not wait for stderr, and stderr may be a file
//! on a busy or throttled disk (a log write that needs a block read waited on the disk for the
//! loop) or a pipe nobody drains. When [`BUFFERED_LINES`] lines wait, further lines are dropped
//! and counted ([`dropped_lines`], exported as `contentserver_log_lines_dropped_total`), rather
//! than stalling the server. Owns only the subscriber set-up; what is logged, and when, is
//! decided where it happens.

use crate::config::{LogFormat, Logging};
use std::sync::OnceLock;
use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

/// Lines waiting for the writer thread before new ones are dropped.
pub const BUFFERED_LINES: usize = 16 * 1024;

static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// Install the global subscriber (once; later calls install nothing and return `None`). Keep
/// the guard until exit: dropping it writes out the lines still waiting.
#[must_use = "dropping the guard at once stops the log writer"]
pub fn init(cfg: &Logging) -> Option<WorkerGuard> {
    // The access log is its own switch: a quieter level ("warn") does not turn it off, unless
    // the filter names the `access` target itself.
    let with_access = |spec: &str| {
        if cfg.access_log && !spec.contains("access") {
            format!("{spec},access=info")
        } else {
            spec.to_string()
        }
    };
    let from_config =
        || EnvFilter::try_new(with_access(&cfg.level)).unwrap_or_else(|_| EnvFilter::new("info"));
    let mut bad_env = None;
    let filter = match std::env::var("RUST_LOG") {
        // The rule of `logging.level`: a bare word that is no level (`warning`) would be
        // a target name to the filter and silence every line.
        Ok(v) if !v.trim().is_empty() => match crate::config::check_log_level(&v)
            .and_then(|()| EnvFilter::try_new(with_access(&v)).map_err(|e| e.to_string()))
        {
            Ok(f) => f,
            Err(e) => {
                bad_env = Some((v, e));
                from_config()
            }
        },
        _ => from_config(),
    };
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(BUFFERED_LINES)
        .thread_name("log-writer")
        .finish(std::io::stderr());
    let dropped = writer.error_counter();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false);
    let installed = match cfg.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    if installed.is_err() {
        return None;
    }
    let _ = DROPPED.set(dropped);
    if let Some((v, e)) = bad_env {
        tracing::warn!(rust_log = %v, error = %e, "RUST_LOG is not a valid filter; using logging.level");
    }
    Some(guard)
}

/// Log lines dropped so far because the writer thread was behind (0 before [`init`]).
pub fn dropped_lines() -> u64 {
    DROPPED.get().map_or(0, |c| c.dropped_lines() as u64)
}

/// True at most once per second per `slot` (a `static AtomicU64` of the call site): for log
/// lines a flood would repeat (refused connections, out of descriptors).
pub fn once_a_second(slot: &std::sync::atomic::AtomicU64) -> bool {
    use std::sync::atomic::Ordering;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let last = slot.load(Ordering::Relaxed);
    last != now
        && slot
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
}

/// A kind of log line a flood would repeat, written at most once per period with the count of
/// those left out since (the first at once).
pub struct Throttle {
    period_ms: u64,
    /// When one was last written ([`crate::clock::monotonic_ms`]; 0: never).
    last: std::sync::atomic::AtomicU64,
    left_out: std::sync::atomic::AtomicU64,
}

impl Throttle {
    pub fn new(period: std::time::Duration) -> Throttle {
        Throttle {
            period_ms: period.as_millis() as u64,
            last: Default::default(),
            left_out: Default::default(),
        }
    }

    /// `Some(lines left out since the last one written)` when this one is to be written.
    pub fn allow(&self) -> Option<u64> {
        use std::sync::atomic::Ordering;
        let now = crate::clock::monotonic_ms() as u64;
        let last = self.last.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= self.period_ms;
        if due
            && self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            Some(self.left_out.swap(0, Ordering::Relaxed))
        } else {
            self.left_out.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}
