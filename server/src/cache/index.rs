//! The in-memory index of one cache volume: which entries (files) exist, their sizes, when each
//! was last used, and the admission sketch.
//!
//! Owns size accounting against `max_size` (stored entries plus the space reserved by fills
//! writing theirs: temporary files take disk too), `inactive` expiry, eviction and admission. Eviction is
//! sampled LRU (Redis-style: the least recently used of [`SAMPLES`] random entries goes first;
//! among those last used in the same second, the least popular), possible in O(1) because entries
//! live in an `IndexMap` (a dense vector plus a table of positions, so a random position is one
//! array access). Admission is TinyLFU: when storing a new object would evict, it is stored only if
//! the [`FrequencySketch`] says it was asked for at least as often as the entry it would evict, so
//! one-hit objects do not flush popular ones; `min_uses` is a floor on top. Each entry keeps the
//! [`Stamp`] of its file (size and modification time), so a file written in place by a hand is
//! told from the one stored. An entry costs 48 bytes in the vector plus 9 in the position table:
//! `bench/cache-index-memory.sh` measured 69 bytes of resident memory per entry at 1,000,000
//! entries (109 allocated, with growth slack; 61 before the stamp; `moka` measured 321). It
//! holds no file descriptor, path or key text, and must not touch the disk: callers delete the
//! returned victims on the volume's pool.

use super::key::EntryId;
use super::sketch::FrequencySketch;
use crate::fs::open::FileVersion;
use indexmap::IndexMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Entries compared per eviction.
pub const SAMPLES: usize = 8;

/// The admission sketch's columns per stored entry, at most (at least half as many): with 4,
/// an object never asked for finds all four of its counters shared by stored objects once in
/// about 400 (at 1-2, about once in 15: `min_uses = 2` stored objects asked for once).
const COLUMNS_PER_ENTRY: usize = 8;

/// Most victims an admission compares a new entry with (entries far smaller than it: past
/// these, it is admitted on their account).
const MAX_ADMISSION_VICTIMS: usize = 16;
/// Sizes are kept in 4 KiB units (what the file occupies, about).
const UNIT: u64 = 4096;

/// Why an entry left the index (the `reason` label of `contentserver_cache_evictions_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Size,
    Inactive,
    /// A short, unreadable or corrupt file.
    Invalid,
    /// An older version of an object that changed at the origin, or an entry cut at another
    /// `slice_size`.
    Replaced,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Size => "size",
            Reason::Inactive => "inactive",
            Reason::Invalid => "invalid",
            Reason::Replaced => "replaced",
        }
    }
}

/// What an entry's file was when the index learned of it (committed, or found by the rebuild's
/// walk or an open): its size and modification time, hashed. The node never writes an entry
/// after its commit, so a file that no longer matches was written in place by a hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp(u64);

impl Stamp {
    /// Not known (matches nothing, and nothing is checked against it).
    pub const UNKNOWN: Stamp = Stamp(0);

    pub fn of(v: FileVersion) -> Stamp {
        let mut b = [0u8; 24];
        b[..8].copy_from_slice(&v.size.to_le_bytes());
        b[8..16].copy_from_slice(&v.mtime.to_le_bytes());
        b[16..].copy_from_slice(&v.mtime_nsec.to_le_bytes());
        Stamp(xxhash_rust::xxh3::xxh3_64(&b).max(1))
    }

    pub fn is_known(self) -> bool {
        self != Stamp::UNKNOWN
    }
}

/// An entry removed from the index whose file the caller must delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Victim {
    pub id: EntryId,
    pub bytes: u64,
    pub reason: Reason,
    /// Its file's stamp in the index ([`Stamp::UNKNOWN`] for one the index did not hold).
    pub stamp: Stamp,
}

/// Is an entry there?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// In the index (its last use is now updated).
    Yes,
    /// Not stored.
    No,
    /// Not in the index yet, but the rebuild after a restart has not finished: open its path.
    Maybe,
}

#[derive(Clone, Copy)]
struct Slot {
    /// Size in [`UNIT`]s.
    units: u32,
    /// Seconds since the index's epoch.
    last_use: u32,
    stamp: Stamp,
}

struct State {
    map: IndexMap<EntryId, Slot>,
    /// Per object with a stored slice past the first: how many such slices, and the highest,
    /// so [`Index::slices_of`] looks up its slices rather than every entry (an object's removal
    /// scanned the whole index under its lock: 0.6-0.9 ms an object at 200,000 entries, while
    /// every lookup waited).
    later: std::collections::HashMap<u128, (u32, u32)>,
    units: u64,
    /// Reserved by fills writing an admitted entry ([`Index::reserve`]): their temporary files
    /// are on the disk too, and a disk slower than the origin holds many (a 40 MiB volume
    /// filled its 55 MB disk with 18 MB of them).
    reserved: u64,
    max_units: u64,
    sketch: FrequencySketch,
    rng: u64,
    /// Next position of the inactive sweep.
    cursor: usize,
}

/// The index of one cache volume; shared by every worker (one mutex, held for O(1) work except
/// the bounded inactive sweep).
pub struct Index {
    st: Mutex<State>,
    epoch: Instant,
    inactive_secs: u32,
    min_uses: u8,
    rebuilt: AtomicBool,
    /// The limit is "keep 10% free" (no `max_size`), computed at start from the free space,
    /// which does not count what the cache already holds: each entry the rebuild finds raises
    /// it by its size (else a restart would evict down to a tenth of a nearly full cache).
    found_raises_limit: AtomicBool,
}

fn units(bytes: u64) -> u32 {
    bytes.div_ceil(UNIT).min(u32::MAX as u64) as u32
}

