//! The open-file cache of one volume (nginx `open_file_cache` analogue): request path ->
//! an open descriptor plus its stat data, so hot files skip path resolution, open and stat.
//!
//! Bounded: at most `max_entries` entries (one descriptor and a few hundred bytes each), evicted
//! by the clock (second-chance) algorithm, in independently locked shards, and closed once
//! unused for [`INACTIVE`] (a deleted or renamed-over file keeps its disk space while a
//! descriptor holds it). An evicted descriptor closes when the last response using it finishes
//! (it is shared through an `Arc`).
//!
//! Staleness is the caller's to check with [`check`] (an fstat of the cached descriptor: no I/O
//! on a local filesystem) and by re-resolving the path once an entry is older than `valid`
//! ([`Lookup::Stale`]), comparing device and inode. This module does no path resolution and no
//! I/O except that fstat and `close`; it must not decide where anything runs.

use super::open::OpenedFile;
use std::collections::HashMap;
// foldhash, seeded per process: the key is the request path, hashed twice per lookup (shard,
// then map); SipHash cost about 300 instructions of a ~14,000-instruction request.
use foldhash::fast::RandomState;
use std::hash::BuildHasher;
use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What the cache knows about a path.
#[derive(Debug, Clone)]
pub enum Lookup {
    /// Path resolved less than `valid` ago: use the descriptor (after [`check`] where the mode allows).
    Fresh(OpenedFile),
    /// Resolved longer ago: re-resolve the path and compare with [`same_file`] before trusting it.
    Stale(OpenedFile),
    /// Not cached.
    Miss,
}

/// Result of an fstat of a cached descriptor.
#[derive(Debug, Clone)]
pub enum Check {
    /// Size and modification time as cached.
    Same,
    /// Same inode, modified in place: serve it with this stat data (and store it).
    Changed(OpenedFile),
    /// The inode has no name any more (deleted, or replaced by a rename): do not serve it.
    Unlinked,
}

/// fstat the cached descriptor and compare with its cached stat data.
pub fn check(file: &OpenedFile) -> io::Result<Check> {
    let st = rustix::fs::fstat(&*file.fd)?;
    if st.st_nlink == 0 {
        return Ok(Check::Unlinked);
    }
    let (size, mtime, mtime_nsec) = (
        st.st_size as u64,
        st.st_mtime as i64,
        st.st_mtime_nsec as i64,
    );
    if size == file.size && mtime == file.mtime && mtime_nsec == file.mtime_nsec {
        Ok(Check::Same)
    } else {
        let mut changed = file.clone();
        changed.size = size;
        changed.mtime = mtime;
        changed.mtime_nsec = mtime_nsec;
        Ok(Check::Changed(changed))
    }
}

/// True when `fresh` (just opened by path) is the same inode as `cached`.
pub fn same_file(cached: &OpenedFile, fresh: &OpenedFile) -> bool {
    cached.ino == fresh.ino && cached.dev == fresh.dev
}

/// Entries unused this long are closed (nginx `open_file_cache ... inactive=`, whose default
/// this is). A shard looks for them at most every quarter of it, when it is used (as nginx, a
/// volume nobody asks anything keeps its entries).
pub const INACTIVE: Duration = Duration::from_secs(60);

struct Slot {
    key: Box<[u8]>,
    file: OpenedFile,
    resolved_at: Instant,
    used_at: Instant,
    referenced: bool,
}

struct Shard {
    map: HashMap<Box<[u8]>, usize, RandomState>,
    slots: Vec<Slot>,
    cap: usize,
    hand: usize,
    swept_at: Instant,
}

impl Shard {
    /// Take out the entries unused for [`INACTIVE`] at `now` (at most once per quarter of
    /// it); the caller drops them, closing their descriptors, after unlocking.
    fn expire(&mut self, now: Instant) -> Vec<Slot> {
        if now.saturating_duration_since(self.swept_at) < INACTIVE / 4 {
            return Vec::new();
        }
        self.swept_at = now;
        let mut gone = Vec::new();
        let mut i = 0;
        while i < self.slots.len() {
            if now.saturating_duration_since(self.slots[i].used_at) < INACTIVE {
                i += 1;
                continue;
            }
            let slot = self.slots.swap_remove(i);
            self.map.remove(&slot.key);
            if let Some(moved) = self.slots.get(i) {
                self.map.insert(moved.key.clone(), i);
            }
            gone.push(slot);
        }
        if self.hand >= self.slots.len() {
            self.hand = 0;
        }
        gone
    }

    /// Index of a slot for a new entry: a free one, or the clock's victim (evicted here).
    fn victim(&mut self) -> usize {
        if self.slots.len() < self.cap {
            return self.slots.len();
        }
        loop {
            let i = self.hand;
            self.hand = (self.hand + 1) % self.slots.len();
            if self.slots[i].referenced {
                self.slots[i].referenced = false;
            } else {
                self.map.remove(&self.slots[i].key);
                return i;
            }
        }
    }
}

