//! Admission frequency sketch (TinyLFU): a count-min sketch of 4-bit counters, four rows, aged by
//! halving every counter after `10 × width` increments, so it estimates how often each object
//! was asked for recently in half a byte per counter (2 bytes per column), behind a doorkeeper:
//! a Bloom filter of 8 bits per column that takes an object's first request, so objects asked
//! for once (a scan) never reach the counters. Without it, a scan of distinct objects raised
//! every counter it shared, and an object never asked for was estimated at 2 or more
//! (`min_uses = 2` stored objects asked for once). The doorkeeper is cleared when it has taken
//! as many objects as it was sized for (8 bits each: its false positives stay
//! near 3%): the width, and at least [`DOOR_MIN`] (64 KiB), so a second request counts within
//! the last 65,536 objects asked for at least, however few are stored yet. The index keeps the
//! width at 4-8 columns per entry, so that an object never asked for rarely finds all four of
//! its counters shared (one in 400 at 4).
//!
//! The index asks it whether a new object is worth storing: a one-hit object does not evict an
//! object that is asked for more often. It must not know about files or keys beyond a 64-bit hash.

/// 4 rows × `width` 4-bit counters, 16 per `u64` word.
pub struct FrequencySketch {
    table: Vec<u64>,
    /// Counters per row minus one (width is a power of two).
    mask: u64,
    words_per_row: usize,
    additions: usize,
    sample: usize,
    /// The doorkeeper: 8 bits per object it is sized for, [`door_objects`] (a power of two, so
    /// growing can tile it).
    door: Vec<u64>,
    /// Objects the doorkeeper took since it was cleared.
    door_taken: usize,
}

/// Columns of a sketch, at least (24 KiB of counters and doorkeeper): an index that grows from
/// a narrow sketch keeps its collisions ([`FrequencySketch::grown`]), and at 1,024 columns the
/// 667 popular objects of a small volume shared all four counters with one object in twenty,
/// which then counted as popular.
pub const MIN_WIDTH: usize = 1 << 13;

/// Objects the doorkeeper is sized for, at least.
pub const DOOR_MIN: usize = 1 << 16;

/// Objects the doorkeeper of a sketch `width` columns wide takes before it is cleared.
fn door_objects(width: usize) -> usize {
    width.max(DOOR_MIN)
}

/// Bits set per object in the doorkeeper.
const DOOR_HASHES: u64 = 3;

const SEEDS: [u64; 4] = [
    0x9E37_79B9_7F4A_7C15,
    0xC2B2_AE3D_27D4_EB4F,
    0x1656_67B1_9E37_79F9,
    0x27D4_EB2F_1656_67C5,
];

impl FrequencySketch {
    /// A sketch sized for about `capacity` distinct objects (at least [`MIN_WIDTH`]).
    pub fn new(capacity: usize) -> FrequencySketch {
        let width = capacity.max(MIN_WIDTH).next_power_of_two();
        let words_per_row = width / 16;
        FrequencySketch {
            table: vec![0; 4 * words_per_row],
            mask: width as u64 - 1,
            words_per_row,
            additions: 0,
            sample: 10 * width,
            door: vec![0; door_objects(width) / 8],
            door_taken: 0,
        }
    }

    /// The doorkeeper's bits for `hash`: (word, bit mask) per hash.
    fn door_bits(&self, hash: u64) -> [(usize, u64); DOOR_HASHES as usize] {
        let bits = self.door.len() as u64 * 64;
        [0, 1, 2].map(|k| {
            let i = mix(hash ^ SEEDS[k as usize].rotate_left(17)) & (bits - 1);
            ((i / 64) as usize, 1u64 << (i % 64))
        })
    }

    fn door_has(&self, hash: u64) -> bool {
        self.door_bits(hash)
            .iter()
            .all(|&(w, b)| self.door[w] & b != 0)
    }

    /// Counters per row.
    pub fn width(&self) -> usize {
        self.mask as usize + 1
    }

    fn slot(&self, hash: u64, row: usize) -> (usize, u32) {
        // splitmix64's finalizer per row, so rows collide independently.
        let i = mix(hash.wrapping_add(SEEDS[row])) & self.mask;
        (
            row * self.words_per_row + (i / 16) as usize,
            ((i % 16) * 4) as u32,
        )
    }

