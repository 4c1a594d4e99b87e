//! One fill: fetching one slice of an object (or the whole object) from the origin and storing
//! it, shared by every request that wants it while it runs (collapsed misses).
//!
//! A fill is a task of its own (spawned detached on the worker that started it), so a client
//! that disconnects cancels nothing for the others. It publishes its progress on a `watch`
//! channel: the response head once known, then how many body bytes can be read. Waiters are
//! woken as bytes land and read them from the temporary file through the volume's send path
//! (read-while-write), not after the fill ends; bytes not yet written are read from memory,
//! and the head is published before the temporary file is created, so no waiter ever waits
//! for the pool. Body bytes are written by the volume's pool;
//! when they cannot be stored (not admitted, full disk, pool full, write error) the rest of the
//! slice is kept in memory for the waiters and nothing is stored; a slice over [`MEMORY_MAX`]
//! is then taken out of reach of new requests and read from the origin only `WINDOW_MAX`
//! ahead of its slowest reader ([`FillReader`]), letting go of what every reader has passed. Origin faults (refused,
//! timeout, reset, truncated, wrong length) end the fill without storing anything: the
//! temporary file is removed and the next request retries. A body that breaks off after its
//! head is first resumed (up to [`RESUMES_MAX`] times) with a Range request for the rest,
//! taken only when the origin answers it with the same version, so the waiters get the whole
//! slice and nothing fetched is fetched twice. A conditional fill (revalidation)
//! that gets 304 rewrites the entry's header with the new freshness, without fetching its body;
//! its requests are served the stored file at once, not after the rewrite (which copies it).
//! A purge of the object while the fill runs ([`Fill::purge`]) keeps what it fetched out of the
//! cache: the fill still feeds its waiters but stores (or refreshes) nothing. It must not write
//! to client sockets.

use super::entry::EntryMeta;
use super::key::{CacheKey, EntryId};
use super::store::TempEntry;
use super::volume::{CacheVolume, FillKey, Stored};
use crate::config::{self, CachePolicy};
use crate::http::conditional;
use crate::http::freshness::{self, Freshness};
use crate::metrics::PoolOp;
use crate::origin::{self, Origin, OriginError, OriginRequest, OriginResponse};
use bytes::Bytes;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::watch;

/// Longest answer of unknown length (no Content-Length) stored on a volume of whole objects:
/// it is read into memory before its head goes to anyone, to learn its length. Longer ones are
/// passed through (a sliced volume's cap is its slice size).
const UNKNOWN_LENGTH_MAX: u64 = 1 << 20;

/// Body bytes gathered before one pool write (bounds the tasks per MiB; ~2.6 ms at 25 MB/s).
const WRITE_BATCH: usize = 64 * 1024;
/// Largest body a fill keeps in memory for its waiters when it cannot store it.
pub const MEMORY_MAX: u64 = 16 << 20;
/// Most received bytes waiting for the pool to write them before reading from the origin pauses.
const WINDOW_MAX: u64 = 8 << 20;
/// Range requests for the rest of a body after it broke off, per fill ([`resume`]).
const RESUMES_MAX: u32 = 2;

/// A finished pool write: the temporary entry back, the result, the bytes written.
struct WriteDone {
    t: TempEntry,
    r: std::io::Result<()>,
    done: u64,
}

/// Origin response headers never passed on (hop-by-hop and framing; we send our own, and our
/// own `X-Cache`: a cache in front of the origin says nothing of this node's).
const HOP_BY_HOP: &[&str] = &[
    "x-cache",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "date",
    "server",
];

/// Further headers not stored with an entry (ranges and age are per response; the validators
/// have their own fields; a response with Set-Cookie is never stored anyway).
const NOT_STORED: &[&str] = &[
    "content-range",
    "accept-ranges",
    "age",
    "etag",
    "last-modified",
    "set-cookie",
];

/// What the fill is for.
pub struct FillJob {
    pub key: CacheKey,
    /// Origin-form target (`/path?query`).
    pub target: String,
    pub slice: u32,
    pub policy: Arc<CachePolicy>,
    /// Revalidate this stale entry (If-None-Match / If-Modified-Since) instead of a plain GET.
    pub revalidate: Option<Arc<Stored>>,
    /// The client's `Authorization`, forwarded: the answer is stored only if it may be shared
    /// (such a fill is never joined by other requests).
    pub authorization: Option<String>,
    /// The `Origin` of the request that started it, forwarded (see [`OriginRequest::origin`]).
    pub client_origin: Option<String>,
    /// The route answers CORS itself: `Origin` in the origin's `Vary` does not make an answer
    /// unstorable (see [`super::serve::CacheRoute::answers_cors`]).
    pub answers_cors: bool,
}

/// The head of a body being filled.
pub struct FillHead {
    pub meta: Arc<EntryMeta>,
    /// The temporary (later the committed) file, once it exists, when the body is being
    /// stored. It is set before any byte is written to it, so a reader told that bytes are
    /// in the file finds it here.
    pub file: OnceLock<Arc<OwnedFd>>,
    pub body_offset: u64,
}

/// Why a fill produced no body.
#[derive(Debug)]
pub enum FillError {
    /// The origin failed (down, timeout, reset, truncated, bad answer).
    Origin(OriginError),
    /// The slice starts past the object's end (`total` from the origin's 416, if given).
    NotSatisfiable { total: Option<u64> },
    /// The fill's task ended before the fill did (it panicked).
    Abandoned,
}

/// Unregisters a fill when its task ends, and fails it for its waiters if it had not ended
/// (the task panicked, or was dropped with the runtime).
struct Ended {
    cv: Arc<CacheVolume<Fill>>,
    fill: Arc<Fill>,
}

impl Drop for Ended {
    fn drop(&mut self) {
        let unfinished = matches!(
            *self.fill.tx.borrow(),
            Progress::Waiting | Progress::Body { done: false, .. }
        );
        if unfinished {
            tracing::error!(volume = %self.cv.name, entry = %self.fill.id.rel_path(), "fill abandoned (its task panicked); its waiters get an error");
            self.fill
                .publish(Progress::Failed(Arc::new(FillError::Abandoned)));
        }
        // Its waiters have their answer; a purge waiting for the rewrite must not wait on.
        let rewriting = match &*self.fill.tx.borrow() {
            Progress::Refreshed {
                stored,
                storing: true,
            } => Some(stored.clone()),
            _ => None,
        };
        if let Some(stored) = rewriting {
            self.fill.publish(Progress::Refreshed {
                stored,
                storing: false,
            });
        }
        self.cv.fill_done(self.fill.id, &self.fill);
    }
}

