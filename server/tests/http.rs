//! HTTP/1.1 behaviour of the real server over raw sockets: GET/HEAD, 405, keep-alive,
//! pipelining, 400/414/431, timeouts, validators and 304, ranges, index files, bodies larger
//! than a sendfile chunk (offload always and never), and max_connections.

mod common;

use common::*;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn site() -> tempfile::TempDir {
    let d = tempdir();
    std::fs::write(d.path().join("hello.txt"), b"hello world\n").unwrap();
    std::fs::write(d.path().join("clip.MP4"), bytes(1000, 1)).unwrap();
    std::fs::write(d.path().join("blob"), bytes(100, 2)).unwrap();
    std::fs::create_dir(d.path().join("docs")).unwrap();
    std::fs::write(d.path().join("docs/index.html"), b"<p>docs</p>").unwrap();
    std::fs::create_dir(d.path().join("empty")).unwrap();
    d
}

/// A server with one volume `name` at `dir` on `workers` loops, its config changed by `edit`.
fn serve_with(
    dir: &std::path::Path,
    name: &str,
    workers: usize,
    edit: impl FnOnce(&mut Config),
) -> Server {
    let mut cfg = one_volume(workers, volume(name, dir));
    edit(&mut cfg);
    Server::start(&cfg)
}

#[test]
fn get_and_head_with_headers() {
    let d = site();
    let s = Server::root(d.path(), &[]);
    let r = s.get("/hello.txt");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello world\n");
    assert_eq!(r.header("Content-Length"), Some("12"));
    assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("Accept-Ranges"), Some("bytes"));
    assert!(r.header("ETag").unwrap().starts_with('"'));
    assert!(r.header("Last-Modified").unwrap().ends_with(" GMT"));
    assert!(r.header("Date").is_some());
    assert_eq!(s.get("/clip.MP4").header("Content-Type"), Some("video/mp4"));
    assert_eq!(
        s.get("/blob").header("Content-Type"),
        Some("application/octet-stream")
    );

    let mut c = s.connect();
    c.send(b"HEAD /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let h = c.response(true).unwrap();
    assert_eq!(h.status, 200);
    assert_eq!(h.header("Content-Length"), Some("12"));
    // No body follows a HEAD response: the next response starts right after the head.
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).unwrap().body, b"hello world\n");
}

