//! The on-disk format of one cache entry (one file per stored slice, or per object when
//! `slice_size = 0`), and reading it back.
//!
//! Layout: a header, then zero padding up to the next 4 KiB boundary, then the body, so the body
//! starts page-aligned (sendfile and RWF_NOWAIT reads from an aligned offset). The header (all
//! integers little-endian):
//!
//! ```text
//! magic "CSCACHE\n" | version u32 | header_len u32 | body_offset u32 | status u16 | slice u32
//! | slice_size u64 | body_len u64 | total_size u64 | stored_at_ms i64 | initial_age u32
//! | fresh_until_ms i64 | stale_while_revalidate_until_ms i64 | stale_if_error_until_ms i64
//! | key | etag | last_modified | n_headers u16 | (name, value)*      (strings: u32 length + bytes)
//! | xxh3-64 of everything before it
//! ```
//!
//! An entry is valid only when magic, version, checksum and `header_len` agree and the file is
//! exactly `body_offset + body_len` bytes: a short (crash, full disk) or corrupt file is refused
//! here, so it is never served truncated. The full key is in the header so a hash collision is
//! detected ([`EntryError::Collision`]). It must not decide where it runs (callers run it on the
//! volume's pool) nor know about HTTP beyond carrying header names and values.

use std::io;
use std::os::fd::AsFd;

pub const MAGIC: &[u8; 8] = b"CSCACHE\n";
/// 2: times in milliseconds (1 had whole seconds; such entries are dropped and refetched).
pub const VERSION: u32 = 2;
/// The body starts at a multiple of this.
pub const ALIGN: u64 = 4096;
/// Largest header accepted (a corrupt length cannot make a reader allocate more).
pub const MAX_HEADER: usize = 256 * 1024;

/// What is stored about the response besides its body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryMeta {
    /// The full cache key (compared on every open: a hash collision is never served).
    pub key: Vec<u8>,
    /// The origin's status for the object (200 for slices of a 206).
    pub status: u16,
    /// Slice number (0 for a whole object).
    pub slice: u32,
    /// Bytes per slice of the object (0 = stored whole).
    pub slice_size: u64,
    /// Body bytes in this file.
    pub body_len: u64,
    /// The object's full size (part of its validator).
    pub total_size: u64,
    /// When the response was received (Unix milliseconds: the fresh/stale decision is exact
    /// to the millisecond, though lifetimes and `Age` are whole seconds).
    pub stored_at_ms: i64,
    /// The age the origin reported at `stored_at_ms` (seconds).
    pub initial_age: u32,
    /// Fresh until (Unix seconds); then stale.
    pub fresh_until_ms: i64,
    /// May be served stale while one refresh runs until this time.
    pub stale_while_revalidate_until_ms: i64,
    /// May be served stale when the origin fails until this time.
    pub stale_if_error_until_ms: i64,
    /// Validator: the origin's ETag (with quotes / `W/`), if any.
    pub etag: Option<String>,
    /// Validator: the origin's Last-Modified, if any.
    pub last_modified: Option<String>,
    /// Other stored response headers (Content-Type, Cache-Control, ...), in order.
    pub headers: Vec<(String, String)>,
}

impl EntryMeta {
    /// True when `other` describes the same version of the object, so slices of both may be
    /// served in one response: status and total size agree, and the same strong ETag (it
    /// names the bytes, RFC 9110 §8.8.3: a 304 may have moved the first slice's
    /// Last-Modified, as for an object uploaded again unchanged), or else the same ETag and
    /// Last-Modified.
    pub fn same_version(&self, other: &EntryMeta) -> bool {
        self.status == other.status
            && self.etag == other.etag
            && self.version_last_modified() == other.version_last_modified()
            && self.total_size == other.total_size
    }

    /// The Last-Modified that names the version: none under a strong ETag (which names the
    /// bytes by itself).
    fn version_last_modified(&self) -> Option<&str> {
        match self.etag.as_deref() {
            Some(t) if t.starts_with('"') => None,
            _ => self.last_modified.as_deref(),
        }
    }

    /// A tag of the version [`EntryMeta::same_version`] compares: status, total size, ETag,
    /// and Last-Modified unless the ETag is strong.
    pub fn version_tag(&self) -> u64 {
        let mut b = Vec::with_capacity(64);
        b.extend_from_slice(&self.status.to_le_bytes());
        b.extend_from_slice(&self.total_size.to_le_bytes());
        for f in [self.etag.as_deref(), self.version_last_modified()] {
            let f = f.unwrap_or("").as_bytes();
            b.extend_from_slice(&(f.len() as u32).to_le_bytes());
            b.extend_from_slice(f);
        }
        xxhash_rust::xxh3::xxh3_64(&b)
    }