    /// Count one request for `hash` (saturating at 15); ages the sketch when due. Conservative
    /// update: only the rows holding the current minimum are raised, which keeps estimates of
    /// rare keys close to their true counts when many keys share counters.
    pub fn increment(&mut self, hash: u64) {
        self.additions += 1;
        if self.additions >= self.sample {
            self.age();
        }
        if !self.door_has(hash) {
            // A first request (since the doorkeeper was cleared): the doorkeeper keeps it.
            if self.door_taken >= door_objects(self.width()) {
                self.door.fill(0);
                self.door_taken = 0;
            }
            for (w, b) in self.door_bits(hash) {
                self.door[w] |= b;
            }
            self.door_taken += 1;
            return;
        }
        let slots = [0, 1, 2, 3].map(|row| self.slot(hash, row));
        let count = |t: &[u64], (w, shift): (usize, u32)| (t[w] >> shift) & 0xF;
        let min = slots
            .iter()
            .map(|&s| count(&self.table, s))
            .min()
            .unwrap_or(0);
        if min >= 15 {
            return;
        }
        for s in slots {
            if count(&self.table, s) == min {
                self.table[s.0] += 1 << s.1;
            }
        }
    }

    /// Estimated recent requests for `hash` (0..=15): its counters, plus the request the
    /// doorkeeper holds. Possibly above the true count since the last aging when counters or
    /// doorkeeper bits are shared; one below it when the doorkeeper was cleared between its
    /// first and second request.
    pub fn frequency(&self, hash: u64) -> u8 {
        (self.counted(hash) + u8::from(self.door_has(hash))).min(15)
    }

    /// The counters' estimate for `hash` (the doorkeeper not included).
    fn counted(&self, hash: u64) -> u8 {
        (0..4)
            .map(|row| {
                let (w, shift) = self.slot(hash, row);
                ((self.table[w] >> shift) & 0xF) as u8
            })
            .min()
            .unwrap_or(0)
    }

    /// This sketch widened for about `capacity` objects, every estimate kept: a key's counter
    /// at column `i` of the wider row is the one it had at `i mod width` (columns are the low
    /// bits of the key's row hash, and widths are powers of two), so each row is tiled, and so
    /// is the doorkeeper. Growing the index must not forget who was asked for (a fresh sketch
    /// made objects asked for `min_uses` times wait for as many more). The narrow sketch's
    /// collisions are carried along too (until aging halves them): the index starts it wide
    /// enough for them to be rare ([`MIN_WIDTH`]).
    pub fn grown(&self, capacity: usize) -> FrequencySketch {
        let mut wider = FrequencySketch::new(capacity.max(self.width()));
        for row in 0..4 {
            let old = &self.table[row * self.words_per_row..(row + 1) * self.words_per_row];
            let new = &mut wider.table[row * wider.words_per_row..(row + 1) * wider.words_per_row];
            for (i, w) in new.iter_mut().enumerate() {
                *w = old[i % old.len()];
            }
        }
        for (i, w) in wider.door.iter_mut().enumerate() {
            *w = self.door[i % self.door.len()];
        }
        wider.door_taken = self.door_taken;
        wider.additions = self.additions;
        wider
    }

    /// Halve every counter (the TinyLFU reset), so old popularity fades. The doorkeeper is not
    /// cleared here (only when full): a small sketch ages often, and its objects' first
    /// requests would be forgotten every few thousand requests.
    pub fn age(&mut self) {
        for w in &mut self.table {
            *w = (*w >> 1) & 0x7777_7777_7777_7777;
        }
        self.additions /= 2;
    }

    /// Bytes of counters.
    pub fn bytes(&self) -> usize {
        (self.table.len() + self.door.len()) * 8
    }
}