/// Where a fill is.
#[derive(Clone)]
pub enum Progress {
    /// Waiting for the origin's head.
    Waiting,
    /// `avail` body bytes can be read; `done` once all of them arrived.
    Body {
        head: Arc<FillHead>,
        avail: u64,
        done: bool,
    },
    /// The revalidation got 304: serve this entry (refreshed). `storing`: its header is being
    /// rewritten (the entry's body is copied with it; a purge waits for that to end), and this
    /// is the stored file with the new freshness, which the waiters need not wait for.
    Refreshed { stored: Arc<Stored>, storing: bool },
    /// Not storable (or not cacheable as slices), origin status `status`: the first request to
    /// [`Fill::take_response`] streams the origin's answer through, the others ask the origin
    /// themselves (a private answer is never shared). `refused`: storable, but not stored this
    /// time (not admitted, or the pool had no room to create it) and too large to hold for
    /// waiters: the next request tries again. `object_answer`: the answer to a later slice's
    /// range is of another status (a 404, a redirect), the object's whatever the range, and
    /// would be stored as its first slice.
    Bypass {
        status: u16,
        refused: bool,
        object_answer: bool,
    },
    /// The fill failed before or during the body.
    Failed(Arc<FillError>),
}

/// Body bytes received but not (yet, or ever) in the file: `chunks` cover
/// `from + skip..from + skip + len`. While the file is being written, `from` is what the pool
/// has written (and `skip` is 0); once storing failed (or never started) `from` stays where the
/// file ends, and `skip` counts the bytes every reader has passed that were let go.
#[derive(Default)]
struct Tail {
    from: u64,
    skip: u64,
    len: u64,
    chunks: std::collections::VecDeque<Bytes>,
}

impl Tail {
    /// Drop the first `n` bytes of memory (the caller moves `from` or `skip` past them).
    fn pop_front(&mut self, mut n: u64) {
        self.len -= n;
        while n > 0 {
            let Some(c) = self.chunks.front_mut() else {
                break;
            };
            if (c.len() as u64) <= n {
                n -= c.len() as u64;
                self.chunks.pop_front();
            } else {
                let _ = c.split_to(n as usize);
                n = 0;
            }
        }
    }
}

/// Where a reader finds body byte `offset` of a fill.
pub enum ReadAt {
    /// These bytes (from memory; at most the `max` asked for).
    Memory(Bytes),
    /// In the file, up to (not including) this offset.
    File(u64),
}

/// [`Fill::commit`]: fetching, nothing decided yet.
const RUNNING: u8 = 0;
/// Storing what it fetched (the commit or the 304's rewrite is under way or done).
const STORING: u8 = 1;
/// Purged before it stored: it must store nothing.
const PURGED: u8 = 2;

/// How long a purge waits for a fill's commit under way (a rename on the pool) to end.
const PURGE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// One fill under way.
pub struct Fill {
    pub id: EntryId,
    /// The object's cache key (a prefix purge matches it).
    pub key: Arc<[u8]>,
    tx: watch::Sender<Progress>,
    tail: Mutex<Tail>,
    handoff: Mutex<Option<OriginResponse>>,
    /// RUNNING, STORING or PURGED: a purge and the commit decide once which came first.
    commit: AtomicU8,
    /// Where each reader is (slots of [`FillReader`]s; None = free), and a wake-up when one
    /// moves on: a fill that cannot store keeps in memory only what a reader still needs.
    readers: Mutex<Vec<Option<u64>>>,
    moved: tokio::sync::Notify,
    /// Set before the answer is published when it varies by `Origin` (`Vary: Origin`, on a
    /// route that does not answer CORS itself): the `Origin` this fill forwarded (None: none),
    /// and whether the answer is that Origin's own. Such an answer answers only requests
    /// forwarding the same `Origin`, or none alike ([`Fill::made_for`]); one Origin's own (kept
    /// out of the cache by nothing that holds whatever the Origin: no-store, private,
    /// Set-Cookie) marks and withdraws nothing ([`Fill::origins_own`]): one request with an
    /// `Origin` must not switch caching off for every other.
    for_origin: OnceLock<(Option<Arc<str>>, bool)>,
}

/// One request reading a fill, and where it is: the fill may let go of the bytes every
/// reader has passed. Dropped when the request is done with it.
pub struct FillReader {
    fill: Arc<Fill>,
    slot: usize,
    /// The fill had every byte when this reader joined it (a HIT): its bytes count as served
    /// from the cache, not as fetched for it.
    complete: bool,
}

impl FillReader {
    pub fn fill(&self) -> &Arc<Fill> {
        &self.fill
    }

    /// This reader, for a request that joined the fill once every byte had arrived.
    pub fn joined_complete(mut self) -> FillReader {
        self.complete = true;
        self
    }

    /// See [`Self::joined_complete`].
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// The reader has taken everything before body byte `pos`.
    pub fn at(&self, pos: u64) {
        if let Some(s) = self.fill.reader_slots().get_mut(self.slot) {
            *s = Some(pos);
        }
        self.fill.moved.notify_one();
    }
}

impl Drop for FillReader {
    fn drop(&mut self) {
        if let Some(s) = self.fill.reader_slots().get_mut(self.slot) {
            *s = None;
        }
        self.fill.moved.notify_one();
    }
}

impl FillKey for Fill {
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn id(&self) -> EntryId {
        self.id
    }
}

impl Fill {
    pub fn new(id: EntryId, key: Arc<[u8]>) -> Arc<Fill> {
        Arc::new(Fill {
            id,
            key,
            tx: watch::Sender::new(Progress::Waiting),
            tail: Mutex::new(Tail::default()),
            handoff: Mutex::new(None),
            commit: AtomicU8::new(RUNNING),
            readers: Mutex::new(Vec::new()),
            moved: tokio::sync::Notify::new(),
            for_origin: OnceLock::new(),
        })
    }

    /// When this fill's answer varies by `Origin`: the `Origin` it was made for (None: a
    /// request without one).
    pub fn made_for(&self) -> Option<Option<&str>> {
        self.for_origin.get().map(|(o, _)| o.as_deref())
    }

    /// The `Origin` this fill forwarded, when its answer varies by it.
    pub fn for_origin(&self) -> Option<&str> {
        self.made_for().flatten()
    }

    /// Whether this fill's answer is one Origin's own: made for the `Origin` it forwarded,
    /// and kept out of the cache by nothing that would keep it out whatever the Origin, so it
    /// says nothing of the object for other requests.
    pub fn origins_own(&self) -> bool {
        self.for_origin
            .get()
            .is_some_and(|(o, own)| o.is_some() && *own)
    }