    /// This slice as the object's first slice `first` (the same version) says it is now: its
    /// freshness, age and stored fields, with this slice's bytes.
    pub fn vouched_by(&self, first: &EntryMeta) -> EntryMeta {
        EntryMeta {
            stored_at_ms: first.stored_at_ms,
            initial_age: first.initial_age,
            fresh_until_ms: first.fresh_until_ms,
            stale_while_revalidate_until_ms: first.stale_while_revalidate_until_ms,
            stale_if_error_until_ms: first.stale_if_error_until_ms,
            headers: first.headers.clone(),
            // (The same version: a 304 may have moved the first slice's.)
            last_modified: first.last_modified.clone(),
            ..self.clone()
        }
    }

    /// True for another status's answer (a 404, a redirect): stored whole as slice 0 and sent
    /// whole, without ranges or preconditions; false for the object's bytes (200).
    pub fn whole_answer(&self) -> bool {
        self.status != 200
    }

    /// True when `body_len` is the length this slice must have: the whole object for a whole
    /// answer or an unsliced volume, else the object's bytes from `slice * slice_size` up to
    /// the next slice or the end. A stored slice of another length would leave a hole or an
    /// overlap in every response assembled from it.
    pub fn shape_ok(&self) -> bool {
        // A file longer than a u64 counts is no file (a hand-made header).
        if self.body_len.checked_add(self.body_offset()).is_none() {
            return false;
        }
        if self.whole_answer() || self.slice_size == 0 || self.total_size == 0 {
            return self.slice == 0 && self.body_len == self.total_size;
        }
        let start = u64::from(self.slice).saturating_mul(self.slice_size);
        start < self.total_size && self.body_len == self.slice_size.min(self.total_size - start)
    }

    /// True when this header can be stored: at most [`MAX_HEADER`] bytes, as opening an entry
    /// requires (a longer one would be stored, refused at each open, and fetched again).
    pub fn fits(&self) -> bool {
        self.encoded_len() <= MAX_HEADER
    }

    /// Where the body starts in the file.
    pub fn body_offset(&self) -> u64 {
        round_up(self.encoded_len() as u64)
    }

    /// The file's length once complete.
    pub fn file_len(&self) -> u64 {
        self.body_offset().saturating_add(self.body_len)
    }

    fn encoded_len(&self) -> usize {
        let s = |b: usize| 4 + b;
        8 + 4
            + 4
            + 4
            + 2
            + 4
            + 8
            + 8
            + 8
            + 8
            + 4
            + 8
            + 8
            + 8
            + s(self.key.len())
            + s(self.etag.as_ref().map_or(0, |e| e.len()))
            + s(self.last_modified.as_ref().map_or(0, |e| e.len()))
            + 2
            + self
                .headers
                .iter()
                .map(|(n, v)| s(n.len()) + s(v.len()))
                .sum::<usize>()
            + 8
    }

