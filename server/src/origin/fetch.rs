//! One origin request, on the origin runtime: take a permit, reuse an idle connection or open
//! one, send the request, wait for the head within `read_timeout_ms`, check what the head
//! announces about the body, and start the body task. A request that went out is sent again
//! only before an answer head: when it went on a reused idle connection that closed without
//! answering (the origin's keep-alive timeout; once, on a new connection), or to the next
//! server up when its server gave no head (a timeout, or a new connection closed) — GET and
//! HEAD are idempotent; it must not know about caching.

use super::body::{self, OriginResponse};
use super::connect::{self, Conn};
use super::headers::{content_length, content_range};
use super::pool::Lease;
use super::{encode_target, Inner, Method, OriginError, OriginRequest};
use bytes::Bytes;
use http::header::{
    AUTHORIZATION, HOST, IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, IF_UNMODIFIED_SINCE,
    RANGE, USER_AGENT,
};
use http::HeaderValue;
use http_body_util::Empty;
use std::sync::Arc;
use std::time::Instant;

/// When an origin request not sent for want of descriptors was last logged.
static LAST_NO_DESCRIPTORS_LOG: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

const UA: &str = concat!("content-server/", env!("CARGO_PKG_VERSION"));

/// Run one request (must run on the origin runtime).
pub(crate) async fn fetch(
    inner: Arc<Inner>,
    req: OriginRequest,
) -> Result<OriginResponse, OriginError> {
    let result = fetch_head(&inner, &req).await;
    match &result {
        // Never sent (a target or field this client cannot write): not the origin's failure.
        Err(e @ OriginError::Request { .. }) => {
            tracing::warn!(origin = %inner.name, request = %described(&req), error = %e, "origin request not sent")
        }
        // Not sent (every server down): the caller answers without it.
        Err(OriginError::AllDown { .. }) => {}
        // (Once a second at most: while it lasts, every origin request meets it.)
        Err(e @ OriginError::NoDescriptors { .. }) => {
            if crate::logging::once_a_second(&LAST_NO_DESCRIPTORS_LOG) {
                tracing::warn!(origin = %inner.name, request = %described(&req), error = %e, "origin request not sent")
            }
        }
        Err(e) => {
            inner.metrics.count(None);
            // Connect and TLS failures are logged per server by `connect`.
            if !e.is_connect() {
                if let Some(left_out) = inner.request_failed_log.allow() {
                    tracing::warn!(origin = %inner.name, request = %described(&req), error = %e, left_out, "origin request failed (at most one such line a second; left_out: those not logged since)");
                }
            }
        }
        Ok(_) => {}
    }
    result
}

