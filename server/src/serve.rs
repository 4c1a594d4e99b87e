//! Answering one parsed request: route it, open the file through its volume, then carry out the
//! plan [`crate::http::plan`] makes (method, conditionals, range, head): write the head and let the
//! volume admit and send the body. Returns what happened so the connection can log, count and
//! decide whether to keep the connection. It must not read from the socket, decide where file
//! work runs (the volume does) nor decide status codes beyond mapping errors to them.

use crate::http::parse::{Method, Request};
use crate::http::plan::{self, Entity, Plan};
use crate::http::response;
use crate::http::{conditional, date, mime};
use crate::resolve::ResolveError;
use crate::shared::Shared;
use crate::socket::Socket;
use crate::volume::{BodyError, OpenError, RequestFile};
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

/// A small error response (its body omitted for HEAD).
async fn simple(
    sock: &Socket,
    status: u16,
    req: &Request,
    keep_alive: bool,
    extra: &[(&str, &str)],
) -> Served {
    let head_only = req.method == Method::Head;
    let out = response::error(status, head_only, keep_alive, extra);
    write(sock, status, &out, keep_alive).await
}

/// Write a whole response that has no file body.
async fn write(sock: &Socket, status: u16, out: &[u8], keep_alive: bool) -> Served {
    let ok = sock.write_all(out, false).await.is_ok();
    Served {
        status,
        bytes: if ok { out.len() as u64 } else { 0 },
        keep_alive: keep_alive && ok,
    }
}

/// Answer `req` on `sock`.
pub async fn respond(shared: &Shared, sock: &Socket, req: &Request) -> Served {
    let keep_alive = req.keep_alive && !shared.lifecycle.is_draining();
    let Some(head_only) = plan::head_only(&req.method) else {
        return simple(sock, 405, req, keep_alive, &[plan::ALLOW]).await;
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
    let opened: RequestFile = match vol.open(resolved.rel).await {
        Ok(f) => f,
        Err(OpenError::NotFound) => return simple(sock, 404, req, keep_alive, &[]).await,
        Err(OpenError::Forbidden(why)) => {
            tracing::debug!(path = %req.path, why, "forbidden");
            return simple(sock, 403, req, keep_alive, &[]).await;
        }
        Err(OpenError::Overflow) => return unavailable(sock, req, keep_alive).await,
        Err(OpenError::Io(e)) => {
            tracing::error!(volume = %vol.name(), path = %req.path, error = %e, "cannot open file");
            return simple(sock, 500, req, keep_alive, &[]).await;
        }
    };
    let file = &opened.file;
    // Draining may have started while the file was opened: say `close` from now on.
    let keep_alive = keep_alive && !shared.lifecycle.is_draining();
    let etag = conditional::etag(file.mtime, file.size);
    let last_modified = date::format(file.mtime);
    let entity = Entity {
        size: file.size,
        mtime: file.mtime,
        etag: &etag,
        last_modified: &last_modified,
        content_type: match file.via_index {
            Some(i) => mime::content_type(vol.index_name(i).as_bytes()),
            None => mime::content_type(&name),
        },
    };
    let plan = plan::plan(req, head_only, &entity);
    let (status, start, len, body) = match plan {
        Plan::Send {
            status,
            start,
            len,
            body,
        } => (status, start, len, body),
        Plan::Unsatisfiable => {
            let out = plan.render(&entity, head_only, keep_alive);
            return write(sock, 416, &out, keep_alive).await;
        }
        Plan::NotModified => {
            let out = plan.render(&entity, head_only, keep_alive);
            let ok = sock.write_all(&out, false).await.is_ok();
            return Served {
                status: 304,
                bytes: out.len() as u64,
                keep_alive: keep_alive && ok,
            };
        }
    };
    if body && !vol.admit(&opened, start, len) {
        return unavailable(sock, req, keep_alive).await;
    }
    let out = plan.render(&entity, head_only, keep_alive);
    if sock.write_all(&out, body).await.is_err() {
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
    if body {
        let timeout = Duration::from_secs(shared.config.limits.send_timeout_secs);
        match vol.send_body(sock, &file.fd, start, len, timeout).await {
            Ok(n) => served.bytes += n,
            Err(e) => {
                match &e {
                    BodyError::Client(_) | BodyError::Timeout(_) => {
                        tracing::debug!(volume = %vol.name(), path = %req.path, error = %e, "response aborted")
                    }
                    _ => tracing::error!(
                        volume = %vol.name(), path = %req.path, error = %e,
                        "response body failed; closing connection"
                    ),
                }
                served.keep_alive = false;
            }
        }
    }
    served
}

/// 503 with `Retry-After`: the volume's pool is full.
async fn unavailable(sock: &Socket, req: &Request, keep_alive: bool) -> Served {
    simple(sock, 503, req, keep_alive, &[("Retry-After", "1")]).await
}