/// splitmix64's finalizer: spreads a hash's bits (per row or doorkeeper hash, with a seed
/// added), so rows and bits collide independently.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_saturate_and_age() {
        let mut s = FrequencySketch::new(1024);
        assert_eq!(s.frequency(42), 0);
        for _ in 0..5 {
            s.increment(42);
        }
        assert_eq!(s.frequency(42), 5);
        for _ in 0..40 {
            s.increment(42);
        }
        assert_eq!(s.frequency(42), 15);
        s.age();
        // 7 counted, and the first request the doorkeeper holds.
        assert_eq!(s.frequency(42), 8);
    }

    #[test]
    fn growing_keeps_every_estimate() {
        let key = |k: u64| k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut s = FrequencySketch::new(MIN_WIDTH);
        for k in 0..20_000u64 {
            for _ in 0..(k % 5) {
                s.increment(key(k));
            }
        }
        let g = s.grown(4 * MIN_WIDTH);
        assert_eq!(g.width(), 4 * MIN_WIDTH);
        for k in 0..20_000u64 {
            assert_eq!(g.frequency(key(k)), s.frequency(key(k)), "key {k}");
        }
    }

    #[test]
    fn popular_keys_stay_above_one_hit_keys() {
        let mut s = FrequencySketch::new(4096);
        for round in 0..8u64 {
            for k in 0..100u64 {
                s.increment(k.wrapping_mul(0x9E37_79B9));
            }
            // A scan of one-hit keys between rounds.
            for k in 0..2000u64 {
                s.increment(1_000_000 + round * 10_000 + k);
            }
        }
        let popular = (0..100u64)
            .filter(|k| s.frequency(k.wrapping_mul(0x9E37_79B9)) >= 4)
            .count();
        let one_hit = (0..2000u64)
            .filter(|k| s.frequency(1_000_000 + 7 * 10_000 + k) >= 4)
            .count();
        assert!(popular >= 95, "popular keys estimated >= 4: {popular}/100");
        assert!(one_hit <= 40, "one-hit keys estimated >= 4: {one_hit}/2000");
    }

    /// A scan of distinct objects, each asked for once, as many as the counters' columns:
    /// they are estimated at 1 (the doorkeeper), not more; objects never asked for at 0.
    /// Without the doorkeeper the scan raised the counters it shared and many objects asked for
    /// once were estimated at 2 or more.
    #[test]
    fn a_scan_of_one_hit_objects_is_estimated_at_one() {
        let mut s = FrequencySketch::new(1024);
        let key = |k: u64| k.wrapping_mul(0x2545_F491_4F6C_DD1D);
        for k in 0..1000 {
            s.increment(key(k));
        }
        let over = (0..1000).filter(|&k| s.frequency(key(k)) >= 2).count();
        assert!(over <= 30, "{over} of 1000 one-hit objects estimated at 2+");
        assert!((0..1000).all(|k| s.frequency(key(k)) >= 1));
        let unseen = (10_000..14_000)
            .filter(|&k| s.frequency(key(k)) >= 1)
            .count();
        assert!(
            unseen <= 160,
            "{unseen} of 4000 never asked for estimated at 1+"
        );
        // Asked for a second time: 2.
        for k in 0..100 {
            s.increment(key(k));
        }
        assert!((0..100).all(|k| s.frequency(key(k)) >= 2));
    }

    #[test]
    fn aging_happens_by_itself() {
        let mut s = FrequencySketch::new(1024);
        let sum = |s: &FrequencySketch| -> u64 {
            s.table
                .iter()
                .map(|w| (0..16).map(|i| (w >> (i * 4)) & 0xF).sum::<u64>())
                .sum()
        };
        // (Each key twice: a first request goes to the doorkeeper, not the counters.)
        let mut k = 0u64;
        while s.additions + 2 < s.sample {
            k += 1;
            s.increment(k.wrapping_mul(0x2545_F491_4F6C_DD1D));
            s.increment(k.wrapping_mul(0x2545_F491_4F6C_DD1D));
        }
        let before = sum(&s);
        assert!(before > 0);
        // The increment that reaches `sample` halves every counter.
        while s.additions + 2 >= s.sample {
            k += 1;
            s.increment(k.wrapping_mul(0x2545_F491_4F6C_DD1D));
        }
        let after = sum(&s);
        assert!(after <= before / 2 + 4, "counters {before} -> {after}");
        assert!(s.additions < s.sample);
    }
}
