//! What browsers, video players and CDNs expect of a media origin (issue 13), over real sockets
//! against the real binary: headers by route and media type, CORS and preflights, precompressed
//! siblings, multipart ranges, RFC 9110 preconditions, directory redirects and listings, media
//! types, inode ETags and the protocol edges (Host, versions, Expect).

mod common;

use common::*;
use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const ORIGIN: &str = "https://player.example";

struct Site {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    server: Server,
    seg: Vec<u8>,
    m3u8: Vec<u8>,
    m3u8_br: Vec<u8>,
    m3u8_gz: Vec<u8>,
}

fn write(root: &Path, rel: &str, data: &[u8]) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
}

fn site() -> Site {
    let dir = tempdir();
    let root = dir.path().join("lib");
    let seg = bytes(1000, 7);
    let m3u8 = b"#EXTM3U\n#EXT-X-VERSION:7\n".repeat(10);
    let m3u8_br = bytes(50, 8);
    let m3u8_gz = bytes(60, 9);
    write(&root, "v/seg1.m4s", &seg);
    write(&root, "v/index.m3u8", &m3u8);
    write(&root, "v/index.m3u8.br", &m3u8_br);
    write(&root, "v/index.m3u8.gz", &m3u8_gz);
    write(&root, "v/<b>&.ts", b"ts");
    // Its name reads as a character reference in an HTML attribute unless escaped.
    write(&root, "v/x&lt;y.txt", b"amp-lt");
    write(&root, "v/.hidden", b"x");
    write(&root, "v/sub.vtt", b"WEBVTT\n");
    write(&root, "v/aes.key", b"0123456789abcdef");
    write(&root, "v/p.jxl", b"jxl");
    write(&root, "docs/index.html", b"<p>docs</p>");
    write(&root, "plain/data.bin", &bytes(100, 3));
    write(&root, "plain/sub/a.txt", b"a");
    fs::create_dir_all(root.join("v/season 1")).unwrap();
    // The options as a user writes them; listeners and admin from the harness's base config.
    let toml = format!(
        r#"
[open_file_cache]
max_entries = 0
[http]
max_ranges = 4
[http.media_types]
key = "application/x-test-key"
[http.media_headers.m4s]
cache_control = "public, max-age=31536000, immutable"
[http.media_headers."application/vnd.apple.mpegurl"]
cache_control = "max-age=2"
expires_secs = 2

[[volumes]]
name = "lib"
path = "{root}"

[[routes]]
prefix = "/"
volume = "lib"
[routes.http]
precompressed = ["br", "gzip"]
listing = true
[routes.http.headers]
add = {{ "X-Content-Type-Options" = "nosniff" }}
[routes.http.cors]
allow_origins = ["{ORIGIN}"]
max_age_secs = 600

[[routes]]
prefix = "/plain"
volume = "lib"
"#,
        root = root.display()
    );
    let base = config(1);
    let cfg = Config {
        listeners: base.listeners,
        admin: base.admin,
        workers: 1,
        ..Config::from_toml(&toml).expect("the example parses")
    };
    let server = Server::start(&cfg);
    Site {
        _dir: dir,
        root,
        server,
        seg,
        m3u8,
        m3u8_br,
        m3u8_gz,
    }
}

impl Site {
    fn ask(&self, method: &str, path: &str, headers: &[&str]) -> Response {
        let mut c = self.server.connect();
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: t\r\n");
        for h in headers {
            req.push_str(h);
            req.push_str("\r\n");
        }
        req.push_str("\r\n");
        c.send(req.as_bytes());
        c.response(method == "HEAD").expect("response")
    }

