//! The hot path of one volume: the open-file cache in front of every open (all offload modes),
//! and for `offload = auto` the page-cache-only attempts — opens with RESOLVE_CACHED, body pieces
//! that mincore(2) proves filled sent with sendfile from the event loop (in chunks this thread
//! sent lately: [`sent_lately`]; a chunk's first send is an RWF_NOWAIT copy) — with everything
//! that would need I/O handed to the volume's pool.
//!
//! Owns the decision "inline or pool" for `auto`, the per-volume support state and the
//! page-cache hit/miss counters. The rule it keeps: nothing that may wait for a disk runs on the
//! event loop in `auto` or `always` (only fstat of an already open descriptor, which is served from
//! the in-memory inode on local filesystems, and only in `auto`/`never`).
//!
//! Why mincore before sendfile: sendfile has no "no I/O" flag, and cachestat(2) counts pages that
//! readahead has inserted but not yet filled, so "every page is cached" does not mean "no page is
//! waiting for the disk" (measured with seedbench: inline sendfile after cachestat stalled the
//! loop, hot p99 2.8 s). mincore over a mapping reports a page only once it is up to date, so a
//! sendfile of the proven prefix reads nothing from the disk; the pages go to the socket by
//! reference where the former RWF_NOWAIT read + write copied every hot byte twice on the loop.
//! A page evicted in the microseconds between check and send would be read by the loop: a slow
//! inline sendfile pauses it for the volume (see [`SLOW_SENDFILE`]). Where no mapping can be made
//! (mincore unavailable) or while paused, resident bytes are read with RWF_NOWAIT into a
//! per-thread buffer and written from the loop (EAGAIN for any page missing or still being read),
//! with cachestat as a cheap pre-check that sends a cold chunk to the pool without a read.
//! It must not know about HTTP nor touch the pool: the volume ([`super`]) sends what it
//! answers `NeedsOpen` or `Miss` to the pool; the blocking work itself is in [`crate::fs`].

use crate::config::{self, Offload};
use crate::fs::cache::{self, Check, Lookup, OpenFileCache};
use crate::fs::mincore;
use crate::fs::nowait::{self, Nowait};
use crate::fs::open::{open_file_cached, OpenError, OpenedFile};
use crate::fs::probe::VolumeSupport;
use crate::fs::rusage::blocks_read;
use crate::fs::sendfile::sendfile_chunk;
use crate::metrics::{CacheOp, Metrics};
use prometheus::IntCounter;
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Most body bytes sent inline in one call: bounds the event loop's time per call (about 150 µs
/// for 1 MiB on the measuring machine) while keeping syscalls per hot body few (1 MiB pieces cost
/// the loop less CPU per request than 256 KiB ones on a 4 MiB hot file).
pub const INLINE_CHUNK: usize = 1024 * 1024;

/// Largest response (head and body together) that [`HotPath::send_small`] sends as one copy.
/// Up to here a copy costs less than what it replaces (measured with c10k's 10 KiB file:
/// mincore, a head send and a sendfile, three syscalls and a splice, against one RWF_NOWAIT read
/// and one send); above it, sendfile's pages by reference win.
pub const SMALL_RESPONSE: usize = 32 * 1024;

/// Bytes read and written per step within a call (the per-thread buffer's size), and checked
/// with mincore then sent per step by the inline sendfile.
pub const INLINE_PIECE: usize = 256 * 1024;

/// An inline sendfile of proven pages that takes longer than this while the thread submitted
/// reads ([`read_since_last_look`]) is taken for a page evicted between the check and the send
/// (then the loop read it from the disk): the inline sendfile
/// pauses for [`SENDFILE_PAUSE`] on this volume and resident bytes are copied with RWF_NOWAIT
/// reads meanwhile (which cannot wait). Logged. A 256 KiB sendfile from memory takes well under
/// a millisecond; a read from a busy disk, milliseconds to seconds.
const SLOW_SENDFILE: Duration = Duration::from_millis(20);
const SENDFILE_PAUSE: Duration = Duration::from_secs(10);

thread_local! {
    /// [`blocks_read`] at this thread's previous look (-1: never looked).
    static BLOCKS_SEEN: std::cell::Cell<i64> = const { std::cell::Cell::new(-1) };
}

/// Take this thread's first look at [`blocks_read`], once (before its first inline sendfile).
fn look_at_blocks_read_once() {
    if BLOCKS_SEEN.get() < 0 {
        BLOCKS_SEEN.set(blocks_read());
    }
}

/// Whether this thread submitted reads since its previous look. Asked only after a slow inline
/// sendfile, so a fast one costs no getrusage (it was one syscall per hot response): an event
/// loop of an `auto` volume submits almost no reads but those of a page evicted under its
/// sendfile (its code is locked in memory, its other file work is on the pool), so reads since
/// the previous look are taken for that. Other reads (a `never` volume on the same loop, the
/// readahead of an RWF_NOWAIT copy) can only make a slow sendfile pause inline sendfile for
/// nothing, which costs copies for a while, never a disk wait.
fn read_since_last_look() -> bool {
    let now = blocks_read();
    let before = BLOCKS_SEEN.replace(now);
    before >= 0 && now > before
}

