//! Content-Type from the file name's extension (case-insensitive); unknown ->
//! `application/octet-stream`. A maintained built-in table (web, HLS/DASH/CMAF, modern images,
//! fonts, wasm) plus the `http.media_types` overrides of the config, merged once at start
//! ([`MediaTypes`]). No filesystem sniffing.

use std::collections::HashMap;
use std::sync::OnceLock;

/// The type of anything the table does not name.
pub const DEFAULT: &str = "application/octet-stream";

/// Longest extension looked up (longer ones have no type).
const MAX_EXT: usize = 16;

/// A lower-cased extension, held inline (it is computed per response: no allocation).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Ext {
    buf: [u8; MAX_EXT],
    len: u8,
}

impl std::ops::Deref for Ext {
    type Target = str;
    fn deref(&self) -> &str {
        // Only lower-cased ASCII alphanumerics are stored.
        std::str::from_utf8(&self.buf[..usize::from(self.len)]).unwrap_or("")
    }
}

impl std::fmt::Debug for Ext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

/// The lower-cased extension of a file name (after its last `.` in the last path component),
/// or None when there is none (or it is not short ASCII).
pub fn extension(name: &[u8]) -> Option<Ext> {
    let last = match name.iter().rposition(|&b| b == b'/') {
        Some(i) => &name[i + 1..],
        None => name,
    };
    let i = last.iter().rposition(|&b| b == b'.')?;
    let ext = &last[i + 1..];
    if ext.is_empty() || ext.len() > MAX_EXT || !ext.iter().all(u8::is_ascii_alphanumeric) {
        return None;
    }
    let mut e = Ext {
        buf: [0; MAX_EXT],
        len: ext.len() as u8,
    };
    for (d, s) in e.buf.iter_mut().zip(ext) {
        *d = s.to_ascii_lowercase();
    }
    Some(e)
}

/// The media type of a file name from the built-in table alone.
pub fn content_type(name: &[u8]) -> &'static str {
    extension(name).and_then(|e| builtin(&e)).unwrap_or(DEFAULT)
}

/// The built-in type of a lower-cased extension.
pub fn builtin(ext: &str) -> Option<&'static str> {
    // Binary search over the table sorted once (it runs per response; a linear scan compared
    // the extension with every entry of its length).
    static SORTED: OnceLock<Vec<(&'static str, &'static str)>> = OnceLock::new();
    let sorted = SORTED.get_or_init(|| {
        let mut v = TABLE.to_vec();
        v.sort_by_key(|(e, _)| *e);
        // An extension listed twice keeps its first entry, as the linear scan did.
        v.dedup_by_key(|(e, _)| *e);
        v
    });
    sorted
        .binary_search_by(|(e, _)| (*e).cmp(ext))
        .ok()
        .map(|i| sorted[i].1)
}

/// The built-in table merged with the config's `http.media_types` (extension -> type; a config
/// entry adds an extension or overrides the built-in one), in one hash map built once at start:
/// a response costs one lookup (the binary search over the table cost ~400 instructions).
#[derive(Debug, Clone)]
pub struct MediaTypes {
    types: HashMap<Box<str>, Box<str>, foldhash::fast::RandomState>,
}

impl Default for MediaTypes {
    fn default() -> MediaTypes {
        MediaTypes::new(std::iter::empty())
    }
}

impl MediaTypes {
    /// `overrides`: extension (any case, without the dot) -> Content-Type value.
    pub fn new<'a>(overrides: impl IntoIterator<Item = (&'a String, &'a String)>) -> MediaTypes {
        let mut types = HashMap::with_capacity_and_hasher(TABLE.len(), Default::default());
        for (e, t) in TABLE {
            // An extension listed twice keeps its first entry.
            types.entry(Box::from(*e)).or_insert_with(|| Box::from(*t));
        }
        for (e, t) in overrides {
            let e = e.trim_start_matches('.').to_ascii_lowercase();
            types.insert(e.into_boxed_str(), t.as_str().into());
        }
        MediaTypes { types }
    }

    /// The Content-Type of a lower-cased extension (None: no extension).
    pub fn for_extension(&self, ext: Option<&str>) -> &str {
        ext.and_then(|e| self.types.get(e)).map_or(DEFAULT, |t| t)
    }

    /// The Content-Type of a file name.
    pub fn for_name(&self, name: &[u8]) -> &str {
        self.for_extension(extension(name).as_deref())
    }
}