    fn get(&self, path: &str, headers: &[&str]) -> Response {
        self.ask("GET", path, headers)
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn vary(r: &Response) -> Vec<String> {
    r.header("Vary")
        .map(|v| v.split(',').map(|t| t.trim().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn headers_by_route_and_media_type_only_where_configured() {
    let s = site();
    let r = s.get("/v/seg1.m4s", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Type"), Some("video/iso.segment"));
    assert_eq!(
        r.header("Cache-Control"),
        Some("public, max-age=31536000, immutable")
    );
    assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"));
    assert_eq!(r.header("Expires"), None);
    assert_eq!(vary(&r), vec!["Origin", "Accept-Encoding"]);
    // So does an error of that route (README: every response of such a route).
    let r = s.get("/v/missing.m4s", &[]);
    assert_eq!(r.status, 404);
    assert_eq!(vary(&r), vec!["Origin", "Accept-Encoding"]);
    let r = s.get("/v/index.m3u8", &[]);
    assert_eq!(r.body, s.m3u8);
    assert_eq!(
        r.header("Content-Type"),
        Some("application/vnd.apple.mpegurl")
    );
    assert_eq!(r.header("Cache-Control"), Some("max-age=2"));
    let expires = date(r.header("Expires").expect("Expires"));
    assert!((expires - (now() + 2)).abs() <= 2, "Expires {expires}");
    // A 304 repeats them (RFC 9110 §15.4.5).
    let etag = r.header("ETag").unwrap().to_string();
    let r = s.get("/v/index.m3u8", &[&format!("If-None-Match: {etag}")]);
    assert_eq!(r.status, 304);
    assert_eq!(r.header("Cache-Control"), Some("max-age=2"));
    assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"));
    // A route without options: only what the global media table says, nothing else.
    let r = s.get(
        "/plain/data.bin",
        &[&format!("Origin: {ORIGIN}"), "Accept-Encoding: br"],
    );
    assert_eq!(r.status, 200);
    for absent in [
        "Cache-Control",
        "Expires",
        "Vary",
        "X-Content-Type-Options",
        "Access-Control-Allow-Origin",
        "Content-Encoding",
    ] {
        assert_eq!(r.header(absent), None, "{absent}");
    }
}

fn date(s: &str) -> i64 {
    content_server::http::date::parse(s).expect("an HTTP date")
}

#[test]
fn cors_answers_and_preflights() {
    let s = site();
    let r = s.get("/v/seg1.m4s", &[&format!("Origin: {ORIGIN}")]);
    assert_eq!(r.header("Access-Control-Allow-Origin"), Some(ORIGIN));
    assert_eq!(
        r.header("Access-Control-Expose-Headers"),
        Some("Content-Length, Content-Range, Accept-Ranges, ETag")
    );
    assert!(vary(&r).contains(&"Origin".to_string()));
    let r = s.get("/v/seg1.m4s", &["Origin: https://evil.example"]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Access-Control-Allow-Origin"), None);
    // Errors carry CORS too, so a player can read the status.
    let r = s.get("/v/missing.m4s", &[&format!("Origin: {ORIGIN}")]);
    assert_eq!(r.status, 404);
    assert_eq!(r.header("Access-Control-Allow-Origin"), Some(ORIGIN));
    // Preflight.
    let r = s.ask(
        "OPTIONS",
        "/v/seg1.m4s",
        &[
            &format!("Origin: {ORIGIN}"),
            "Access-Control-Request-Method: GET",
            "Access-Control-Request-Headers: range",
        ],
    );
    assert_eq!(r.status, 204);
    assert_eq!(r.header("Access-Control-Allow-Origin"), Some(ORIGIN));
    assert_eq!(r.header("Access-Control-Allow-Methods"), Some("GET, HEAD"));
    assert_eq!(r.header("Access-Control-Allow-Headers"), Some("Range"));
    assert_eq!(r.header("Access-Control-Max-Age"), Some("600"));
    assert!(r.body.is_empty());
    // Like every response of the route, it says what it varies by.
    assert_eq!(vary(&r), vec!["Origin", "Accept-Encoding"]);
    // A route without CORS: still 405.
    let r = s.ask(
        "OPTIONS",
        "/plain/data.bin",
        &[&format!("Origin: {ORIGIN}")],
    );
    assert_eq!(r.status, 405);
    assert_eq!(r.header("Allow"), Some("GET, HEAD"));
    let r = s.ask("DELETE", "/v/seg1.m4s", &[]);
    assert_eq!(
        (r.status, r.header("Allow")),
        (405, Some("GET, HEAD, OPTIONS"))
    );
    // A 405 of the route too, with its CORS headers (a script can read the status).
    let r = s.ask("POST", "/v/seg1.m4s", &[&format!("Origin: {ORIGIN}")]);
    assert_eq!(r.status, 405);
    assert_eq!(vary(&r), vec!["Origin", "Accept-Encoding"]);
    assert_eq!(r.header("Access-Control-Allow-Origin"), Some(ORIGIN));
}

#[test]
fn precompressed_siblings() {
    let s = site();
    let plain = s.get("/v/index.m3u8", &[]);
    let r = s.get(
        "/v/index.m3u8",
        &["Accept-Encoding: gzip, deflate, br, zstd"],
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Encoding"), Some("br"));
    assert_eq!(
        r.header("Content-Type"),
        Some("application/vnd.apple.mpegurl")
    );
    assert_eq!(r.body, s.m3u8_br);
    assert!(vary(&r).contains(&"Accept-Encoding".to_string()));
    let br_tag = r.header("ETag").unwrap().to_string();
    assert!(br_tag.ends_with("-br\""), "{br_tag}");
    assert_ne!(Some(br_tag.as_str()), plain.header("ETag"));
    let r = s.get("/v/index.m3u8", &["Accept-Encoding: gzip"]);
    assert_eq!(
        (r.header("Content-Encoding"), r.body.clone()),
        (Some("gzip"), s.m3u8_gz.clone())
    );
    let r = s.get("/v/index.m3u8", &["Accept-Encoding: br;q=0.1, gzip"]);
    assert_eq!(r.header("Content-Encoding"), Some("gzip"));
    let r = s.get("/v/index.m3u8", &["Accept-Encoding: identity"]);
    assert_eq!(
        (r.header("Content-Encoding"), r.body.clone()),
        (None, s.m3u8.clone())
    );
    // Ranges are over the encoded bytes; the sibling's ETag validates.
    let r = s.get(
        "/v/index.m3u8",
        &[
            "Accept-Encoding: br",
            "Range: bytes=0-9",
            &format!("If-Range: {br_tag}"),
        ],
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.header("Content-Range"), Some("bytes 0-9/50"));
    assert_eq!(r.body, &s.m3u8_br[..10]);
    let r = s.get(
        "/v/index.m3u8",
        &["Accept-Encoding: br", &format!("If-None-Match: {br_tag}")],
    );
    assert_eq!(r.status, 304);
    // No sibling: the file itself.
    let r = s.get("/v/seg1.m4s", &["Accept-Encoding: br, gzip"]);
    assert_eq!((r.header("Content-Encoding"), r.body.len()), (None, 1000));
}

/// Split a multipart/byteranges body into (Content-Range, data) parts.
fn parts(r: &Response) -> Vec<(String, Vec<u8>)> {
    let ct = r.header("Content-Type").unwrap();
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .expect(ct);
    let delim = format!("--{boundary}");
    let mut out = Vec::new();
    let mut rest = r.body.as_slice();
    loop {
        let at = find(rest, delim.as_bytes()).expect("delimiter");
        rest = &rest[at + delim.len()..];
        if rest.starts_with(b"--") {
            assert_eq!(rest, b"--\r\n");
            return out;
        }
        let head_end = find(rest, b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&rest[..head_end]).to_string();
        let cr = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: "))
            .unwrap()
            .to_string();
        let (a, b) = cr
            .strip_prefix("bytes ")
            .unwrap()
            .split_once('/')
            .unwrap()
            .0
            .split_once('-')
            .unwrap();
        let len = b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1;
        let data = rest[head_end + 4..head_end + 4 + len].to_vec();
        assert!(head.contains("Content-Type: video/iso.segment"), "{head}");
        out.push((cr, data));
        rest = &rest[head_end + 4 + len..];
        assert!(rest.starts_with(b"\r\n"));
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn multipart_ranges_and_abusive_sets() {
    let s = site();
    let r = s.get("/v/seg1.m4s", &["Range: bytes=990-,0-1,10-19"]);
    assert_eq!(r.status, 206);
    assert_eq!(
        r.header("Content-Length")
            .unwrap()
            .parse::<usize>()
            .unwrap(),
        r.body.len()
    );
    assert_eq!(r.header("Content-Range"), None);
    let p = parts(&r);
    assert_eq!(
        p,
        vec![
            ("bytes 990-999/1000".to_string(), s.seg[990..].to_vec()),
            ("bytes 0-1/1000".to_string(), s.seg[..2].to_vec()),
            ("bytes 10-19/1000".to_string(), s.seg[10..20].to_vec()),
        ]
    );
    // HEAD: the same head, no body.
    let h = s.ask("HEAD", "/v/seg1.m4s", &["Range: bytes=990-,0-1,10-19"]);
    assert_eq!(h.status, 206);
    assert_eq!(h.header("Content-Length"), r.header("Content-Length"));
    // Safari's probe.
    let r = s.get("/v/seg1.m4s", &["Range: bytes=0-1"]);
    assert_eq!((r.status, r.body.as_slice()), (206, &s.seg[..2]));
    assert_eq!(r.header("Content-Range"), Some("bytes 0-1/1000"));
    // Overlapping, or more than max_ranges (4): the whole file.
    for abusive in [
        "bytes=0-500,400-999",
        "bytes=0-,0-",
        "bytes=0-0,2-2,4-4,6-6,8-8",
    ] {
        let r = s.get("/v/seg1.m4s", &[&format!("Range: {abusive}")]);
        assert_eq!((r.status, r.body.len()), (200, 1000), "{abusive}");
    }
    let r = s.get("/v/seg1.m4s", &["Range: bytes=5000-,6000-"]);
    assert_eq!(r.status, 416);
}

#[test]
fn preconditions_in_rfc_order() {
    let s = site();
    let r = s.get("/v/seg1.m4s", &[]);
    let etag = r.header("ETag").unwrap().to_string();
    let lm = r.header("Last-Modified").unwrap().to_string();
    assert_eq!(s.get("/v/seg1.m4s", &["If-Match: \"nope\""]).status, 412);
    assert_eq!(
        s.get("/v/seg1.m4s", &[&format!("If-Match: {etag}")]).status,
        200
    );
    assert_eq!(s.get("/v/seg1.m4s", &["If-Match: *"]).status, 200);
    assert_eq!(
        s.get(
            "/v/seg1.m4s",
            &["If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT"]
        )
        .status,
        412
    );
    assert_eq!(
        s.get("/v/seg1.m4s", &[&format!("If-Unmodified-Since: {lm}")])
            .status,
        200
    );
    // If-Match fails before If-None-Match would give 304.
    let inm = format!("If-None-Match: {etag}");
    assert_eq!(
        s.get("/v/seg1.m4s", &["If-Match: \"nope\"", &inm]).status,
        412
    );
    assert_eq!(
        s.get("/v/seg1.m4s", &[&format!("If-Modified-Since: {lm}")])
            .status,
        304
    );
    // A date later than the server's clock is ignored.
    let future = content_server::http::date::format(now() + 86_400);
    let r = s.get("/v/seg1.m4s", &[&format!("If-Modified-Since: {future}")]);
    assert_eq!((r.status, r.body.len()), (200, 1000));
}

#[test]
fn directories_redirect_and_list() {
    let s = site();
    let r = s.get("/v", &[]);
    assert_eq!((r.status, r.header("Location")), (301, Some("/v/")));
    assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"));
    let r = s.get("/docs?lang=en&x", &[]);
    assert_eq!(
        (r.status, r.header("Location")),
        (301, Some("/docs/?lang=en&x"))
    );
    let r = s.get("/v/season%201", &[]);
    assert_eq!(
        (r.status, r.header("Location")),
        (301, Some("/v/season%201/"))
    );
    // Would be a scheme-relative URL if echoed.
    let r = s.get("//v", &[]);
    assert_eq!((r.status, r.header("Location")), (301, Some("/v/")));
    assert_eq!(s.get("/docs/", &[]).body, b"<p>docs</p>");
    let r = s.get("/v/", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Type"), Some("text/html; charset=utf-8"));
    let html = String::from_utf8(r.body.clone()).unwrap();
    assert!(
        html.contains("<a href=\"./seg1.m4s\">seg1.m4s</a>"),
        "{html}"
    );
    assert!(
        html.contains("<a href=\"./season%201/\">season 1/</a>"),
        "{html}"
    );
    assert!(html.contains("&lt;b&gt;&amp;.ts"), "{html}");
    // Every link, read as a browser reads an attribute (character references decoded), leads
    // to the entry it names.
    let hrefs: Vec<String> = html
        .split("<a href=\"./")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(|h| {
            h.replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&amp;", "&")
        })
        .collect();
    let amp = hrefs
        .iter()
        .find(|h| h.starts_with('x'))
        .expect("x&lt;y.txt listed");
    let r = s.get(&format!("/v/{amp}"), &[]);
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"amp-lt"[..]),
        "{amp}"
    );
    for h in &hrefs {
        assert_ne!(s.get(&format!("/v/{h}"), &[]).status, 404, "{h}");
    }
    assert!(!html.contains("<b>") && !html.contains("hidden"), "{html}");
    let r = s.get("/v/?format=json", &[]);
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    let doc: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let seg = doc["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "seg1.m4s")
        .expect("seg1.m4s listed");
    assert_eq!(seg["size"], 1000);
    assert_eq!(seg["type"], "file");
    assert!(seg["mtime"].as_i64().unwrap() > 1_000_000_000);
    let r = s.get("/v/", &["Accept: application/json"]);
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    // Listings are off by default.
    assert_eq!(s.get("/plain/sub/", &[]).status, 404);
    assert_eq!(s.get("/plain/sub", &[]).status, 301);
}

#[test]
fn a_truncated_listing_shows_the_first_entries_in_its_order() {
    // More entries than http.listing_max_entries (default 1000): the listing shows the first
    // 1000 in its own order (directories first, then by name), not whichever readdir met first.
    let s = site();
    let many = s.root.join("many");
    fs::create_dir_all(&many).unwrap();
    for i in (0..1500).rev() {
        fs::write(many.join(format!("f{i:04}")), b"x").unwrap();
    }
    fs::create_dir(many.join("zz-late-dir")).unwrap();
    fs::create_dir(many.join("a-dir")).unwrap();
    let r = s.get("/many/?format=json", &[]);
    assert_eq!(r.status, 200);
    let doc: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(doc["truncated"], true);
    let names: Vec<&str> = doc["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    let mut want = vec!["a-dir".to_string(), "zz-late-dir".to_string()];
    want.extend((0..998).map(|i| format!("f{i:04}")));
    let differ = names.iter().zip(&want).position(|(a, b)| a != b);
    if let Some(i) = differ {
        panic!("entry {i} is {} where {} belongs", names[i], want[i]);
    }
    assert_eq!(names.len(), want.len());
    let html = s.get("/many/", &[]).text();
    assert!(html.contains("Listing truncated."), "{html}");
    assert!(html.contains(">f0997<") && !html.contains(">f0998<"));
}

#[test]
fn media_types_and_overrides() {
    let s = site();
    for (path, want) in [
        ("/v/sub.vtt", "text/vtt; charset=utf-8"),
        ("/v/aes.key", "application/x-test-key"),
        ("/v/p.jxl", "image/jxl"),
        ("/v/seg1.m4s", "video/iso.segment"),
    ] {
        assert_eq!(
            s.get(path, &[]).header("Content-Type"),
            Some(want),
            "{path}"
        );
    }
    // Types nginx's mime.types knows (and two it does not: eac3, weba), on files written now.
    for (name, want) in [
        ("old.mpg", "video/mpeg"),
        ("old.MPEG", "video/mpeg"),
        ("phone.3gp", "video/3gpp"),
        ("phone.3gpp", "video/3gpp"),
        ("flash.flv", "video/x-flv"),
        ("win.wmv", "video/x-ms-wmv"),
        ("page.xhtml", "application/xhtml+xml"),
        ("dolby.eac3", "audio/eac3"),
        ("opus.weba", "audio/webm"),
    ] {
        write(&s.root, &format!("types/{name}"), b"x");
        assert_eq!(
            s.get(&format!("/types/{name}"), &[]).header("Content-Type"),
            Some(want),
            "{name}"
        );
    }
}

#[test]
fn a_replaced_file_with_the_same_size_and_mtime_is_not_304() {
    let s = site();
    let set = |rel: &str, data: &[u8]| {
        let tmp = s.root.join("v/.tmp");
        fs::write(&tmp, data).unwrap();
        let f = fs::File::options().write(true).open(&tmp).unwrap();
        f.set_modified(UNIX_EPOCH + Duration::from_secs(1)).unwrap();
        drop(f);
        fs::rename(&tmp, s.root.join(rel)).unwrap();
    };
    set("v/pinned.js", b"old 1234");
    let r = s.get("/v/pinned.js", &[]);
    assert_eq!(
        r.header("Last-Modified"),
        Some("Thu, 01 Jan 1970 00:00:01 GMT")
    );
    let old = r.header("ETag").unwrap().to_string();
    set("v/pinned.js", b"new 5678");
    let r = s.get("/v/pinned.js", &[&format!("If-None-Match: {old}")]);
    assert_eq!((r.status, r.body.as_slice()), (200, b"new 5678".as_slice()));
    assert_ne!(r.header("ETag"), Some(old.as_str()));
}

#[test]
fn protocol_edges() {
    let s = site();
    let raw = |req: &str| {
        let mut c = s.server.connect();
        c.send(req.as_bytes());
        let r = c.response(false).unwrap();
        (r, c)
    };
    for host in ["a b", "u@h", "h/x", "[::1"] {
        let (r, _) = raw(&format!("GET /v/sub.vtt HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        assert_eq!(r.status, 400, "{host}");
    }
    let (r, _) = raw("GET /v/sub.vtt HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n");
    assert_eq!(r.status, 200);
    // HTTP/1.2: answered as HTTP/1.1 (keep-alive, Host required).
    let mut c = s.server.connect();
    c.send(b"GET /v/sub.vtt HTTP/1.2\r\nHost: t\r\n\r\nGET /v/sub.vtt HTTP/1.1\r\nHost: t\r\n\r\n");
    let head = {
        let r = c.response(false).unwrap();
        assert_eq!(r.status, 200);
        r
    };
    assert_eq!(head.header("Connection"), Some("keep-alive"));
    assert_eq!(c.response(false).unwrap().status, 200);
    let mut c = s.server.connect();
    c.send(b"GET /v/sub.vtt HTTP/1.2\r\nHost: t\r\n\r\n");
    let mut first = [0u8; 9];
    std::io::Read::read_exact(&mut c.stream, &mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 ");
    let (r, _) = raw("GET /v/sub.vtt HTTP/2.0\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 505);
    // Expect: 100-continue with a body never sent: the final answer comes at once, no 100.
    let (r, mut c) = raw(
        "GET /v/sub.vtt HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
    );
    assert_eq!((r.status, r.body.as_slice()), (200, b"WEBVTT\n".as_slice()));
    assert!(c.closed_within(Duration::from_secs(5)));
    let (r, _) = raw("GET /v/sub.vtt HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n\r\n");
    assert_eq!(r.status, 200);
    let (r, _) = raw("GET /v/sub.vtt HTTP/1.1\r\nHost: t\r\nExpect: teapot\r\n\r\n");
    assert_eq!(r.status, 417);
}

/// A listing has no validator: `If-None-Match: *` is a 304 (there is a representation), an
/// `If-Match` other than `*` a 412 (none of its tags can match); other preconditions are
/// answered with the listing.
#[test]
fn a_listing_answers_preconditions() {
    let s = site();
    fs::create_dir_all(s.root.join("pre")).unwrap();
    fs::write(s.root.join("pre/a.txt"), b"a").unwrap();
    assert_eq!(s.get("/pre/", &[]).status, 200);
    assert_eq!(s.get("/pre/", &["If-None-Match: *"]).status, 304);
    assert_eq!(s.get("/pre/", &["If-Match: \"x\""]).status, 412);
    assert_eq!(s.get("/pre/", &["If-Match: *"]).status, 200);
    assert_eq!(s.get("/pre/", &["If-None-Match: \"x\""]).status, 200);
    // The 304 repeats what the 200 has (media headers by type, Vary), the 412 varies the same.
    let ok = s.get("/pre/", &[]);
    let not_modified = s.get("/pre/", &["If-None-Match: *"]);
    for h in ["X-Content-Type-Options", "Vary"] {
        assert_eq!(not_modified.header(h), ok.header(h), "{h}");
    }
    assert_eq!(
        s.get("/pre/", &["If-Match: \"x\""]).header("Vary"),
        ok.header("Vary")
    );
}
