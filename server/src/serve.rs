//! Answering one parsed request: route it, open the file (or its precompressed sibling, or list
//! the directory) through its volume, then carry out the answer [`crate::http::plan`] makes
//! (method, preconditions, ranges, every header): write the head and let the volume admit and
//! send the body — one range, or the parts of a multipart/byteranges body with their heads
//! between them. Returns what happened so the connection can log, count and decide whether to
//! keep the connection. It must not read from the socket, decide where file work runs (the
//! volume does) nor decide status codes or headers beyond mapping errors to them.

use crate::http::conditional::FileVersion;
use crate::http::listing;
use crate::http::parse::Request;
use crate::http::plan::{Answer, Body, Entity, Start};
use crate::resolve::{self, ResolveError};
use crate::shared::Shared;
use crate::socket::Socket;
use crate::volume::{BodyError, OpenError, RequestFile, Volume, Watch};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

static LAST_EMFILE_LOG: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub use crate::http::response::Served;

/// Write a whole response that has no file body.
async fn write(sock: &Socket, status: u16, out: &[u8], keep_alive: bool) -> Served {
    let ok = sock.write_all(out, false).await.is_ok();
    Served {
        status,
        bytes: if ok { out.len() as u64 } else { 0 },
        keep_alive: keep_alive && ok,
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Answer `req` on `sock`.
pub async fn respond(shared: &Shared, sock: &Socket, req: &Request) -> Served {
    let keep_alive = shared.lifecycle.keeps(req.keep_alive);
    let policy = &shared.http;
    let resolved = shared.router.resolve(&req.path);
    let route = resolved.as_ref().ok().map(|r| r.route);
    let head_only = match policy.start(req, route, keep_alive) {
        Start::Serve { head_only } => head_only,
        Start::Done(a) => return write(sock, a.status, &a.head, keep_alive).await,
    };
    let error = |status: u16, keep_alive: bool, extra: &[(&str, &str)]| {
        (
            status,
            policy.error(route, req, status, keep_alive, extra),
            keep_alive,
        )
    };
    let resolved = match resolved {
        Ok(r) => r,
        Err(ResolveError::Bad(why)) => {
            tracing::debug!(path = %req.path, why, "bad request path");
            let (s, out, k) = error(400, false, &[]);
            return write(sock, s, &out, k).await;
        }
        Err(ResolveError::NoRoute) => {
            let (s, out, k) = error(404, keep_alive, &[]);
            return write(sock, s, &out, k).await;
        }
    };
    let route = resolved.route;
    let vol = &shared.volumes[resolved.volume];
    // A route with an origin goes to the cache.
    if let (Some(Some(cache_route)), Some(Some(cv))) = (
        shared.cache_routes.get(route),
        shared.caches.get(resolved.volume),
    ) {
        let timeout = Duration::from_secs(shared.config.limits.send_timeout_secs);
        return crate::cache::serve::respond(
            policy,
            route,
            vol,
            cv,
            cache_route,
            sock,
            req,
            &resolved.path,
            keep_alive,
            &shared.lifecycle,
            timeout,
        )
        .await;
    }
    let slash = req.path.ends_with('/');
    let rel = resolved.rel;
    let opened = vol.open(&rel).await;
    // Draining may have started while the file was opened: say `close` from now on.
    let keep_alive = shared.lifecycle.keeps(keep_alive);
    if !keep_alive {
        // The answer ends the connection: its FIN leaves with its last bytes (a cache route's
        // answer may stream bytes as they arrive from the origin, so only files are corked).
        sock.cork_until_close();
    }
    let fail = |e: OpenError| match e {
        OpenError::NotFound | OpenError::Directory => error(404, keep_alive, &[]),
        OpenError::Forbidden(why) => {
            tracing::debug!(path = %req.path, why, "forbidden");
            error(403, keep_alive, &[])
        }
        OpenError::Overflow => error(503, keep_alive, &[("Retry-After", "1")]),
        OpenError::Io(e) if crate::descriptors::out_of_descriptors(&e) => {
            if crate::logging::once_a_second(&LAST_EMFILE_LOG) {
                tracing::error!(volume = %vol.name(), error = %e, "cannot open a file: out of descriptors (each response of a file not in the open-file cache holds one; raise RLIMIT_NOFILE or lower limits.max_connections); answering 503");
            }
            error(503, keep_alive, &[("Retry-After", "1")])
        }
        OpenError::Io(e) => {
            tracing::error!(volume = %vol.name(), path = %req.path, error = %e, "cannot open file");
            error(500, keep_alive, &[])
        }
    };
    let opened = match opened {
        Ok(f) if f.file.via_index.is_some() && !slash => {
            return redirect(shared, sock, req, route, keep_alive).await
        }
        Ok(f) => f,
        Err(OpenError::Directory) if !slash => {
            return redirect(shared, sock, req, route, keep_alive).await
        }
        Err(OpenError::Directory) if policy.lists(route) => {
            return list(shared, sock, req, vol, route, rel, keep_alive).await
        }
        Err(e) => {
            let (s, out, k) = fail(e);
            return write(sock, s, &out, k).await;
        }
    };
    // The name the media type comes from, and the file's path for its siblings.
    let mut name = rel;
    if let Some(i) = opened.file.via_index {
        if !name.is_empty() {
            name.push(b'/');
        }
        name.extend_from_slice(vol.index_name(i).as_bytes());
    }
    let mut coding = None;
    let mut opened = opened;
    for c in policy.codings(route, req) {
        let mut sibling = name.clone();
        sibling.extend_from_slice(c.suffix().as_bytes());
        match vol.open(&sibling).await {
            Ok(f) if f.file.via_index.is_none() => {
                opened = f;
                coding = Some(c);
                break;
            }
            Ok(_) | Err(OpenError::NotFound | OpenError::Directory | OpenError::Forbidden(_)) => {}
            Err(e) => {
                let (s, out, k) = fail(e);
                return write(sock, s, &out, k).await;
            }
        }
    }
    // Draining may have started while a precompressed sibling was opened.
    let keep_alive = shared.lifecycle.keeps(keep_alive);
    let file = &opened.file;
    let entity = Entity {
        version: FileVersion {
            ino: file.ino,
            mtime: file.mtime,
            mtime_nsec: u32::try_from(file.mtime_nsec).unwrap_or(0),
            size: file.size,
        },
        name: &name,
        coding,
    };
    let answer = policy.plan(req, Some(route), head_only, &entity, keep_alive, now());
    send(shared, sock, req, (vol, route), &opened, answer, keep_alive).await
}

/// 301 to the directory's path plus `/`.
async fn redirect(
    shared: &Shared,
    sock: &Socket,
    req: &Request,
    route: usize,
    keep_alive: bool,
) -> Served {
    let path = resolve::normalize(&req.path).unwrap_or_default();
    let a = shared
        .http
        .redirect(Some(route), req, &path, keep_alive, now());
    write(sock, a.status, &a.head, keep_alive).await
}

/// A directory listing (the route lists directories without an index file).
async fn list(
    shared: &Shared,
    sock: &Socket,
    req: &Request,
    vol: &Volume,
    route: usize,
    rel: Vec<u8>,
    keep_alive: bool,
) -> Served {
    let policy = &shared.http;
    let listed = vol.list_dir(rel, policy.listing_max_entries).await;
    // Draining may have started while the pool listed it: say `close` from now on.
    let keep_alive = shared.lifecycle.keeps(keep_alive);
    let (entries, truncated) = match listed {
        Ok(r) => r,
        Err(e) => {
            let (status, extra): (u16, &[(&str, &str)]) = match e {
                OpenError::Overflow => (503, &[("Retry-After", "1")]),
                OpenError::NotFound | OpenError::Directory => (404, &[]),
                OpenError::Forbidden(_) => (403, &[]),
                OpenError::Io(e) if crate::descriptors::out_of_descriptors(&e) => {
                    if crate::logging::once_a_second(&LAST_EMFILE_LOG) {
                        tracing::error!(volume = %vol.name(), error = %e, "cannot list a directory: out of descriptors; answering 503");
                    }
                    (503, &[("Retry-After", "1")])
                }
                OpenError::Io(e) => {
                    tracing::error!(volume = %vol.name(), path = %req.path, error = %e, "cannot list directory");
                    (500, &[])
                }
            };
            let out = policy.error(Some(route), req, status, keep_alive, extra);
            return write(sock, status, &out, keep_alive).await;
        }
    };
    let entries = entries
        .into_iter()
        .map(|e| listing::Entry {
            name: e.name,
            dir: e.dir,
            size: e.size,
            mtime: e.mtime,
        })
        .collect();
    let path = resolve::normalize(&req.path).unwrap_or_default();
    let a = policy.listing(route, req, &path, entries, truncated, keep_alive, now());
    write(sock, a.status, &a.head, keep_alive).await
}

/// Carry out a planned answer for an opened file of `vol` on `route`: admission, head, body.
async fn send(
    shared: &Shared,
    sock: &Socket,
    req: &Request,
    (vol, route): (&Volume, usize),
    opened: &RequestFile,
    answer: Answer,
    keep_alive: bool,
) -> Served {
    let Answer { status, head, body } = answer;
    let first = body.first_range();
    if let Some((start, len)) = first {
        if !vol.admit(opened, start, len) {
            let out = shared
                .http
                .error(Some(route), req, 503, keep_alive, &[("Retry-After", "1")]);
            return write(sock, 503, &out, keep_alive).await;
        }
    }
    let fd = &opened.file.fd;
    let watch = Some(Watch::Prefix(opened.file.version())).filter(|_| vol.fstat_on_use());
    // A small resident answer leaves in one send (head and body); what the socket did not take
    // follows the usual way.
    let mut early = 0usize;
    if let Body::Range { start, len } = body {
        match vol.send_small(sock.stream(), &head, fd, start, len) {
            Ok(Some(n)) => early = n,
            Ok(None) => {}
            Err(_) => {
                return Served {
                    status,
                    bytes: 0,
                    keep_alive: false,
                }
            }
        }
    }
    let head_early = early.min(head.len());
    if head_early < head.len()
        && sock
            .write_all(&head[head_early..], first.is_some())
            .await
            .is_err()
    {
        return Served {
            status,
            bytes: head_early as u64,
            keep_alive: false,
        };
    }
    let body_early = (early - head_early) as u64;
    let mut served = Served {
        status,
        bytes: head.len() as u64 + body_early,
        keep_alive,
    };
    let timeout = Duration::from_secs(shared.config.limits.send_timeout_secs);
    // Body bytes sent, or those sent before the error and the error.
    let result: Result<u64, (u64, BodyError)> = match &body {
        Body::None => Ok(0),
        Body::Range { start, len } => vol
            .send_body(
                sock,
                fd,
                start + body_early,
                len - body_early,
                timeout,
                watch,
            )
            .await
            .map_err(|e| (e.sent(), e)),
        Body::Multipart(m) => {
            let mut sent = 0u64;
            let mut r = Ok(());
            for p in m.parts() {
                if let Err(source) = sock.write_all(&p.head, true).await {
                    r = Err(BodyError::Client { source, sent: 0 });
                    break;
                }
                sent += p.head.len() as u64;
                match vol
                    .send_body(sock, fd, p.range.start, p.range.len(), timeout, watch)
                    .await
                {
                    Ok(n) => sent += n,
                    Err(e) => {
                        sent += e.sent();
                        r = Err(e);
                        break;
                    }
                }
            }
            match r {
                Ok(()) => match sock.write_all(m.trailer(), false).await {
                    Ok(()) => Ok(sent + m.trailer().len() as u64),
                    Err(source) => Err((sent, BodyError::Client { source, sent: 0 })),
                },
                Err(e) => Err((sent, e)),
            }
        }
    };
    match result {
        Ok(n) => served.bytes += n,
        Err((sent, e)) => {
            // What reached the client counts (the access log and response bytes).
            served.bytes += sent;
            match &e {
                BodyError::Client { .. } | BodyError::Timeout { .. } => {
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
    served
}
