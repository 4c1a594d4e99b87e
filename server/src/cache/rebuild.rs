//! Rebuilding a volume's index after a restart: walk the cache directory's levels and insert
//! every entry file found (by name and length; headers are checked when an entry is opened).
//!
//! The walk is blocking work split into 16 steps (one per level-1 directory) so the caller can
//! run each as one task on the volume's pool while the node already serves: until the index is
//! marked rebuilt, a lookup that misses says [`super::index::Presence::Maybe`] and the caller
//! opens the key's path. It must not decide where it runs.

use super::index::{Index, Stamp, Victim};
use super::store::Store;
use std::io;

/// Level-1 directories (one hex digit).
pub const LEVELS: u8 = 16;

/// Insert the entries under level-1 directory `l1`; returns the victims of size eviction
/// (a cache larger than a lowered `max_size`) and how many entries were found.
pub fn rebuild_level(store: &Store, index: &Index, l1: u8) -> io::Result<(Vec<Victim>, usize)> {
    let now = index.now();
    let mut victims = Vec::new();
    let mut found = 0;
    store.walk_level(l1, &mut |id, v| {
        found += 1;
        victims.extend(index.insert_found(id, v.size, Stamp::of(v), now));
    })?;
    Ok((victims, found))
}

/// The whole rebuild in one call (tests, tools); the server runs [`rebuild_level`] per level on
/// the pool and then calls [`Index::mark_rebuilt`].
pub fn rebuild(store: &Store, index: &Index) -> io::Result<(Vec<Victim>, usize)> {
    let mut victims = Vec::new();
    let mut found = 0;
    for l1 in 0..LEVELS {
        let (v, n) = rebuild_level(store, index, l1)?;
        victims.extend(v);
        found += n;
    }
    index.mark_rebuilt();
    Ok((victims, found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::entry::sample_meta;
    use crate::cache::index::Presence;
    use crate::cache::key::CacheKey;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn rebuild_after_restart_finds_every_entry_and_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        let mut ids = Vec::new();
        {
            let (s, _) = Store::open(&path).unwrap();
            let s = Arc::new(s);
            for i in 0..200u32 {
                let key = format!("/o/{i}").into_bytes();
                let id = CacheKey::new(key.clone()).slice(i % 3);
                let mut t = s.create_temp(id, sample_meta(&key, i % 3, 5000)).unwrap();
                t.write(&[1u8; 5000]).unwrap();
                t.commit().unwrap();
                ids.push((id, key));
            }
        }
        let (s, _) = Store::open(&path).unwrap();
        let ix = Index::new(1 << 40, Duration::from_secs(600), 1, 256);
        // Before the rebuild: unknown, and the entry is found by opening its path.
        let (id0, key0) = &ids[0];
        assert_eq!(ix.lookup(*id0, 0), Presence::Maybe);
        assert!(s.open_entry(*id0, key0).is_ok());
        let (victims, found) = rebuild(&s, &ix).unwrap();
        assert!(victims.is_empty());
        assert_eq!(found, 200);
        assert_eq!(ix.entries(), 200);
        // 4 KiB header + 5000 bytes -> 3 units of 4 KiB each.
        assert_eq!(ix.size_bytes(), 200 * 3 * 4096);
        for (id, _) in &ids {
            assert_eq!(ix.lookup(*id, 1), Presence::Yes);
        }
        assert_eq!(
            ix.lookup(CacheKey::new(b"/never".to_vec()).slice(0), 1),
            Presence::No
        );
    }

    #[test]
    fn rebuild_into_a_smaller_cache_evicts() {
        let dir = tempfile::tempdir().unwrap();
        let (s, _) = Store::open(dir.path()).unwrap();
        let s = Arc::new(s);
        for i in 0..20u32 {
            let key = format!("/o/{i}").into_bytes();
            let id = CacheKey::new(key.clone()).slice(0);
            let mut t = s.create_temp(id, sample_meta(&key, 0, 4096)).unwrap();
            t.write(&[0u8; 4096]).unwrap();
            t.commit().unwrap();
        }
        let ix = Index::new(10 * 8192, Duration::from_secs(600), 1, 64);
        let (victims, found) = rebuild(&s, &ix).unwrap();
        assert_eq!(found, 20);
        assert_eq!(victims.len(), 10);
        assert!(ix.size_bytes() <= 10 * 8192);
    }
}