#[test]
fn other_methods_get_405_with_allow() {
    let d = site();
    let s = Server::root(d.path(), &[]);
    for m in ["POST", "PUT", "DELETE", "OPTIONS", "BREW"] {
        let mut c = s.connect();
        c.send(format!("{m} /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        let r = c.response(false).unwrap();
        assert_eq!(r.status, 405, "{m}");
        assert_eq!(r.header("Allow"), Some("GET, HEAD"));
    }
}

#[test]
fn options_asterisk_is_answered_and_other_methods_with_asterisk_are_400() {
    // RFC 9112 §3.2.4: `OPTIONS *` asks about the server; any other method with `*` is malformed.
    let d = site();
    let s = Server::root(d.path(), &[]);
    let mut c = s.connect();
    c.send(b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(false).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Allow"), Some("GET, HEAD, OPTIONS"));
    assert_eq!(r.header("Content-Length"), Some("0"));
    assert!(r.body.is_empty());
    // The connection stays usable: the next response starts right after that head.
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).unwrap().body, b"hello world\n");
    for m in ["GET", "HEAD", "POST"] {
        let mut c = s.connect();
        c.send(format!("{m} * HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        assert_eq!(c.response(m == "HEAD").unwrap().status, 400, "{m}");
    }
}

#[test]
fn absolute_form_scheme_is_case_insensitive() {
    // RFC 9112 §3.2.2 with RFC 3986 §3.1: `HTTP://` is the scheme `http`.
    let d = site();
    let s = Server::root(d.path(), &[]);
    for target in [
        "http://example/hello.txt",
        "HTTP://example/hello.txt",
        "Http://example/hello.txt",
        "HTTPS://example/hello.txt?x=1",
    ] {
        let mut c = s.connect();
        c.send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        let r = c.response(false).unwrap();
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, b"hello world\n".as_slice()),
            "{target}"
        );
    }
    let mut c = s.connect();
    c.send(b"GET FTP://example/hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).unwrap().status, 400);
}

#[test]
fn keep_alive_and_pipelining() {
    let d = site();
    let s = Server::root(d.path(), &[]);
    let mut c = s.connect();
    for _ in 0..3 {
        c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        let r = c.response(false).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("Connection"), Some("keep-alive"));
    }
    // Three requests in one write, answered in order.
    c.send(
        b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /nope HTTP/1.1\r\nHost: t\r\n\r\nGET /docs/ HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(c.response(false).unwrap().body, b"hello world\n");
    assert_eq!(c.response(false).unwrap().status, 404);
    let last = c.response(false).unwrap();
    assert_eq!(last.body, b"<p>docs</p>");
    assert_eq!(last.header("Connection"), Some("close"));
    assert!(c.closed_within(Duration::from_secs(2)));
    // HTTP/1.0 without keep-alive closes.
    let mut c = s.connect();
    c.send(b"GET /hello.txt HTTP/1.0\r\n\r\n");
    assert_eq!(c.response(false).unwrap().status, 200);
    assert!(c.closed_within(Duration::from_secs(2)));
}

/// Sends `raw` in pieces of `piece` bytes, each its own segment (the server reads them one by one).
fn send_in_pieces(c: &mut Conn, raw: &[u8], piece: usize) {
    c.stream.set_nodelay(true).unwrap();
    for p in raw.chunks(piece) {
        c.send(p);
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn heads_split_over_many_reads_and_pipelined_across_reads() {
    // Request bytes pass through the worker's buffer and only unconsumed bytes stay with the
    // connection: heads split over many reads, heads split across pipelined requests, and heads
    // larger than what one read returns must parse exactly as a head sent in one write.
    let d = site();
    let s = serve_with(d.path(), "site", 1, |c| c.limits.max_header_bytes = 1024);
    let mut c = s.connect();
    send_in_pieces(&mut c, b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n", 1);
    assert_eq!(c.response(false).unwrap().body, b"hello world\n");
    // Two pipelined requests whose boundary falls inside a piece, then a third in pieces.
    let two =
        b"GET /nope HTTP/1.1\r\nHost: t\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /hel";
    send_in_pieces(&mut c, two, 7);
    assert_eq!(c.response(false).unwrap().status, 404);
    assert_eq!(c.response(false).unwrap().body, b"hello world\n");
    send_in_pieces(&mut c, b"lo.txt HTTP/1.1\r\nHost: t\r\n\r\n", 5);
    assert_eq!(c.response(false).unwrap().body, b"hello world\n");
    // A head just under the limit, in pieces, still parses; one over it is 431 and closes.
    let fits = format!(
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\nX-Pad: {}\r\n\r\n",
        "p".repeat(1023 - 45)
    );
    assert_eq!(fits.len(), 1023);
    send_in_pieces(&mut c, fits.as_bytes(), 100);
    assert_eq!(c.response(false).unwrap().status, 200);
    let over = format!(
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\nX-Pad: {}\r\n\r\n",
        "p".repeat(1500)
    );
    send_in_pieces(&mut c, over.as_bytes(), 100);
    assert_eq!(c.response(false).unwrap().status, 431);
    assert!(c.closed_within(Duration::from_secs(2)));
    // The same over-long head in one write on a fresh connection: 431 too.
    let mut c = s.connect();
    c.send(over.as_bytes());
    assert_eq!(c.response(false).unwrap().status, 431);
}

#[test]
fn malformed_and_oversized_requests() {
    let d = site();
    let s = Server::root(d.path(), &[]);
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"GARBAGE\r\n\r\n".to_vec(), 400),
        (b"GET /hello.txt HTTP/1.1\r\n\r\n".to_vec(), 400), // no Host
        (b"GET hello.txt HTTP/1.1\r\nHost: t\r\n\r\n".to_vec(), 400),
        (
            b"GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n".to_vec(),
            400,
        ),
        (b"GET / HTTP/2.0\r\nHost: t\r\n\r\n".to_vec(), 505), // RFC 9110 §15.6.6
        (
            format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(9000)).into_bytes(),
            414,
        ),
        (
            format!(
                "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
                "b".repeat(9000)
            )
            .into_bytes(),
            431,
        ),
        (
            {
                let mut v = b"GET / HTTP/1.1\r\nHost: t\r\n".to_vec();
                for i in 0..150 {
                    v.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
                }
                v.extend_from_slice(b"\r\n");
                v
            },
            431,
        ),
    ];
    for (raw, want) in cases {
        let mut c = s.connect();
        c.send(&raw);
        let r = c.response(false).unwrap();
        assert_eq!(
            r.status,
            want,
            "{}",
            String::from_utf8_lossy(&raw[..raw.len().min(60)])
        );
        assert!(
            c.closed_within(Duration::from_secs(2)),
            "connection stays open after {want}"
        );
    }
    // The server is still fine.
    assert_eq!(s.get("/hello.txt").status, 200);
}

/// A HEAD request the server refuses from its head (two Host fields, a target too long, an
/// expectation, a version) gets the error's head and no body (RFC 9110 §9.3.2): the bytes
/// after the blank line would be read as the next response by a client or proxy.
#[test]
fn malformed_head_requests_get_no_body() {
    use std::io::{Read, Write};
    let d = site();
    let s = Server::root(d.path(), &[]);
    let cases: Vec<(String, u16)> = vec![
        (
            "HEAD /hello.txt HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n".into(),
            400,
        ),
        ("HEAD * HTTP/1.1\r\nHost: x\r\n\r\n".into(), 400),
        // Two credentials: which one a cache route would forward is a guess (nginx: 400 too).
        (
            "HEAD /hello.txt HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n".into(),
            400,
        ),
        (
            format!("HEAD /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(9000)),
            414,
        ),
        (
            format!(
                "HEAD / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
                "b".repeat(9000)
            ),
            431,
        ),
        (
            "HEAD / HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n".into(),
            417,
        ),
        ("HEAD / HTTP/2.0\r\nHost: x\r\n\r\n".into(), 505),
        // Split over two reads: the error is found in the second.
        (
            "HEAD /hello.txt HTTP/1.1\r\nHost: x\r\n|Host: y\r\n\r\n".into(),
            400,
        ),
    ];
    for (raw, want) in cases {
        let mut c = std::net::TcpStream::connect(s.addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        for (i, part) in raw.split('|').enumerate() {
            if i > 0 {
                std::thread::sleep(Duration::from_millis(100));
            }
            c.write_all(part.as_bytes()).expect("send");
        }
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        let text = String::from_utf8_lossy(&got);
        let what = &raw[..raw.len().min(40)];
        assert!(
            text.starts_with(&format!("HTTP/1.1 {want} ")),
            "{what}: {text}"
        );
        let end = text.find("\r\n\r\n").expect("a whole head") + 4;
        assert_eq!(
            &text[end..],
            "",
            "{what}: a body after the head of a HEAD answer"
        );
    }
    // A GET refused the same way still says why in its body.
    let mut c = s.connect();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n");
    let r = c.response(false).unwrap();
    assert_eq!(
        (r.status, r.body.as_slice()),
        (400, &b"400 Bad Request\n"[..])
    );
}

/// GET `path` through a receive buffer of `window` bytes, reading up to `window` bytes every
/// `pause` until the server ends the response: (the head's text, the body, how long it took).
fn read_slowly(
    addr: std::net::SocketAddr,
    path: &str,
    window: usize,
    pause: Duration,
) -> (String, Vec<u8>, Duration) {
    let (mut c, mut got) = partly_read(addr, path, "Connection: close\r\n", Some(window), 1);
    let mut buf = vec![0u8; window];
    let t = Instant::now();
    loop {
        std::thread::sleep(pause);
        match std::io::Read::read(&mut c, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let took = t.elapsed();
    let head = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let body = got.split_off(head);
    (String::from_utf8_lossy(&got).to_string(), body, took)
}

/// `send_timeout_secs` is how long a client may accept nothing, not how long a response
/// written in one piece may take: a 0.9 MB listing to a client reading 320 KB/s (about 3 s)
/// through a small window, with a 1 s send timeout, arrives whole. It was cut after 1 s.
#[test]
fn a_slow_reader_making_progress_gets_a_large_listing_whole() {
    let d = tempdir();
    let dir = d.path().join("many");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..3000 {
        std::fs::write(dir.join(format!("{i:06}-{}", "n".repeat(100))), b"").unwrap();
    }
    let s = serve_with(d.path(), "site", 1, |c| {
        let mut r = route("/", "site");
        r.http.listing = true;
        c.routes = vec![r];
        c.http.listing_max_entries = 10_000;
        c.limits.send_timeout_secs = 1;
        // (So the kernel does not take the whole listing at once.)
        c.listeners[0].notsent_lowat_bytes = 16 * 1024;
    });
    let (text, body, took) = read_slowly(s.addr, "/many/", 32 * 1024, Duration::from_millis(100));
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let len: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("a Content-Length");
    assert!(len > 800_000, "a listing of {len} bytes tests nothing");
    assert_eq!(body.len(), len, "cut after {took:?}");
    assert!(
        took > Duration::from_secs(2),
        "read in {took:?}: the test tests nothing"
    );
}

/// A steady reader slower than the kernel's wake-ups keeps its response: with
/// TCP_NOTSENT_LOWAT (2 MiB by default) the kernel wakes the writer only once less than half
/// that is unsent, which a client reading 700 KB/s takes about 1.5 s to bring about. With a
/// 1 s send timeout, the 3 MB file was cut after its first 2 MiB; the client took bytes all
/// the while, which is what the timeout is about.
#[test]
fn a_steady_reader_slower_than_the_kernels_wake_ups_gets_the_whole_file() {
    let d = tempdir();
    let body = bytes(3_000_000, 7);
    std::fs::write(d.path().join("big.bin"), &body).unwrap();
    let s = serve_with(d.path(), "site", 1, |c| {
        c.limits.send_timeout_secs = 1;
    });
    let (_, got, took) = read_slowly(s.addr, "/big.bin", 16 * 1024, Duration::from_millis(20));
    assert_eq!(got.len(), body.len(), "cut after {took:?}");
    assert!(got == body);
    assert!(
        took > Duration::from_secs(2),
        "read in {took:?}: the test tests nothing"
    );
}

/// A client that takes a trickle (13 KB/s, under the 64 KiB a send timeout of 1 s asks for)
/// is dropped at the send timeout: taking bytes extends a wait only by a real amount, or a
/// few bytes now and then would hold the connection for ever.
#[test]
fn a_trickling_reader_is_dropped_at_the_send_timeout() {
    let d = tempdir();
    std::fs::write(d.path().join("big.bin"), bytes(3_000_000, 8)).unwrap();
    let s = serve_with(d.path(), "site", 1, |c| {
        c.limits.send_timeout_secs = 1;
    });
    let active = || s.metrics().get("contentserver_connections_active", &[]);
    let (c, _) = partly_read(s.addr, "/big.bin", "Connection: close\r\n", Some(4096), 1);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        let mut c = c;
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(300));
                if matches!(std::io::Read::read(&mut c, &mut buf), Ok(0) | Err(_)) {
                    break;
                }
            }
        })
    };
    let dropped = wait_until(Duration::from_secs(5), || active() == 0.0);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    reader.join().expect("reader");
    assert!(dropped, "the trickling reader kept its connection for 5 s");
}

/// A client that reads nothing more is dropped at the send timeout, not after twice it: the
/// bytes its kernel takes into the receive buffer right after a write (the application reading
/// nothing) are no progress of the client's. With a 2 s send timeout it was dropped at 4 s.
#[test]
fn a_client_that_reads_nothing_is_dropped_at_the_send_timeout() {
    let d = tempdir();
    std::fs::write(d.path().join("big.bin"), bytes(60_000_000, 9)).unwrap();
    let s = serve_with(d.path(), "site", 1, |c| {
        c.limits.send_timeout_secs = 2;
    });
    let active = || s.metrics().get("contentserver_connections_active", &[]);
    let (c, _) = partly_read(s.addr, "/big.bin", "Connection: close\r\n", None, 1);
    let start = Instant::now();
    let dropped = wait_until(Duration::from_secs(6), || active() == 0.0);
    let took = start.elapsed();
    drop(c);
    assert!(dropped, "still connected after 6 s");
    assert!(
        took > Duration::from_millis(1800) && took < Duration::from_millis(3000),
        "dropped after {took:?} with a send timeout of 2 s"
    );
}

#[test]
fn header_read_and_keepalive_timeouts() {
    let d = site();
    let s = serve_with(d.path(), "site", 1, |c| {
        c.limits.header_read_timeout_secs = 1;
        c.limits.keepalive_timeout_secs = 1;
    });
    // A slow client that never finishes its head gets 408 and is closed.
    let mut c = s.connect();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHo");
    let t = Instant::now();
    let r = c.response(false).unwrap();
    assert_eq!(r.status, 408);
    assert!(
        t.elapsed() < Duration::from_millis(2500),
        "{:?}",
        t.elapsed()
    );
    assert!(c.closed_within(Duration::from_secs(2)));
    // An idle keep-alive connection is closed after the keep-alive timeout.
    let mut c = s.connect();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).unwrap().status, 200);
    let t = Instant::now();
    assert!(c.closed_within(Duration::from_secs(3)));
    assert!(
        t.elapsed() >= Duration::from_millis(800),
        "{:?}",
        t.elapsed()
    );
    // A connection that sends nothing at all is closed too.
    let mut c = s.connect();
    assert!(c.closed_within(Duration::from_secs(3)));
}

