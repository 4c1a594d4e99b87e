//! Answering one request of a cache route: find the object's first needed slice (stored, being
//! filled, or to fill), decide by its freshness (HIT, UPDATING + one background refresh,
//! synchronous revalidation -> REVALIDATED / MISS, STALE when the origin fails within
//! stale-if-error), evaluate conditionals and ranges against the object, send the head, then the
//! body slice by slice: stored slices and the bytes of fills under way both go through the
//! volume's send path (`Volume::send_body`: offload mode, sendfile or the page-cache
//! copy), and the next slice is prefetched while the current one is sent (at once from a fill,
//! from a stored slice once its last quarter goes out). Every slice is checked
//! against the first one's validator: a stored slice of another version is asked for again
//! (conditionally) and replaced when the origin has the response's version; a new version at
//! the origin ends the response (never two versions in one body) and drops the old slices.
//! A range request's first slice, stored, is checked against the object's first slice too, so
//! seeks do not splice versions across requests.
//! Several ranges are answered like a static file's (206 multipart/byteranges, the http planner's range rules), each part sent
//! slice by slice like a single range. Another status's stored answer (a 404, a redirect) is
//! sent whole with its status, without ranges or preconditions. Not storable answers are
//! passed through (BYPASS).
//! A request with `Authorization` (RFC 9111 §3.5) uses a stored answer only when it says it may
//! be shared, and never joins nor shares a fill: its fills forward the credentials, run for it
//! alone, and store only what the origin allows to share. It must not read from the socket.

use super::fill::{unix_now_ms, Fill, FillError, FillHead, FillJob, FillReader, Progress};
use super::key::{CacheKey, EntryId};
use super::volume::{CacheStatus, CacheVolume, FillFor, Found, Stored};
use crate::config::CachePolicy;
use crate::http::conditional::{self, Conditions, Current, Precondition};
use crate::http::freshness;
use crate::http::multipart::{self, Multipart};
use crate::http::parse::{Method, Request};
use crate::http::plan::{Body, Policy};
use crate::http::range::{self, Ranges};
use crate::http::response::Head;
use crate::http::response::Served;
use crate::origin::{self, Origin, OriginError, OriginRequest, OriginResponse};
use crate::socket::Socket;
use crate::volume::{BodyError, Volume, Watch};
use std::sync::Arc;
use std::time::Duration;

/// Fields a 304 repeats besides the validators (RFC 9110 §15.4.5).
const NOT_MODIFIED_FIELDS: &[&str] = &["cache-control", "content-location", "expires", "vary"];

/// Whether a 304 repeats the object's field `name`: those of RFC 9110 §15.4.5, and the
/// origin's CORS answer (`Access-Control-*`, `Timing-Allow-Origin`), which says nothing of the
/// body but without which a browser fails a script's own revalidation in CORS mode (nginx's
/// 304 from its cache repeats them too).
fn repeated_on_304(name: &str) -> bool {
    let starts = |p: &str| {
        name.get(..p.len())
            .is_some_and(|h| h.eq_ignore_ascii_case(p))
    };
    NOT_MODIFIED_FIELDS
        .iter()
        .any(|f| name.eq_ignore_ascii_case(f))
        || starts("access-control-")
        || name.eq_ignore_ascii_case("timing-allow-origin")
}

/// A cache route at run time: its origin and freshness policy.
pub struct CacheRoute {
    pub origin: Arc<Origin>,
    pub policy: Arc<CachePolicy>,
    /// `http.max_ranges`, as for static files.
    pub max_ranges: usize,
    /// The route answers CORS itself (`http.cors`), replacing every `Access-Control-*` field
    /// of the origin's: the client's `Origin` is not forwarded, and an origin's `Vary: Origin`
    /// (its own CORS answer's) does not keep its answers out of the cache.
    pub answers_cors: bool,
}

struct Ctx<'a> {
    /// The response policy, for the route's configured and CORS headers.
    http: &'a Policy,
    /// The route's index (`Config::routes`).
    route_ix: usize,
    vol: &'a Volume,
    cv: &'a Arc<CacheVolume<Fill>>,
    route: &'a CacheRoute,
    sock: &'a Socket,
    req: &'a Request,
    /// The request's Authorization, if any.
    auth: Option<&'a str>,
    key: CacheKey,
    key_bytes: Arc<[u8]>,
    target: String,
    /// The request allows keep-alive (see [`Ctx::keep_alive`]).
    keep_alive: bool,
    lifecycle: &'a crate::lifecycle::Lifecycle,
    head_only: bool,
    send_timeout: Duration,
    /// When this request began (ms since the Unix epoch, as pass marks count).
    began_ms: i64,
}

/// Where the bytes of one slice come from.
enum Source {
    Stored(Arc<Stored>),
    /// A fill under way, this request registered as its reader from the start.
    Fill(FillReader, Arc<FillHead>),
}

impl Source {
    fn meta(&self) -> &super::entry::EntryMeta {
        match self {
            Source::Stored(s) => &s.meta,
            Source::Fill(_, h) => &h.meta,
        }
    }
}

/// A later slice of a response under way that cannot be opened for want of descriptors is
/// asked for again this many times ([`UNAVAILABLE_PAUSE`] apart: five seconds in all; each
/// failed try closes a few entries kept open for later requests) before the response is cut.
const UNAVAILABLE_TRIES: u32 = 100;
/// The pause between two of those tries.
const UNAVAILABLE_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// How often a request joined to a fill that has no head yet, with a stale copy to fall back
/// on, looks whether every origin server is marked down (then it answers STALE).
const JOINER_LOOK: std::time::Duration = std::time::Duration::from_millis(50);

/// Bytes of a seek's response that go out before any slice after them is prefetched (a
/// quarter slice when that is more): more than what leaves with its head in the first writes
/// (64 KiB and more), so a seek dropped at once fetches no slice past those it was sent.
const SEEK_GATE: u64 = 256 * 1024;

/// The first slice, decided.
enum First {
    Serve(Source, CacheStatus),
    /// Stream this origin answer through unchanged (not storable).
    PassThrough(Box<OriginResponse>, CacheStatus),
    /// Ask the origin directly and pass the answer through, said to be this (BYPASS: a private
    /// answer, a collision; MISS: an answer that was stale at once).
    FetchThrough(CacheStatus),
    /// [`First::FetchThrough`] as a MISS (the fill this request would join has an answer
    /// already stale), but when the origin fails (a server error, no answer) this stored entry,
    /// stale within its stale-if-error, is served instead: as it would be had the request made
    /// the fill.
    FetchThroughElseStale(Arc<Stored>),
    /// Answer this status (origin down without a usable stale entry: 502/504; 416).
    Error(u16, Option<u64>),
    /// The origin answered the fill this request joined with this server error, whose answer
    /// another joiner streams: the same status (BYPASS), not an origin request of its own
    /// (each joiner's, at once, was a storm on an origin that just said it is failing).
    OriginFailed(u16),
    /// The slice asked for lies past the object's end, which this fresh first slice tells:
    /// answer from it (416, or the whole object when If-Range does not match).
    PastEnd(Arc<Stored>),
}

/// Answer `req` (routed to cache volume `cv` of `vol` by `route`; `path` is its canonical path,
/// [`crate::resolve::Resolved::path`]).
#[allow(clippy::too_many_arguments)]
pub async fn respond(
    http: &Policy,
    route_ix: usize,
    vol: &Volume,
    cv: &Arc<CacheVolume<Fill>>,
    route: &CacheRoute,
    sock: &Socket,
    req: &Request,
    path: &str,
    keep_alive: bool,
    lifecycle: &crate::lifecycle::Lifecycle,
    send_timeout: Duration,
) -> Served {
    // The key and the origin's target: the request's canonical path (`resolve::canonical`, the
    // path it was routed by) and its query as the origin gets it (bytes a target may not carry
    // as they are percent-encoded: `?w="x"` and `?w=%22x%22` are one URL to the origin, and so
    // one key).
    let mut target = path.to_string();
    if let Some(q) = &req.query {
        target.push('?');
        target.push_str(&origin::encode_target(q));
    }
    let key = CacheKey::new(target.clone().into_bytes());
    let cx = Ctx {
        http,
        route_ix,
        vol,
        cv,
        route,
        sock,
        req,
        auth: req.authorization.as_deref(),
        key_bytes: Arc::from(key.as_bytes()),
        key,
        target,
        keep_alive,
        lifecycle,
        head_only: req.method == Method::Head,
        send_timeout,
        began_ms: unix_now_ms(),
    };
    cv.index.record_request(cx.key.slice(0));
    // Only a range the answer will honour picks the slice: one that is ignored (malformed,
    // or ranges off) is a whole-object request, which must not get a 416.
    let hint = range::single_start(req.range.as_deref(), route.max_ranges);
    let first_slice = match (cv.slice_size, hint) {
        (0, _) | (_, None) => 0,
        (s, Some(start)) => (start / s).min(u32::MAX as u64) as u32,
    };
    let (first, first_slice) = match cx.first(first_slice).await {
        // The range starts past the object's end, but a failed If-Range means the whole
        // object (RFC 9110 §13.1.5): decide on the first slice's validators.
        First::Error(416, _) if first_slice > 0 && req.if_range.is_some() => (cx.first(0).await, 0),
        // The origin refused the first slice's range without saying the object is empty (no
        // `bytes */0`): a request without a range asked for no range, so it must not get a
        // 416. Ask the origin for the object whole.
        First::Error(416, _) if req.range.is_none() => {
            (First::FetchThrough(CacheStatus::Bypass), 0)
        }
        first => (first, first_slice),
    };
    // An answer that varies by Accept-Encoding in a coding this client does not accept (an
    // origin that compresses whatever it is asked): not this client's (RFC 9111 §4.1), nor
    // are its length (a 416) or validators (If-Range); the origin is asked with the client's
    // Accept-Encoding.
    if cx.refuses_coding(&first).await {
        cv.count(CacheStatus::Bypass);
        return cx.fetch_through(CacheStatus::Bypass).await;
    }
    match first {
        First::Serve(src, status) => cx.serve(src, first_slice, status).await,
        First::PassThrough(resp, status) => {
            cv.count(status);
            cx.pass_through(*resp, status).await
        }
        First::FetchThrough(status) => {
            cv.count(status);
            cx.fetch_through(status).await
        }
        First::FetchThroughElseStale(stale) => cx.fetch_through_else_stale(stale).await,
        First::Error(status, total) => {
            cv.count(CacheStatus::Miss);
            cx.error(status, total, CacheStatus::Miss).await
        }
        First::OriginFailed(status) => {
            cv.count(CacheStatus::Bypass);
            cx.error(status, None, CacheStatus::Bypass).await
        }
        First::PastEnd(s0) => cx.serve(Source::Stored(s0), 0, CacheStatus::Hit).await,
    }
}