    /// Note whether the answer of `status` with `headers` (the one this fill uses) varies by
    /// `Origin`, and whether it is the forwarded Origin's own (see the field).
    fn note_origin(&self, job: &FillJob, status: u16, headers: &http::HeaderMap, now_ms: i64) {
        let vary = headers.get_all(http::header::VARY).iter();
        let varies = freshness::varies_by(vary.filter_map(|v| v.to_str().ok()), "origin");
        // (A route answering CORS replaces the origin's, and forwards no `Origin`.)
        if !varies || job.answers_cors {
            return;
        }
        // Judged without its Vary (S3 names Access-Control-Request-* too): what keeps it out of
        // the cache whatever the request's fields.
        let mut unvaried = headers.clone();
        unvaried.remove(http::header::VARY);
        use freshness::NotStorable as No;
        let own = !matches!(
            freshness::evaluate(
                status,
                &unvaried,
                &job.policy,
                job.authorization.is_some(),
                true,
                now_ms / 1000,
                0,
            ),
            Freshness::NotStorable(No::NoStore | No::Private | No::SetCookie | No::Authorization)
        );
        let _ = self
            .for_origin
            .set((job.client_origin.as_deref().map(Arc::from), own));
    }

    fn reader_slots(&self) -> std::sync::MutexGuard<'_, Vec<Option<u64>>> {
        self.readers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register a reader starting at body byte `pos`.
    pub fn reader(self: &Arc<Self>, pos: u64) -> FillReader {
        let mut slots = self.reader_slots();
        let slot = match slots.iter().position(Option::is_none) {
            Some(i) => {
                slots[i] = Some(pos);
                i
            }
            None => {
                slots.push(Some(pos));
                slots.len() - 1
            }
        };
        drop(slots);
        self.moved.notify_one();
        FillReader {
            fill: self.clone(),
            slot,
            complete: false,
        }
    }

    /// The position of the reader furthest behind (None: no reader).
    fn slowest_reader(&self) -> Option<u64> {
        self.reader_slots().iter().flatten().copied().min()
    }

    /// Let go of the chunks before body byte `upto` (kept only for readers; nothing to store).
    fn let_go(&self, upto: u64) {
        let mut t = self.tail();
        let n = upto.saturating_sub(t.from + t.skip).min(t.len);
        t.skip += n;
        t.pop_front(n);
    }

