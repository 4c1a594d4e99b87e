//! Answering one parsed request: method check, routing, opening the file (on the volume's pool
//! or inline), conditional and range evaluation, the response head, then the body via
//! [`crate::send`]. Returns what happened so the connection can log, count and decide whether to
//! keep the connection. It must not read from the socket.

use crate::config::Offload;
use crate::fs::open::{open_for_request, OpenError, RequestFile};
use crate::http::parse::{Method, Request};
use crate::http::range::RangeOutcome;
use crate::http::response::{self, Head};
use crate::http::{conditional, date, mime, range};
use crate::resolve::ResolveError;
use crate::shared::Shared;
use crate::send::{send_body, BodyError};
use crate::socket::Socket;
use crate::volume::Volume;
use std::os::fd::OwnedFd;
use std::time::Duration;

/// The outcome of one response.
#[derive(Debug, Clone, Copy)]
pub struct Served {
    pub status: u16,
    /// Bytes written (head + body).
    pub bytes: u64,
    /// The connection may carry another request.
    pub keep_alive: bool,
}

async fn simple(
    sock: &Socket,
    status: u16,
    req: &Request,
    keep_alive: bool,
    extra: &[(&str, &str)],
) -> Served {
    let head_only = req.method == Method::Head;
    let out = response::error(status, head_only, keep_alive, extra);
    let ok = sock.write_all(&out, false).await.is_ok();
    Served {
        status,
        bytes: if ok { out.len() as u64 } else { 0 },
        keep_alive: keep_alive && ok,
    }
}

/// Answer `req` on `sock`.
pub async fn respond(shared: &Shared, sock: &Socket, req: &Request) -> Served {
    let keep_alive = req.keep_alive && !shared.lifecycle.is_draining();
    let head_only = match req.method {
        Method::Get => false,
        Method::Head => true,
        Method::Other(_) => {
            return simple(sock, 405, req, keep_alive, &[("Allow", "GET, HEAD")]).await
        }
    };
    let resolved = match shared.router.resolve(&req.path) {
        Ok(r) => r,
        Err(ResolveError::Bad(why)) => {
            tracing::debug!(path = %req.path, why, "bad request path");
            return simple(sock, 400, req, false, &[]).await;
        }
        Err(ResolveError::NoRoute) => return simple(sock, 404, req, keep_alive, &[]).await,
    };
    let vol = &shared.volumes[resolved.volume];
    let name = resolved.rel.clone();
    let RequestFile {
        file,
        admitted_by_pool,
    } = match open_for_request(vol, resolved.rel).await {
        Ok(f) => f,
        Err(OpenError::NotFound) => return simple(sock, 404, req, keep_alive, &[]).await,
        Err(OpenError::Forbidden(why)) => {
            tracing::debug!(path = %req.path, why, "forbidden");
            return simple(sock, 403, req, keep_alive, &[]).await;
        }
        Err(OpenError::Overflow) => {
            return simple(sock, 503, req, keep_alive, &[("Retry-After", "1")]).await
        }
        Err(OpenError::Io(e)) => {
            tracing::error!(volume = %vol.name, path = %req.path, error = %e, "cannot open file");
            return simple(sock, 500, req, keep_alive, &[]).await;
        }
    };
    // Draining may have started while the file was opened: say `close` from now on.
    let keep_alive = keep_alive && !shared.lifecycle.is_draining();
    let tag = conditional::etag(file.mtime, file.size);
    let last_modified = date::format(file.mtime);
    let ctype = match file.via_index {
        Some(i) => mime::content_type(vol.index[i].as_bytes()),
        None => mime::content_type(&name),
    };
    if conditional::not_modified(
        req.if_none_match.as_deref(),
        req.if_modified_since.as_deref(),
        &tag,
        file.mtime,
    ) {
        let out = Head::new(304)
            .header("ETag", &tag)
            .header("Last-Modified", &last_modified)
            .finish(keep_alive);
        let ok = sock.write_all(&out, false).await.is_ok();
        return Served {
            status: 304,
            bytes: out.len() as u64,
            keep_alive: keep_alive && ok,
        };
    }
    let ranged = if conditional::range_allowed(req.if_range.as_deref(), &tag, file.mtime) {
        range::evaluate(req.range.as_deref(), file.size)
    } else {
        RangeOutcome::Full
    };
    let (status, start, len) = match ranged {
        RangeOutcome::Full => (200, 0, file.size),
        RangeOutcome::Partial { start, end } => (206, start, end - start + 1),
        RangeOutcome::Unsatisfiable => {
            let cr = format!("bytes */{}", file.size);
            return simple(sock, 416, req, keep_alive, &[("Content-Range", &cr)]).await;
        }
    };
    let mut head = Head::new(status)
        .header("Content-Type", ctype)
        .header("Content-Length", len)
        .header("Last-Modified", &last_modified)
        .header("ETag", &tag)
        .header("Accept-Ranges", "bytes");
    if status == 206 {
        head = head.header(
            "Content-Range",
            format_args!("bytes {}-{}/{}", start, start + len - 1, file.size),
        );
    }
    let with_body = !head_only && len > 0;
    if with_body && !admitted_by_pool && !admitted(vol, &file.fd, start, len) {
        return simple(sock, 503, req, keep_alive, &[("Retry-After", "1")]).await;
    }
    let out = head.finish(keep_alive);
    if sock.write_all(&out, with_body).await.is_err() {
        return Served {
            status,
            bytes: 0,
            keep_alive: false,
        };
    }
    let mut served = Served {
        status,
        bytes: out.len() as u64,
        keep_alive,
    };
    if with_body {
        let timeout = Duration::from_secs(shared.config.limits.send_timeout_secs);
        match send_body(vol, sock, &file.fd, start, len, timeout).await {
            Ok(n) => served.bytes += n,
            Err(e) => {
                match &e {
                    BodyError::Client(_) | BodyError::Timeout(_) => {
                        tracing::debug!(volume = %vol.name, path = %req.path, error = %e, "response aborted")
                    }
                    _ => tracing::error!(
                        volume = %vol.name, path = %req.path, error = %e,
                        "response body failed; closing connection"
                    ),
                }
                served.keep_alive = false;
            }
        }
    }
    served
}

/// Admission before the head goes out, for a request whose open did not already run on the pool:
/// a response whose body may need the volume's pool is checked against the overflow rule now
/// (counted and logged like any rejection), so overflow is a clean 503 and never a 200 cut short;
/// its chunks are then never rejected (see [`crate::pool`]). For `auto` the residency of the first
/// chunk is asked only when the pool has no room, so the common case costs no syscall here.
fn admitted(vol: &Volume, fd: &OwnedFd, start: u64, len: u64) -> bool {
    match vol.offload {
        Offload::Never => true,
        Offload::Always => vol.pool.admit().is_ok(),
        Offload::Auto => {
            vol.pool.has_room()
                || vol.hot.chunk_resident(fd, start, len)
                || vol.pool.admit().is_ok()
        }
    }
}