/// The source a fill gives once its head is there, or the entry stored instead (None: the fill
/// failed or was passed through).
async fn filled(found: FillFor<Fill>) -> Result<Source, Unavailable> {
    let fill = match found {
        FillFor::Fill(fill, _) => fill,
        FillFor::Stored(s) => return Ok(Source::Stored(s)),
        // Another key's fill holds its entry: this slice cannot be had now.
        FillFor::Collision => return Err(Unavailable::Origin),
    };
    let reader = fill.reader(0);
    follow(fill, reader).await
}

/// The source `fill` gives, read with `reader`, once its head is there.
async fn follow(fill: Arc<Fill>, reader: super::fill::FillReader) -> Result<Source, Unavailable> {
    let mut rx = fill.subscribe();
    loop {
        let p = rx.borrow_and_update().clone();
        match p {
            Progress::Waiting => {}
            Progress::Body { head, .. } => return Ok(Source::Fill(reader, head)),
            Progress::Refreshed { stored, .. } => return Ok(Source::Stored(stored)),
            // A later slice stored nowhere and too large to hold: the next request retries.
            Progress::Bypass { refused: true, .. } => return Err(Unavailable::Origin),
            // One Origin's own answer (joined) says nothing of the object.
            Progress::Bypass { .. } if fill.for_origin().is_some() => {
                return Err(Unavailable::OriginsOwn)
            }
            // Another status's whole answer (a 404, a 403, a redirect): the object is gone
            // or moved, not an origin whose slices disagree.
            Progress::Bypass { status, .. } if (300..500).contains(&status) => {
                return Err(Unavailable::Gone(status))
            }
            Progress::Bypass { status, .. } if status < 500 => return Err(Unavailable::NotASlice),
            Progress::Failed(e) if matches!(*e, FillError::NotSatisfiable { .. }) => {
                return Err(Unavailable::PastTheEnd)
            }
            _ => return Err(Unavailable::Origin),
        }
        if rx.changed().await.is_err() {
            return Err(Unavailable::Origin);
        }
    }
}

/// A stored later slice against the object's first slice ([`Ctx::against_first_slice`]).
enum Agreement {
    /// The same version (with the first slice's metadata), or no first slice to compare with.
    Same(Option<Arc<super::entry::EntryMeta>>),
    /// Another version, known later than this slice's: this slice is outdated.
    FirstIsNewer,
    /// Another version, older than this slice's: the first slice is outdated.
    ThisIsNewer,
}

/// Why a later slice of a response could not be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unavailable {
    /// The origin failed (down, timeout, 5xx, a broken answer): the next request retries.
    Origin,
    /// The origin says the slice is past the object's end: the object is shorter than the
    /// version being sent, so it changed.
    PastTheEnd,
    /// The origin answers the slice with another status (404, 403, a redirect): the object
    /// is not there any more, so it changed.
    Gone(u16),
    /// The origin's answer cannot be this slice of the object (no strong validator on it, a
    /// whole body for a range, another total size): it contradicts the first slice.
    NotASlice,
    /// The fill joined got an answer made for another request's `Origin` (`Vary: Origin`):
    /// it says nothing of the object (asked for again; if again, like `Origin`).
    OriginsOwn,
}

/// What a fill's answer is used for by the request that starts or joins it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    /// The response's first slice: its fields are the client's, so the client's `Origin` goes
    /// with it (an origin that answers CORS per Origin can).
    Head,
    /// Only its bytes (a later slice, a prefetch, a background refresh): asked for as an
    /// anonymous request's, so that an answer made for one Origin never decides for the
    /// stored object (a later slice's refused answer withdraws the whole object).
    Body,
}

/// The values of field `name` among a stored entry's fields.
fn stored_values<'h>(
    h: &'h [(String, String)],
    name: &'static str,
) -> impl Iterator<Item = &'h str> {
    h.iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// The values of field `name` of an origin's head that are text.
fn head_values<'h>(h: &'h http::HeaderMap, name: &'static str) -> impl Iterator<Item = &'h str> {
    h.get_all(name).iter().filter_map(|v| v.to_str().ok())
}

/// The head of an answer from a stored (or filling) entry: with the entry's own `Date`, which
/// its `Age` counts from (entries stored before dates were kept get the time of sending).
fn stored_head(code: u16, meta: &super::entry::EntryMeta) -> Head {
    match meta
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("date"))
    {
        Some((_, date)) => Head::dated_as(code, date),
        None => Head::new(code),
    }
}