#[test]
fn conditional_requests() {
    let d = site();
    let s = Server::root(d.path(), &[]);
    let r = s.get("/hello.txt");
    let etag = r.header("ETag").unwrap().to_string();
    let lm = r.header("Last-Modified").unwrap().to_string();
    let ask = |hdr: &str| {
        let mut c = s.connect();
        c.send(format!("GET /hello.txt HTTP/1.1\r\nHost: t\r\n{hdr}\r\n\r\n").as_bytes());
        c.response(false).unwrap()
    };
    let r = ask(&format!("If-None-Match: {etag}"));
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    assert_eq!(r.header("ETag"), Some(etag.as_str()));
    assert_eq!(ask(&format!("If-None-Match: \"x\", W/{etag}")).status, 304);
    assert_eq!(ask("If-None-Match: \"other\"").status, 200);
    assert_eq!(ask(&format!("If-Modified-Since: {lm}")).status, 304);
    assert_eq!(
        ask("If-Modified-Since: Thu, 01 Jan 1970 00:00:00 GMT").status,
        200
    );
    // If-None-Match wins over If-Modified-Since.
    assert_eq!(
        ask(&format!(
            "If-None-Match: \"other\"\r\nIf-Modified-Since: {lm}"
        ))
        .status,
        200
    );
}

