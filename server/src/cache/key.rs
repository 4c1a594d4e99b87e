//! The cache key of a request and where its entries live on disk.
//!
//! A key is the request's canonical path ([`crate::resolve::canonical`]: the form it was routed
//! by and the cache route asks its origin for, so `/%6e1.bin`, `//n1.bin` and `/x/../n1.bin` are
//! one key) plus `?query` as sent (the bytes are kept whole: they are stored in every entry so a
//! hash collision is detected and never served). Its 128-bit XXH3 hash
//! names the files: `L1/L2/HASH-SLICE` under the cache directory, where `L1` is the hash's last hex
//! digit and `L2` the two before it (nginx `levels=1:2`), so no directory grows past a few thousand
//! names. XXH3-128 (the maintained `xxhash-rust` crate) rather than a cryptographic hash: it is an
//! order of magnitude faster on short keys, it is stable across versions and machines (the names
//! must survive restarts), and collisions need no cryptographic resistance because the stored key is
//! compared before anything is served. It must not touch the filesystem.

use std::fmt::Write as _;

/// A request's cache key (path + `?query` as routed).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    bytes: Vec<u8>,
    hash: u128,
}

impl CacheKey {
    pub fn new(bytes: impl Into<Vec<u8>>) -> CacheKey {
        let bytes = bytes.into();
        let hash = xxhash_rust::xxh3::xxh3_128(&bytes);
        CacheKey { bytes, hash }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn hash(&self) -> u128 {
        self.hash
    }

    /// The index/file identity of one stored slice of this key.
    pub fn slice(&self, slice: u32) -> EntryId {
        EntryId::new(self.hash, slice)
    }
}

/// One stored file: an object's hash and its slice number (0 for a whole object).
/// Two `u64` halves rather than a `u128` keep it 8-byte aligned (smaller index entries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId {
    hi: u64,
    lo: u64,
    pub slice: u32,
}

impl EntryId {
    pub fn new(hash: u128, slice: u32) -> EntryId {
        EntryId {
            hi: (hash >> 64) as u64,
            lo: hash as u64,
            slice,
        }
    }

    pub fn hash(&self) -> u128 {
        (self.hi as u128) << 64 | self.lo as u128
    }

    /// The object's hash as 32 lowercase hex digits.
    pub fn hex(&self) -> String {
        format!("{:032x}", self.hash())
    }

    /// `L1/L2` (nginx levels=1:2: the last hex digit, then the two before it).
    pub fn dir(&self) -> String {
        let h = self.hex();
        format!("{}/{}", &h[31..32], &h[29..31])
    }

    /// The file name inside [`EntryId::dir`]: `HASH-SLICE`.
    pub fn file_name(&self) -> String {
        let mut s = self.hex();
        let _ = write!(s, "-{}", self.slice);
        s
    }

    /// `L1/L2/HASH-SLICE`, relative to the cache directory.
    pub fn rel_path(&self) -> String {
        format!("{}/{}", self.dir(), self.file_name())
    }

    /// Parse a file name written by [`EntryId::file_name`] (the rebuild walk); `None` for
    /// anything else.
    pub fn parse_file_name(name: &[u8]) -> Option<EntryId> {
        let name = std::str::from_utf8(name).ok()?;
        let (hex, slice) = name.split_once('-')?;
        if hex.len() != 32
            || !hex
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            return None;
        }
        if slice.is_empty() || !slice.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let hash = u128::from_str_radix(hex, 16).ok()?;
        let id = EntryId::new(hash, slice.parse().ok()?);
        // Only the canonical spelling (no leading zeros) names an entry.
        (id.file_name() == name).then_some(id)
    }
}

/// Is `key` under the purge prefix `prefix`? Whole path segments, as routes match: the key is
/// the prefix itself, or continues it with `/` or `?` (`/dir` takes `/dir`, `/dir/a` and
/// `/dir?v=1`, not `/dirx`), or the prefix ends with `/` (`/dir/` takes what starts so).
pub fn under_prefix(key: &[u8], prefix: &[u8]) -> bool {
    key.starts_with(prefix)
        && (prefix.ends_with(b"/")
            || key.len() == prefix.len()
            || matches!(key[prefix.len()], b'/' | b'?'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_is_levels_1_2_of_the_hash() {
        let k = CacheKey::new(b"/cold/1/1.bin".to_vec());
        let id = k.slice(3);
        let hex = id.hex();
        assert_eq!(hex.len(), 32);
        assert_eq!(
            id.rel_path(),
            format!("{}/{}/{}-3", &hex[31..], &hex[29..31], hex)
        );
        assert_eq!(id.hash(), k.hash());
        // Stable across runs and machines: XXH3-128 of a fixed input.
        assert_eq!(
            CacheKey::new(b"".to_vec()).hash(),
            0x99aa06d3014798d86001c324468d497f
        );
    }

    #[test]
    fn different_keys_and_slices_differ() {
        let a = CacheKey::new(b"/a?x=1".to_vec());
        let b = CacheKey::new(b"/a?x=2".to_vec());
        assert_ne!(a.hash(), b.hash());
        assert_ne!(a.slice(0), a.slice(1));
    }

    #[test]
    fn file_names_round_trip_and_junk_is_refused() {
        let id = CacheKey::new(b"/v.mp4".to_vec()).slice(17);
        assert_eq!(
            EntryId::parse_file_name(id.file_name().as_bytes()),
            Some(id)
        );
        for junk in [
            &b"x"[..],
            b"0123",
            b"0123456789abcdef0123456789abcdef",
            b"0123456789abcdef0123456789abcdef-",
            b"0123456789abcdef0123456789abcdef-01",
            b"0123456789ABCDEF0123456789abcdef-1",
            b"0123456789abcdef0123456789abcdef-1.tmp",
        ] {
            assert_eq!(EntryId::parse_file_name(junk), None, "{junk:?}");
        }
    }
}
