//! One cache volume at run time: its store (directory), index, the registry of the fills under
//! way, a small table of open entries (hot objects are served without an open or a header read), its metric
//! handles, and the background work of the volume: the index rebuild after a restart and the
//! once-a-second upkeep (inactive sweep, the "keep 10% free" limit, gauges).
//!
//! Every blocking file operation of the cache runs through [`CacheVolume::blocking`] on the
//! volume's pool. It must not parse HTTP or touch sockets, and it does not name the fill
//! (`fill.rs` uses the volume, so the volume holds its fills as the type parameter `F`).

use super::entry::{EntryError, EntryMeta};
use super::index::{Index, Presence, Reason, Stamp, Victim};
use super::key::EntryId;
use super::pass::Passes;
use super::store::Store;
use crate::config;
use crate::fs::open::FileVersion;
use crate::metrics::{Metrics, PoolOp};
use crate::pool::{Pool, PoolError};
use anyhow::Context;
use indexmap::IndexMap;
use prometheus::{IntCounter, IntGauge};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Open entries closed when one cannot be opened for want of descriptors.
const SHED_ON_SHORTAGE: usize = 4;

/// Open entries kept per volume (descriptors + parsed headers of recently served slices), at
/// most: fewer when the volume's share of RLIMIT_NOFILE is smaller
/// ([`crate::descriptors::volume_share`]).
const OPEN_ENTRIES: usize = 1024;
/// Entries examined per upkeep tick by the inactive sweep.
const SWEEP_BUDGET: usize = 20_000;
/// Files one pool task of the upkeep thread deletes (a few milliseconds of unlinks).
const DELETE_CHUNK: usize = 128;

/// A stored slice, open: serve `meta.body_len` bytes of `fd` from `body_offset`.
#[derive(Debug)]
pub struct Stored {
    pub id: EntryId,
    pub fd: Arc<OwnedFd>,
    pub meta: Arc<EntryMeta>,
    /// Where the body starts in `fd`: its own header's length, fixed when the file was opened
    /// or written. A `meta` put on the same file later ([`Stored::with_meta`]: refreshed or
    /// vouched-for fields) may encode to another length, and says nothing of this file's.
    pub body_offset: u64,
    /// The file's size and modification time when this was made (fstat): a file written in
    /// place by hand while kept open changes them, and is then opened again (its header
    /// checked), not served with the header read before; a response sending it checks them
    /// as the static path does ([`crate::volume::Volume::send_body`]).
    pub version: FileVersion,
}

impl Stored {
    /// Entry `id`, open as `fd`, whose header is `meta` (one fstat, which reads no disk; a failed
    /// one records nothing the file will match, so it is opened again at its next use).
    pub fn new(id: EntryId, fd: Arc<OwnedFd>, meta: Arc<EntryMeta>) -> Stored {
        let version = FileVersion::of(&fd).unwrap_or(FileVersion {
            size: u64::MAX,
            mtime: 0,
            mtime_nsec: 0,
        });
        Stored {
            id,
            fd,
            body_offset: meta.body_offset(),
            meta,
            version,
        }
    }

    /// The same open file described by `meta` (refreshed fields, another freshness), its
    /// body where it was.
    pub fn with_meta(&self, meta: Arc<EntryMeta>) -> Stored {
        Stored {
            id: self.id,
            fd: self.fd.clone(),
            meta,
            body_offset: self.body_offset,
            version: self.version,
        }
    }

    /// The index's record of this file (unknown if its fstat failed).
    pub fn stamp(&self) -> Stamp {
        if self.version.size == u64::MAX {
            Stamp::UNKNOWN
        } else {
            Stamp::of(self.version)
        }
    }

    /// Is the file still the one this was made of? An fstat of an open file reads no disk, so
    /// it may run on the event loop.
    fn on_disk(&self) -> OnDisk {
        match rustix::fs::fstat(&*self.fd) {
            // Its path may hold a newer entry (a commit renamed over it) or nothing.
            Ok(st) if st.st_nlink == 0 => OnDisk::Unlinked,
            Ok(st) if FileVersion::of_stat(&st) == self.version => OnDisk::Same,
            Ok(_) => OnDisk::Changed,
            // Opened again: the open says what is wrong.
            Err(_) => OnDisk::Unlinked,
        }
    }
}

/// The place of `reason` in [`CacheMetrics::evicted`].
fn slot(reason: Reason) -> usize {
    match reason {
        Reason::Size => 0,
        Reason::Inactive => 1,
        Reason::Invalid => 2,
        Reason::Replaced => 3,
    }
}

/// What an open entry's file is now.
enum OnDisk {
    Same,
    /// Removed (an eviction, a purge, a commit renamed over it, an `rm` by hand).
    Unlinked,
    /// Written in place since it was opened: never by the node, which writes an entry only
    /// before its commit, so by a hand (a `cp` over it, a `touch`, a truncation).
    Changed,
}

/// Metric handles of one cache volume, resolved at start.
pub struct CacheMetrics {
    /// hit, miss, stale, updating, revalidated, bypass (the order of `CACHE_STATUSES`).
    pub requests: [IntCounter; 6],
    pub served_cache: IntCounter,
    pub served_origin: IntCounter,
    pub fills: IntGauge,
    pub collapsed: IntCounter,
    pub resumes: IntCounter,
    pub size: IntGauge,
    pub max: IntGauge,
    pub entries: IntGauge,
    pub evicted: [IntCounter; 4],
    pub purges: IntCounter,
    /// Entries not stored: the disk full (ENOSPC), any other error.
    pub store_failed: [IntCounter; 2],
}

/// The cache status of one response (`X-Cache`, and the `status` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    Hit,
    Miss,
    Stale,
    Updating,
    Revalidated,
    Bypass,
}

