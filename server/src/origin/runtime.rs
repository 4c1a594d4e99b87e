//! The origin client's own tokio runtime: every origin socket (TCP connect, TLS, the hyper
//! connection task, body reads with their timers) lives here, whichever runtime asked.
//!
//! Callers on any runtime (the current-thread workers, a fill runtime, a test's runtime) only
//! await channel ends (a `JoinHandle`, an mpsc receiver), which need no reactor or timer of
//! their own. Dropping it never blocks (safe inside async code). It owns the runtime only; it
//! must not know what runs on it.

use std::future::Future;
use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;

/// Threads of the origin runtime: TLS and HTTP parsing for all fills.
const THREADS: usize = 2;

pub(crate) struct OriginRuntime {
    rt: Option<Runtime>,
    handle: Handle,
}

impl OriginRuntime {
    pub(crate) fn new() -> std::io::Result<OriginRuntime> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(THREADS)
            .thread_name("origin")
            .enable_all()
            .build()?;
        let handle = rt.handle().clone();
        Ok(OriginRuntime {
            rt: Some(rt),
            handle,
        })
    }

    pub(crate) fn spawn<F>(&self, f: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(f)
    }
}

impl Drop for OriginRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Aborts the task when the awaiting side goes away (a client that hung up cancels its fetch).
pub(crate) struct AbortOnDrop<T>(pub(crate) JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