    /// The header bytes, zero-padded to [`EntryMeta::body_offset`].
    pub fn encode(&self) -> Vec<u8> {
        let len = self.encoded_len();
        let mut b = Vec::with_capacity(round_up(len as u64) as usize);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&(len as u32).to_le_bytes());
        b.extend_from_slice(&(round_up(len as u64) as u32).to_le_bytes());
        b.extend_from_slice(&self.status.to_le_bytes());
        b.extend_from_slice(&self.slice.to_le_bytes());
        for v in [self.slice_size, self.body_len, self.total_size] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.stored_at_ms.to_le_bytes());
        b.extend_from_slice(&self.initial_age.to_le_bytes());
        for v in [
            self.fresh_until_ms,
            self.stale_while_revalidate_until_ms,
            self.stale_if_error_until_ms,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let put = |b: &mut Vec<u8>, s: &[u8]| {
            b.extend_from_slice(&(s.len() as u32).to_le_bytes());
            b.extend_from_slice(s);
        };
        put(&mut b, &self.key);
        put(&mut b, self.etag.as_deref().unwrap_or("").as_bytes());
        put(
            &mut b,
            self.last_modified.as_deref().unwrap_or("").as_bytes(),
        );
        b.extend_from_slice(&(self.headers.len() as u16).to_le_bytes());
        for (n, v) in &self.headers {
            put(&mut b, n.as_bytes());
            put(&mut b, v.as_bytes());
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        debug_assert_eq!(b.len(), len);
        b.resize(round_up(len as u64) as usize, 0);
        b
    }

    /// Parse a header from the start of `buf` (which holds at least `header_len` bytes).
    pub fn decode(buf: &[u8]) -> Result<EntryMeta, EntryError> {
        let mut r = Reader { buf, at: 0 };
        if r.bytes(8)? != MAGIC {
            return Err(EntryError::Corrupt("bad magic"));
        }
        if r.u32()? != VERSION {
            return Err(EntryError::Corrupt("unknown version"));
        }
        let len = r.u32()? as usize;
        if !(8..=MAX_HEADER).contains(&len) || len > buf.len() {
            return Err(EntryError::Corrupt("bad header length"));
        }
        let sum = u64::from_le_bytes(buf[len - 8..len].try_into().expect("8 bytes"));
        if xxhash_rust::xxh3::xxh3_64(&buf[..len - 8]) != sum {
            return Err(EntryError::Corrupt("header checksum mismatch"));
        }
        let mut r = Reader {
            buf: &buf[..len - 8],
            at: r.at,
        };
        let body_offset = r.u32()? as u64;
        let status = r.u16()?;
        let slice = r.u32()?;
        let slice_size = r.u64()?;
        let body_len = r.u64()?;
        let total_size = r.u64()?;
        let stored_at_ms = r.u64()? as i64;
        let initial_age = r.u32()?;
        let fresh_until_ms = r.u64()? as i64;
        let stale_while_revalidate_until_ms = r.u64()? as i64;
        let stale_if_error_until_ms = r.u64()? as i64;
        let key = r.string()?.to_vec();
        let opt = |s: &[u8]| -> Result<Option<String>, EntryError> {
            if s.is_empty() {
                Ok(None)
            } else {
                utf8(s).map(Some)
            }
        };
        let etag = opt(r.string()?)?;
        let last_modified = opt(r.string()?)?;
        let n = r.u16()?;
        let mut headers = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let name = utf8(r.string()?)?;
            let value = utf8(r.string()?)?;
            headers.push((name, value));
        }
        if r.at != r.buf.len() {
            return Err(EntryError::Corrupt("trailing header bytes"));
        }
        let meta = EntryMeta {
            key,
            status,
            slice,
            slice_size,
            body_len,
            total_size,
            stored_at_ms,
            initial_age,
            fresh_until_ms,
            stale_while_revalidate_until_ms,
            stale_if_error_until_ms,
            etag,
            last_modified,
            headers,
        };
        if meta.body_offset() != body_offset {
            return Err(EntryError::Corrupt("body offset does not match the header"));
        }
        if !meta.shape_ok() {
            return Err(EntryError::Corrupt(
                "body length does not match the slice's place in the object",
            ));
        }
        Ok(meta)
    }
}

fn round_up(n: u64) -> u64 {
    n.div_ceil(ALIGN) * ALIGN
}

fn utf8(s: &[u8]) -> Result<String, EntryError> {
    String::from_utf8(s.to_vec()).map_err(|_| EntryError::Corrupt("header text is not UTF-8"))
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], EntryError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(EntryError::Corrupt("header ends early"))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u16(&mut self) -> Result<u16, EntryError> {
        Ok(u16::from_le_bytes(self.bytes(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> Result<u32, EntryError> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, EntryError> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().expect("8")))
    }
    fn string(&mut self) -> Result<&'a [u8], EntryError> {
        let n = self.u32()? as usize;
        self.bytes(n)
    }
}