impl CacheStatus {
    pub fn header(self) -> &'static str {
        match self {
            CacheStatus::Hit => "HIT",
            CacheStatus::Miss => "MISS",
            CacheStatus::Stale => "STALE",
            CacheStatus::Updating => "UPDATING",
            CacheStatus::Revalidated => "REVALIDATED",
            CacheStatus::Bypass => "BYPASS",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// What looking a slice up found.
pub enum Found {
    Stored(Arc<Stored>),
    /// Not stored (or not valid): fetch it.
    Absent,
    /// A valid entry of another key has this hash: never served, never overwritten.
    Collision,
    /// The entry could not be opened for want of descriptors or memory (EMFILE, ENFILE,
    /// ENOMEM): it stays, and the request is answered 503 rather than sent to the origin.
    Unavailable,
}

/// What [`CacheVolume::fill_for`] found.
pub enum FillFor<F> {
    /// The fill under way (`true`: joined) or a new one, registered.
    Fill(Arc<F>, bool),
    /// The entry a fill committed since the caller's lookup.
    Stored(Arc<Stored>),
    /// A fill of another key whose hash is this one's runs: neither joined nor replaced.
    Collision,
}

/// What the volume knows of a fill: the key it fetches. Fills are registered by their entry
/// (a hash of the key), and a request joins one only for its own key, as a stored entry is
/// served only to its own key.
pub trait FillKey {
    fn key(&self) -> &[u8];
    /// The entry it fetches (and may commit).
    fn id(&self) -> EntryId;
}

/// Why an object's files could not all be removed (the purge reports it).
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    #[error("pool: {0}")]
    Pool(#[from] PoolError),
    #[error("cannot list its files: {0}")]
    Io(std::io::Error),
    #[error("{failed} of its files could not be removed ({removed} were), first {first}")]
    Files {
        removed: usize,
        failed: usize,
        first: String,
    },
}

impl RemoveError {
    /// Files removed before or beside the failure.
    pub fn removed(&self) -> usize {
        match self {
            RemoveError::Files { removed, .. } => *removed,
            _ => 0,
        }
    }
}

/// One cache volume; `F` is the fill registered per entry (`super::fill::Fill`).
pub struct CacheVolume<F> {
    pub name: String,
    pub store: Arc<Store>,
    pub index: Arc<Index>,
    /// 0 = whole objects.
    pub slice_size: u64,
    pub pool: Pool,
    pub m: CacheMetrics,
    fills: Mutex<HashMap<EntryId, Arc<F>>>,
    /// Every fill running, joinable or not (a purge finds those of the objects it removes).
    running: Mutex<Vec<Arc<F>>>,
    open: Mutex<IndexMap<EntryId, Arc<Stored>>>,
    /// When "cannot open a cache entry now" was last logged for this volume.
    last_unavailable_log: std::sync::atomic::AtomicU64,
    /// How many entries `open` keeps.
    open_max: usize,
    /// Draws of the entry a full `open` gives up ([`Self::keep_open`]).
    open_draws: std::sync::atomic::AtomicU64,
    /// `max_size` as configured (None = keep 10% of the filesystem free).
    max_size: Option<u64>,
    /// Objects whose last answer was not storable (passed through for a while).
    pub passes: Passes,
    /// When the last full disk lowered the limit (ms since the Unix epoch; 0: never).
    last_disk_full_ms: std::sync::atomic::AtomicI64,
    /// "cannot store cache entry" lines: one a second at most (a cache directory replaced by
    /// a file failed every slice of every request).
    pub store_failed_log: crate::logging::Throttle,
}

/// After a full disk lowered the limit, more fills failing for the same full disk (they were
/// under way, or their space is not free yet: the pool deletes the evicted files) do not lower
/// it again for this long: each lowering took another tenth, and a burst of misses emptied the
/// cache.
const DISK_FULL_SETTLE_MS: i64 = 2000;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<F: FillKey + Send + Sync + 'static> CacheVolume<F> {
    /// Open the cache directory of volume `v` (removing temporary files of an earlier process)
    /// and create its metric series. The rebuild and upkeep start with [`CacheVolume::spawn_upkeep`].
    /// `volumes` is how many volumes the server has (they share the descriptors kept open).
    pub fn open(
        v: &config::Volume,
        c: &config::VolumeCache,
        volumes: usize,
        pool: Pool,
        metrics: &Metrics,
    ) -> anyhow::Result<Arc<Self>> {
        let (store, removed) = Store::open(&v.path).with_context(|| {
            format!(
                "cache volume {:?}: cannot open {}",
                v.name,
                v.path.display()
            )
        })?;
        let store = Arc::new(store);
        let max_size = c.max_size.map(|b| b.0);
        // A limit the disk cannot hold is never reached: the cache runs into a full disk
        // (handled, but slower and noisier) instead of evicting by size. Most often a unit typo.
        if let (Some(m), Ok((total, _))) = (max_size, store.fs_space()) {
            // (A filesystem of no size, like some tmpfs, says nothing.)
            if total > 0 && m > total {
                tracing::warn!(
                    volume = %v.name,
                    max_size = m,
                    filesystem_bytes = total,
                    "cache max_size is larger than the filesystem of {}: the disk fills up before \
                     the limit is reached",
                    v.path.display()
                );
            }
        }
        let limit = match max_size {
            Some(m) => m,
            None => ten_percent_free_limit(&store, 0),
        };
        let slice = if c.slice_size == 0 {
            1 << 20
        } else {
            c.slice_size
        };
        let expected = (limit / slice).clamp(1024, 4 << 20) as usize;
        let index = Index::new(
            limit,
            Duration::from_secs(c.inactive_secs),
            c.min_uses,
            expected,
        );
        if max_size.is_none() {
            index.found_raises_limit();
        }
        metrics.init_cache_volume(&v.name);
        let n = [v.name.as_str()];
        let s = |status: &str| {
            metrics
                .cache_requests_total
                .with_label_values(&[v.name.as_str(), status])
        };
        let ev = |reason: &str| {
            metrics
                .cache_evictions_total
                .with_label_values(&[v.name.as_str(), reason])
        };
        let m = CacheMetrics {
            requests: crate::metrics::CACHE_STATUSES.map(s),
            served_cache: metrics
                .cache_served_bytes_total
                .with_label_values(&[v.name.as_str(), "cache"]),
            served_origin: metrics
                .cache_served_bytes_total
                .with_label_values(&[v.name.as_str(), "origin"]),
            fills: metrics.cache_fills_in_flight.with_label_values(&n),
            collapsed: metrics.cache_collapsed_total.with_label_values(&n),
            resumes: metrics.cache_fill_resumes_total.with_label_values(&n),
            size: metrics.cache_size_bytes.with_label_values(&n),
            max: metrics.cache_max_bytes.with_label_values(&n),
            entries: metrics.cache_entries.with_label_values(&n),
            evicted: [
                ev(Reason::Size.as_str()),
                ev(Reason::Inactive.as_str()),
                ev(Reason::Invalid.as_str()),
                ev(Reason::Replaced.as_str()),
            ],
            purges: metrics.cache_purges_total.with_label_values(&n),
            store_failed: ["disk_full", "error"].map(|reason| {
                metrics
                    .cache_store_failures_total
                    .with_label_values(&[v.name.as_str(), reason])
            }),
        };
        m.max.set(limit as i64);
        let open_max = OPEN_ENTRIES.min(crate::descriptors::volume_share(volumes));
        tracing::info!(
            volume = %v.name, path = %v.path.display(), max_bytes = limit,
            slice_size = c.slice_size, open_entries = open_max, temp_files_removed = removed,
            "cache volume ready"
        );
        let index = Arc::new(index);
        let forget_all = index.clone();
        store.on_remade(move || forget_all.clear());
        Ok(Arc::new(CacheVolume {
            name: v.name.clone(),
            store,
            index,
            slice_size: c.slice_size,
            pool,
            m,
            fills: Mutex::new(HashMap::new()),
            running: Mutex::new(Vec::new()),
            open: Mutex::new(IndexMap::new()),
            last_unavailable_log: std::sync::atomic::AtomicU64::new(0),
            open_max,
            open_draws: std::sync::atomic::AtomicU64::new(0),
            max_size,
            passes: Passes::default(),
            last_disk_full_ms: std::sync::atomic::AtomicI64::new(0),
            store_failed_log: crate::logging::Throttle::new(Duration::from_secs(1)),
        }))
    }

    /// Run blocking file work on the volume's pool.
    pub async fn blocking<T, R>(&self, f: T) -> Result<R, PoolError>
    where
        T: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.pool.run(PoolOp::Open, f).await
    }