/// A bounded cache of open files for one volume.
pub struct OpenFileCache {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    valid: Duration,
}

const MAX_SHARDS: usize = 16;

impl OpenFileCache {
    /// A cache of at most `max_entries` files whose path is re-resolved after `valid`.
    /// `max_entries == 0` gives a cache that stores nothing.
    pub fn new(max_entries: usize, valid: Duration) -> OpenFileCache {
        // Small caches get one shard (so they hold exactly max_entries); large ones up to 16
        // shards of at least 64 entries, so the event-loop threads rarely meet on a lock.
        let n = (max_entries / 64).clamp(1, MAX_SHARDS);
        let shards = (0..n)
            .map(|i| {
                // Spread max_entries exactly over the shards (0 everywhere when disabled).
                let cap = max_entries / n + usize::from(i < max_entries % n);
                Mutex::new(Shard {
                    map: HashMap::with_capacity_and_hasher(cap.min(1024), RandomState::default()),
                    slots: Vec::with_capacity(cap.min(1024)),
                    cap,
                    hand: 0,
                    swept_at: Instant::now(),
                })
            })
            .collect();
        OpenFileCache {
            shards,
            hasher: RandomState::default(),
            valid,
        }
    }

    /// The most entries held at once.
    pub fn capacity(&self) -> usize {
        self.shards.iter().map(|s| lock(s).cap).sum()
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).slots.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, key: &[u8]) -> &Mutex<Shard> {
        let h = self.hasher.hash_one(key) as usize;
        &self.shards[h % self.shards.len()]
    }

    /// Look `key` (the request's relative path) up at time `now`.
    pub fn get(&self, key: &[u8], now: Instant) -> Lookup {
        let _expired: Vec<Slot>; // closed after the lock is released
        let mut s = lock(self.shard(key));
        _expired = s.expire(now);
        let Some(&i) = s.map.get(key) else {
            return Lookup::Miss;
        };
        let slot = &mut s.slots[i];
        slot.referenced = true;
        slot.used_at = now;
        if now.saturating_duration_since(slot.resolved_at) < self.valid {
            Lookup::Fresh(slot.file.clone())
        } else {
            Lookup::Stale(slot.file.clone())
        }
    }

    /// Store `file` as what `key` resolved to at `now` (replacing any entry; the old descriptor
    /// closes when its last user drops it).
    pub fn insert(&self, key: &[u8], file: OpenedFile, now: Instant) {
        // The replaced or evicted entry is dropped (its descriptor maybe closed) after unlocking.
        let _old: Option<OpenedFile>;
        let _expired: Vec<Slot>;
        let mut s = lock(self.shard(key));
        if s.cap == 0 {
            return;
        }
        _expired = s.expire(now);
        if let Some(&i) = s.map.get(key) {
            let slot = &mut s.slots[i];
            _old = Some(std::mem::replace(&mut slot.file, file));
            slot.resolved_at = now;
            slot.used_at = now;
            return;
        }
        let i = s.victim();
        let slot = Slot {
            key: key.into(),
            file,
            resolved_at: now,
            used_at: now,
            referenced: false,
        };
        if i == s.slots.len() {
            s.slots.push(slot);
            _old = None;
        } else {
            _old = Some(std::mem::replace(&mut s.slots[i], slot).file);
        }
        s.map.insert(key.into(), i);
    }

    /// The path was re-resolved at `now` to the same inode as cached: keep the cached descriptor
    /// with `file`'s (current) stat data and restart the validity window.
    pub fn revalidated(&self, key: &[u8], file: &OpenedFile, now: Instant) {
        self.set_stat(key, file, Some(now));
    }

    /// Store new stat data for the cached inode (it was modified in place); the window is kept.
    pub fn update_stat(&self, key: &[u8], file: &OpenedFile) {
        self.set_stat(key, file, None);
    }

    /// Copy `file`'s stat data into the entry for `key` if it holds the same inode, and restart
    /// its window at `resolved_at` when given.
    fn set_stat(&self, key: &[u8], file: &OpenedFile, resolved_at: Option<Instant>) {
        let mut s = lock(self.shard(key));
        if let Some(&i) = s.map.get(key) {
            let slot = &mut s.slots[i];
            if same_file(&slot.file, file) {
                slot.file.size = file.size;
                slot.file.mtime = file.mtime;
                slot.file.mtime_nsec = file.mtime_nsec;
                if let Some(now) = resolved_at {
                    slot.resolved_at = now;
                }
            }
        }
    }

    /// Drop the entry for `key` if it still holds `file`'s inode.
    pub fn remove(&self, key: &[u8], file: &OpenedFile) {
        let _removed: Slot; // dropped after the lock is released
        let mut s = lock(self.shard(key));
        let Some(&i) = s.map.get(key) else {
            return;
        };
        if !same_file(&s.slots[i].file, file) {
            return;
        }
        s.map.remove(key);
        let last = s.slots.len() - 1;
        _removed = s.slots.swap_remove(i);
        if i != last {
            let moved = s.slots[i].key.clone();
            s.map.insert(moved, i);
        }
        if s.hand >= s.slots.len() {
            s.hand = 0;
        }
    }
}