/// Why an entry file cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    /// The file does not exist.
    #[error("no such entry")]
    Missing,
    #[error("reading the entry failed: {0}")]
    Io(#[from] io::Error),
    /// Fewer (or more) bytes than the header announces: an interrupted write.
    #[error("entry is {actual} bytes, its header announces {expected}")]
    Short { expected: u64, actual: u64 },
    #[error("corrupt entry: {0}")]
    Corrupt(&'static str),
    /// A valid entry of another key with the same hash.
    #[error("hash collision: the entry belongs to another key")]
    Collision,
}

impl EntryError {
    /// The file should be deleted (it can never become valid).
    pub fn is_invalid(&self) -> bool {
        matches!(self, EntryError::Short { .. } | EntryError::Corrupt(_))
    }
}

/// The blocking work: read and check the header of the open entry `fd` (pread of its first
/// page, more only for a header larger than one page; fstat for the length).
pub fn read_meta(fd: impl AsFd) -> Result<EntryMeta, EntryError> {
    let fd = fd.as_fd();
    // A FIFO or a device put where an entry belongs is no entry (a FIFO's read would wait for
    // a writer for ever, holding a pool thread).
    let st = rustix::fs::fstat(fd).map_err(io::Error::from)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(EntryError::Corrupt("not a regular file"));
    }
    let mut buf = vec![0u8; ALIGN as usize];
    let n = pread_full(fd, &mut buf, 0)?;
    buf.truncate(n);
    if n < 20 {
        return Err(short(fd, 0));
    }
    let len = u32::from_le_bytes(buf[12..16].try_into().expect("4")) as usize;
    if !(20..=MAX_HEADER).contains(&len) {
        return Err(EntryError::Corrupt("bad header length"));
    }
    if len > buf.len() {
        let have = buf.len();
        buf.resize(len, 0);
        let m = pread_full(fd, &mut buf[have..], have as u64)?;
        if have + m < len {
            return Err(short(fd, len as u64));
        }
    }
    let meta = EntryMeta::decode(&buf)?;
    let actual = rustix::fs::fstat(fd).map_err(io::Error::from)?.st_size as u64;
    if actual != meta.file_len() {
        return Err(EntryError::Short {
            expected: meta.file_len(),
            actual,
        });
    }
    Ok(meta)
}

fn short(fd: std::os::fd::BorrowedFd<'_>, expected: u64) -> EntryError {
    let actual = rustix::fs::fstat(fd).map_or(0, |s| s.st_size as u64);
    EntryError::Short { expected, actual }
}

/// pread until `buf` is full or end of file; returns the bytes read.
pub fn pread_full(
    fd: std::os::fd::BorrowedFd<'_>,
    buf: &mut [u8],
    offset: u64,
) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pread(fd, &mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done)
}