/// mincore could not answer for a file (see [`mincore::uptodate_prefix`]'s errors).
struct Unproven(io::Error);

/// Per-volume hot-path state, created at start next to the volume's pool.
pub struct HotPath {
    offload: Offload,
    cache: OpenFileCache,
    /// `Some` only for `offload = auto`.
    support: Option<VolumeSupport>,
    open_hits: IntCounter,
    open_misses: IntCounter,
    read_hits: IntCounter,
    read_misses: IntCounter,
    /// Guard on the inline sendfile: microseconds since `epoch` until which it is paused after a
    /// slow call (see [`SLOW_SENDFILE`]); 0 = not paused.
    sendfile_paused_until: AtomicU64,
    epoch: Instant,
    volume: Box<str>,
}

/// What an inline open attempt found.
pub enum InlineOpen {
    /// Served without I/O (from the cache, or a RESOLVE_CACHED open).
    Hit(OpenedFile),
    /// The caller must run the blocking open (on the pool for `auto`/`always`, inline for
    /// `never`) and then call [`HotPath::opened`].
    NeedsOpen,
}

/// What an inline body attempt did.
#[derive(Debug)]
pub enum InlineSend {
    /// `n` resident bytes were written from the event loop (`n > 0`).
    Sent(usize),
    /// The socket took nothing (EAGAIN): wait for writability and try again.
    SocketFull,
    /// The chunk is not (fully) resident, or this volume cannot tell: send it on the pool.
    Miss,
}

thread_local! {
    /// The event-loop thread's reusable body buffer (allocated on first use).
    static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The chunks this thread sent inline lately (see [`sent_lately`]).
    static LATELY: std::cell::RefCell<Lately> = const { std::cell::RefCell::new(Lately::new()) };
}

/// Chunks ([`INLINE_CHUNK`] of one file) an event-loop thread remembers having sent inline.
const LATELY_CHUNKS: usize = 64;

/// How long a chunk counts as sent lately.
const LATELY_FOR: Duration = Duration::from_secs(2);

/// The last [`LATELY_CHUNKS`] chunks this thread sent inline, least recently sent replaced first.
/// A `Weak` per file keeps its allocation, so another file's `Arc` cannot take its address.
struct Lately {
    chunks: Vec<(Weak<OwnedFd>, u64, Instant)>,
}

impl Lately {
    const fn new() -> Lately {
        Lately { chunks: Vec::new() }
    }
}

/// Whether this thread sent the chunk of `file` holding `offset` inline within [`LATELY_FOR`];
/// remembers it as sent now either way.
///
/// Why: mincore proves a page up to date, not that it stays. Under memory pressure (a cgroup
/// whose page cache turns over every second, as in a caching node filling from its origin) a page
/// used once sits at the tail of the inactive list, and reclaim may have it isolated, about to be
/// freed, while mincore still reports it: the sendfile that follows finds it gone and reads it
/// from the disk, on the event loop (measured: loops waiting 0.5-1.3 s in `filemap_get_pages`,
/// hot p99 above 1 s). A chunk this thread sent moments ago had its pages marked accessed then,
/// so they are on their way to the active list, not being reclaimed. A chunk's first inline send
/// copies with RWF_NOWAIT, which cannot wait: a page missing there is a miss for the pool.
fn sent_lately(file: &Arc<OwnedFd>, offset: u64, now: Instant) -> bool {
    let chunk = offset / INLINE_CHUNK as u64;
    LATELY.with_borrow_mut(|l| {
        let found = l
            .chunks
            .iter()
            .position(|(f, c, _)| *c == chunk && std::ptr::eq(f.as_ptr(), Arc::as_ptr(file)));
        match found {
            Some(i) => {
                let lately = now.saturating_duration_since(l.chunks[i].2) < LATELY_FOR;
                l.chunks[i].2 = now;
                lately
            }
            None => {
                let entry = (Arc::downgrade(file), chunk, now);
                if l.chunks.len() < LATELY_CHUNKS {
                    l.chunks.push(entry);
                } else if let Some(oldest) = l.chunks.iter_mut().min_by_key(|e| e.2) {
                    *oldest = entry;
                }
                false
            }
        }
    })
}

/// A per-volume share of the open-file cache that fits in a quarter of RLIMIT_NOFILE.
fn cache_entries(cfg: &config::Config, volume: &str) -> usize {
    let want = cfg.open_file_cache.max_entries;
    let share = crate::descriptors::volume_share(cfg.volumes.len());
    if want > share {
        tracing::warn!(
            volume,
            configured = want,
            lowered_to = share,
            "open_file_cache.max_entries lowered to fit a quarter of the file descriptor limit"
        );
        share
    } else {
        want
    }
}