    /// Count one response's cache status.
    pub fn count(&self, status: CacheStatus) {
        self.m.requests[status.index()].inc();
    }

    /// Find slice `id` of `key`: the open-entry table, then the index (and, while the index is
    /// being rebuilt, the disk), opening the file on the pool. An invalid file is deleted.
    pub async fn find(self: &Arc<Self>, id: EntryId, key: &Arc<[u8]>) -> Result<Found, PoolError> {
        if let Some(s) = self.open_entry(id, key) {
            return Ok(Found::Stored(s));
        }
        match self.index.lookup(id, self.index.now()) {
            Presence::No => return Ok(Found::Absent),
            Presence::Yes | Presence::Maybe => {}
        }
        let store = self.store.clone();
        let k = key.clone();
        // What the index held before the open: an entry committed while it ran is not the
        // file it found missing.
        let held = self.index.stamp(id);
        let opened = self
            .blocking(move || {
                let opened = store.open_entry(id, &k);
                super::failpoint_opened();
                opened
            })
            .await?;
        match opened {
            Ok((_, meta)) if meta.slice_size != self.slice_size => {
                // Cut at another `slice_size` (the volume's was changed since): its slice
                // numbers and lengths mean other bytes now. Never served; fetched anew.
                tracing::info!(volume = %self.name, entry = %id.rel_path(), stored = meta.slice_size, now = self.slice_size, "dropping a cache entry of another slice size");
                self.delete_opened(id, held, Reason::Replaced, !self.index.is_rebuilt());
                Ok(Found::Absent)
            }
            Ok((fd, meta)) => {
                let s = Arc::new(Stored::new(id, Arc::new(fd), Arc::new(meta)));
                // (Not one deleted since the open: evicted by the rebuild's walk, it would
                // come back and evict another.)
                if !self.index.is_rebuilt() && !matches!(s.on_disk(), OnDisk::Unlinked) {
                    let len = s.body_offset + s.meta.body_len;
                    let v = self
                        .index
                        .insert_found(id, len, s.stamp(), self.index.now());
                    self.delete(v);
                }
                if !self.opened_is_stored(&s) {
                    return Ok(Found::Absent);
                }
                // An entry committed while this one was opened is newer: it stays.
                self.keep_open(s.clone(), false);
                Ok(Found::Stored(s))
            }
            Err(EntryError::Missing) => {
                let gone = held.and_then(|stamp| self.index.remove_unchanged(id, stamp));
                if gone.is_some() {
                    tracing::debug!(volume = %self.name, entry = %id.rel_path(), "cache entry file removed from outside; forgotten");
                    self.update_gauges();
                }
                Ok(Found::Absent)
            }
            Err(EntryError::Collision) => Ok(Found::Collision),
            // The node's own shortage says nothing of the file: it is not deleted.
            Err(EntryError::Io(e)) if super::store::node_short_of(&e) => {
                // Descriptors kept open for later requests are worth less than this one's: a
                // few go, so that its next try (a response under way waits for its next
                // slice) can open.
                let shed = self.shed_open(SHED_ON_SHORTAGE);
                // (Once a second at most: while it lasts, every request meets it.)
                if crate::logging::once_a_second(&self.last_unavailable_log) {
                    tracing::warn!(volume = %self.name, entry = %id.rel_path(), error = %e, shed, "cannot open a cache entry now (kept); closed entries kept open for later requests");
                }
                Ok(Found::Unavailable)
            }
            Err(e) => {
                tracing::warn!(volume = %self.name, entry = %id.rel_path(), error = %e, "dropping unusable cache entry");
                self.delete_opened(id, held, Reason::Invalid, e.is_invalid());
                Ok(Found::Absent)
            }
        }
    }