    /// The object this fill is for was purged. Returns once the fill will store nothing it
    /// fetched, or, when its commit had already begun, once that commit ended (so the removal
    /// that follows the purge finds the entry). Its waiters still get their bytes.
    pub async fn purge(&self) {
        match self
            .commit
            .compare_exchange(RUNNING, PURGED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) | Err(PURGED) => return,
            Err(_) => {} // STORING: wait for the store to end
        }
        let mut rx = self.subscribe();
        let ended = rx.wait_for(|p| match p {
            Progress::Waiting => false,
            Progress::Body { done, .. } => *done,
            Progress::Refreshed { storing, .. } => !*storing,
            _ => true,
        });
        if tokio::time::timeout(PURGE_WAIT, ended).await.is_err() {
            tracing::error!(entry = %self.id.rel_path(), "purge: a commit under way did not end in time");
        }
    }

    /// May this fill store what it fetched? False once purged; after true a purge waits for
    /// the store to end instead.
    fn may_store(&self) -> bool {
        self.commit
            .compare_exchange(RUNNING, STORING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub fn subscribe(&self) -> watch::Receiver<Progress> {
        self.tx.subscribe()
    }

    /// The origin response of a bypassed fill, for the one request that streams it.
    pub fn take_response(&self) -> Option<OriginResponse> {
        self.handoff
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, Tail> {
        self.tail.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where body byte `offset` (below what [`Progress::Body`] says is available) is.
    pub fn read_at(&self, offset: u64, max: usize) -> ReadAt {
        let t = self.tail();
        if offset < t.from {
            return ReadAt::File(t.from);
        }
        if offset < t.from + t.skip {
            // Let go (every reader had passed it): an empty answer ends the reader.
            return ReadAt::Memory(Bytes::new());
        }
        let mut at = t.from + t.skip;
        for c in &t.chunks {
            let end = at + c.len() as u64;
            if offset < end {
                let s = (offset - at) as usize;
                let e = (s + max).min(c.len());
                return ReadAt::Memory(c.slice(s..e));
            }
            at = end;
        }
        ReadAt::Memory(Bytes::new())
    }

    fn publish(&self, p: Progress) {
        self.tx.send_replace(p);
    }

    /// Start `job` as a detached task on the current runtime. The fill must already be
    /// registered with [`CacheVolume::fill_for`]; it unregisters itself when it ends.
    pub fn spawn(self: &Arc<Self>, cv: Arc<CacheVolume<Fill>>, origin: Arc<Origin>, job: FillJob) {
        let fill = self.clone();
        cv.fill_started(self);
        tokio::spawn(async move {
            // Ends the fill however the task ends: a panic in it (or the runtime dropping it)
            // must not leave it joinable, its waiters waiting and a graceful stop counting it.
            let ended = Ended {
                cv: cv.clone(),
                fill: fill.clone(),
            };
            crate::cache::failpoint_fill();
            let revalidated = (job.revalidate.as_ref())
                .filter(|_| job.authorization.is_none())
                .map(|old| old.id);
            fill.run(&cv, &origin, job).await;
            if let Some(old) = revalidated {
                fill.withdraw_if_no_longer_storable(&cv, old).await;
            }
            drop(ended);
        });
    }

    /// A revalidation for shared requests answered with a body that may not be stored
    /// (no-store, private, Set-Cookie, Vary...; not a 5xx, which `stale-if-error` covers, nor
    /// a refusal to admit it): the stored object is withdrawn and its next requests are passed
    /// through (RFC 9111 §3), as after a 304 that says so ([`Self::refreshed`]). Done before
    /// the fill ends, so the fills gauge and a graceful stop count it.
    async fn withdraw_if_no_longer_storable(&self, cv: &CacheVolume<Fill>, old: EntryId) {
        let status = match *self.tx.borrow() {
            Progress::Bypass {
                status,
                refused: false,
                ..
            } if status < 500 => status,
            _ => return,
        };
        // Purged meanwhile: a newer copy may be stored since; this answer says nothing of it.
        // Nor does one Origin's own answer of the object for other requests.
        if self.purged() || self.origins_own() {
            return;
        }
        tracing::debug!(volume = %cv.name, entry = %old.rel_path(), status, "revalidated: no longer storable; the stored object is withdrawn");
        // A later slice's 200 or 206 refused is the object refused; another answer to a later
        // slice (a 404, say) may still be storable as the first slice.
        withdraw_object(
            cv,
            old.hash(),
            old.slice == 0 || matches!(status, 200 | 206),
        )
        .await;
    }

    /// Was this fill's object purged while it ran (it stores nothing)?
    fn purged(&self) -> bool {
        self.commit.load(Ordering::Acquire) == PURGED
    }

    async fn run(self: &Arc<Self>, cv: &Arc<CacheVolume<Fill>>, origin: &Origin, job: FillJob) {
        let s = cv.slice_size;
        let mut req = OriginRequest::get(job.target.clone());
        if s > 0 {
            let start = job.slice as u64 * s;
            req.range = Some((start, start + s - 1));
        }
        if let Some(old) = &job.revalidate {
            req.if_none_match = old.meta.etag.clone();
            req.if_modified_since = old.meta.last_modified.clone();
            // A copy to serve if the origin fails: not sent while every server is marked
            // down (each request waited for the same failure: a hanging server's whole read
            // timeout), as nginx answers stale with no live upstream; the requests waiting on
            // this fill get the stale copy at once.
            req.only_if_up = unix_now_ms() < old.meta.stale_if_error_until_ms;
        }
        req.authorization = job.authorization.clone();
        req.origin = job.client_origin.clone();
        let authorized = job.authorization.is_some();
        let mut resp = match origin.fetch(req.clone()).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(volume = %cv.name, request = %job.target, error = %e, "fill: origin failed");
                return self.publish(Progress::Failed(Arc::new(FillError::Origin(e))));
            }
        };
        let now = unix_now_ms();
        if resp.status == 304 {
            if let Some(old) = &job.revalidate {
                if !names_another_version(
                    &resp.headers,
                    old.meta.etag.as_deref(),
                    old.meta.last_modified.as_deref(),
                ) {
                    return self.refreshed(cv, origin, &job, old, &resp, now).await;
                }
                // A 304 that does not select the stored response by its own validator
                // ([`names_another_version`]) refreshes nothing (RFC 9111 §4.3.4): ask for the
                // object itself.
                tracing::warn!(volume = %cv.name, request = %job.target, "origin's 304 names another version than the stored one; fetching it unconditionally");
                req.if_none_match = None;
                req.if_modified_since = None;
                resp = match origin.fetch(req).await {
                    Ok(r) => r,
                    Err(e) => {
                        return self.publish(Progress::Failed(Arc::new(FillError::Origin(e))))
                    }
                };
            }
        }
        // (The answer used: not a 304 that named another version.)
        let used_status = if resp.status == 206 { 200 } else { resp.status };
        self.note_origin(&job, used_status, &resp.headers, now);
        if resp.status == 416 {
            let total = origin::unsatisfied_total(&resp.headers);
            return self.publish(Progress::Failed(Arc::new(FillError::NotSatisfiable {
                total,
            })));
        }
        // An origin that ignores Range answers a later slice's range past the object's end
        // with the whole object, shorter than where the slice starts: that says what a 416
        // says (not "Range ignored", which passes the object through for everyone). Only an
        // answer that is the object (a strong validator, storable), not an error page of
        // status 200; one of unknown length is read ahead to see whether it ends that soon.
        if resp.status == 200 && s > 0 && job.slice > 0 {
            let start = u64::from(job.slice) * s;
            let is_the_object = conditional::strong_validator(
                header(&resp, "etag").as_deref(),
                header(&resp, "last-modified").as_deref(),
                header(&resp, "date").as_deref(),
            ) && matches!(
                freshness_of(&job, authorized, now, 200, &resp),
                Freshness::Storable(_)
            );
            if is_the_object && resp.expected.is_none() {
                if let Err(e) = resp
                    .read_unknown_length(start.min(UNKNOWN_LENGTH_MAX))
                    .await
                {
                    return self.publish(Progress::Failed(Arc::new(FillError::Origin(e))));
                }
            }
            if let (true, Some(len)) = (is_the_object, resp.expected) {
                if len <= start {
                    tracing::debug!(volume = %cv.name, request = %job.target, len, "a later slice's range is past the object's end (a 200 of the whole)");
                    return self.publish(Progress::Failed(Arc::new(FillError::NotSatisfiable {
                        total: Some(len),
                    })));
                }
            }
        }
        // An answer of unknown length (chunked) can be stored as the object's first slice when it
        // ends within a slice (1 MiB on a volume of whole objects): read it ahead to know.
        if resp.expected.is_none()
            && job.slice == 0
            && (resp.status == 200 || whole_answer_status(resp.status))
        {
            let cap = if s > 0 { s } else { UNKNOWN_LENGTH_MAX };
            if let Err(e) = resp.read_unknown_length(cap).await {
                tracing::debug!(volume = %cv.name, request = %job.target, error = %e, "fill: origin failed");
                return self.publish(Progress::Failed(Arc::new(FillError::Origin(e))));
            }
        }
        let Some((body_len, total)) = self.body_shape(s, job.slice, &resp) else {
            let object_answer = job.slice > 0
                && whole_answer_status(resp.status)
                && matches!(
                    freshness_of(&job, authorized, now, resp.status, &resp),
                    Freshness::Storable(_)
                );
            return self.hand_over(resp, false, object_answer);
        };
        // Slices of one object are served together, and resumed bodies joined to what came
        // before: both combine partial answers, which needs a strong validator (RFC 9111 §3.4).
        // Without one, an object of more than one slice is not stored as slices (the request
        // gets it whole, passed through): two versions of the same size would otherwise mix.
        let strong = conditional::strong_validator(
            header(&resp, "etag").as_deref(),
            header(&resp, "last-modified").as_deref(),
            header(&resp, "date").as_deref(),
        );
        // What is stored and served: 200 for the object's bytes (a slice's 206 included), or
        // another status's whole answer (a 404, a redirect), kept as slice 0.
        let status = if resp.status == 206 { 200 } else { resp.status };
        if status == 200 && s > 0 && total > s && !strong {
            tracing::debug!(volume = %cv.name, request = %job.target, "not storable as slices: no strong validator");
            return self.bypass(resp);
        }
        let fresh = match freshness_of(&job, authorized, now, status, &resp) {
            Freshness::Storable(f) => f,
            Freshness::NotStorable(why) => {
                tracing::debug!(volume = %cv.name, request = %job.target, why = why.as_str(), "not storable");
                return self.bypass(resp);
            }
        };
        let fresh_until_ms = later(now, fresh.fresh_for);
        let meta = EntryMeta {
            key: job.key.as_bytes().to_vec(),
            status,
            slice: job.slice,
            slice_size: s,
            body_len,
            total_size: total,
            stored_at_ms: now,
            initial_age: fresh.age.min(u32::MAX as u64) as u32,
            fresh_until_ms,
            stale_while_revalidate_until_ms: later(fresh_until_ms, fresh.stale_while_revalidate),
            stale_if_error_until_ms: later(fresh_until_ms, fresh.stale_if_error),
            etag: header(&resp, "etag"),
            last_modified: header(&resp, "last-modified"),
            headers: kept_headers(&resp.headers, origin, now),
        };
        if !meta.fits() {
            tracing::debug!(volume = %cv.name, request = %job.target, "not storable: its key and header fields are over the entry header's limit");
            return self.bypass(resp);
        }
        self.body(cv, origin, &job, meta, resp, strong).await;
    }

    /// (body bytes of this slice, the object's total size), or None when the answer cannot be
    /// stored as this slice (unknown length, an origin ignoring Range on a larger object, a
    /// 5xx, or another status than 200/206 asked for a later slice). The whole answer of
    /// another status (a 404, a redirect) is stored as slice 0, whatever its length.
    fn body_shape(&self, s: u64, slice: u32, resp: &OriginResponse) -> Option<(u64, u64)> {
        match resp.status {
            st if slice == 0 && whole_answer_status(st) => {
                let len = resp.expected?;
                Some((len, len))
            }
            206 if s > 0 => {
                // The origin client refused a 206 for another span than the slice asked for.
                let cr = origin::content_range(&resp.headers)?;
                let total = cr.total?;
                // An object of more slices than an entry id numbers (2^32: 256 TiB at 64 KiB)
                // is a lying origin's: passed through, never stored.
                let numbered = (total - 1) / s <= u64::from(u32::MAX);
                (cr.start == slice as u64 * s && cr.end < total && numbered)
                    .then_some((cr.len(), total))
            }
            200 => {
                let len = resp.expected?;
                // Without Range support a whole object is slice 0 only if it fits in one.
                (s == 0 || (slice == 0 && len <= s)).then_some((len, len))
            }
            _ => None,
        }
    }

    fn bypass(&self, resp: OriginResponse) {
        self.hand_over(resp, false, false)
    }

    fn hand_over(&self, resp: OriginResponse, refused: bool, object_answer: bool) {
        let status = resp.status;
        *self.handoff.lock().unwrap_or_else(|p| p.into_inner()) = Some(resp);
        self.publish(Progress::Bypass {
            status,
            refused,
            object_answer,
        });
    }

    async fn refreshed(
        self: &Arc<Self>,
        cv: &Arc<CacheVolume<Fill>>,
        origin: &Origin,
        job: &FillJob,
        old: &Arc<Stored>,
        resp: &OriginResponse,
        now: i64,
    ) {
        // The 304's fields replace the stored ones of the same name, every line of each
        // (RFC 9111 §4.3.4): a field on two lines (`Cache-Control: max-age=2` and
        // `Cache-Control: must-revalidate`) keeps both.
        let mut merged = http::HeaderMap::new();
        // Not the stored Date: the 304's (or, without one, none: its age starts now) is the
        // one the new age counts from.
        let old_fields = old.meta.headers.iter();
        for (n, v) in old_fields.filter(|(n, _)| !n.eq_ignore_ascii_case("date")) {
            if let (Ok(n), Ok(v)) = (
                http::HeaderName::from_bytes(n.as_bytes()),
                http::HeaderValue::from_str(v),
            ) {
                merged.append(n, v);
            }
        }
        // Not Content-Encoding: the stored bytes are in the coding they came in (a 304 naming
        // another, with the same strong validator, would label them wrongly).
        let updates = |n: &http::HeaderName| *n != http::header::CONTENT_ENCODING;
        for n in resp.headers.keys().filter(|n| updates(n)) {
            merged.remove(n);
        }
        for (n, v) in resp.headers.iter().filter(|(n, _)| updates(n)) {
            merged.append(n.clone(), v.clone());
        }
        let mut meta = (*old.meta).clone();
        meta.stored_at_ms = now;
        // The stored response was selected by the 304's own validator
        // ([`names_another_version`]: a matching ETag, or without one the same Last-Modified):
        // a newer Last-Modified the 304 sends is the stored one's from now on (§4.3.4).
        if let Some(lm) = header(resp, "last-modified") {
            let parsed = crate::http::date::parse(&lm);
            if parsed.is_some()
                && parsed
                    != meta
                        .last_modified
                        .as_deref()
                        .and_then(crate::http::date::parse)
            {
                meta.last_modified = Some(lm);
            }
        }
        let authorized = job.authorization.is_some();
        self.note_origin(job, old.meta.status, &merged, now);
        match freshness::evaluate(
            old.meta.status,
            &merged,
            &job.policy,
            authorized,
            job.answers_cors,
            now / 1000,
            resp.response_delay.as_secs(),
        ) {
            Freshness::Storable(f) => {
                meta.initial_age = f.age.min(u32::MAX as u64) as u32;
                meta.fresh_until_ms = later(now, f.fresh_for);
                meta.stale_while_revalidate_until_ms =
                    later(meta.fresh_until_ms, f.stale_while_revalidate);
                meta.stale_if_error_until_ms = later(meta.fresh_until_ms, f.stale_if_error);
            }
            Freshness::NotStorable(why) => {
                // The 304 validates the body for the requests waiting (they get it with its
                // fields), but the response may no longer be kept (no-store, private, Vary:
                // Cookie...; RFC 9111 §3): the object is withdrawn and its next requests are
                // passed through, as after a 200 that says so.
                meta.fresh_until_ms = now;
                meta.stale_while_revalidate_until_ms = now;
                meta.stale_if_error_until_ms = now;
                meta.headers = kept_headers(&merged, origin, now);
                // (Not when purged meanwhile: a newer copy may be stored since; nor for an
                // answer that is one Origin's or one user's alone.)
                let withdraw = !authorized && !self.origins_own() && !self.purged();
                if withdraw {
                    // Passed through from now, before anyone has this answer: a request
                    // that comes once it went out must not join this fill or find the entry.
                    cv.passes.shared.mark(old.id.hash(), unix_now_ms());
                    cv.unregister_fill(self.id, self);
                }
                self.publish(Progress::Refreshed {
                    stored: Arc::new(old.with_meta(Arc::new(meta))),
                    storing: false,
                });
                if withdraw {
                    tracing::debug!(volume = %cv.name, request = %job.target, why = why.as_str(), "revalidated but no longer storable; the object is withdrawn");
                    withdraw_object(cv, old.id.hash(), true).await;
                }
                return;
            }
        }
        meta.headers = kept_headers(&merged, origin, now);
        if !self.may_store() || !meta.fits() {
            // Purged meanwhile (or the 304's fields made the header too long to store): answer
            // the waiters from the old body, store nothing.
            let s = Arc::new(old.with_meta(Arc::new(meta)));
            return self.publish(Progress::Refreshed {
                stored: s,
                storing: false,
            });
        }
        // Stale at once (no-cache, max-age=0): every use revalidates, and a rewrite for each
        // 304 would copy the body as often (whole objects of gigabytes, several at once). The
        // file keeps its header; the entry in memory has the new one.
        if meta.fresh_until_ms <= now {
            let s = Arc::new(old.with_meta(Arc::new(meta)));
            cv.remember(s.clone());
            return self.publish(Progress::Refreshed {
                stored: s,
                storing: false,
            });
        }
        // The waiters (and new requests) are served the file they have, with the new
        // freshness, while the header is rewritten: the rewrite copies the body (a whole object
        // of gigabytes on a volume with `slice_size = 0`), and a 304 must not cost its wait.
        // New requests no longer join this fill (a revalidation answered: one that comes now
        // finds the entry, which may already be stale again, and is not given a past answer);
        // a purge still waits for the rewrite, which the fill runs to its end.
        cv.unregister_fill(self.id, self);
        let now_refreshed = Arc::new(old.with_meta(Arc::new(meta.clone())));
        cv.remember(now_refreshed.clone());
        self.publish(Progress::Refreshed {
            stored: now_refreshed.clone(),
            storing: true,
        });
        let store = cv.store.clone();
        let (id, old_fd, off, m) = (old.id, old.fd.clone(), old.body_offset, meta.clone());
        let written = cv
            .blocking(move || store.rewrite(id, &old_fd, off, m))
            .await;
        let stored = match written {
            Ok(Ok((fd, len))) => {
                let s = Arc::new(Stored::new(id, fd, Arc::new(meta)));
                cv.committed(s.clone(), len, 0);
                s
            }
            // Removed meanwhile: the waiters get the old body they were promised, and it is not
            // kept open (the removal took it out of the open table, or `keep_open` did, finding
            // it out of the index): it would be served as stored while no file holds it.
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::debug!(volume = %cv.name, request = %job.target, "revalidated entry removed meanwhile; not stored again");
                now_refreshed
            }
            other => {
                if let Ok(Err(e)) = &other {
                    if e.raw_os_error() == Some(libc::ENOSPC) {
                        cv.disk_full();
                    }
                }
                // The old body is served with the new freshness (it is remembered so); the
                // file keeps the old header.
                now_refreshed
            }
        };
        self.publish(Progress::Refreshed {
            stored,
            storing: false,
        });
    }

    async fn body(
        self: &Arc<Self>,
        cv: &Arc<CacheVolume<Fill>>,
        origin: &Origin,
        job: &FillJob,
        meta: EntryMeta,
        mut resp: OriginResponse,
        strong: bool,
    ) {
        let id = self.id;
        let body_len = meta.body_len;
        // Not while the object is passed through (withdrawn, or its answers not storable): a
        // slice stored now (a seek, the rest of a full read, from an origin whose 206s say
        // otherwise than its 304) would be served to seeks while full reads pass through.
        let storable = !cv.passes.shared.passing(id.hash(), unix_now_ms())
            && (!cv.disk_full_lately() || cv.index.fits(meta.file_len()));
        // Admitted, its temporary file counts against `max_size` from now on, until it is
        // committed or removed.
        let mut reservation = storable
            .then(|| Reservation::admit(cv, id, meta.file_len()))
            .flatten();
        let admitted = reservation.is_some();
        // The temporary file is created on the pool while the first bytes are already sent
        // from memory: a pool queued behind slow writes delays the storing, not the clients.
        let mut creating = None;
        if admitted {
            let (store, m) = (cv.store.clone(), meta.clone());
            match cv
                .pool
                .submit_optional(PoolOp::Open, move || store.create_temp(id, m))
            {
                Some(rx) => creating = Some(rx),
                None => {
                    reservation = None;
                    tracing::debug!(volume = %cv.name, "fill not stored: pool busy")
                }
            }
        }
        if creating.is_none() && body_len > MEMORY_MAX {
            // Too large to hold for the waiters: stream it through once, others fetch. Not a
            // pass: its next request may be admitted.
            return self.hand_over(resp, true, false);
        }
        let mut temp: Option<TempEntry> = None;
        let meta = Arc::new(meta);
        let head = Arc::new(FillHead {
            meta: meta.clone(),
            file: OnceLock::new(),
            body_offset: meta.body_offset(),
        });
        let progress = |avail: u64, done: bool| Progress::Body {
            head: head.clone(),
            avail,
            done,
        };
        self.publish(progress(0, false));
        // Received bytes are readable from memory at once; the pool writes them behind (one
        // write in flight) and readers then take them from the file. So waiters never wait for
        // the disk, and memory holds only what is not written yet (reading from the origin
        // pauses beyond WINDOW_MAX). When storing fails, the rest stays in memory.
        let mut received = 0u64;
        let mut eof = false;
        let mut resumes = 0;
        let mut writing: Option<tokio::sync::oneshot::Receiver<WriteDone>> = None;
        let mut unreachable = false;
        loop {
            if writing.is_none() {
                if let Some(t) = temp.take() {
                    let batch = self.unwritten_chunks();
                    let n: usize = batch.iter().map(|b| b.len()).sum();
                    if n >= WRITE_BATCH || (eof && n > 0) {
                        let job = move || {
                            let mut t = t;
                            let mut r = Ok(());
                            let mut done = 0u64;
                            for b in &batch {
                                r = t.write(b);
                                if r.is_err() {
                                    break;
                                }
                                done += b.len() as u64;
                            }
                            WriteDone { t, r, done }
                        };
                        // Writes of an admitted fill are never refused (like a body chunk).
                        match cv.pool.submit_continuation(PoolOp::Open, job) {
                            Ok(rx) => writing = Some(rx),
                            Err(e) => {
                                tracing::error!(volume = %cv.name, error = %e, "fill: cannot queue a write")
                            }
                        }
                    } else {
                        temp = Some(t);
                    }
                }
            }
            if eof && writing.is_none() && creating.is_none() {
                break;
            }
            let unwritten = received - self.tail().from;
            let storing = temp.is_some() || writing.is_some() || creating.is_some();
            // Storing failed on a body too large to keep for the waiters (a full disk): no new
            // request joins it any more, its memory holds only what its readers still need,
            // and reading the origin waits for the slowest of them; with none left it ends.
            let paced = !storing && body_len > MEMORY_MAX;
            if paced {
                if !unreachable {
                    unreachable = true;
                    cv.unregister_fill(id, self);
                    tracing::warn!(volume = %cv.name, entry = %id.rel_path(), "fill not stored and too large to hold: paced by its readers");
                }
                match self.slowest_reader() {
                    Some(pos) => self.let_go(pos),
                    // A request waiting for it that has not registered yet (it subscribed):
                    // everything is kept for it.
                    None if self.tx.receiver_count() > 0 => {}
                    None if !eof => {
                        drop(resp);
                        return self.publish(Progress::Failed(Arc::new(FillError::Origin(
                            OriginError::Shutdown {
                                origin: origin.name().to_string(),
                            },
                        ))));
                    }
                    None => {}
                }
            }
            let held = self.tail().len;
            let can_read = !eof
                && if paced {
                    held < WINDOW_MAX
                } else {
                    !storing || unwritten < WINDOW_MAX
                };
            let mut broke = None;
            tokio::select! {
                _ = self.moved.notified(), if paced && !can_read && !eof => {}
                // A request that subscribed may leave without registering: look again.
                _ = tokio::time::sleep(std::time::Duration::from_secs(1)), if paced && !can_read && !eof => {}
                created = async { creating.as_mut().expect("guarded").await }, if creating.is_some() => {
                    creating = None;
                    match created {
                        Ok(Ok(t)) => {
                            let _ = head.file.set(t.fd());
                            temp = Some(t);
                        }
                        // The rest stays in memory; nothing is stored.
                        Ok(Err(e)) => {
                            reservation = None;
                            self.store_failed(cv, &e)
                        }
                        Err(_) => tracing::error!(volume = %cv.name, "fill: the pool lost a file creation"),
                    }
                }
                done = async { writing.as_mut().expect("guarded").await }, if writing.is_some() => {
                    writing = None;
                    match done {
                        Ok(WriteDone { t, r: Ok(()), done }) => {
                            self.written(done);
                            temp = Some(t);
                        }
                        Ok(WriteDone { t, r: Err(e), done }) => {
                            // Serve the rest from memory from where the file stops; store nothing.
                            self.written(done);
                            self.store_failed(cv, &e);
                            abort(cv, t);
                            reservation = None;
                        }
                        Err(_) => tracing::error!(volume = %cv.name, "fill: the pool lost a write"),
                    }
                }
                chunk = resp.chunk(), if can_read => match chunk {
                    Ok(Some(b)) => {
                        received += b.len() as u64;
                        {
                            let mut t = self.tail();
                            t.len += b.len() as u64;
                            t.chunks.push_back(b);
                        }
                        self.publish(progress(received, false));
                    }
                    Ok(None) => eof = true,
                    Err(e) => broke = Some(e),
                },
            }
            let Some(e) = broke else { continue };
            tracing::debug!(volume = %cv.name, entry = %id.rel_path(), received, error = %e, "fill: origin body failed");
            // The broken answer goes first: its connection counts against max_connections.
            drop(resp);
            let rest = match e {
                OriginError::Shutdown { .. } => None,
                _ if resumes == RESUMES_MAX => None,
                _ if !strong => None,
                _ => resume(origin, job, &meta, received).await,
            };
            if let Some(rest) = rest {
                resumes += 1;
                cv.m.resumes.inc();
                resp = rest;
                continue;
            }
            if let Some(rx) = writing.take() {
                if let Ok(w) = rx.await {
                    abort(cv, w.t);
                }
            }
            if let Some(rx) = creating.take() {
                if let Ok(Ok(t)) = rx.await {
                    abort(cv, t);
                }
            }
            if let Some(t) = temp.take() {
                abort(cv, t);
            }
            return self.publish(Progress::Failed(Arc::new(FillError::Origin(e))));
        }
        debug_assert_eq!(received, body_len);
        if let Some(t) = temp.take_if(|_| !self.may_store()) {
            // Purged while it ran: what it fetched is not stored.
            abort(cv, t);
        }
        if let Some(t) = temp {
            let fd = t.fd();
            // Never refused: the body is fetched and written, and a refused task would drop
            // the temporary file (left on the disk until the next start: a busy pool leaked
            // them until the disk was full).
            match cv
                .pool
                .run_continuation(PoolOp::Open, move || t.commit())
                .await
            {
                Ok(Ok(len)) => {
                    let revalidated = job.revalidate.as_ref().filter(|old| old.id == id);
                    if revalidated.is_some_and(|old| !old.meta.same_version(&meta)) {
                        cv.count_replaced();
                    }
                    // (Made after the rename, which changes the file's change time.)
                    let reserved = reservation.take().map_or(0, Reservation::into_committed);
                    cv.committed(Arc::new(Stored::new(id, fd, meta.clone())), len, reserved);
                }
                Ok(Err(e)) => self.store_failed(cv, &e),
                Err(e) => tracing::warn!(volume = %cv.name, error = %e, "fill: cannot commit"),
            }
        }
        // `done` after the commit, so a client that has the whole body finds the entry stored.
        self.publish(progress(received, true));
    }

    /// The received chunks not written yet (cheap clones).
    fn unwritten_chunks(&self) -> Vec<Bytes> {
        self.tail().chunks.iter().cloned().collect()
    }

    /// `n` more bytes are in the file: readers take them from there, memory lets them go.
    fn written(&self, n: u64) {
        let mut t = self.tail();
        t.from += n;
        t.pop_front(n);
    }

    fn store_failed(&self, cv: &CacheVolume<Fill>, e: &std::io::Error) {
        if e.raw_os_error() == Some(libc::ENOSPC) {
            cv.disk_full();
        } else {
            cv.m.store_failed[1].inc();
            // (Once a second at most: out of descriptors, or a cache directory that is not
            // one, every fill meets it.)
            if let Some(left_out) = cv.store_failed_log.allow() {
                tracing::warn!(volume = %cv.name, entry = %self.id.rel_path(), error = %e, left_out, "cannot store cache entry (served all the same; at most one such line a second per volume, left_out: those not logged since)");
            }
        }
    }
}