/// Set the mtime of `path` to `secs` seconds since the epoch.
fn set_mtime(path: &std::path::Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn a_future_mtime_is_sent_as_the_date() {
    // RFC 9110 §8.8.2.1: Last-Modified is never later than Date; a file from the future is
    // dated by the response, its date works as If-Modified-Since in the same second, and it is
    // no strong validator for If-Range (§13.1.5). The ETag keeps revalidating.
    let d = site();
    let future = d.path().join("future.txt");
    std::fs::write(&future, b"from the future").unwrap();
    set_mtime(&future, unix_now() + 86_400);
    let past = d.path().join("past.txt");
    std::fs::write(&past, b"from the past").unwrap();
    set_mtime(&past, unix_now() - 3600);
    let s = Server::root(d.path(), &[]);
    let mut c = s.connect();
    let mut ask = |path: &str, headers: &[(&str, &str)]| c.request("GET", path, headers).unwrap();
    let r = ask("/future.txt", &[]);
    let (date, lm) = (
        r.header("Date").unwrap(),
        r.header("Last-Modified").unwrap(),
    );
    assert_eq!(lm, date);
    let (lm, etag) = (lm.to_string(), r.header("ETag").unwrap().to_string());
    // The date echoed: 304 while the second lasts (Last-Modified is still that Date), else 200
    // with the new second's Date as Last-Modified.
    let r = ask("/future.txt", &[("If-Modified-Since", &lm)]);
    let date = r.header("Date").unwrap();
    assert_eq!(r.header("Last-Modified"), Some(date));
    assert_eq!(r.status, if date == lm { 304 } else { 200 }, "{date} {lm}");
    assert_eq!(ask("/future.txt", &[("If-None-Match", &etag)]).status, 304);
    let r = ask("/future.txt", &[("Range", "bytes=0-3"), ("If-Range", &lm)]);
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, b"from the future".as_slice())
    );
    let r = ask(
        "/future.txt",
        &[("Range", "bytes=0-3"), ("If-Range", &etag)],
    );
    assert_eq!((r.status, r.body.as_slice()), (206, b"from".as_slice()));
    // A file of the past keeps its mtime, and If-Range with it applies the range.
    let r = ask("/past.txt", &[]);
    let lm = r.header("Last-Modified").unwrap().to_string();
    assert_ne!(Some(lm.as_str()), r.header("Date"));
    let r = ask("/past.txt", &[("Range", "bytes=0-3"), ("If-Range", &lm)]);
    assert_eq!((r.status, r.body.as_slice()), (206, b"from".as_slice()));
    assert_eq!(ask("/past.txt", &[("If-Modified-Since", &lm)]).status, 304);
}