/// pwrite all of `buf` at `offset`.
pub fn pwrite_all(
    fd: std::os::fd::BorrowedFd<'_>,
    mut buf: &[u8],
    mut offset: u64,
) -> io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::pwrite(fd, buf, offset) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A slice `slice` of `body_len` bytes of a five-slice object (slices of `body_len` bytes;
/// an empty body is an empty whole object).
#[cfg(test)]
pub(crate) fn sample_meta(key: &[u8], slice: u32, body_len: u64) -> EntryMeta {
    EntryMeta {
        key: key.to_vec(),
        status: 200,
        slice,
        slice_size: body_len,
        body_len,
        total_size: 5 * body_len,
        stored_at_ms: 1_700_000_000_250,
        initial_age: 3,
        fresh_until_ms: 1_700_003_600_250,
        stale_while_revalidate_until_ms: 1_700_003_660_250,
        stale_if_error_until_ms: 1_700_090_000_250,
        etag: Some("\"abc\"".into()),
        last_modified: Some("Tue, 14 Nov 2023 22:13:20 GMT".into()),
        headers: vec![
            ("Content-Type".into(), "video/mp4".into()),
            ("Cache-Control".into(), "max-age=3600".into()),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write_file(dir: &std::path::Path, bytes: &[u8]) -> std::fs::File {
        let p = dir.join("e");
        std::fs::File::create(&p).unwrap().write_all(bytes).unwrap();
        std::fs::File::open(&p).unwrap()
    }

    /// A header over MAX_HEADER does not fit (the origin client's 32 KiB head limit and the
    /// URI's length keep answers below it today; the check keeps a change there from storing
    /// entries that every open would refuse).
    #[test]
    fn a_header_over_the_limit_does_not_fit() {
        let mut m = sample_meta(b"/a", 0, 10);
        assert!(m.fits());
        m.headers.push(("X-Big".into(), "b".repeat(MAX_HEADER)));
        assert!(!m.fits());
    }

    #[test]
    fn header_round_trips_and_body_is_page_aligned() {
        let m = sample_meta(b"/v.mp4", 2, 10);
        let enc = m.encode();
        assert_eq!(enc.len() as u64, m.body_offset());
        assert_eq!(m.body_offset() % ALIGN, 0);
        assert_eq!(EntryMeta::decode(&enc).unwrap(), m);

        let dir = tempfile::tempdir().unwrap();
        let mut bytes = enc.clone();
        bytes.extend_from_slice(b"0123456789");
        let f = write_file(dir.path(), &bytes);
        assert_eq!(read_meta(&f).unwrap(), m);
    }

    #[test]
    fn large_headers_span_pages() {
        let mut m = sample_meta(b"/big", 0, 1);
        m.headers.push(("X-Long".into(), "y".repeat(9000)));
        let mut bytes = m.encode();
        assert_eq!(bytes.len(), 12288);
        bytes.push(b'!');
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_meta(write_file(dir.path(), &bytes)).unwrap(), m);
    }

    #[test]
    fn short_and_long_files_are_refused() {
        let m = sample_meta(b"/v.mp4", 0, 100);
        let dir = tempfile::tempdir().unwrap();
        for body in [99usize, 101, 0] {
            let mut bytes = m.encode();
            bytes.resize(bytes.len() + body, 7);
            match read_meta(write_file(dir.path(), &bytes)) {
                Err(EntryError::Short { expected, actual }) => {
                    assert_eq!(expected, m.file_len());
                    assert_eq!(actual, m.body_offset() + body as u64);
                }
                other => panic!("body {body}: {other:?}"),
            }
        }
        // Cut inside the header.
        let bytes = &m.encode()[..50];
        let e = read_meta(write_file(dir.path(), bytes)).unwrap_err();
        assert!(e.is_invalid(), "{e:?}");
        // Empty file.
        let e = read_meta(write_file(dir.path(), b"")).unwrap_err();
        assert!(matches!(e, EntryError::Short { .. }), "{e:?}");
    }

    #[test]
    fn a_body_longer_than_a_file_can_be_is_no_shape() {
        let mut m = sample_meta(b"/huge", 0, 7);
        (m.slice_size, m.body_len, m.total_size) = (0, u64::MAX - 10, u64::MAX - 10);
        assert!(!m.shape_ok());
        assert_eq!(m.file_len(), u64::MAX);
        (m.body_len, m.total_size) = (1 << 40, 1 << 40);
        assert!(m.shape_ok());
    }

    #[test]
    fn every_flipped_header_byte_is_detected() {
        let m = sample_meta(b"/v.mp4", 1, 7);
        let enc = m.encode();
        let len = u32::from_le_bytes(enc[12..16].try_into().unwrap()) as usize;
        for i in 0..len {
            let mut bad = enc.clone();
            bad[i] ^= 0x40;
            assert!(
                EntryMeta::decode(&bad).is_err(),
                "flipping byte {i} was not detected"
            );
        }
    }

    #[test]
    fn a_slice_of_the_wrong_length_for_its_place_is_refused() {
        let mut m = sample_meta(b"/v", 1, 100);
        assert!(EntryMeta::decode(&m.encode()).is_ok());
        // The last slice is the object's rest; any other length leaves a hole or an overlap.
        m.total_size = 150;
        m.body_len = 50;
        assert!(EntryMeta::decode(&m.encode()).is_ok());
        for (body_len, total) in [(40, 150), (60, 150), (100, 150), (100, 100)] {
            m.body_len = body_len;
            m.total_size = total;
            let e = EntryMeta::decode(&m.encode()).unwrap_err();
            assert!(e.is_invalid(), "{body_len}/{total}: {e:?}");
        }
        // A whole answer (a 404) is its own length, slice 0 only.
        let mut w = sample_meta(b"/404", 0, 10);
        w.status = 404;
        w.total_size = 10;
        assert!(EntryMeta::decode(&w.encode()).is_ok());
        w.slice = 1;
        assert!(EntryMeta::decode(&w.encode()).is_err());
    }

    #[test]
    fn versions_compare_by_validator_and_size() {
        let a = sample_meta(b"/v", 0, 1);
        let mut b = sample_meta(b"/v", 3, 1);
        assert!(a.same_version(&b));
        b.etag = Some("\"other\"".into());
        assert!(!a.same_version(&b));
        let mut c = sample_meta(b"/v", 0, 1);
        c.total_size += 1;
        assert!(!a.same_version(&c));
        // A strong ETag names the bytes: another Last-Modified (a 304 moved it) is the same
        // version; without one, the Last-Modified decides.
        let mut d = sample_meta(b"/v", 2, 1);
        d.last_modified = Some("Wed, 15 Nov 2023 22:13:20 GMT".into());
        assert!(a.same_version(&d));
        let (mut weak_a, mut weak_d) = (a.clone(), d.clone());
        weak_a.etag = Some("W/\"abc\"".into());
        weak_d.etag = Some("W/\"abc\"".into());
        assert!(!weak_a.same_version(&weak_d));
        weak_a.etag = None;
        weak_d.etag = None;
        assert!(!weak_a.same_version(&weak_d));
        assert_eq!(d.vouched_by(&a).last_modified, a.last_modified);
    }
}