/// Withdraw the object `hash` (hit-for-pass): every stored slice of it goes, of any version,
/// and the fills of it still running store nothing (their readers get their bytes), so no
/// slice of it is served from the cache afterwards (a seek answered from one would serve a
/// version the origin no longer lets be kept, or refresh it and store a first slice again).
/// With `pass`, its next requests are passed through (marked before, so no request or
/// prefetch starts a fill meanwhile, and kept through the removal).
pub async fn withdraw_object(cv: &CacheVolume<Fill>, hash: u128, pass: bool) {
    if pass {
        cv.passes.shared.mark(hash, unix_now_ms());
    }
    for fill in cv.take_fills(|f| f.id.hash() == hash) {
        fill.purge().await;
    }
    let _ = if pass {
        cv.remove_object_files(hash).await
    } else {
        cv.remove_object(hash).await
    };
}

/// Space reserved in the index for an entry being written (its temporary file takes disk as
/// the entry will); released when dropped, unless it became the committed entry's.
struct Reservation {
    cv: Arc<CacheVolume<Fill>>,
    bytes: u64,
}

impl Reservation {
    /// Admitted (the index's admission), its space reserved; None when not admitted.
    fn admit(cv: &Arc<CacheVolume<Fill>>, id: EntryId, bytes: u64) -> Option<Reservation> {
        cv.delete(cv.index.admit_and_reserve(id, bytes)?);
        Some(Reservation {
            cv: cv.clone(),
            bytes,
        })
    }

