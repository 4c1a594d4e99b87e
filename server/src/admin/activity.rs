//! Whether an admin connection is being answered, for `listener.rs`'s eviction: while its
//! handler runs (a purge may wait for fills), then until its answer's last byte was written
//! to the socket, for at most [`ANSWER_MAX`] after the body was handed over. hyper drops a
//! one-chunk body as soon as it is queued, before a byte is sent, so the end is seen at the
//! socket: the first flush that completes after the body was dropped ([`Tracked`]). The bound
//! keeps a client that never reads from holding its place. Times are monotonic ([`now_ms`]).
//!
//! It knows nothing of the routes or the connection table.

use axum::Router;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// An answer's body counts as being sent for at most this long after it was handed over (then
/// its connection may be evicted).
pub const ANSWER_MAX: Duration = Duration::from_secs(10);

/// Milliseconds on a monotonic clock (never 0).
pub use crate::clock::monotonic_ms as now_ms;

/// What one admin connection is doing.
#[derive(Default)]
pub struct Activity {
    /// A handler runs.
    handling: AtomicBool,
    /// When the current answer's body was handed over ([`now_ms`]); 0: none being sent.
    since_ms: AtomicI64,
    /// The current answer's body was handed over whole (hyper dropped it).
    body_done: AtomicBool,
}

impl Activity {
    /// Is an answer under way at `now_ms`: its handler running, or its body handed over less
    /// than [`ANSWER_MAX`] ago and not all written yet?
    pub fn busy(&self, now_ms: i64) -> bool {
        let since = self.since_ms.load(Ordering::Acquire);
        self.handling.load(Ordering::Acquire)
            || (since != 0 && now_ms - since < ANSWER_MAX.as_millis() as i64)
    }

    fn begin(&self) {
        self.body_done.store(false, Ordering::Release);
        self.since_ms.store(0, Ordering::Release);
        self.handling.store(true, Ordering::Release);
    }

    /// The handler ended: its body is being sent from now on.
    fn handled(&self) {
        self.since_ms.store(now_ms(), Ordering::Release);
        self.handling.store(false, Ordering::Release);
    }

    /// Bytes were flushed to the socket: the answer is over if its body was handed over.
    fn flushed(&self) {
        if self.body_done.swap(false, Ordering::AcqRel) {
            self.since_ms.store(0, Ordering::Release);
        }
    }
}

/// `app` recording on `activity` when each answer begins and when its body is handed over.
pub fn tracked(app: Router, activity: Arc<Activity>) -> Router {
    app.layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let activity = activity.clone();
            async move {
                activity.begin();
                let done = BodyDone(activity.clone());
                let answer = next.run(req).await;
                activity.handled();
                answer.map(|inner| axum::body::Body::new(UntilDropped { inner, _done: done }))
            }
        },
    ))
}

/// Marks the body handed over when dropped.
struct BodyDone(Arc<Activity>);

impl Drop for BodyDone {
    fn drop(&mut self) {
        self.0.body_done.store(true, Ordering::Release);
    }
}

/// An answer's body that marks itself handed over when hyper drops it.
struct UntilDropped {
    inner: axum::body::Body,
    _done: BodyDone,
}

impl hyper::body::Body for UntilDropped {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// A connection's socket that tells `activity` when a flush completes.
pub struct Tracked<S> {
    pub io: S,
    pub activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_flush(cx);
        if matches!(r, Poll::Ready(Ok(()))) {
            this.activity.flushed();
        }
        r
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Through hyper over a small pipe: an answer is under way from its request until its
    /// last byte is written (hyper dropped the one-chunk body long before), and no longer than
    /// ANSWER_MAX for a client that does not read.
    #[tokio::test]
    async fn an_answer_is_under_way_until_its_last_byte_is_written() {
        let activity = Arc::new(Activity::default());
        let app = Router::new().route("/m", axum::routing::get(|| async { "x".repeat(100_000) }));
        let app = tracked(app, activity.clone());
        let (mut client, server) = tokio::io::duplex(4096);
        let io = Tracked {
            io: server,
            activity: activity.clone(),
        };
        tokio::spawn(
            hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(io), TowerToHyperService::new(app)),
        );
        assert!(!activity.busy(now_ms()), "no request yet");
        client
            .write_all(b"GET /m HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(activity.busy(now_ms()), "the body is not written yet");
        let later = now_ms() + ANSWER_MAX.as_millis() as i64;
        assert!(!activity.busy(later), "bounded by ANSWER_MAX");
        let mut got = Vec::new();
        let mut buf = [0u8; 8192];
        while !got.ends_with(&[b'x'; 64]) || got.len() < 100_000 {
            let n = client.read(&mut buf).await.unwrap();
            assert!(n > 0, "connection closed early");
            got.extend_from_slice(&buf[..n]);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!activity.busy(now_ms()), "written whole");
    }

    /// A handler that runs long (a purge waiting for fills) is busy however long it runs.
    #[tokio::test]
    async fn a_running_handler_is_busy_past_answer_max() {
        let activity = Arc::new(Activity::default());
        let app = Router::new().route(
            "/slow",
            axum::routing::get(|| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                "done"
            }),
        );
        let app = tracked(app, activity.clone());
        let req = axum::http::Request::get("/slow")
            .body(axum::body::Body::empty())
            .unwrap();
        let call = tokio::spawn(tower::ServiceExt::oneshot(app, req));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let later = now_ms() + 2 * ANSWER_MAX.as_millis() as i64;
        assert!(activity.busy(later), "the handler runs");
        let _answer = call.await.unwrap();
        assert!(
            !activity.busy(later),
            "handed over longer than ANSWER_MAX ago"
        );
        assert!(activity.busy(now_ms()), "handed over, not written");
    }
}