async fn fetch_head(
    inner: &Arc<Inner>,
    req: &OriginRequest,
) -> Result<OriginResponse, OriginError> {
    // A free connection is waited for as long as an answer would be (`read_timeout_ms`): the
    // connections may all be held by slow readers of long answers, and a miss must end in a
    // 504 (or stale-if-error), not wait for them.
    let permit =
        match tokio::time::timeout(inner.read_timeout, inner.permits.clone().acquire_owned()).await
        {
            Ok(Ok(p)) => p,
            Ok(Err(_)) => {
                return Err(OriginError::Shutdown {
                    origin: inner.name.clone(),
                })
            }
            Err(_) => {
                let server = &inner.servers[connect::first_up(inner)];
                return Err(inner.timeout(
                    server,
                    "free connection (all max_connections busy)",
                    inner.read_timeout,
                ));
            }
        };
    // One more try when a reused idle connection closes without answering: the origin closed
    // it (its keep-alive timeout) as the request went out. GET and HEAD are idempotent (RFC
    // 9110 §9.2.2), so, as nginx does, the request goes again on a new connection; once.
    let mut race_retried = false;
    // The servers that left this request unanswered (a head timeout, or a new connection
    // closed unanswered): it goes to the next one up ([`fail_over`]), and none of those is
    // tried again for it (with every server down, the next one's failed connect would bring
    // it back).
    let mut unanswered: Vec<usize> = Vec::new();
    loop {
        // A probe of a server whose down mark ended connects anew: only a connect clears the
        // mark (an idle connection kept from before would answer and leave it probing).
        let (preferred, probe) = match connect::pick(inner) {
            Some(p) => p,
            // Every server down: a request with an answer of its own (a stale copy) is not
            // sent (each waited for the same failure, and at a mark's end all those arriving
            // together probed the server, not one).
            None if req.only_if_up => {
                return Err(OriginError::AllDown {
                    origin: inner.name.clone(),
                })
            }
            None => (0, false),
        };
        // The race's retry connects anew too (an idle connection taken would be closed
        // unused), and so does a request one server left unanswered.
        let idle = match probe || race_retried || !unanswered.is_empty() {
            true => None,
            false => inner.idle.take(inner.connect_timeout, preferred).await,
        };
        let (mut conn, reused) = match idle {
            Some(c) => (c, true),
            None => (
                connect::connect(inner, preferred, &unanswered).await?,
                false,
            ),
        };
        let server = &inner.servers[conn.server];
        let request = build(inner, req, conn.server)?;
        let sent = Instant::now();
        let answer =
            tokio::time::timeout(inner.read_timeout, conn.sender.try_send_request(request)).await;
        let resp = match answer {
            Err(_) => {
                // The slowest answers count too (as the time waited), or a stalled origin
                // would vanish from the latency histogram.
                inner.metrics.duration.observe(sent.elapsed().as_secs_f64());
                let e = inner.timeout(server, "response head", inner.read_timeout);
                if fail_over(inner, conn.server, &e, &mut unanswered) {
                    continue;
                }
                return Err(e);
            }
            Ok(Err(e)) if reused && e.message().is_some() => {
                // The idle connection was closed before the request went out: nothing was
                // sent, so another connection may carry it.
                tracing::debug!(origin = %inner.name, server = %server.url, error = %e.error(), "idle origin connection was closed; reconnecting");
                continue;
            }
            Ok(Err(e)) if reused && !race_retried && closed_unanswered(e.error()) => {
                tracing::debug!(origin = %inner.name, server = %server.url, error = %e.error(), "reused origin connection closed without an answer; sending again on a new one");
                race_retried = true;
                continue;
            }
            Ok(Err(e)) => {
                let closed = closed_unanswered(e.error());
                let e = OriginError::Protocol {
                    origin: inner.name.clone(),
                    server: server.url.clone(),
                    message: format!(
                        "no response: {}",
                        super::error::error_chain(&e.into_error())
                    ),
                };
                if closed && fail_over(inner, conn.server, &e, &mut unanswered) {
                    continue;
                }
                return Err(e);
            }
            Ok(Ok(resp)) => {
                connect::mark_up(inner, conn.server);
                resp
            }
        };
        let response_delay = sent.elapsed();
        inner.metrics.duration.observe(response_delay.as_secs_f64());
        let (parts, incoming) = resp.into_parts();
        let status = parts.status.as_u16();
        let size = head_size(&parts);
        if size > connect::HEAD_MAX {
            // (The connection is dropped with the answer's body unread.)
            return Err(OriginError::Protocol {
                origin: inner.name.clone(),
                server: server.url.clone(),
                message: format!(
                    "answer head of about {size} bytes (status line and fields) is over the {} KiB limit",
                    connect::HEAD_MAX / 1024
                ),
            });
        }
        let expected = announced_length(inner, &conn, req, status, &parts.headers)?;
        let lease = Lease { conn, permit };
        return Ok(body::start(
            inner.clone(),
            lease,
            described(req),
            body::Head {
                status,
                headers: parts.headers,
                expected,
                response_delay,
            },
            incoming,
        ));
    }
}

/// Server `i` took the request and gave no head (`e`): it is marked down and added to the
/// servers that left this request unanswered; true when the request goes on to another server
/// (one up that has not had it: nginx's default `proxy_next_upstream error timeout`).
fn fail_over(inner: &Inner, i: usize, e: &OriginError, unanswered: &mut Vec<usize>) -> bool {
    unanswered.push(i);
    let next = connect::another_up(inner, unanswered);
    connect::mark_down(inner, i, e, next);
    next
}

