//! Memory cost of the cache index (issue 11: at most 200 bytes per cached object, map overhead
//! included). Inserts N entries (default 1,000,000) into one volume's `cache::index::Index`, as a
//! fill or the restart rebuild does, and reports the resident-set growth per entry. Run by
//! `bench/cache-index-memory.sh`; not a test (it measures).

use content_server::cache::index::{Index, Stamp};
use content_server::cache::key::CacheKey;
use content_server::fs::open::FileVersion;
use std::time::{Duration, Instant};

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    // Keys made first so their memory is not counted (the index stores only hashes).
    let ids: Vec<_> = (0..n)
        .map(|i| CacheKey::new(format!("/cold/{}/{}.bin", i % 256, i)).slice(i % 4))
        .collect();
    let before = rss_bytes();
    let t = Instant::now();
    // Sized from a max_size / slice_size estimate, as the server does.
    let ix = Index::new(u64::MAX / 2, Duration::from_secs(600), 1, n as usize);
    for (i, id) in ids.iter().enumerate() {
        ix.record_request(*id);
        let stamp = Stamp::of(FileVersion {
            size: 1 << 20,
            mtime: 1_700_000_000 + i as i64,
            mtime_nsec: 0,
        });
        let v = ix.insert(*id, 1 << 20, stamp, (i / 1000) as u32);
        assert!(v.is_empty());
    }
    let elapsed = t.elapsed();
    let after = rss_bytes();
    let grown = after.saturating_sub(before);
    println!(
        "entries={} rss_growth_bytes={} bytes_per_entry={:.1} heap_estimate_per_entry={:.1} insert_ns_per_entry={:.0}",
        ix.entries(),
        grown,
        grown as f64 / n as f64,
        ix.heap_bytes_estimate() as f64 / n as f64,
        elapsed.as_nanos() as f64 / n as f64
    );
}