    /// The bytes reserved, now the committed entry's (nothing is released).
    fn into_committed(mut self) -> u64 {
        std::mem::take(&mut self.bytes)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.cv.index.release(self.bytes);
        }
    }
}

/// Remove a temporary file on the pool (never on the event loop).
fn abort(cv: &CacheVolume<Fill>, t: TempEntry) {
    let _ = cv.pool.submit_continuation(PoolOp::Open, move || t.abort());
}

/// After the origin's body broke off at `received` bytes (reset, truncated, stalled), ask for
/// the rest of it: a Range request from that byte to the body's end. The answer continues the
/// body only if it is that exact 206 of the same version (the same ETag, Last-Modified and
/// total size; the caller asks only for a body whose first answer had a strong validator);
/// anything else (another version, a 200, an error) is None and the fill fails as before.
async fn resume(
    origin: &Origin,
    job: &FillJob,
    meta: &EntryMeta,
    received: u64,
) -> Option<OriginResponse> {
    if received >= meta.body_len {
        return None;
    }
    let first = u64::from(meta.slice) * meta.slice_size;
    let (start, end) = (first + received, first + meta.body_len - 1);
    let mut req = OriginRequest::get(job.target.clone());
    req.range = Some((start, end));
    req.authorization = job.authorization.clone();
    req.origin = job.client_origin.clone();
    let resp = origin.fetch(req).await.ok()?;
    let cr = origin::content_range(&resp.headers)?;
    let same = resp.status == 206
        && (cr.start, cr.end, cr.total) == (start, end, Some(meta.total_size))
        && header(&resp, "etag") == meta.etag
        && header(&resp, "last-modified") == meta.last_modified;
    same.then_some(resp)
}