#[test]
fn if_none_match_on_several_lines_is_one_list() {
    // RFC 9110 §5.3: field lines of a list-valued field are one list; the matching tag on the
    // first line counts as much as one on the last.
    let d = site();
    let s = Server::root(d.path(), &[]);
    let etag = s.get("/hello.txt").header("ETag").unwrap().to_string();
    let mut c = s.connect();
    c.send(
        format!(
            "GET /hello.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\
             If-None-Match: \"other\"\r\n\r\n"
        )
        .as_bytes(),
    );
    let r = c.response(false).unwrap();
    assert_eq!((r.status, r.header("ETag")), (304, Some(etag.as_str())));
    // If-Match on two lines (already joined): the current tag on either line passes.
    c.send(
        format!(
            "GET /hello.txt HTTP/1.1\r\nHost: t\r\nIf-Match: {etag}\r\n\
             If-Match: \"other\"\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(c.response(false).unwrap().status, 200);
}

#[test]
fn ranges() {
    let d = site();
    let s = Server::root(d.path(), &[]);
    let data = bytes(1000, 1);
    let ask = |hdr: &str| {
        let mut c = s.connect();
        c.send(format!("GET /clip.MP4 HTTP/1.1\r\nHost: t\r\n{hdr}\r\n\r\n").as_bytes());
        c.response(false).unwrap()
    };
    let r = ask("Range: bytes=10-19");
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &data[10..20]);
    assert_eq!(r.header("Content-Range"), Some("bytes 10-19/1000"));
    assert_eq!(r.header("Content-Length"), Some("10"));
    let r = ask("Range: bytes=990-");
    assert_eq!((r.status, r.body.as_slice()), (206, &data[990..]));
    let r = ask("Range: bytes=-5");
    assert_eq!((r.status, r.body.as_slice()), (206, &data[995..]));
    let r = ask("Range: bytes=1000-");
    assert_eq!(r.status, 416);
    assert_eq!(r.header("Content-Range"), Some("bytes */1000"));
    // Multi-range requests get multipart/byteranges (framing checked in tests/media.rs).
    let r = ask("Range: bytes=0-1,5-6");
    assert_eq!(r.status, 206);
    assert!(r
        .header("Content-Type")
        .unwrap()
        .starts_with("multipart/byteranges; boundary="));
    // If-Range with a stale validator: whole file.
    let r = ask("Range: bytes=0-1\r\nIf-Range: \"stale\"");
    assert_eq!((r.status, r.body.len()), (200, 1000));
    let etag = s.get("/clip.MP4").header("ETag").unwrap().to_string();
    let r = ask(&format!("Range: bytes=0-1\r\nIf-Range: {etag}"));
    assert_eq!((r.status, r.body.as_slice()), (206, &data[..2]));
}

#[test]
fn suffix_range_of_an_empty_file_is_200_and_empty() {
    // RFC 9110 §14.1.1: on a zero-length representation a suffix range with a non-zero length is
    // satisfiable (nothing to send: 200 with the empty body, as nginx); any other range is not.
    let d = site();
    std::fs::write(d.path().join("empty.txt"), b"").unwrap();
    let s = Server::root(d.path(), &[]);
    let mut c = s.connect();
    for (range, status) in [
        ("bytes=-5", 200),
        ("bytes=-1", 200),
        ("bytes=0-,-5", 200),
        ("bytes=0-", 416),
        ("bytes=-0", 416),
    ] {
        let r = c.request("GET", "/empty.txt", &[("Range", range)]).unwrap();
        assert_eq!(r.status, status, "{range}");
        if status == 200 {
            assert_eq!(r.header("Content-Length"), Some("0"), "{range}");
            assert_eq!(r.header("Content-Range"), None, "{range}");
            assert!(r.body.is_empty(), "{range}");
        } else {
            assert_eq!(r.header("Content-Range"), Some("bytes */0"), "{range}");
        }
    }
}

#[test]
fn directories_index_or_404() {
    let d = site();
    let s = Server::root(d.path(), &[]);
    let r = s.get("/docs/");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, b"<p>docs</p>".as_slice())
    );
    assert_eq!(r.header("Content-Type"), Some("text/html; charset=utf-8"));
    // Without the trailing slash: 301 to it (relative Location).
    let r = s.get("/docs");
    assert_eq!((r.status, r.header("Location")), (301, Some("/docs/")));
    // The query kept, its bytes a URI may not hold encoded (they went out as received).
    let r = s.get("/docs?<x>`{|}^&y=%20\"");
    assert_eq!(
        (r.status, r.header("Location")),
        (301, Some("/docs/?%3Cx%3E%60%7B%7C%7D%5E&y=%20%22"))
    );
    assert_eq!(s.get("/empty/").status, 404);
    assert_eq!(s.get("/").status, 404);
    assert_eq!(s.get("/missing.txt").status, 404);
    assert_eq!(s.get("/hello.txt/x").status, 404);
}

