//! `multipart/byteranges` framing (RFC 9110 §14.6): the boundary, each part's head
//! (`Content-Type` + `Content-Range`), the closing delimiter, and the exact `Content-Length` of
//! the whole body, known before the first byte is sent. The part data itself is sent by the
//! caller from the file (or cache object) like any single range; this module never reads it.

use super::range::ByteRange;
use std::hash::{BuildHasher, Hasher};

/// One part: its head bytes, then `range` of the representation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub head: Vec<u8>,
    pub range: ByteRange,
}

/// The framing of one multipart/byteranges body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Multipart {
    boundary: String,
    parts: Vec<Part>,
    trailer: Vec<u8>,
    length: u64,
}

/// A fresh boundary: 24 hex digits from the process's random hasher keys and a counter, so it
/// cannot be predicted from the content (a body containing it would still be framed correctly by
/// length, but parsers search for it).
pub fn new_boundary() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(n);
    let a = h.finish();
    h.write_u64(a);
    let b = h.finish();
    format!("{:016x}{:08x}", a, b as u32)
}

impl Multipart {
    /// Frame `ranges` of a representation of `size` bytes whose type is `content_type`.
    pub fn new(ranges: &[ByteRange], size: u64, content_type: &str, boundary: String) -> Multipart {
        let mut length = 0u64;
        let parts: Vec<Part> = ranges
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let head = format!(
                    "{}--{}\r\nContent-Type: {}\r\nContent-Range: bytes {}-{}/{}\r\n\r\n",
                    if i == 0 { "" } else { "\r\n" },
                    boundary,
                    content_type,
                    r.start,
                    r.end,
                    size
                )
                .into_bytes();
                length += head.len() as u64 + r.len();
                Part { head, range: *r }
            })
            .collect();
        let trailer = format!("\r\n--{boundary}--\r\n").into_bytes();
        length += trailer.len() as u64;
        Multipart {
            boundary,
            parts,
            trailer,
            length,
        }
    }

    /// The response's `Content-Type` value.
    pub fn content_type(&self) -> String {
        format!("multipart/byteranges; boundary={}", self.boundary)
    }

    /// The exact body length (part heads + data + closing delimiter).
    pub fn content_length(&self) -> u64 {
        self.length
    }

    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The closing delimiter, sent after the last part's data.
    pub fn trailer(&self) -> &[u8] {
        &self.trailer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assemble(m: &Multipart, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in m.parts() {
            out.extend_from_slice(&p.head);
            out.extend_from_slice(&data[p.range.start as usize..=p.range.end as usize]);
        }
        out.extend_from_slice(m.trailer());
        out
    }

    #[test]
    fn body_matches_its_length_and_parses_back() {
        let data: Vec<u8> = (0..100u8).collect();
        let ranges = [
            ByteRange { start: 95, end: 99 },
            ByteRange { start: 0, end: 1 },
        ];
        let m = Multipart::new(&ranges, 100, "video/mp4", "B0UND".into());
        let body = assemble(&m, &data);
        assert_eq!(body.len() as u64, m.content_length());
        assert_eq!(m.content_type(), "multipart/byteranges; boundary=B0UND");
        let mut want =
            b"--B0UND\r\nContent-Type: video/mp4\r\nContent-Range: bytes 95-99/100\r\n\r\n"
                .to_vec();
        want.extend_from_slice(&data[95..100]);
        want.extend_from_slice(
            b"\r\n--B0UND\r\nContent-Type: video/mp4\r\nContent-Range: bytes 0-1/100\r\n\r\n",
        );
        want.extend_from_slice(&data[0..2]);
        want.extend_from_slice(b"\r\n--B0UND--\r\n");
        assert_eq!(body, want);
    }

    #[test]
    fn boundaries_are_distinct_and_token_safe() {
        let a = new_boundary();
        let b = new_boundary();
        assert_ne!(a, b);
        assert_eq!(a.len(), 24);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
    }
}