impl HotPath {
    /// Build the volume's hot path; for `auto`, probe the kernel and filesystem once (a volume
    /// without support falls back to pool opens/reads and says so in the log).
    pub fn start(
        name: &str,
        root: BorrowedFd<'_>,
        offload: Offload,
        cfg: &config::Config,
        metrics: &Metrics,
    ) -> HotPath {
        let support = (offload == Offload::Auto).then(|| VolumeSupport::probe(name, root));
        if let Some(s) = &support {
            if s.fully_unsupported() {
                tracing::warn!(
                    volume = name,
                    "offload=auto is not supported on this volume; it runs as offload=always"
                );
            } else {
                tracing::info!(
                    volume = name,
                    inline_open = s.open_inline(),
                    inline_read = s.read_inline(),
                    "offload=auto: page-cache hits served on the event loop"
                );
            }
        }
        let c =
            |v: &prometheus::IntCounterVec, op: CacheOp| v.with_label_values(&[name, op.as_str()]);
        HotPath {
            offload,
            cache: OpenFileCache::new(
                cache_entries(cfg, name),
                Duration::from_millis(cfg.open_file_cache.valid_ms),
            ),
            support,
            open_hits: c(&metrics.page_cache_hits_total, CacheOp::Open),
            open_misses: c(&metrics.page_cache_misses_total, CacheOp::Open),
            read_hits: c(&metrics.page_cache_hits_total, CacheOp::Read),
            read_misses: c(&metrics.page_cache_misses_total, CacheOp::Read),
            sendfile_paused_until: AtomicU64::new(0),
            epoch: Instant::now(),
            volume: name.into(),
        }
    }

    /// The volume's support state (`None` unless `offload = auto`).
    #[cfg(test)]
    pub fn support(&self) -> Option<&VolumeSupport> {
        self.support.as_ref()
    }

    /// The open-file cache.
    #[cfg(test)]
    pub fn cache(&self) -> &OpenFileCache {
        &self.cache
    }

    /// Try to answer an open of `rel` without I/O: a cached descriptor (checked with fstat in
    /// `auto`/`never`, trusted for `valid_ms` in `always`), else for `auto` a RESOLVE_CACHED open.
    /// Errors are final answers (404, 403...) found without I/O.
    pub fn open_inline(
        &self,
        root: BorrowedFd<'_>,
        rel: &[u8],
        index: &[String],
    ) -> Result<InlineOpen, OpenError> {
        let now = Instant::now();
        let stale = match self.cache.get(rel, now) {
            Lookup::Fresh(f) if !self.fstat_on_use() => return Ok(self.open_hit(f)),
            Lookup::Fresh(f) => match cache::check(&f) {
                Ok(Check::Same) => return Ok(self.open_hit(f)),
                Ok(Check::Changed(f)) => {
                    self.cache.update_stat(rel, &f);
                    return Ok(self.open_hit(f));
                }
                Ok(Check::Unlinked) | Err(_) => {
                    self.cache.remove(rel, &f);
                    None
                }
            },
            Lookup::Stale(f) => Some(f),
            Lookup::Miss => None,
        };
        let Some(support) = self.support.as_ref() else {
            return Ok(InlineOpen::NeedsOpen);
        };
        if !support.open_inline() {
            self.open_misses.inc();
            return Ok(InlineOpen::NeedsOpen);
        }
        match open_file_cached(root, rel, index) {
            Ok(Nowait::Ready(f)) => {
                self.remember(rel, stale.as_ref(), &f, now);
                Ok(self.open_hit(f))
            }
            Ok(Nowait::WouldBlock) => {
                self.open_misses.inc();
                Ok(InlineOpen::NeedsOpen)
            }
            Err(OpenError::Io(e)) if nowait::is_unsupported(&e) => {
                support.open_unsupported(&e);
                self.open_misses.inc();
                Ok(InlineOpen::NeedsOpen)
            }
            Err(e) => {
                if let Some(old) = &stale {
                    self.cache.remove(rel, old);
                }
                Err(e)
            }
        }
    }

    /// Whether a fresh cache entry is fstat-ed before use: with `never` (blocking calls are
    /// allowed) and with `auto` on a volume whose reads are page-cache capable (a local
    /// filesystem, where fstat of an open descriptor never waits). Not with `always`, nor on an
    /// `auto` volume without RWF_NOWAIT (NFS, FUSE: fstat may ask a server): there an entry is
    /// trusted for `valid_ms`.
    pub(super) fn fstat_on_use(&self) -> bool {
        match self.offload {
            Offload::Never => true,
            Offload::Always => false,
            Offload::Auto => self.reads_inline(),
        }
    }

    fn open_hit(&self, f: OpenedFile) -> InlineOpen {
        if self.support.is_some() {
            self.open_hits.inc();
        }
        InlineOpen::Hit(f)
    }

    /// Record the result of a blocking open of `rel` (pool or inline) in the cache.
    pub fn opened(&self, rel: &[u8], result: &Result<OpenedFile, OpenError>) {
        match result {
            Ok(f) => {
                let stale = match self.cache.get(rel, Instant::now()) {
                    Lookup::Fresh(old) | Lookup::Stale(old) => Some(old),
                    Lookup::Miss => None,
                };
                self.remember(rel, stale.as_ref(), f, Instant::now());
            }
            Err(_) => {
                if let Lookup::Fresh(old) | Lookup::Stale(old) = self.cache.get(rel, Instant::now())
                {
                    self.cache.remove(rel, &old);
                }
            }
        }
    }