fn sketch_hash(id: &EntryId) -> u64 {
    let h = id.hash();
    (h >> 64) as u64 ^ h as u64
}

impl Index {
    /// An empty index keeping at most `max_bytes`, dropping entries unused for `inactive`,
    /// storing an object once it was asked for `min_uses` times. `expected_entries` sizes the
    /// sketch (it is grown when the index outgrows it).
    pub fn new(
        max_bytes: u64,
        inactive: Duration,
        min_uses: u32,
        expected_entries: usize,
    ) -> Index {
        Index {
            st: Mutex::new(State {
                map: IndexMap::new(),
                units: 0,
                reserved: 0,
                max_units: max_bytes / UNIT,
                sketch: FrequencySketch::new((expected_entries * 4).min(1 << 20)),
                rng: 0x853C_49E6_748F_EA9B,
                cursor: 0,
                later: std::collections::HashMap::new(),
            }),
            epoch: Instant::now(),
            inactive_secs: inactive.as_secs().min(u32::MAX as u64) as u32,
            min_uses: min_uses.clamp(1, 15) as u8,
            rebuilt: AtomicBool::new(false),
            found_raises_limit: AtomicBool::new(false),
        }
    }

    /// The limit leaves out what is on disk already: entries found raise it (see the field).
    pub fn found_raises_limit(&self) {
        self.found_raises_limit.store(true, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Seconds since the index was created: the clock every `now` argument uses.
    pub fn now(&self) -> u32 {
        self.epoch.elapsed().as_secs().min(u32::MAX as u64) as u32
    }

    /// Count one request for the object `hash` in the admission sketch (once per request).
    pub fn record_request(&self, id: EntryId) {
        self.lock().sketch.increment(sketch_hash(&id));
    }

    /// Is `id` stored? Marks it used at `now`.
    pub fn lookup(&self, id: EntryId, now: u32) -> Presence {
        let mut st = self.lock();
        match st.map.get_mut(&id) {
            Some(s) => {
                s.last_use = now;
                Presence::Yes
            }
            None if self.rebuilt.load(Ordering::Acquire) => Presence::No,
            None => Presence::Maybe,
        }
    }

    /// Is `id` in the index? (Not a use of it.)
    pub fn holds(&self, id: EntryId) -> bool {
        self.lock().map.contains_key(&id)
    }

    /// The stamp of `id`'s file as the index knows it (None: not held).
    pub fn stamp(&self, id: EntryId) -> Option<Stamp> {
        self.lock().map.get(&id).map(|s| s.stamp)
    }

    /// Forget `id` if the index holds it with `stamp` (a known one): put back by an open of a
    /// file that was being deleted, the entry is not there any more. A newer file committed
    /// under the id has another stamp and stays. Returns its size if it was removed.
    pub fn remove_if(&self, id: EntryId, stamp: Stamp) -> Option<u64> {
        stamp.is_known().then(|| self.remove_unchanged(id, stamp))?
    }

    /// Forget `id` if the index still holds it with `stamp`, known or not (what it held when a
    /// look at its file began); a file committed under the id since has another stamp and
    /// stays. Returns its size if it was removed.
    pub fn remove_unchanged(&self, id: EntryId, stamp: Stamp) -> Option<u64> {
        let mut st = self.lock();
        if st.map.get(&id).map(|s| s.stamp) != Some(stamp) {
            return None;
        }
        st.take(id)
    }

    /// Should a new entry of `bytes` for `id`'s object be stored? It must fit the cache beside
    /// the entries being written, its object must have been asked for `min_uses` times, and
    /// when storing it would evict, at least as often as each entry that would go to make room
    /// (TinyLFU; a small victim that frees too little is followed by the next, as the eviction
    /// will be). [`Index::admit_and_reserve`] stores it.
    pub fn admit(&self, id: EntryId, bytes: u64) -> bool {
        self.admission(&mut self.lock(), id, bytes).is_some()
    }

    /// [`Index::admit`], and when admitted, reserve `bytes` for the entry while it is written
    /// (its temporary file): counted against `max_size` until [`Index::insert_reserved`] or
    /// [`Index::release`]. Returns the entries to evict to make room (the caller deletes their
    /// files): those the admission compared it with, so none more popular than it goes (two
    /// samples, one to admit and one to evict, took popular entries the first had spared).
    pub fn admit_and_reserve(&self, id: EntryId, bytes: u64) -> Option<Vec<Victim>> {
        let mut st = self.lock();
        let mut chosen = self.admission(&mut st, id, bytes)?;
        // Highest first: a swap-remove moves the last entry, never one of the lower positions.
        chosen.sort_unstable_by(|a, b| b.cmp(a));
        let mut out: Vec<Victim> = (chosen.into_iter())
            .map(|pos| st.victim_at(pos, Reason::Size))
            .collect();
        st.reserved += units(bytes) as u64;
        out.extend(st.evict_to_fit(Some(id)));
        Some(out)
    }

    /// The admission of [`Index::admit`]: `Some(positions of the entries to evict)` when
    /// admitted.
    fn admission(&self, st: &mut State, id: EntryId, bytes: u64) -> Option<Vec<usize>> {
        if st.reserved + units(bytes) as u64 > st.max_units {
            return None;
        }
        let own = sketch_hash(&id);
        let freq = st.sketch.frequency(own);
        if freq < self.min_uses {
            return None;
        }
        let total = st.units + st.reserved + units(bytes) as u64;
        let mut chosen = Vec::new();
        if total <= st.max_units {
            return Some(chosen);
        }
        let need = total - st.max_units;
        let mut freed = 0u64;
        while freed < need && chosen.len() < MAX_ADMISSION_VICTIMS {
            // Nothing more to evict: it fits (checked above) once those go.
            let Some(pos) = st.sample_victim(Some(id), &chosen, Some(freq)) else {
                break;
            };
            let (vid, v) = st.map.get_index(pos).expect("sampled position exists");
            let vh = sketch_hash(vid);
            // Slices of the object itself are not a reason to refuse it.
            // Ties admit (recency decides among equally popular objects, as LRU would).
            if vh != own && freq < st.sketch.frequency(vh) {
                return None;
            }
            freed += v.units as u64;
            chosen.push(pos);
        }
        Some(chosen)
    }

    /// A reservation of `bytes` ended without an entry (the fill failed or was purged).
    pub fn release(&self, bytes: u64) {
        let mut st = self.lock();
        st.reserved = st.reserved.saturating_sub(units(bytes) as u64);
    }

    /// [`Index::insert`] of an entry written under a reservation of `reserved` bytes, which
    /// ends with it.
    pub fn insert_reserved(
        &self,
        id: EntryId,
        bytes: u64,
        reserved: u64,
        stamp: Stamp,
        now: u32,
    ) -> Vec<Victim> {
        let mut st = self.lock();
        st.reserved = st.reserved.saturating_sub(units(reserved) as u64);
        Self::insert_locked(&mut st, id, bytes, stamp, now)
    }

    /// Whether an entry of `bytes` fits beside what is stored and being written, evicting
    /// nothing.
    pub fn fits(&self, bytes: u64) -> bool {
        let st = self.lock();
        st.units + st.reserved + units(bytes) as u64 <= st.max_units
    }

    /// Space reserved by entries being written, in bytes (as accounted).
    pub fn reserved_bytes(&self) -> u64 {
        self.lock().reserved * UNIT
    }

    /// Record a stored entry (a fill committed, or one found on disk) of `bytes` whose file has
    /// `stamp`. Returns the entries to evict (the caller deletes their files) so the total stays
    /// under `max_size`; `id` itself is never among them.
    pub fn insert(&self, id: EntryId, bytes: u64, stamp: Stamp, now: u32) -> Vec<Victim> {
        Self::insert_locked(&mut self.lock(), id, bytes, stamp, now)
    }

    fn insert_locked(
        st: &mut State,
        id: EntryId,
        bytes: u64,
        stamp: Stamp,
        now: u32,
    ) -> Vec<Victim> {
        let slot = Slot {
            units: units(bytes),
            last_use: now,
            stamp,
        };
        match st.map.insert(id, slot) {
            Some(old) => st.units -= old.units as u64,
            None => st.added(id),
        }
        st.units += slot.units as u64;
        let want = (st.map.len() * COLUMNS_PER_ENTRY).max(64);
        if st.sketch.width() < want / 2 {
            // 4-8 columns per stored object (widened, its counts kept).
            st.sketch = st.sketch.grown(want);
        }
        st.evict_to_fit(Some(id))
    }

    /// Insert what the rebuild walk found, unless a fill or an open already did.
    pub fn insert_found(&self, id: EntryId, bytes: u64, stamp: Stamp, now: u32) -> Vec<Victim> {
        let mut st = self.lock();
        if st.map.contains_key(&id) {
            return Vec::new();
        }
        if self.found_raises_limit.load(Ordering::Relaxed) && !self.is_rebuilt() {
            st.max_units += units(bytes) as u64;
        }
        // Larger than the whole limit (lowered since it was stored): it is the one to go, not
        // entries that fit (a fill of it would not be admitted either).
        if units(bytes) as u64 > st.max_units {
            return vec![Victim {
                id,
                bytes: units(bytes) as u64 * UNIT,
                reason: Reason::Size,
                stamp,
            }];
        }
        Self::insert_locked(&mut st, id, bytes, stamp, now)
    }

    /// Forget every entry (their directory was removed); the admission counts stay.
    pub fn clear(&self) {
        let mut st = self.lock();
        st.map.clear();
        st.later.clear();
        st.units = 0;
        st.cursor = 0;
    }

    /// Forget `id` (purged, invalid, replaced by a new version); returns its size if it was there.
    pub fn remove(&self, id: EntryId) -> Option<u64> {
        self.lock().take(id)
    }

    /// Examine up to `budget` entries (continuing where the last call stopped) and remove those
    /// unused for `inactive` at `now`. Call it periodically; a whole pass over N entries takes
    /// N / budget calls.
    pub fn expire_inactive(&self, now: u32, budget: usize) -> Vec<Victim> {
        let mut st = self.lock();
        let mut out = Vec::new();
        let mut seen = 0;
        while seen < budget && !st.map.is_empty() {
            if st.cursor >= st.map.len() {
                st.cursor = 0;
            }
            let pos = st.cursor;
            let last_use = st.map.get_index(pos).expect("in range").1.last_use;
            // Whole seconds: more than `inactive` apart, so an entry is kept at least its
            // `inactive` (a use at 10.9 s and a sweep at 11.4 s are 1 apart, 0.5 s really).
            if now.saturating_sub(last_use) > self.inactive_secs {
                // The last entry moves into `pos`: look at it next (cursor stays).
                out.push(st.victim_at(pos, Reason::Inactive));
            } else {
                st.cursor += 1;
            }
            seen += 1;
        }
        out
    }

    /// Change the limit (e.g. "keep 10% free" re-evaluated); returns what must be evicted.
    pub fn set_max_bytes(&self, max: u64) -> Vec<Victim> {
        let mut st = self.lock();
        st.max_units = max / UNIT;
        st.evict_to_fit(None)
    }

    /// The disk is full: the limit becomes a tenth less than what is stored, and that tenth is
    /// evicted. The entries being written are not counted: they are failing on the same disk
    /// (their reservations end as they do), and counting them evicted every stored entry, or,
    /// added to the limit, left it far above what the disk holds. Returns what must be evicted.
    pub fn lower_max_below_stored(&self) -> Vec<Victim> {
        let mut st = self.lock();
        st.max_units = st.units - st.units / 10;
        let mut out = Vec::new();
        while st.units > st.max_units {
            let Some(pos) = st.sample_victim(None, &[], None) else {
                break;
            };
            out.push(st.victim_at(pos, Reason::Size));
        }
        out
    }

    /// Stored bytes (in 4 KiB units, as accounted).
    pub fn size_bytes(&self) -> u64 {
        self.lock().units * UNIT
    }

    pub fn max_bytes(&self) -> u64 {
        self.lock().max_units * UNIT
    }

    pub fn entries(&self) -> usize {
        self.lock().map.len()
    }

    /// Every entry found on disk is now in the index: a miss in it is a miss.
    pub fn mark_rebuilt(&self) {
        self.rebuilt.store(true, Ordering::Release);
    }

    pub fn is_rebuilt(&self) -> bool {
        self.rebuilt.load(Ordering::Acquire)
    }

    /// Ids of every stored slice of the object `hash`.
    pub fn slices_of(&self, hash: u128) -> Vec<EntryId> {
        let st = self.lock();
        let last = st.later.get(&hash).map_or(0, |&(_, max)| max);
        (0..=last)
            .map(|k| EntryId::new(hash, k))
            .filter(|id| st.map.contains_key(id))
            .collect()
    }

    /// Heap bytes held (map vector + position table + sketch), for the memory benchmark.
    pub fn heap_bytes_estimate(&self) -> usize {
        let st = self.lock();
        let cap = st.map.capacity();
        cap * (std::mem::size_of::<EntryId>() + std::mem::size_of::<Slot>() + 8)
            + cap.next_power_of_two() * 9
            + st.sketch.bytes()
    }
}

impl State {
    /// Take `id` out, its size out of the total; returns its size if it was there.
    fn take(&mut self, id: EntryId) -> Option<u64> {
        let s = self.map.swap_remove(&id)?;
        self.dropped(id);
        self.units -= s.units as u64;
        Some(s.units as u64 * UNIT)
    }

    /// `id` is new in the map: count it among its object's later slices.
    fn added(&mut self, id: EntryId) {
        if id.slice > 0 {
            let e = self.later.entry(id.hash()).or_insert((0, 0));
            e.0 += 1;
            e.1 = e.1.max(id.slice);
        }
    }

    /// `id` left the map.
    fn dropped(&mut self, id: EntryId) {
        if id.slice == 0 {
            return;
        }
        if let std::collections::hash_map::Entry::Occupied(mut e) = self.later.entry(id.hash()) {
            e.get_mut().0 -= 1;
            if e.get().0 == 0 {
                e.remove();
            }
        }
    }

    fn next_rand(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// The least recently used of [`SAMPLES`] random entries other than `keep`; among entries
    /// last used in the same second, the least often asked for (the clock counts whole seconds,
    /// so a burst would otherwise pick a popular entry as often as a one-hit one). With
    /// `newcomer` (the estimated requests of the object making room), entries asked for more
    /// often than it go last: admission compared it with the entries it sampled then, and an
    /// eviction sampling others must not take a popular one where a sampled one is not (a scan
    /// of one-hit objects flushed popular entries, as they were the least recently used).
    /// `skip`: positions already chosen (an admission's victims so far).
    fn sample_victim(
        &mut self,
        keep: Option<EntryId>,
        skip: &[usize],
        newcomer: Option<u8>,
    ) -> Option<usize> {
        let n = self.map.len();
        if n == 0 || (n == 1 && keep.is_some_and(|k| self.map.contains_key(&k))) {
            return None;
        }
        // (position, more popular than the newcomer, last use, estimated requests)
        let mut best: Option<(usize, bool, u32, u8)> = None;
        let tries = if n <= SAMPLES { n } else { SAMPLES };
        for i in 0..tries {
            // Small maps: look at every entry, so eviction is exact LRU there.
            let pos = if n <= SAMPLES {
                i
            } else {
                (self.next_rand() % n as u64) as usize
            };
            let (id, s) = self.map.get_index(pos).expect("in range");
            if Some(*id) == keep || skip.contains(&pos) {
                continue;
            }
            let freq = self.sketch.frequency(sketch_hash(id));
            let more = newcomer.is_some_and(|f| freq > f);
            if best.is_none_or(|(_, m, lu, f)| (more, s.last_use, freq) < (m, lu, f)) {
                best = Some((pos, more, s.last_use, freq));
            }
        }
        best.map(|(p, ..)| p)
    }

    /// Evict until the entries and the reservations fit `max_units`, never `keep` (the entry
    /// being inserted or reserved, whose estimated requests make entries asked for more often
    /// go last).
    fn evict_to_fit(&mut self, keep: Option<EntryId>) -> Vec<Victim> {
        let newcomer = keep.map(|k| self.sketch.frequency(sketch_hash(&k)));
        let mut out = Vec::new();
        while self.units + self.reserved > self.max_units {
            let Some(pos) = self.sample_victim(keep, &[], newcomer) else {
                break;
            };
            out.push(self.victim_at(pos, Reason::Size));
        }
        out
    }

    /// Take the entry at `pos` out (its size out of the total) as a victim for `reason`.
    fn victim_at(&mut self, pos: usize, reason: Reason) -> Victim {
        let (id, s) = self.map.swap_remove_index(pos).expect("in range");
        self.dropped(id);
        self.units -= s.units as u64;
        Victim {
            id,
            bytes: s.units as u64 * UNIT,
            reason,
            stamp: s.stamp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::key::CacheKey;

    const MIB: u64 = 1 << 20;

    fn id(i: u32) -> EntryId {
        CacheKey::new(format!("/o/{i}").into_bytes()).slice(0)
    }

    fn idx(max: u64) -> Index {
        let ix = Index::new(max, Duration::from_secs(600), 1, 1000);
        ix.mark_rebuilt();
        ix
    }

    #[test]
    fn eviction_keeps_size_under_max_and_prefers_least_recent() {
        let ix = idx(100 * MIB);
        let mut evicted = Vec::new();
        for i in 0..300 {
            // Keep object 0 in use.
            assert_eq!(
                ix.lookup(id(0), i),
                if i == 0 { Presence::No } else { Presence::Yes }
            );
            evicted.extend(ix.insert(id(i), MIB, Stamp::UNKNOWN, i));
            assert!(ix.size_bytes() <= 100 * MIB, "{} at {i}", ix.size_bytes());
        }
        assert_eq!(ix.entries(), 100);
        assert_eq!(evicted.len(), 200);
        assert!(evicted
            .iter()
            .all(|v| v.reason == Reason::Size && v.bytes == MIB));
        assert!(
            !evicted.iter().any(|v| v.id == id(0)),
            "the entry in use was evicted"
        );
        // Sampled LRU: most of the survivors are recent ones.
        let recent = (200..300)
            .filter(|&i| ix.lookup(id(i), 999) == Presence::Yes)
            .count();
        assert!(recent >= 70, "only {recent} of the 100 newest survived");
    }

    /// After a restart with a lower `max_size`, an entry found larger than the whole limit is
    /// the victim itself, not the entries that fit.
    #[test]
    fn a_found_entry_larger_than_the_limit_is_its_own_victim() {
        let ix = Index::new(50 * MIB, Duration::from_secs(600), 1, 1000);
        assert!(ix
            .insert_found(id(1), 20 * MIB, Stamp::UNKNOWN, 0)
            .is_empty());
        let v = ix.insert_found(id(2), 100 * MIB, Stamp::UNKNOWN, 0);
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].id, v[0].bytes, v[0].reason),
            (id(2), 100 * MIB, Reason::Size)
        );
        assert_eq!((ix.entries(), ix.size_bytes()), (1, 20 * MIB));
        assert_eq!(ix.lookup(id(1), 1), Presence::Yes);
    }

    /// Without `max_size` the limit is computed from the free space, which leaves out what the
    /// cache already holds: entries found after a restart raise it (a nearly full cache was
    /// evicted down to a tenth of itself), entries stored since do not, nor do finds once rebuilt.
    #[test]
    fn found_entries_raise_a_limit_computed_from_free_space() {
        let ix = Index::new(10 * MIB, Duration::from_secs(600), 1, 1000);
        ix.found_raises_limit();
        for i in 0..90 {
            assert!(
                ix.insert_found(id(i), MIB, Stamp::UNKNOWN, 0).is_empty(),
                "found entry {i} evicted"
            );
        }
        assert_eq!((ix.entries(), ix.max_bytes()), (90, 100 * MIB));
        // Found twice (by path, then by the walk): counted once.
        assert!(ix.insert_found(id(5), MIB, Stamp::UNKNOWN, 0).is_empty());
        assert_eq!(ix.max_bytes(), 100 * MIB);
        // A fill's new entry takes free space: the limit stays, eviction makes room.
        assert_eq!(ix.insert(id(1000), 20 * MIB, Stamp::UNKNOWN, 1).len(), 10);
        ix.mark_rebuilt();
        ix.insert_found(id(2000), MIB, Stamp::UNKNOWN, 2);
        assert_eq!(ix.max_bytes(), 100 * MIB);
        // With a configured max_size, found entries are bounded by it.
        let fixed = Index::new(10 * MIB, Duration::from_secs(600), 1, 1000);
        let evicted: usize = (0..20)
            .map(|i| fixed.insert_found(id(i), MIB, Stamp::UNKNOWN, 0).len())
            .sum();
        assert_eq!((fixed.entries(), evicted), (10, 10));
    }

    /// `min_uses = 2` with more small objects than the sketch was sized for: every object asked
    /// for twice is stored (growing the sketch used to forget the counts of those not stored
    /// yet, and they needed two more requests).
    #[test]
    fn growing_the_index_keeps_admission_counts() {
        let ix = Index::new(1 << 30, Duration::from_secs(600), 2, 1024);
        ix.mark_rebuilt();
        // (After one request some may be admitted already: the sketch's estimates may be
        // above the true count when more keys than columns share counters, never below.)
        for _pass in 0..2 {
            for i in 0..1300 {
                ix.record_request(id(i));
                if ix.lookup(id(i), 0) == Presence::No && ix.admit(id(i), 1000) {
                    ix.insert(id(i), 1000, Stamp::UNKNOWN, 0);
                }
            }
        }
        assert_eq!(ix.entries(), 1300);
    }

    /// Entries being written count against the limit: reserving evicts stored entries to make
    /// room, an admission that would not fit beside the reservations is refused, and a
    /// reservation ends with its entry (counted once) or without one.
    #[test]
    fn entries_being_written_count_against_the_limit() {
        let ix = idx(10 * MIB);
        for i in 0..8 {
            assert!(ix.insert(id(i), MIB, Stamp::UNKNOWN, i).is_empty());
        }
        for i in 100..105 {
            ix.record_request(id(i));
        }
        // Three fills at once: the oldest stored entry goes for the third.
        for i in 100..102 {
            assert_eq!(ix.admit_and_reserve(id(i), MIB).map(|v| v.len()), Some(0));
        }
        let v = ix.admit_and_reserve(id(102), MIB).expect("admitted");
        assert_eq!(v.iter().map(|v| v.id).collect::<Vec<_>>(), vec![id(0)]);
        assert_eq!((ix.size_bytes(), ix.reserved_bytes()), (7 * MIB, 3 * MIB));
        // Committed under its reservation: counted once.
        assert!(ix
            .insert_reserved(id(100), MIB, MIB, Stamp::UNKNOWN, 9)
            .is_empty());
        assert_eq!((ix.size_bytes(), ix.reserved_bytes()), (8 * MIB, 2 * MIB));
        ix.release(MIB);
        assert_eq!((ix.size_bytes(), ix.reserved_bytes()), (8 * MIB, MIB));
        // Fills that alone would fill the cache: the next is not stored.
        let v = ix.admit_and_reserve(id(103), 9 * MIB).expect("admitted");
        assert_eq!(v.len(), 8);
        assert_eq!((ix.size_bytes(), ix.reserved_bytes()), (0, 10 * MIB));
        assert!(
            ix.admit_and_reserve(id(104), MIB).is_none(),
            "admitted past the fills being written"
        );
        assert_eq!(ix.reserved_bytes(), 10 * MIB);
        ix.release(9 * MIB);
        assert!(ix.admit(id(104), MIB));
        assert!(ix.size_bytes() + ix.reserved_bytes() <= 10 * MIB);
    }

    /// The entries evicted for a reservation are those its admission compared it with: an
    /// entry asked for more often than the newcomer stays, however old.
    #[test]
    fn a_reservation_evicts_only_entries_no_more_popular_than_the_newcomer() {
        let ix = idx(20 * MIB);
        for round in 0..200 {
            ix.clear();
            // Two popular old entries among eighteen newer ones asked for once.
            for i in 0..20 {
                let e = id(round * 100 + i);
                for _ in 0..if i < 2 { 6 } else { 1 } {
                    ix.record_request(e);
                }
                ix.insert(e, MIB, Stamp::UNKNOWN, if i < 2 { 0 } else { 5 });
            }
            let newcomer = id(round * 100 + 50);
            ix.record_request(newcomer);
            ix.record_request(newcomer);
            if let Some(v) = ix.admit_and_reserve(newcomer, 3 * MIB) {
                for victim in v {
                    assert!(
                        victim.id != id(round * 100) && victim.id != id(round * 100 + 1),
                        "round {round}: a popular entry went"
                    );
                }
            }
            ix.release(3 * MIB);
        }
    }

    /// A full disk lowers the limit to a tenth below what is stored, the entries being written
    /// left out (they fail on the same disk): a tenth goes, not every entry, and the limit is
    /// not raised by what is being written.
    #[test]
    fn a_full_disk_lowers_the_limit_below_what_is_stored() {
        let ix = idx(100 * MIB);
        for i in 0..10 {
            ix.insert(id(i), MIB, Stamp::UNKNOWN, i);
        }
        for i in 100..130 {
            ix.record_request(id(i));
            assert!(ix.admit_and_reserve(id(i), MIB).is_some());
        }
        let v = ix.lower_max_below_stored();
        assert_eq!(v.len(), 1);
        assert_eq!(ix.max_bytes(), 9 * MIB);
        assert_eq!((ix.size_bytes(), ix.entries()), (9 * MIB, 9));
    }

    #[test]
    fn sizes_are_accounted_and_replaced() {
        let ix = idx(10 * MIB);
        ix.insert(id(1), 1, Stamp::UNKNOWN, 0);
        assert_eq!(ix.size_bytes(), UNIT);
        ix.insert(id(1), 3 * MIB, Stamp::UNKNOWN, 0);
        assert_eq!(ix.size_bytes(), 3 * MIB);
        assert_eq!(ix.remove(id(1)), Some(3 * MIB));
        assert_eq!(ix.size_bytes(), 0);
        assert_eq!(ix.remove(id(1)), None);
        // Lowering the limit evicts.
        for i in 0..10 {
            ix.insert(id(i), MIB, Stamp::UNKNOWN, i);
        }
        let v = ix.set_max_bytes(4 * MIB);
        assert_eq!(v.len(), 6);
        assert_eq!(ix.size_bytes(), 4 * MIB);
    }

    #[test]
    fn inactive_entries_are_dropped() {
        let ix = Index::new(1 << 40, Duration::from_secs(60), 1, 100);
        for i in 0..50 {
            ix.insert(id(i), MIB, Stamp::UNKNOWN, 0);
        }
        for i in 0..10 {
            assert_eq!(ix.lookup(id(i), 50), Presence::Yes);
        }
        assert!(ix.expire_inactive(59, 1000).is_empty());
        // Exactly `inactive` whole seconds later may be less than that really: kept.
        for i in 10..50 {
            assert_eq!(ix.lookup(id(i), 0), Presence::Yes);
        }
        assert!(ix.expire_inactive(60, 1000).is_empty());
        // A sweep in small steps covers everything.
        let mut gone = Vec::new();
        for _ in 0..20 {
            gone.extend(ix.expire_inactive(100, 7));
        }
        assert_eq!(gone.len(), 40);
        assert!(gone.iter().all(|v| v.reason == Reason::Inactive));
        assert_eq!(ix.entries(), 10);
        assert_eq!(ix.size_bytes(), 10 * MIB);
        for i in 0..10 {
            assert_eq!(ix.lookup(id(i), 100), Presence::Yes);
        }
    }

    #[test]
    fn admission_keeps_popular_objects_against_a_scan_of_one_hit_objects() {
        let ix = idx(50 * MIB);
        // 50 popular objects, each asked for several times.
        for round in 0..5 {
            for i in 0..50 {
                ix.record_request(id(i));
                if round == 0 {
                    assert!(ix.admit(id(i), MIB));
                    assert!(ix.insert(id(i), MIB, Stamp::UNKNOWN, 0).is_empty());
                }
            }
        }
        // A scan of 1000 one-hit objects: none is admitted once the cache is full.
        let mut admitted = 0;
        for i in 1000..2000 {
            ix.record_request(id(i));
            if ix.admit(id(i), MIB) {
                admitted += 1;
                ix.insert(id(i), MIB, Stamp::UNKNOWN, 1);
            }
        }
        assert!(admitted <= 20, "{admitted} one-hit objects admitted");
        let kept = (0..50)
            .filter(|&i| ix.lookup(id(i), 2) == Presence::Yes)
            .count();
        assert!(kept >= 40, "only {kept} of 50 popular objects kept");
    }

    #[test]
    fn entries_used_in_the_same_second_go_least_popular_first() {
        // A full cache of 8 entries (exact LRU: every entry is looked at), all last used in
        // second 0: four popular ones stored first, then four asked for once.
        let ix = idx(8 * MIB);
        for i in 0..8 {
            let asks = if i < 4 { 6 } else { 1 };
            for _ in 0..asks {
                ix.record_request(id(i));
            }
            assert!(ix.admit(id(i), MIB));
            assert!(ix.insert(id(i), MIB, Stamp::UNKNOWN, 0).is_empty());
        }
        // A new object asked for once ties with the one-hit entries, not the popular ones: it
        // is admitted, and what makes room for it is a one-hit entry.
        ix.record_request(id(100));
        assert!(
            ix.admit(id(100), MIB),
            "refused in favour of a popular entry"
        );
        let evicted = ix.insert(id(100), MIB, Stamp::UNKNOWN, 0);
        assert_eq!(evicted.len(), 1);
        assert!(
            (4..8).map(id).any(|i| i == evicted[0].id),
            "a popular entry was evicted before the one-hit ones"
        );
        // Recency still comes first: a popular entry unused for longer goes before newer
        // one-hit ones.
        for i in (1..8).chain([100]) {
            ix.lookup(id(i), 5);
        }
        let evicted = ix.insert(id(101), MIB, Stamp::UNKNOWN, 5);
        assert_eq!(evicted.len(), 1);
        assert!(
            evicted[0].id == id(0),
            "the least recently used entry stayed"
        );
    }

    /// Room for a new entry made by more than one victim: it is compared with each. A small
    /// one-hit victim came first, and the new one-hit object was admitted on its account; the
    /// popular entry that had to go too was evicted without being compared with it.
    #[test]
    fn admission_compares_every_entry_that_would_go() {
        // 100 units: three popular entries of 26 and a one-hit entry of 1.
        let ix = idx(100 * UNIT);
        let store = |ix: &Index, i: u32, u: u64, asks: usize, at: u32| {
            for _ in 0..asks {
                ix.record_request(id(i));
            }
            assert!(ix.admit(id(i), u * UNIT));
            assert!(ix.insert(id(i), u * UNIT, Stamp::UNKNOWN, at).is_empty());
        };
        store(&ix, 0, 26, 6, 0);
        store(&ix, 1, 26, 6, 0);
        store(&ix, 2, 1, 1, 0);
        store(&ix, 3, 26, 6, 1);
        // The one-hit entry frees too little; the next victim is popular: refused.
        ix.record_request(id(4));
        assert!(!ix.admit(id(4), 26 * UNIT), "admitted over a popular entry");
        // One asked for as often as the popular entries is admitted.
        for _ in 0..5 {
            ix.record_request(id(4));
        }
        assert!(ix.admit(id(4), 26 * UNIT));
    }

    /// An eviction makes room from the entries asked for no more often than the newcomer, even
    /// when popular entries are the least recently used (a scan of one-hit objects after a
    /// burst of popular ones evicted the popular ones, being older).
    #[test]
    fn a_one_hit_newcomer_evicts_one_hit_entries_before_older_popular_ones() {
        let ix = idx(100 * UNIT);
        for (i, u, asks, at) in [(0, 26, 6, 0), (1, 26, 6, 0), (2, 1, 1, 1), (3, 26, 1, 2)] {
            for _ in 0..asks {
                ix.record_request(id(i));
            }
            assert!(ix.admit(id(i), u * UNIT));
            assert!(ix.insert(id(i), u * UNIT, Stamp::UNKNOWN, at).is_empty());
        }
        ix.record_request(id(4));
        assert!(ix.admit(id(4), 26 * UNIT));
        let mut gone: Vec<_> = ix
            .insert(id(4), 26 * UNIT, Stamp::UNKNOWN, 3)
            .iter()
            .map(|v| v.id)
            .collect();
        gone.sort_by_key(|g| (0..4).position(|i| id(i) == *g));
        assert_eq!(gone, vec![id(2), id(3)], "a popular entry went");
    }

    /// A full cache of small entries, 667 of them popular (17 requests each), then a scan of
    /// 8,667 objects asked for once (a tester's run, per volume): the popular entries stay.
    /// A sketch of 1,024 columns grown by tiling carried its collisions along: scan objects
    /// were estimated as popular as the entries whose counters they shared, and 16% of the
    /// popular ones went.
    #[test]
    fn a_scan_after_the_index_grew_does_not_flush_popular_entries() {
        let ix = Index::new(64 * MIB, Duration::from_secs(3600), 1, 64);
        ix.mark_rebuilt();
        let size = 16 * 1024;
        let offer = |i: u32, at: u32| {
            ix.record_request(id(i));
            if ix.lookup(id(i), at) == Presence::No && ix.admit(id(i), size) {
                ix.insert(id(i), size, Stamp::UNKNOWN, at);
            }
        };
        for round in 0..17 {
            for i in 0..667 {
                offer(i, round);
            }
        }
        for i in 100_000..108_667 {
            offer(i, 20 + (i - 100_000) / 1000);
        }
        let kept = (0..667)
            .filter(|&i| ix.lookup(id(i), 30) == Presence::Yes)
            .count();
        assert!(kept >= 660, "{kept} of 667 popular entries kept");
    }

    /// `min_uses = 2` in an index that grew to 5,000 entries: objects asked for once are not
    /// stored (16-28% were, estimated at 2 by counters shared with stored objects in a sketch of
    /// 1-2 columns per entry).
    #[test]
    fn min_uses_holds_after_the_index_grew() {
        let ix = Index::new(1 << 40, Duration::from_secs(3600), 2, 64);
        ix.mark_rebuilt();
        for _ in 0..2 {
            for i in 0..5000 {
                ix.record_request(id(i));
                if ix.lookup(id(i), 0) == Presence::No && ix.admit(id(i), 1000) {
                    ix.insert(id(i), 1000, Stamp::UNKNOWN, 0);
                }
            }
        }
        assert_eq!(ix.entries(), 5000);
        let mut stored = 0;
        for i in 100_000..105_000 {
            ix.record_request(id(i));
            if ix.admit(id(i), 1000) {
                stored += 1;
            }
        }
        assert!(
            stored <= 100,
            "{stored} of 5000 objects asked for once admitted"
        );
    }

    #[test]
    fn min_uses_delays_admission() {
        let ix = Index::new(1 << 40, Duration::from_secs(60), 3, 100);
        for n in 1..=3 {
            ix.record_request(id(5));
            assert_eq!(ix.admit(id(5), MIB), n >= 3, "after {n} requests");
        }
    }

    #[test]
    fn presence_is_maybe_until_rebuilt() {
        let ix = Index::new(1 << 40, Duration::from_secs(60), 1, 100);
        assert_eq!(ix.lookup(id(1), 0), Presence::Maybe);
        ix.insert(id(2), 1, Stamp::UNKNOWN, 0);
        assert_eq!(ix.lookup(id(2), 0), Presence::Yes);
        assert!(ix
            .insert_found(id(2), 5 * MIB, Stamp::UNKNOWN, 0)
            .is_empty());
        assert_eq!(ix.size_bytes(), UNIT, "insert_found replaced a live entry");
        ix.mark_rebuilt();
        assert_eq!(ix.lookup(id(1), 0), Presence::No);
    }

    fn stamp(size: u64, mtime: i64) -> Stamp {
        Stamp::of(FileVersion {
            size,
            mtime,
            mtime_nsec: 0,
        })
    }

    /// An entry keeps its file's stamp; only the file it was recorded from is forgotten by
    /// `remove_if` (a newer file committed under the id stays).
    #[test]
    fn stamps_tell_files_apart() {
        let ix = idx(1 << 30);
        assert_ne!(stamp(MIB, 1), stamp(MIB, 2));
        assert_ne!(stamp(MIB, 1), stamp(MIB + 1, 1));
        assert!(stamp(0, 0).is_known());
        ix.insert(id(1), MIB, stamp(MIB, 1), 0);
        assert_eq!(ix.stamp(id(1)), Some(stamp(MIB, 1)));
        assert_eq!(ix.stamp(id(2)), None);
        ix.insert(id(1), MIB, stamp(MIB, 2), 0);
        assert_eq!(ix.remove_if(id(1), stamp(MIB, 1)), None);
        assert_eq!(ix.remove_if(id(1), Stamp::UNKNOWN), None);
        assert_eq!(ix.remove_if(id(1), stamp(MIB, 2)), Some(MIB));
        assert_eq!((ix.entries(), ix.size_bytes()), (0, 0));
        // Victims carry their stamp.
        let small = idx(MIB);
        small.insert(id(1), MIB, stamp(MIB, 7), 0);
        let v = small.insert(id(2), MIB, stamp(MIB, 8), 1);
        assert_eq!((v.len(), v[0].id, v[0].stamp), (1, id(1), stamp(MIB, 7)));
    }

    #[test]
    fn slices_of_an_object_are_listed() {
        let ix = idx(1 << 40);
        let k = CacheKey::new(b"/big".to_vec());
        for s in [0, 3, 9] {
            ix.insert(k.slice(s), MIB, Stamp::UNKNOWN, 0);
        }
        ix.insert(id(1), MIB, Stamp::UNKNOWN, 0);
        let slices = |ix: &Index| -> Vec<u32> {
            let mut s: Vec<u32> = ix.slices_of(k.hash()).iter().map(|i| i.slice).collect();
            s.sort();
            s
        };
        assert_eq!(slices(&ix), vec![0, 3, 9]);
        // Whichever way a slice leaves (removed, evicted, expired), it is not listed, and an
        // object with no later slice left keeps no count.
        ix.remove(k.slice(9));
        assert_eq!(slices(&ix), vec![0, 3]);
        ix.insert(k.slice(3), MIB, Stamp::UNKNOWN, 0);
        assert_eq!(ix.lock().later.get(&k.hash()), Some(&(1, 9)));
        assert_eq!(ix.expire_inactive(10_000, 100).len(), 3);
        assert_eq!(slices(&ix), Vec::<u32>::new());
        assert!(ix.lock().later.is_empty());
        let small = idx(2 * MIB);
        for s in [1, 2, 3] {
            small.insert(k.slice(s), MIB, Stamp::UNKNOWN, s);
        }
        let mut kept: Vec<u32> = small.slices_of(k.hash()).iter().map(|i| i.slice).collect();
        kept.sort();
        assert_eq!(kept, vec![2, 3]);
        assert_eq!(small.lock().later.get(&k.hash()), Some(&(2, 3)));
    }
}