impl Ctx<'_> {
    /// Whether the answer keeps the connection: not once draining began, which may be while
    /// this request waited for the origin or a fill (the answer then says `close`).
    fn keep_alive(&self) -> bool {
        self.lifecycle.keeps(self.keep_alive)
    }

    /// The fill job of `slice`: the client's `Origin` goes with it only when the answer's
    /// fields are this response's ([`Use::Head`]).
    fn job(&self, slice: u32, revalidate: Option<Arc<Stored>>, used: Use) -> FillJob {
        FillJob {
            key: self.key.clone(),
            target: self.target.clone(),
            slice,
            policy: self.route.policy.clone(),
            revalidate,
            authorization: self.auth.map(str::to_string),
            client_origin: self
                .origin_to_forward()
                .filter(|_| matches!(used, Use::Head)),
            answers_cors: self.route.answers_cors,
        }
    }

    /// The client's `Origin` for the origin, unless the route answers CORS itself.
    fn origin_to_forward(&self) -> Option<String> {
        self.req
            .origin_to_forward()
            .filter(|_| !self.route.answers_cors)
    }

    /// May stored answer `s` answer this request? With Authorization only if it says it may be
    /// shared (RFC 9111 §3.5). Not one that varies by `Origin` (stored by a route that answers
    /// CORS itself) unless this route answers CORS too: the origin's own answer would depend on
    /// it (the route's CORS removed since, or another route's now).
    fn usable(&self, s: &Stored) -> bool {
        (self.route.answers_cors
            || !freshness::varies_by(stored_values(&s.meta.headers, "vary"), "origin"))
            && (self.auth.is_none()
                || freshness::shared_with_authorization(
                    s.meta
                        .headers
                        .iter()
                        .filter(|(n, _)| n.eq_ignore_ascii_case("cache-control"))
                        .map(|(_, v)| v.as_str()),
                ))
    }

    /// The pass marks for this request (`cache/pass.rs`): a request with Authorization has
    /// marks of its own.
    fn marks(&self) -> &super::pass::Marks {
        self.cv.passes.for_request(self.auth.is_some())
    }

    /// The bypassed answer of `fill`, streamed through to this request (`status` in X-Cache)
    /// when it answers it, or, taken by another request already, asked for again. A slice's
    /// 206 answers only a request for the whole object, and only when its range held all of it
    /// (sent as the 200 it stands for); otherwise the object is asked for itself. A whole
    /// object's 200 does not answer a request for one byte range: the origin is asked for that
    /// range (a seek into a 2 GiB object not stored on a whole-object volume gets its 206, not
    /// the 2 GiB).
    fn handoff(&self, fill: &Fill, status: CacheStatus) -> First {
        let ranged = !self.head_only
            && range::single(self.req.range.as_deref(), self.route.max_ranges).is_some();
        match fill.take_response() {
            Some(r) if r.status == 200 && ranged => First::FetchThrough(status),
            Some(r) if r.status != 206 => First::PassThrough(Box::new(r), status),
            // The first slice's range held the whole object: it is the 200 asked for.
            Some(r) if !ranged => match r.whole_as_200() {
                Some(r) => First::PassThrough(Box::new(r), status),
                None => First::FetchThrough(status),
            },
            _ => First::FetchThrough(status),
        }
    }

    /// The fill of `slice` (joined, or started detached); `revalidate` makes a new one
    /// conditional (a request joining one for its first slice counts as collapsed in
    /// [`Self::after_fill`], unless it found every byte there).
    /// Without `revalidate`, the entry a fill committed since this request looked is returned
    /// instead of asking the origin again.
    /// With Authorization the fill is this request's alone (not registered: nobody joins it).
    fn fill(&self, slice: u32, revalidate: Option<Arc<Stored>>, used: Use) -> FillFor<Fill> {
        let id = self.key.slice(slice);
        if self.auth.is_some() {
            let fill = Fill::new(id, self.key_bytes.clone());
            fill.spawn(
                self.cv.clone(),
                self.route.origin.clone(),
                self.job(slice, revalidate, used),
            );
            return FillFor::Fill(fill, false);
        }
        let found = self
            .cv
            .fill_for(id, &self.key_bytes, revalidate.is_none(), || {
                Fill::new(id, self.key_bytes.clone())
            });
        if let FillFor::Fill(fill, false) = &found {
            fill.spawn(
                self.cv.clone(),
                self.route.origin.clone(),
                self.job(slice, revalidate, used),
            );
        }
        found
    }

    /// Later slice `slice` of this response from a fill (`revalidate`: a conditional one). A
    /// fill that got one Origin's own answer (joined: another request's seek with its
    /// `Origin`) is not this response's: the slice is asked for again, without `Origin`.
    async fn later(
        &self,
        slice: u32,
        revalidate: Option<Arc<Stored>>,
    ) -> Result<Source, Unavailable> {
        let found = self.fill(slice, revalidate.clone(), Use::Body);
        let joined = match &found {
            FillFor::Fill(fill, true) => Some(fill.clone()),
            _ => None,
        };
        match filled(found).await {
            Err(Unavailable::OriginsOwn) => {
                if let Some(fill) = joined {
                    self.cv.unregister_fill(self.key.slice(slice), &fill);
                }
                filled(self.fill(slice, revalidate, Use::Body)).await
            }
            other => other,
        }
    }

    async fn first(&self, slice: u32) -> First {
        let id = self.key.slice(slice);
        let found = match self.cv.find(id, &self.key_bytes).await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(volume = %self.cv.name, error = %e, "cache lookup: pool busy");
                return First::Error(503, None);
            }
        };
        let stored = match found {
            Found::Collision => return First::FetchThrough(CacheStatus::Bypass),
            // Out of descriptors or memory: a 503 like the other shortages of the node (the
            // origin would need a descriptor as well).
            Found::Unavailable => return First::Error(503, None),
            Found::Absent => None,
            Found::Stored(s) => Some(s).filter(|s| self.usable(s)),
        };
        let now_ms = unix_now_ms();
        // Only what is stored, and only as the origin allowed it to be used without asking it
        // (fresh, or stale within stale-while-revalidate: STALE, no refresh started; RFC 9111
        // §5.2.1.7); otherwise 504, the origin not asked.
        if self.req.only_if_cached
            && stored
                .as_ref()
                .is_none_or(|s| now_ms >= s.meta.stale_while_revalidate_until_ms)
        {
            if let Some((fill, head)) = stored
                .is_none()
                .then(|| self.landed(slice, now_ms))
                .flatten()
            {
                let reader = fill.reader(0).joined_complete();
                return First::Serve(Source::Fill(reader, head), CacheStatus::Hit);
            }
            return match self.past_end(slice, now_ms).await {
                Some(s0) => First::PastEnd(s0),
                None => First::Error(504, None),
            };
        }
        let Some(s) = stored else {
            if let Some(s0) = self.past_end(slice, now_ms).await {
                return First::PastEnd(s0);
            }
            if self.marks().passing(self.key.hash(), now_ms) {
                // Its last answer was not storable: ask for what the client asked, at once.
                return First::FetchThrough(CacheStatus::Bypass);
            }
            let fill = self.fill(slice, None, Use::Head);
            let first = self.after_fill(fill, None, now_ms).await;
            self.check_first_slice(slice, &first).await;
            return first;
        };
        // (Only a stale entry is looked up: a fresh HIT takes no lock for it.)
        if !self.req.only_if_cached
            && now_ms >= s.meta.fresh_until_ms
            && self.marks().passing(self.key.hash(), now_ms)
        {
            // Withdrawn (its last answer may not be stored), its files not all deleted yet: the
            // request after the answer that withdrew it is passed through like the later ones.
            return First::FetchThrough(CacheStatus::Bypass);
        }
        let mut s = s;
        if slice > 0 && self.auth.is_none() {
            match self.against_first_slice(&s).await {
                // The object's freshness is its first slice's: one revalidated (a 304 for the
                // same strong validator) vouches for this slice's bytes as a full read of it
                // does, and this slice's answer carries its fields and age.
                Agreement::Same(Some(first)) if first.fresh_until_ms > s.meta.fresh_until_ms => {
                    s = Arc::new(s.with_meta(Arc::new(s.meta.vouched_by(&first))));
                }
                Agreement::Same(_) => {}
                // Stored before the first slice's version was known: the origin is asked
                // (conditionally) before it is served, so a seek never splices versions
                // across requests.
                // Of an older version past the end of the object as its fresh first slice has
                // it now (it shrank): there is no such slice any more. Answered from the first
                // slice (416) and dropped, not asked for again on every seek there.
                Agreement::FirstIsNewer => {
                    let old = s.meta.clone();
                    let drop_this = || {
                        self.cv
                            .remove_slices(&[s.id], |x| !x.meta.same_version(&old))
                    };
                    if let Some(s0) = self.past_end(slice, now_ms).await {
                        drop_this();
                        return First::PastEnd(s0);
                    }
                    if self.req.only_if_cached {
                        return First::Error(504, None);
                    }
                    let fill = self.fill(slice, Some(s.clone()), Use::Head);
                    let first = self.after_fill(fill, Some(s.clone()), now_ms).await;
                    self.check_first_slice(slice, &first).await;
                    if let First::Error(416, _) = first {
                        // (The first slice stale: the origin said so instead.)
                        drop_this();
                    }
                    return first;
                }
                Agreement::ThisIsNewer => self.first_slice_outdated(slice, Some(&s.meta)).await,
            }
        }
        let m = &s.meta;
        if now_ms < m.fresh_until_ms {
            return First::Serve(Source::Stored(s), CacheStatus::Hit);
        }
        if now_ms < m.stale_while_revalidate_until_ms {
            // Serve stale; one background refresh (unless one runs already, or the request is
            // only-if-cached: nothing goes to the origin for it, STALE says so).
            if self.req.only_if_cached {
                return First::Serve(Source::Stored(s), CacheStatus::Stale);
            }
            // Every origin server known down: a refresh would fail the same way (a hanging
            // server holding a connection per object for its read timeout); STALE, nothing
            // started. The probe once a mark ends (one request) refreshes it.
            if self.route.origin.all_down() {
                return First::Serve(Source::Stored(s), CacheStatus::Stale);
            }
            // (Any fill of it: one for a request with Authorization is not joinable, yet one
            // refresh is enough, not one per such request.)
            if !self.cv.any_running(|f| f.id == id) {
                // (Nobody waits on its answer: it is asked for as an anonymous request's.)
                if let FillFor::Fill(fill, false) = self.fill(slice, Some(s.clone()), Use::Body) {
                    self.follow_refresh(fill, s.clone());
                }
            }
            return First::Serve(Source::Stored(s), CacheStatus::Updating);
        }
        let fill = self.fill(slice, Some(s.clone()), Use::Head);
        let first = self.after_fill(fill, Some(s.clone()), now_ms).await;
        if let (true, First::Serve(Source::Fill(_, head), _)) = (slice > 0, &first) {
            if self.auth.is_none() && !head.meta.same_version(&s.meta) {
                // The old version's slices are gone (`after_fill`): the new first slice, which
                // later seeks compare their stored slices with.
                self.prefetch(0);
            }
        }
        first
    }

    /// A fill of `slice` holding every byte of a fresh answer (being written to the disk, not
    /// yet in the index): stored in all but name, so an only-if-cached request right after a
    /// miss is answered from it (a hit) rather than 504. A fill for one user's credentials is
    /// never found (it is not registered).
    fn landed(&self, slice: u32, now_ms: i64) -> Option<(Arc<Fill>, Arc<FillHead>)> {
        let fill = self
            .cv
            .fill_running(self.key.slice(slice), &self.key_bytes)?;
        let head = match &*fill.subscribe().borrow() {
            Progress::Body { head, avail, .. }
                if *avail == head.meta.body_len && now_ms < head.meta.fresh_until_ms =>
            {
                head.clone()
            }
            _ => return None,
        };
        Some((fill, head))
    }

    /// The object's first slice when it answers for `slice` (not stored): stored, fresh and
    /// usable, and either another status's whole answer (a 404, a redirect: there are no
    /// other slices) or an object that ends before the requested range starts (before `slice`,
    /// or inside it: the last slice's span past the end). A range there is then answered
    /// without asking the origin for a slice that does not exist (it would answer 416 or the
    /// same 404 every time), or for the last slice, which holds none of the range's bytes.
    async fn past_end(&self, slice: u32, now_ms: i64) -> Option<Arc<Stored>> {
        let size = self.cv.slice_size;
        if slice == 0 || size == 0 {
            return None;
        }
        let s0 = match self.cv.find(self.key.slice(0), &self.key_bytes).await {
            Ok(Found::Stored(s0)) => s0,
            _ => return None,
        };
        let start = range::single_start(self.req.range.as_deref(), self.route.max_ranges)
            .unwrap_or(0)
            .max(u64::from(slice) * size);
        let ends_before = s0.meta.whole_answer() || s0.meta.total_size <= start;
        (ends_before && now_ms < s0.meta.fresh_until_ms && self.usable(&s0)).then_some(s0)
    }

    /// Wait for `fill`'s head and decide; `stale` is the entry being revalidated, if any.
    async fn after_fill(
        &self,
        fill: FillFor<Fill>,
        stale: Option<Arc<Stored>>,
        now_ms: i64,
    ) -> First {
        let (fill, joined, stale) = match fill {
            FillFor::Fill(fill, joined) => (fill, joined, stale),
            // Another key of the same hash is being filled: like a stored entry of another
            // key, this one is fetched and passed through, nothing stored.
            FillFor::Collision => return First::FetchThrough(CacheStatus::Bypass),
            // An entry this request may not use (found by the registry, not by the lookup
            // that judged it: it varies by Origin and this route has no CORS of its own). A
            // key maps to one route, so it stays unusable: withdrawn (else every request for
            // it would find it and pass through), this one passed through.
            FillFor::Stored(s) if !self.usable(&s) => {
                super::fill::withdraw_object(self.cv, s.id.hash(), false).await;
                return First::FetchThrough(CacheStatus::Bypass);
            }
            // Committed just now by the fill this request would have joined: as a joiner, a hit
            // (unless it was stale at once: no-cache, max-age=0; the origin is asked then).
            FillFor::Stored(s) if now_ms < s.meta.fresh_until_ms => {
                return First::Serve(Source::Stored(s), CacheStatus::Hit)
            }
            // Stale at once, it is revalidated like any stale entry (REVALIDATED on a 304).
            FillFor::Stored(s) => match self.fill(s.id.slice, Some(s.clone()), Use::Head) {
                FillFor::Fill(fill, joined) => (fill, joined, Some(s)),
                FillFor::Stored(_) => return First::FetchThrough(CacheStatus::Miss),
                FillFor::Collision => return First::FetchThrough(CacheStatus::Bypass),
            },
        };
        let first = self.follow_fill(fill, joined, stale, now_ms).await;
        // Collapsed: it waited on another request's fetch and was answered by it (one that
        // found every byte there asked nothing and waited for nothing: a HIT; one that asks
        // the origin itself after all was not spared that).
        let own_fetch = matches!(
            first,
            First::FetchThrough(_) | First::FetchThroughElseStale(_)
        );
        if joined && !own_fetch && !matches!(first, First::Serve(_, CacheStatus::Hit)) {
            self.cv.m.collapsed.inc();
        }
        first
    }

    /// [`Self::after_fill`] once it has the fill (`joined`: started by another request).
    async fn follow_fill(
        &self,
        fill: Arc<Fill>,
        joined: bool,
        stale: Option<Arc<Stored>>,
        now_ms: i64,
    ) -> First {
        let mut rx = fill.subscribe();
        // Whether this request was there before the origin's answer: only then may it share
        // an answer that is stale at once (RFC 9111 §4: a later request must not reuse it).
        let mut before_head = false;
        let stale_ok = |s: &Option<Arc<Stored>>| {
            s.as_ref()
                .filter(|s| now_ms < s.meta.stale_if_error_until_ms)
                .cloned()
        };
        // A joiner with a stale copy to fall back on does not wait for the head of a fill
        // asking an origin whose every server is marked down (the probe of one whose mark
        // ended, for its whole read timeout): STALE, as the requests that came while the
        // mark lasted were.
        let fallback = stale_ok(&stale).filter(|_| joined);
        let p = loop {
            let p = rx.borrow_and_update().clone();
            if !matches!(p, Progress::Waiting) {
                break p;
            }
            before_head = true;
            tokio::select! {
                changed = rx.changed() => if changed.is_err() {
                    break Progress::Failed(Arc::new(FillError::Origin(OriginError::Shutdown {
                        origin: self.route.origin.name().to_string(),
                    })));
                },
                () = tokio::time::sleep(JOINER_LOOK), if fallback.is_some() => {
                    if let Some(s) = fallback.clone().filter(|_| self.route.origin.all_down()) {
                        return First::Serve(Source::Stored(s), CacheStatus::Stale);
                    }
                }
            }
        };
        // An answer made for one Origin, or for none (`Vary: Origin`), is not a request's with
        // another (RFC 9111 §4.1).
        let theirs = fill
            .made_for()
            .is_some_and(|o| self.origin_to_forward().as_deref() != o);
        match p {
            Progress::Waiting => unreachable!("loop ends on another state"),
            // (The stored copy only while it is the version the origin last gave: a newer one
            // made its slices go, the first maybe the only one left.)
            Progress::Body { head, .. }
                if joined && !before_head && now_ms >= head.meta.fresh_until_ms =>
            {
                match stale_ok(&stale).filter(|s| s.meta.same_version(&head.meta)) {
                    Some(s) => First::FetchThroughElseStale(s),
                    None => First::FetchThrough(CacheStatus::Miss),
                }
            }
            Progress::Body { head, avail, .. } => {
                if let Some(s) = &stale {
                    if !s.meta.same_version(&head.meta) {
                        // A new version: its other slices must come from the origin too.
                        self.drop_version(&s.meta).await;
                    }
                }
                // Joining a fill that already has every byte asks the origin nothing: a hit.
                // One that waited for the origin's answer is a miss, however fast the body
                // came after it (whether it woke before the last byte was a race).
                if joined && !before_head && avail == head.meta.body_len {
                    let reader = fill.reader(0).joined_complete();
                    return First::Serve(Source::Fill(reader, head), CacheStatus::Hit);
                }
                First::Serve(Source::Fill(fill.reader(0), head), CacheStatus::Miss)
            }
            // One Origin's own answer (`Vary: Origin`) answers no request forwarding another.
            Progress::Refreshed { .. } if theirs => First::FetchThrough(CacheStatus::Bypass),
            Progress::Refreshed { stored, .. } => {
                First::Serve(Source::Stored(stored), CacheStatus::Revalidated)
            }
            Progress::Bypass { status, .. } if status >= 500 => match stale_ok(&stale) {
                Some(s) => First::Serve(Source::Stored(s), CacheStatus::Stale),
                None if theirs => First::FetchThrough(CacheStatus::Bypass),
                None => match fill.take_response() {
                    Some(r) => First::PassThrough(Box::new(r), CacheStatus::Bypass),
                    None => First::OriginFailed(status),
                },
            },
            // Storable but not stored this time (not admitted yet): a miss, no pass mark.
            Progress::Bypass { refused: true, .. } => self.handoff(&fill, CacheStatus::Miss),
            // One Origin's own answer: it says nothing of the object for other requests (no
            // pass mark, nothing withdrawn) and answers only this Origin's.
            Progress::Bypass { .. } if theirs => First::FetchThrough(CacheStatus::Bypass),
            Progress::Bypass { .. } if fill.origins_own() => {
                self.handoff(&fill, CacheStatus::Bypass)
            }
            Progress::Bypass {
                status,
                object_answer,
                ..
            } => {
                if let (Some(s), None, true) = (&stale, self.auth, joined) {
                    // The object is no longer cacheable: forget the stored version. (A fill
                    // that revalidated it does that itself; this one was joined, and may have
                    // been a plain fetch. An answer for one user's credentials says nothing
                    // about the shared one.)
                    super::fill::withdraw_object(self.cv, s.id.hash(), false).await;
                }
                if fill.id.slice == 0 || matches!(status, 200 | 206) {
                    // Pass its next requests through at once. A later slice's 206 refused is
                    // the object refused (Set-Cookie, private...), its 200 an origin ignoring
                    // Range for it (a full read would stop after the first slice); another
                    // answer to a later slice (a 404, say) may still be storable as the first
                    // slice.
                    self.marks().mark(self.key.hash(), unix_now_ms());
                } else if object_answer && self.auth.is_none() {
                    // The object's answer whatever the range, and storable: fetched as the
                    // first slice in the background, where it is stored and answers every
                    // later seek, not asked of the origin for each seek as long as nobody
                    // reads byte 0.
                    self.prefetch(0);
                }
                self.handoff(&fill, CacheStatus::Bypass)
            }
            Progress::Failed(e) => match (&*e, stale_ok(&stale)) {
                (FillError::Origin(_), Some(s)) => {
                    First::Serve(Source::Stored(s), CacheStatus::Stale)
                }
                // Never sent: what the client asked for cannot be written to the origin.
                (FillError::Origin(OriginError::Request { .. }), _) => First::Error(400, None),
                // Never sent: the node is out of descriptors (503 + Retry-After, like a file
                // it cannot open), unless a stale copy may answer.
                (FillError::Origin(OriginError::NoDescriptors { .. }), None) => {
                    First::Error(503, None)
                }
                (FillError::Origin(OriginError::Timeout { .. }), None) => First::Error(504, None),
                // A stored copy that may not be served stale (must-revalidate, s-maxage, its
                // windows past) could not be revalidated: 504 (RFC 9111 §5.2.2.2).
                (FillError::Origin(_), None) if stale.is_some() => First::Error(504, None),
                (FillError::Origin(_), None) => First::Error(502, None),
                // An empty object has no byte range at all: ask for it whole, and so its next
                // requests for a while (not two origin requests each). A 416 to the first
                // slice's range (`bytes=0-N`) says so even without `bytes */0` (S3-style
                // stores send none): only an empty object has no byte 0.
                (FillError::NotSatisfiable { total }, _)
                    if *total == Some(0) || (total.is_none() && fill.id.slice == 0) =>
                {
                    self.marks().mark(self.key.hash(), unix_now_ms());
                    First::FetchThrough(CacheStatus::Bypass)
                }
                (FillError::NotSatisfiable { total }, _) => First::Error(416, *total),
                (FillError::Abandoned, _) => First::Error(500, None),
            },
        }
    }

    /// The source of a later slice of the same response.
    /// `held`: the fill this response prefetched the slice with and a reader keeping its
    /// bytes (a fill that stores nothing, not admitted, may end before the response gets
    /// there: found no more, the slice would be fetched twice).
    async fn source(&self, slice: u32, held: Option<Held>) -> Result<Source, Unavailable> {
        let id = self.key.slice(slice);
        // The fill this response prefetched, even when it has committed since: its bytes came
        // from the origin for this response (served bytes counted as the origin's), and they
        // are this fill's, not a stored entry's found in its place.
        if let Some((fill, reader)) = held {
            match follow(fill.clone(), reader).await {
                // Failed as every origin server is now marked down (a hang, a refused
                // connect): asking again would wait for the same failure (a hanging server:
                // its read timeout twice).
                Err(Unavailable::Origin) if self.route.origin.all_down() => {
                    return Err(Unavailable::Origin)
                }
                // A prefetch the origin failed (a 5xx, a reset) is a guess that went wrong,
                // not the response's: the slice is asked for again, as it would be had nothing
                // been held. So is one Origin's own answer (a seek of a request with its
                // `Origin`, joined). Not that fill again (its task may not have unregistered
                // it yet).
                Err(Unavailable::Origin | Unavailable::OriginsOwn) => {
                    self.cv.unregister_fill(id, &fill)
                }
                other => return other,
            }
        }
        let mut tries = 0;
        let found = loop {
            match self.cv.find(id, &self.key_bytes).await {
                // A stored slice that cannot be opened now (out of descriptors: a moment's
                // shortage): its head is sent, so it is waited for a while rather than cut.
                Ok(Found::Unavailable) if tries < UNAVAILABLE_TRIES => {
                    tries += 1;
                    tokio::time::sleep(UNAVAILABLE_PAUSE).await;
                }
                found => break found,
            }
        };
        match found {
            Ok(Found::Stored(s)) if self.usable(&s) => return Ok(Source::Stored(s)),
            Ok(Found::Stored(_) | Found::Absent) => {}
            // (Still not openable: the response is cut like an origin failure; the slice
            // stays stored.)
            Ok(Found::Collision | Found::Unavailable) | Err(_) => return Err(Unavailable::Origin),
        }
        self.later(slice, None).await
    }

    /// A later slice found stored as another version than the response's: ask the origin
    /// whether it is current (a conditional fill). When the object changed there since it was
    /// stored, the origin's slice (the response's version, unless the object changed again)
    /// replaces it and the response goes on; a slice being filled is returned as it is.
    async fn refetch(&self, slice: u32, src: Source) -> Result<Source, Unavailable> {
        let Source::Stored(old) = src else {
            return Ok(src);
        };
        self.later(slice, Some(old)).await
    }

    /// Whether every slice `body` reads is stored (for `only-if-cached`: nothing may be asked
    /// of the origin).
    fn all_stored(&self, body: &Body, whole_answer: bool) -> bool {
        let s = self.cv.slice_size;
        if s == 0 || whole_answer {
            return true;
        }
        let spans: Vec<(u64, u64)> = match body {
            Body::None => return true,
            Body::Range { start, len } => vec![(*start, *len)],
            Body::Multipart(m) => m
                .parts()
                .iter()
                .map(|p| (p.range.start, p.range.len()))
                .collect(),
        };
        let now = self.cv.index.now();
        let now_ms = unix_now_ms();
        spans
            .iter()
            .filter(|(_, len)| *len > 0)
            .all(|&(start, len)| {
                ((start / s)..=((start + len - 1) / s)).all(|k| {
                    let slice = k as u32;
                    self.cv.index.lookup(self.key.slice(slice), now) != super::index::Presence::No
                        || self.landed(slice, now_ms).is_some()
                })
            })
    }

    /// A later slice of version `meta` could not be had. When the origin's answer says the
    /// object is not that version any more (shorter: the slice is past its end; gone: another
    /// status, a 404 say) or contradicts
    /// its first slice (an origin whose slices disagree), the stored slices are dropped, and
    /// for the latter its next requests are passed through whole (as for an origin without a
    /// strong validator): otherwise every request would be cut at the same place.
    async fn unavailable(
        &self,
        meta: &super::entry::EntryMeta,
        slice: u32,
        why: Unavailable,
    ) -> &'static str {
        match why {
            Unavailable::Origin | Unavailable::OriginsOwn => "slice unavailable (origin failed)",
            Unavailable::PastTheEnd => {
                tracing::warn!(volume = %self.cv.name, key = %self.target, slice, "object changed at the origin (now shorter); its stored slices are dropped");
                self.drop_version(meta).await;
                "object changed at the origin mid-response"
            }
            Unavailable::Gone(status) => {
                tracing::warn!(volume = %self.cv.name, key = %self.target, slice, status, "object changed at the origin (answered with another status now); its stored slices are dropped");
                self.drop_version(meta).await;
                "object changed at the origin mid-response"
            }
            Unavailable::NotASlice => {
                tracing::warn!(volume = %self.cv.name, key = %self.target, slice, "the origin's answer for a later slice contradicts the first; the object is passed through from now on");
                self.pass_from_now_on(meta).await;
                "origin's slices disagree"
            }
        }
    }

    /// Pass this object through from now on (hit-for-pass): every stored slice of it goes
    /// first, of any version (a seek answered from one would refresh it and store a first
    /// slice again, and the next full read would be cut where that slice ends). Not for a
    /// request with Authorization: its answers say nothing about the shared object, so only
    /// the slices of version `meta` are dropped ([`Self::drop_version`]).
    async fn pass_from_now_on(&self, meta: &super::entry::EntryMeta) {
        if self.auth.is_some() {
            return self.drop_version(meta).await;
        }
        // (The fills still running include the later slice that showed the disagreement.)
        super::fill::withdraw_object(self.cv, self.key.hash(), true).await;
    }

    /// Drop the stored slices of version `old` of this object. A fill of `old` still under way
    /// (one this response was reading, say) would commit its slice after the removal and be
    /// served with the new version's slices: wait for those fills to end first.
    async fn drop_version(&self, old: &super::entry::EntryMeta) {
        drop_version(self.cv, &self.key, old).await
    }

    /// A background refresh (stale-while-revalidate) has no request waiting on its answer, so
    /// this task does what [`Self::after_fill`] would: a new version of a later slice drops
    /// the old first slice. (An answer that may no longer be stored, no-store, private,
    /// Set-Cookie..., is the fill's to act on: it withdraws the stored object and passes its
    /// next requests through, not the stale copy for the whole window.)
    fn follow_refresh(&self, fill: Arc<Fill>, stale: Arc<Stored>) {
        let cv = self.cv.clone();
        let key = self.key.clone();
        let shared = self.auth.is_none();
        let (origin, key_bytes, first_job) = (
            self.route.origin.clone(),
            self.key_bytes.clone(),
            self.job(0, None, Use::Body),
        );
        let mut rx = fill.subscribe();
        drop(fill);
        tokio::spawn(async move {
            let p = loop {
                let p = rx.borrow_and_update().clone();
                if !matches!(p, Progress::Waiting) {
                    break p;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            };
            // (An answer no longer storable: the fill withdraws the object itself.)
            match p {
                // A new version found by refreshing a later slice (a seek), or no such slice
                // any more (416: the object is shorter now): the old first slice goes, or the
                // next full read would start with it and be cut where this one begins. Other
                // old slices stay for the requests reading them (a stale copy is served
                // whole); met by a request of the new version, each is refetched conditionally.
                Progress::Body { head, .. }
                    if stale.id.slice > 0 && !stale.meta.same_version(&head.meta) =>
                {
                    drop_first_slice(&cv, &key, &stale.meta);
                    if shared {
                        prefetch(&cv, &origin, &key_bytes, first_job);
                    }
                }
                Progress::Failed(e)
                    if stale.id.slice > 0 && matches!(*e, FillError::NotSatisfiable { .. }) =>
                {
                    drop_first_slice(&cv, &key, &stale.meta);
                    if shared {
                        prefetch(&cv, &origin, &key_bytes, first_job);
                    }
                }
                _ => {}
            }
        });
    }

    /// After the first slice of a range request past the object's start was decided by the
    /// origin: a new version there (or a 416: none that long) outdates the stored first slice.
    async fn check_first_slice(&self, slice: u32, first: &First) {
        if slice == 0 || self.auth.is_some() {
            return;
        }
        match first {
            First::Serve(Source::Fill(_, head), _) => {
                self.first_slice_outdated(slice, Some(&head.meta)).await
            }
            First::Serve(Source::Stored(s), CacheStatus::Revalidated) => {
                self.first_slice_outdated(slice, Some(&s.meta)).await
            }
            First::Error(416, _) => self.first_slice_outdated(slice, None).await,
            _ => {}
        }
    }

    /// How stored later slice `s` compares with the object's first slice: the one being
    /// fetched (its head, once it came) or else the stored one. Unknown (none of either) counts
    /// as the same: nothing says `s` is outdated.
    async fn against_first_slice(&self, s: &Stored) -> Agreement {
        let id0 = self.key.slice(0);
        let running = self.cv.fill_running(id0, &self.key_bytes).and_then(|f| {
            match &*f.subscribe().borrow() {
                Progress::Body { head, .. } => Some(head.meta.clone()),
                _ => None,
            }
        });
        let first = match running {
            Some(m) => m,
            None => match self.cv.find(id0, &self.key_bytes).await {
                Ok(Found::Stored(s0)) => s0.meta.clone(),
                _ => return Agreement::Same(None),
            },
        };
        if first.same_version(&s.meta) {
            Agreement::Same(Some(first))
        } else if first.stored_at_ms >= s.meta.stored_at_ms {
            Agreement::FirstIsNewer
        } else {
            Agreement::ThisIsNewer
        }
    }

    /// A fill of later slice `slice` (a range request's first) found the object changed:
    /// another version (`new`), or none that long (None: the origin said 416). A stored first
    /// slice of the old version would start the next full read and cut it where this slice
    /// begins: it goes (later old slices are refetched conditionally when met).
    /// Done before this request is answered: a next request on the same connection must not
    /// find the old first slice.
    async fn first_slice_outdated(&self, slice: u32, new: Option<&super::entry::EntryMeta>) {
        let reaches = slice as u64 * self.cv.slice_size;
        let Ok(Found::Stored(s0)) = self.cv.find(self.key.slice(0), &self.key_bytes).await else {
            return;
        };
        let outdated = match new {
            Some(m) => !s0.meta.same_version(m),
            None => s0.meta.total_size > reaches,
        };
        if outdated {
            tracing::debug!(volume = %self.cv.name, slice, "a later slice found the object changed; its stored first slice is dropped");
            drop_first_slice(self.cv, &self.key, &s0.meta);
            // The new version's first slice, which the next seeks compare their stored slices
            // with (an old one met then is asked for again, not served as a hit).
            self.prefetch(0);
        }
    }

    /// Start filling `slice` if it is neither stored nor being filled (prefetch; not for a
    /// request with Authorization, whose fills nobody else finds). The fill, started here or
    /// running already, with a reader that keeps its bytes for this response.
    fn prefetch(&self, slice: u32) -> Option<Held> {
        if self.auth.is_some() {
            return None;
        }
        let held = prefetch(
            self.cv,
            &self.route.origin,
            &self.key_bytes,
            self.job(slice, None, Use::Body),
        );
        // Only a small slice is held: one not stored stays in memory until the response gets
        // there (a slow client holds it as long); a larger one not stored is even handed over
        // (its origin connection parked for a taker) or paced by its slowest reader, which a
        // reader waiting at its start would hold or stall. Larger ones are fetched again when
        // their prefetch ended unseen.
        held.filter(|_| self.cv.slice_size <= HOLD_MAX)
    }

    async fn serve(&self, first: Source, first_slice: u32, status: CacheStatus) -> Served {
        let cv = self.cv;
        let meta = first.meta().clone();
        let total = meta.total_size;
        cv.count(status);
        let now_ms = unix_now_ms();
        let now = now_ms / 1000;
        // Age in whole seconds (RFC 9111 §5.1): what the origin said, plus the time since its
        // answer came (a request joining a long fill too).
        let age = meta.initial_age as i64 + (now_ms - meta.stored_at_ms).max(0) / 1000;
        let is_type = |n: &str| n.eq_ignore_ascii_case("content-type");
        let ctype = meta
            .headers
            .iter()
            .find(|(n, _)| is_type(n))
            .map(|(_, v)| v.as_str());
        let validators = |mut h: Head| {
            if let Some(e) = &meta.etag {
                h = h.header("ETag", e);
            }
            if let Some(l) = &meta.last_modified {
                h = h.header("Last-Modified", l);
            }
            h
        };
        // RFC 9110 preconditions and ranges (the http planner's rules) against the origin's
        // validators, as of the origin's Date (not our clock: a Last-Modified is strong, as an
        // If-Range date must be, only if that Date is later).
        let conds = self.conditions(self.req.if_range.as_deref());
        let is_date = |n: &str| n.eq_ignore_ascii_case("date");
        let current = Current::of_answer(
            meta.etag.as_deref(),
            meta.last_modified.as_deref(),
            meta.headers
                .iter()
                .find(|(n, _)| is_date(n))
                .map(|(_, v)| v.as_str()),
        );
        // Another status's answer (a 404, a redirect) is sent whole: preconditions and ranges
        // apply to the object's 200 only (RFC 9110 §13.2.1, §14.2).
        let whole_answer = meta.whole_answer();
        let precondition = if whole_answer {
            Precondition::Proceed { range: false }
        } else {
            conditional::evaluate(&conds, &current, true, now)
        };
        let range_ok = match precondition {
            Precondition::Failed => {
                return self
                    .error_aged(412, None, status, Some(age.max(0) as u64))
                    .await
            }
            Precondition::NotModified => {
                // The fields a 304 repeats (RFC 9110 §15.4.5), as the 200 would carry them.
                let fields = meta
                    .headers
                    .iter()
                    .filter(|(n, _)| repeated_on_304(n))
                    .map(|(n, v)| (n.as_str(), v.as_str()));
                let head = self.with_fields(stored_head(304, &meta), fields, ctype, now);
                let keep_alive = self.keep_alive();
                let out = validators(head)
                    .header("Age", age.max(0) as u64)
                    .header("X-Cache", status.header())
                    .finish(keep_alive);
                let ok = self.sock.write_all(&out, false).await.is_ok();
                return Served {
                    status: 304,
                    bytes: out.len() as u64,
                    keep_alive: keep_alive && ok,
                };
            }
            Precondition::Proceed { range } => range,
        };
        let max_ranges = self.route.max_ranges;
        let ranges = if range_ok {
            range::plan(self.req.range.as_deref(), total, max_ranges)
        } else {
            Ranges::Full
        };
        let (code, body) = match ranges {
            Ranges::Full => (
                meta.status,
                Body::Range {
                    start: 0,
                    len: total,
                },
            ),
            Ranges::One(r) => (
                206,
                Body::Range {
                    start: r.start,
                    len: r.len(),
                },
            ),
            Ranges::Many(rs) => {
                let part_type = ctype.unwrap_or("application/octet-stream");
                let m = Multipart::new(&rs, total, part_type, multipart::new_boundary());
                (206, Body::Multipart(m))
            }
            Ranges::Unsatisfiable => {
                return self
                    .error_aged(416, Some(total), status, Some(age.max(0) as u64))
                    .await
            }
        };
        if self.req.only_if_cached && !self.head_only && !self.all_stored(&body, whole_answer) {
            // Part of the body would have to come from the origin.
            return self.error(504, None, CacheStatus::Miss).await;
        }
        let mut head = stored_head(code, &meta);
        let (len, multipart_type) = match &body {
            Body::Multipart(m) => (m.content_length(), Some(m.content_type())),
            Body::Range { len, .. } => (*len, None),
            Body::None => (0, None),
        };
        let fields = meta
            .headers
            .iter()
            .filter(|(n, _)| multipart_type.is_none() || !is_type(n))
            .map(|(n, v)| (n.as_str(), v.as_str()));
        head = self.with_fields(head, fields, ctype, now);
        if let Some(t) = &multipart_type {
            head = head.header("Content-Type", t);
        }
        head = validators(head);
        if code != 204 {
            // A 204 has no body and no Content-Length (RFC 9110 §8.6).
            head = head.header("Content-Length", len);
        }
        if !whole_answer {
            let accept = if max_ranges == 0 { "none" } else { "bytes" };
            head = head.header("Accept-Ranges", accept);
        }
        head = head
            .header("Age", age.max(0) as u64)
            .header("X-Cache", status.header());
        if let (206, Body::Range { start, len }) = (code, &body) {
            head = head.header(
                "Content-Range",
                format_args!("bytes {}-{}/{}", start, start + len - 1, total),
            );
        }
        let with_body = !self.head_only && len > 0;
        let first_len = body.first_range().map_or(0, |(_, n)| n);
        if with_body && !self.admitted(&first, first_len) {
            return self.error(503, None, status).await;
        }
        let keep_alive = self.keep_alive();
        let out = head.finish(keep_alive);
        if self.sock.write_all(&out, with_body).await.is_err() {
            return Served {
                status: code,
                bytes: 0,
                keep_alive: false,
            };
        }
        let mut served = Served {
            status: code,
            bytes: out.len() as u64,
            keep_alive,
        };
        if !with_body {
            return served;
        }
        let mut first = Some((first_slice, first));
        let sent = match &body {
            Body::Range { start, len } => self.body(&mut first, &meta, *start, *len).await,
            Body::Multipart(m) => self.multipart(&mut first, &meta, m).await,
            Body::None => Ok(0),
        };
        // Its last bytes may have been written with MSG_MORE (from a fill's memory, not
        // knowing they were the last): out now, not after the cork timer.
        self.sock.push();
        match sent {
            Ok(n) => served.bytes += n,
            Err((n, why)) => {
                served.bytes += n;
                served.keep_alive = false;
                tracing::debug!(volume = %cv.name, key = %self.target, why, "cache response ended early");
            }
        }
        served
    }

    /// `head` with the object's `fields` (stored, or from the origin) and the route's
    /// decoration (configured headers and CORS, `plan::Decoration`): a field the route sets
    /// replaces the object's, and one `Vary` lists both's.
    fn with_fields<'f>(
        &self,
        mut head: Head,
        fields: impl Iterator<Item = (&'f str, &'f str)>,
        content_type: Option<&str>,
        now: i64,
    ) -> Head {
        let d = self.http.object_decoration(
            self.route_ix,
            self.req,
            self.req.path.as_bytes(),
            content_type,
            now,
        );
        // The origin's Vary and the route's (CORS: Origin), each field named once.
        let mut vary: Vec<&str> = Vec::new();
        let mut add_vary = |v: &'f str| {
            for t in v.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                if !vary.iter().any(|x| x.eq_ignore_ascii_case(t)) {
                    vary.push(t);
                }
            }
        };
        for (n, v) in fields {
            if n.eq_ignore_ascii_case("date") {
                // In the head already ([`stored_head`]).
                continue;
            }
            if n.eq_ignore_ascii_case("vary") {
                add_vary(v);
            } else if !d.replaces(n) {
                head = head.header(n, v);
            }
        }
        for (n, v) in &d.lines {
            head = head.header(n, v);
        }
        for v in d.vary.iter().copied() {
            add_vary(v);
        }
        if !vary.is_empty() {
            head = head.header("Vary", vary.join(", "));
        }
        head
    }

    /// The volume's admission before the head (a body that may need the pool).
    fn admitted(&self, first: &Source, len: u64) -> bool {
        match first {
            Source::Stored(s) => {
                self.vol
                    .admit_range(&s.fd, s.body_offset, len.min(s.meta.body_len))
            }
            Source::Fill(_, h) => match h.file.get() {
                Some(fd) => self
                    .vol
                    .admit_range(fd, h.body_offset, len.min(h.meta.body_len)),
                // Bytes from memory need no disk.
                None => true,
            },
        }
    }

    /// Send a multipart/byteranges body: each part's head, its range, then the delimiter.
    async fn multipart(
        &self,
        first: &mut Option<(u32, Source)>,
        meta: &super::entry::EntryMeta,
        m: &Multipart,
    ) -> Result<u64, (u64, &'static str)> {
        let mut sent = 0u64;
        for p in m.parts() {
            if self.sock.write_all(&p.head, true).await.is_err() {
                return Err((sent, "client write failed"));
            }
            sent += p.head.len() as u64;
            match self.body(first, meta, p.range.start, p.range.len()).await {
                Ok(n) => sent += n,
                Err((n, why)) => return Err((sent + n, why)),
            }
        }
        if self.sock.write_all(m.trailer(), false).await.is_err() {
            return Err((sent, "client write failed"));
        }
        Ok(sent + m.trailer().len() as u64)
    }

    /// Send body bytes `start..start+len` of the object, slice by slice; `first` is the
    /// source already found for one slice (taken when that slice is sent).
    async fn body(
        &self,
        first: &mut Option<(u32, Source)>,
        meta: &super::entry::EntryMeta,
        start: u64,
        len: u64,
    ) -> Result<u64, (u64, &'static str)> {
        // Another status's answer is slice 0 alone, whatever its length.
        let s = if meta.whole_answer() {
            0
        } else {
            self.cv.slice_size
        };
        let end = start + len; // exclusive
        let (k0, k1) = match (start.checked_div(s), (end - 1).checked_div(s)) {
            (Some(a), Some(b)) => (a as u32, b as u32),
            _ => (0, 0),
        };
        let mut sent = 0u64;
        let mut ahead: Option<(u32, Held)> = None;
        for k in k0..=k1 {
            let held = ahead.take().filter(|(n, _)| *n == k).map(|(_, h)| h);
            let found = match first.take() {
                Some((fk, src)) if fk == k => Some(src),
                other => {
                    *first = other;
                    None
                }
            };
            let slice_start = if s == 0 { 0 } else { k as u64 * s };
            let got = match found {
                Some(src) => Ok(src),
                None => self.source(k, held).await,
            };
            let got = match got {
                Ok(src) if !src.meta().same_version(meta) => self.refetch(k, src).await,
                other => other,
            };
            let src = match got {
                Ok(src) => src,
                Err(why) => {
                    let note = self.unavailable(meta, k, why).await;
                    if why != Unavailable::NotASlice {
                        return Err((sent, note));
                    }
                    // The origin answered this slice's range with the whole object: the rest
                    // of the response comes from one whole answer of the same version.
                    let pos = start.max(slice_start);
                    return match self.rest_from_whole(meta, pos, end).await {
                        Ok(n) => Ok(sent + n),
                        Err(n) => Err((sent + n, note)),
                    };
                }
            };
            if !src.meta().same_version(meta) {
                // The object changed at the origin: never mix versions; drop the old slices so
                // the next request fetches the new version whole. Changed again within a
                // minute (an origin whose validator differs in every answer): pass it
                // through whole for a while, or every full read would be cut here.
                let (hash, now_ms) = (self.key.hash(), unix_now_ms());
                let from = meta.version_tag();
                let passes = &self.cv.passes;
                if self.auth.is_none() && passes.changed_again(hash, now_ms, self.began_ms, from) {
                    tracing::warn!(volume = %self.cv.name, key = %self.target, slice = k, "the object changed at the origin mid-response twice within a minute (a validator per answer?); passed through from now on");
                    self.pass_from_now_on(meta).await;
                } else {
                    tracing::warn!(volume = %self.cv.name, key = %self.target, slice = k, sent, "object changed at the origin (a new validator) mid-response: the response is cut, never mixing versions; its stored slices are dropped");
                    self.drop_version(meta).await;
                }
                return Err((sent, "object changed at the origin mid-response"));
            }
            let a = start.max(slice_start) - slice_start;
            let b = end.min(slice_start + src.meta().body_len) - slice_start;
            if b <= a {
                return Err((sent, "slice shorter than the object says"));
            }
            // The next slice is fetched at once while this one still arrives from the origin
            // (a miss is origin-bound: the two fetches overlap), and after a stored slice's
            // first three quarters went out (the socket buffer still holds more than the
            // fetch takes, and a download that stops before that fetched nothing it never
            // reads). A seek (a range starting past the object's start, as a player sends
            // while its user drags the seek bar, often to close it at once) prefetches nothing
            // before its first [`SEEK_GATE`] bytes (a quarter slice, if more) went out, however
            // they are spread over slices: a seek dropped before that has fetched no slice
            // past those it sent.
            let next = (s > 0 && k < k1).then_some(k + 1);
            let gate = match start > 0 {
                true => SEEK_GATE.max(s / 4).saturating_sub(sent),
                false => 0,
            };
            let split = match (&src, next) {
                (_, None) => a,
                (Source::Stored(_), Some(_)) => (b - (b - a).min(s / 4)).max(a + (b - a).min(gate)),
                (_, Some(_)) => a + (b - a).min(gate),
            };
            sent += self
                .send_part(&src, a, split)
                .await
                .map_err(|(n, why)| (sent + n, why))?;
            if let Some(next) = next {
                ahead = self.prefetch(next).map(|h| (next, h));
            }
            sent += self
                .send_part(&src, split, b)
                .await
                .map_err(|(n, why)| (sent + n, why))?;
        }
        // The head announced `len` bytes: anything else breaks the connection's framing.
        if sent != len {
            return Err((sent, "slices do not add up to the range"));
        }
        Ok(sent)
    }

    /// Bytes `pos..end` of version `meta` of the object from a whole answer of the origin (for
    /// an origin that ignores Range on a later slice): asked for anew (the fill's answer is
    /// not kept), sent only when it is that version (200, the same ETag, Last-Modified and
    /// size), the bytes before `pos` read and dropped; nothing stored. On error, how many
    /// bytes went out.
    async fn rest_from_whole(
        &self,
        meta: &super::entry::EntryMeta,
        pos: u64,
        end: u64,
    ) -> Result<u64, u64> {
        let mut r = OriginRequest::get(self.target.clone());
        r.authorization = self.auth.map(str::to_string);
        r.origin = self.origin_to_forward();
        let mut resp = match self.route.origin.fetch(r).await {
            Ok(resp) => resp,
            Err(e) => {
                tracing::debug!(volume = %self.cv.name, key = %self.target, error = %e, "whole answer for the rest of a response failed");
                return Err(0);
            }
        };
        let same = resp.status == 200
            && resp.expected == Some(meta.total_size)
            && super::fill::header(&resp, "etag") == meta.etag
            && super::fill::header(&resp, "last-modified") == meta.last_modified;
        if !same {
            tracing::debug!(volume = %self.cv.name, key = %self.target, status = resp.status, "whole answer is another version: the response ends here");
            return Err(0);
        }
        let (mut skip, want) = (pos, end - pos);
        let mut sent = 0u64;
        while sent < want {
            let b = match resp.chunk().await {
                Ok(Some(b)) => b,
                Ok(None) | Err(_) => return Err(sent),
            };
            let drop = skip.min(b.len() as u64);
            skip -= drop;
            let b = &b[drop as usize..];
            let take = (want - sent).min(b.len() as u64) as usize;
            if take == 0 {
                continue;
            }
            if self.sock.write_all(&b[..take], true).await.is_err() {
                return Err(sent);
            }
            sent += take as u64;
            self.cv.m.served_origin.inc_by(take as u64);
        }
        Ok(sent)
    }

    /// Send slice-local bytes `a..b` of `src` (counted as served from the cache or from the
    /// origin); on error, how many went out.
    async fn send_part(&self, src: &Source, a: u64, b: u64) -> Result<u64, (u64, &'static str)> {
        if b <= a {
            return Ok(0);
        }
        match src {
            Source::Stored(st) => {
                let off = st.body_offset + a;
                match self
                    .vol
                    // The node never writes an entry file after its commit (a new version is a
                    // new file), but a hand may (a `cp` over it): any change is caught as the
                    // static path catches a rewrite (an fstat of a local entry may always run on
                    // the event loop).
                    .send_body(
                        self.sock,
                        &st.fd,
                        off,
                        b - a,
                        self.send_timeout,
                        Some(Watch::Exact(st.version)),
                    )
                    .await
                {
                    // What was sent may mix two files: cut; its bytes can no longer be vouched
                    // for (the body has no checksum), so it is deleted and fetched again.
                    Err(BodyError::Changed { sent, how, .. }) => {
                        tracing::warn!(volume = %self.cv.name, entry = %st.id.rel_path(), how, "a cache entry changed on the disk while it was sent; the response is cut, the entry deleted");
                        self.cv.drop_changed(st);
                        self.cv.m.served_cache.inc_by(sent);
                        Err((sent, "stored slice changed while sent"))
                    }
                    Ok(n) => {
                        self.cv.m.served_cache.inc_by(n);
                        Ok(n)
                    }
                    Err(BodyError::Truncated { at, .. }) | Err(BodyError::File { at, .. }) => {
                        // The file shrank or cannot be read since it was opened: never served
                        // again, the next request fetches the slice anew.
                        tracing::warn!(volume = %self.cv.name, entry = %st.id.rel_path(), at, "dropping a cache entry that can no longer be read whole");
                        self.cv.drop_invalid(st);
                        let n = at.saturating_sub(off);
                        self.cv.m.served_cache.inc_by(n);
                        Err((n, "stored slice unreadable"))
                    }
                    Err(e) => {
                        self.cv.m.served_cache.inc_by(e.sent());
                        Err((e.sent(), "send failed"))
                    }
                }
            }
            Source::Fill(reader, head) => {
                let r = self.send_filling(reader, head, a, b).await;
                let n = match &r {
                    Ok(n) | Err((n, _)) => *n,
                };
                if reader.is_complete() {
                    self.cv.m.served_cache.inc_by(n);
                } else {
                    self.cv.m.served_origin.inc_by(n);
                }
                r
            }
        }
    }

    /// Send slice-local bytes `a..b` of a fill as they land (read-while-write).
    async fn send_filling(
        &self,
        reader: &FillReader,
        head: &Arc<FillHead>,
        a: u64,
        b: u64,
    ) -> Result<u64, (u64, &'static str)> {
        let fill = reader.fill();
        let mut rx = fill.subscribe();
        let mut pos = a;
        // Where this reader is from now on: a fill paced by its readers (not storing) must
        // not wait for it to take bytes before `a` it will never ask for.
        reader.at(pos);
        while pos < b {
            let (avail, done) = match &*rx.borrow_and_update() {
                Progress::Body { avail, done, .. } => (*avail, *done),
                _ => return Err((pos - a, "fill failed")),
            };
            let upto = avail.min(b);
            if pos < upto {
                match fill.read_at(pos, (upto - pos).min(1 << 20) as usize) {
                    super::fill::ReadAt::Memory(bytes) => {
                        if bytes.is_empty() {
                            return Err((pos - a, "fill memory ended early"));
                        }
                        if self.sock.write_all(&bytes, true).await.is_err() {
                            return Err((pos - a, "client write failed"));
                        }
                        pos += bytes.len() as u64;
                        reader.at(pos);
                    }
                    super::fill::ReadAt::File(written) => {
                        let lim = written.min(upto);
                        let Some(fd) = head.file.get() else {
                            return Err((pos - a, "fill has no file"));
                        };
                        match self
                            .vol
                            .send_body(
                                self.sock,
                                fd,
                                head.body_offset + pos,
                                lim - pos,
                                self.send_timeout,
                                None,
                            )
                            .await
                        {
                            Ok(n) => {
                                pos += n;
                                reader.at(pos);
                            }
                            Err(_) => return Err((pos - a, "send failed")),
                        }
                    }
                }
                continue;
            }
            if done {
                return Err((pos - a, "fill ended short"));
            }
            if rx.changed().await.is_err() {
                return Err((pos - a, "fill gone"));
            }
        }
        Ok(pos - a)
    }

    /// An error answer without a body of the object's; `cache` is its X-Cache.
    async fn error(&self, status: u16, total: Option<u64>, cache: CacheStatus) -> Served {
        self.error_aged(status, total, cache, None).await
    }

    /// [`Self::error`] decided from a stored entry of age `age` (a 412 or 416 from the
    /// cache), which it carries as `Age` like every answer from the cache.
    async fn error_aged(
        &self,
        status: u16,
        total: Option<u64>,
        cache: CacheStatus,
        age: Option<u64>,
    ) -> Served {
        let cr;
        let age_value;
        let mut extra: Vec<(&str, &str)> = vec![("X-Cache", cache.header())];
        if let Some(a) = age {
            age_value = a.to_string();
            extra.push(("Age", &age_value));
        }
        if status == 416 {
            cr = format!("bytes */{}", total.unwrap_or(0));
            if total.is_some() {
                extra.push(("Content-Range", &cr));
            }
        }
        if status == 503 {
            extra.push(("Retry-After", "1"));
        }
        let keep_alive = self.keep_alive();
        let out = self
            .http
            .error(Some(self.route_ix), self.req, status, keep_alive, &extra);
        let ok = self.sock.write_all(&out, false).await.is_ok();
        Served {
            status,
            bytes: if ok { out.len() as u64 } else { 0 },
            keep_alive: keep_alive && ok,
        }
    }

    /// The request's preconditions, with `if_range` as its If-Range.
    fn conditions<'r>(&'r self, if_range: Option<&'r str>) -> Conditions<'r> {
        Conditions {
            if_match: self.req.if_match.as_deref(),
            if_unmodified_since: self.req.if_unmodified_since.as_deref(),
            if_none_match: self.req.if_none_match.as_deref(),
            if_modified_since: self.req.if_modified_since.as_deref(),
            if_range,
        }
    }

    /// The request's preconditions against an origin answer's validators (not stored, so its
    /// own ETag and Last-Modified).
    fn preconditions_on(&self, h: &http::HeaderMap) -> Precondition {
        let value = |n: &str| h.get(n).and_then(|v| v.to_str().ok());
        let conds = self.conditions(None);
        let current = Current::of_answer(value("etag"), value("last-modified"), value("date"));
        conditional::evaluate(&conds, &current, true, unix_now_ms() / 1000)
    }

    /// A 304 for a passed-through answer, with the header fields a 304 carries (RFC 9110
    /// §15.4.5; our own Date) and the answer's Set-Cookie: a state change of the origin's for
    /// this client, not a description of the body it already has.
    async fn not_modified_through(&self, h: &http::HeaderMap, status: CacheStatus) -> Served {
        // Written as the other answers write them (`ETag`, `Set-Cookie`), not as looked up.
        let named: Vec<(String, &str)> = h
            .iter()
            .filter(|(n, _)| {
                let n = n.as_str();
                ["etag", "last-modified", "set-cookie"].contains(&n) || repeated_on_304(n)
            })
            .filter_map(|(n, v)| {
                Some((
                    super::fill::canonical(n.as_str()),
                    std::str::from_utf8(v.as_bytes()).ok()?,
                ))
            })
            .collect();
        let fields = named.iter().map(|(n, v)| (n.as_str(), *v));
        let ctype = h
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let head = self.with_fields(Head::new(304), fields, ctype, unix_now_ms() / 1000);
        let keep_alive = self.keep_alive();
        let out = head.header("X-Cache", status.header()).finish(keep_alive);
        let ok = self.sock.write_all(&out, false).await.is_ok();
        Served {
            status: 304,
            bytes: if ok { out.len() as u64 } else { 0 },
            keep_alive: keep_alive && ok,
        }
    }

    /// Whether what `first` would answer comes from a coding this client refuses
    /// ([`Self::takes_coding`]): a stored or filling source, the first slice that decides a
    /// range past the end, a passed-through answer, or a 416 (decided on a coded length: the
    /// stored first slice tells). Free for a request without Accept-Encoding (any coding).
    async fn refuses_coding(&self, first: &First) -> bool {
        if self.req.accept_encoding.is_none() {
            return false;
        }
        match first {
            First::Serve(src, _) => !self.takes_stored_coding(&src.meta().headers),
            First::PastEnd(s0) | First::FetchThroughElseStale(s0) => {
                !self.takes_stored_coding(&s0.meta.headers)
            }
            First::PassThrough(resp, _) => !self.takes_coding(
                head_values(&resp.headers, "vary"),
                head_values(&resp.headers, "content-encoding"),
            ),
            First::Error(416, _) => match self.cv.find(self.key.slice(0), &self.key_bytes).await {
                Ok(Found::Stored(s0)) => !self.takes_stored_coding(&s0.meta.headers),
                _ => false,
            },
            _ => false,
        }
    }

    /// Whether this client may have an answer with these `Vary` and `Content-Encoding`
    /// values: unless it varies by Accept-Encoding and has a coding the client's
    /// Accept-Encoding refuses, or has none where it refuses the uncoded form (the answer was
    /// chosen by a request without one, which accepts every coding).
    fn takes_coding<'h>(
        &self,
        vary: impl Iterator<Item = &'h str>,
        encodings: impl Iterator<Item = &'h str>,
    ) -> bool {
        if !freshness::varies_by(vary, "accept-encoding") {
            return true;
        }
        let codings: Vec<&str> = encodings.collect();
        crate::http::encoding::accepts(self.req.accept_encoding.as_deref(), &codings.join(","))
    }

    /// [`Self::takes_coding`] for a stored entry's fields.
    fn takes_stored_coding(&self, fields: &[(String, String)]) -> bool {
        self.takes_coding(
            stored_values(fields, "vary"),
            stored_values(fields, "content-encoding"),
        )
    }

    /// Ask the origin ourselves (GET, or HEAD for HEAD) and pass the answer through. The
    /// client's preconditions go along, and a single byte range with its If-Range, so a
    /// revalidating client gets the origin's 304 and a seek its 206 (several ranges would come
    /// back as a multipart body: the whole object then).
    async fn fetch_through(&self, status: CacheStatus) -> Served {
        match self.route.origin.fetch(self.through_request()).await {
            Ok(resp) => self.pass_through(resp, status).await,
            Err(e) => self.origin_error(&e, status).await,
        }
    }

    /// [`First::FetchThroughElseStale`]: [`Self::fetch_through`] (a MISS), unless the origin
    /// fails (a 5xx, a timeout, no connection), when `stale` is served (STALE).
    async fn fetch_through_else_stale(&self, stale: Arc<Stored>) -> Served {
        match self.route.origin.fetch(self.through_request()).await {
            Ok(resp) if resp.status < 500 => {
                self.cv.count(CacheStatus::Miss);
                return self.pass_through(resp, CacheStatus::Miss).await;
            }
            Err(e @ OriginError::Request { .. }) => {
                self.cv.count(CacheStatus::Miss);
                return self.origin_error(&e, CacheStatus::Miss).await;
            }
            // The origin's error answer (and its connection) goes now, not after the stale
            // copy is sent.
            Ok(_) | Err(_) => {}
        }
        let slice = stale.id.slice;
        self.serve(Source::Stored(stale), slice, CacheStatus::Stale)
            .await
    }

    /// The answer to a request passed through when the origin gave none.
    async fn origin_error(&self, e: &OriginError, status: CacheStatus) -> Served {
        match e {
            OriginError::Timeout { .. } => self.error(504, None, status).await,
            OriginError::Request { .. } => self.error(400, None, status).await,
            OriginError::NoDescriptors { .. } => self.error(503, None, status).await,
            _ => self.error(502, None, status).await,
        }
    }

    /// The origin request of [`Self::fetch_through`].
    fn through_request(&self) -> OriginRequest {
        let mut r = OriginRequest::get(self.target.clone());
        if self.head_only {
            r.method = crate::origin::Method::Head;
        }
        r.authorization = self.auth.map(str::to_string);
        r.origin = self.origin_to_forward();
        r.accept_encoding = self.req.accept_encoding.clone();
        r.if_none_match = self.req.if_none_match.clone();
        r.if_modified_since = self.req.if_modified_since.clone();
        r.if_match = self.req.if_match.clone();
        r.if_unmodified_since = self.req.if_unmodified_since.clone();
        r.client_range = range::single(self.req.range.as_deref(), self.route.max_ranges)
            .map(|v| (v, self.req.if_range.clone()));
        r
    }

    /// Stream an origin answer to the client unchanged (hop-by-hop headers dropped), not stored.
    /// A 200 the client's preconditions say it has (or must not get) is answered 304 (or 412)
    /// instead: a fill asked for it without them.
    async fn pass_through(&self, mut resp: OriginResponse, status: CacheStatus) -> Served {
        // Read ahead of a slow client: a body that fits frees its origin connection at once.
        resp.read_ahead(self.route.origin.pass_buffer());
        if resp.status == 200 {
            match self.preconditions_on(&resp.headers) {
                Precondition::NotModified => {
                    return self.not_modified_through(&resp.headers, status).await
                }
                Precondition::Failed => return self.error(412, None, status).await,
                Precondition::Proceed { .. } => {}
            }
        }
        // A body of unknown length goes out chunked to an HTTP/1.1 client (its end, or that it
        // broke off, stays visible and the connection reusable); to an HTTP/1.0 client it ends
        // with the connection, reset if the origin's body broke off.
        // A HEAD answer's length is the one its GET would have (the origin's Content-Length);
        // a body's, what will be sent.
        let length = if self.head_only {
            crate::origin::content_length(&resp.headers)
        } else {
            resp.expected
        };
        // A HEAD sends no body: it keeps the connection whatever its GET's framing, which it
        // need not tell when unknown (RFC 9110 §9.3.2: a field determined only while
        // generating the content may be left out; an origin's HEAD may lack a Content-Length
        // its GET has).
        let bodied = resp.status != 304 && resp.status != 204;
        let with_body = !self.head_only && bodied;
        let chunked = with_body && length.is_none() && self.req.minor >= 1;
        let keep_alive = self.keep_alive() && (!with_body || resp.expected.is_some() || chunked);
        let ctype = resp
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let named: Vec<(String, std::borrow::Cow<'_, str>)> =
            super::fill::forwarded(&resp.headers, &self.route.origin)
                .map(|(n, v)| (super::fill::canonical(n.as_str()), v))
                .collect();
        let fields = named.iter().map(|(n, v)| (n.as_str(), v.as_ref()));
        let mut head =
            self.with_fields(Head::new(resp.status), fields, ctype, unix_now_ms() / 1000);
        match length {
            // A 304 or 204 has no body, and a Content-Length on it would describe another
            // answer's (RFC 9110 §8.6), to a HEAD too; a HEAD 200's is its GET's.
            _ if !bodied => {}
            Some(n) => head = head.header("Content-Length", n),
            None if chunked => head = head.header("Transfer-Encoding", "chunked"),
            None => {}
        }
        head = head.header("X-Cache", status.header());
        let out = head.finish(keep_alive);
        let mut served = Served {
            status: resp.status,
            bytes: 0,
            keep_alive,
        };
        if self.sock.write_all(&out, with_body).await.is_err() {
            served.keep_alive = false;
            return served;
        }
        served.bytes = out.len() as u64;
        if !with_body {
            return served;
        }
        loop {
            match resp.chunk().await {
                Ok(Some(b)) if b.is_empty() => {}
                Ok(Some(b)) => {
                    let size = format!("{:x}\r\n", b.len());
                    let sent = if chunked {
                        self.sock.write_all(size.as_bytes(), true).await.is_ok()
                            && self.sock.write_all(&b, true).await.is_ok()
                            && self.sock.write_all(b"\r\n", true).await.is_ok()
                    } else {
                        self.sock.write_all(&b, true).await.is_ok()
                    };
                    if !sent {
                        served.keep_alive = false;
                        return served;
                    }
                    served.bytes += b.len() as u64;
                    self.cv.m.served_origin.inc_by(b.len() as u64);
                }
                Ok(None) => {
                    if chunked && self.sock.write_all(b"0\r\n\r\n", false).await.is_err() {
                        served.keep_alive = false;
                    }
                    // The body's last bytes went with MSG_MORE.
                    self.sock.push();
                    return served;
                }
                Err(e) => {
                    tracing::debug!(volume = %self.cv.name, key = %self.target, error = %e, "pass-through ended early");
                    if resp.expected.is_none() && !chunked {
                        self.sock.abort();
                    }
                    served.keep_alive = false;
                    return served;
                }
            }
        }
    }
}