    fn remember(&self, rel: &[u8], old: Option<&OpenedFile>, new: &OpenedFile, now: Instant) {
        match old {
            // Same inode: keep the cached descriptor, refresh stat data and window.
            Some(old) if cache::same_file(old, new) => self.cache.revalidated(rel, new, now),
            _ => self.cache.insert(rel, new.clone(), now),
        }
    }

    /// True when body chunks of this volume are tried inline first.
    pub fn reads_inline(&self) -> bool {
        self.support.as_ref().is_some_and(|s| s.read_inline())
    }

    /// Whether the first body chunk at `offset` is resident now, asked without any I/O, for
    /// admission: a response starting from memory needs no pool slot before its head goes out.
    /// Counts nothing (the send counts its hits and misses).
    pub fn chunk_resident(&self, file: &OwnedFd, offset: u64, len: u64) -> bool {
        let Some(support) = self.support.as_ref().filter(|s| s.read_inline()) else {
            return false;
        };
        let want = len.min(INLINE_CHUNK as u64);
        if support.mincore() {
            if let Ok(n) = mincore::uptodate_prefix(file.as_fd(), offset, want) {
                return n == want;
            }
        }
        if support.cachestat() {
            if let Ok(resident) = nowait::all_resident(file.as_fd(), offset, want) {
                return resident;
            }
        }
        let mut first = [0u8; 1];
        matches!(nowait::read_at(file.as_fd(), &mut first, offset), Ok(Nowait::Ready(n)) if n > 0)
    }

    /// `auto`: send a small response, `head` then `len` bytes of `file` from `offset`, in one send
    /// from this thread's buffer, if the whole body is resident (an RWF_NOWAIT read, which cannot
    /// wait for the disk, fills it after the head). `Ok(None)`: nothing was sent (too large, not
    /// all resident, the file shrank, or this volume cannot read inline), the usual path
    /// decides. `Ok(Some(n))`: `n` bytes of head and body went out (fewer than all when the socket
    /// is full; the caller sends the rest).
    pub fn send_small(
        &self,
        sock: &TcpStream,
        head: &[u8],
        file: &OwnedFd,
        offset: u64,
        len: u64,
    ) -> io::Result<Option<usize>> {
        let total = head.len() as u64 + len;
        if len == 0 || total > SMALL_RESPONSE as u64 {
            return Ok(None);
        }
        let Some(support) = self.support.as_ref().filter(|s| s.read_inline()) else {
            return Ok(None);
        };
        let total = total as usize;
        BUF.with_borrow_mut(|buf| {
            if buf.len() < INLINE_PIECE {
                buf.resize(INLINE_PIECE, 0);
            }
            buf[..head.len()].copy_from_slice(head);
            match nowait::read_at(file.as_fd(), &mut buf[head.len()..total], offset) {
                Ok(Nowait::Ready(n)) if n as u64 == len => {}
                Err(e) if nowait::is_unsupported(&e) => {
                    support.read_unsupported(&e);
                    return Ok(None);
                }
                // Not all resident, shrank, or EIO: the usual path meets (and reports) it.
                Ok(_) | Err(_) => return Ok(None),
            }
            self.read_hits.inc();
            match rustix::net::send(sock, &buf[..total], rustix::net::SendFlags::NOSIGNAL) {
                Ok(n) => Ok(Some(n)),
                Err(rustix::io::Errno::AGAIN) => Ok(Some(0)),
                Err(e) => Err(e.into()),
            }
        })
    }

    /// `auto`: send up to `len` bytes of `file` from `offset` if they are resident (cachestat, where
    /// allowed, rules out a cold chunk without reading), by reading them with RWF_NOWAIT
    /// into this thread's buffer and writing them to the non-blocking socket. Bytes the
    /// socket does not take are dropped (read again next time, from memory) rather than held per
    /// connection. A short read before `len` still sends what was resident; a read of 0 bytes
    /// (first page not resident, or the file shrank) is a miss, so the pool decides.
    pub fn send_inline(
        &self,
        sock: &TcpStream,
        file: &Arc<OwnedFd>,
        offset: u64,
        len: usize,
    ) -> io::Result<InlineSend> {
        let Some(support) = self.support.as_ref().filter(|s| s.read_inline()) else {
            self.read_misses.inc();
            return Ok(InlineSend::Miss);
        };
        let want = len.min(INLINE_CHUNK);
        if want == 0 {
            // Nothing to send is not "sent 0 bytes" (which would read as end of file).
            return Ok(InlineSend::Miss);
        }
        if support.mincore() && !self.sendfile_paused() && sent_lately(file, offset, Instant::now())
        {
            match self.sendfile_uptodate(sock, file, offset, want) {
                Err(Unproven(e)) => support.mincore_failed(&e),
                Ok(done) => return done,
            }
        }
        if support.cachestat() {
            match nowait::all_resident(file.as_fd(), offset, want as u64) {
                Ok(true) => {}
                Ok(false) => {
                    self.read_misses.inc();
                    return Ok(InlineSend::Miss);
                }
                Err(e) => support.cachestat_failed(&e),
            }
        }
        self.copy_resident(support, sock, file, offset, want)
    }

