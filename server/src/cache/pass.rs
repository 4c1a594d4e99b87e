//! Remembered pass-throughs ("hit-for-pass"): objects whose last origin answer could not be
//! stored (Set-Cookie, no-store, private, Vary, no lifetime, several slices without a strong
//! validator), so that for a while their requests are passed through at once. Without it, every
//! request of such an object on a sliced volume asks the origin twice: once for its first slice
//! (the fill, which finds the answer not storable) and once for what the client asked.
//! Requests with Authorization have marks of their own ("private"): an answer to one user's
//! credentials that may not be shared says nothing of the anonymous answers, and the reverse.
//!
//! A mark lasts [`PASS_MS`] and is forgotten when the object is removed (purged, replaced), but
//! not when it is withdrawn (its stored slices deleted because its answer may no longer be
//! stored: the mark is why); a stale stored slice of a marked object is passed through too. A
//! full table marks nothing more until marks expire. It owns only the table: what is storable
//! is decided by the fill, what to do with a mark by the request path.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// How long a mark lasts: an object that became storable at the origin is stored again at
/// most this long after.
pub const PASS_MS: i64 = 60_000;
/// Marks kept per volume at most (about 40 bytes each).
const MAX_MARKS: usize = 16_384;

/// The marks of one cache volume: three tables of the same kind.
#[derive(Default)]
pub struct Passes {
    /// Objects passed through for anonymous requests (and for storing: no fill stores a slice
    /// of one).
    pub shared: Marks,
    /// Objects whose answer to a request with Authorization could not be shared (RFC 9111
    /// §3.5: no `public`, `s-maxage` or `must-revalidate`). Such requests pass through at once;
    /// the mark says nothing of the answers to anonymous requests, so it is kept apart.
    pub private: Marks,
    /// Objects found changed at the origin in the middle of a response, until when that
    /// counts (a second change before then passes the object through), tagged with the
    /// version they changed from.
    changed: Marks,
}

/// One table of marks: object hash -> (until when (ms), a tag).
#[derive(Default)]
pub struct Marks(Mutex<HashMap<u128, (i64, u64)>>);

impl Marks {
    /// Lock the table (a poisoned lock still holds a usable map).
    fn table(&self) -> MutexGuard<'_, HashMap<u128, (i64, u64)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Mark object `hash` until `now_ms + PASS_MS`, unless the table is full of unexpired
    /// marks.
    pub fn mark(&self, hash: u128, now_ms: i64) {
        self.mark_tagged(hash, now_ms, 0)
    }

    fn mark_tagged(&self, hash: u128, now_ms: i64, tag: u64) {
        let mut m = self.table();
        if m.len() >= MAX_MARKS && !m.contains_key(&hash) {
            m.retain(|_, (until, _)| *until > now_ms);
            if m.len() >= MAX_MARKS {
                return;
            }
        }
        m.insert(hash, (now_ms.saturating_add(PASS_MS), tag));
    }

    /// True while object `hash` is marked (an expired mark is dropped).
    pub fn passing(&self, hash: u128, now_ms: i64) -> bool {
        self.get(hash, now_ms).is_some()
    }

    /// Object `hash`'s mark while it lasts, (until when, tag) (an expired mark is dropped).
    fn get(&self, hash: u128, now_ms: i64) -> Option<(i64, u64)> {
        let mut m = self.table();
        match m.get(&hash) {
            Some(&(until, tag)) if until > now_ms => Some((until, tag)),
            Some(_) => {
                m.remove(&hash);
                None
            }
            None => None,
        }
    }

    fn forget(&self, hash: u128) {
        self.table().remove(&hash);
    }

    fn clear(&self) {
        self.table().clear();
    }
}

impl Passes {
    /// The marks that decide for a request, with Authorization or not.
    pub fn for_request(&self, authorized: bool) -> &Marks {
        if authorized {
            &self.private
        } else {
            &self.shared
        }
    }

    /// Object `hash` was found changed at the origin in the middle of a response that began at
    /// `began_ms` with version `from` (a tag of its validators): true when a change was found
    /// within [`PASS_MS`] before, from another version or by a response that began after it.
    /// An origin whose validator changes with every answer (an ETag per backend or per
    /// response), or whose first slice always comes in another version than the rest, would
    /// otherwise cut every full read after its first slice, for ever. One update met by
    /// several responses at once is one change: each of them began before it was found, with
    /// the same version.
    pub fn changed_again(&self, hash: u128, now_ms: i64, began_ms: i64, from: u64) -> bool {
        let again = self
            .changed
            .get(hash, now_ms)
            .is_some_and(|(until, t)| t != from || began_ms > until - PASS_MS);
        self.changed.mark_tagged(hash, now_ms, from);
        again
    }

    /// Forget the pass marks of object `hash` (removed, or its answer stored after all).
    pub fn forget(&self, hash: u128) {
        self.shared.forget(hash);
        self.private.forget(hash);
    }

    /// Forget every mark (a purge by prefix: marks keep hashes, not keys).
    pub fn clear(&self) {
        self.shared.clear();
        self.private.clear();
        self.changed.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_lasts_pass_ms_and_a_full_table_marks_nothing_more() {
        let passes = Passes::default();
        let p = &passes.shared;
        p.mark(1, 1000);
        assert!(p.passing(1, 1000 + PASS_MS - 1));
        assert!(!p.passing(1, 1000 + PASS_MS));
        assert!(!p.passing(1, 1000), "an expired mark is dropped");
        p.mark(2, 0);
        passes.forget(2);
        assert!(!p.passing(2, 1));
        p.mark(3, 0);
        passes.clear();
        assert!(!p.passing(3, 1));
        for h in 0..MAX_MARKS as u128 {
            p.mark(h + 10, 0);
        }
        p.mark(5, 1);
        assert!(!p.passing(5, 2), "a full table took a mark");
        // Once the marks expire, a new one is taken.
        p.mark(5, PASS_MS + 1);
        assert!(p.passing(5, PASS_MS + 2));
    }

    #[test]
    fn a_second_change_within_pass_ms_is_told() {
        let p = Passes::default();
        assert!(!p.changed_again(7, 100, 0, 1));
        assert!(
            !p.changed_again(7, 110, 50, 1),
            "the same change met by another response begun before it"
        );
        assert!(
            p.changed_again(7, 200, 150, 1),
            "the same versions met by a response begun after it"
        );
        assert!(!p.changed_again(9, 0, 0, 1));
        assert!(
            p.changed_again(9, 10, 0, 2),
            "a change from another version"
        );
        assert!(!p.changed_again(8, 0, 0, 2), "per object");
        assert!(
            !p.changed_again(8, PASS_MS + 1, PASS_MS, 3),
            "an old change does not count"
        );
    }
}
