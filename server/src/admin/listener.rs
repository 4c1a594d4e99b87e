//! The admin port's connections: accepting, bounding and timing them out, then handing each
//! to hyper with the admin router.
//!
//! The admin port is what Kubernetes probes and Prometheus scrapes, and the operator exposes it
//! to the cluster, so it must neither hold descriptors for whoever connects nor stop answering
//! when the data plane uses every descriptor:
//! - at most [`MAX_CONNECTIONS`] at once (more are closed at once);
//! - a request head must arrive within [`HEADER_TIMEOUT`], also between keep-alive requests
//!   (hyper's `header_read_timeout` runs while a connection is idle);
//! - a connection lives at most [`MAX_LIFETIME`]: then it ends after its current answer, and
//!   [`CLOSE_GRACE`] later whatever it does (a client that does not read its `/metrics`);
//! - one spare descriptor is held: when accept fails for want of descriptors, it is let go so
//!   that one connection can be accepted and answered (a health probe still gets its answer),
//!   and taken again afterwards.
//!
//! It knows nothing of the routes.

use crate::descriptors::SpareDescriptor;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Admin connections open at once.
pub const MAX_CONNECTIONS: usize = 64;
/// A request head must be complete within this (also the idle time between requests).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection is asked to close after its current answer once it is this old.
pub const MAX_LIFETIME: Duration = Duration::from_secs(120);
/// And is dropped this long after that, answered or not.
pub const CLOSE_GRACE: Duration = Duration::from_secs(10);

static LAST_EMFILE_LOG: AtomicU64 = AtomicU64::new(0);

/// Serve `app` on `listener` until `stop` resolves; connections still open then get one second
/// to finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    bound: SocketAddr,
    stop: impl std::future::Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
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
                    tracing::error!(%bound, error = %e, "admin: accept failed, out of descriptors; answering one connection with the spare descriptor");
                }
                // Let the spare go for one connection (if it is not in use already).
                if !spare.release() {
                    // In use, or lost: the top of the loop tries to take it again.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let (app, spare) = (app.clone(), spare.clone());
                        tokio::spawn(async move {
                            connection(stream, app).await;
                            spare.retake();
                        });
                    }
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
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            // Over the bound: closed at once.
            drop(stream);
            continue;
        };
        let app = app.clone();
        tokio::spawn(async move {
            connection(stream, app).await;
            drop(permit);
        });
    }
    let all = MAX_CONNECTIONS as u32;
    let _ = tokio::time::timeout(Duration::from_secs(1), permits.acquire_many(all)).await;
}

/// One admin connection, with the head timeout and the lifetime bound.
async fn connection(stream: tokio::net::TcpStream, app: Router) {
    let _ = stream.set_nodelay(true);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = tokio::time::sleep(MAX_LIFETIME) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
}