fn large_body(offload: Offload) {
    let d = tempdir();
    let data = bytes(5 * 1024 * 1024 + 123, 7);
    std::fs::write(d.path().join("big.bin"), &data).unwrap();
    let s = serve_with(d.path(), "v", 2, |c| {
        c.limits.sendfile_max_chunk = 65536;
        c.volumes[0].offload = offload;
        c.volumes[0].pool.threads = 2;
    });
    let mut c = s.connect();
    for _ in 0..2 {
        c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n");
        let r = c.response(false).unwrap();
        assert_eq!(r.status, 200);
        assert!(r.body == data, "body differs ({offload:?})");
    }
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=3000000-\r\n\r\n");
    let r = c.response(false).unwrap();
    assert_eq!(r.status, 206);
    assert!(r.body == data[3_000_000..]);
}

#[test]
fn large_body_offload_always() {
    large_body(Offload::Always);
}

#[test]
fn large_body_offload_never() {
    large_body(Offload::Never);
}

#[test]
fn slow_reader_gets_the_whole_body() {
    // The socket buffer fills, sendfile returns short / EAGAIN, and sending resumes on writability.
    let d = tempdir();
    let data = bytes(8 * 1024 * 1024, 9);
    std::fs::write(d.path().join("big.bin"), &data).unwrap();
    let s = Server::root(d.path(), &[]);
    let mut c = s.connect();
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    std::thread::sleep(Duration::from_millis(300));
    let all = c.read_to_end();
    let head_end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(all[head_end..] == data[..]);
}

#[test]
fn max_connections_refuses_extra_connections() {
    let d = site();
    // Both held connections are in the middle of a request head: not idle, so neither is closed
    // to make room (that is `accept.rs`'s idle_keep_alive_connections_make_room... tests).
    let s = serve_with(d.path(), "site", 1, |c| {
        c.limits.max_connections = 2;
        c.limits.idle_park_ms = 0;
    });
    let mut a = s.connect();
    let mut b = s.connect();
    a.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    b.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(a.response(false).unwrap().status, 200);
    assert_eq!(b.response(false).unwrap().status, 200);
    a.send(b"GET /hello.txt HTTP/1.1\r\n");
    b.send(b"GET /hello.txt HTTP/1.1\r\n");
    let mut c = s.connect();
    assert!(
        c.closed_within(Duration::from_secs(2)),
        "third connection not closed"
    );
    assert!(
        s.wait_log("max_connections reached", Duration::from_secs(2)),
        "{}",
        s.logs()
    );
    drop(a);
    // A slot frees up once a connection closes.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(s.get("/hello.txt").status, 200);
}

#[test]
fn access_log_and_json_logs() {
    let d = site();
    let s = serve_with(d.path(), "site", 1, |c| {
        c.logging.format = LogFormat::Json;
        c.logging.access_log = true;
    });
    assert_eq!(s.get("/hello.txt").status, 200);
    assert!(
        s.wait_log("\"path\":\"/hello.txt\"", Duration::from_secs(2)),
        "{}",
        s.logs()
    );
    for line in s.logs().lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v.get("level").is_some(), "{line}");
    }
}

#[test]
fn the_access_log_survives_a_quiet_level_and_carries_the_query() {
    let d = site();
    let s = serve_with(d.path(), "site", 1, |c| {
        c.logging.format = LogFormat::Json;
        // Quiet but for the start-up lines the test harness waits for.
        c.logging.level = "error,content_server::runtime=info,content_server::accept=info".into();
        c.logging.access_log = true;
    });
    assert_eq!(s.get("/hello.txt?v=2").status, 200);
    assert!(
        s.wait_log("\"query\":\"v=2\"", Duration::from_secs(2)),
        "{}",
        s.logs()
    );
    let line = s
        .logs()
        .lines()
        .find(|l| l.contains("\"query\":\"v=2\""))
        .expect("the access line")
        .to_string();
    let v: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(v["path"], "/hello.txt");
    // Whole microseconds: at most three decimals.
    let ms = v["duration_ms"].to_string();
    assert!(ms.split('.').nth(1).is_none_or(|f| f.len() <= 3), "{ms}");
    // The quiet level holds for the rest: no info lines.
    assert!(!s.logs().contains("content_server::volume"), "{}", s.logs());
}

#[test]
fn file_shrinking_mid_response_closes_the_connection() {
    let d = tempdir();
    let len = 32 * 1024 * 1024;
    let path = d.path().join("shrink.bin");
    std::fs::write(&path, vec![7u8; len]).unwrap();
    std::fs::write(d.path().join("other.txt"), b"other").unwrap();
    let s = serve_with(d.path(), "v", 1, |c| c.limits.sendfile_max_chunk = 65536);
    let mut c = s.connect();
    c.send(b"GET /shrink.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    // The client does not read: the server fills the socket buffers and waits for writability.
    std::thread::sleep(Duration::from_millis(300));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(1024 * 1024)
        .unwrap();
    let all = c.read_to_end();
    let head_end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&all[..head_end]);
    assert!(head.contains(&format!("Content-Length: {len}")), "{head}");
    assert!(
        all.len() - head_end < len,
        "the whole body arrived despite the shrink"
    );
    assert!(
        // Found by the fstat before the next part, or by the read that met the end.
        s.wait_log("file shrank at byte", Duration::from_millis(500))
            || s.wait_log("file ended at byte", Duration::from_secs(2)),
        "{}",
        s.logs()
    );
    // The server keeps serving.
    let r = s.get("/other.txt");
    assert_eq!((r.status, r.body.as_slice()), (200, b"other".as_slice()));
}