    /// sendfile from the loop, piece by piece, of what [`mincore::uptodate_prefix_kept`] just
    /// proved filled: the pages go to the socket by reference, without a copy, and no page is
    /// waiting for a read. Stops at the first short write (the socket is full) or unproven page,
    /// so at most one piece is checked in vain per call. Nothing proven at `offset`, or 0 bytes
    /// sent (the file shrank since), is a miss: the pool meets it (and reports it). `Unproven`:
    /// mincore cannot answer on this file; the caller checks another way.
    fn sendfile_uptodate(
        &self,
        sock: &TcpStream,
        file: &Arc<OwnedFd>,
        offset: u64,
        want: usize,
    ) -> Result<io::Result<InlineSend>, Unproven> {
        let mut sent = 0usize;
        while sent < want {
            let at = offset + sent as u64;
            let piece = (want - sent).min(INLINE_PIECE);
            let proven = match mincore::uptodate_prefix_kept(file, at, piece as u64) {
                Ok(n) => n as usize,
                Err(_) if sent > 0 => break,
                Err(e) => return Err(Unproven(e)),
            };
            if proven == 0 {
                break;
            }
            look_at_blocks_read_once();
            let t0 = Instant::now();
            let r = sendfile_chunk(sock, file, at, proven);
            let took = t0.elapsed();
            // Slow because this thread read from the disk (not merely preempted on a busy CPU).
            if took > SLOW_SENDFILE && read_since_last_look() {
                self.pause_sendfile(took, t0);
            }
            match r {
                Ok(n) if n > 0 => {
                    sent += n;
                    if n < proven || proven < piece {
                        break;
                    }
                }
                // The next call meets the error (or the full socket) again.
                Ok(_) | Err(_) if sent > 0 => break,
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(Ok(InlineSend::SocketFull))
                }
                Err(e) => return Ok(Err(e)),
            }
        }
        if sent == 0 {
            self.read_misses.inc();
            return Ok(Ok(InlineSend::Miss));
        }
        self.read_hits.inc();
        Ok(Ok(InlineSend::Sent(sent)))
    }

    fn sendfile_paused(&self) -> bool {
        let until = self.sendfile_paused_until.load(Ordering::Relaxed);
        until != 0 && (self.epoch.elapsed().as_micros() as u64) < until
    }

    fn pause_sendfile(&self, took: Duration, now: Instant) {
        let until = (now + SENDFILE_PAUSE)
            .duration_since(self.epoch)
            .as_micros() as u64;
        self.sendfile_paused_until.store(until, Ordering::Relaxed);
        tracing::warn!(
            volume = %self.volume,
            took_ms = took.as_millis() as u64,
            pause_secs = SENDFILE_PAUSE.as_secs(),
            "offload=auto: an inline sendfile of resident pages read from the disk (a page \
             evicted since the check); resident bytes are copied for a while"
        );
    }

    /// RWF_NOWAIT reads into this thread's buffer, written from the loop. Safe without any
    /// residency check (a page missing or still being read is `WouldBlock`, never a disk wait here).
    fn copy_resident(
        &self,
        support: &VolumeSupport,
        sock: &TcpStream,
        file: &OwnedFd,
        offset: u64,
        want: usize,
    ) -> io::Result<InlineSend> {
        BUF.with_borrow_mut(|buf| {
            if buf.len() < INLINE_PIECE {
                buf.resize(INLINE_PIECE, 0);
            }
            // Piece by piece, stopping at the first short write: what the socket refuses (at most
            // one piece) is copied again later instead of being held per connection.
            let mut sent = 0usize;
            while sent < want {
                let piece = (want - sent).min(INLINE_PIECE);
                let at = offset + sent as u64;
                let n = match nowait::read_at(file.as_fd(), &mut buf[..piece], at) {
                    Ok(Nowait::Ready(n)) if n > 0 => n,
                    // Evicted since cachestat, the file shrank, or EIO: the pool decides
                    // (and reports a real error).
                    Ok(_) | Err(_) if sent > 0 => break,
                    Err(e) if nowait::is_unsupported(&e) => {
                        support.read_unsupported(&e);
                        self.read_misses.inc();
                        return Ok(InlineSend::Miss);
                    }
                    Ok(_) | Err(_) => {
                        self.read_misses.inc();
                        return Ok(InlineSend::Miss);
                    }
                };
                if sent == 0 {
                    self.read_hits.inc();
                }
                match rustix::net::send(sock, &buf[..n], rustix::net::SendFlags::NOSIGNAL) {
                    Ok(m) if m > 0 => {
                        sent += m;
                        if m < n || n < piece {
                            break;
                        }
                    }
                    // The next call meets the error (or the full socket) again.
                    Ok(_) | Err(_) if sent > 0 => break,
                    Ok(_) => return Err(io::ErrorKind::WriteZero.into()),
                    Err(rustix::io::Errno::AGAIN) => return Ok(InlineSend::SocketFull),
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(InlineSend::Sent(sent))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::test_support::{disk_tempdir, evict, root_fd};
    use std::io::Read;
    use std::net::TcpListener;

    fn cfg(max_entries: usize, valid_ms: u64) -> config::Config {
        let mut c = config::Config::for_root("/");
        c.open_file_cache.max_entries = max_entries;
        c.open_file_cache.valid_ms = valid_ms;
        c
    }

    /// The hot path of a volume "v" rooted at `dir`, its root descriptor and its metrics.
    fn start(
        dir: &std::path::Path,
        offload: Offload,
        cfg: config::Config,
    ) -> (OwnedFd, Metrics, HotPath) {
        let root = root_fd(dir);
        let m = Metrics::new(&["v"], 1);
        let hot = HotPath::start("v", root.as_fd(), offload, &cfg, &m);
        (root, m, hot)
    }

    /// An `auto` volume whose directory (on the test binary's disk) holds `name`: `len` bytes
    /// of a pattern repeating every `period`, also returned.
    fn auto_with_file(
        name: &str,
        len: usize,
        period: usize,
    ) -> (tempfile::TempDir, Vec<u8>, OwnedFd, Metrics, HotPath) {
        let dir = disk_tempdir();
        let data: Vec<u8> = (0..len).map(|i| (i % period) as u8).collect();
        std::fs::write(dir.path().join(name), &data).unwrap();
        let (root, m, hot) = start(dir.path(), Offload::Auto, cfg(16, 60_000));
        (dir, data, root, m, hot)
    }

    /// A connected loopback pair: the client and the non-blocking server side.
    fn socket_pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        (client, server)
    }

    fn hits(m: &Metrics, op: CacheOp) -> (u64, u64) {
        (
            m.page_cache_hits_total
                .with_label_values(&["v", op.as_str()])
                .get(),
            m.page_cache_misses_total
                .with_label_values(&["v", op.as_str()])
                .get(),
        )
    }

    #[test]
    fn auto_open_hits_inline_then_from_the_cache_and_notices_replacement() {
        let dir = disk_tempdir();
        std::fs::write(dir.path().join("a.txt"), b"one").unwrap();
        let (root, m, hot) = start(dir.path(), Offload::Auto, cfg(16, 60_000));
        let open = |rel: &[u8]| match hot.open_inline(root.as_fd(), rel, &[]).unwrap() {
            InlineOpen::Hit(f) => f,
            InlineOpen::NeedsOpen => panic!("resident path should open inline"),
        };
        let first = open(b"a.txt");
        assert_eq!(first.size, 3);
        assert_eq!(hot.cache().len(), 1);
        let second = open(b"a.txt");
        // From the cache: the very same descriptor.
        assert!(std::sync::Arc::ptr_eq(&first.fd, &second.fd));
        assert_eq!(hits(&m, CacheOp::Open), (2, 0));
        // Replace by rename: fstat of the cached descriptor sees nlink 0 at once.
        std::fs::write(dir.path().join("a.new"), b"second").unwrap();
        std::fs::rename(dir.path().join("a.new"), dir.path().join("a.txt")).unwrap();
        let third = open(b"a.txt");
        assert_eq!(third.size, 6);
        assert_ne!(third.ino, first.ino);
    }

    #[test]
    fn always_trusts_the_cache_only_within_the_window() {
        let dir = disk_tempdir();
        std::fs::write(dir.path().join("f"), b"abc").unwrap();
        let (root, m, hot) = start(dir.path(), Offload::Always, cfg(16, 100));
        assert!(matches!(
            hot.open_inline(root.as_fd(), b"f", &[]).unwrap(),
            InlineOpen::NeedsOpen
        ));
        let r = crate::fs::open::open_file(root.as_fd(), b"f", &[]);
        hot.opened(b"f", &r);
        assert!(matches!(
            hot.open_inline(root.as_fd(), b"f", &[]).unwrap(),
            InlineOpen::Hit(_)
        ));
        std::thread::sleep(Duration::from_millis(150));
        assert!(matches!(
            hot.open_inline(root.as_fd(), b"f", &[]).unwrap(),
            InlineOpen::NeedsOpen
        ));
        // No page-cache counting outside auto.
        assert_eq!(hits(&m, CacheOp::Open), (0, 0));
    }

    #[test]
    fn send_inline_sends_resident_bytes_and_misses_evicted_ones() {
        let (dir, data, _root, m, hot) = auto_with_file("big", 600 * 1024, 241);
        let path = dir.path().join("big");
        assert!(hot.reads_inline());
        let (client, server) = socket_pair();
        let f = Arc::new(OwnedFd::from(std::fs::File::open(&path).unwrap()));
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; 100 * 1024];
            (&client).read_exact(&mut got).unwrap();
            got
        });
        let mut sent = 0usize;
        while sent < 100 * 1024 {
            match hot
                .send_inline(&server, &f, 1000 + sent as u64, 100 * 1024 - sent)
                .unwrap()
            {
                InlineSend::Sent(n) => sent += n,
                InlineSend::SocketFull => std::thread::sleep(Duration::from_millis(1)),
                InlineSend::Miss => panic!("written just now: resident"),
            }
        }
        assert_eq!(reader.join().unwrap(), &data[1000..1000 + 100 * 1024]);
        let (h, miss) = hits(&m, CacheOp::Read);
        assert!(h >= 1);
        assert_eq!(miss, 0);
        // Another file, evicted (the first one's pages may still be referenced by socket
        // buffers until acknowledged, which keeps them resident).
        let cold_path = dir.path().join("cold");
        std::fs::write(&cold_path, &data).unwrap();
        let cold = std::fs::File::open(&cold_path).unwrap();
        evict(&cold);
        let cold = Arc::new(OwnedFd::from(cold));
        assert!(matches!(
            hot.send_inline(&server, &cold, 300 * 1024, 4096).unwrap(),
            InlineSend::Miss
        ));
        assert_eq!(hits(&m, CacheOp::Read).1, 1);
    }

    #[test]
    fn send_small_sends_head_and_resident_body_in_one_send_and_nothing_otherwise() {
        let (dir, data, _root, m, hot) = auto_with_file("small", 10 * 1024, 251);
        let (mut client, server) = socket_pair();
        let f = OwnedFd::from(std::fs::File::open(dir.path().join("small")).unwrap());
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 9216\r\n\r\n";
        let n = hot.send_small(&server, head, &f, 1024, 9 * 1024).unwrap();
        assert_eq!(n, Some(head.len() + 9 * 1024));
        let mut got = vec![0u8; head.len() + 9 * 1024];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got[..head.len()], head);
        assert_eq!(&got[head.len()..], &data[1024..]);
        assert_eq!(hits(&m, CacheOp::Read), (1, 0));
        // Too large for one copy: not tried, nothing sent.
        let big = vec![b'h'; SMALL_RESPONSE];
        assert_eq!(hot.send_small(&server, &big, &f, 0, 1).unwrap(), None);
        // Past the end of the file (it shrank): nothing sent, the usual path reports it.
        assert_eq!(
            hot.send_small(&server, head, &f, 9 * 1024, 2048).unwrap(),
            None
        );
        // Evicted: nothing sent, so the caller's usual path (the pool) decides.
        let cold_path = dir.path().join("cold");
        std::fs::write(&cold_path, &data).unwrap();
        let cold = std::fs::File::open(&cold_path).unwrap();
        evict(&cold);
        assert_eq!(
            hot.send_small(&server, head, &OwnedFd::from(cold), 0, 4096)
                .unwrap(),
            None
        );
        server.set_nonblocking(true).unwrap();
        client.set_nonblocking(true).unwrap();
        let mut rest = [0u8; 16];
        assert_eq!(
            client.read(&mut rest).map_err(|e| e.kind()),
            Err(io::ErrorKind::WouldBlock),
            "nothing may be sent when the body is not sent whole"
        );
    }

    #[test]
    fn only_the_filled_prefix_of_a_chunk_is_sent_inline() {
        let (dir, data, _root, m, hot) = auto_with_file("part", 1024 * 1024, 233);
        let path = dir.path().join("part");
        let file = std::fs::File::open(&path).unwrap();
        // Only 0..192 KiB back in memory (readahead off for this reader).
        evict(&file);
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Random).unwrap();
        let mut first = vec![0u8; 192 * 1024];
        rustix::io::pread(&file, &mut first, 0).unwrap();
        assert_eq!(
            crate::fs::test_support::resident_pages(&file, 1024 * 1024),
            48
        );
        let f = Arc::new(OwnedFd::from(file.try_clone().unwrap()));
        let (client, server) = socket_pair();
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; 192 * 1024 - 100];
            (&client).read_exact(&mut got).unwrap();
            got
        });
        // The chunk's first inline send is a copy, and a copy takes no partly resident chunk
        // (cachestat): a miss, without reading anything in.
        assert!(matches!(
            hot.send_inline(&server, &f, 100, 1024 * 1024 - 100)
                .unwrap(),
            InlineSend::Miss
        ));
        // Sent lately now: mincore proves the filled prefix and sendfile sends exactly that.
        let mut sent = 0usize;
        loop {
            match hot
                .send_inline(&server, &f, 100 + sent as u64, 1024 * 1024 - 100 - sent)
                .unwrap()
            {
                InlineSend::Sent(n) => sent += n,
                InlineSend::SocketFull => std::thread::sleep(Duration::from_millis(1)),
                InlineSend::Miss => break,
            }
        }
        // Exactly the filled bytes went out, then the first page not in memory is a miss.
        assert_eq!(sent, 192 * 1024 - 100);
        assert_eq!(reader.join().unwrap(), &data[100..192 * 1024]);
        assert_eq!(hits(&m, CacheOp::Read).1, 2);
        // The attempt read nothing in (no readahead from the loop).
        assert_eq!(
            crate::fs::test_support::resident_pages(&file, 1024 * 1024),
            48
        );
    }

    #[test]
    fn a_chunk_counts_as_sent_lately_on_its_second_send_within_the_window_per_chunk() {
        let a = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        let b = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        let t0 = Instant::now();
        let chunk = INLINE_CHUNK as u64;
        assert!(!sent_lately(&a, 0, t0));
        assert!(sent_lately(&a, chunk - 1, t0), "same chunk");
        assert!(!sent_lately(&a, chunk, t0), "next chunk");
        assert!(!sent_lately(&b, 0, t0), "other file");
        // Past the window it is a first send again, and then lately again.
        let later = t0 + LATELY_FOR + Duration::from_millis(1);
        assert!(!sent_lately(&a, 0, later));
        assert!(sent_lately(&a, 0, later));
        // The least recently sent chunk makes room: `a`'s chunk 1 (sent at t0) goes first.
        for i in 0..LATELY_CHUNKS as u64 - 2 {
            assert!(!sent_lately(&b, (i + 1) * chunk, later));
        }
        assert!(sent_lately(&a, 0, later), "kept: sent at `later`");
        assert!(!sent_lately(&a, chunk, later), "dropped: the oldest");
        // Another thread has its own record.
        let a2 = a.clone();
        assert!(!std::thread::spawn(move || sent_lately(&a2, 0, later))
            .join()
            .unwrap());
    }

    #[test]
    fn a_slow_inline_sendfile_pauses_it_and_resident_bytes_are_copied_meanwhile() {
        let (dir, data, _root, m, hot) = auto_with_file("f", 64 * 1024, 227);
        assert!(!hot.sendfile_paused());
        hot.pause_sendfile(SLOW_SENDFILE * 2, Instant::now());
        assert!(hot.sendfile_paused());
        let (client, server) = socket_pair();
        let f = Arc::new(OwnedFd::from(
            std::fs::File::open(dir.path().join("f")).unwrap(),
        ));
        match hot.send_inline(&server, &f, 0, data.len()).unwrap() {
            InlineSend::Sent(n) => assert_eq!(n, data.len()),
            other => panic!("resident bytes not sent: {other:?}"),
        }
        let mut got = vec![0u8; data.len()];
        (&client).read_exact(&mut got).unwrap();
        assert_eq!(got, data);
        assert_eq!(hits(&m, CacheOp::Read), (1, 0));
        // The pause ends by itself.
        hot.pause_sendfile(SLOW_SENDFILE, Instant::now() - SENDFILE_PAUSE);
        assert!(!hot.sendfile_paused());
    }

    #[test]
    fn without_mincore_or_cachestat_resident_bytes_are_copied_and_missing_ones_miss() {
        let (dir, data, _root, m, hot) = auto_with_file("hot", 300 * 1024, 239);
        std::fs::write(dir.path().join("cold"), &data).unwrap();
        let support = hot.support().unwrap();
        // As on a filesystem that cannot mmap, and a kernel that refuses cachestat to non-owners.
        support.mincore_failed(&io::Error::from_raw_os_error(libc::ENODEV));
        support.cachestat_failed(&io::Error::from_raw_os_error(libc::EPERM));
        assert!(!support.mincore() && !support.cachestat() && hot.reads_inline());
        let (client, server) = socket_pair();
        let f = Arc::new(OwnedFd::from(
            std::fs::File::open(dir.path().join("hot")).unwrap(),
        ));
        let want = 200 * 1024;
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; want];
            (&client).read_exact(&mut got).unwrap();
            // Kept open: the cold read below may be served inline, and its bytes are read here.
            (got, client)
        });
        let mut sent = 0usize;
        while sent < want {
            match hot
                .send_inline(&server, &f, 7 + sent as u64, want - sent)
                .unwrap()
            {
                InlineSend::Sent(n) => {
                    assert!(n <= INLINE_CHUNK);
                    sent += n
                }
                InlineSend::SocketFull => std::thread::sleep(Duration::from_millis(1)),
                InlineSend::Miss => panic!("resident"),
            }
        }
        let (got, client) = reader.join().unwrap();
        assert_eq!(got, &data[7..7 + want]);
        let cold_file = std::fs::File::open(dir.path().join("cold")).unwrap();
        let cold = Arc::new(OwnedFd::from(cold_file.try_clone().unwrap()));
        let (r, submitted) = crate::fs::test_support::read_evicted(&cold_file, || {
            hot.send_inline(&server, &cold, 0, 4096).unwrap()
        });
        let (h, miss) = hits(&m, CacheOp::Read);
        assert!(h >= 1);
        match r {
            InlineSend::Miss => assert_eq!(miss, 1),
            // The RWF_NOWAIT read it submitted completed before it returned (a fast disk).
            InlineSend::Sent(n) => {
                assert!(submitted > 0, "evicted bytes came back without a read");
                let mut got = vec![0u8; n];
                (&client).read_exact(&mut got).unwrap();
                assert_eq!(got, &data[..n]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unsupported_volume_sends_everything_to_the_pool() {
        let shm = std::path::Path::new("/dev/shm");
        let dir = tempfile::tempdir_in(shm).unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let (_root, _m, hot) = start(dir.path(), Offload::Auto, cfg(16, 60_000));
        assert!(!hot.reads_inline());
        let (_client, server) = socket_pair();
        let f = Arc::new(OwnedFd::from(
            std::fs::File::open(dir.path().join("f")).unwrap(),
        ));
        assert!(matches!(
            hot.send_inline(&server, &f, 0, 1).unwrap(),
            InlineSend::Miss
        ));
    }
}