/// Extension -> type. Text types carry `charset=utf-8`; segment and manifest types follow the
/// HLS (RFC 8216), DASH (ISO/IEC 23009-1) and CMAF (ISO/IEC 23000-19) registrations. Checked
/// against nginx's `mime.types` for media and web types: every one of those it lists is here
/// except the obsolete (`jng`, `mng`, `wbmp`, `ra`, `kar`, `mml`, `htc`), `shtml` (nothing here
/// runs server-side includes) and `svgz` (gzip bytes, which a browser renders only with
/// `Content-Encoding: gzip`). Where nginx keeps a legacy name the registered one is used: `js`
/// `text/javascript` (RFC 9239), `xml` `application/xml` (RFC 7303), `m4a` `audio/mp4`, `m4v`
/// `video/mp4`, `bmp` `image/bmp` (nginx: `application/javascript`, `text/xml`, `audio/x-m4a`,
/// `video/x-m4v`, `image/x-ms-bmp`).
const TABLE: &[(&str, &str)] = &[
    // web
    ("html", "text/html; charset=utf-8"),
    ("htm", "text/html; charset=utf-8"),
    ("xhtml", "application/xhtml+xml"),
    ("css", "text/css; charset=utf-8"),
    ("js", "text/javascript; charset=utf-8"),
    ("mjs", "text/javascript; charset=utf-8"),
    ("json", "application/json"),
    ("map", "application/json"),
    ("jsonld", "application/ld+json"),
    ("webmanifest", "application/manifest+json"),
    ("txt", "text/plain; charset=utf-8"),
    ("md", "text/markdown; charset=utf-8"),
    ("csv", "text/csv; charset=utf-8"),
    ("xml", "application/xml"),
    ("rss", "application/rss+xml"),
    ("atom", "application/atom+xml"),
    ("wasm", "application/wasm"),
    ("pdf", "application/pdf"),
    // images
    ("svg", "image/svg+xml"),
    ("png", "image/png"),
    ("apng", "image/apng"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("avif", "image/avif"),
    ("jxl", "image/jxl"),
    ("heic", "image/heic"),
    ("heif", "image/heif"),
    ("ico", "image/x-icon"),
    ("bmp", "image/bmp"),
    ("tif", "image/tiff"),
    ("tiff", "image/tiff"),
    // fonts
    ("woff", "font/woff"),
    ("woff2", "font/woff2"),
    ("ttf", "font/ttf"),
    ("otf", "font/otf"),
    ("eot", "application/vnd.ms-fontobject"),
    // video and audio files
    ("mp4", "video/mp4"),
    ("m4v", "video/mp4"),
    ("webm", "video/webm"),
    ("mkv", "video/x-matroska"),
    ("mov", "video/quicktime"),
    ("avi", "video/x-msvideo"),
    ("ogv", "video/ogg"),
    ("mpg", "video/mpeg"),
    ("mpeg", "video/mpeg"),
    ("3gp", "video/3gpp"),
    ("3gpp", "video/3gpp"),
    ("3g2", "video/3gpp2"),
    ("flv", "video/x-flv"),
    ("wmv", "video/x-ms-wmv"),
    ("asf", "video/x-ms-asf"),
    ("asx", "video/x-ms-asf"),
    ("mp3", "audio/mpeg"),
    ("m4a", "audio/mp4"),
    ("aac", "audio/aac"),
    ("ac3", "audio/ac3"),
    ("ec3", "audio/eac3"),
    ("eac3", "audio/eac3"),
    ("ogg", "audio/ogg"),
    ("oga", "audio/ogg"),
    ("opus", "audio/opus"),
    ("flac", "audio/flac"),
    ("wav", "audio/wav"),
    ("weba", "audio/webm"),
    ("mka", "audio/x-matroska"),
    ("wma", "audio/x-ms-wma"),
    ("mid", "audio/midi"),
    ("midi", "audio/midi"),
    // HLS, DASH, CMAF
    ("m3u8", "application/vnd.apple.mpegurl"),
    ("m3u", "audio/mpegurl"),
    ("xspf", "application/xspf+xml"),
    ("ts", "video/mp2t"),
    ("m2ts", "video/mp2t"),
    ("mpd", "application/dash+xml"),
    ("m4s", "video/iso.segment"),
    ("cmfv", "video/mp4"),
    ("cmfa", "audio/mp4"),
    ("cmft", "application/mp4"),
    ("cmfm", "application/mp4"),
    ("mp4a", "audio/mp4"),
    ("vtt", "text/vtt; charset=utf-8"),
    ("webvtt", "text/vtt; charset=utf-8"),
    ("ttml", "application/ttml+xml"),
    ("dfxp", "application/ttml+xml"),
    ("srt", "application/x-subrip"),
    // archives
    ("zip", "application/zip"),
    ("gz", "application/gzip"),
    ("br", "application/x-brotli"),
    ("zst", "application/zstd"),
    ("tar", "application/x-tar"),
    ("bin", "application/octet-stream"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_extension() {
        for (path, want) in [
            (&b"a/b/movie.MP4"[..], "video/mp4"),
            (b"index.html", "text/html; charset=utf-8"),
            (b"noext", DEFAULT),
            (b"dir.d/noext", DEFAULT),
            (b"trailing.", DEFAULT),
            (b".hidden", DEFAULT),
        ] {
            let name = String::from_utf8_lossy(path);
            assert_eq!(content_type(path), want, "{name}");
        }
    }

    #[test]
    fn streaming_and_modern_types() {
        for (name, want) in [
            ("live/index.m3u8", "application/vnd.apple.mpegurl"),
            ("seg00001.ts", "video/mp2t"),
            ("chunk-1.m4s", "video/iso.segment"),
            ("manifest.mpd", "application/dash+xml"),
            ("v.cmfv", "video/mp4"),
            ("a.cmfa", "audio/mp4"),
            ("t.cmft", "application/mp4"),
            ("subs.VTT", "text/vtt; charset=utf-8"),
            ("p.avif", "image/avif"),
            ("p.webp", "image/webp"),
            ("p.jxl", "image/jxl"),
            ("f.woff2", "font/woff2"),
            ("m.wasm", "application/wasm"),
            ("old.MPG", "video/mpeg"),
            ("old.mpeg", "video/mpeg"),
            ("phone.3gp", "video/3gpp"),
            ("phone.3gpp", "video/3gpp"),
            ("phone.3g2", "video/3gpp2"),
            ("flash.flv", "video/x-flv"),
            ("win.wmv", "video/x-ms-wmv"),
            ("win.asf", "video/x-ms-asf"),
            ("page.xhtml", "application/xhtml+xml"),
            ("dolby.eac3", "audio/eac3"),
            ("dolby.ec3", "audio/eac3"),
            ("opus.weba", "audio/webm"),
            ("track.mka", "audio/x-matroska"),
            ("win.wma", "audio/x-ms-wma"),
            ("tune.mid", "audio/midi"),
            ("list.xspf", "application/xspf+xml"),
        ] {
            assert_eq!(content_type(name.as_bytes()), want, "{name}");
        }
    }

    #[test]
    fn every_table_entry_is_found_and_nothing_else() {
        for (e, t) in TABLE {
            assert_eq!(builtin(e), Some(*t), "{e}");
        }
        for e in ["", "dat", "zzzz", "MP4", "a"] {
            assert_eq!(builtin(e), None, "{e}");
        }
    }

    #[test]
    fn table_has_no_duplicate_extension() {
        let mut seen = std::collections::HashSet::new();
        for (e, t) in TABLE {
            assert!(seen.insert(*e), "{e} listed twice");
            assert_eq!(*e, e.to_ascii_lowercase());
            assert!(t.contains('/'), "{t}");
        }
    }

    #[test]
    fn overrides_add_and_replace() {
        let cfg: Vec<(String, String)> = vec![
            ("M4S".into(), "video/mp4".into()),
            (".key".into(), "application/pgp-keys".into()),
        ];
        let m = MediaTypes::new(cfg.iter().map(|(a, b)| (a, b)));
        assert_eq!(m.for_name(b"seg.m4s"), "video/mp4");
        assert_eq!(m.for_name(b"x/aes.KEY"), "application/pgp-keys");
        assert_eq!(m.for_name(b"a.ts"), "video/mp2t");
        assert_eq!(m.for_name(b"noext"), DEFAULT);
        assert_eq!(extension(b"a.b/c.Tar").as_deref(), Some("tar"));
        assert_eq!(extension(b"a.b/c"), None);
    }
}