#[test]
fn request_with_body_is_answered_then_closed() {
    let d = site();
    let s = Server::root(d.path(), &[]);
    let mut c = s.connect();
    let body = vec![b'z'; 300_000];
    let mut raw = format!(
        "POST /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(&body);
    // Write from another thread: the server may answer before reading the whole body.
    let mut w = c.stream.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let _ = w.write_all(&raw);
    });
    std::thread::sleep(Duration::from_millis(200));
    let r = c.response(false).unwrap();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("Connection"), Some("close"));
    assert!(c.closed_within(Duration::from_secs(3)));
    writer.join().unwrap();
    // A GET with a body is served, then the connection closes.
    let mut c = s.connect();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello");
    let r = c.response(false).unwrap();
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, b"hello world\n".as_slice())
    );
    assert!(c.closed_within(Duration::from_secs(3)));
}

#[test]
fn framing_that_other_parsers_read_differently_is_refused_and_closed() {
    let d = site();
    let s = Server::root(d.path(), &[]);
    // Each followed by a pipelined GET that must never be answered.
    for head in [
        "Content-Length: +0\r\n",
        "Transfer-Encoding: gzip\r\n",
        "Transfer-Encoding: chunked, gzip\r\n",
    ] {
        let mut c = s.connect();
        c.send(
            format!("GET /hello.txt HTTP/1.1\r\nHost: t\r\n{head}\r\nGET /blob HTTP/1.1\r\nHost: t\r\n\r\n")
                .as_bytes(),
        );
        let r = c.response(false).unwrap();
        assert_eq!(r.status, 400, "{head:?}");
        assert!(c.closed_within(Duration::from_secs(3)), "{head:?}");
        assert!(c.pending().is_empty(), "{head:?}: a second answer");
    }
    // HTTP/1.0: close wins over a keep-alive after it.
    let mut c = s.connect();
    c.send(b"GET /hello.txt HTTP/1.0\r\nConnection: close\r\nConnection: keep-alive\r\n\r\nGET /blob HTTP/1.0\r\n\r\n");
    let r = c.response(false).unwrap();
    assert_eq!(r.status, 200);
    assert_ne!(r.header("Connection"), Some("keep-alive"));
    assert!(c.closed_within(Duration::from_secs(3)));
    assert!(c.pending().is_empty(), "a second answer after close");
    // An absolute-form target with userinfo, and obs-text in an If-None-Match (allowed).
    let mut c = s.connect();
    c.send(b"GET http://u@h/hello.txt HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(c.response(false).unwrap().status, 400);
    let mut c = s.connect();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: \"caf\xe9\"\r\n\r\n");
    let r = c.response(false).unwrap();
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, b"hello world\n".as_slice())
    );
}

#[test]
fn garbage_input_never_panics() {
    let d = site();
    let s = Server::root(d.path(), &[]);
    let prefixes: [&[u8]; 6] = [
        b"GET /",
        b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nRange: ",
        b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nIf-Modified-Since: ",
        b"HEAD /%",
        b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: ",
        b"",
    ];
    for i in 0..120u64 {
        let mut raw = prefixes[i as usize % prefixes.len()].to_vec();
        raw.extend(bytes(1 + (i as usize * 37) % 700, i));
        raw.extend_from_slice(b"\r\n\r\n");
        let mut c = s.connect();
        c.send(&raw);
        // Any answer (or a close) is fine; the process must survive.
        let _ = c.response(false);
    }
    assert_eq!(s.get("/hello.txt").status, 200);
    assert!(!s.logs().contains("panicked"), "{}", s.logs());
}

/// A file rewritten in place within the same second (same inode, same size: a live playlist)
/// gets another ETag, so neither If-None-Match (304) nor an If-Range resume (206 of the new
/// bytes after the old ones) takes the new content for the old. So does one whose mtimes are
/// before 1970 (an archive's, `touch -d @-100`): all such tags were one.
#[test]
fn a_file_rewritten_within_the_same_second_gets_another_etag() {
    let d = tempdir();
    let s = serve_with(d.path(), "v", 1, |c| {
        c.volumes[0].offload = Offload::Never;
    });
    let in_2023 = UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_nanos(100);
    let before_1970 = UNIX_EPOCH - Duration::from_secs(100);
    for (name, old, new) in [
        ("live.m3u8", in_2023, in_2023 + Duration::from_nanos(5_000)),
        (
            "old.txt",
            before_1970,
            before_1970 - Duration::from_secs(4_900),
        ),
    ] {
        let p = d.path().join(name);
        let path = format!("/{name}");
        std::fs::write(&p, b"AAAAAAAAAA").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let first = s.get(&path);
        let etag = first.header("etag").expect("an ETag").to_string();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .write_all_at(b"BBBBBBBBBB", 0)
            .unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(new)
            .unwrap();
        let r = request(s.addr, "GET", &path, &[("If-None-Match", etag.as_str())]);
        assert_eq!(r.status, 200, "{name}: a 304 for changed bytes ({etag})");
        assert_eq!(r.body, b"BBBBBBBBBB");
        let r = request(
            s.addr,
            "GET",
            &path,
            &[("Range", "bytes=5-"), ("If-Range", etag.as_str())],
        );
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, b"BBBBBBBBBB".as_slice()),
            "{name}"
        );
    }
}