    /// May `s`, just opened by its path, be served? Not when its file was written in place by
    /// a hand since the index learned of it (its size or modification time moved): it is
    /// deleted, to be fetched again. A newer entry committed meanwhile is told apart by order:
    /// the commit renames its file, then records it in the index, then its fill ends. A file
    /// deleted since the open (an eviction) is served, but an id the open put back in the
    /// index while it is rebuilt is taken out again (it held an entry with no file).
    fn opened_is_stored(&self, s: &Stored) -> bool {
        let ours = s.stamp();
        let recorded = self.index.stamp(s.id);
        let changed = recorded.is_some_and(|r| r.is_known() && ours.is_known() && r != ours);
        // The link count matters only then, or while the index is rebuilt (the open may have
        // put back an id being deleted): no second fstat otherwise.
        if !changed && self.index.is_rebuilt() {
            return true;
        }
        if matches!(s.on_disk(), OnDisk::Unlinked) {
            // Its bytes are still the entry's: served to this request, not kept open. (A
            // commit renamed over it: the newer entry, already in the index, stays.)
            if self.index.remove_if(s.id, ours).is_some() {
                self.update_gauges();
            }
            return true;
        }
        // A commit under way (renamed, not recorded yet), or one that ended since the index
        // was read: not a change by a hand.
        if !changed || self.any_fill(s.id) || self.index.stamp(s.id) == Some(ours) {
            return true;
        }
        tracing::warn!(volume = %self.name, entry = %s.id.rel_path(), "a cache entry was changed on the disk (written in place); deleted, to be fetched again");
        self.delete_opened(s.id, recorded, Reason::Invalid, false);
        self.update_gauges();
        false
    }

    /// The open entry `id` if it is `key`'s (a use of it, for the index's recency).
    fn open_entry(&self, id: EntryId, key: &[u8]) -> Option<Arc<Stored>> {
        let s = lock(&self.open)
            .get(&id)
            .filter(|s| *s.meta.key == *key)
            .cloned()?;
        match s.on_disk() {
            OnDisk::Same => {}
            // Removed (`rm -rf` of the cache's contents), or replaced by a newer entry:
            // opened again, its header checked.
            OnDisk::Unlinked => {
                self.lost(&s);
                return None;
            }
            // Written in place by a hand: its header may still be valid, its body is no longer
            // what was stored (it has no checksum). Deleted; the slice is fetched again.
            OnDisk::Changed => {
                tracing::warn!(volume = %self.name, entry = %s.id.rel_path(), "a cache entry was changed on the disk (written in place); deleted, to be fetched again");
                self.drop_invalid(&s);
                return None;
            }
        }
        self.index.lookup(id, self.index.now());
        Some(s)
    }

    /// An open entry whose file is gone from the directory: out of the table, so the next
    /// lookup opens its path on the pool, which finds what is there now (nothing: the index
    /// forgets it and it is fetched again; or the entry a commit renamed over it just now).
    fn lost(&self, s: &Stored) {
        let mut open = lock(&self.open);
        if open.get(&s.id).is_some_and(|o| Arc::ptr_eq(&o.fd, &s.fd)) {
            open.swap_remove(&s.id);
        }
    }

    /// Keep `s` open for the next requests, in place of the entry open for its id (bounded; a
    /// random other entry makes room).
    pub fn remember(&self, s: Arc<Stored>) {
        self.keep_open(s, true);
    }

    /// Close up to `n` open entries nobody is using (only this table holds them); how many
    /// were closed.
    fn shed_open(&self, n: usize) -> usize {
        let mut open = lock(&self.open);
        let mut closed = 0;
        let mut i = 0;
        while closed < n && i < open.len() {
            let unused = open
                .get_index(i)
                .is_some_and(|(_, s)| Arc::strong_count(s) == 1 && Arc::strong_count(&s.fd) == 1);
            if unused {
                // (The last entry takes its place: looked at next.)
                open.swap_remove_index(i);
                closed += 1;
            } else {
                i += 1;
            }
        }
        closed
    }

