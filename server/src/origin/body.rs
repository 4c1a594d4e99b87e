//! An origin response: its head, and its body delivered chunk by chunk.
//!
//! A task on the origin runtime reads the hyper body with `read_timeout_ms` per chunk, counts
//! bytes against the announced length, and sends chunks over a bounded channel (two chunks of
//! read-ahead: a slow reader slows the origin down, it does not buffer the object). A reader
//! that will be slow (a client's pass-through) can ask for more with
//! [`OriginResponse::read_ahead`]: up to that many bytes are then held in the task, so a body
//! that fits is read at the origin's pace and its connection freed however slowly it is
//! consumed. At the end of a complete body the connection goes back to the idle pool (before
//! the held bytes are handed over); on any failure it is closed, and the failure is reported
//! after the bytes read before it.
//! A body of unknown length can be read ahead into memory up to a cap, so that a small one gets a
//! known length. It must not decide what the bytes are for (stored or passed through is the caller's choice).

use super::pool::Lease;
use super::{Inner, OriginError};
use bytes::Bytes;
use http::HeaderMap;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

enum Piece {
    Data(Bytes),
    End,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Done,
    Failed,
}

/// The head of an origin's answer and a reader of its body.
#[derive(Debug)]
pub struct OriginResponse {
    /// Status code.
    pub status: u16,
    /// Response headers as received.
    pub headers: HeaderMap,
    /// The server (URL) that answered.
    pub server: String,
    /// Body bytes the head announced (None: unknown, read until the end).
    pub expected: Option<u64>,
    /// From sending the request until its answer's head arrived (RFC 9111 §4.2.3's
    /// `response_delay`: an `Age` the origin sent is that much older on arrival).
    pub response_delay: std::time::Duration,
    origin: String,
    rx: mpsc::Receiver<Result<Piece, OriginError>>,
    received: u64,
    state: State,
    /// Chunks read ahead by [`OriginResponse::read_unknown_length`], returned first.
    ahead: VecDeque<Bytes>,
    /// How many bytes the body task may hold ahead of this reader ([`Self::read_ahead`]).
    hold: watch::Sender<u64>,
}

impl std::fmt::Debug for Piece {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Piece::Data(b) => write!(f, "Data({})", b.len()),
            Piece::End => f.write_str("End"),
        }
    }
}

impl OriginResponse {
    /// Let the body task read up to `bytes` ahead of this reader and hold them, so that a
    /// slow reader does not keep the origin connection (and its `max_connections` permit)
    /// while a body that fits is still arriving. Holds at most one chunk past `bytes`.
    pub fn read_ahead(&self, bytes: u64) {
        self.hold.send_replace(bytes);
    }