/// The size of an answer's head as sent, at least (status line without its reason phrase,
/// fields written `name:value`, CRLFs: hyper keeps neither the reason nor the whitespace), so a
/// head within the limit is never refused.
fn head_size(parts: &http::response::Parts) -> usize {
    let fields: usize = (parts.headers.iter())
        .map(|(n, v)| n.as_str().len() + 1 + v.len() + 2)
        .sum();
    "HTTP/1.1 200\r\n".len() + fields + 2
}

/// The request's method, target and range, as its log lines name it (`GET /a.mp4 bytes=0-1048575`).
fn described(req: &OriginRequest) -> String {
    let method = match req.method {
        Method::Get => "GET",
        Method::Head => "HEAD",
    };
    match req.range {
        Some((a, b)) => format!("{method} {} bytes={a}-{b}", req.path_and_query),
        None => format!("{method} {}", req.path_and_query),
    }
}

/// Whether a request failed because its connection closed (or was reset) before any byte of
/// an answer: what a keep-alive connection the origin just timed out does.
fn closed_unanswered(e: &hyper::Error) -> bool {
    if e.is_incomplete_message() {
        return true;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            // (UnexpectedEof: a TLS connection closed without close_notify, rustls says.)
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            );
        }
        source = s.source();
    }
    false
}

/// The request for `server`: origin-form target, Host, Range and the conditionals.
fn build(
    inner: &Inner,
    req: &OriginRequest,
    server: usize,
) -> Result<http::Request<Empty<Bytes>>, OriginError> {
    let bad = |message: String| OriginError::Request {
        origin: inner.name.clone(),
        message,
    };
    if !req.path_and_query.starts_with('/') {
        return Err(bad(format!(
            "{:?} is not an origin-form target (must start with '/')",
            req.path_and_query
        )));
    }
    let uri: http::Uri = encode_target(&req.path_and_query)
        .parse()
        .map_err(|e| bad(format!("{:?}: {e}", req.path_and_query)))?;
    let method = match req.method {
        Method::Get => http::Method::GET,
        Method::Head => http::Method::HEAD,
    };
    let mut b = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(HOST, inner.servers[server].host_header.clone())
        .header(USER_AGENT, HeaderValue::from_static(UA));
    if let Some((start, end)) = req.range {
        if end < start {
            return Err(bad(format!("range {start}-{end} ends before it starts")));
        }
        b = b.header(RANGE, format!("bytes={start}-{end}"));
    }
    if let Some((range, if_range)) = &req.client_range {
        if req.range.is_some() {
            return Err(bad(
                "a slice range and a client's range together".to_string()
            ));
        }
        for (name, v) in [(RANGE, Some(range)), (IF_RANGE, if_range.as_ref())] {
            if let Some(v) = v {
                let v = HeaderValue::from_str(v)
                    .map_err(|_| bad(format!("{name}: {v:?} is not a header value")))?;
                b = b.header(name, v);
            }
        }
    }
    for (name, value) in [
        (IF_NONE_MATCH, &req.if_none_match),
        (IF_MODIFIED_SINCE, &req.if_modified_since),
        (IF_MATCH, &req.if_match),
        (IF_UNMODIFIED_SINCE, &req.if_unmodified_since),
    ] {
        if let Some(v) = value {
            let v = HeaderValue::from_str(v)
                .map_err(|_| bad(format!("{name}: {v:?} is not a header value")))?;
            b = b.header(name, v);
        }
    }
    if let Some(v) = &req.origin {
        let v = HeaderValue::from_str(v)
            .map_err(|_| bad(format!("Origin: {v:?} is not a header value")))?;
        b = b.header(http::header::ORIGIN, v);
    }
    if let Some(v) = &req.accept_encoding {
        // The client's value came lossily decoded; one that is no header value is left out
        // (no Accept-Encoding: any coding), not a failed request.
        if let Ok(v) = HeaderValue::from_str(v) {
            b = b.header(http::header::ACCEPT_ENCODING, v);
        }
    }
    if let Some(v) = &req.authorization {
        let mut v = HeaderValue::from_str(v)
            .map_err(|_| bad("Authorization is not a header value".to_string()))?;
        v.set_sensitive(true);
        b = b.header(AUTHORIZATION, v);
    }
    b.body(Empty::new()).map_err(|e| bad(e.to_string()))
}