/// A fill a response prefetched a slice with, and the reader that keeps its bytes for it.
type Held = (Arc<Fill>, super::fill::FillReader);

/// Largest slice a response holds the prefetch of ([`Ctx::prefetch`]): the default slice size,
/// so a slow download of an object not stored keeps at most one more MiB in memory.
const HOLD_MAX: u64 = 1 << 20;

/// Start `job`'s fill (no Authorization) unless its slice is stored or being filled, or the
/// object is passed through for now (`cache/pass.rs`: storing a slice would bring it back).
/// The fill of the slice, started or running, with a reader made before it can let go of a
/// byte (dropped at once, it keeps nothing).
fn prefetch(
    cv: &Arc<CacheVolume<Fill>>,
    origin: &Arc<Origin>,
    key: &Arc<[u8]>,
    job: FillJob,
) -> Option<Held> {
    if cv.passes.shared.passing(job.key.hash(), unix_now_ms()) {
        return None;
    }
    let id = job.key.slice(job.slice);
    if cv.index.lookup(id, cv.index.now()) != super::index::Presence::No {
        return None;
    }
    if let Some(fill) = cv.fill_running(id, key) {
        let reader = fill.reader(0);
        return Some((fill, reader));
    }
    match cv.fill_for(id, key, true, || Fill::new(id, key.clone())) {
        FillFor::Fill(fill, joined) => {
            let reader = fill.reader(0);
            if !joined {
                fill.spawn(cv.clone(), origin.clone(), job);
            }
            Some((fill, reader))
        }
        FillFor::Stored(_) | FillFor::Collision => None,
    }
}

