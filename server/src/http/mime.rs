//! Content-Type from the file name's extension (case-insensitive); unknown ->
//! `application/octet-stream`. A static table; no filesystem sniffing.

/// The media type for a file name (the last path component is enough).
pub fn content_type(name: &[u8]) -> &'static str {
    let ext = match name.iter().rposition(|&b| b == b'.') {
        Some(i) if !name[i + 1..].contains(&b'/') => &name[i + 1..],
        _ => return DEFAULT,
    };
    let ext = match std::str::from_utf8(ext) {
        Ok(e) if e.len() <= 8 => e.to_ascii_lowercase(),
        _ => return DEFAULT,
    };
    TABLE
        .iter()
        .find(|(e, _)| *e == ext)
        .map(|(_, t)| *t)
        .unwrap_or(DEFAULT)
}

const DEFAULT: &str = "application/octet-stream";

const TABLE: &[(&str, &str)] = &[
    ("html", "text/html; charset=utf-8"),
    ("htm", "text/html; charset=utf-8"),
    ("css", "text/css; charset=utf-8"),
    ("js", "text/javascript; charset=utf-8"),
    ("mjs", "text/javascript; charset=utf-8"),
    ("json", "application/json"),
    ("txt", "text/plain; charset=utf-8"),
    ("csv", "text/csv; charset=utf-8"),
    ("xml", "application/xml"),
    ("svg", "image/svg+xml"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("avif", "image/avif"),
    ("ico", "image/x-icon"),
    ("bmp", "image/bmp"),
    ("tif", "image/tiff"),
    ("tiff", "image/tiff"),
    ("mp4", "video/mp4"),
    ("m4v", "video/mp4"),
    ("webm", "video/webm"),
    ("mkv", "video/x-matroska"),
    ("mov", "video/quicktime"),
    ("avi", "video/x-msvideo"),
    ("ts", "video/mp2t"),
    ("m3u8", "application/vnd.apple.mpegurl"),
    ("mpd", "application/dash+xml"),
    ("mp3", "audio/mpeg"),
    ("m4a", "audio/mp4"),
    ("aac", "audio/aac"),
    ("ogg", "audio/ogg"),
    ("oga", "audio/ogg"),
    ("ogv", "video/ogg"),
    ("opus", "audio/opus"),
    ("flac", "audio/flac"),
    ("wav", "audio/wav"),
    ("pdf", "application/pdf"),
    ("zip", "application/zip"),
    ("gz", "application/gzip"),
    ("tar", "application/x-tar"),
    ("wasm", "application/wasm"),
    ("woff", "font/woff"),
    ("woff2", "font/woff2"),
    ("ttf", "font/ttf"),
    ("otf", "font/otf"),
    ("bin", "application/octet-stream"),
];

#[cfg(test)]
mod tests {
    use super::content_type;

    #[test]
    fn by_extension() {
        assert_eq!(content_type(b"a/b/movie.MP4"), "video/mp4");
        assert_eq!(content_type(b"index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type(b"noext"), "application/octet-stream");
        assert_eq!(content_type(b"dir.d/noext"), "application/octet-stream");
    }
}