/// RFC 9111 freshness of the origin's answer `resp` as of status `status` (a slice's 206 is
/// judged as the object's 200), for `job`'s route and request, at `now_ms`.
fn freshness_of(
    job: &FillJob,
    authorized: bool,
    now_ms: i64,
    status: u16,
    resp: &OriginResponse,
) -> Freshness {
    freshness::evaluate(
        status,
        &resp.headers,
        &job.policy,
        authorized,
        job.answers_cors,
        now_ms / 1000,
        resp.response_delay.as_secs(),
    )
}

/// A status whose answer is stored whole, as the object's slice 0, when its freshness allows
/// (the route's `valid` rules or the origin's headers): any answer other than the object's
/// bytes (200/206) that `config::never_stored` does not exclude (1xx, 304, 416, 5xx).
fn whole_answer_status(status: u16) -> bool {
    (201..600).contains(&status) && status != 206 && config::never_stored(status).is_none()
}

/// A response header's value as stored with an entry (trimmed; None when empty or not text).
pub(super) fn header(resp: &OriginResponse, name: &str) -> Option<String> {
    resp.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The response headers kept with an entry and sent with it, `Date` included: the origin's
/// (written as an IMF-fixdate), or `now_ms` for an answer without a valid one (RFC 9110
/// §6.6.1). Answers from the entry carry it with an `Age` counted from it, so a downstream
/// cache computes the lifetime the origin gave (`Expires` - `Date`) and the age alike (RFC 9111
/// §4.2); a Date of the moment of sending would shorten what is left of it by the `Age`.
fn kept_headers(h: &http::HeaderMap, origin: &Origin, now_ms: i64) -> Vec<(String, String)> {
    let date = h
        .get(http::header::DATE)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::http::date::parse)
        .unwrap_or(now_ms.div_euclid(1000));
    let mut kept = stored_headers(h, origin);
    kept.push(("Date".to_string(), crate::http::date::format(date)));
    kept
}