/// Remove the stored first slice of `key` if it is of version `old` (a newer one committed
/// meanwhile, or one being written, stays).
fn drop_first_slice(cv: &CacheVolume<Fill>, key: &CacheKey, old: &super::entry::EntryMeta) {
    cv.remove_slices(&[key.slice(0)], |s| !s.meta.same_version(old));
}

/// Slices a version change looks at, at most. Later slices of the old version are each
/// checked against the first slice when met (asked for again, never served with the new
/// one), so this only bounds the work an origin's claimed size can cause: a total of 2^32
/// slices made one version change a loop of seconds and an allocation of gigabytes.
const DROP_SLICES_MAX: u64 = 65_536;

/// Remove every stored slice of `key` (up to [`DROP_SLICES_MAX`]) once the fills still
/// streaming version `old` have ended (their readers finish the version they started).
async fn drop_version(cv: &Arc<CacheVolume<Fill>>, key: &CacheKey, old: &super::entry::EntryMeta) {
    let slices = match cv.slice_size {
        0 => 1,
        s => old.total_size.div_ceil(s).min(DROP_SLICES_MAX) as u32,
    };
    for k in 0..slices {
        let id = key.slice(k);
        let Some(fill) = cv.fill_running(id, key.as_bytes()) else {
            continue;
        };
        let mut rx = fill.subscribe();
        let mut of_old = false;
        loop {
            let old_running = match &*rx.borrow_and_update() {
                Progress::Body { head, done, .. } => {
                    of_old = head.meta.same_version(old);
                    !done && of_old
                }
                _ => false,
            };
            if !old_running {
                break;
            }
            // A fill that left the running ones without ending commits nothing: one whose
            // storing failed is paced by its readers, and this subscription, reading nothing,
            // would hold it (and its origin connection) for ever. Looked at every 50 ms.
            match tokio::time::timeout(Duration::from_millis(50), rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => break,
                Err(_)
                    if cv
                        .fill_running(id, key.as_bytes())
                        .is_some_and(|f| Arc::ptr_eq(&f, &fill)) => {}
                Err(_) => break,
            }
        }
        // Its body is all there, but the entry may not be committed yet (a pool task): until
        // it is, the removal below would pass it over and it would land after it. Wait for
        // the fill to leave the running ones (bounded: a stuck pool must not hold this).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while of_old
            && cv
                .fill_running(id, key.as_bytes())
                .is_some_and(|f| Arc::ptr_eq(&f, &fill))
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    // Slice by slice: one of the new version committed since (by the fill that found it) stays.
    let ids: Vec<EntryId> = (0..slices).map(|k| key.slice(k)).collect();
    cv.remove_slices(&ids, |s| !s.meta.same_version(old));
}