/// How many body bytes the head promises: 0 for HEAD/204/304, the Content-Range span of a
/// 206 (which Content-Length must agree with), else Content-Length; None = until close or the
/// chunked terminator. A 206 to our own `Range: bytes=a-b` must start at `a` and end at `b`,
/// or earlier only where the object ends: another span would leave a hole or an overlap in
/// the slices assembled from it. Not an answer at all: a 1xx as the final status (a 101
/// switches protocols we never asked to upgrade, RFC 9110 §15.2.2), or a status past 599 (no
/// class to treat it as, §15: a client would get a code it cannot interpret). A body framed by a
/// transfer coding other than `chunked` (which hyper does not decode: its bytes are not the
/// content), or by both Transfer-Encoding and Content-Length (RFC 9112 §6.3: a sign of
/// response splitting, handled as an error), is refused too.
fn announced_length(
    inner: &Inner,
    conn: &Conn,
    req: &OriginRequest,
    status: u16,
    headers: &http::HeaderMap,
) -> Result<Option<u64>, OriginError> {
    let protocol = |message: String| OriginError::Protocol {
        origin: inner.name.clone(),
        server: inner.servers[conn.server].url.clone(),
        message,
    };
    if status < 200 {
        return Err(protocol(format!(
            "{status} is not a final answer (no upgrade was asked for)"
        )));
    }
    if status > 599 {
        return Err(protocol(format!(
            "{status} is not an HTTP status (RFC 9110 §15: 100-599)"
        )));
    }
    if req.method == Method::Head || status == 204 || status == 304 {
        return Ok(Some(0));
    }
    let codings: Vec<String> = headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .filter(|t| !t.is_empty())
        .collect();
    if let Some(other) = codings.iter().find(|t| *t != "chunked") {
        return Err(protocol(format!(
            "transfer coding {other:?} is not supported (only chunked)"
        )));
    }
    if codings.len() > 1 {
        return Err(protocol("chunked applied more than once".to_string()));
    }
    if !codings.is_empty() && headers.contains_key(http::header::CONTENT_LENGTH) {
        return Err(protocol(
            "both Transfer-Encoding and Content-Length (RFC 9112 §6.3)".to_string(),
        ));
    }
    let length = content_length(headers);
    if status == 206 {
        let range = content_range(headers).ok_or_else(|| {
            protocol(format!(
                "206 without a valid Content-Range (got {:?})",
                headers.get(http::header::CONTENT_RANGE)
            ))
        })?;
        if let Some((a, b)) = req.range {
            // Shorter than asked where the object ends; or, its total unknown (`*`: a
            // representation still growing, RFC 9110 §14.4), where it ends for now: never a
            // slice (no total), passed through.
            let ends_early = range.end < b && range.total.is_none_or(|t| range.end + 1 == t);
            if range.start != a || (range.end != b && !ends_early) {
                return Err(protocol(format!(
                    "206 for bytes {}-{}/{} where bytes {a}-{b} were asked for",
                    range.start,
                    range.end,
                    range.total.map_or("*".to_string(), |t| t.to_string()),
                )));
            }
        }
        if let Some(n) = length {
            if n != range.len() {
                return Err(protocol(format!(
                    "Content-Length {n} disagrees with Content-Range bytes {}-{} ({} bytes)",
                    range.start,
                    range.end,
                    range.len()
                )));
            }
        }
        return Ok(Some(range.len()));
    }
    Ok(length)
}