    /// Keep `s` open unless it left the index meanwhile. An eviction or a purge takes an entry
    /// out of the index and then out of this table; this puts it in the table and then looks
    /// at the index, so an entry deleted while it was being opened or committed (by another
    /// loop) cannot stay open, served from a deleted file that no purge reaches. Without
    /// `replace`, an entry already open for the id (committed meanwhile) stays.
    fn keep_open(&self, s: Arc<Stored>, replace: bool) {
        {
            let mut open = lock(&self.open);
            if !replace && open.contains_key(&s.id) {
                return;
            }
            if self.open_max == 0 {
                return;
            }
            if open.len() >= self.open_max && !open.contains_key(&s.id) {
                // A draw of its own for each entry. (Drawn from the object's hash, every
                // slice of one object gave up the same place, which the swap-remove had just
                // filled with the previous slice: an object's slices pushed each other out.)
                let draw = self
                    .open_draws
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let victim =
                    (xxhash_rust::xxh3::xxh3_64(&draw.to_le_bytes()) as usize) % open.len();
                open.swap_remove_index(victim);
            }
            open.insert(s.id, s.clone());
        }
        if !self.index.holds(s.id) {
            let mut open = lock(&self.open);
            if open.get(&s.id).is_some_and(|o| Arc::ptr_eq(o, &s)) {
                open.swap_remove(&s.id);
            }
        }
    }

    /// Drop stored entry `s`, found written in place (by a hand: the node never writes an
    /// entry after its commit), as [`Self::drop_invalid`] does; unless its file was unlinked
    /// meanwhile (its path may hold a newer entry), then only closed.
    pub fn drop_changed(&self, s: &Stored) {
        match s.on_disk() {
            OnDisk::Unlinked => self.lost(s),
            OnDisk::Same | OnDisk::Changed => self.drop_invalid(s),
        }
    }

    /// Drop stored entry `s` found unusable while served (its file shrank or cannot be read):
    /// out of the index and the open-entry table, its file deleted on the pool. A newer entry
    /// committed under the same id meanwhile is left alone.
    pub fn drop_invalid(&self, s: &Stored) {
        {
            let mut open = lock(&self.open);
            match open.get(&s.id) {
                // (The open file tells entries apart: a slice served with its first slice's
                // freshness is the same entry.)
                Some(o) if !Arc::ptr_eq(&o.fd, &s.fd) => return,
                Some(_) => {
                    open.swap_remove(&s.id);
                }
                None => {}
            }
        }
        // Only the entry `s` is: one committed under the id since has another stamp.
        let held = self.index.stamp(s.id);
        if held.is_some_and(|h| h.is_known() && s.stamp().is_known() && h != s.stamp()) {
            return self.update_gauges();
        }
        self.delete_opened(s.id, held, Reason::Invalid, !self.index.is_rebuilt());
        self.update_gauges();
    }

    /// Delete the entry of `id` an open found unusable; `held` is what the index held when the
    /// open began. An entry committed under the id meanwhile (another stamp) is not the file
    /// the open found: it stays. One the index did not hold is deleted by its path when
    /// `orphan` (its file, if still there, is then counted when removed).
    fn delete_opened(&self, id: EntryId, held: Option<Stamp>, reason: Reason, orphan: bool) {
        let victim = match held {
            Some(stamp) => self.index.remove_unchanged(id, stamp).map(|bytes| Victim {
                id,
                bytes,
                reason,
                stamp,
            }),
            None => orphan.then_some(Victim {
                id,
                bytes: 0,
                reason,
                stamp: Stamp::UNKNOWN,
            }),
        };
        if let Some(v) = victim {
            self.delete(vec![v]);
        }
    }

    /// Take entry `id` out of the index and delete its file on the pool, counted under
    /// `reason`. Once the index is rebuilt an id it does not hold has no file: nothing to
    /// delete, nothing counted (an object's slices are named by number, stored or not).
    fn delete_entry(&self, id: EntryId, reason: Reason) {
        let bytes = self.index.remove(id);
        if bytes.is_none() && self.index.is_rebuilt() {
            return;
        }
        self.delete(vec![Victim {
            id,
            bytes: bytes.unwrap_or(0),
            reason,
            stamp: Stamp::UNKNOWN,
        }]);
    }

    /// Delete the stored slices `ids` of one object, except those `keep` says to keep (found
    /// open: a newer version committed meanwhile) and those a fill is writing (it commits
    /// after this): out of the index and the open table, files deleted on the pool (counted
    /// as replaced).
    pub fn remove_slices(&self, ids: &[EntryId], keep: impl Fn(&Stored) -> bool) {
        for &id in ids {
            if self.any_fill(id) || lock(&self.open).get(&id).is_some_and(|s| keep(s)) {
                continue;
            }
            self.delete_entry(id, Reason::Replaced);
        }
        self.update_gauges();
    }

    /// Forget the open entry `id` (replaced, evicted, purged).
    pub fn forget(&self, id: EntryId) {
        lock(&self.open).swap_remove(&id);
    }

    /// A new entry was committed: account it (deleting what must make room; `reserved`: the
    /// space reserved while it was written, which ends now) and keep it open.
    pub fn committed(&self, s: Arc<Stored>, file_len: u64, reserved: u64) {
        let victims =
            self.index
                .insert_reserved(s.id, file_len, reserved, s.stamp(), self.index.now());
        self.remember(s);
        self.delete(victims);
        self.update_gauges();
    }

    /// An entry committed over the older version of its object at its path (the object changed
    /// at the origin): counted as replaced, as the old version's other slices are when dropped.
    pub fn count_replaced(&self) {
        self.m.evicted[slot(Reason::Replaced)].inc();
    }

    /// Delete `victims`' files on the pool (the event loop never unlinks); counts evictions.
    pub fn delete(&self, victims: Vec<Victim>) {
        if victims.is_empty() {
            return;
        }
        self.account(&victims);
        // Deletions are never refused (the space must come back), and nobody waits for them.
        if self
            .pool
            .submit_continuation(PoolOp::Open, self.removal(victims))
            .is_err()
        {
            tracing::warn!(volume = %self.name, "cannot queue cache deletions");
        }
    }