/// A file rewritten in place while a download is under way (`rsync --inplace`, `dd
/// conv=notrunc`) cuts the download: the client gets a short body, never a complete one of two
/// versions under the old ETag (it did, in every offload mode, and nginx does). Checked where
/// fstat may run on the event loop (`auto` on a local filesystem, `never`).
#[test]
fn a_file_rewritten_in_place_mid_download_is_cut_not_spliced() {
    use std::io::{Read, Write};
    const SIZE: usize = 24 << 20;
    for mode in ["auto", "never"] {
        let d = tempdir();
        let p = d.path().join("x.bin");
        std::fs::write(&p, vec![b'A'; SIZE]).unwrap();
        let s = Server::root(d.path(), &["--offload", mode]);
        let write = |append: bool, byte: u8, len: usize| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .append(append)
                .open(&p)
                .unwrap();
            f.write_all(&vec![byte; len]).unwrap();
        };
        let body = body_around(s.addr, "/x.bin", || write(false, b'B', SIZE));
        let new = body.iter().filter(|&&b| b == b'B').count();
        assert!(
            body.len() < SIZE,
            "{mode}: a complete body under the old version, {new} of its bytes the new one's"
        );
        // The next request gets the new version whole.
        let r = s.get("/x.bin");
        assert!(
            r.body.len() == SIZE && r.body.iter().all(|&b| b == b'B'),
            "{mode}"
        );
        // A file that grows while it is downloaded (a recording being written) is only
        // appended to: the download is the whole prefix it had, not cut.
        let body = body_around(s.addr, "/x.bin", || write(true, b'C', 1 << 20));
        assert!(
            body.len() == SIZE && body.iter().all(|&b| b == b'B'),
            "{mode}: a download of a growing file was cut or changed ({} bytes)",
            body.len()
        );
        // Its growth is followed: rewritten in place at its new size once the download went
        // on after the append, it is cut.
        std::fs::write(&p, vec![b'D'; SIZE]).unwrap();
        let (mut c, mut got) =
            common::http::partly_read(s.addr, "/x.bin", "Connection: close\r\n", None, 1 << 20);
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write(true, b'E', 1 << 20);
        let mut more = vec![0u8; 4 << 20];
        c.read_exact(&mut more).unwrap();
        got.extend_from_slice(&more);
        write(false, b'F', SIZE + (1 << 20));
        let body = common::http::rest_of_body((c, got));
        assert!(
            body.len() < SIZE,
            "{mode}: a complete body though the grown file was rewritten ({} of its bytes new)",
            body.iter().filter(|&&b| b == b'F').count()
        );
    }
}

/// A rewrite while the last part of a body waits for the client is caught before that part
/// goes out (it went out unchecked: a complete body of two versions). 3 MiB, a client that
/// read 64 KiB through a small receive buffer: the node has queued about 2 MiB
/// (`notsent_lowat_bytes`) and waits to send the rest, its last part.
#[test]
fn a_rewrite_while_the_last_part_waits_is_caught() {
    use std::io::Write;
    const SIZE: usize = 3 << 20;
    for mode in ["auto", "never"] {
        let d = tempdir();
        let p = d.path().join("x.bin");
        std::fs::write(&p, vec![b'A'; SIZE]).unwrap();
        let s = Server::root(d.path(), &["--offload", mode]);
        let (c, got) = common::http::partly_read(
            s.addr,
            "/x.bin",
            "Connection: close\r\n",
            Some(16 << 10),
            64 << 10,
        );
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .and_then(|mut f| f.write_all(&vec![b'B'; SIZE]))
            .unwrap();
        let body = common::http::rest_of_body((c, got));
        assert!(
            body.len() < SIZE,
            "{mode}: a complete body, {} of its bytes the new version's",
            body.iter().filter(|&&b| b == b'B').count()
        );
    }
}

/// The body of `GET path` from `addr` when `change` runs after its first MiB was read (a
/// reset after a cut is not an error here).
fn body_around(addr: std::net::SocketAddr, path: &str, change: impl FnOnce()) -> Vec<u8> {
    let (c, got) = common::http::partly_read(addr, path, "Connection: close\r\n", None, 1 << 20);
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    change();
    common::http::rest_of_body((c, got))
}

/// An append right after a large write (the filesystem's journal busy) sets the file's
/// modification time tens of milliseconds before its first byte lands: a download checked in
/// between saw the same size with another time and was cut as a rewrite. A file of its size
/// with another time is now given a moment to grow before it counts as rewritten.
#[test]
fn an_append_after_a_large_write_is_not_taken_for_a_rewrite() {
    use std::io::Write;
    const SIZE: usize = 24 << 20;
    for mode in ["auto", "never"] {
        for round in 0..3 {
            let d = tempdir();
            let p = d.path().join("x.bin");
            std::fs::write(&p, vec![b'A'; SIZE]).unwrap();
            let s = Server::root(d.path(), &["--offload", mode]);
            let rewrite = || {
                let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                f.write_all(&vec![b'B'; SIZE]).unwrap();
            };
            assert!(
                body_around(s.addr, "/x.bin", rewrite).len() < SIZE,
                "{mode}"
            );
            assert_eq!(s.get("/x.bin").body.len(), SIZE);
            let append = || {
                let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
                f.write_all(&vec![b'C'; 1 << 20]).unwrap();
            };
            let body = body_around(s.addr, "/x.bin", append);
            assert!(
                body.len() == SIZE && body.iter().all(|&b| b == b'B'),
                "{mode}, round {round}: a download of an appended file was cut ({} bytes)",
                body.len()
            );
        }
    }
}