    /// The next body chunk; `Ok(None)` once the whole announced body has arrived. A body that
    /// ends short is [`OriginError::Truncated`], one that runs long [`OriginError::TooLong`], a
    /// pause over `read_timeout_ms` [`OriginError::Timeout`]; after an error the body is over.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, OriginError> {
        if let Some(b) = self.ahead.pop_front() {
            return Ok(Some(b));
        }
        self.next().await
    }

    /// A body of unknown length (no Content-Length, chunked) read into memory when it ends
    /// within `cap` bytes: it then has a known length (`expected`), and [`Self::chunk`] returns
    /// it from the start. Ok(false) when it runs longer: what was read is still returned first.
    pub async fn read_unknown_length(&mut self, cap: u64) -> Result<bool, OriginError> {
        if self.expected.is_some() {
            return Ok(true);
        }
        let mut len = self.ahead.iter().map(|b| b.len() as u64).sum::<u64>();
        while len <= cap {
            match self.next().await? {
                Some(b) => {
                    len += b.len() as u64;
                    self.ahead.push_back(b);
                }
                None => {
                    self.expected = Some(len);
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// The next chunk from the body task.
    async fn next(&mut self) -> Result<Option<Bytes>, OriginError> {
        match self.state {
            State::Done => return Ok(None),
            State::Failed => {
                return Err(OriginError::Protocol {
                    origin: self.origin.clone(),
                    server: self.server.clone(),
                    message: "body read again after it failed".into(),
                })
            }
            State::Open => {}
        }
        match self.rx.recv().await {
            Some(Ok(Piece::Data(b))) => {
                self.received += b.len() as u64;
                Ok(Some(b))
            }
            Some(Ok(Piece::End)) => {
                self.state = State::Done;
                Ok(None)
            }
            Some(Err(e)) => {
                self.state = State::Failed;
                Err(e)
            }
            None => {
                self.state = State::Failed;
                Err(OriginError::Shutdown {
                    origin: self.origin.clone(),
                })
            }
        }
    }

    /// The `Content-Range` of a 206, parsed (None when absent or malformed).
    pub fn content_range(&self) -> Option<super::ContentRange> {
        super::content_range(&self.headers)
    }

    /// Turn a 206 whose range is the whole object (`bytes 0-(N-1)/N`, N body bytes announced)
    /// the 200 it stands for, its Content-Range dropped: the answer for a client that asked
    /// for the whole object. None for any other answer.
    pub fn whole_as_200(mut self) -> Option<Self> {
        let whole = self.status == 206
            && self.content_range().is_some_and(|r| {
                r.start == 0 && r.total == Some(r.len()) && self.expected == Some(r.len())
            });
        whole.then(|| {
            self.status = 200;
            self.headers.remove(http::header::CONTENT_RANGE);
            self
        })
    }

    /// ETag, Last-Modified and the whole object's size of this answer.
    pub fn validators(&self) -> super::Validators {
        super::Validators::of(self.status, &self.headers)
    }

    /// Body bytes returned by [`OriginResponse::chunk`] so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Read the rest of the body into memory (tests, small answers).
    pub async fn bytes(&mut self) -> Result<Vec<u8>, OriginError> {
        let mut out = Vec::new();
        while let Some(c) = self.chunk().await? {
            out.extend_from_slice(&c);
        }
        Ok(out)
    }
}

/// What a body task reads: the answer to which request (named when it fails), its status and
/// the length its head announced.
struct Reading {
    target: String,
    status: u16,
    expected: Option<u64>,
}

/// An answer's head, as [`start`] takes it.
pub(crate) struct Head {
    pub status: u16,
    pub headers: HeaderMap,
    /// Body bytes announced (None: read until the end).
    pub expected: Option<u64>,
    /// From sending the request until this head arrived.
    pub response_delay: std::time::Duration,
}

/// Start the body task for a response head to the request for `target` (on the origin
/// runtime).
pub(crate) fn start(
    inner: Arc<Inner>,
    lease: Lease,
    target: String,
    head: Head,
    body: Incoming,
) -> OriginResponse {
    let Head {
        status,
        headers,
        expected,
        response_delay,
    } = head;
    let (tx, rx) = mpsc::channel(2);
    let (hold, hold_rx) = watch::channel(0);
    let server = inner.servers[lease.conn.server].url.clone();
    let origin = inner.name.clone();
    let reading = Reading {
        target,
        status,
        expected,
    };
    tokio::spawn(pump(inner, lease, reading, body, tx, hold_rx));
    OriginResponse {
        status,
        headers,
        server,
        expected,
        response_delay,
        origin,
        rx,
        received: 0,
        state: State::Open,
        ahead: VecDeque::new(),
        hold,
    }
}

/// A body task's share of the origin's held bytes, given back as chunks go and when it ends.
struct Held<'a> {
    total: &'a AtomicU64,
    mine: u64,
}

impl Held<'_> {
    fn add(&mut self, n: u64) {
        self.mine += n;
        self.total.fetch_add(n, Ordering::Relaxed);
    }

    fn sub(&mut self, n: u64) {
        self.mine -= n;
        self.total.fetch_sub(n, Ordering::Relaxed);
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.total.fetch_sub(self.mine, Ordering::Relaxed);
    }
}

/// One turn of the body task: what it waited for.
enum Step<'a> {
    /// Room in the channel for the oldest held chunk.
    Give(Result<mpsc::Permit<'a, Result<Piece, OriginError>>, mpsc::error::SendError<()>>),
    /// The reader went away.
    Gone,
    /// The reader allowed more read-ahead.
    More,
    /// A frame of the body (or the read timeout).
    Frame(
        Result<
            Option<Result<hyper::body::Frame<Bytes>, hyper::Error>>,
            tokio::time::error::Elapsed,
        >,
    ),
}

async fn pump(
    inner: Arc<Inner>,
    lease: Lease,
    reading: Reading,
    mut body: Incoming,
    tx: mpsc::Sender<Result<Piece, OriginError>>,
    mut hold: watch::Receiver<u64>,
) {
    let Reading {
        target,
        status,
        expected,
    } = reading;
    let server = inner.servers[lease.conn.server].url.clone();
    let mut got = 0u64;
    // Chunks read and not yet handed over, oldest first, counted in the origin's total.
    let mut held: VecDeque<Bytes> = VecDeque::new();
    let mut held_bytes = Held {
        total: &inner.held,
        mine: 0,
    };
    let fail = |e: OriginError| {
        inner.metrics.count(None);
        if let Some(left_out) = inner.body_failed_log.allow() {
            tracing::warn!(origin = %inner.name, request = %target, error = %e, left_out, "origin body failed (at most one such line a second; left_out: those not logged since)");
        }
        Err(e)
    };
    let outcome: Result<(), OriginError> = loop {
        // Read while nothing is held (two chunks in the channel set the pace), or while the
        // reader's read-ahead and the origin's total allow more.
        let read = held.is_empty()
            || (held_bytes.mine < *hold.borrow()
                && inner.held.load(Ordering::Relaxed) < inner.held_max);
        let step = tokio::select! {
            biased;
            p = tx.reserve(), if !held.is_empty() => Step::Give(p),
            _ = tx.closed(), if held.is_empty() => Step::Gone,
            r = hold.changed(), if !read => match r {
                Ok(()) => Step::More,
                Err(_) => Step::Gone,
            },
            f = tokio::time::timeout(inner.read_timeout, body.frame()), if read => Step::Frame(f),
        };
        let frame = match step {
            Step::Give(Ok(permit)) => {
                if let Some(b) = held.pop_front() {
                    held_bytes.sub(b.len() as u64);
                    permit.send(Ok(Piece::Data(b)));
                }
                continue;
            }
            // The reader went away: stop at once, closing the connection.
            Step::Give(Err(_)) | Step::Gone => {
                inner.metrics.count(Some(status));
                return;
            }
            Step::More => continue,
            Step::Frame(f) => f,
        };
        match frame {
            Err(_) => {
                break fail(OriginError::Timeout {
                    origin: inner.name.clone(),
                    server: server.clone(),
                    what: "body bytes",
                    after: inner.read_timeout,
                })
            }
            Ok(None) => match expected {
                Some(n) if got < n => {
                    break fail(OriginError::Truncated {
                        origin: inner.name.clone(),
                        server: server.clone(),
                        expected: n,
                        got,
                        cause: None,
                    })
                }
                _ => break Ok(()),
            },
            Ok(Some(Err(e))) => {
                break fail(match expected {
                    Some(n) if got < n => OriginError::Truncated {
                        origin: inner.name.clone(),
                        server: server.clone(),
                        expected: n,
                        got,
                        cause: Some(super::error::error_chain(&e)),
                    },
                    _ => OriginError::Body {
                        origin: inner.name.clone(),
                        server: server.clone(),
                        got,
                        source: e,
                    },
                })
            }
            Ok(Some(Ok(frame))) => {
                let Ok(data) = frame.into_data() else {
                    continue; // trailers
                };
                if data.is_empty() {
                    continue;
                }
                got += data.len() as u64;
                inner.metrics.received.inc_by(data.len() as u64);
                if let Some(n) = expected {
                    if got > n {
                        break fail(OriginError::TooLong {
                            origin: inner.name.clone(),
                            server: server.clone(),
                            expected: n,
                        });
                    }
                }
                held_bytes.add(data.len() as u64);
                held.push_back(data);
            }
        }
    };
    // The connection is settled first (kept for reuse, or closed), then what was held goes
    // out, then the end or the failure.
    let last = match outcome {
        Ok(()) => {
            inner.metrics.count(Some(status));
            drop(body);
            lease.finish(&inner.idle);
            Ok(Piece::End)
        }
        Err(e) => {
            drop(lease);
            Err(e)
        }
    };
    for b in held {
        held_bytes.sub(b.len() as u64);
        if tx.send(Ok(Piece::Data(b))).await.is_err() {
            return;
        }
    }
    let _ = tx.send(last).await;
}