    /// [`Self::delete`] for the upkeep thread, which may wait: in chunks of [`DELETE_CHUNK`],
    /// each done before the next is queued, so a mass eviction (a restart with a lower
    /// `max_size`, a long idle sweep) never queues more than one chunk ahead of the requests'
    /// opens on the pool.
    fn delete_paced(&self, victims: Vec<Victim>) {
        for chunk in victims.chunks(DELETE_CHUNK) {
            self.account(chunk);
            let mut tries = 0;
            while self.on_pool(self.removal(chunk.to_vec())).is_none() {
                tries += 1;
                if tries == 20 {
                    // The pool keeps refusing (or is gone): queued like `delete`, unwaited.
                    let _ =
                        (self.pool).submit_continuation(PoolOp::Open, self.removal(chunk.to_vec()));
                    break;
                }
            }
        }
    }

    /// Victims out of the open table, counted as evictions.
    fn account(&self, victims: &[Victim]) {
        for v in victims {
            self.forget(v.id);
            // One the index did not hold (no bytes: looked for while the index is rebuilt, it
            // may have no file) counts when `removal` finds and deletes its file.
            if v.bytes > 0 {
                self.m.evicted[slot(v.reason)].inc();
            }
        }
    }

    /// The pool job deleting `victims`' files, but not a newer entry's file committed at a
    /// victim's path since. A victim an open by path put back in the index meanwhile (same
    /// stamp: the file now deleted) is taken out again; the open, which looks at its file's
    /// link count after putting it back, catches the other order.
    fn removal(&self, victims: Vec<Victim>) -> impl FnOnce() + Send + 'static {
        let store = self.store.clone();
        let index = self.index.clone();
        let name = self.name.clone();
        let evicted = self.m.evicted.clone();
        move || {
            for v in victims {
                // Not a newer entry committed at its path since it was chosen (the index holds
                // that one: deleting it left an entry with no file).
                let newer = |ver: FileVersion| {
                    let now = Stamp::of(ver);
                    now != v.stamp && index.stamp(v.id) == Some(now)
                };
                match store.remove_unless(v.id, &newer) {
                    Ok(true) if v.bytes == 0 => evicted[slot(v.reason)].inc(),
                    Ok(true) => {
                        index.remove_if(v.id, v.stamp);
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(volume = %name, entry = %v.id.rel_path(), error = %e, "cannot delete cache entry");
                    }
                }
            }
            // A kept mincore window of a deleted entry would hold its blocks on the disk.
            crate::fs::mincore::release_closed();
        }
    }

    /// The fill of `id` for `key` under way, or a new one made by `make` (registered before
    /// it starts, so concurrent requests find it). With `unless_stored`, the entry of that key
    /// committed since the caller looked is returned instead of a new fill.
    pub fn fill_for(
        &self,
        id: EntryId,
        key: &[u8],
        unless_stored: bool,
        make: impl FnOnce() -> Arc<F>,
    ) -> FillFor<F> {
        let mut fills = lock(&self.fills);
        match fills.get(&id) {
            Some(f) if f.key() == key => return FillFor::Fill(f.clone(), true),
            Some(_) => return FillFor::Collision,
            None => {}
        }
        // A fill puts its entry in `open` before it unregisters, so with `fills` locked an
        // entry committed between the caller's lookup and now is found here.
        if let Some(s) = unless_stored.then(|| self.open_entry(id, key)).flatten() {
            return FillFor::Stored(s);
        }
        let f = make();
        fills.insert(id, f.clone());
        FillFor::Fill(f, false)
    }

    /// `fill` starts (before it asks the origin anything).
    pub fn fill_started(&self, fill: &Arc<F>) {
        let mut running = lock(&self.running);
        running.push(fill.clone());
        self.m.fills.set(running.len() as i64);
    }

    /// A purge: unregister the fills `matches` names (new requests start their own fetch) and
    /// return every running fill it names, registered or not, for the purge to stop storing.
    pub fn take_fills(&self, matches: impl Fn(&F) -> bool) -> Vec<Arc<F>> {
        let mut fills = lock(&self.fills);
        fills.retain(|_, f| !matches(f));
        let running = lock(&self.running);
        running.iter().filter(|f| matches(f)).cloned().collect()
    }

    /// Does a fill `matches` run now, joinable or not?
    pub fn any_running(&self, matches: impl Fn(&F) -> bool) -> bool {
        lock(&self.running).iter().any(|f| matches(f))
    }

    /// Fills running now, joinable or not (shutdown waits for them, so what was fetched gets
    /// stored).
    pub fn fills_in_flight(&self) -> usize {
        lock(&self.running).len()
    }

    /// The fill of `id` for `key`, if one runs (joinable).
    pub fn fill_running(&self, id: EntryId, key: &[u8]) -> Option<Arc<F>> {
        lock(&self.fills)
            .get(&id)
            .filter(|f| f.key() == key)
            .cloned()
    }

    /// Does a fill of `id` run, for any key, joinable or not (one that may still commit it:
    /// a revalidation rewriting the entry's header is no longer joinable)?
    fn any_fill(&self, id: EntryId) -> bool {
        lock(&self.fills).contains_key(&id) || lock(&self.running).iter().any(|f| f.id() == id)
    }

    /// New requests no longer join `fill` (it still runs for the requests it has).
    pub fn unregister_fill(&self, id: EntryId, fill: &Arc<F>) {
        let mut fills = lock(&self.fills);
        if fills.get(&id).is_some_and(|f| Arc::ptr_eq(f, fill)) {
            fills.remove(&id);
        }
    }

    /// A fill ended: new requests no longer join it.
    pub fn fill_done(&self, id: EntryId, fill: &Arc<F>) {
        self.unregister_fill(id, fill);
        let mut running = lock(&self.running);
        running.retain(|f| !Arc::ptr_eq(f, fill));
        self.m.fills.set(running.len() as i64);
    }

    /// Whether the disk was found full within [`DISK_FULL_SETTLE_MS`]: only new entries that
    /// fit without evicting are stored meanwhile (the writes of others would fail too, and the
    /// space they reserve would be taken from the stored entries: a burst of misses emptied
    /// the cache).
    pub fn disk_full_lately(&self) -> bool {
        let last = self
            .last_disk_full_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        last != 0 && crate::http::date::unix_now_ms() - last < DISK_FULL_SETTLE_MS
    }

    /// A write failed with ENOSPC (counted): lower the limit below what is stored so eviction
    /// frees space now (once per [`DISK_FULL_SETTLE_MS`]).
    pub fn disk_full(&self) {
        self.m.store_failed[0].inc();
        use std::sync::atomic::Ordering;
        let now = crate::http::date::unix_now_ms();
        let last = self.last_disk_full_ms.load(Ordering::Relaxed);
        if now - last < DISK_FULL_SETTLE_MS
            || self
                .last_disk_full_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let size = self.index.size_bytes();
        let writing = self.index.reserved_bytes();
        let v = self.index.lower_max_below_stored();
        tracing::warn!(volume = %self.name, stored_bytes = size, writing_bytes = writing, evicting = v.len(), "cache disk full; evicting");
        self.delete(v);
        self.update_gauges();
    }

    /// Remove every stored slice of the object `hash` (a purge, or a new version at the origin).
    /// Runs the directory listing and unlinks on the pool, never refused there (what may no
    /// longer be served must go, as space given back must: a busy pool only delays it);
    /// returns how many files went.
    pub async fn remove_object(&self, hash: u128) -> Result<usize, RemoveError> {
        self.passes.forget(hash);
        self.remove_object_files(hash).await
    }

    /// [`Self::remove_object`], its pass-through marks kept (a withdrawal: the object is passed
    /// through from before its removal to after it, never fetched to be stored in between).
    pub async fn remove_object_files(&self, hash: u128) -> Result<usize, RemoveError> {
        let store = self.store.clone();
        let listed = self
            .pool
            .run_continuation(PoolOp::Open, move || store.remove_object(hash))
            .await;
        // Whatever happened to the files, no slice of the object is served from here on:
        // the index and the open entries forget every one of them.
        let held = self.index.slices_of(hash);
        for &id in &held {
            self.index.remove(id);
            self.forget(id);
        }
        let result = match listed.map_err(PoolError::from)? {
            Ok(r) => {
                for id in r.removed.iter().chain(r.failed.iter().map(|(id, _)| id)) {
                    self.index.remove(*id);
                    self.forget(*id);
                }
                // An entry the index held was either the file the listing removed or one a fill
                // committed since (the listing did not see it, or it removed the older file at
                // the same path): whatever is at its path now goes too, or it would stay on the
                // disk unknown to the index (never evicted), and a restart would serve it.
                let late: Vec<EntryId> = (held.into_iter())
                    .filter(|id| !r.failed.iter().any(|(f, _)| f == id))
                    .collect();
                if !late.is_empty() {
                    let store = self.store.clone();
                    let gone = self
                        .pool
                        .run_continuation(PoolOp::Open, move || {
                            late.iter()
                                .filter(|id| store.remove(**id).is_ok_and(|r| r))
                                .count()
                        })
                        .await;
                    if let Ok(n) = gone {
                        tracing::debug!(volume = %self.name, files = n, "purge: entries committed during the removal removed too");
                    }
                }
                match r.failed.first() {
                    None => Ok(r.removed.len()),
                    Some((id, e)) => {
                        tracing::warn!(volume = %self.name, entry = %id.rel_path(), error = %e, "cannot remove a cache entry");
                        Err(RemoveError::Files {
                            removed: r.removed.len(),
                            failed: r.failed.len(),
                            first: format!(
                                "{}: {e}",
                                self.store.path().join(id.rel_path()).display()
                            ),
                        })
                    }
                }
            }
            Err(e) => {
                tracing::warn!(volume = %self.name, error = %e, "cannot remove cache entries");
                Err(RemoveError::Io(e))
            }
        };
        self.update_gauges();
        result
    }

    pub fn update_gauges(&self) {
        self.m.size.set(self.index.size_bytes() as i64);
        self.m.entries.set(self.index.entries() as i64);
        self.m.max.set(self.index.max_bytes() as i64);
    }

    /// Start the background work: the index rebuild (16 pool tasks, one per level-1 directory),
    /// then once a second the inactive sweep, the free-space limit and the gauges. A thread that
    /// only submits pool tasks and sleeps (no file work of its own).
    pub fn spawn_upkeep(self: &Arc<Self>) -> std::io::Result<()> {
        let cv = self.clone();
        std::thread::Builder::new()
            .name(format!("cache-{}", self.name))
            .spawn(move || cv.upkeep())
            .map(|_| ())
    }

    fn on_pool<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> Option<R> {
        let rx = match self.pool.submit_optional(PoolOp::Open, f) {
            Some(rx) => rx,
            None => {
                std::thread::sleep(Duration::from_millis(50));
                return None;
            }
        };
        rx.blocking_recv().ok()
    }

    fn upkeep(self: Arc<Self>) {
        let started = std::time::Instant::now();
        let mut found = 0;
        let mut level = 0u8;
        while level < super::rebuild::LEVELS {
            super::failpoint_rebuild_level();
            let (store, cv) = (self.store.clone(), self.clone());
            let l = level;
            match self.on_pool(move || super::rebuild::rebuild_level(&store, &cv.index, l)) {
                Some(Ok((victims, n))) => {
                    found += n;
                    self.delete_paced(victims);
                    level += 1;
                    // The gauges follow the walk (not 0 until its end).
                    self.update_gauges();
                }
                Some(Err(e)) => {
                    tracing::error!(volume = %self.name, depth = l, error = %e, "cache index rebuild: cannot walk a directory level");
                    level += 1;
                }
                None => {} // pool busy or task lost: try the level again
            }
        }
        self.index.mark_rebuilt();
        self.update_gauges();
        tracing::info!(
            volume = %self.name, found, entries = self.index.entries(), bytes = self.index.size_bytes(),
            max_bytes = self.index.max_bytes(),
            elapsed_ms = started.elapsed().as_millis() as u64, "cache index rebuilt"
        );
        let mut tick = 0u64;
        loop {
            std::thread::sleep(Duration::from_secs(1));
            tick += 1;
            // The directory or its lock removed by a hand: made again (and ready again) without
            // waiting for a fill.
            let store = self.store.clone();
            if let Some(Err(e)) = self.on_pool(move || store.heal()) {
                tracing::warn!(volume = %self.name, error = %e, "cache directory cannot be made again");
            }
            let v = self.index.expire_inactive(self.index.now(), SWEEP_BUDGET);
            self.delete_paced(v);
            // Entries deleted while a response still held them: their space comes back now.
            crate::fs::mincore::release_closed();
            if tick.is_multiple_of(10) {
                let limit = match self.max_size {
                    Some(m) => {
                        // Back to the configured limit after a full disk, if space is free again.
                        let store = self.store.clone();
                        let free = self.on_pool(move || store.fs_space()).and_then(|r| r.ok());
                        match free {
                            Some((total, avail)) if avail > total / 20 => m,
                            _ => m.min(self.index.max_bytes()),
                        }
                    }
                    None => {
                        let (store, used) = (self.store.clone(), self.index.size_bytes());
                        self.on_pool(move || ten_percent_free_limit(&store, used))
                            .unwrap_or(self.index.max_bytes())
                    }
                };
                let v = self.index.set_max_bytes(limit);
                self.delete_paced(v);
            }
            self.update_gauges();
        }
    }
}