/// The response headers kept with an entry and sent with it, but `Date` ([`kept_headers`]).
fn stored_headers(h: &http::HeaderMap, origin: &Origin) -> Vec<(String, String)> {
    forwarded(h, origin)
        .filter(|(n, _)| !NOT_STORED.contains(&n.as_str()))
        .map(|(n, v)| (canonical(n.as_str()), v.into_owned()))
        .collect()
}

/// The origin's header fields as clients get them: end-to-end ones only (neither hop-by-hop
/// nor named by its `Connection` field, RFC 9110 §7.6.1: a proxy removes those before
/// forwarding), values that are UTF-8 (any visible ASCII, and raw UTF-8 such as a download's
/// file name in `Content-Disposition`, byte for byte; other bytes cannot be carried and drop
/// the field, but for `Cache-Control` and `Pragma`, whose directives must reach the client's
/// caches: those go with each such byte replaced), a `Location` on the origin itself made a
/// path on this node ([`Origin::client_location`]).
pub fn forwarded<'h>(
    h: &'h http::HeaderMap,
    origin: &'h Origin,
) -> impl Iterator<Item = (&'h http::HeaderName, std::borrow::Cow<'h, str>)> {
    use std::borrow::Cow;
    let named: Vec<String> = h
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    h.iter()
        .filter(move |(n, _)| {
            !HOP_BY_HOP.contains(&n.as_str()) && !named.iter().any(|t| t == n.as_str())
        })
        .filter_map(|(n, v)| match std::str::from_utf8(v.as_bytes()) {
            Ok(v) if n == http::header::LOCATION => {
                Some((n, Cow::Borrowed(origin.client_location(v))))
            }
            Ok(v) => Some((n, Cow::Borrowed(v))),
            Err(_) if n == http::header::CACHE_CONTROL || n == http::header::PRAGMA => {
                Some((n, String::from_utf8_lossy(v.as_bytes())))
            }
            Err(_) => None,
        })
}

/// Whether a 304 does not select the stored response, so it must not update it (RFC 9111
/// §4.3.4). Its ETag decides when it has one: a strong one selects only the same strong tag,
/// a weak one a stored tag that matches it weakly (a stored response without an ETag is
/// selected by neither). Without one, its Last-Modified decides: the stored one must be the
/// same. A 304 with no validator at all is taken for the stored response (the request was
/// made from it, and origins that leave them out of a 304 are common).
fn names_another_version(
    h: &http::HeaderMap,
    etag: Option<&str>,
    last_modified: Option<&str>,
) -> bool {
    let field = |n| h.get(n).and_then(|v: &http::HeaderValue| v.to_str().ok());
    let old_etag = etag.map(str::trim);
    if let Some(new) = field(http::header::ETAG).map(str::trim) {
        use crate::http::conditional::weak_opaque;
        return match new.starts_with("W/") {
            false => old_etag != Some(new),
            true => old_etag.map(weak_opaque) != Some(weak_opaque(new)),
        };
    }
    let date = |v: Option<&str>| v.and_then(crate::http::date::parse);
    match (
        date(field(http::header::LAST_MODIFIED)),
        date(last_modified),
    ) {
        (Some(new), old) => Some(new) != old,
        (None, _) => false,
    }
}

/// A field name as clients are used to see it: `content-type` -> `Content-Type`, `etag` ->
/// `ETag`, `www-authenticate` -> `WWW-Authenticate` (names are case-insensitive, RFC 9110
/// §5.1; the origin client has them in lower case).
pub(super) fn canonical(name: &str) -> String {
    match name {
        "etag" => return "ETag".into(),
        "www-authenticate" => return "WWW-Authenticate".into(),
        _ => {}
    }
    let mut out = String::with_capacity(name.len());
    let mut up = true;
    for c in name.chars() {
        out.push(if up { c.to_ascii_uppercase() } else { c });
        up = c == '-';
    }
    out
}

pub use crate::http::date::unix_now_ms;

/// `secs` whole seconds after `at_ms` (saturating: "very long" lifetimes stay far off).
fn later(at_ms: i64, secs: u64) -> i64 {
    at_ms.saturating_add(secs.saturating_mul(1000).min(i64::MAX as u64 / 4) as i64)
}