/// Lock a shard; a panic while holding it cannot leave a shard inconsistent in a way that
/// matters (worst case one stale slot), so poisoning is ignored.
fn lock(m: &Mutex<Shard>) -> std::sync::MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::test_support::disk_tempdir;
    use std::fs::File;
    use std::io::Write;
    use std::os::fd::OwnedFd;
    use std::sync::Arc;

    fn opened(path: &std::path::Path) -> OpenedFile {
        let f = File::open(path).unwrap();
        let st = rustix::fs::fstat(&f).unwrap();
        OpenedFile {
            fd: Arc::new(OwnedFd::from(f)),
            size: st.st_size as u64,
            mtime: st.st_mtime as i64,
            mtime_nsec: st.st_mtime_nsec as i64,
            ino: st.st_ino as u64,
            dev: st.st_dev as u64,
            via_index: None,
        }
    }

    /// A fresh directory holding one file `name` with `content`; the file's path.
    fn one_file(name: &str, content: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = disk_tempdir();
        let p = write(&dir, name, content);
        (dir, p)
    }

    /// Write `content` to `dir/name`; its path.
    fn write(dir: &tempfile::TempDir, name: &str, content: &[u8]) -> std::path::PathBuf {
        let p = dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    fn key(i: usize) -> Vec<u8> {
        format!("dir/file-{i}").into_bytes()
    }

    /// An entry unused for INACTIVE is closed at the next use of its shard (a deleted file's
    /// space comes back); one in use stays.
    #[test]
    fn entries_unused_for_a_minute_are_closed() {
        let dir = disk_tempdir();
        let (a, b) = (write(&dir, "a", b"a"), write(&dir, "b", b"b"));
        // One shard: every key meets the same sweep.
        let c = OpenFileCache::new(8, Duration::from_secs(1));
        let t0 = Instant::now();
        c.insert(b"a", opened(&a), t0);
        c.insert(b"b", opened(&b), t0);
        let held = Arc::downgrade(&opened_fd(&c, b"a", t0));
        std::fs::remove_file(&a).unwrap();
        // `b` is used every 20 s, `a` never again.
        for k in 1..=3 {
            assert!(!matches!(
                c.get(b"b", t0 + Duration::from_secs(20 * k)),
                Lookup::Miss
            ));
        }
        assert!(matches!(c.get(b"a", t0 + INACTIVE), Lookup::Miss));
        assert_eq!(c.len(), 1);
        assert!(
            held.upgrade().is_none(),
            "the deleted file's descriptor is still open"
        );
        assert!(!matches!(
            c.get(b"b", t0 + INACTIVE + Duration::from_secs(1)),
            Lookup::Miss
        ));
    }

    fn opened_fd(c: &OpenFileCache, key: &[u8], now: Instant) -> Arc<OwnedFd> {
        match c.get(key, now) {
            Lookup::Fresh(f) | Lookup::Stale(f) => f.fd.clone(),
            Lookup::Miss => panic!("not cached"),
        }
    }

    #[test]
    fn hit_fresh_then_stale_after_the_window() {
        let (_dir, p) = one_file("a", b"abc");
        let c = OpenFileCache::new(8, Duration::from_millis(100));
        let t0 = Instant::now();
        assert!(matches!(c.get(b"a", t0), Lookup::Miss));
        c.insert(b"a", opened(&p), t0);
        match c.get(b"a", t0 + Duration::from_millis(50)) {
            Lookup::Fresh(f) => assert_eq!(f.size, 3),
            other => panic!("{other:?}"),
        }
        let f = match c.get(b"a", t0 + Duration::from_millis(150)) {
            Lookup::Stale(f) => f,
            other => panic!("{other:?}"),
        };
        c.revalidated(b"a", &f, t0 + Duration::from_millis(150));
        assert!(matches!(
            c.get(b"a", t0 + Duration::from_millis(200)),
            Lookup::Fresh(_)
        ));
    }

    #[test]
    fn bounded_by_max_entries_and_closes_evicted_descriptors() {
        let dir = disk_tempdir();
        let c = OpenFileCache::new(20, Duration::from_secs(60));
        let now = Instant::now();
        let mut weak = Vec::new();
        for i in 0..200 {
            let p = dir.path().join(format!("f{i}"));
            std::fs::write(&p, b"x").unwrap();
            let f = opened(&p);
            weak.push(Arc::downgrade(&f.fd));
            c.insert(&key(i), f, now);
            assert!(c.len() <= 20, "len {} after {i}", c.len());
        }
        assert_eq!(c.len(), 20);
        assert_eq!(c.capacity(), 20);
        // Exactly the cached entries still hold a descriptor; the rest were closed.
        assert_eq!(weak.iter().filter(|w| w.strong_count() > 0).count(), 20);
        let hits = (0..200)
            .filter(|&i| !matches!(c.get(&key(i), now), Lookup::Miss))
            .count();
        assert_eq!(hits, 20);
    }

    #[test]
    fn clock_keeps_referenced_entries() {
        let (_dir, p) = one_file("f", b"x");
        // Two entries, one shard: the clock order is deterministic.
        let c = OpenFileCache::new(2, Duration::from_secs(60));
        let now = Instant::now();
        c.insert(b"hot", opened(&p), now);
        c.insert(b"cold", opened(&p), now);
        assert!(matches!(c.get(b"hot", now), Lookup::Fresh(_)));
        c.insert(b"new", opened(&p), now);
        assert_eq!(c.len(), 2);
        // "hot" was used since it was inserted: it got a second chance, "cold" did not.
        assert!(matches!(c.get(b"hot", now), Lookup::Fresh(_)));
        assert!(matches!(c.get(b"new", now), Lookup::Fresh(_)));
        assert!(matches!(c.get(b"cold", now), Lookup::Miss));
    }

    #[test]
    fn disabled_cache_stores_nothing() {
        let (_dir, p) = one_file("f", b"x");
        let c = OpenFileCache::new(0, Duration::from_secs(60));
        c.insert(b"f", opened(&p), Instant::now());
        assert!(c.is_empty());
        assert!(matches!(c.get(b"f", Instant::now()), Lookup::Miss));
    }

    #[test]
    fn check_notices_in_place_modification_and_replacement() {
        let (dir, p) = one_file("f", b"first");
        let f = opened(&p);
        assert!(matches!(check(&f).unwrap(), Check::Same));
        // Modified in place (same inode, new size).
        let mut w = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        w.write_all(b" and more").unwrap();
        drop(w);
        match check(&f).unwrap() {
            Check::Changed(n) => {
                assert_eq!(n.size, 14);
                assert_eq!(n.ino, f.ino);
            }
            other => panic!("{other:?}"),
        }
        // Replaced by rename: the cached inode has no name left.
        let tmp = write(&dir, "f.new", b"second");
        std::fs::rename(&tmp, &p).unwrap();
        assert!(matches!(check(&f).unwrap(), Check::Unlinked));
        let fresh = opened(&p);
        assert!(!same_file(&f, &fresh));
    }

    #[test]
    fn remove_and_update_only_touch_the_same_inode() {
        let (dir, a) = one_file("a", b"aaaa");
        let b = write(&dir, "b", b"bb");
        let c = OpenFileCache::new(4, Duration::from_secs(60));
        let now = Instant::now();
        let fa = opened(&a);
        let fb = opened(&b);
        c.insert(b"k", fa.clone(), now);
        c.insert(b"other", fb.clone(), now);
        // A different inode neither updates nor removes the entry.
        c.update_stat(b"k", &fb);
        c.remove(b"k", &fb);
        match c.get(b"k", now) {
            Lookup::Fresh(f) => assert_eq!((f.ino, f.size), (fa.ino, 4)),
            other => panic!("{other:?}"),
        }
        let mut grown = fa.clone();
        grown.size = 10;
        c.update_stat(b"k", &grown);
        match c.get(b"k", now) {
            Lookup::Fresh(f) => assert_eq!(f.size, 10),
            other => panic!("{other:?}"),
        }
        c.remove(b"k", &fa);
        assert!(matches!(c.get(b"k", now), Lookup::Miss));
        // The swap-removed neighbour is still found.
        assert!(matches!(c.get(b"other", now), Lookup::Fresh(_)));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn concurrent_use_stays_bounded() {
        let (_dir, p) = one_file("f", b"x");
        let base = opened(&p);
        let c = Arc::new(OpenFileCache::new(50, Duration::from_secs(60)));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let c = c.clone();
                let base = base.clone();
                std::thread::spawn(move || {
                    let now = Instant::now();
                    for i in 0..2000 {
                        let k = key((i * 7 + t) % 300);
                        if let Lookup::Miss = c.get(&k, now) {
                            c.insert(&k, base.clone(), now);
                        }
                        if i % 5 == 0 {
                            c.remove(&k, &base);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(c.len() <= 50);
        for i in 0..300 {
            if let Lookup::Fresh(f) = c.get(&key(i), Instant::now()) {
                assert_eq!(f.ino, base.ino);
            }
        }
    }
}