/// "Keep 10% of the filesystem free": what is stored now plus the free space, less a reserve of
/// 10% of the filesystem. When other data already left less than that free, the reserve is half
/// of what the cache could use (stored + free), so a shared disk still gets a bounded cache
/// rather than none; a full disk (ENOSPC) is handled on top (see [`CacheVolume::disk_full`]).
fn ten_percent_free_limit(store: &Store, used: u64) -> u64 {
    match store.fs_space() {
        Ok((total, avail)) => {
            let usable = used + avail;
            usable - (total / 10).min(usable / 2)
        }
        Err(_) => used,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::entry::sample_meta;
    use crate::cache::key::CacheKey;

    /// A request looks an entry up, finds nothing, then asks for a fill; the fill it would have
    /// joined may commit and unregister in between. It gets the committed entry, not a second
    /// origin fetch.
    #[test]
    fn a_fill_that_committed_since_the_lookup_is_served_not_refetched() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::new(&["c1"], 1);
        let c = config::VolumeCache::default();
        let v = config::Volume {
            name: "c1".into(),
            path: dir.path().to_path_buf(),
            offload: config::Offload::default(),
            pool: config::Pool::default(),
            cache: Some(c.clone()),
        };
        let pool = Pool::start("c1", 1, 16, &metrics).unwrap();
        let cv: Arc<CacheVolume<TestFill>> = CacheVolume::open(&v, &c, 1, pool, &metrics).unwrap();
        let id = CacheKey::new(b"/a".to_vec()).slice(0);
        // (fill number, joined), or None for the stored entry; Some((0, true)) for a collision.
        let fill_for =
            |key: &'static [u8], stored: bool, n: u8| match cv
                .fill_for(id, key, stored, || Arc::new(TestFill(n, key)))
            {
                FillFor::Fill(f, joined) => Some((f.0, joined)),
                FillFor::Stored(s) => {
                    assert_eq!(s.id, id);
                    None
                }
                FillFor::Collision => Some((0, true)),
            };

        assert_eq!(fill_for(b"/a", true, 1), Some((1, false)));
        assert_eq!(fill_for(b"/a", true, 2), Some((1, true)));
        // Another key of the same hash neither joins it nor replaces it.
        assert_eq!(fill_for(b"/b", true, 9), Some((0, true)));
        assert!(cv.fill_running(id, b"/b").is_none());

        // Fill 1 commits, then unregisters (the order `Fill::run` and `fill_done` keep).
        let fd = std::fs::File::open(dir.path()).unwrap().into();
        let meta = Arc::new(sample_meta(b"/a", 0, 10));
        cv.committed(Arc::new(Stored::new(id, Arc::new(fd), meta)), 4106, 0);
        let fill1 = cv.fill_running(id, b"/a").unwrap();
        cv.fill_done(id, &fill1);

        assert_eq!(fill_for(b"/a", true, 3), None);
        // Another key with the same id (a hash collision) is not served that entry.
        assert_eq!(fill_for(b"/b", true, 4), Some((4, false)));
        // A revalidation asks the origin whatever is stored.
        assert_eq!(fill_for(b"/b", false, 5), Some((4, true)));
    }

    /// A fill as the volume sees it: a number and its key.
    struct TestFill(u8, &'static [u8]);

    impl FillKey for TestFill {
        fn key(&self) -> &[u8] {
            self.1
        }
        fn id(&self) -> EntryId {
            EntryId::new(u128::from(self.0), 0)
        }
    }
}
