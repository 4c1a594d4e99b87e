//! The caching node (issue 11) over real sockets: the real `content-server` binary in front of
//! real origin processes — the programmable test origin (`common::origin`) and our own
//! `content-server serve --root`. Every test counts what reached the origin.

mod common;

use common::cache::{
    admin, cache_files, config, get, node, origin_and_node, origin_and_purge_node, settle,
    temp_node, try_get, volume_metric, wait_committed, walk, xcache, Node, PURGE_AUTH, SLICE,
    SLICED,
};
use common::origin::{pattern, Fault, FaultOrigin, Object, Timing};
use common::{Config, Server};
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[test]
fn miss_then_hit_with_ranges_conditionals_and_head() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(300_000, 1);
    o.put(
        "/v.bin",
        Object::new(body.clone()).header("Content-Disposition", "inline"),
    );

    let r = get(&n, "/v.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert!(r.body == body, "miss body differs");
    assert_eq!(r.header("Content-Disposition"), Some("inline"));
    assert_eq!(r.header("ETag"), Some("\"v1\""));
    // One origin request per 64 KiB slice, each a Range request.
    let ranges = o.ranges("/v.bin");
    assert_eq!(ranges.len(), 5, "{ranges:?}");
    assert!(
        ranges.contains(&Some("bytes=262144-327679".into())),
        "{ranges:?}"
    );

    let r = get(&n, "/v.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == body, "hit body differs");
    assert!(r.header("Age").is_some());

    let r = get(&n, "/v.bin", "Range: bytes=100000-200000\r\n");
    assert_eq!((r.status, xcache(&r)), (206, "HIT"));
    assert_eq!(
        r.header("Content-Range"),
        Some("bytes 100000-200000/300000")
    );
    assert!(r.body == body[100000..=200000]);

    let r = get(&n, "/v.bin", "If-None-Match: \"v1\"\r\n");
    assert_eq!((r.status, xcache(&r)), (304, "HIT"));
    let r = get(&n, "/v.bin", "Range: bytes=300000-\r\n");
    assert_eq!((r.status, xcache(&r)), (416, "HIT"));
    assert_eq!(r.header("Content-Range"), Some("bytes */300000"));
    // Past the last slice: the first slice knows the size, the origin is not asked.
    let r = get(&n, "/v.bin", "Range: bytes=400000-400099\r\n");
    assert_eq!((r.status, xcache(&r)), (416, "HIT"));
    assert_eq!(r.header("Content-Range"), Some("bytes */300000"));
    // ... and an If-Range of another version gets the whole object, from the cache.
    let r = get(&n, "/v.bin", "Range: bytes=400000-\r\nIf-Range: \"v0\"\r\n");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == body, "If-Range body differs");

    let mut c = n.srv.connect();
    c.send(b"HEAD /v.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let r = c.response(true).unwrap();
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert_eq!(r.header("Content-Length"), Some("300000"));

    assert_eq!(o.requests("/v.bin"), 5, "hits reached the origin");
    assert_eq!(
        volume_metric(
            &n,
            "contentserver_cache_requests_total",
            &[("status", "hit")]
        ),
        7.0
    );
    assert_eq!(volume_metric(&n, "contentserver_cache_entries", &[]), 5.0);
}

/// A range that starts past the end but inside the last slice's span (an object of 2.5 slices,
/// `bytes=SIZE-`) is a 416 from the stored first slice, like one past the last slice: the
/// origin was asked for the last slice, which holds none of the range's bytes, and it was a
/// MISS.
#[test]
fn a_range_past_the_end_inside_the_last_slice_is_answered_from_the_first() {
    let (o, n) = origin_and_node(SLICED);
    let size = SLICE * 5 / 2;
    o.put("/h.bin", Object::new(pattern(size, 4)));
    let r = get(&n, "/h.bin", "Range: bytes=0-10\r\n");
    assert_eq!((r.status, xcache(&r)), (206, "MISS"));
    wait_committed(&n);
    let asked = o.requests("/h.bin");
    for range in [format!("{size}-"), format!("{}-{}", size + 10, size + 20)] {
        let r = get(&n, "/h.bin", &format!("Range: bytes={range}\r\n"));
        assert_eq!((r.status, xcache(&r)), (416, "HIT"), "{range}");
        assert_eq!(
            r.header("Content-Range"),
            Some(format!("bytes */{size}").as_str())
        );
    }
    assert_eq!(o.requests("/h.bin"), asked, "the origin was asked");
    // A range that does reach into the last slice still gets its bytes.
    let r = get(&n, "/h.bin", &format!("Range: bytes={}-\r\n", size - 5));
    assert_eq!((r.status, r.body.len()), (206, 5));
}

/// An origin that compresses whatever it is asked (nginx `gzip_static always` with
/// `gzip_vary`): its `Vary: Accept-Encoding` answer in gzip, chosen by the fill's request
/// without Accept-Encoding, is served from the cache to clients that accept gzip (and to
/// those that send none), never to one whose Accept-Encoding refuses it (RFC 9111 §4.1): that
/// one is passed through with its own Accept-Encoding.
#[test]
fn a_coded_answer_varying_by_accept_encoding_goes_only_to_clients_that_accept_it() {
    let (o, n) = origin_and_node("");
    let gz = pattern(5000, 9);
    o.put(
        "/app.js",
        Object::new(gz.clone())
            .cache_control("max-age=600")
            .header("Content-Encoding", "gzip")
            .header("Vary", "Accept-Encoding"),
    );
    let r = get(&n, "/app.js", "Accept-Encoding: gzip, br\r\n");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert_eq!(r.header("Content-Encoding"), Some("gzip"));
    wait_committed(&n);
    for ae in ["Accept-Encoding: gzip\r\n", ""] {
        let r = get(&n, "/app.js", ae);
        assert_eq!((r.status, xcache(&r)), (200, "HIT"), "{ae:?}");
        assert!(r.body == gz);
    }
    let asked = o.requests("/app.js");
    for ae in ["identity", "br", "gzip;q=0, *"] {
        let r = get(&n, "/app.js", &format!("Accept-Encoding: {ae}\r\n"));
        assert_eq!(xcache(&r), "BYPASS", "{ae}");
        let seen = o.seen();
        let last = seen.last().expect("the origin was asked");
        assert_eq!(last.path, "/app.js");
        assert_eq!(
            last.header("accept-encoding"),
            Some(ae),
            "forwarded as sent"
        );
    }
    assert_eq!(o.requests("/app.js"), asked + 3);
    // Nor are its length and validators this client's: a range past the coded length (which
    // the first slice would answer 416), with or without an If-Range that does not match (the
    // whole coded object), goes to the origin too.
    let (o2, n2) = origin_and_node(SLICED);
    let size = SLICE * 5 / 2;
    o2.put(
        "/v.bin",
        Object::new(pattern(size, 3))
            .cache_control("max-age=600")
            .header("Content-Encoding", "gzip")
            .header("Vary", "Accept-Encoding"),
    );
    assert_eq!(xcache(&get(&n2, "/v.bin", "Range: bytes=0-9\r\n")), "MISS");
    wait_committed(&n2);
    let past = format!("Range: bytes={}-\r\n", size + 100);
    for extra in [past.clone(), format!("{past}If-Range: \"v0\"\r\n")] {
        let before = o2.requests("/v.bin");
        let r = get(
            &n2,
            "/v.bin",
            &format!("Accept-Encoding: identity\r\n{extra}"),
        );
        assert_eq!(xcache(&r), "BYPASS", "{extra:?}: {}", r.status);
        assert_eq!(o2.requests("/v.bin"), before + 1, "{extra:?}");
        let r = get(&n2, "/v.bin", &format!("Accept-Encoding: gzip\r\n{extra}"));
        assert_ne!(
            xcache(&r),
            "BYPASS",
            "{extra:?}: a gzip client is the cache's"
        );
    }
    // Fills still ask without one (their answer is for every client), and an answer in no
    // coding is for everyone but a client that refuses the uncoded form (`identity;q=0`, or
    // `*;q=0` without naming identity: RFC 9110 §12.5.3), which is passed through.
    o.put(
        "/plain.js",
        Object::new(pattern(4000, 2))
            .cache_control("max-age=600")
            .header("Vary", "Accept-Encoding"),
    );
    get(&n, "/plain.js", "Accept-Encoding: gzip\r\n");
    wait_committed(&n);
    for ae in ["identity", "gzip", "*;q=0, identity"] {
        let r = get(&n, "/plain.js", &format!("Accept-Encoding: {ae}\r\n"));
        assert_eq!(xcache(&r), "HIT", "{ae}");
    }
    assert!(o
        .seen()
        .iter()
        .filter(|s| s.path == "/plain.js")
        .all(|s| s.header("accept-encoding").is_none()));
    for ae in ["br, identity;q=0", "*;q=0"] {
        let r = get(&n, "/plain.js", &format!("Accept-Encoding: {ae}\r\n"));
        assert_eq!(xcache(&r), "BYPASS", "{ae}");
        let seen = o.seen();
        assert_eq!(
            seen.last().and_then(|s| s.header("accept-encoding")),
            Some(ae)
        );
    }
}

/// An If-Range date is honoured only when it is a strong validator (RFC 9110 §13.1.5): for a
/// stored answer, when its Date is at least a second after its Last-Modified (§8.8.2.2), what
/// the node's clock says now does not matter. One dated in its Last-Modified's second may
/// have changed again within it: the whole object is sent, not a range that could splice two
/// versions (it was a 206 once the node's clock was a second past it).
#[test]
fn an_if_range_date_applies_only_when_the_stored_date_makes_it_strong() {
    use content_server::http::date;
    let (o, n) = origin_and_node(SLICED);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs() as i64;
    // (Dated a little in the past, and still fresh: the same answers whatever the clock.)
    let lm = date::format(now - 10);
    for (path, sent, want) in [
        ("/same-second.bin", now - 10, 200),
        ("/later.bin", now - 9, 206),
    ] {
        let body = pattern(5000, 7);
        let mut obj = Object::new(body.clone()).header("Date", &date::format(sent));
        obj.etag = None;
        obj.last_modified = Some(lm.clone());
        o.put(path, obj);
        assert_eq!(xcache(&get(&n, path, "")), "MISS");
        wait_committed(&n);
        let r = get(&n, path, &format!("If-Range: {lm}\r\nRange: bytes=0-9\r\n"));
        assert_eq!((r.status, xcache(&r)), (want, "HIT"), "{path}");
        let expected: &[u8] = if want == 206 { &body[..10] } else { &body };
        assert!(r.body == expected, "{path}");
        // An If-Range that is not its date: the whole object.
        let before = date::format(now - 11);
        let r = get(
            &n,
            path,
            &format!("If-Range: {before}\r\nRange: bytes=0-9\r\n"),
        );
        assert_eq!(r.status, 200, "{path}");
    }
}

#[test]
fn head_miss_is_fetched_with_get_and_then_cached() {
    let (o, n) = origin_and_node("slice_size = 0");
    o.put("/h.txt", Object::new(pattern(5000, 2)));
    let mut c = n.srv.connect();
    c.send(b"HEAD /h.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let r = c.response(true).unwrap();
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert_eq!(r.header("Content-Length"), Some("5000"));
    let seen = o.seen();
    assert_eq!(seen[0].method, "GET");
    // The detached fill stores it: the next GET is a hit.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = get(&n, "/h.txt", "");
        assert!(r.body == pattern(5000, 2));
        if xcache(&r) == "HIT" {
            break;
        }
        assert!(Instant::now() < deadline, "never became a hit");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(o.requests("/h.txt"), 1);
}

/// Read a response head and the first body byte; returns (time of the first byte, full body).
fn timed_get(addr: SocketAddr, path: &str) -> (Duration, Duration, Vec<u8>) {
    let t0 = Instant::now();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    std::io::Write::write_all(
        &mut s,
        format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut buf = Vec::new();
    let mut first = None;
    let mut tmp = [0u8; 65536];
    loop {
        let n = s.read(&mut tmp).unwrap_or(0);
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&tmp[..n]);
        if first.is_none() {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                if buf.len() > i + 4 {
                    first = Some(t0.elapsed());
                }
            }
        }
    }
    let i = buf.windows(4).position(|w| w == b"\r\n\r\n").expect("head") + 4;
    (
        first.expect("no body byte"),
        t0.elapsed(),
        buf[i..].to_vec(),
    )
}

#[test]
fn concurrent_misses_share_one_fetch_and_stream_before_it_ends() {
    let (o, n) = origin_and_node("slice_size = 0");
    let body = pattern(256 * 1024, 3);
    o.put("/herd.bin", Object::new(body.clone()));
    // 32 chunks of 8 KiB, 40 ms apart: the fill takes about 1.3 s.
    o.set_timing(Timing {
        chunk_size: 8192,
        chunk_delay: Duration::from_millis(40),
        ..Timing::default()
    });
    let addr = n.srv.addr;
    // One client gives up early: the fill goes on for the others.
    let quitter = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        std::io::Write::write_all(&mut s, b"GET /herd.bin HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let mut b = [0u8; 100];
        let _ = s.read(&mut b);
    });
    std::thread::sleep(Duration::from_millis(100));
    let clients: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(move || timed_get(addr, "/herd.bin")))
        .collect();
    quitter.join().unwrap();
    for c in clients {
        let (first, total, got) = c.join().unwrap();
        assert!(
            got == body,
            "a collapsed client got other bytes ({} bytes)",
            got.len()
        );
        assert!(
            first + Duration::from_millis(500) < total,
            "first byte at {first:?}, body done at {total:?}: not streamed while filling"
        );
    }
    assert_eq!(o.requests("/herd.bin"), 1, "misses were not collapsed");
    assert!(volume_metric(&n, "contentserver_cache_collapsed_total", &[]) >= 8.0);
    let r = get(&n, "/herd.bin", "");
    assert_eq!(xcache(&r), "HIT");
    assert_eq!(o.requests("/herd.bin"), 1);
}

/// A request joining a fill long under way is as old as the origin's answer: its `Age` counts
/// from when that answer came (RFC 9111 §4.2.3), as a stored entry's does. It used to be the
/// origin's own Age (here 0) whatever time had passed.
#[test]
fn a_request_joining_a_long_fill_counts_its_age() {
    let (o, n) = origin_and_node("slice_size = 0");
    let body = pattern(400 * 1024, 9);
    o.put(
        "/slow.bin",
        Object::new(body.clone()).cache_control("max-age=600"),
    );
    // 50 chunks of 8 KiB, 60 ms apart: the fill takes about 3 s.
    o.set_timing(Timing {
        chunk_size: 8192,
        chunk_delay: Duration::from_millis(60),
        ..Timing::default()
    });
    let addr = n.srv.addr;
    let first = std::thread::spawn(move || timed_get(addr, "/slow.bin"));
    std::thread::sleep(Duration::from_millis(2300));
    let r = get(&n, "/slow.bin", "");
    assert!(r.body == body);
    assert_eq!(o.requests("/slow.bin"), 1, "it did not join the fill");
    let age: u64 = r.header("Age").and_then(|a| a.parse().ok()).expect("Age");
    assert!(age >= 2, "joined 2.3 s into the fill, Age {age}");
    assert!(first.join().unwrap().2 == body);
}

/// Requests that joined a fill before the origin answered all waited for the origin: every one
/// is a MISS, however fast the (small) body came after the head. (Which of them woke before
/// the last byte was a race, and those after it said HIT: 1 MISS and 5 HIT in some runs, 6
/// MISS in others.) One that comes once the fill has every byte is a HIT.
#[test]
fn requests_that_waited_for_the_origin_are_misses() {
    let o = FaultOrigin::start();
    let n = common::cache::temp_node(&[o.url()], "read_timeout_ms = 10000", "");
    // Long enough that every client has joined before the origin answers, on a busy machine
    // (within the origin's read timeout).
    o.set_timing(Timing {
        head_delay: Duration::from_millis(1500),
        ..Timing::default()
    });
    for round in 0..3 {
        let p = format!("/slow{round}.txt");
        o.put(&p, Object::new(pattern(2000, round)));
        let addr = n.srv.addr;
        let clients: Vec<_> = (0..6)
            .map(|_| {
                let p = p.clone();
                std::thread::spawn(move || common::Conn::new(addr).request("GET", &p, &[]))
            })
            .collect();
        for c in clients {
            let r = c.join().expect("client").expect("an answer");
            assert_eq!((r.status, xcache(&r)), (200, "MISS"), "round {round}");
        }
        assert_eq!(o.requests(&p), 1, "round {round}: not collapsed");
    }
}

/// A miss or a passed-through answer on a reused keep-alive connection is not held back by
/// the kernel: its last bytes were written with MSG_MORE (from the fill's memory, not knowing
/// they were the last) and waited 200 ms for the cork timer.
#[test]
fn misses_on_a_kept_alive_connection_are_not_delayed() {
    let (o, n) = origin_and_node(SLICED);
    o.put("/warm", Object::new(pattern(100, 1)));
    o.put("/small", Object::new(pattern(5000, 2)));
    o.put("/seek", Object::new(pattern(3 * SLICE, 3)));
    o.put(
        "/nostore",
        Object::new(pattern(3000, 4)).cache_control("no-store"),
    );
    let mut c = common::Conn::new(n.srv.addr);
    assert_eq!(c.request("GET", "/warm", &[]).expect("warm-up").status, 200);
    let asks: [(&str, &[(&str, &str)]); 4] = [
        ("/small", &[]),
        ("/seek", &[("Range", "bytes=70000-70100")]),
        ("/nostore", &[]),
        ("/missing", &[]),
    ];
    for (path, headers) in asks {
        let t = Instant::now();
        let r = c.request("GET", path, headers).expect("an answer");
        let took = t.elapsed();
        assert!(
            took < Duration::from_millis(120),
            "{path}: {} after {took:?}",
            r.status
        );
    }
}

#[test]
fn a_seek_fetches_only_the_slices_it_needs() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(1 << 20, 4);
    o.put("/big.mp4", Object::new(body.clone()));
    let r = get(&n, "/big.mp4", "Range: bytes=700000-700999\r\n");
    assert_eq!((r.status, xcache(&r)), (206, "MISS"));
    assert!(r.body == body[700000..701000]);
    assert_eq!(
        o.ranges("/big.mp4"),
        vec![Some("bytes=655360-720895".to_string())]
    );
    // A range over three slices: the one stored is a hit, the other two are fetched.
    let r = get(&n, "/big.mp4", "Range: bytes=600000-800000\r\n");
    assert_eq!(r.status, 206);
    assert!(r.body == body[600000..=800000]);
    let mut got = o.ranges("/big.mp4");
    got.sort();
    assert_eq!(
        got,
        vec![
            Some("bytes=589824-655359".to_string()),
            Some("bytes=655360-720895".to_string()),
            Some("bytes=720896-786431".to_string()),
            Some("bytes=786432-851967".to_string()),
        ]
    );
}

#[test]
fn a_new_version_at_the_origin_is_never_mixed_with_the_old_one() {
    let (o, n) = origin_and_node(SLICED);
    let v1 = pattern(256 * 1024, 5);
    let v2 = pattern(256 * 1024, 6);
    o.put("/m.bin", Object::version(v1.clone(), 1));
    // Slice 0 of version 1 is stored.
    let r = get(&n, "/m.bin", "Range: bytes=0-999\r\n");
    assert!(r.body == v1[..1000]);
    o.put("/m.bin", Object::version(v2.clone(), 2));
    // Slice 0 is v1 (fresh), slice 1 arrives as v2: the response must stop, not mix.
    let mut c = n.srv.connect();
    c.send(b"GET /m.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    match c.response(false) {
        Ok(r) => {
            assert!(
                r.body == v1 || r.body == v2,
                "a complete body must be one version"
            );
        }
        Err(_) => {
            let got = c.pending().to_vec();
            assert!(got.len() < v1.len());
            // A cut 200 looks complete in the access line but for its byte count: the
            // node says why, with the object and where.
            assert!(
                n.srv.wait_log(
                    "object changed at the origin (a new validator) mid-response",
                    Duration::from_secs(2)
                ),
                "{}",
                n.srv.logs()
            );
        }
    }
    // The next request gets the whole new version.
    let r = get(&n, "/m.bin", "");
    assert_eq!(r.status, 200);
    assert!(
        r.body == v2,
        "after a version change the next response is not v2"
    );
    assert_eq!(r.header("ETag"), Some("\"v2\""));
    // The old version's slice went as replaced, not as a corrupt file, and once: not once per
    // slice number the object has (it counted 4 here, and thousands under load).
    let evicted = |reason| {
        volume_metric(
            &n,
            "contentserver_cache_evictions_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(evicted("invalid"), 0.0);
    // (Counted on the pool, when the file is deleted, while the index is being rebuilt.)
    common::wait_until(Duration::from_secs(5), || evicted("replaced") >= 1.0);
    assert_eq!(evicted("replaced"), 1.0);
}

/// A version change found while the old first slice is still being committed (its body all
/// there, the commit on the pool): the old slice is dropped once it lands, so the next request
/// gets the new version whole, not the old first slice and then a cut.
#[test]
fn a_version_change_during_the_old_first_slice_commit_drops_it_once_committed() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cfg = config(&[o.url()], &d.path().join("cache"), "", SLICED);
    let n = Node::start_with_env(&cfg, &[("FAILPOINTS", "cache_commit=sleep(400)")]);
    let v1 = pattern(256 * 1024, 5);
    let v2 = pattern(256 * 1024, 6);
    o.put("/m.bin", Object::version(v1.clone(), 1));
    let r = get(&n, "/m.bin", "Range: bytes=0-999\r\n");
    assert!(r.body == v1[..1000]);
    o.put("/m.bin", Object::version(v2.clone(), 2));
    // Slice 0 (v1) is still committing; slice 1 comes as v2: cut, never mixed.
    let r = try_get(&n, "/m.bin", "");
    if let Ok(r) = &r {
        assert!(
            r.body == v1 || r.body == v2,
            "a complete body must be one version"
        );
    }
    let r = get(&n, "/m.bin", "");
    assert!(
        r.body == v2,
        "the next response is not v2 whole ({} bytes)",
        r.body.len()
    );
    assert_eq!(r.header("ETag"), Some("\"v2\""));
}

/// An older version's later slices still stored behind a first slice fetched anew (the first
/// slice was evicted; here its file is deleted while the node is down): each later slice is
/// asked for again with the stored version's ETag, and the response is the new version whole,
/// not cut short.
#[test]
fn old_later_slices_behind_a_new_first_slice_are_refetched_not_cut() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cache = d.path().join("cache");
    let cfg = config(&[o.url()], &cache, "", SLICED);
    let (v1, v2) = (pattern(4 * SLICE, 5), pattern(4 * SLICE, 6));
    o.put("/m.bin", Object::version(v1.clone(), 1));
    stored_then_stopped(&cfg, &[("/m.bin", &v1)]);
    let files = walk(&cache);
    let slice0: Vec<&PathBuf> = files
        .iter()
        .map(|(p, _)| p)
        .filter(|p| p.to_string_lossy().ends_with("-0"))
        .collect();
    assert_eq!((files.len(), slice0.len()), (4, 1), "{files:?}");
    std::fs::remove_file(slice0[0]).expect("remove slice 0");
    o.put("/m.bin", Object::version(v2.clone(), 2));
    let before = o.seen().len();

    let n = Node::start(&cfg);
    let r = get(&n, "/m.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert!(r.body == v2, "not the new version whole");
    let asked = o.seen()[before..].to_vec();
    let conditional = asked
        .iter()
        .filter(|s| s.header("If-None-Match") == Some("\"v1\""))
        .count();
    assert_eq!((asked.len(), conditional), (4, 3), "{asked:?}");
    wait_committed(&n);
    let r = get(&n, "/m.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == v2);
}

/// A 304's fields replace the stored ones of their names with every line they have (RFC 9111
/// §4.3.4), and `s-maxage` / `must-revalidate` then forbid serving the entry stale.
/// A 304 the node makes for a client's own revalidation repeats the origin's CORS answer with
/// the validators (a browser checks CORS on the 304 of a script's conditional request: without
/// them it fails), from the cache and for an answer passed through alike; not the fields that
/// describe the body.
#[test]
fn a_304_repeats_the_origins_cors_fields() {
    let (o, n) = origin_and_node("");
    let cors = |obj: Object| {
        obj.cache_control("max-age=600")
            .header("Access-Control-Allow-Origin", "*")
            .header("Access-Control-Expose-Headers", "Content-Range, ETag")
            .header("Timing-Allow-Origin", "*")
            .header("Content-Language", "en")
    };
    o.put("/seg.m4s", cors(Object::new(pattern(5000, 3))));
    // Passed through (not stored): an answer that sets a cookie.
    o.put(
        "/private.m4s",
        cors(Object::new(pattern(5000, 4))).header("Set-Cookie", "s=1"),
    );
    assert_eq!(xcache(&get(&n, "/seg.m4s", "")), "MISS");
    wait_committed(&n);
    for (path, status) in [("/seg.m4s", "HIT"), ("/private.m4s", "BYPASS")] {
        let r = get(
            &n,
            path,
            "Origin: https://player.example\r\nIf-None-Match: \"v1\"\r\n",
        );
        assert_eq!((r.status, xcache(&r)), (304, status), "{path}");
        assert_eq!(r.header("Access-Control-Allow-Origin"), Some("*"), "{path}");
        assert_eq!(
            r.header("Access-Control-Expose-Headers"),
            Some("Content-Range, ETag"),
            "{path}"
        );
        assert_eq!(r.header("Timing-Allow-Origin"), Some("*"), "{path}");
        assert_eq!(r.header("Content-Language"), None, "{path}");
    }
}

#[test]
fn a_304_replaces_stored_fields_with_all_their_lines() {
    let (o, n) = origin_and_node("slice_size = 0");
    o.put(
        "/m.txt",
        Object::new(pattern(1000, 3))
            .cache_control("max-age=1, stale-while-revalidate=0")
            .header("X-Multi", "old"),
    );
    assert_eq!(xcache(&get(&n, "/m.txt", "")), "MISS");
    std::thread::sleep(Duration::from_millis(1100));
    o.fault_times(
        "/m.txt",
        Fault::Raw(
            b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: max-age=2\r\n\
              Cache-Control: must-revalidate\r\nX-Multi: one\r\nX-Multi: two\r\n\r\n"
                .to_vec(),
        ),
        1,
    );
    let r = get(&n, "/m.txt", "");
    assert_eq!((r.status, xcache(&r)), (200, "REVALIDATED"));
    assert!(r.body == pattern(1000, 3));
    let r = get(&n, "/m.txt", "");
    assert_eq!(xcache(&r), "HIT");
    let all = |name: &str| -> Vec<String> {
        r.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .collect()
    };
    assert_eq!(all("Cache-Control"), ["max-age=2", "must-revalidate"]);
    assert_eq!(all("X-Multi"), ["one", "two"]);
    // Past those 2 s, the origin failing: must-revalidate forbids the stale copy (504).
    std::thread::sleep(Duration::from_millis(2100));
    o.fault("/m.txt", Fault::Status(503));
    let r = get(&n, "/m.txt", "");
    assert_eq!(r.status, 503, "{:?}", r.headers);
    o.fault("/m.txt", Fault::CloseBeforeHead);
    let r = get(&n, "/m.txt", "");
    assert_eq!(r.status, 504, "{:?}", r.headers);

    // s-maxage is proxy-revalidate for a shared cache (RFC 9111 §5.2.2.10): once stale, it is
    // not served while the origin is down, whatever the route's stale windows.
    o.clear_fault("/m.txt");
    o.put(
        "/s.txt",
        Object::new(pattern(1000, 4)).cache_control("s-maxage=1, stale-if-error=600"),
    );
    assert_eq!(xcache(&get(&n, "/s.txt", "")), "MISS");
    std::thread::sleep(Duration::from_millis(1100));
    o.fault("/s.txt", Fault::CloseBeforeHead);
    let r = get(&n, "/s.txt", "");
    assert_eq!(r.status, 504, "{:?}", r.headers);
}

/// The object's freshness is its first slice's: once a full read revalidated it (a 304 for
/// the same strong ETag), a seek into a later slice is served as fresh as the full read served
/// it, with the first slice's age, not revalidated again (with `must-revalidate` and the
/// origin failing, that was a 504 for bytes a full read had just served).
#[test]
fn a_revalidated_first_slice_vouches_for_the_later_ones() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(3 * SLICE, 6);
    o.put(
        "/v.bin",
        Object::new(body.clone()).cache_control("max-age=2, must-revalidate"),
    );
    let r = get(&n, "/v.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    wait_committed(&n);
    std::thread::sleep(Duration::from_millis(2100));
    let r = get(&n, "/v.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "REVALIDATED"));
    assert!(r.body == body);
    // Only the first slice was asked about.
    assert_eq!(o.requests("/v.bin"), 4, "{:?}", o.ranges("/v.bin"));
    o.fault("/v.bin", Fault::Status(503));
    let r = get(
        &n,
        "/v.bin",
        &format!("Range: bytes={}-{}\r\n", SLICE + 10, SLICE + 19),
    );
    assert_eq!((r.status, xcache(&r)), (206, "HIT"), "{:?}", r.headers);
    assert!(r.body == body[SLICE + 10..SLICE + 20]);
    let age: u64 = common::http::header(&r.headers, "age")
        .and_then(|a| a.parse().ok())
        .expect("an Age");
    assert!(
        age <= 1,
        "the first slice's age, not the slice's own: {age}"
    );
    assert_eq!(o.requests("/v.bin"), 4, "the origin was asked");
    // Past the first slice's lifetime too, must-revalidate holds: no stale bytes.
    std::thread::sleep(Duration::from_millis(2100));
    let r = get(
        &n,
        "/v.bin",
        &format!("Range: bytes={}-{}\r\n", SLICE + 10, SLICE + 19),
    );
    assert_eq!(r.status, 503, "{:?}", r.headers);
}

/// The same when the 304 moved the Last-Modified under the same strong ETag (an object
/// uploaded again unchanged): the strong ETag names the bytes, so the later slices are still
/// vouched for, with the new date (each was revalidated once, conditionally).
#[test]
fn a_304_with_a_newer_last_modified_still_vouches_for_the_later_slices() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(3 * SLICE, 8);
    o.put(
        "/u.bin",
        Object::new(body.clone()).cache_control("max-age=1, stale-while-revalidate=0"),
    );
    assert_eq!(xcache(&get(&n, "/u.bin", "")), "MISS");
    wait_committed(&n);
    std::thread::sleep(Duration::from_millis(1100));
    let newer = "Thu, 02 Jan 2025 00:00:00 GMT";
    let mut again = Object::new(body.clone()).cache_control("max-age=1, stale-while-revalidate=0");
    again.last_modified = Some(newer.into());
    o.put("/u.bin", again);
    let asked = o.requests("/u.bin");
    let r = get(&n, "/u.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "REVALIDATED"));
    assert!(r.body == body);
    assert_eq!(r.header("Last-Modified"), Some(newer));
    assert_eq!(
        o.requests("/u.bin") - asked,
        1,
        "later slices were asked about: {:?}",
        o.ranges("/u.bin")
    );
    let r = get(
        &n,
        "/u.bin",
        &format!("Range: bytes={}-{}\r\n", 2 * SLICE, 2 * SLICE + 9),
    );
    assert_eq!((r.status, xcache(&r)), (206, "HIT"));
    assert_eq!(r.header("Last-Modified"), Some(newer));
    assert!(r.body == body[2 * SLICE..2 * SLICE + 10]);
}

/// A 304 that makes the first slice's stored fields longer (here by a 5000-byte field, so its
/// header takes two pages where the later slices' take one) vouches for the later slices
/// without moving where their bodies are read from: each file's body starts where its own
/// header ends, not where the first slice's header would.
#[test]
fn a_304_that_lengthens_the_fields_keeps_the_later_slices_bytes() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(3 * SLICE, 9);
    let cc = "max-age=1, stale-while-revalidate=0";
    o.put("/l.bin", Object::new(body.clone()).cache_control(cc));
    assert_eq!(xcache(&get(&n, "/l.bin", "")), "MISS");
    wait_committed(&n);
    std::thread::sleep(Duration::from_millis(1100));
    let long = "x".repeat(5000);
    o.put(
        "/l.bin",
        Object::new(body.clone())
            .cache_control(cc)
            .header("X-Long", &long),
    );
    let r = get(&n, "/l.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "REVALIDATED"));
    assert!(r.body == body, "the revalidated object's bytes differ");
    assert_eq!(r.header("X-Long"), Some(long.as_str()));
    for at in [SLICE + 10, 2 * SLICE + 4000, 3 * SLICE - 20] {
        let r = get(&n, "/l.bin", &format!("Range: bytes={at}-{}\r\n", at + 9));
        assert_eq!(r.status, 206, "{:?}", r.headers);
        assert!(r.body == body[at..at + 10], "bytes at {at} differ");
    }
}

/// A 304 whose strong ETag is not the stored one's is about another response: it refreshes
/// nothing (RFC 9111 §4.3.4); the object is fetched unconditionally instead.
#[test]
fn a_304_naming_another_version_refreshes_nothing() {
    let (o, n) = origin_and_node("slice_size = 0");
    o.put(
        "/e.txt",
        Object::version(pattern(1000, 1), 1).cache_control("max-age=1, stale-while-revalidate=0"),
    );
    assert_eq!(xcache(&get(&n, "/e.txt", "")), "MISS");
    let v2 = pattern(1000, 2);
    o.put(
        "/e.txt",
        Object::version(v2.clone(), 2).cache_control("max-age=100"),
    );
    o.fault_times(
        "/e.txt",
        Fault::Raw(
            b"HTTP/1.1 304 Not Modified\r\nETag: \"e9\"\r\nCache-Control: max-age=100\r\n\r\n"
                .to_vec(),
        ),
        1,
    );
    std::thread::sleep(Duration::from_millis(1100));
    let r = get(&n, "/e.txt", "");
    assert_eq!(r.status, 200);
    assert!(r.body == v2, "the stored version was served as refreshed");
    assert_eq!(r.header("ETag"), Some("\"v2\""));
    let last = o.seen().last().cloned().expect("a request");
    assert_eq!(last.header("If-None-Match"), None, "asked unconditionally");
    wait_committed(&n);
    let r = get(&n, "/e.txt", "");
    assert_eq!(xcache(&r), "HIT");
    assert!(r.body == v2);
}

/// Which stored responses a 304 selects (RFC 9111 §4.3.4) when the tags are not both strong:
/// a weak ETag or none stored, a weak one sent, or a strong one sent for a response stored
/// without. These all used to refresh the stored bytes (REVALIDATED), another version's
/// lifetime given to them.
#[test]
fn a_304_selects_by_its_own_validator() {
    let (o, n) = origin_and_node("slice_size = 0");
    let lm = "Wed, 01 Jan 2025 00:00:01 GMT";
    // (stored ETag, the 304's validator fields, whether it selects the stored response)
    let cases: [(Option<&str>, &str, bool); 6] = [
        (Some("W/\"v1\""), "ETag: \"v2\"\r\n", false),
        (Some("W/\"v1\""), "ETag: W/\"v2\"\r\n", false),
        (
            None,
            &format!("ETag: \"new\"\r\nLast-Modified: {lm}\r\n"),
            false,
        ),
        (Some("W/\"v1\""), "ETag: W/\"v1\"\r\n", true),
        (Some("\"v1\""), "ETag: W/\"v1\"\r\n", true),
        (Some("\"v1\""), "", true),
    ];
    for (i, (stored, fields, selects)) in cases.iter().enumerate() {
        let path = format!("/sel{i}.txt");
        let mut v1 = Object::version(pattern(1000, 1), 1)
            .cache_control("max-age=1, stale-while-revalidate=0");
        v1.etag = stored.map(str::to_string);
        o.put(&path, v1);
        assert_eq!(xcache(&get(&n, &path, "")), "MISS", "case {i}");
        wait_committed(&n);
        let mut v2 = Object::version(pattern(1000, 2), 2).cache_control("max-age=100");
        v2.etag = Some("\"v2\"".into());
        o.put(&path, v2);
        let head =
            format!("HTTP/1.1 304 Not Modified\r\n{fields}Cache-Control: max-age=100\r\n\r\n");
        o.fault_times(&path, Fault::Raw(head.into_bytes()), 1);
        std::thread::sleep(Duration::from_millis(1100));
        let r = get(&n, &path, "");
        assert_eq!(r.status, 200, "case {i}");
        if *selects {
            assert_eq!(
                xcache(&r),
                "REVALIDATED",
                "case {i}: {stored:?} / {fields:?}"
            );
            assert!(r.body == pattern(1000, 1), "case {i}");
        } else {
            assert_eq!(xcache(&r), "MISS", "case {i}: {stored:?} / {fields:?}");
            assert!(
                r.body == pattern(1000, 2),
                "case {i}: the stored version served as refreshed"
            );
        }
    }
}

/// A 304 selected by the stored strong ETag that names a newer Last-Modified (an object
/// uploaded again unchanged, as S3 keeps its ETag) updates the stored one (RFC 9111 §4.3.4):
/// clients get the new date, preconditions and the next revalidation use it, and the other
/// slices, stored under the old date, are revalidated in turn, never fetched again.
#[test]
fn a_304_with_a_newer_last_modified_updates_the_stored_one() {
    for vol in ["slice_size = 0", SLICED] {
        let (o, n) = origin_and_node(vol);
        let body = pattern(2 * SLICE + 100, 5);
        let obj = Object::new(body.clone()).cache_control("max-age=1, stale-while-revalidate=0");
        o.put("/u.bin", obj.clone());
        assert_eq!(xcache(&get(&n, "/u.bin", "")), "MISS", "{vol}");
        wait_committed(&n);
        let new_lm = "Thu, 02 Jan 2025 00:00:00 GMT";
        let mut again = obj.clone();
        again.last_modified = Some(new_lm.into());
        o.put("/u.bin", again);
        std::thread::sleep(Duration::from_millis(1100));
        let asked = o.seen().len();
        let r = get(&n, "/u.bin", "");
        assert_eq!((r.status, xcache(&r)), (200, "REVALIDATED"), "{vol}");
        assert!(r.body == body, "{vol}: wrong bytes");
        assert_eq!(r.header("Last-Modified"), Some(new_lm), "{vol}");
        let since: Vec<_> = o.seen()[asked..].to_vec();
        assert!(
            since
                .iter()
                .all(|s| s.header("If-None-Match") == Some("\"v1\"")),
            "{vol}: the bytes were asked for again: {since:?}"
        );
        wait_committed(&n);
        let r = get(&n, "/u.bin", &format!("If-Modified-Since: {new_lm}\r\n"));
        assert_eq!((r.status, xcache(&r)), (304, "HIT"), "{vol}");
        std::thread::sleep(Duration::from_millis(1100));
        let r = get(&n, "/u.bin", "");
        assert_eq!(xcache(&r), "REVALIDATED", "{vol}");
        assert!(r.body == body, "{vol}: wrong bytes");
        let last = o.seen().last().cloned().expect("a request");
        assert_eq!(last.header("If-Modified-Since"), Some(new_lm), "{vol}");
    }
}

/// Without an ETag, a 304 naming another Last-Modified than the stored one does not select it
/// (RFC 9111 §4.3.4): the object is fetched again unconditionally, never served as refreshed.
#[test]
fn a_304_naming_another_last_modified_refreshes_nothing() {
    let (o, n) = origin_and_node("slice_size = 0");
    let v1 =
        Object::version(pattern(1000, 1), 1).cache_control("max-age=1, stale-while-revalidate=0");
    let mut v1 = v1;
    v1.etag = None;
    o.put("/lm.txt", v1);
    assert_eq!(xcache(&get(&n, "/lm.txt", "")), "MISS");
    let v2 = pattern(1000, 2);
    let mut obj = Object::version(v2.clone(), 2).cache_control("max-age=100");
    obj.etag = None;
    o.put("/lm.txt", obj);
    o.fault_times(
        "/lm.txt",
        Fault::Raw(
            b"HTTP/1.1 304 Not Modified\r\nLast-Modified: Wed, 01 Jan 2025 00:00:02 GMT\r\n\
              Cache-Control: max-age=100\r\n\r\n"
                .to_vec(),
        ),
        1,
    );
    std::thread::sleep(Duration::from_millis(1100));
    let r = get(&n, "/lm.txt", "");
    assert_eq!(r.status, 200);
    assert!(r.body == v2, "the stored version was served as refreshed");
    let last = o.seen().last().cloned().expect("a request");
    assert_eq!(
        last.header("If-Modified-Since"),
        None,
        "asked unconditionally"
    );
}

/// Every stored slice of an object's old version counts as replaced when the object changed
/// at the origin, the one a new version was committed over in its place too (it was not: a
/// 1-slice object counted 0, a 3-slice one 2).
#[test]
fn an_object_changed_at_the_origin_counts_every_old_slice_as_replaced() {
    let (o, n) = origin_and_node(SLICED);
    let replaced = |n: &Node| {
        volume_metric(
            n,
            "contentserver_cache_evictions_total",
            &[("reason", "replaced")],
        )
    };
    // Found stale and refetched at once; or served stale (UPDATING) while refreshed in the
    // background, the old later slices replaced as a read finds them older than the first.
    let cases = [
        ("/one.bin", 1000, 1.0, 0),
        ("/three.bin", 3 * SLICE, 3.0, 0),
        ("/bg.bin", 3 * SLICE, 3.0, 60),
    ];
    for (path, len, slices, swr) in cases {
        let cc = format!("max-age=1, stale-while-revalidate={swr}");
        o.put(path, Object::version(pattern(len, 1), 1).cache_control(&cc));
        assert_eq!(get(&n, path, "").body.len(), len);
        wait_committed(&n);
        let before = replaced(&n);
        o.put(path, Object::version(pattern(len, 2), 2).cache_control(&cc));
        std::thread::sleep(Duration::from_millis(1100));
        let mut r = get(&n, path, "");
        if swr > 0 {
            assert_eq!(xcache(&r), "UPDATING", "{path}");
            wait_committed(&n);
            r = get(&n, path, "");
        }
        assert!(r.body == pattern(len, 2), "{path}: not the new version");
        wait_committed(&n);
        assert!(
            common::wait_until(Duration::from_secs(5), || replaced(&n) - before == slices),
            "{path}: {} replaced, {slices} slices",
            replaced(&n) - before
        );
    }
}

/// The `Age` an origin (or a parent cache) sends was the answer's age when the request was
/// made: the time the answer took is added to it (RFC 9111 §4.2.3). An answer with `Age: 2`
/// and `max-age=3` that took 2 s to come is 4 s old, stale: it used to count as 2 s old, and
/// was served fresh (HIT) for the 2 s past its lifetime.
#[test]
fn an_origin_age_counts_the_time_the_answer_took() {
    let o = FaultOrigin::start();
    let n = temp_node(&[o.url()], "read_timeout_ms = 5000", "slice_size = 0");
    o.put(
        "/aged.txt",
        Object::new(pattern(100, 1))
            .cache_control("max-age=3")
            .header("Age", "2"),
    );
    o.set_timing(Timing {
        head_delay: Duration::from_millis(2100),
        ..Timing::default()
    });
    let r = get(&n, "/aged.txt", "");
    assert_eq!(xcache(&r), "MISS");
    let age: u64 = r
        .header("Age")
        .and_then(|a| a.parse().ok())
        .expect("an Age");
    assert!(age >= 4, "Age {age}");
    o.set_timing(Timing::default());
    wait_committed(&n);
    let r = get(&n, "/aged.txt", "");
    assert_ne!(xcache(&r), "HIT", "served fresh past its lifetime");
}

/// Answers from the cache carry the origin's `Date` with an `Age` counted from it, so a
/// downstream cache computes what is left of an `Expires` lifetime as the origin meant it
/// (RFC 9111 §4.2); an answer without a Date gets the time it arrived, kept for every hit.
#[test]
fn answers_from_the_cache_keep_the_origin_date() {
    let (o, n) = origin_and_node("slice_size = 0");
    let date = "Wed, 01 Jan 2025 00:00:00 GMT";
    o.put(
        "/d.txt",
        Object::new(pattern(100, 1))
            .cache_control("max-age=999999999")
            .header("Date", date)
            .header("Expires", "Wed, 01 Jan 2025 00:01:40 GMT"),
    );
    let miss = get(&n, "/d.txt", "");
    assert_eq!(xcache(&miss), "MISS");
    wait_committed(&n);
    let hit = get(&n, "/d.txt", "");
    assert_eq!(xcache(&hit), "HIT");
    for r in [&miss, &hit] {
        let dates: Vec<_> = r
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("date"))
            .collect();
        assert_eq!(dates.len(), 1, "{:?}", r.headers);
        assert_eq!(r.header("Date"), Some(date));
        let age: u64 = r.header("Age").and_then(|a| a.parse().ok()).expect("Age");
        assert!(
            age > 60 * 86_400,
            "Age {age} not counted from the origin's Date"
        );
    }
    let r = get(&n, "/d.txt", "If-None-Match: \"v1\"\r\n");
    assert_eq!((r.status, r.header("Date")), (304, Some(date)));

    o.put(
        "/nd.txt",
        Object::new(pattern(100, 2)).cache_control("max-age=100"),
    );
    assert_eq!(xcache(&get(&n, "/nd.txt", "")), "MISS");
    wait_committed(&n);
    let first = get(&n, "/nd.txt", "");
    std::thread::sleep(Duration::from_millis(1100));
    let later = get(&n, "/nd.txt", "");
    assert_eq!(xcache(&later), "HIT");
    assert!(first.header("Date").is_some());
    assert_eq!(
        first.header("Date"),
        later.header("Date"),
        "the time it arrived, kept"
    );
    assert_ne!(later.header("Age"), Some("0"));
}

/// `Cache-Control: only-if-cached` (RFC 9111 §5.2.1.7): answered from what is stored, or 504;
/// the origin is never asked, not for a later slice either.
#[test]
fn only_if_cached_never_asks_the_origin() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(2 * SLICE + 100, 4);
    o.put("/o.bin", Object::new(body.clone()));
    let only = "Cache-Control: max-age=0, only-if-cached\r\n";
    let r = get(&n, "/o.bin", only);
    assert_eq!(r.status, 504);
    assert_eq!(o.requests("/o.bin"), 0);
    assert_eq!(get(&n, "/o.bin", "Range: bytes=0-99\r\n").status, 206);
    wait_committed(&n);
    let asked = o.requests("/o.bin");
    let r = get(&n, "/o.bin", &format!("Range: bytes=10-19\r\n{only}"));
    assert_eq!((r.status, xcache(&r)), (206, "HIT"));
    assert!(r.body == body[10..20]);
    // Slices 1 and 2 are not stored: the whole object would need the origin.
    let r = get(&n, "/o.bin", only);
    assert_eq!((r.status, xcache(&r)), (504, "MISS"));
    assert_eq!(o.requests("/o.bin"), asked, "the origin was asked");
    assert!(get(&n, "/o.bin", "").body == body);
    wait_committed(&n);
    let r = get(&n, "/o.bin", only);
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == body);
    // Errors decided from the stored entry carry its Age too.
    for (extra, code) in [
        (format!("Range: bytes={}-\r\n", body.len() + 10), 416),
        ("If-Match: \"zz\"\r\n".to_string(), 412),
    ] {
        let r = get(&n, "/o.bin", &extra);
        assert_eq!((r.status, xcache(&r)), (code, "HIT"));
        assert!(r.header("Age").is_some(), "{code} without Age");
    }
}

/// only-if-cached on a copy stale within stale-while-revalidate: served (STALE) and no
/// refresh started for it, so nothing at all goes to the origin.
#[test]
fn only_if_cached_on_a_stale_copy_starts_no_refresh() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(3 * SLICE, 5);
    o.put(
        "/s.bin",
        Object::new(body.clone()).cache_control("max-age=1, stale-while-revalidate=60"),
    );
    assert!(get(&n, "/s.bin", "").body == body);
    wait_committed(&n);
    std::thread::sleep(Duration::from_millis(1100));
    let asked = o.requests("/s.bin");
    let r = get(&n, "/s.bin", "Cache-Control: only-if-cached\r\n");
    assert_eq!((r.status, xcache(&r)), (200, "STALE"));
    assert!(r.body == body);
    settle(&n);
    assert_eq!(o.requests("/s.bin"), asked, "the origin was asked");
}

/// A background refresh (stale-while-revalidate) whose answer may no longer be stored
/// withdraws the stored copy: the next requests get the origin's current answer, passed
/// through, not the old body for the rest of the window.
#[test]
fn a_background_refresh_that_is_no_longer_storable_withdraws_the_stored_copy() {
    let (o, n) = origin_and_node("slice_size = 0");
    let v1 = pattern(1000, 1);
    o.put(
        "/w.txt",
        Object::version(v1.clone(), 1).cache_control("max-age=1, stale-while-revalidate=30"),
    );
    assert_eq!(xcache(&get(&n, "/w.txt", "")), "MISS");
    let v2 = pattern(1000, 2);
    o.put(
        "/w.txt",
        Object::version(v2.clone(), 2).cache_control("no-store"),
    );
    std::thread::sleep(Duration::from_millis(1100));
    let r = get(&n, "/w.txt", "");
    assert_eq!((xcache(&r), r.body == v1), ("UPDATING", true));
    // The withdrawal is part of the refresh: done when no fill runs.
    settle(&n);
    assert_eq!(
        cache_files(&n.cache).1,
        0,
        "the stored copy was not withdrawn when the refresh ended: {}",
        n.srv.logs()
    );
    let before = o.requests("/w.txt");
    for _ in 0..3 {
        let r = get(&n, "/w.txt", "");
        assert_eq!(xcache(&r), "BYPASS");
        assert!(r.body == v2, "the withdrawn version was served");
    }
    assert_eq!(o.requests("/w.txt") - before, 3, "one origin request each");
}

/// A seek into a stale sliced object refreshes only the slice it reads, in the background; when
/// that finds a new version, the old one's other slices go too, so the next full read is one
/// whole version (not the old slices cut where the new one begins).
#[test]
fn a_background_refresh_that_finds_a_new_version_drops_the_old_slices() {
    let (o, n) = origin_and_node(SLICED);
    let len = 3 * SLICE + SLICE / 2;
    let v1 = pattern(len, 1);
    let cc = "max-age=1, stale-while-revalidate=60";
    o.put("/v.bin", Object::version(v1.clone(), 1).cache_control(cc));
    assert!(get(&n, "/v.bin", "").body == v1);
    wait_committed(&n);
    let v2 = pattern(len, 2);
    o.put("/v.bin", Object::version(v2.clone(), 2).cache_control(cc));
    std::thread::sleep(Duration::from_millis(1100));
    let at = 2 * SLICE + 5;
    let r = get(&n, "/v.bin", &format!("Range: bytes={at}-{}\r\n", at + 9));
    assert_eq!((r.status, xcache(&r)), (206, "UPDATING"));
    assert!(r.body == v1[at..at + 10]);
    wait_committed(&n);
    let r = common::cache::try_get(&n, "/v.bin", "").expect("a whole answer");
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), len, "cut short");
    assert!(r.body == v2, "not the new version whole");
    wait_committed(&n);
    let r = get(&n, "/v.bin", "");
    assert_eq!(xcache(&r), "HIT");
    assert!(r.body == v2);
}

/// An object that shrank, found by a background refresh of its first slice: the old version's
/// slices past the new end are no slices of it any more. A range there is answered from the new
/// first slice (416 with the new size, a HIT) and the old slice dropped, not asked of the
/// origin on every seek (which answered 416 without `Content-Range` each time: S3 tester).
#[test]
fn a_range_into_an_old_slice_past_the_new_end_is_a_416_from_the_first_slice() {
    let (o, n) = origin_and_node(SLICED);
    let cc = "max-age=1, stale-while-revalidate=60";
    let v1 = pattern(5 * SLICE, 1);
    o.put("/sh.bin", Object::version(v1.clone(), 1).cache_control(cc));
    assert!(get(&n, "/sh.bin", "").body == v1);
    wait_committed(&n);
    let v2 = pattern(3 * SLICE, 2);
    o.put(
        "/sh.bin",
        Object::version(v2.clone(), 2).cache_control("max-age=600"),
    );
    std::thread::sleep(Duration::from_millis(1100));
    let r = get(&n, "/sh.bin", "");
    assert_eq!(
        (r.status, xcache(&r), r.body == v1),
        (200, "UPDATING", true)
    );
    settle(&n);
    let r = get(&n, "/sh.bin", "Range: bytes=0-9\r\n");
    assert_eq!((r.status, xcache(&r)), (206, "HIT"));
    assert_eq!(
        r.header("Content-Range"),
        Some(&*format!("bytes 0-9/{}", 3 * SLICE))
    );
    let stored = cache_files(&n.cache).1;
    let before = o.requests("/sh.bin");
    for range in [
        format!("{}-", 4 * SLICE),
        format!("{}-{}", 3 * SLICE, 3 * SLICE + 5),
    ] {
        for _ in 0..2 {
            let r = get(&n, "/sh.bin", &format!("Range: bytes={range}\r\n"));
            assert_eq!((r.status, xcache(&r)), (416, "HIT"), "{range}");
            assert_eq!(
                r.header("Content-Range"),
                Some(&*format!("bytes */{}", 3 * SLICE)),
                "{range}"
            );
        }
    }
    assert_eq!(o.requests("/sh.bin"), before, "the origin was asked");
    settle(&n);
    assert_eq!(
        cache_files(&n.cache).1,
        stored - 2,
        "the old slices met past the end were not dropped"
    );
}

/// A stale copy is served whole while a background refresh finds a new version: a client
/// reading it slowly still gets every byte of the version it started with.
#[test]
fn a_stale_copy_is_sent_whole_while_its_refresh_finds_a_new_version() {
    use std::io::{Read, Write};
    let (o, n) = origin_and_node(SLICED);
    let len = 256 * SLICE;
    let v1 = pattern(len, 1);
    let cc = "max-age=1, stale-while-revalidate=100";
    o.put("/u.bin", Object::version(v1.clone(), 1).cache_control(cc));
    assert!(get(&n, "/u.bin", "").body == v1);
    wait_committed(&n);
    o.put(
        "/u.bin",
        Object::version(pattern(len, 2), 2).cache_control(cc),
    );
    std::thread::sleep(Duration::from_millis(1100));
    let mut slow = std::net::TcpStream::connect(n.srv.addr).expect("connect");
    slow.write_all(b"GET /u.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .expect("request");
    let mut got = vec![0u8; 64 << 10];
    let k = slow.read(&mut got).expect("head");
    got.truncate(k);
    // The refresh runs and commits the new first slice while this client waits.
    settle(&n);
    std::thread::sleep(Duration::from_millis(200));
    slow.read_to_end(&mut got).expect("the rest");
    let text = String::from_utf8_lossy(&got[..got.len().min(400)]).to_string();
    assert!(text.contains("X-Cache: UPDATING"), "{text}");
    let at = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    assert_eq!(got.len() - at, len, "the stale copy was cut");
    assert!(got[at..] == v1[..], "not the version it started with");
    let r = get(&n, "/u.bin", "");
    assert!(
        r.body == pattern(len, 2),
        "the next request gets the new version"
    );
}

/// A range request whose slice finds the object changed (another version, or shorter: 416)
/// drops the stored first slice of the old version: the next full read is one whole version,
/// not the old first slice cut where the new version begins.
#[test]
fn a_range_that_finds_a_new_version_outdates_the_stored_first_slice() {
    let (o, n) = origin_and_node(SLICED);
    let len = 4 * SLICE;
    o.put("/g.bin", Object::version(pattern(len, 1), 1));
    assert_eq!(get(&n, "/g.bin", "Range: bytes=0-10\r\n").status, 206);
    wait_committed(&n);
    let v2 = pattern(len, 2);
    o.put("/g.bin", Object::version(v2.clone(), 2));
    let at = 2 * SLICE + 7;
    let r = get(&n, "/g.bin", &format!("Range: bytes={at}-{}\r\n", at + 9));
    assert_eq!(r.status, 206);
    assert!(r.body == v2[at..at + 10]);
    settle(&n);
    std::thread::sleep(Duration::from_millis(200));
    let r = common::cache::try_get(&n, "/g.bin", "").expect("a whole answer");
    assert!(r.body == v2, "not version 2 whole ({} bytes)", r.body.len());
    // Shorter now (only the first slice stored): the range past its new end is 416, and the
    // next full read is the new length.
    o.put("/h.bin", Object::version(pattern(len, 1), 1));
    assert_eq!(get(&n, "/h.bin", "Range: bytes=0-10\r\n").status, 206);
    wait_committed(&n);
    let v3 = pattern(SLICE + 100, 3);
    o.put("/h.bin", Object::version(v3.clone(), 3));
    // The next request on the same connection, sent at once, finds the first slice gone.
    let mut c = common::Conn::new(n.srv.addr);
    let range = format!("bytes={at}-{}", at + 9);
    let r = c
        .request("GET", "/h.bin", &[("Range", range.as_str())])
        .expect("the range's answer");
    assert_eq!(r.status, 416);
    let r = c.request("GET", "/h.bin", &[]).expect("a whole answer");
    assert!(r.body == v3, "not version 3 whole ({} bytes)", r.body.len());
}

/// Seeks without If-Range (what most players send) never splice two versions across
/// requests: once a seek found a new version, a later old slice still stored is not served to
/// the next seek as a hit of the old version; and a stored later slice older than the stored
/// first slice is asked for again before it is served.
#[test]
fn a_seek_never_gets_an_old_slice_once_a_new_version_was_found() {
    let (o, n) = origin_and_node(SLICED);
    let len = 4 * SLICE;
    let v1 = pattern(len, 1);
    o.put("/s.bin", Object::version(v1.clone(), 1));
    // Slices 0 and 3 of version 1 stored.
    assert_eq!(get(&n, "/s.bin", "Range: bytes=0-10\r\n").status, 206);
    let at3 = 3 * SLICE + 5;
    let r = get(&n, "/s.bin", &format!("Range: bytes={at3}-{}\r\n", at3 + 9));
    assert!(r.body == v1[at3..at3 + 10]);
    wait_committed(&n);
    let v2 = pattern(len, 2);
    o.put("/s.bin", Object::version(v2.clone(), 2));
    // A seek into slice 2 (not stored) meets version 2.
    let at2 = 2 * SLICE + 5;
    let r = get(&n, "/s.bin", &format!("Range: bytes={at2}-{}\r\n", at2 + 9));
    assert!(r.body == v2[at2..at2 + 10]);
    wait_committed(&n);
    // The next seek, into slice 3 (version 1 stored, still fresh), gets version 2.
    let r = get(&n, "/s.bin", &format!("Range: bytes={at3}-{}\r\n", at3 + 9));
    assert_eq!(r.status, 206);
    assert_eq!(r.header("ETag"), Some("\"v2\""), "{:?}", r.headers);
    assert!(r.body == v2[at3..at3 + 10], "a seek spliced version 1 in");
    wait_committed(&n);
    let r = get(&n, "/s.bin", "");
    assert!(r.body == v2, "not version 2 whole");
    // Stored again as version 2: a seek into slice 3 is a hit now, the origin not asked.
    let before = o.seen().len();
    let r = get(&n, "/s.bin", &format!("Range: bytes={at3}-{}\r\n", at3 + 9));
    assert_eq!((r.status, xcache(&r)), (206, "HIT"));
    assert!(r.body == v2[at3..at3 + 10]);
    assert_eq!(
        o.seen().len(),
        before,
        "a hit of a slice that agrees asked the origin"
    );
}

/// A seek into a stale stored later slice that finds a new version fetches the new first
/// slice too (the old slices are dropped), as a seek into a slice not stored does.
#[test]
fn a_stale_seek_that_finds_a_new_version_fetches_the_new_first_slice() {
    let (o, n) = origin_and_node(SLICED);
    let len = 4 * SLICE;
    let cc = "max-age=1, stale-while-revalidate=0";
    o.put(
        "/st.bin",
        Object::version(pattern(len, 1), 1).cache_control(cc),
    );
    let at = 3 * SLICE + 5;
    let seek = format!("Range: bytes={at}-{}\r\n", at + 9);
    assert_eq!(get(&n, "/st.bin", "Range: bytes=0-10\r\n").status, 206);
    assert_eq!(get(&n, "/st.bin", &seek).status, 206);
    wait_committed(&n);
    let v2 = pattern(len, 2);
    o.put("/st.bin", Object::version(v2.clone(), 2).cache_control(cc));
    std::thread::sleep(Duration::from_millis(1200));
    let before = o.ranges("/st.bin").len();
    let r = get(&n, "/st.bin", &seek);
    assert!(r.body == v2[at..at + 10]);
    wait_committed(&n);
    let asked: Vec<_> = o.ranges("/st.bin")[before..].to_vec();
    assert!(
        asked.contains(&Some(format!("bytes=0-{}", SLICE - 1))),
        "the new first slice was not fetched: {asked:?}"
    );
}

/// The same for an object of several slices: the request that revalidated gets the whole
/// validated body (its later slices stay until it has read them), later requests are passed
/// through.
#[test]
fn a_304_that_forbids_storing_withdraws_a_sliced_object_after_its_readers() {
    let (o, n) = origin_and_node(SLICED);
    let len = 4 * SLICE + 100;
    for i in 0..5 {
        let p = format!("/q{i}.bin");
        let v1 = pattern(len, 1);
        o.put(
            &p,
            Object::version(v1.clone(), 1).cache_control("max-age=1, stale-while-revalidate=0"),
        );
        assert!(get(&n, &p, "").body == v1);
        wait_committed(&n);
        std::thread::sleep(Duration::from_millis(1050));
        // `private` forbids a shared cache to keep it as `no-store` does (RFC 9111 §5.2.2.7).
        let forbids = ["no-store", "private, max-age=100"][i % 2];
        o.fault_times(
            &p,
            Fault::Raw(
                format!(
                    "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: {forbids}\r\n\r\n"
                )
                .into_bytes(),
            ),
            1,
        );
        let r = common::cache::try_get(&n, &p, "").expect("the whole validated body");
        assert_eq!((r.status, xcache(&r)), (200, "REVALIDATED"), "{p}");
        assert!(r.body == v1, "{p}: {} bytes", r.body.len());
        settle(&n);
        let r = get(&n, &p, "");
        assert_eq!(xcache(&r), "BYPASS", "{p}");
        assert!(r.body == v1);
    }
}

/// A 304 that forbids storing withdraws every slice of the object, not only the first and the
/// one revalidated: a seek into a later slice is passed through too, not served from the
/// cache (it was a HIT with the old fields while full reads were BYPASS).
#[test]
fn a_304_that_forbids_storing_withdraws_every_slice() {
    // The revalidating request reads the first slice only, then the whole object (whose later
    // slices are fetched again: not stored while the object is passed through, though the
    // origin's 206s say they may be).
    for (i, read) in ["Range: bytes=0-99\r\n", ""].into_iter().enumerate() {
        let (o, n) = origin_and_node(SLICED);
        let v1 = pattern(3 * SLICE, 1 + i as u8);
        o.put(
            "/s3.bin",
            Object::version(v1.clone(), 1).cache_control("max-age=1, stale-while-revalidate=0"),
        );
        assert!(get(&n, "/s3.bin", "").body == v1);
        wait_committed(&n);
        assert_eq!(cache_files(&n.cache).1, 3);
        std::thread::sleep(Duration::from_millis(1050));
        o.fault_times(
            "/s3.bin",
            Fault::Raw(
                b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: no-store\r\n\r\n"
                    .to_vec(),
            ),
            1,
        );
        let r = get(&n, "/s3.bin", read);
        assert_eq!(xcache(&r), "REVALIDATED", "{read:?}");
        let want: &[u8] = if read.is_empty() { &v1 } else { &v1[..100] };
        assert!(r.body == want, "{read:?}");
        settle(&n);
        // (The withdrawal deletes the files on the pool once the fill ended.)
        assert!(
            common::wait_until(Duration::from_secs(5), || cache_files(&n.cache).1 == 0),
            "{read:?}: slices of a withdrawn object stay or came back: {:?}",
            cache_files(&n.cache)
        );
        for k in [1, 2] {
            let seek = format!("Range: bytes={}-{}\r\n", k * SLICE, k * SLICE + 99);
            let r = get(&n, "/s3.bin", &seek);
            assert_eq!(
                (r.status, xcache(&r)),
                (206, "BYPASS"),
                "{read:?} slice {k}"
            );
            assert!(r.body == v1[k * SLICE..k * SLICE + 100]);
        }
        settle(&n);
        assert_eq!(
            cache_files(&n.cache).1,
            0,
            "{read:?}: a seek stored its slice"
        );
    }
}

/// Requests with Authorization served a stale shared (`public`) copy (UPDATING) start one
/// background refresh between them, as others do: each started its own (their fills are never
/// joined), one origin request per request.
#[test]
fn requests_with_authorization_share_one_background_refresh() {
    let (o, n) = origin_and_node("slice_size = 0");
    let v1 = pattern(1000, 1);
    o.put(
        "/pub.txt",
        Object::version(v1.clone(), 1)
            .cache_control("public, max-age=1, stale-while-revalidate=30"),
    );
    assert_eq!(xcache(&get(&n, "/pub.txt", "")), "MISS");
    wait_committed(&n);
    std::thread::sleep(Duration::from_millis(1100));
    o.set_timing(Timing {
        head_delay: Duration::from_millis(500),
        ..Timing::default()
    });
    let before = o.requests("/pub.txt");
    for _ in 0..4 {
        let r = get(&n, "/pub.txt", "Authorization: Bearer u1\r\n");
        assert_eq!(xcache(&r), "UPDATING");
        assert!(r.body == v1);
        std::thread::sleep(Duration::from_millis(50));
    }
    settle(&n);
    o.set_timing(Timing::default());
    assert_eq!(o.requests("/pub.txt") - before, 1, "one refresh for all");
}

/// A slice being fetched when a revalidation withdraws its object (the origin now says
/// no-store) is not stored when it ends: it was, and seeks into it were HITs of the old version
/// while full reads were BYPASS.
#[test]
fn a_slice_fill_under_way_when_its_object_is_withdrawn_stores_nothing() {
    let (o, n) = origin_and_node(SLICED);
    let v1 = pattern(2 * SLICE, 1);
    let v2 = pattern(2 * SLICE, 2);
    o.put(
        "/w2.bin",
        Object::version(v1.clone(), 1).cache_control("max-age=2, stale-while-revalidate=30"),
    );
    let stored_at = Instant::now();
    let r = get(&n, "/w2.bin", "Range: bytes=0-99\r\n");
    assert_eq!(xcache(&r), "MISS");
    wait_committed(&n);
    // Slice 1 is fetched slowly (8 chunks, 0.4 s each: well within the origin's read timeout
    // of 1 s, else the fill resumes and meets v2) by a full read.
    o.set_timing(Timing {
        chunk_delay: Duration::from_millis(400),
        chunk_size: SLICE / 8,
        ..Timing::default()
    });
    let addr = n.srv.addr;
    let full = std::thread::spawn(move || common::http::request(addr, "GET", "/w2.bin", &[]));
    let slice1 = Some(format!("bytes={}-{}", SLICE, 2 * SLICE - 1));
    assert!(common::wait_until(Duration::from_secs(5), || o
        .ranges("/w2.bin")
        .contains(&slice1)));
    o.put(
        "/w2.bin",
        Object::version(v2.clone(), 2).cache_control("no-store"),
    );
    // Slice 0 goes stale: its refresh gets v2, no-store, and withdraws the object.
    std::thread::sleep(Duration::from_millis(2100).saturating_sub(stored_at.elapsed()));
    let r = get(&n, "/w2.bin", "Range: bytes=0-99\r\n");
    assert_eq!((xcache(&r), r.body == v1[..100]), ("UPDATING", true));
    let r = full.join().expect("the full read");
    assert!(
        r.body == v1,
        "the full read is not v1 whole: {} {:?} {} bytes, v2 from {:?}; origin saw {:?}\n{}",
        r.status,
        r.header("X-Cache"),
        r.body.len(),
        r.body.iter().zip(&v2).position(|(a, b)| a == b),
        o.ranges("/w2.bin"),
        n.srv.logs()
    );
    o.set_timing(Timing::default());
    settle(&n);
    assert_eq!(
        cache_files(&n.cache).1,
        0,
        "a slice fetched while its object was withdrawn was stored"
    );
    let r = get(
        &n,
        "/w2.bin",
        &format!("Range: bytes={}-{}\r\n", SLICE, SLICE + 99),
    );
    assert_eq!((r.status, xcache(&r)), (206, "BYPASS"));
    assert!(r.body == v2[SLICE..SLICE + 100]);
}

/// A 304 that says the response may no longer be stored (`private`) validates the body for
/// the request that asked, and withdraws the object: later requests are passed through.
#[test]
fn a_304_that_forbids_storing_withdraws_the_object() {
    let (o, n) = origin_and_node("slice_size = 0");
    let v1 = pattern(1000, 1);
    // Several objects: the request right after the 304's answer (not waiting for anything)
    // sometimes came before the withdrawal, and was a MISS or another REVALIDATED.
    let paths: Vec<String> = (0..8).map(|i| format!("/p{i}.txt")).collect();
    for p in &paths {
        o.put(
            p,
            Object::version(v1.clone(), 1).cache_control("max-age=1, stale-while-revalidate=0"),
        );
        assert_eq!(xcache(&get(&n, p, "")), "MISS");
    }
    std::thread::sleep(Duration::from_millis(1100));
    for (i, p) in paths.iter().enumerate() {
        let cc = if i % 2 == 0 { "private" } else { "no-store" };
        let head = format!(
            "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: {cc}, max-age=100\r\n\r\n"
        );
        o.fault_times(p, Fault::Raw(head.into_bytes()), 1);
        let r = get(&n, p, "");
        assert_eq!((r.status, xcache(&r)), (200, "REVALIDATED"), "{p}");
        assert!(r.body == v1);
        let r = get(&n, p, "");
        assert_eq!(
            xcache(&r),
            "BYPASS",
            "{p}: the next request after the 304's answer"
        );
        assert!(r.body == v1);
    }
}

/// A seek into a stale object whose background refresh gets 416 (the object is shorter now)
/// drops the old first slice too: the next full read is the new version.
#[test]
fn a_background_refresh_past_the_new_end_drops_the_old_first_slice() {
    let (o, n) = origin_and_node(SLICED);
    let len = 3 * SLICE + 100;
    let cc = "max-age=1, stale-while-revalidate=60";
    o.put(
        "/k.bin",
        Object::version(pattern(len, 1), 1).cache_control(cc),
    );
    assert_eq!(get(&n, "/k.bin", "").body.len(), len);
    wait_committed(&n);
    let v2 = pattern(SLICE + 10, 2);
    o.put("/k.bin", Object::version(v2.clone(), 2).cache_control(cc));
    std::thread::sleep(Duration::from_millis(1100));
    let at = 2 * SLICE;
    let r = get(&n, "/k.bin", &format!("Range: bytes={at}-{}\r\n", at + 99));
    assert_eq!((r.status, xcache(&r)), (206, "UPDATING"));
    settle(&n);
    std::thread::sleep(Duration::from_millis(200));
    let r = common::cache::try_get(&n, "/k.bin", "").expect("a whole answer");
    assert!(r.body == v2, "not the new version ({} bytes)", r.body.len());
}

/// A request that joins a refetch whose answer is stale already (max-age=1, the origin slow
/// with the body) asks the origin itself; when that fails, it gets the stored copy, stale
/// (stale-if-error), as a request that made the refetch would. It used to get the origin's
/// 500. Not when the refetch brought a new version: the old one's slices are going, and a
/// stale copy of several slices would be cut after its first.
#[test]
fn a_request_joining_a_refetch_already_stale_still_gets_stale_if_error() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cfg = config(
        &[o.url()],
        &d.path().join("cache"),
        "read_timeout_ms = 5000",
        SLICED,
    );
    let n = Node::start(&cfg);
    let cc = "max-age=1, stale-while-revalidate=0";
    // No validators: the refetch is a plain GET (no 304), the same version (same size).
    let small = pattern(5000, 3);
    o.put(
        "/live.m3u8",
        Object::new(small.clone()).no_validators().cache_control(cc),
    );
    // Compressed, varying by Accept-Encoding.
    let gz = pattern(4000, 4);
    o.put(
        "/gz.txt",
        Object::new(gz.clone())
            .no_validators()
            .cache_control(cc)
            .header("Content-Encoding", "gzip")
            .header("Vary", "Accept-Encoding"),
    );
    // Three slices, whose refetch brings a new version.
    let big = pattern(3 * SLICE, 5);
    o.put(
        "/big.bin",
        Object::version(big.clone(), 1).cache_control(cc),
    );
    for p in ["/live.m3u8", "/big.bin", "/gz.txt"] {
        assert_eq!(xcache(&get(&n, p, "")), "MISS");
    }
    settle(&n);
    std::thread::sleep(Duration::from_millis(1200));
    // The refetches: their heads come at once, their bodies stall.
    o.put(
        "/big.bin",
        Object::version(pattern(3 * SLICE, 6), 2).cache_control(cc),
    );
    let mut first = Vec::new();
    for (p, asked) in [("/live.m3u8", 2), ("/big.bin", 4), ("/gz.txt", 2)] {
        o.fault(p, Fault::StallAfter(100));
        let addr = n.srv.addr;
        first.push(std::thread::spawn(move || {
            common::Conn::new(addr)
                .request("GET", p, &[])
                .map(|r| r.status)
        }));
        assert!(
            common::wait_until(Duration::from_secs(2), || o.requests(p) >= asked),
            "{p}: {} requests",
            o.requests(p)
        );
    }
    // Their answers are stale now; the origin fails.
    std::thread::sleep(Duration::from_millis(1300));
    o.fault("/live.m3u8", Fault::Status(500));
    let r = get(&n, "/live.m3u8", "");
    assert_eq!((r.status, xcache(&r)), (200, "STALE"), "{}", n.srv.logs());
    assert!(r.body == small);
    assert_eq!(o.requests("/live.m3u8"), 3, "asked the origin itself");
    // No answer at all: stale too.
    o.fault("/live.m3u8", Fault::CloseBeforeHead);
    let r = get(&n, "/live.m3u8", "");
    assert_eq!((r.status, xcache(&r)), (200, "STALE"));
    // A seek gets the stored bytes it asks for.
    o.fault("/live.m3u8", Fault::Status(503));
    let r = get(&n, "/live.m3u8", "Range: bytes=1000-1999\r\n");
    assert_eq!((r.status, xcache(&r)), (206, "STALE"));
    assert!(r.body == small[1000..2000]);
    // The old version of the object of several slices is not served: the origin's answer is.
    o.fault("/big.bin", Fault::Status(500));
    let r = get(&n, "/big.bin", "");
    assert_eq!((r.status, xcache(&r)), (500, "MISS"), "{}", n.srv.logs());
    // A stale copy in a coding the client refuses is not its copy (RFC 9111 §4.1).
    o.fault("/gz.txt", Fault::Status(500));
    let r = get(&n, "/gz.txt", "Accept-Encoding: identity\r\n");
    assert_eq!((r.status, xcache(&r)), (500, "BYPASS"), "{}", n.srv.logs());
    let r = get(&n, "/gz.txt", "Accept-Encoding: gzip\r\n");
    assert_eq!((r.status, xcache(&r)), (200, "STALE"));
    assert!(r.body == gz);
    // (The first requests end with the node: not waited for.)
    drop(first);
}

#[test]
fn stale_entries_are_revalidated_refreshed_in_the_background_or_served_on_error() {
    let (o, n) = origin_and_node("slice_size = 0");
    // max-age 1 s, no stale-while-revalidate: revalidated synchronously; 304 -> REVALIDATED.
    o.put(
        "/r.txt",
        Object::new(pattern(1000, 7))
            .cache_control("max-age=1, stale-while-revalidate=0, stale-if-error=60"),
    );
    assert_eq!(xcache(&get(&n, "/r.txt", "")), "MISS");
    assert_eq!(xcache(&get(&n, "/r.txt", "")), "HIT");
    std::thread::sleep(Duration::from_millis(2100));
    let r = get(&n, "/r.txt", "");
    assert_eq!((r.status, xcache(&r)), (200, "REVALIDATED"));
    assert!(r.body == pattern(1000, 7));
    let last = o.seen().last().cloned().unwrap();
    assert_eq!(last.header("if-none-match"), Some("\"v1\""));
    assert_eq!(
        xcache(&get(&n, "/r.txt", "")),
        "HIT",
        "a 304 did not refresh the entry"
    );
    // Stale and the origin fails: served stale (stale-if-error).
    std::thread::sleep(Duration::from_millis(2100));
    o.fault("/r.txt", Fault::Status(503));
    let r = get(&n, "/r.txt", "");
    assert_eq!((r.status, xcache(&r)), (200, "STALE"));
    assert!(r.body == pattern(1000, 7));
    o.fault("/r.txt", Fault::CloseBeforeHead);
    assert_eq!(xcache(&get(&n, "/r.txt", "")), "STALE");
    o.clear_fault("/r.txt");

    // stale-while-revalidate: the stale entry is served at once, one refresh runs behind it.
    o.put(
        "/w.txt",
        Object::new(pattern(1000, 8)).cache_control("max-age=3, stale-while-revalidate=30"),
    );
    assert_eq!(xcache(&get(&n, "/w.txt", "")), "MISS");
    std::thread::sleep(Duration::from_millis(4100));
    let r = get(&n, "/w.txt", "");
    assert_eq!((r.status, xcache(&r)), (200, "UPDATING"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while xcache(&get(&n, "/w.txt", "")) != "HIT" {
        assert!(
            Instant::now() < deadline,
            "the background refresh never landed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let seen: Vec<_> = o
        .seen()
        .into_iter()
        .filter(|s| s.path == "/w.txt")
        .collect();
    assert_eq!(
        seen.len(),
        2,
        "one fill and one background revalidation: {seen:?}"
    );
}

#[test]
fn private_and_varying_answers_are_passed_through_not_stored() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let n = node(d.path(), &[o.url()], "", "slice_size = 0");
    o.put(
        "/cookie",
        Object::new(pattern(100, 1)).header("Set-Cookie", "id=1"),
    );
    o.put(
        "/nostore",
        Object::new(pattern(100, 2)).cache_control("no-store"),
    );
    o.put(
        "/vary",
        Object::new(pattern(100, 3)).header("Vary", "Cookie"),
    );
    // Bytes outside ASCII in a quoted string do not hide the line's `private`.
    o.put(
        "/private8",
        Object::new(pattern(100, 5))
            .cache_control("max-age=600")
            .header("Cache-Control", "private, x-note=\"café\""),
    );
    o.put(
        "/gzip",
        Object::new(pattern(100, 4)).header("Vary", "Accept-Encoding"),
    );
    for p in ["/cookie", "/nostore", "/vary", "/private8"] {
        for _ in 0..2 {
            let r = get(&n, p, "");
            assert_eq!((r.status, xcache(&r)), (200, "BYPASS"), "{p}");
            assert_eq!(r.body.len(), 100);
        }
        assert_eq!(o.requests(p), 2, "{p} was stored");
    }
    assert_eq!(get(&n, "/cookie", "").header("Set-Cookie"), Some("id=1"));
    // In Latin-1, the line is not dropped either: the client's caches get its `private`.
    o.put("/private1", Object::new(pattern(100, 6)));
    let mut raw = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nETag: \"l1\"\r\n\
                    Cache-Control: private, x-note=\"caf\xe9\"\r\n\r\n"
        .to_vec();
    raw.extend_from_slice(&pattern(100, 6));
    o.fault("/private1", Fault::Raw(raw));
    for _ in 0..2 {
        let r = get(&n, "/private1", "");
        assert_eq!((r.status, xcache(&r)), (200, "BYPASS"));
        let cc = r.header("Cache-Control").unwrap_or_default();
        assert!(cc.starts_with("private, x-note="), "{:?}", r.headers);
    }
    assert_eq!(xcache(&get(&n, "/gzip", "")), "MISS");
    assert_eq!(xcache(&get(&n, "/gzip", "")), "HIT");
    // The fill commits right after its last byte (and may create its temporary file after
    // the client has it all): wait until no fill runs.
    let cache = d.path().join("cache");
    wait_committed(&n);
    assert_eq!(
        cache_files(&cache),
        (0, 1),
        "only the Accept-Encoding object is stored"
    );
}

/// Store `objects` (already at the origin) with a node of `cfg`, each fetched whole, checked
/// and committed, then stop it gracefully.
fn stored_then_stopped(cfg: &Config, objects: &[(&str, &[u8])]) {
    let mut n = Node::start(cfg);
    for (p, b) in objects {
        assert!(get(&n, p, "").body == *b, "{p}");
        wait_committed(&n);
    }
    n.srv.signal(common::SIGTERM);
    assert!(n.srv.wait_exit(Duration::from_secs(10)).is_some());
}

/// A node (cache volume `vol`) whose drain waits 1 s, before an origin that `put` fills and
/// that sends bodies in 8 KiB chunks `delay_ms` apart.
fn draining_in_1s_before_a_slow_origin(
    vol: &str,
    delay_ms: u64,
    put: impl FnOnce(&FaultOrigin),
) -> (FaultOrigin, tempfile::TempDir, Node) {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let mut cfg = config(&[o.url()], &d.path().join("cache"), "", vol);
    cfg.shutdown_timeout_secs = 1;
    put(&o);
    o.set_timing(Timing {
        chunk_size: 8192,
        chunk_delay: Duration::from_millis(delay_ms),
        ..Timing::default()
    });
    let n = Node::start(&cfg);
    (o, d, n)
}

/// A drain that reaches `shutdown_timeout_secs` with a fill still running says so (the fill is
/// cut, nothing of it stored), though no client connection is left: it said "drained".
#[test]
fn a_drain_that_cuts_a_fill_says_so() {
    // 128 chunks of 8 KiB, 50 ms apart: the fill takes about 6 s.
    let (_o, _d, mut n) = draining_in_1s_before_a_slow_origin("slice_size = 0", 50, |o| {
        o.put("/long.bin", Object::new(pattern(1 << 20, 4)))
    });
    {
        let mut c = n.srv.connect();
        c.send(b"GET /long.bin HTTP/1.1\r\nHost: t\r\n\r\n");
        let mut b = [0u8; 100];
        let _ = std::io::Read::read(&mut c.stream, &mut b);
    }
    std::thread::sleep(Duration::from_millis(300));
    n.srv.signal(common::SIGTERM);
    assert!(n.srv.wait_exit(Duration::from_secs(10)).is_some());
    let logs = n.srv.stop();
    assert!(
        logs.contains("shutdown timeout reached") && logs.contains("fills=1"),
        "{logs}"
    );
    assert!(!logs.contains("drained; exiting"), "{logs}");
}

/// A body whose end is its connection's close (an answer of unknown length passed through to
/// an HTTP/1.0 client), cut at the drain's end while it waits for the origin, ends with a
/// reset: a FIN would make it look complete.
#[test]
fn a_close_delimited_body_cut_at_the_drain_is_reset() {
    let (_o, _d, mut n) = draining_in_1s_before_a_slow_origin(SLICED, 100, |o| {
        o.put("/live.ts", Object::new(pattern(4 << 20, 6)));
        o.fault("/live.ts", Fault::Chunked(None));
    });
    let mut c = n.srv.connect();
    c.send(b"GET /live.ts HTTP/1.0\r\nHost: t\r\n\r\n");
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let t = std::time::Instant::now();
    while got.len() < 100_000 && t.elapsed() < Duration::from_secs(10) {
        match std::io::Read::read(&mut c.stream, &mut buf) {
            Ok(0) => panic!("closed before the drain"),
            Ok(k) => got.extend_from_slice(&buf[..k]),
            Err(e) => panic!("{e}"),
        }
    }
    let head = String::from_utf8_lossy(&got[..got.len().min(400)]).to_string();
    assert!(
        head.starts_with("HTTP/1.1 200") && !head.contains("Content-Length"),
        "{head}"
    );
    n.srv.signal(common::SIGTERM);
    let end = loop {
        match std::io::Read::read(&mut c.stream, &mut buf) {
            Ok(0) => break Ok(()),
            Ok(_) => continue,
            Err(e) => break Err(e.kind()),
        }
    };
    assert_eq!(
        end,
        Err(std::io::ErrorKind::ConnectionReset),
        "{}",
        n.srv.logs()
    );
    assert!(n.srv.wait_exit(Duration::from_secs(10)).is_some());
}

#[test]
fn a_restart_serves_from_disk_at_once_without_refetching() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cfg = config(&[o.url()], &d.path().join("cache"), "", SLICED);
    let objects: Vec<(String, Vec<u8>)> = (0..6)
        .map(|i| (format!("/r/{i}.bin"), pattern(100_000 + i * 1000, i as u8)))
        .collect();
    for (p, b) in &objects {
        o.put(p, Object::new(b.clone()));
    }
    let stored: Vec<(&str, &[u8])> = objects.iter().map(|(p, b)| (&p[..], &b[..])).collect();
    stored_then_stopped(&cfg, &stored);
    let before = o.seen().len();
    let n = Node::start(&cfg);
    for (p, b) in &objects {
        let r = get(&n, p, "");
        assert_eq!(xcache(&r), "HIT", "{p} after restart");
        assert!(r.body == *b);
    }
    assert_eq!(
        o.seen().len(),
        before,
        "objects were fetched again after a restart"
    );
    assert!(n
        .srv
        .wait_log("cache index rebuilt", Duration::from_secs(5)));
    assert_eq!(volume_metric(&n, "contentserver_cache_entries", &[]), 12.0);
}

/// A restart with `max_size` below an entry stored before drops that entry, not the ones that
/// still fit (it used to stay, over the limit, and push out a fitting one).
#[test]
fn a_restart_with_a_smaller_max_size_drops_the_entry_that_no_longer_fits() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let small = pattern(40_000, 1);
    let large = pattern(300_000, 2);
    o.put("/small.bin", Object::new(small.clone()));
    o.put("/large.bin", Object::new(large.clone()));
    stored_then_stopped(
        &config(&[o.url()], &d.path().join("cache"), "", "slice_size = 0"),
        &[("/large.bin", &large), ("/small.bin", &small)],
    );
    let cfg = config(
        &[o.url()],
        &d.path().join("cache"),
        "",
        "slice_size = 0\nmax_size = \"100K\"",
    );
    let n = Node::start(&cfg);
    assert!(n
        .srv
        .wait_log("cache index rebuilt", Duration::from_secs(5)));
    let r = get(&n, "/small.bin", "");
    assert_eq!(xcache(&r), "HIT");
    assert!(r.body == small);
    assert_eq!(volume_metric(&n, "contentserver_cache_entries", &[]), 1.0);
    assert!(volume_metric(&n, "contentserver_cache_size_bytes", &[]) <= 100.0 * 1024.0);
    let r = get(&n, "/large.bin", "");
    assert_ne!(xcache(&r), "HIT");
    assert!(r.body == large);
}

#[test]
fn kill_during_a_fill_leaves_nothing_served_truncated() {
    let o = FaultOrigin::start();
    let body = pattern(200_000, 9);
    o.put("/k.bin", Object::new(body.clone()));
    o.set_timing(Timing {
        chunk_size: 4096,
        chunk_delay: Duration::from_millis(30),
        ..Timing::default()
    });
    let d = common::tempdir();
    let cache = d.path().join("cache");
    let cfg = config(&[o.url()], &cache, "", "slice_size = 0");
    let mut n = Node::start(&cfg);
    let mut c = n.srv.connect();
    c.send(b"GET /k.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(cache_files(&cache).0, 1, "no temporary file while filling");
    n.srv.signal(libc::SIGKILL);
    n.srv.wait_exit(Duration::from_secs(5)).expect("killed");
    o.set_timing(Timing::default());
    let n = Node::start(&cfg);
    assert_eq!(
        cache_files(&cache),
        (0, 0),
        "the interrupted fill left files"
    );
    let r = get(&n, "/k.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert!(r.body == body);
}

/// Two nodes on one cache directory (a rolling update on a shared volume, a double start): the
/// second refuses to start, naming the directory and the holder's pid, and touches nothing —
/// the first's fill under way stores its entry. The lock dies with its process: after a
/// SIGKILL a new node starts and serves what was stored.
#[test]
fn a_second_node_on_the_same_cache_directory_refuses_to_start() {
    let o = FaultOrigin::start();
    let body = pattern(200_000, 11);
    o.put("/l.bin", Object::new(body.clone()));
    o.set_timing(Timing {
        chunk_size: 4096,
        chunk_delay: Duration::from_millis(20),
        ..Timing::default()
    });
    let d = common::tempdir();
    let cache = d.path().join("cache");
    let cfg = config(&[o.url()], &cache, "", "slice_size = 0");
    let mut first = Node::start(&cfg);
    let reader = {
        let addr = first.srv.addr;
        std::thread::spawn(move || {
            let mut c = common::Conn::new(addr);
            c.send(b"GET /l.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
            c.response(false).expect("the first node's answer")
        })
    };
    assert!(
        common::wait_until(Duration::from_secs(5), || cache_files(&cache).0 == 1),
        "no temporary file while filling"
    );
    let err = match Server::try_start_with_env(&cfg, &[]) {
        Ok(_) => panic!("a second node started on {}", cache.display()),
        Err(e) => e,
    };
    assert!(err.contains("exited early"), "{err}");
    assert!(!err.contains("exit status: 0"), "{err}");
    assert!(err.contains(&cache.display().to_string()), "{err}");
    assert!(err.contains(&format!("pid {}", first.srv.pid())), "{err}");
    assert!(!err.contains("temp_files_removed"), "{err}");
    assert_eq!(
        cache_files(&cache).0,
        1,
        "the second node removed the fill's file"
    );
    // Nor inside it (one of its level directories).
    let inner = cache.join("0");
    std::fs::create_dir_all(&inner).expect("mkdir");
    let mut nested = cfg.clone();
    nested.volumes[0].path = inner.clone();
    let err = match Server::try_start_with_env(&nested, &[]) {
        Ok(_) => panic!("a second node started inside {}", cache.display()),
        Err(e) => e,
    };
    assert!(err.contains("is inside"), "{err}");
    assert!(!inner.join(".lock").exists(), "it made its lock file first");
    // The first node's fill goes on and stores its entry.
    let r = reader.join().expect("reader");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert!(r.body == body);
    wait_committed(&first);
    assert!(
        !first.srv.logs().contains("cannot store"),
        "{}",
        first.srv.logs()
    );
    assert_eq!(cache_files(&cache), (0, 1));
    assert_eq!(xcache(&get(&first, "/l.bin", "")), "HIT");
    // kill -9 leaves no stale lock.
    first.srv.signal(libc::SIGKILL);
    first.srv.wait_exit(Duration::from_secs(5)).expect("killed");
    o.set_timing(Timing::default());
    let next = Node::start(&cfg);
    let r = get(&next, "/l.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == body);
    assert_eq!(o.requests("/l.bin"), 1);
}

#[test]
fn refused_origin_is_a_clean_502() {
    let d = common::tempdir();
    let n = node(d.path(), &[common::origin::refused_url()], "", "");
    let r = get(&n, "/x", "");
    assert_eq!(r.status, 502);
    // Counted by its X-Cache, like every answer of a cache route.
    assert_eq!(xcache(&r), "MISS");
    let miss = [("status", "miss")];
    assert_eq!(
        volume_metric(&n, "contentserver_cache_requests_total", &miss),
        1.0
    );
}

/// A stored 204 is served without Content-Length (RFC 9110 §8.6), stored or not.
#[test]
fn a_stored_no_content_answer_has_no_length() {
    let (o, n) = origin_and_node(SLICED);
    o.put(
        "/204",
        Object::new(Vec::new())
            .status(204)
            .cache_control("max-age=3600"),
    );
    for want in ["MISS", "HIT"] {
        let r = get(&n, "/204", "");
        assert_eq!((r.status, xcache(&r)), (204, want));
        assert!(
            r.header("Content-Length").is_none(),
            "{want}: {:?}",
            r.headers
        );
        wait_committed(&n);
    }
}

/// Query bytes a request target may not carry raw go to the origin percent-encoded, so
/// `?w="x"` and `?w=%22x%22` are one URL there: one key here, one origin fetch, one purge.
#[test]
fn a_query_and_its_percent_encoded_spelling_are_one_key() {
    let (o, n) = origin_and_purge_node(SLICED);
    let sent = "/q.txt?w=%22x%22%7C%7B%7D";
    o.put(sent, Object::new(pattern(1000, 3)));
    assert_eq!(xcache(&get(&n, "/q.txt?w=\"x\"|{}", "")), "MISS");
    wait_committed(&n);
    assert_eq!(xcache(&get(&n, sent, "")), "HIT");
    assert_eq!(o.requests(sent), 1);
    // Purged by either spelling (the value is percent-decoded once from the admin query).
    let r = admin(
        &n,
        "POST",
        "/cache/purge?key=/q.txt%3Fw%3D%22x%22%7C%7B%7D",
        PURGE_AUTH,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("\"purged_files\":1"));
    assert_eq!(xcache(&get(&n, "/q.txt?w=\"x\"|{}", "")), "MISS");
    assert_eq!(o.requests(sent), 2);
}

#[test]
fn purge_needs_the_bearer_token() {
    let (o, n) = origin_and_purge_node(SLICED);
    for p in ["/p/a.bin", "/p/b.bin", "/q/c.bin"] {
        o.put(p, Object::new(pattern(100_000, 11)));
        assert_eq!(xcache(&get(&n, p, "")), "MISS");
    }
    // Both slices of each are stored (committed after the client had the last byte).
    settle(&n);
    for auth in [
        "",
        "Authorization: Bearer wrong\r\n",
        "Authorization: t0ken\r\n",
    ] {
        let r = admin(&n, "POST", "/cache/purge?key=/p/a.bin", auth);
        assert_eq!(r.status, 401, "{auth:?}");
    }
    // Logged, once a second at most (three refusals within one: one or two lines).
    let refused = n.srv.logs().matches("cache purge refused (401)").count();
    assert!((1..=2).contains(&refused), "{}", n.srv.logs());
    assert!(n.srv.logs().contains("no bearer token"), "{}", n.srv.logs());
    // Two credentials, the right one first: which is meant would be a guess.
    let r = admin(
        &n,
        "POST",
        "/cache/purge?key=/p/a.bin",
        &format!("{PURGE_AUTH}Authorization: Bearer wrong\r\n"),
    );
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        xcache(&get(&n, "/p/a.bin", "")),
        "HIT",
        "a refused purge changed something"
    );
    let ok = PURGE_AUTH;
    // Exactly one target: both (the last used to win: everything purged), one twice, neither.
    for q in [
        "?key=/p/a.bin&prefix=/",
        "?prefix=/&key=/p/a.bin",
        "?key=/p/a.bin&key=/q/c.bin",
        "",
        "?key=p/a.bin",
    ] {
        let r = admin(&n, "POST", &format!("/cache/purge{q}"), ok);
        let body = String::from_utf8_lossy(&r.body).to_string();
        assert_eq!(r.status, 400, "{q}: {body}");
        assert!(
            body.contains("exactly one of key=/path or prefix=/path"),
            "{q}: {body}"
        );
    }
    for p in ["/p/a.bin", "/p/b.bin", "/q/c.bin"] {
        assert_eq!(xcache(&get(&n, p, "")), "HIT", "a refused purge took {p}");
    }
    let r = admin(&n, "POST", "/cache/purge?key=/p/a.bin", ok);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("\"purged_files\":2"));
    assert_eq!(xcache(&get(&n, "/p/a.bin", "")), "MISS");
    // Its refill is stored again before the prefix purge counts it (2 + 2 + 2 files).
    settle(&n);
    let r = admin(&n, "POST", "/cache/purge?prefix=/p/", ok);
    assert_eq!(r.status, 200);
    assert!(String::from_utf8_lossy(&r.body).contains("\"purged_files\":4"));
    assert_eq!(xcache(&get(&n, "/p/b.bin", "")), "MISS");
    assert_eq!(xcache(&get(&n, "/q/c.bin", "")), "HIT");
    assert_eq!(
        volume_metric(&n, "contentserver_cache_purges_total", &[]),
        6.0
    );
}

/// An entry evicted while a request had it open on the pool (another request's object was
/// stored in its place meanwhile) is not kept open afterwards: it was, served as a HIT from a
/// deleted file, holding its disk space, out of every purge's reach.
#[cfg(feature = "failpoints")]
#[test]
fn an_entry_evicted_while_it_is_opened_is_not_kept_open() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    // Room for one of the two objects.
    let vol = "slice_size = 0\nmax_size = \"160K\"";
    let cfg = config(&[o.url()], &d.path().join("cache"), "", vol);
    let a = pattern(100_000, 1);
    let b = pattern(100_000, 2);
    o.put("/a.bin", Object::new(a.clone()));
    o.put("/b.bin", Object::new(b.clone()));
    stored_then_stopped(&cfg, &[("/a.bin", &a)]);
    // After a restart /a.bin is in the index but not open: its next request opens it on the
    // pool, and waits there a second before keeping it open.
    let n = Node::start_with_env(&cfg, &[("FAILPOINTS", "cache_opened=sleep(1000)")]);
    assert!(n
        .srv
        .wait_log("cache index rebuilt", Duration::from_secs(5)));
    std::thread::scope(|scope| {
        let opening = scope.spawn(|| get(&n, "/a.bin", ""));
        std::thread::sleep(Duration::from_millis(200));
        // Meanwhile /b.bin is stored, and /a.bin evicted (its file deleted) to make room.
        assert_eq!(xcache(&get(&n, "/b.bin", "")), "MISS");
        wait_committed(&n);
        let r = opening.join().expect("the opening request");
        assert!(
            r.body == a,
            "the request that opened /a.bin got other bytes"
        );
    });
    let r = get(&n, "/a.bin", "");
    assert_eq!(xcache(&r), "MISS", "an evicted entry was served");
    assert!(r.body == a);
    let cache = n.cache.canonicalize().expect("cache path");
    let fds = std::fs::read_dir(format!("/proc/{}/fd", n.srv.pid())).expect("fd list");
    let held: Vec<String> = fds
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.display().to_string())
        .filter(|p| p.starts_with(cache.to_str().unwrap_or("-")) && p.ends_with("(deleted)"))
        .collect();
    assert!(held.is_empty(), "deleted entries still open: {held:?}");
}

/// While the index is rebuilt after a restart, a request for an entry not in it yet opens its
/// path; if the rebuild's walk finds the entry and evicts it (a lower `max_size`) while that
/// open waits, the entry is not put back in the index: it was, with no file behind it (the
/// entries gauge counted it, a later eviction of it deleted nothing, and its next request was
/// a HIT served from the deleted file kept open).
#[cfg(feature = "failpoints")]
#[test]
fn an_entry_evicted_by_the_rebuild_while_it_is_opened_is_not_put_back() {
    use content_server::cache::key::CacheKey;
    let o = FaultOrigin::start();
    let d = common::tempdir();
    // Two objects whose entries are in level directories 0-4, `a` walked before `b`: walking
    // `b` evicts `a` once only one fits.
    let level = |p: &str| {
        let rel = CacheKey::new(p.as_bytes().to_vec()).slice(0).rel_path();
        u8::from_str_radix(&rel[..1], 16).expect("a hex level")
    };
    let names: Vec<String> = (0..400).map(|i| format!("/ghost/{i}.bin")).collect();
    let a = names
        .iter()
        .find(|p| level(p) <= 2)
        .expect("a name in level 0-2")
        .clone();
    let b = names
        .iter()
        .find(|p| (level(&a) + 1..=4).contains(&level(p)))
        .expect("a name in a later level up to 4")
        .clone();
    let (body_a, body_b) = (pattern(100_000, 1), pattern(100_000, 2));
    o.put(&a, Object::new(body_a.clone()));
    o.put(&b, Object::new(body_b.clone()));
    stored_then_stopped(
        &config(&[o.url()], &d.path().join("cache"), "", "slice_size = 0"),
        &[(&a, &body_a), (&b, &body_b)],
    );
    // Room for one. The walk takes 16 x 150 ms; `a`'s open waits 1.2 s on the pool, long
    // enough for the walk to find `a`, then `b`, and evict `a`, not for it to end.
    let cfg = config(
        &[o.url()],
        &d.path().join("cache"),
        "",
        "slice_size = 0\nmax_size = \"160K\"",
    );
    let n = Node::start_with_env(
        &cfg,
        &[(
            "FAILPOINTS",
            "cache_rebuild_level=sleep(150);cache_opened=sleep(1200)",
        )],
    );
    // (Its bytes, opened before the eviction, are still right.)
    assert!(get(&n, &a, "").body == body_a);
    assert!(n
        .srv
        .wait_log("cache index rebuilt", Duration::from_secs(10)));
    // The index holds what is on the disk: `b`.
    let files = cache_files(&n.cache).1;
    assert_eq!(files, 1);
    assert_eq!(
        volume_metric(&n, "contentserver_cache_entries", &[]),
        files as f64,
        "the index holds an entry with no file"
    );
    let r = get(&n, &a, "");
    assert_eq!(
        xcache(&r),
        "MISS",
        "an entry evicted while opened was served again"
    );
    assert!(r.body == body_a);
}

/// An evicted entry's file is deleted on the pool, later: when the same object was fetched and
/// stored again meanwhile, the deletion leaves the new file alone. It deleted it, and the index
/// held an entry with no file (counted in the gauges; its next request a MISS).
#[cfg(feature = "failpoints")]
#[test]
fn a_late_deletion_spares_the_entry_stored_again_at_its_path() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    // Room for one of the two objects; every deletion waits 1 s on the pool.
    let cfg = config(
        &[o.url()],
        &d.path().join("cache"),
        "",
        "slice_size = 0\nmax_size = \"160K\"",
    );
    let n = Node::start_with_env(&cfg, &[("FAILPOINTS", "cache_remove=sleep(1000)")]);
    let (a, b) = (pattern(100_000, 1), pattern(100_000, 2));
    o.put("/a.bin", Object::new(a.clone()));
    o.put("/b.bin", Object::new(b.clone()));
    for (p, body) in [("/a.bin", &a), ("/b.bin", &b), ("/a.bin", &a)] {
        // (`a` is evicted for `b`, then stored again before its file is deleted.)
        let r = get(&n, p, "");
        assert_eq!(xcache(&r), "MISS", "{p}");
        assert!(r.body == *body);
        wait_committed(&n);
    }
    // Both deletions (old `a`, then `b`) are done.
    assert!(common::wait_until(Duration::from_secs(5), || cache_files(
        &n.cache
    )
    .1 == 1));
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        cache_files(&n.cache).1,
        1,
        "the new entry's file was deleted"
    );
    assert_eq!(volume_metric(&n, "contentserver_cache_entries", &[]), 1.0);
    let r = get(&n, "/a.bin", "");
    assert_eq!(xcache(&r), "HIT");
    assert!(r.body == a);
}

/// A stored entry that cannot be opened for want of descriptors (EMFILE) stays stored: the
/// request is a 503 and the next one a HIT. It was deleted as unusable (an ulimit of 128 and a
/// burst of misses evicted 13 good entries, refetched from the origin).
#[cfg(feature = "failpoints")]
#[test]
fn an_entry_that_cannot_be_opened_for_want_of_descriptors_is_kept() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cfg = config(&[o.url()], &d.path().join("cache"), "", "");
    let a = pattern(100_000, 1);
    o.put("/a.bin", Object::new(a.clone()));
    stored_then_stopped(&cfg, &[("/a.bin", &a)]);
    let n = Node::start_with_env(&cfg, &[("FAILPOINTS", "cache_open=1*return(emfile)")]);
    assert!(n
        .srv
        .wait_log("cache index rebuilt", Duration::from_secs(5)));
    let r = get(&n, "/a.bin", "");
    assert_eq!(r.status, 503, "{}", n.srv.logs());
    assert!(n.srv.wait_log(
        "cannot open a cache entry now (kept)",
        Duration::from_secs(5)
    ));
    let r = get(&n, "/a.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"), "{}", n.srv.logs());
    assert!(r.body == a);
    assert_eq!(o.requests("/a.bin"), 1, "the entry was fetched again");
    assert_eq!(
        volume_metric(
            &n,
            "contentserver_cache_evictions_total",
            &[("reason", "invalid")]
        ),
        0.0
    );
}

/// A later slice of a response under way that cannot be opened for want of descriptors for a
/// moment is waited for: the response is whole (a HIT), not cut after its head said 200.
#[cfg(feature = "failpoints")]
#[test]
fn a_later_slice_that_cannot_be_opened_for_a_moment_is_waited_for_not_cut() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cfg = config(&[o.url()], &d.path().join("cache"), "", SLICED);
    let a = pattern(3 * SLICE, 1);
    o.put("/a.bin", Object::new(a.clone()));
    stored_then_stopped(&cfg, &[("/a.bin", &a)]);
    // The first slice opens; the second fails three times (EMFILE), then opens.
    let n = Node::start_with_env(
        &cfg,
        &[("FAILPOINTS", "cache_open=1*off->3*return(emfile)")],
    );
    assert!(n
        .srv
        .wait_log("cache index rebuilt", Duration::from_secs(5)));
    let r = get(&n, "/a.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"), "{}", n.srv.logs());
    assert!(r.body == a, "cut: {} of {} bytes", r.body.len(), a.len());
    assert_eq!(o.requests("/a.bin"), 3, "a slice was fetched again");
    assert!(n
        .srv
        .logs()
        .contains("cannot open a cache entry now (kept)"));
}

/// An entry that cannot be opened for want of descriptors makes the volume close a few of the
/// entries it keeps open for later requests (nobody using them), so that the next try can
/// open: descriptors a response needs now are worth more than ones kept for later.
#[cfg(feature = "failpoints")]
#[test]
fn an_entry_that_cannot_be_opened_sheds_entries_kept_open() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cache = d.path().join("cache");
    let cfg = config(&[o.url()], &cache, "", "");
    let objects: Vec<(String, Vec<u8>)> = (0..11)
        .map(|i| (format!("/o{i}.bin"), pattern(1000, i)))
        .collect();
    for (p, b) in &objects {
        o.put(p, Object::new(b.clone()));
    }
    let refs: Vec<(&str, &[u8])> = objects
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    stored_then_stopped(&cfg, &refs);
    // Ten open (and kept open), the eleventh fails.
    let n = Node::start_with_env(
        &cfg,
        &[("FAILPOINTS", "cache_open=10*off->1*return(emfile)")],
    );
    assert!(n
        .srv
        .wait_log("cache index rebuilt", Duration::from_secs(5)));
    let cache = std::fs::canonicalize(&cache).expect("cache dir");
    let kept_open = || {
        std::fs::read_dir(format!("/proc/{}/fd", n.srv.pid()))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter_map(|e| std::fs::read_link(e.path()).ok())
                    .filter(|l| l.starts_with(&cache) && !l.ends_with(".lock"))
                    .count()
            })
            .unwrap_or(0)
    };
    // (The cache directory itself and its `.tmp` are open too.)
    let base = kept_open();
    for (p, b) in &objects[..10] {
        let r = get(&n, p, "");
        assert_eq!(xcache(&r), "HIT", "{p}");
        assert!(r.body == *b);
    }
    assert_eq!(kept_open(), base + 10);
    assert_eq!(get(&n, &objects[10].0, "").status, 503);
    assert_eq!(kept_open(), base + 6, "four entries kept open were closed");
    let r = get(&n, &objects[10].0, "");
    assert_eq!(xcache(&r), "HIT");
}

/// Out of descriptors for a while, every request meets it: the warning is logged once a
/// second at most, not once per request (hundreds a second, under load).
#[cfg(feature = "failpoints")]
#[test]
fn entries_that_cannot_be_opened_are_logged_once_a_second_not_per_request() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cfg = config(&[o.url()], &d.path().join("cache"), "", "");
    let a = pattern(1000, 1);
    o.put("/a.bin", Object::new(a.clone()));
    stored_then_stopped(&cfg, &[("/a.bin", &a)]);
    let n = Node::start_with_env(&cfg, &[("FAILPOINTS", "cache_open=return(emfile)")]);
    let started = Instant::now();
    for _ in 0..40 {
        assert_eq!(get(&n, "/a.bin", "").status, 503);
    }
    let secs = started.elapsed().as_secs() + 1;
    let lines = n
        .srv
        .logs()
        .matches("cannot open a cache entry now (kept)")
        .count() as u64;
    assert!((1..=secs + 1).contains(&lines), "{lines} lines in {secs} s");
}

/// A purge whose files cannot be deleted says so (500, naming the file and the error), and
/// the object it named is not served from the disk afterwards: the next request goes to the
/// origin.
#[cfg(feature = "failpoints")]
#[test]
fn a_purge_that_cannot_delete_says_so_and_serves_the_object_no_more() {
    let (o, n) = common::cache::origin_and_purge_node_with_env(
        SLICED,
        &[("FAILPOINTS", "cache_remove=return(eacces)")],
    );
    o.put("/p/a.bin", Object::new(pattern(100_000, 11)));
    assert_eq!(xcache(&get(&n, "/p/a.bin", "")), "MISS");
    settle(&n);
    assert_eq!(xcache(&get(&n, "/p/a.bin", "")), "HIT");
    let before = o.requests("/p/a.bin");

    let r = admin(&n, "POST", "/cache/purge?key=/p/a.bin", PURGE_AUTH);
    let body = String::from_utf8_lossy(&r.body).to_string();
    assert_eq!(r.status, 500, "{body}");
    assert!(body.contains("\"purged_files\":0"), "{body}");
    assert!(body.contains("Permission denied"), "{body}");
    assert_eq!(
        cache_files(&n.cache).1,
        2,
        "the failpoint left both slices in place"
    );
    // The operator asked for it gone: it is fetched again, not served from what is left.
    let fresh = pattern(100_000, 12);
    o.put("/p/a.bin", Object::new(fresh.clone()));
    let r = get(&n, "/p/a.bin", "");
    assert_eq!(xcache(&r), "MISS");
    assert_eq!(r.body, fresh, "the purged version was served");
    assert!(o.requests("/p/a.bin") > before);
}

/// A prefix purge that cannot read some entries' keys (out of descriptors) says so (500:
/// they may be under the prefix and stay), after purging those it could read; it used to
/// answer 200 as though there were none.
#[cfg(feature = "failpoints")]
#[test]
fn a_prefix_purge_that_cannot_read_every_entry_says_so() {
    let (o, n) = common::cache::origin_and_purge_node_with_env(
        SLICED,
        &[("FAILPOINTS", "cache_prefix_open=1*off->1*return(emfile)")],
    );
    for p in ["/p/a.bin", "/p/b.bin"] {
        o.put(p, Object::new(pattern(1000, 11)));
        assert_eq!(xcache(&get(&n, p, "")), "MISS");
    }
    settle(&n);
    let r = admin(&n, "POST", "/cache/purge?prefix=/p", PURGE_AUTH);
    let body = String::from_utf8_lossy(&r.body).to_string();
    assert_eq!(r.status, 500, "{body}");
    assert!(body.contains("\"purged_files\":1"), "{body}");
    assert!(
        body.contains("1 entries could not be read (out of descriptors)"),
        "{body}"
    );
    // Again, with every entry readable: the rest goes.
    let r = admin(&n, "POST", "/cache/purge?prefix=/p", PURGE_AUTH);
    let body = String::from_utf8_lossy(&r.body).to_string();
    assert_eq!(r.status, 200, "{body}");
    assert!(body.contains("\"purged_files\":1"), "{body}");
    assert_eq!(cache_files(&n.cache).1, 0);
}

/// A purge whose client leaves before the answer (a timeout) still runs to its end and is
/// logged: it used to stop half done, with no log line.
#[cfg(feature = "failpoints")]
#[test]
fn a_purge_whose_client_leaves_runs_to_its_end() {
    let (o, n) = common::cache::origin_and_purge_node_with_env(
        SLICED,
        &[("FAILPOINTS", "cache_remove=sleep(300)")],
    );
    let paths = ["/q/a.bin", "/q/b.bin", "/q/c.bin"];
    for p in paths {
        o.put(p, Object::new(pattern(1000, 12)));
        assert_eq!(xcache(&get(&n, p, "")), "MISS");
    }
    settle(&n);
    {
        let mut c = common::Conn::new(n.srv.admin());
        c.send(
            format!("POST /cache/purge?prefix=/q HTTP/1.1\r\nHost: a\r\n{PURGE_AUTH}Content-Length: 0\r\n\r\n")
                .as_bytes(),
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        n.srv.wait_log("files=3", Duration::from_secs(5)),
        "{}",
        n.srv.logs()
    );
    assert_eq!(cache_files(&n.cache).1, 0);
    for p in paths {
        assert_eq!(xcache(&get(&n, p, "")), "MISS", "{p}");
    }
}

/// A prefix purge takes whole path segments, as routes match: `prefix=/dir` purges `/dir`,
/// `/dir/…` and `/dir?…`, never `/dirx…` (it used to, by plain string prefix).
#[test]
fn prefix_purge_takes_whole_segments() {
    let (o, n) = origin_and_purge_node("");
    let under = ["/dir", "/dir/a.bin", "/dir?v=1"];
    let beside = ["/dirx", "/dirx/b.bin", "/di"];
    for p in under.iter().chain(&beside) {
        o.put(p.split('?').next().unwrap(), Object::new(pattern(1000, 3)));
        assert_eq!(xcache(&get(&n, p, "")), "MISS", "{p}");
    }
    settle(&n);
    for p in under.iter().chain(&beside) {
        assert_eq!(xcache(&get(&n, p, "")), "HIT", "{p}");
    }
    let r = admin(&n, "POST", "/cache/purge?prefix=/dir", PURGE_AUTH);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(
        String::from_utf8_lossy(&r.body).contains("\"purged_files\":3"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    for p in beside {
        assert_eq!(
            xcache(&get(&n, p, "")),
            "HIT",
            "{p} was purged by prefix=/dir"
        );
    }
    for p in under {
        assert_eq!(xcache(&get(&n, p, "")), "MISS", "{p} survived prefix=/dir");
    }
    // With a trailing '/', only what lies below it.
    settle(&n);
    let r = admin(&n, "POST", "/cache/purge?prefix=/dir/", PURGE_AUTH);
    assert!(
        String::from_utf8_lossy(&r.body).contains("\"purged_files\":1"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(xcache(&get(&n, "/dir/a.bin", "")), "MISS");
    assert_eq!(xcache(&get(&n, "/dir", "")), "HIT");
}

/// The token file is read by every purge: a Kubernetes Secret update (a new `..data` symlink
/// renamed over the old one) revokes the old token at once, and a token file gone refuses
/// every purge with a 500 saying so (it used to be read at start-up only, so neither revoked
/// anything).
#[test]
fn a_rotated_or_deleted_token_file_takes_effect_at_once() {
    let o = FaultOrigin::start();
    let dir = common::tempdir();
    let secret = dir.path().join("secret");
    // The layout of a mounted Secret: token -> ..data/token, ..data -> ..v1.
    let version = |name: &str, token: &str| {
        std::fs::create_dir_all(secret.join(name)).expect("mkdir");
        std::fs::write(secret.join(name).join("token"), token).expect("write the token");
    };
    version("..v1", "old-t0ken\n");
    std::os::unix::fs::symlink("..v1", secret.join("..data")).expect("symlink");
    std::os::unix::fs::symlink("..data/token", secret.join("token")).expect("symlink");
    let mut cfg = config(&[o.url()], &dir.path().join("cache"), "", SLICED);
    cfg.admin.purge_token_file = secret.join("token").display().to_string();
    let n = Node::start(&cfg);
    o.put("/p/a.bin", Object::new(pattern(100_000, 11)));
    assert_eq!(xcache(&get(&n, "/p/a.bin", "")), "MISS");
    settle(&n);
    assert_eq!(xcache(&get(&n, "/p/a.bin", "")), "HIT");

    // Rotate as the kubelet does: the new version, then one rename of the `..data` link.
    version("..v2", "new-t0ken\n");
    std::os::unix::fs::symlink("..v2", secret.join("..data_tmp")).expect("symlink");
    std::fs::rename(secret.join("..data_tmp"), secret.join("..data")).expect("swap ..data");
    std::fs::remove_dir_all(secret.join("..v1")).expect("remove the old version");
    let old = "Authorization: Bearer old-t0ken\r\n";
    let new = "Authorization: Bearer new-t0ken\r\n";
    let r = admin(&n, "POST", "/cache/purge?key=/p/a.bin", old);
    assert_eq!(r.status, 401, "the rotated-out token still purges");
    assert_eq!(xcache(&get(&n, "/p/a.bin", "")), "HIT");
    let r = admin(&n, "POST", "/cache/purge?key=/p/a.bin", new);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(xcache(&get(&n, "/p/a.bin", "")), "MISS");
    settle(&n);
    assert_eq!(xcache(&get(&n, "/p/a.bin", "")), "HIT");

    // The file gone: nothing is purged, whatever the token; the answer says the file is at
    // fault, the log says why (the caller is not authenticated: no path, no OS error for it).
    std::fs::remove_dir_all(secret.join("..v2")).expect("remove the token");
    for auth in [new, old, ""] {
        let r = admin(&n, "POST", "/cache/purge?prefix=/", auth);
        let body = String::from_utf8_lossy(&r.body).to_string();
        assert_eq!(r.status, 500, "{auth:?}: {body}");
        assert!(
            body.contains("admin.purge_token_file cannot be read"),
            "{body}"
        );
        assert!(
            !body.contains(&*secret.to_string_lossy()) && !body.contains("os error"),
            "the file's path or error is in the answer: {body}"
        );
        assert!(
            !body.contains("new-t0ken"),
            "the token is in the answer: {body}"
        );
    }
    assert_eq!(
        xcache(&get(&n, "/p/a.bin", "")),
        "HIT",
        "a refused purge changed something"
    );
    assert!(
        n.srv
            .wait_log("cache purge refused", Duration::from_secs(5)),
        "{}",
        n.srv.logs()
    );
    // A FIFO in its place is refused at once, not waited on.
    std::fs::create_dir(secret.join("..v3")).expect("mkdir");
    let st = std::process::Command::new("mkfifo")
        .arg(secret.join("..v3").join("token"))
        .status()
        .expect("mkfifo (coreutils)");
    assert!(st.success());
    std::os::unix::fs::symlink("..v3", secret.join("..data_tmp")).expect("symlink");
    std::fs::rename(secret.join("..data_tmp"), secret.join("..data")).expect("swap ..data");
    let t = Instant::now();
    let r = admin(&n, "POST", "/cache/purge?prefix=/", new);
    assert_eq!(r.status, 500, "{}", String::from_utf8_lossy(&r.body));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(
        n.srv.wait_log("is a FIFO", Duration::from_secs(5)),
        "{}",
        n.srv.logs()
    );
}

/// A token file that cannot be read, is empty or holds more than one line stops the server at
/// start, before any port is open (it used to be noticed after the listeners were bound and
/// "listening" was logged).
#[test]
fn a_bad_token_file_stops_the_server_before_it_listens() {
    let dir = common::tempdir();
    let token = dir.path().join("token");
    for (content, want) in [
        (None, "cannot read"),
        (Some(""), "holds no token"),
        (Some("  \n"), "holds no token"),
        (Some("tok1\ntok2\n"), "holds more than one line"),
        // A FIFO would block whoever opens it for reading.
        (Some("FIFO"), "is a FIFO: it must be a regular file"),
    ] {
        let _ = std::fs::remove_file(&token);
        match content {
            Some("FIFO") => {
                let st = std::process::Command::new("mkfifo")
                    .arg(&token)
                    .status()
                    .expect("mkfifo (coreutils)");
                assert!(st.success());
            }
            Some(c) => std::fs::write(&token, c).expect("write the token"),
            None => {}
        }
        let mut cfg = config(
            &["http://127.0.0.1:9".into()],
            &dir.path().join("cache"),
            "",
            "",
        );
        cfg.admin.purge_token_file = token.display().to_string();
        let path = dir.path().join("node.toml");
        std::fs::write(&path, cfg.to_toml().expect("render")).expect("write the config");
        let (code, _, err) = common::run(&["serve", "--config", path.to_str().expect("utf-8")]);
        assert_eq!(code, 1, "{content:?}: {err}");
        assert!(
            err.contains("admin.purge_token_file") && err.contains(want),
            "{content:?}: {err}"
        );
        assert!(
            !err.contains("listening"),
            "{content:?}: a port was opened first:\n{err}"
        );
        assert!(
            !dir.path().join("cache").join(".lock").exists(),
            "{content:?}: the cache directory was taken first"
        );
    }
}

/// The key is the request's canonical path, the one it is routed by: aliases of a path share
/// one origin fetch and one stored copy, the origin is asked for the canonical path, a purge of
/// the path (or a prefix) covers every alias, and reserved escapes (`%2F`) stay encoded.
#[test]
fn aliases_of_a_path_are_one_key_and_the_origin_sees_the_canonical_path() {
    let (o, n) = origin_and_purge_node(SLICED);
    o.put("/n1.bin", Object::new(b"one".to_vec()));
    o.put("/dir/a", Object::new(b"dir-a".to_vec()));
    o.put("/s/a%2Fb.bin", Object::new(b"slash".to_vec()));
    let aliases = [
        "/n1.bin",
        "/%6e1.bin",
        "//n1.bin",
        "/./n1.bin",
        "/x/../n1.bin",
        "/x/%2e%2e/n1.bin",
    ];
    for (i, a) in aliases.iter().enumerate() {
        let r = get(&n, a, "");
        let want = if i == 0 { "MISS" } else { "HIT" };
        assert_eq!(
            (r.status, xcache(&r), &r.body[..]),
            (200, want, &b"one"[..]),
            "{a}"
        );
    }
    let paths: Vec<String> = o.seen().iter().map(|s| s.path.clone()).collect();
    assert_eq!(
        paths,
        vec!["/n1.bin".to_string()],
        "one fetch of the canonical path"
    );
    settle(&n);
    assert_eq!(cache_files(&n.cache).1, 1, "one stored copy");
    // A purge of the path takes every alias's copy.
    let r = admin(&n, "POST", "/cache/purge?key=/n1.bin", PURGE_AUTH);
    assert_eq!(r.status, 200, "{}", r.text());
    for a in aliases {
        let r = get(&n, a, "");
        assert_eq!(
            xcache(&r),
            if a == "/n1.bin" { "MISS" } else { "HIT" },
            "{a}"
        );
    }
    settle(&n);
    // ... also when the purge names an alias.
    let r = admin(&n, "POST", "/cache/purge?key=/x/..//%256e1.bin", PURGE_AUTH);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(xcache(&get(&n, "/%6e1.bin", "")), "MISS");
    // A prefix purge covers `//dir/a` and `/%64ir/a`.
    assert_eq!(xcache(&get(&n, "//dir/a", "")), "MISS");
    assert_eq!(xcache(&get(&n, "/%64ir/a", "")), "HIT");
    settle(&n);
    let r = admin(&n, "POST", "/cache/purge?prefix=/dir", PURGE_AUTH);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(xcache(&get(&n, "/%64ir/a", "")), "MISS");
    // An encoded `/` is forwarded as it is (and is a key of its own).
    let r = get(&n, "/s/a%2fb.bin", "");
    assert_eq!(
        (r.status, xcache(&r), &r.body[..]),
        (200, "MISS", &b"slash"[..])
    );
    assert_eq!(xcache(&get(&n, "/s/a%2Fb.bin", "")), "HIT");
    assert_eq!(o.requests("/s/a%2Fb.bin"), 1);
    // `..` behind an encoded `/` is refused, not forwarded.
    let before = o.seen().len();
    assert_eq!(get(&n, "/s/..%2F..%2Fn1.bin", "").status, 400);
    assert_eq!(o.seen().len(), before);
    let seen: Vec<String> = o.seen().iter().map(|s| s.path.clone()).collect();
    assert_eq!(
        seen,
        [
            "/n1.bin",
            "/n1.bin",
            "/n1.bin",
            "/dir/a",
            "/dir/a",
            "/s/a%2Fb.bin"
        ],
        "the origin was asked only for canonical paths"
    );
}

/// A cache route under a static one: a path that reaches the cache route through `..` is asked
/// of the origin as the path it was routed by, inside the route's prefix.
#[test]
fn a_cache_route_under_a_static_one_forwards_the_routed_path() {
    let o = FaultOrigin::start();
    o.put("/static/cached/b.bin", Object::new(b"bee".to_vec()));
    let d = common::tempdir();
    let files = d.path().join("files");
    std::fs::create_dir_all(files.join("static")).expect("mkdir");
    std::fs::write(files.join("static/f.txt"), b"file").expect("write");
    let mut cfg = config(&[o.url()], &d.path().join("cache"), "", SLICED);
    cfg.volumes.push(common::volume("files", &files));
    let mut cache_route = content_server::config::Route::to_volume("/static/cached", "c1");
    cache_route.origin = Some("origin".into());
    let static_route = content_server::config::Route::to_volume("/static", "files");
    cfg.routes = vec![static_route, cache_route];
    let n = Node::start(&cfg);
    assert_eq!(get(&n, "/static/f.txt", "").body, b"file");
    let r = get(&n, "/static/x/../cached/b.bin", "");
    assert_eq!(
        (r.status, xcache(&r), &r.body[..]),
        (200, "MISS", &b"bee"[..])
    );
    let seen: Vec<String> = o.seen().iter().map(|s| s.path.clone()).collect();
    assert_eq!(seen, ["/static/cached/b.bin"]);
    // The prefix may not be made with an encoded `/`.
    assert_eq!(get(&n, "/static%2Fcached/b.bin", "").status, 400);
    assert_eq!(o.seen().len(), 1);
}

/// A background refresh whose object is purged while it waits for the origin has no effect
/// on the cache when it ends, whatever it gets: a no-store answer withdrew the object, and
/// with it the newer copy stored after the purge (and its next requests were passed through).
#[test]
fn a_purged_refresh_that_gets_no_store_leaves_a_newer_copy_alone() {
    let (o, n) = origin_and_purge_node("slice_size = 0");
    let v1 = pattern(1000, 1);
    o.put(
        "/pr.txt",
        Object::version(v1.clone(), 1).cache_control("max-age=1, stale-while-revalidate=30"),
    );
    assert_eq!(xcache(&get(&n, "/pr.txt", "")), "MISS");
    wait_committed(&n);
    std::thread::sleep(Duration::from_millis(1050));
    // The refresh waits 0.8 s (the origin's read timeout is 1 s) for an answer that forbids
    // storing.
    o.put(
        "/pr.txt",
        Object::version(pattern(1000, 2), 2).cache_control("no-store"),
    );
    o.set_timing(Timing {
        head_delay: Duration::from_millis(800),
        ..Timing::default()
    });
    assert_eq!(xcache(&get(&n, "/pr.txt", "")), "UPDATING");
    assert!(common::wait_until(Duration::from_secs(5), || o
        .requests("/pr.txt")
        == 2));
    o.set_timing(Timing::default());
    let r = admin(&n, "POST", "/cache/purge?key=/pr.txt", PURGE_AUTH);
    assert_eq!(r.status, 200);
    let v3 = pattern(1000, 3);
    o.put(
        "/pr.txt",
        Object::version(v3.clone(), 3).cache_control("max-age=100"),
    );
    assert_eq!(xcache(&get(&n, "/pr.txt", "")), "MISS");
    wait_committed(&n);
    // The purged refresh ends (its answer passed through to nobody: a no-store 200).
    settle(&n);
    for _ in 0..2 {
        let r = get(&n, "/pr.txt", "");
        assert_eq!(
            xcache(&r),
            "HIT",
            "the purged refresh withdrew the newer copy"
        );
        assert!(r.body == v3);
    }
}

/// An object fetched and stored while a purge of it waits (after the listing removed its
/// files; the object stored before the purge when `stored_before`): its new file goes too, or
/// it stays on the disk while the index forgot it (the entries gauge below the files, never
/// evicted, and a restart served it as a HIT).
#[cfg(feature = "failpoints")]
fn committed_during_its_purge(stored_before: bool) {
    let (o, n) = common::cache::origin_and_purge_node_with_env(
        "slice_size = 0",
        &[("FAILPOINTS", "cache_object_removed=sleep(600)")],
    );
    let body = pattern(5000, 4);
    o.put("/race.bin", Object::new(body.clone()));
    if stored_before {
        assert_eq!(xcache(&get(&n, "/race.bin", "")), "MISS");
        wait_committed(&n);
    }
    std::thread::scope(|scope| {
        let purge = scope.spawn(|| admin(&n, "POST", "/cache/purge?key=/race.bin", PURGE_AUTH));
        // The purge listed (and removed) what there was and waits: the object is fetched and
        // stored.
        std::thread::sleep(Duration::from_millis(200));
        let r = get(&n, "/race.bin", "");
        assert_eq!(xcache(&r), "MISS");
        wait_committed(&n);
        assert_eq!(purge.join().expect("the purge").status, 200);
    });
    assert_eq!(
        (
            cache_files(&n.cache).1,
            volume_metric(&n, "contentserver_cache_entries", &[])
        ),
        (0, 0.0),
        "a file stayed that the index does not know: {}",
        n.srv.logs()
    );
    let r = get(&n, "/race.bin", "");
    assert_eq!(xcache(&r), "MISS");
    assert!(r.body == body);
}

#[cfg(feature = "failpoints")]
#[test]
fn an_entry_committed_while_its_object_is_purged_does_not_stay_unknown() {
    committed_during_its_purge(false);
}

/// The listing removed the object's file, and a fill committed a new one at the same path
/// (tester: the disk over max_size under churn).
#[cfg(feature = "failpoints")]
#[test]
fn an_entry_committed_at_a_purged_path_does_not_stay_unknown() {
    committed_during_its_purge(true);
}

#[test]
fn purge_is_off_without_a_token_file() {
    let (_o, n) = origin_and_node("");
    let r = admin(
        &n,
        "POST",
        "/cache/purge?key=/a",
        "Authorization: Bearer x\r\n",
    );
    assert_eq!(r.status, 404);
}

/// A `max_size` larger than the cache directory's filesystem is never reached (the disk fills
/// first): the start says so, naming the volume; a limit the disk holds is not warned of.
#[test]
fn a_max_size_larger_than_the_filesystem_is_warned_of() {
    let big = temp_node(
        &["http://127.0.0.1:9".into()],
        "",
        "max_size = \"1000000T\"",
    );
    assert!(
        big.srv.wait_log(
            "cache max_size is larger than the filesystem",
            Duration::from_secs(5)
        ),
        "{}",
        big.srv.logs()
    );
    assert!(big.srv.logs().contains("volume=c1"), "{}", big.srv.logs());
    let small = temp_node(&["http://127.0.0.1:9".into()], "", "max_size = \"1M\"");
    assert_eq!(get(&small, "/", "").status, 502, "started and serving");
    assert!(
        !small.srv.logs().contains("larger than the filesystem"),
        "{}",
        small.srv.logs()
    );
}

#[test]
fn max_size_bounds_the_disk_and_evicts_least_recent() {
    // 20 objects of ~100 KiB in a 1 MiB cache, each asked for twice (so admission, which
    // keeps objects asked for more often, lets the newer ones replace the older ones).
    let (o, n) = origin_and_node("slice_size = 0\nmax_size = \"1M\"");
    for i in 0..20 {
        let p = format!("/e/{i}");
        o.put(&p, Object::new(pattern(100_000, i as u8)));
        assert_eq!(get(&n, &p, "").status, 200);
        // The second request must not join the first one's fill (it asks again).
        settle(&n);
        assert_eq!(get(&n, &p, "").status, 200);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let bytes: u64 = walk(&n.cache).iter().map(|(_, len)| len).sum();
        if bytes <= 1 << 20 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "cache holds {bytes} bytes > max_size"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        volume_metric(
            &n,
            "contentserver_cache_evictions_total",
            &[("reason", "size")]
        ) >= 10.0
    );
    assert!(volume_metric(&n, "contentserver_cache_size_bytes", &[]) <= (1 << 20) as f64);
    assert_eq!(
        xcache(&get(&n, "/e/19", "")),
        "HIT",
        "the newest object was evicted"
    );
}

/// Entries being written count against `max_size`: sixteen fills at once from a slow origin
/// into a cache of eight entries keep the cache's files, temporary ones included, within it
/// (the deletions of evicted entries aside). Their temporary files were not counted: these
/// held twice `max_size` at the end, and a disk sized with a third more than `max_size` filled
/// up under four clients.
#[test]
fn fills_being_written_count_against_max_size() {
    let (o, n) = origin_and_node("slice_size = 0\nmax_size = \"512K\"");
    // 60,000 bytes each: a 64,096-byte file (16 units of 4 KiB with its header), eight fit.
    let bodies: Vec<Vec<u8>> = (0..16).map(|i| pattern(60_000, i as u8)).collect();
    for (i, b) in bodies.iter().enumerate() {
        o.put(&format!("/w/{i}"), Object::new(b.clone()));
    }
    o.set_timing(Timing {
        rate: 60_000,
        ..Timing::default()
    });
    let addr = n.srv.addr;
    let clients: Vec<_> = (0..16)
        .map(|i| std::thread::spawn(move || common::get(addr, &format!("/w/{i}"))))
        .collect();
    let cache = n.cache.clone();
    let mut most = 0u64;
    while !clients.iter().all(|c| c.is_finished()) {
        most = most.max(walk(&cache).iter().map(|(_, len)| len).sum());
        std::thread::sleep(Duration::from_millis(5));
    }
    for (i, c) in clients.into_iter().enumerate() {
        let r = c.join().expect("client");
        assert_eq!(r.status, 200);
        assert!(r.body == bodies[i], "/w/{i} differs");
    }
    settle(&n);
    most = most.max(walk(&cache).iter().map(|(_, len)| len).sum());
    // (Two entries' room for deletions queued on the pool but not done yet.)
    assert!(
        most <= 512 * 1024 + 2 * 64_096,
        "the cache's files took {most} bytes, max_size is {}",
        512 * 1024
    );
    assert!(cache_files(&n.cache).1 >= 1, "nothing was stored");
    assert_eq!(cache_files(&n.cache).0, 0, "temporary files left");
}

#[test]
fn inactive_entries_are_dropped() {
    let (o, n) = origin_and_node("slice_size = 0\ninactive_secs = 1");
    o.put("/i", Object::new(pattern(10_000, 1)));
    assert_eq!(xcache(&get(&n, "/i", "")), "MISS");
    let deadline = Instant::now() + Duration::from_secs(8);
    while cache_files(&n.cache).1 == 0 {
        assert!(Instant::now() < deadline, "the entry was never stored");
        std::thread::sleep(Duration::from_millis(10));
    }
    while cache_files(&n.cache).1 > 0 {
        assert!(Instant::now() < deadline, "inactive entry still on disk");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(xcache(&get(&n, "/i", "")), "MISS");
    assert!(
        volume_metric(
            &n,
            "contentserver_cache_evictions_total",
            &[("reason", "inactive")]
        ) >= 1.0
    );
}

/// Resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    common::proc_status_bytes(pid, "VmRSS")
}

#[cfg(feature = "failpoints")]
#[test]
fn a_fill_that_cannot_store_a_large_object_holds_only_what_its_reader_needs() {
    use std::io::Write;
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cache = d.path().join("cache");
    let n = Node::start_with_env(
        &config(&[o.url()], &cache, "", "slice_size = 0"),
        &[("FAILPOINTS", "cache_write=return(enospc)")],
    );
    // Far over what a fill keeps in memory for its readers (16 MiB).
    let body = pattern(64 << 20, 13);
    o.put("/huge.bin", Object::new(body.clone()));
    let before = rss(n.srv.pid());
    let mut s = std::net::TcpStream::connect(n.srv.addr).expect("connect");
    s.write_all(b"GET /huge.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .expect("request");
    // A slow client (about 12 MB/s) while the node reads the origin.
    let mut got = Vec::new();
    let mut peak = before;
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let k = s.read(&mut buf).expect("read");
        if k == 0 {
            break;
        }
        got.extend_from_slice(&buf[..k]);
        peak = peak.max(rss(n.srv.pid()));
        std::thread::sleep(Duration::from_millis(20));
    }
    let head_end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let head = String::from_utf8_lossy(&got[..head_end]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        got[head_end..] == body[..],
        "the body differs ({} bytes)",
        got.len() - head_end
    );
    let grew = peak.saturating_sub(before);
    assert!(
        grew < 20 << 20,
        "the node grew by {} MiB for a body it could not store",
        grew >> 20
    );
    assert_eq!(cache_files(&cache), (0, 0));
}

#[cfg(feature = "failpoints")]
#[test]
fn a_full_disk_keeps_requests_succeeding_without_storing() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cache = d.path().join("cache");
    let n = Node::start_with_env(
        &config(&[o.url()], &cache, "", SLICED),
        &[("FAILPOINTS", "cache_write=return(enospc)")],
    );
    let body = pattern(200_000, 12);
    o.put("/full.bin", Object::new(body.clone()));
    for _ in 0..3 {
        let mut c = n.srv.connect();
        c.send(b"GET /full.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        let r = c.response(false).expect("a full disk broke the response");
        assert_eq!((r.status, xcache(&r)), (200, "MISS"));
        assert!(r.body == body);
        // The fill ends when its failed write on the pool does: a request before that joins
        // it (every byte in memory: a HIT), not what this test asks.
        wait_committed(&n);
    }
    assert_eq!(cache_files(&cache), (0, 0));
    assert!(n.srv.logs().contains("cache disk full"), "{}", n.srv.logs());
    let failed = |reason| {
        volume_metric(
            &n,
            "contentserver_cache_store_failures_total",
            &[("reason", reason)],
        )
    };
    // (The first lowers the limit below what it stored, nothing: the others are not stored.)
    assert!(failed("disk_full") >= 1.0, "{}", failed("disk_full"));
    assert_eq!(failed("error"), 0.0);
}

/// A fill whose storing failed on a slice too large to hold (paced by its readers) commits
/// nothing: a response that found the object changed does not wait for it to end. It used
/// to: its wait counted as a reader, so the fill, its last real reader gone, held its window
/// and its origin connection for ever, and the response was never ended.
#[cfg(feature = "failpoints")]
#[test]
fn a_version_change_does_not_wait_for_a_paced_fill() {
    const BIG: usize = 17 << 20;
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cache = d.path().join("cache");
    let cfg = config(&[o.url()], &cache, "", "slice_size = \"17m\"");
    let v1 = pattern(3 * BIG, 1);
    o.put("/p.bin", Object::version(v1.clone(), 1));
    // The first slice stored, on a disk that takes it.
    let mut n = Node::start(&cfg);
    let r = get(&n, "/p.bin", "Range: bytes=0-99\r\n");
    assert_eq!((r.status, xcache(&r)), (206, "MISS"));
    wait_committed(&n);
    n.srv.stop();
    // Then a full disk, whose first file takes 8 s to fail: the third slice's fill, which
    // goes on for nobody once its request has its bytes. (Once it fails, the disk-full
    // eviction takes the first slice too, and a full read then gets the new version whole:
    // the read below must find the first slice before that, on a busy machine too.)
    let n = Node::start_with_env(
        &cfg,
        &[("FAILPOINTS", "cache_write=1*sleep(8000)->return(enospc)")],
    );
    let at = 2 * BIG;
    let r = get(&n, "/p.bin", &format!("Range: bytes={at}-{}\r\n", at + 99));
    assert_eq!((r.status, xcache(&r)), (206, "MISS"));
    // The object changes: a full read finds it at its second slice.
    o.put("/p.bin", Object::version(pattern(3 * BIG, 2), 2));
    let r = common::cache::get_within(&n, "/p.bin", Duration::from_secs(15))
        .expect("the response was not ended in 15 s: it waits for the paced fill");
    let cut = r.expect_err("two versions in one response");
    assert!(cut.contains(&format!("after {BIG} of")), "{cut}");
}

/// A fill that cannot store a slice too large to hold is paced by its readers. A reader whose
/// range starts far into the slice (a seek) is where its range starts, not at the slice's
/// first byte: it used to be taken for one still at byte 0, so the fill stopped once its
/// window was full, waiting for that reader to move, which waited for bytes past the window;
/// neither moved, and the fill held its origin connection for good.
#[cfg(feature = "failpoints")]
#[test]
fn a_seek_into_a_paced_fill_gets_its_bytes() {
    const BIG: usize = 34 << 20;
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cache = d.path().join("cache");
    let n = Node::start_with_env(
        &config(&[o.url()], &cache, "", "slice_size = \"0\""),
        &[("FAILPOINTS", "cache_write=return(enospc)")],
    );
    let body = pattern(BIG, 5);
    o.put("/seek.bin", Object::new(body.clone()));
    let at = 30 << 20;
    let mut c = n.srv.connect();
    c.send(
        format!(
            "GET /seek.bin HTTP/1.1\r\nHost: t\r\nRange: bytes={at}-{}\r\nConnection: close\r\n\r\n",
            at + 99
        )
        .as_bytes(),
    );
    let r = c
        .response(false)
        .expect("no whole answer (15 s without a byte): the fill waits for a reader at byte 0");
    assert_eq!((r.status, xcache(&r)), (206, "MISS"));
    assert!(r.body == body[at..at + 100]);
    assert_eq!(cache_files(&cache), (0, 0));
}

/// An origin answering a slice's range with fewer bytes and an unknown total
/// (`Content-Range: bytes 0-2999/*`, allowed by RFC 9110 §14.4: a representation still growing)
/// is not stored (no total to slice by): the request is passed through, not answered 502.
#[test]
fn a_206_of_unknown_total_is_passed_through() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(3000, 21);
    o.put("/growing.log", Object::new(body.clone()));
    let mut raw = b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-2999/*\r\n\
                    Content-Length: 3000\r\nETag: \"v1\"\r\n\r\n"
        .to_vec();
    raw.extend_from_slice(&body);
    o.fault_times("/growing.log", Fault::Raw(raw), 1);
    let r = get(&n, "/growing.log", "");
    assert_eq!((r.status, xcache(&r)), (200, "BYPASS"));
    assert!(r.body == body);
    assert_eq!(o.requests("/growing.log"), 2);
}

#[test]
fn our_own_server_as_the_origin() {
    let od = common::tempdir();
    let body = common::bytes(700_000, 13);
    std::fs::write(od.path().join("clip.mp4"), &body).unwrap();
    let origin = Server::root(od.path(), &[]);
    let d = common::tempdir();
    let n = node(d.path(), &[format!("http://{}", origin.addr)], "", SLICED);
    let r = get(&n, "/clip.mp4", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert!(r.body == body);
    assert_eq!(r.header("Content-Type"), Some("video/mp4"));
    let r = get(&n, "/clip.mp4", "Range: bytes=-1000\r\n");
    assert_eq!((r.status, xcache(&r)), (206, "HIT"));
    assert!(r.body == body[body.len() - 1000..]);
    let r = get(&n, "/missing", "");
    assert_eq!(r.status, 404);
}

/// A tmpfs of `size` mounted at `dir` by root for the test's life.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// A node configured by `cfg` whose cache directory is a tmpfs of `size`; its `cache` is the
/// path where the test sees that tmpfs. As root: mounted here (the configured path). Otherwise
/// the server runs in a user + mount namespace of its own (`unshare --user --map-root-user
/// --mount`) that mounts it; the test talks to it over loopback as usual and sees the tmpfs
/// through the server's root, `/proc/PID/root/CACHE`. Neither possible: a failure that says
/// what is missing (never a silent skip).
fn node_on_tmpfs(dir: &Path, size: &str, cfg: &Config) -> (Node, Option<Tmpfs>) {
    let cache = cfg.volumes[0].path.as_path();
    std::fs::create_dir_all(cache).unwrap();
    let mut tried = Vec::new();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        match Tmpfs::mount(cache, size) {
            Ok(fs) => return (Node::start(cfg), Some(fs)),
            Err(e) => tried.push(format!("mount -t tmpfs as root: {e}")),
        }
    }
    let path = dir.join("config.toml");
    std::fs::write(&path, cfg.to_toml().expect("render the config")).unwrap();
    let script = r#"mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@""#;
    let wrapper = [
        "unshare",
        "--user",
        "--map-root-user",
        "--mount",
        "sh",
        "-c",
        script,
        "sh",
        size,
        cache.to_str().unwrap(),
    ];
    let args = ["serve", "--config", path.to_str().unwrap()];
    match Server::try_spawn_wrapped(&wrapper, &args, &[]) {
        Ok(srv) => {
            let view = Path::new(&format!("/proc/{}/root", srv.pid()))
                .join(cache.strip_prefix("/").expect("absolute cache path"));
            (Node::new(srv, view), None)
        }
        Err(e) => {
            tried.push(format!("unshare --user --map-root-user --mount: {e}"));
            panic!(
                "this test fills a small tmpfs and cannot mount one: it needs root, or \
                 unprivileged user namespaces (kernel.unprivileged_userns_clone=1, \
                 user.max_user_namespaces > 0, no AppArmor/seccomp ban on unshare) and the \
                 unshare tool (util-linux). Tried:\n{}",
                tried.join("\n")
            )
        }
    }
}

/// An origin and a node in front of it whose cache (whole objects) is a tmpfs of `size` under
/// `dir`, with `max_size` far above it: the disk fills before the limit does.
fn node_on_small_disk(dir: &Path, size: &str) -> (FaultOrigin, Node, Option<Tmpfs>) {
    let o = FaultOrigin::start();
    let cfg = config(
        &[o.url()],
        &dir.join("cache"),
        "",
        "slice_size = 0\nmax_size = \"100M\"",
    );
    let (n, fs) = node_on_tmpfs(dir, size, &cfg);
    (o, n, fs)
}

/// Free bytes of the filesystem holding `dir` (statvfs).
#[allow(clippy::unnecessary_cast)] // the statvfs field types differ between platforms
fn fs_free(dir: &Path) -> u64 {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).expect("path without NUL");
    // SAFETY: `c` is a NUL-terminated path and `st` a zeroed statvfs the call fills in.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(
        unsafe { libc::statvfs(c.as_ptr(), &mut st) },
        0,
        "statvfs {}",
        dir.display()
    );
    st.f_bavail as u64 * st.f_frsize as u64
}

/// A burst of misses on a full disk lowers the limit once, not once per failing fill (each took
/// another tenth of what was stored, and a burst emptied the cache).
#[test]
fn a_burst_of_misses_on_a_full_disk_evicts_once() {
    let d = common::tempdir();
    let (o, n, _fs) = node_on_small_disk(d.path(), "4m");
    let disk = n.cache.clone();
    for i in 0..10 {
        let p = format!("/kept/{i}");
        o.put(&p, Object::new(pattern(200_000, i as u8)));
        assert_eq!(get(&n, &p, "").status, 200);
    }
    settle(&n);
    assert_eq!(volume_metric(&n, "contentserver_cache_entries", &[]), 10.0);
    // Another program takes the disk but for 100 KB.
    let filler = disk.join("other-data");
    std::fs::write(
        &filler,
        vec![0u8; fs_free(&disk).saturating_sub(100_000) as usize],
    )
    .expect("fill the disk");
    for i in 0..12 {
        o.put(
            &format!("/new/{i}"),
            Object::new(pattern(300_000, 100 + i as u8)),
        );
    }
    let clients: Vec<_> = (0..12)
        .map(|i| {
            let addr = n.srv.addr;
            std::thread::spawn(move || {
                let mut c = common::Conn::new(addr);
                c.request("GET", &format!("/new/{i}"), &[])
                    .map(|r| (r.status, r.body.len()))
            })
        })
        .collect();
    for c in clients {
        let r = c.join().expect("client thread");
        assert!(
            matches!(r, Ok((200, 300_000))),
            "a miss on a full disk failed: {r:?}"
        );
    }
    settle(&n);
    let kept = (0..10)
        .filter(|i| {
            let r = get(
                &n,
                &format!("/kept/{i}"),
                "Cache-Control: only-if-cached\r\n",
            );
            r.status == 200
        })
        .count();
    assert!(
        kept >= 7,
        "only {kept} of 10 stored objects left after one burst on a full disk:\n{}",
        n.srv.logs()
    );
    drop(std::fs::remove_file(&filler));
}

/// A purge is not refused by a busy pool: the object's removal waits for a pool thread, and
/// the object is not served afterwards. It used to answer 500 and leave the object in the
/// index, served as a HIT (a withdrawal, for an object the origin no longer lets be stored,
/// did the same, silently).
#[cfg(feature = "failpoints")]
#[test]
fn a_purge_on_a_busy_pool_still_removes_the_object() {
    let o = FaultOrigin::start();
    let dir = common::tempdir();
    let token = dir.path().join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    let mut cfg = config(&[o.url()], &dir.path().join("cache"), "", "slice_size = 0");
    cfg.admin.purge_token_file = token.display().to_string();
    cfg.volumes[0].pool.threads = 1;
    cfg.volumes[0].pool.max_queue = 0;
    let n = Node::start_with_env(&cfg, &[("FAILPOINTS", "cache_commit=sleep(1500)")]);
    o.put("/x.bin", Object::new(pattern(10_000, 1)));
    o.put("/y.bin", Object::new(pattern(10_000, 2)));
    assert_eq!(xcache(&get(&n, "/x.bin", "")), "MISS");
    wait_committed(&n);
    assert_eq!(xcache(&get(&n, "/x.bin", "")), "HIT");
    // /y's commit holds the only pool thread for 1.5 s.
    assert_eq!(xcache(&get(&n, "/y.bin", "")), "MISS");
    let r = admin(&n, "POST", "/cache/purge?key=/x.bin", PURGE_AUTH);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = get(&n, "/x.bin", "");
    assert_eq!(xcache(&r), "MISS", "the purged object was served");
}

/// The keys of one JSON object, in order, repeats kept (a map keeps only the last).
struct JsonKeys(Vec<String>);

impl<'de> serde::Deserialize<'de> for JsonKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = JsonKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<JsonKeys, A::Error> {
                let mut keys = Vec::new();
                while let Some((k, _)) = m.next_entry::<String, serde::de::IgnoredAny>()? {
                    keys.push(k);
                }
                Ok(JsonKeys(keys))
            }
        }
        d.deserialize_map(V)
    }
}

/// JSON log lines name each key once: the fields of the cache's and the origin's lines were
/// called `target` (and one `level`), beside tracing's own, and a log pipeline kept one of the
/// two (`content_server::origin::body`, not the request that failed).
#[test]
fn json_log_lines_have_each_key_once() {
    let o = FaultOrigin::start();
    let dir = common::tempdir();
    let token = dir.path().join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    let mut cfg = config(&[o.url()], &dir.path().join("cache"), "", SLICED);
    cfg.admin.purge_token_file = token.display().to_string();
    cfg.logging.format = common::LogFormat::Json;
    let n = Node::start_with_env(&cfg, &[("RUST_LOG", "debug")]);
    o.put("/j/a.bin", Object::new(pattern(3 * SLICE, 4)));
    o.put(
        "/j/b.bin",
        Object::new(pattern(5000, 5)).cache_control("no-store"),
    );
    // An origin body that breaks off, a pass-through, a purge.
    o.fault_times("/j/a.bin", Fault::ResetAfter(1000), 10);
    let _ = common::cache::try_get(&n, "/j/a.bin", "");
    assert_eq!(xcache(&get(&n, "/j/b.bin", "")), "BYPASS");
    o.clear_fault("/j/a.bin");
    assert_eq!(get(&n, "/j/a.bin", "").status, 200);
    settle(&n);
    let r = admin(&n, "POST", "/cache/purge?prefix=/j", PURGE_AUTH);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(n.srv.wait_log("cache purge", Duration::from_secs(5)));
    assert!(
        n.srv.wait_log("origin body failed", Duration::from_secs(5)),
        "{}",
        n.srv.logs()
    );
    let logs = n.srv.logs();
    let mut lines = 0;
    for line in logs.lines().filter(|l| l.starts_with('{')) {
        let JsonKeys(keys) = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON object ({e}): {line}"));
        let mut seen = std::collections::HashSet::new();
        for k in &keys {
            assert!(seen.insert(k), "{k:?} twice: {line}");
        }
        lines += 1;
    }
    assert!(lines > 10, "{logs}");
    let field = |message: &str, key: &str| -> String {
        let line = logs
            .lines()
            .find(|l| l.contains(message))
            .unwrap_or_else(|| panic!("no {message:?} line"));
        let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
        v[key].as_str().unwrap_or_default().to_string()
    };
    assert!(field("origin body failed", "request").contains("/j/a.bin"));
    assert_eq!(field("\"cache purge\"", "path"), "/j");
    assert_eq!(field("\"cache purge\"", "by"), "prefix");
}

/// An origin's ETag may hold a comma (`"v1,x"`, RFC 9110 §8.8.3): a client echoing it gets its
/// 304, and its If-Match holds. The tag lists were split at every comma: a 200 every time,
/// and a 412 for If-Match.
#[test]
fn an_etag_with_a_comma_revalidates() {
    let (o, n) = origin_and_node(SLICED);
    let mut obj = Object::new(pattern(3000, 9));
    obj.etag = Some("\"v1,x\"".into());
    o.put("/c.bin", obj);
    let r = get(&n, "/c.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert_eq!(r.header("etag"), Some("\"v1,x\""));
    wait_committed(&n);
    for inm in ["\"v1,x\"", "\"zz\", \"v1,x\"", "W/\"v1,x\""] {
        let r = get(&n, "/c.bin", &format!("If-None-Match: {inm}\r\n"));
        assert_eq!((r.status, xcache(&r)), (304, "HIT"), "If-None-Match: {inm}");
    }
    let r = get(&n, "/c.bin", "If-None-Match: \"v1\", \"x\"\r\n");
    assert_eq!(r.status, 200, "\"v1\" and \"x\" are other tags");
    let r = get(&n, "/c.bin", "If-Match: \"v1,x\"\r\n");
    assert_eq!(r.status, 200);
    assert!(r.body == pattern(3000, 9));
}

/// A request between a 304 rewrite's rename and its record (the new file on the disk, the
/// index still naming the old one) is served the new file: a commit under way, not a file
/// changed by a hand, deleted and fetched again (the rewriting fill is not joinable, and was
/// not counted as one that may commit). The record is held 1.5 s here.
#[cfg(feature = "failpoints")]
#[test]
fn a_request_during_a_rewrites_record_is_a_hit() {
    let o = FaultOrigin::start();
    let dir = common::tempdir();
    let cfg = config(&[o.url()], &dir.path().join("cache"), "", "slice_size = 0");
    let n = Node::start_with_env(&cfg, &[("FAILPOINTS", "cache_renamed=sleep(1500)")]);
    let body = pattern(200_000, 8);
    let cc = "max-age=1, stale-while-revalidate=0";
    o.put("/r.bin", Object::new(body.clone()).cache_control(cc));
    assert_eq!(xcache(&get(&n, "/r.bin", "")), "MISS");
    wait_committed(&n);
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(xcache(&get(&n, "/r.bin", "")), "REVALIDATED");
    // Into the rename's hold: the new file is in place, not recorded.
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..3 {
        let r = get(&n, "/r.bin", "");
        assert_eq!((r.status, xcache(&r)), (200, "HIT"), "{}", n.srv.logs());
        assert!(r.body == body);
    }
    assert_eq!(o.requests("/r.bin"), 2, "fetched again");
    wait_committed(&n);
    assert!(
        !n.srv.logs().contains("changed on the disk"),
        "{}",
        n.srv.logs()
    );
}

/// A request that finds every byte of a fill there (the fill still committing) is a HIT, and
/// counted as one: not as collapsed, and its bytes as served from the cache. It was a HIT in
/// its X-Cache and counted as collapsed, its bytes as fetched from the origin (the commit is
/// held 1.5 s here; without it the window is a few milliseconds).
#[cfg(feature = "failpoints")]
#[test]
fn a_hit_on_a_complete_fill_is_counted_as_a_hit() {
    let o = FaultOrigin::start();
    let dir = common::tempdir();
    let cfg = config(&[o.url()], &dir.path().join("cache"), "", "slice_size = 0");
    let n = Node::start_with_env(&cfg, &[("FAILPOINTS", "cache_commit=sleep(1500)")]);
    o.put("/h.bin", Object::new(pattern(5000, 7)));
    let collapsed = |n: &Node| volume_metric(n, "contentserver_cache_collapsed_total", &[]);
    let served = |n: &Node, source| {
        volume_metric(
            n,
            "contentserver_cache_served_bytes_total",
            &[("source", source)],
        )
    };
    assert_eq!(xcache(&get(&n, "/h.bin", "")), "MISS");
    // (The MISS's bytes are counted once its send returned, maybe after the client read them.)
    assert!(common::wait_until(Duration::from_secs(5), || served(
        &n, "origin"
    ) >= 5000.0));
    let (c0, cache0, origin0) = (collapsed(&n), served(&n, "cache"), served(&n, "origin"));
    let r = get(&n, "/h.bin", "");
    assert_eq!(xcache(&r), "HIT");
    assert!(r.body == pattern(5000, 7));
    assert_eq!(o.requests("/h.bin"), 1);
    assert_eq!(collapsed(&n), c0, "a HIT counted as collapsed");
    // (Counted once the send returned, as the MISS's were: maybe after the client read them.)
    assert!(
        common::wait_until(Duration::from_secs(5), || served(&n, "cache") - cache0
            >= 5000.0),
        "the HIT's bytes were not counted as served from the cache: {}",
        served(&n, "cache") - cache0
    );
    assert_eq!(served(&n, "cache") - cache0, 5000.0);
    assert_eq!(served(&n, "origin"), origin0);
    settle(&n);
}

/// A 304 does not make its requests wait for the entry's rewrite (which copies the body: a
/// whole object of gigabytes on a volume with `slice_size = 0`): they are served the stored
/// file with the new freshness at once, and so are the requests that come while it runs. A
/// purge during the rewrite waits for it, so the rewritten entry does not bring the object
/// back. The rewrite's commit is held 1.5 s here; the 304 used to be answered after it.
#[cfg(feature = "failpoints")]
#[test]
fn a_304_is_answered_before_the_entry_is_rewritten() {
    let (o, n) = common::cache::origin_and_purge_node_with_env(
        "slice_size = 0",
        &[("FAILPOINTS", "cache_commit=sleep(1500)")],
    );
    let body = pattern(300_000, 3);
    let cc = "max-age=1, stale-while-revalidate=0";
    o.put("/w.bin", Object::new(body.clone()).cache_control(cc));
    assert_eq!(xcache(&get(&n, "/w.bin", "")), "MISS");
    wait_committed(&n);
    std::thread::sleep(Duration::from_millis(1100));
    let t = Instant::now();
    let r = get(&n, "/w.bin", "");
    let took = t.elapsed();
    assert_eq!((r.status, xcache(&r)), (200, "REVALIDATED"));
    assert!(r.body == body);
    assert!(
        took < Duration::from_millis(1000),
        "the 304 was answered after {took:?} (the rewrite takes 1.5 s)"
    );
    // While the rewrite runs: fresh, from the stored file.
    let r = get(&n, "/w.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == body);
    assert_eq!(o.requests("/w.bin"), 2);
    // Rewritten, stale again, revalidated again; a purge comes during that rewrite.
    wait_committed(&n);
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(xcache(&get(&n, "/w.bin", "")), "REVALIDATED");
    let t = Instant::now();
    let r = admin(&n, "POST", "/cache/purge?key=/w.bin", PURGE_AUTH);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(
        t.elapsed() > Duration::from_millis(700),
        "the purge did not wait for the rewrite ({:?})",
        t.elapsed()
    );
    wait_committed(&n);
    std::thread::sleep(Duration::from_millis(300));
    let r = get(&n, "/w.bin", "");
    assert_eq!(
        xcache(&r),
        "MISS",
        "the purged object came back with its rewrite"
    );
    assert!(r.body == body);
    // Stale at once (no-cache): every use revalidates, and no 304 copies the body (the
    // purge has no rewrite to wait for; one per use would run, several at once).
    o.put(
        "/nc.bin",
        Object::new(body.clone()).cache_control("no-cache"),
    );
    assert_eq!(xcache(&get(&n, "/nc.bin", "")), "MISS");
    wait_committed(&n);
    for _ in 0..2 {
        let r = get(&n, "/nc.bin", "");
        assert_eq!((r.status, xcache(&r)), (200, "REVALIDATED"));
        assert!(r.body == body);
    }
    let t = Instant::now();
    let r = admin(&n, "POST", "/cache/purge?key=/nc.bin", PURGE_AUTH);
    assert_eq!(r.status, 200);
    assert!(
        t.elapsed() < Duration::from_millis(1000),
        "a rewrite ran ({:?})",
        t.elapsed()
    );
}

/// A cache volume whose pool is full never leaves a fill's temporary file behind: the commit
/// of a fetched and written body is not refused (refused, it dropped the file, which stayed
/// until a restart; enough of them filled the disk and shut the cache off).
#[test]
fn a_busy_pool_leaves_no_temporary_files() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let mut cfg = config(&[o.url()], &d.path().join("cache"), "", "slice_size = 0");
    cfg.volumes[0].pool.threads = 1;
    cfg.volumes[0].pool.max_queue = 0;
    let n = Node::start(&cfg);
    let objects = 160;
    for i in 0..objects {
        o.put(
            &format!("/t/{i}"),
            Object::new(pattern(128 * 1024, i as u8)),
        );
    }
    let addr = n.srv.addr;
    let clients: Vec<_> = (0..12)
        .map(|c| {
            std::thread::spawn(move || {
                let mut codes = Vec::new();
                for i in (c..objects).step_by(12) {
                    if let Ok(r) = common::Conn::new(addr).request("GET", &format!("/t/{i}"), &[]) {
                        codes.push(r.status);
                    }
                }
                codes
            })
        })
        .collect();
    let codes: Vec<u16> = clients
        .into_iter()
        .flat_map(|c| c.join().expect("client"))
        .collect();
    assert!(codes.iter().all(|&c| c == 200 || c == 503), "{codes:?}");
    // Each rejection counted is a client's 503 (the node's own optional work refused, such as
    // storing an object it fetched, is not counted).
    let rejected = volume_metric(&n, "contentserver_pool_rejected_total", &[]);
    let unavailable = codes.iter().filter(|&&c| c == 503).count() as f64;
    assert_eq!(rejected, unavailable);
    let stored = volume_metric(&n, "contentserver_cache_entries", &[]);
    assert!(
        stored < objects as f64,
        "every object was stored: the pool was never busy, the test tests nothing"
    );
    wait_committed(&n);
}

#[test]
fn a_really_full_disk_keeps_requests_succeeding_and_eviction_reclaims_space() {
    let d = common::tempdir();
    // Objects of 300,000 bytes: three fit in 1 MiB, a fourth cannot.
    let (o, n, _fs) = node_on_small_disk(d.path(), "1m");
    // `disk`: where the test sees the tmpfs the server's cache is on.
    let disk = n.cache.clone();
    let size = 300_000;
    let body = |i: usize| pattern(size, i as u8);
    // GET `p`: a whole 200 with `want`, X-Cache `x`, then wait for its fill to end.
    let fetch = |p: &str, want: &[u8], x: &str, what: &str| {
        let mut c = n.srv.connect();
        c.send(format!("GET {p} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes());
        let r = c
            .response(false)
            .unwrap_or_else(|e| panic!("{p} ({what}): a full disk broke the response: {e}"));
        assert_eq!(r.status, 200, "{p} ({what})");
        assert!(r.body == want, "{p} ({what}): wrong body");
        assert_eq!(xcache(&r), x, "{p} ({what})");
        settle(&n);
    };
    // New objects, one at a time, until a write fails with ENOSPC (the 4th at the latest of
    // 6: 6 x 300,000 bytes are far more than the disk): each one is a correct MISS.
    let mut full_at = None;
    for i in 0..6 {
        let p = format!("/full/{i}");
        o.put(&p, Object::new(body(i)));
        fetch(&p, &body(i), "MISS", "under pressure");
        if n.srv.logs().contains("cache disk full") {
            full_at = Some(i);
            break;
        }
    }
    let Some(full) = full_at else {
        panic!(
            "6 objects of {size} bytes never filled a 1 MiB disk:\n{}",
            n.srv.logs()
        );
    };
    // Eviction gives the space back on the disk itself (the failed fill's temporary file goes
    // too), not just in the index's accounting.
    assert!(
        common::wait_until(Duration::from_secs(10), || fs_free(&disk)
            > size as u64 + 8192
            && cache_files(&disk).0 == 0),
        "the disk was not reclaimed: {} bytes free, files {:?}",
        fs_free(&disk),
        cache_files(&disk)
    );
    assert!(
        volume_metric(
            &n,
            "contentserver_cache_evictions_total",
            &[("reason", "size")]
        ) >= 1.0
    );
    // The object whose write hit ENOSPC was served from the origin without being stored: it is
    // a MISS again, and now that it fits it is stored and the next request is a HIT.
    let p = format!("/full/{full}");
    assert_eq!(o.requests(&p), 1);
    // (For 2 s after a full disk, only entries that fit without evicting are stored: a burst
    // of misses must not evict for writes failing on the same disk.)
    std::thread::sleep(Duration::from_millis(2100));
    let what = "after the disk was full: it must not have been stored";
    fetch(&p, &body(full), "MISS", what);
    assert_eq!(o.requests(&p), 2);
    let what = "after eviction freed space: it must have been stored";
    fetch(&p, &body(full), "HIT", what);
    assert_eq!(o.requests(&p), 2, "a HIT reached the origin");
    assert_eq!(cache_files(&disk).0, 0, "temporary files left behind");
}

/// A purge that arrives while fills of the purged objects are under way: it answers 200, the
/// clients reading those fills still get their answers, but nothing fetched before the purge is
/// stored (the next request gets the origin's new version) or joined by a request after it.
#[test]
fn a_purge_during_a_fill_keeps_the_fetched_bytes_out_of_the_cache() {
    let (o, n) = origin_and_purge_node("slice_size = 0");
    let auth = PURGE_AUTH;
    // Whole objects (one fill each, so the first client reads nothing but its own fill), sent
    // by the origin in 16 KiB chunks 150 ms apart: each fill takes about a second.
    let size = 100_000;
    o.set_timing(Timing {
        chunk_delay: Duration::from_millis(150),
        ..Timing::default()
    });
    // join: a request after the purge while the purged fill still runs (else the first
    // request after the purge comes once that fill ended and could have committed).
    for (path, purge, join) in [
        ("/race/key.bin", "/cache/purge?key=/race/key.bin", false),
        ("/race/dir/a.bin", "/cache/purge?prefix=/race/dir/", false),
        ("/race/join.bin", "/cache/purge?key=/race/join.bin", true),
        ("/race/dir/b.bin", "/cache/purge?prefix=/race/dir/", true),
    ] {
        o.put(path, Object::version(pattern(size, 1), 1));
        let addr = n.srv.addr;
        let p = path.to_string();
        let first = std::thread::spawn(move || common::get(addr, &p));
        // The fill is under way (its head came, its body is coming)...
        assert!(
            common::wait_until(Duration::from_secs(5), || o.requests(path) >= 1),
            "{path}: the fill never reached the origin"
        );
        std::thread::sleep(Duration::from_millis(200));
        // ...when the object changes at the origin and is purged.
        o.put(path, Object::version(pattern(size, 2), 2));
        let r = admin(&n, "POST", purge, auth);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        // A GET now answers the new version whole (else `wrong` happened; with its X-Cache).
        let serves_v2 = |wrong: &str| {
            let r = get(&n, path, "");
            assert_eq!(r.status, 200);
            assert!(
                r.body == pattern(size, 2),
                "{path}: {wrong} ({})",
                xcache(&r)
            );
        };
        if join {
            serves_v2("a request after the purge joined the fill that started before it");
        } else {
            // The purged fill still runs (for its client): it counts, and shutdown waits for it.
            let fills = volume_metric(&n, "contentserver_cache_fills_in_flight", &[]);
            assert_eq!(fills, 1.0, "{path}: the purged fill is not counted");
        }
        // The client of the purged fill gets its whole (old) answer.
        let r = first.join().unwrap();
        assert_eq!(r.status, 200);
        assert!(
            r.body == pattern(size, 1),
            "{path}: the first answer is broken"
        );
        // Once every fill ended, what is cached is the new version only.
        settle(&n);
        for _ in 0..2 {
            serves_v2("the purged version was stored by its fill and served again");
        }
        let r = get(&n, path, "Range: bytes=70000-70009\r\n");
        assert!(
            r.body == pattern(size, 2)[70_000..70_010],
            "{path}: a range"
        );
    }
}

/// The fresh/stale decision is exact to well under a second, though `Age` and the stored
/// lifetime are whole seconds (RFC 9111): with `max-age=2`, a response filled late in a second
/// is a HIT 1.3 s later and no longer one 2.3 s later (a clock of whole seconds made it stale
/// up to a second early, and a cache on a coarser clock would serve it up to a second late).
#[test]
fn freshness_is_decided_to_the_millisecond() {
    let (o, n) = origin_and_node("slice_size = 0");
    let since_epoch = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
    };
    for i in 0..2 {
        let path = format!("/fresh/{i}.txt");
        o.put(
            &path,
            Object::new(pattern(1000, 3))
                .cache_control("max-age=2, stale-while-revalidate=0, stale-if-error=0"),
        );
        // Fill 850-950 ms into a second (where whole seconds are furthest off: they made it
        // stale 1.05-1.15 s after the fill).
        while !(850..950).contains(&since_epoch().subsec_millis()) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let r = get(&n, &path, "");
        let filled = Instant::now();
        assert_eq!((r.status, xcache(&r)), (200, "MISS"), "{path}");
        settle(&n);
        // GET `ms` after the fill: a 200 with X-Cache `x` (else it was `wrong` then).
        let at = |ms: u64, x: &str, wrong: &str| {
            std::thread::sleep(Duration::from_millis(ms).saturating_sub(filled.elapsed()));
            let r = get(&n, &path, "");
            assert_eq!(
                (r.status, xcache(&r)),
                (200, x),
                "{path}: {wrong} {:?} after its fill, with max-age=2",
                filled.elapsed()
            );
            r
        };
        let r = at(1300, "HIT", "stale");
        assert_eq!(r.header("Age"), Some("1"), "{path}: Age in whole seconds");
        at(2300, "REVALIDATED", "still fresh");
        assert_eq!(o.requests(&path), 2, "{path}");
    }
}

#[test]
fn a_new_slice_size_never_serves_slices_cut_at_the_old_one() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let body = pattern(300_000, 21);
    o.put("/s.bin", Object::new(body.clone()));
    let mut cfg = config(&[o.url()], &d.path().join("cache"), "", SLICED);
    let restart = |cfg: &Config| {
        let n = Node::start(cfg);
        let r = get(&n, "/s.bin", "");
        assert_eq!(r.status, 200);
        assert!(r.body == body, "the whole object after a restart differs");
        let r = get(&n, "/s.bin", "Range: bytes=150000-159999\r\n");
        assert_eq!(r.status, 206);
        assert!(
            r.body == body[150_000..160_000],
            "a seek after a restart differs"
        );
        wait_committed(&n);
        let mut n = n;
        n.srv.signal(common::SIGTERM);
        assert!(n.srv.wait_exit(Duration::from_secs(10)).is_some());
    };
    restart(&cfg);
    // Every slice stored at 64 KiB; then 100,000-byte slices, whole objects, 32 KiB slices.
    for size in [100_000u64, 0, 32_768, 65_536] {
        if let Some(c) = cfg.volumes[0].cache.as_mut() {
            c.slice_size = size;
        }
        restart(&cfg);
    }
}

#[test]
fn not_found_and_redirects_are_stored_by_their_valid_rule() {
    let (o, n) = origin_and_node(SLICED);
    // The origin has no /gone.bin: its 404 falls under the default rule (404: 60 s).
    let r = get(&n, "/gone.bin", "");
    assert_eq!((r.status, xcache(&r)), (404, "MISS"));
    assert_eq!(r.body, b"not found\n");
    // (A request for a later slice finds the 404 once stored; before, it asks the origin.)
    wait_committed(&n);
    for extra in [
        "",
        // A range, even one in a later slice, and preconditions do not apply to a 404.
        "Range: bytes=0-3\r\n",
        "Range: bytes=200000-\r\n",
        "If-None-Match: *\r\n",
        "If-Match: \"x\"\r\n",
    ] {
        let r = get(&n, "/gone.bin", extra);
        assert_eq!((r.status, xcache(&r)), (404, "HIT"), "{extra:?}");
        assert_eq!(r.body, b"not found\n", "{extra:?}");
        assert_eq!(r.header("Content-Range"), None, "{extra:?}");
        assert_eq!(r.header("Accept-Ranges"), None, "{extra:?}");
    }
    let mut c = n.srv.connect();
    c.send(b"HEAD /gone.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let r = c.response(true).unwrap();
    assert_eq!((r.status, xcache(&r)), (404, "HIT"));
    assert_eq!(r.header("Content-Length"), Some("10"));
    assert_eq!(
        o.requests("/gone.bin"),
        1,
        "a stored 404 reached the origin"
    );

    // A redirect (rule 301: 1 h) whose body is longer than a slice is stored whole.
    let page = pattern(100_000, 3);
    o.put(
        "/old",
        Object::new(page.clone())
            .status(301)
            .header("Location", "/new"),
    );
    for want in ["MISS", "HIT", "HIT"] {
        let r = get(&n, "/old", "");
        assert_eq!((r.status, xcache(&r)), (301, want));
        assert_eq!(r.header("Location"), Some("/new"));
        assert!(r.body == page, "redirect body differs ({want})");
    }
    assert_eq!(o.requests("/old"), 1);

    // A status in no rule is stored only when the origin gives it a lifetime; a 5xx never.
    o.put("/forbidden", Object::new(b"no".to_vec()).status(403));
    o.put(
        "/forbidden-60",
        Object::new(b"no".to_vec())
            .status(403)
            .cache_control("max-age=60"),
    );
    o.put(
        "/busy",
        Object::new(b"busy".to_vec())
            .status(503)
            .cache_control("max-age=60"),
    );
    for (p, status, want) in [
        ("/forbidden", 403, ["BYPASS", "BYPASS"]),
        ("/forbidden-60", 403, ["MISS", "HIT"]),
        ("/busy", 503, ["BYPASS", "BYPASS"]),
    ] {
        for w in want {
            let r = get(&n, p, "");
            assert_eq!((r.status, xcache(&r)), (status, w), "{p}");
        }
        let asked = if want[1] == "HIT" { 1 } else { 2 };
        assert_eq!(o.requests(p), asked, "{p}");
    }

    // A 404 that expires while the object appears: the object is never mixed with it.
    o.put(
        "/soon.bin",
        Object::new(b"soon".to_vec())
            .status(404)
            .cache_control("max-age=1, stale-while-revalidate=30"),
    );
    assert_eq!(get(&n, "/soon.bin", "").status, 404);
    let body = pattern(200_000, 4);
    o.put("/soon.bin", Object::version(body.clone(), 2));
    std::thread::sleep(Duration::from_millis(1100));
    let r = get(&n, "/soon.bin", "");
    assert_eq!((r.status, xcache(&r)), (404, "UPDATING"));
    wait_committed(&n);
    let r = get(&n, "/soon.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == body, "the object after its 404 differs");
    let r = get(&n, "/soon.bin", "Range: bytes=150000-\r\n");
    assert_eq!(r.status, 206);
    assert!(r.body == body[150_000..]);
}

#[test]
fn an_object_larger_than_max_size_is_served_but_never_stored() {
    let (o, n) = origin_and_node("slice_size = 0\nmax_size = \"1M\"");
    let small = pattern(100_000, 1);
    o.put("/small.bin", Object::new(small.clone()));
    assert_eq!(xcache(&get(&n, "/small.bin", "")), "MISS");
    wait_committed(&n);
    let big = pattern(3 << 20, 2);
    o.put("/big.bin", Object::new(big.clone()));
    for _ in 0..2 {
        let r = get(&n, "/big.bin", "");
        assert_eq!((r.status, xcache(&r)), (200, "MISS"));
        assert!(r.body == big, "the large object's bytes differ");
        settle(&n);
    }
    assert_eq!(o.requests("/big.bin"), 2, "stored after all");
    // Nothing was evicted for it, and the cache stays under its size on disk too.
    assert_eq!(xcache(&get(&n, "/small.bin", "")), "HIT");
    let size = volume_metric(&n, "contentserver_cache_size_bytes", &[]);
    assert!(size <= (1 << 20) as f64, "cache size {size} over max_size");
    let on_disk: u64 = walk(&n.cache).iter().map(|(_, len)| len).sum();
    assert!(on_disk <= 1 << 20, "{on_disk} bytes of files over max_size");
}

/// A seek into an object a whole-object volume does not store this time (over `max_size`, and
/// too large for a fill to hold for its waiters: its answer is streamed through) is answered
/// with the range asked for, fetched as that range: not the whole object.
#[test]
fn a_seek_into_a_large_object_not_stored_gets_its_range() {
    let (o, n) = origin_and_node("slice_size = 0\nmax_size = \"1M\"");
    let big = pattern((17 << 20) + 5, 3);
    o.put("/big.bin", Object::new(big.clone()));
    let at = 16 << 20;
    let r = get(&n, "/big.bin", &format!("Range: bytes={at}-{}\r\n", at + 9));
    assert_eq!((r.status, xcache(&r)), (206, "MISS"), "{:?}", r.headers);
    assert_eq!(
        common::http::header(&r.headers, "content-range"),
        Some(format!("bytes {at}-{}/{}", at + 9, big.len()).as_str())
    );
    assert!(r.body == big[at..at + 10], "the range's bytes differ");
    let ranges = o.ranges("/big.bin");
    assert!(
        ranges.contains(&Some(format!("bytes={at}-{}", at + 9))),
        "{ranges:?}"
    );
    // A range that is no range (its end before its start) is ignored, as on every other path:
    // the whole object, and the origin is not sent it.
    let r = get(&n, "/big.bin", "Range: bytes=5-4\r\n");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"), "{:?}", r.headers);
    assert!(r.body == big, "the object's bytes differ");
    assert!(!o
        .ranges("/big.bin")
        .contains(&Some("bytes=5-4".to_string())));
    // A full read still streams the whole object.
    settle(&n);
    let r = get(&n, "/big.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert!(r.body == big, "the object's bytes differ");
}

/// A `valid` rule of 0 seconds (nginx `proxy_cache_valid ... 0`) means every use is checked with
/// the origin: the route's default stale-while-revalidate does not serve the stored answer
/// unchecked (each answer was one version late, marked UPDATING).
/// A sliced node's configuration (cache at `dir/cache`) with an explicit route for `/` to the
/// origin, its `extra` TOML tables added.
fn with_root_route(o: &FaultOrigin, dir: &Path, extra: &str) -> Config {
    let mut cfg = config(&[o.url()], &dir.join("cache"), "", SLICED);
    cfg.routes = vec![toml::from_str(&format!(
        "prefix = \"/\"\nvolume = \"c1\"\norigin = \"origin\"\n{extra}"
    ))
    .expect("route TOML")];
    cfg
}

#[test]
fn a_valid_rule_of_zero_seconds_is_never_served_unchecked() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cfg = with_root_route(
        &o,
        d.path(),
        "[cache]\nvalid = [{ status = [200], secs = 0 }]\n",
    );
    let n = Node::start(&cfg);
    o.put("/z.txt", Object::version(b"one".to_vec(), 1));
    let r = get(&n, "/z.txt", "");
    assert_eq!((r.status, r.body.as_slice()), (200, b"one".as_slice()));
    wait_committed(&n);
    o.put("/z.txt", Object::version(b"two".to_vec(), 2));
    let r = get(&n, "/z.txt", "");
    assert_eq!(r.body, b"two", "served unchecked ({})", xcache(&r));
    assert_ne!(xcache(&r), "UPDATING");
}

#[test]
fn a_cache_route_sends_its_cors_and_configured_headers_like_a_static_one() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cfg = with_root_route(
        &o,
        d.path(),
        "[http.headers]\nadd = { \"X-Edge\" = \"1\" }\n\
         [http.media_headers.m3u8]\ncache_control = \"public, max-age=2\"\n\
         [http.cors]\nallow_origins = [\"https://player.example\"]\n",
    );
    let n = Node::start(&cfg);
    let body = pattern(5000, 3);
    // The origin's own CORS and Cache-Control are replaced by the route's.
    o.put(
        "/p.m3u8",
        Object::new(body.clone())
            .cache_control("max-age=600")
            .header("Access-Control-Allow-Origin", "*")
            .header("Vary", "Accept-Encoding"),
    );
    o.put(
        "/private.m3u8",
        Object::new(body.clone()).header("Set-Cookie", "id=1"),
    );
    let origin = "Origin: https://player.example\r\n";
    let check = |r: &common::Response, what: &str| {
        assert_eq!(
            r.header("Access-Control-Allow-Origin"),
            Some("https://player.example"),
            "{what}"
        );
        assert!(
            r.header("Access-Control-Expose-Headers")
                .is_some_and(|v| v.contains("Content-Range")),
            "{what}"
        );
        let allow = r
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("access-control-allow-origin"))
            .count();
        assert_eq!(allow, 1, "{what}: the origin's own CORS field went through");
        let vary: Vec<&str> = r
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("vary"))
            .map(|(_, v)| v.as_str())
            .collect();
        assert!(
            vary.iter()
                .any(|v| v.to_ascii_lowercase().contains("origin")),
            "{what}: {vary:?}"
        );
    };
    for want in ["MISS", "HIT"] {
        if want == "HIT" {
            wait_committed(&n);
        }
        let r = get(&n, "/p.m3u8", origin);
        assert_eq!((r.status, xcache(&r)), (200, want));
        assert!(r.body == body);
        check(&r, want);
        assert_eq!(r.header("X-Edge"), Some("1"), "{want}");
        assert_eq!(
            r.header("Cache-Control"),
            Some("public, max-age=2"),
            "{want}"
        );
        assert!(r
            .header("Vary")
            .is_some_and(|v| v.contains("Accept-Encoding")));
    }
    let r = get(&n, "/p.m3u8", &format!("{origin}Range: bytes=0-9\r\n"));
    assert_eq!(r.status, 206);
    check(&r, "206");
    // A 304 repeats what the 200 says (RFC 9110 §15.4.5).
    let r = get(&n, "/p.m3u8", &format!("{origin}If-None-Match: \"v1\"\r\n"));
    assert_eq!(r.status, 304);
    check(&r, "304");
    assert_eq!(r.header("Cache-Control"), Some("public, max-age=2"), "304");
    assert!(
        r.header("Vary")
            .is_some_and(|v| v.contains("Accept-Encoding")),
        "304"
    );
    // Passed through, and an error: the route's CORS too, so a player can read them.
    let r = get(&n, "/private.m3u8", origin);
    assert_eq!((r.status, xcache(&r)), (200, "BYPASS"));
    check(&r, "BYPASS");
    // An origin that varies on Origin itself (its own CORS answer, which the route replaces):
    // each field is named once, and the answer is stored all the same (a content-server origin
    // with a CORS list says `Vary: Origin` on every answer: before, every request through the
    // node was passed through).
    o.put(
        "/vo.m3u8",
        Object::new(body.clone())
            .cache_control("max-age=600")
            .header("Vary", "origin, Accept-Encoding"),
    );
    for want in ["MISS", "HIT"] {
        if want == "HIT" {
            wait_committed(&n);
        }
        let r = get(&n, "/vo.m3u8", origin);
        assert_eq!(xcache(&r), want);
        assert_eq!(
            r.header("Vary"),
            Some("origin, Accept-Encoding"),
            "{:?}",
            r.headers
        );
        check(&r, want);
    }
    o.fault("/down.m3u8", Fault::Status(500));
    let r = get(&n, "/down.m3u8", origin);
    assert_eq!(r.status, 500);
    check(&r, "500");
    // The route answers CORS itself: the client's Origin is not the origin's business.
    assert!(
        o.seen().iter().all(|s| s.header("origin").is_none()),
        "Origin forwarded"
    );
}

/// Without CORS of its route the node forwards the client's `Origin` (an origin answering per
/// Origin can), and an answer that says `Vary: Origin` is passed through, not stored.
#[test]
fn without_route_cors_origin_is_forwarded_and_vary_origin_passed_through() {
    let (o, n) = origin_and_node(SLICED);
    o.put(
        "/vo.m3u8",
        Object::new(pattern(500, 2))
            .cache_control("max-age=600")
            .header("Access-Control-Allow-Origin", "https://player.example")
            .header("Vary", "Origin"),
    );
    for _ in 0..2 {
        let r = get(&n, "/vo.m3u8", "Origin: https://player.example\r\n");
        assert_eq!(xcache(&r), "BYPASS");
        assert_eq!(
            r.header("Access-Control-Allow-Origin"),
            Some("https://player.example")
        );
    }
    assert!(o
        .seen()
        .iter()
        .all(|s| s.header("origin") == Some("https://player.example")));
    // Stored by a route that answers CORS itself, it is not served by one that does not (the
    // route's CORS removed): the origin's own answer depends on the Origin.
    let d = common::tempdir();
    let mut cfg = with_root_route(
        &o,
        d.path(),
        "[http.cors]\nallow_origins = [\"https://player.example\"]\n",
    );
    let mut with_cors = Node::start(&cfg);
    assert_eq!(xcache(&get(&with_cors, "/vo.m3u8", "")), "MISS");
    wait_committed(&with_cors);
    assert_eq!(xcache(&get(&with_cors, "/vo.m3u8", "")), "HIT");
    with_cors.srv.stop();
    cfg.routes.clear();
    let n = Node::start(&cfg);
    let asked = o.requests("/vo.m3u8");
    let r = get(&n, "/vo.m3u8", "Origin: https://player.example\r\n");
    assert_eq!(xcache(&r), "BYPASS");
    assert_eq!(
        r.header("Access-Control-Allow-Origin"),
        Some("https://player.example")
    );
    assert_eq!(o.requests("/vo.m3u8"), asked + 1);
    // And withdrawn: it would stay unusable here, found (and passed by) at every request.
    settle(&n);
    let cache = d.path().join("cache");
    assert!(
        common::wait_until(Duration::from_secs(5), || cache_files(&cache).1 == 0),
        "{:?}",
        cache_files(&cache)
    );
}

/// An origin that answers CORS per Origin only when asked with one (S3, an nginx `if
/// ($http_origin)`) says `Vary: Origin` to those requests alone. Such an answer is that
/// Origin's: it is passed through to it, but it marks nothing and withdraws nothing for the
/// others. Before, one request with any `Origin` passed the object through for every client
/// for a minute (and withdrew a stale stored copy it revalidated): anyone could switch the
/// cache off, object by object, and send the whole audience to the origin.
#[test]
fn one_origins_own_answer_does_not_switch_caching_off_for_the_others() {
    let (o, n) = origin_and_node(SLICED);
    // Stored, and revalidated at every use (as a stale copy is).
    let plain = || Object::new(pattern(500, 3)).cache_control("no-cache");
    // As S3 answers a request with an Origin: more than Origin in its Vary.
    let for_evil = |obj: Object| {
        obj.header("Access-Control-Allow-Origin", "https://evil.example")
            .header(
                "Vary",
                "Origin, Access-Control-Request-Headers, Access-Control-Request-Method",
            )
    };
    o.put("/o.js", plain());
    o.put_for_origin("/o.js", "https://evil.example", for_evil(plain()));
    let evil = "Origin: https://evil.example\r\n";
    let r = get(&n, "/o.js", evil);
    assert_eq!(xcache(&r), "BYPASS");
    assert_eq!(
        r.header("Access-Control-Allow-Origin"),
        Some("https://evil.example")
    );
    // The others' answer is stored as if nothing happened.
    let r = get(&n, "/o.js", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert_eq!(r.header("Access-Control-Allow-Origin"), None);
    wait_committed(&n);
    assert_eq!(xcache(&get(&n, "/o.js", "")), "REVALIDATED");
    // Revalidated for a request with that Origin: its 304 says Vary: Origin. That request
    // gets the 304's fields; the stored copy stays for the others.
    let r = get(&n, "/o.js", evil);
    assert_eq!((r.status, xcache(&r)), (200, "REVALIDATED"));
    assert_eq!(
        r.header("Access-Control-Allow-Origin"),
        Some("https://evil.example")
    );
    settle(&n);
    let r = get(&n, "/o.js", "");
    assert_eq!((r.status, xcache(&r)), (200, "REVALIDATED"));
    assert_eq!(r.header("Access-Control-Allow-Origin"), None);
    // A new version for that Origin (a 200, not a 304) withdraws nothing either.
    o.put_for_origin(
        "/o.js",
        "https://evil.example",
        for_evil(Object::version(pattern(500, 4), 2).cache_control("no-cache")),
    );
    let r = get(&n, "/o.js", evil);
    assert_eq!((xcache(&r), r.body == pattern(500, 4)), ("BYPASS", true));
    settle(&n);
    let r = get(&n, "/o.js", "");
    assert_eq!(
        (xcache(&r), r.body == pattern(500, 3)),
        ("REVALIDATED", true)
    );
    assert_eq!(r.header("Access-Control-Allow-Origin"), None);
}

/// The later slices of a response are asked for without the client's `Origin`: only their
/// bytes are used (the response's fields come from its first slice), and an answer made for
/// one Origin (`Vary: Origin`) refused for a later slice withdrew the whole object and passed
/// it through for everyone (a player's probe stores the first slice; the next browser request
/// with an `Origin` switched the object's caching off).
#[test]
fn later_slices_are_asked_for_without_the_clients_origin() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(200_000, 6);
    let plain = || Object::new(body.clone()).cache_control("max-age=3600");
    o.put("/v.mp4", plain());
    o.put_for_origin(
        "/v.mp4",
        "https://evil.example",
        plain()
            .header("Access-Control-Allow-Origin", "https://evil.example")
            .header("Vary", "Origin"),
    );
    let r = get(&n, "/v.mp4", "Range: bytes=0-1\r\n");
    assert_eq!(r.status, 206);
    wait_committed(&n);
    let before = o.seen().len();
    let r = get(&n, "/v.mp4", "Origin: https://evil.example\r\n");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == body, "whole and intact");
    let seen = o.seen();
    assert!(seen.len() > before, "the later slices were asked for");
    assert!(
        seen[before..].iter().all(|s| s.header("origin").is_none()),
        "a later slice carried the client's Origin"
    );
    settle(&n);
    let asked = o.requests("/v.mp4");
    let r = get(&n, "/v.mp4", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == body);
    assert_eq!(o.requests("/v.mp4"), asked, "every slice stored");
}

/// An answer that varies by the request's `Origin` and is kept out of the cache for another
/// reason as well (`private`: whatever the Origin) still withdraws the stored copy it
/// revalidated and passes the object through for everyone.
#[test]
fn a_private_answer_that_varies_by_origin_still_withdraws_the_stored_copy() {
    let (o, n) = origin_and_node(SLICED);
    o.put(
        "/p.js",
        Object::new(pattern(500, 7)).cache_control("no-cache"),
    );
    assert_eq!(xcache(&get(&n, "/p.js", "")), "MISS");
    wait_committed(&n);
    let private = Object::version(pattern(500, 8), 2)
        .cache_control("private")
        .header("Access-Control-Allow-Origin", "https://evil.example")
        .header("Vary", "Origin");
    o.put_for_origin("/p.js", "https://evil.example", private);
    let r = get(&n, "/p.js", "Origin: https://evil.example\r\n");
    assert_eq!((xcache(&r), r.body == pattern(500, 8)), ("BYPASS", true));
    settle(&n);
    assert_eq!(xcache(&get(&n, "/p.js", "")), "BYPASS", "passed through");
}

/// A request with another `Origin` (or none) that joins a fill started for one with an
/// `Origin` does not get the answer the origin made for that one (its
/// `Access-Control-Allow-Origin`): it asks for its own (RFC 9111 §4.1: `Vary` names a field
/// its request differs in).
#[test]
fn a_joiner_with_another_origin_is_not_given_one_origins_own_answer() {
    // Started for an Origin, and (an origin that says Vary: Origin to every request, as a
    // content-server origin with a CORS list) for none.
    for (starter, object_vary) in [(Some("https://a.example"), false), (None, true)] {
        let o = FaultOrigin::start();
        let n = common::cache::temp_node(&[o.url()], "read_timeout_ms = 10000", SLICED);
        for site in ["https://a.example", "https://b.example"] {
            o.put_for_origin(
                "/j.js",
                site,
                Object::new(pattern(500, 5))
                    .header("Access-Control-Allow-Origin", site)
                    .header("Vary", "Origin"),
            );
        }
        let plain = Object::new(pattern(500, 5)).cache_control("max-age=60");
        o.put(
            "/j.js",
            if object_vary {
                plain.header("Vary", "Origin")
            } else {
                plain
            },
        );
        // Every request joins the first one's fill before the origin answers it.
        o.set_timing(Timing {
            head_delay: Duration::from_millis(800),
            ..Timing::default()
        });
        // The request that starts the fill goes away before the answer: the joiners are left
        // with it (one of them would have taken it).
        let addr = n.srv.addr;
        let mut first = std::net::TcpStream::connect(addr).unwrap();
        let origin_line = starter
            .map(|s| format!("Origin: {s}\r\n"))
            .unwrap_or_default();
        std::io::Write::write_all(
            &mut first,
            format!("GET /j.js HTTP/1.1\r\nHost: t\r\n{origin_line}\r\n").as_bytes(),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        drop(first);
        let joiners: Vec<Option<&'static str>> =
            [Some("https://a.example"), Some("https://b.example"), None]
                .into_iter()
                .filter(|site| *site != starter)
                .collect();
        let others: Vec<_> = joiners
            .into_iter()
            .map(|site| {
                std::thread::spawn(move || {
                    let h: Vec<(&str, &str)> = site.map(|s| ("Origin", s)).into_iter().collect();
                    (site, common::http::request(addr, "GET", "/j.js", &h))
                })
            })
            .collect();
        for t in others {
            let (site, r) = t.join().unwrap();
            assert_eq!(r.status, 200);
            assert_eq!(r.body, pattern(500, 5));
            assert_eq!(
                r.header("Access-Control-Allow-Origin"),
                site,
                "{site:?} after {starter:?}"
            );
        }
        // Each asked the origin itself: not counted as spared by collapsing.
        assert_eq!(
            volume_metric(&n, "contentserver_cache_collapsed_total", &[]),
            0.0
        );
    }
}

/// An origin that ignores Range for a range past the object's end (RFC 9110 §14.2 allows it)
/// answers a later slice's range with the whole, shorter object: that is a 416, not "Range
/// ignored" — which passed the object through for everyone for a minute, so any client could
/// switch its caching off with `Range: bytes=99999999-` (tester).
#[test]
fn a_whole_answer_shorter_than_a_later_slice_start_is_a_416_not_a_pass() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(100, 9);
    o.put(
        "/short.bin",
        Object::new(body.clone()).cache_control("max-age=600"),
    );
    let mut raw = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nETag: \"v1\"\r\n\
        Cache-Control: max-age=600\r\nConnection: close\r\n\r\n"
        .to_vec();
    raw.extend_from_slice(&body);
    o.fault_times("/short.bin", Fault::Raw(raw), 1);
    let r = get(&n, "/short.bin", "Range: bytes=99999999-\r\n");
    assert_eq!(r.status, 416);
    assert_eq!(r.header("Content-Range"), Some("bytes */100"));
    let r = get(&n, "/short.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"), "not passed through");
    assert!(r.body == body);
    wait_committed(&n);
    assert_eq!(xcache(&get(&n, "/short.bin", "")), "HIT");
    // The same of unknown length (chunked) is read ahead to its end: a 416 too.
    let mut chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: \"v1\"\r\n\
        Cache-Control: max-age=600\r\nConnection: close\r\n\r\n64\r\n"
        .to_vec();
    chunked.extend_from_slice(&body);
    chunked.extend_from_slice(b"\r\n0\r\n\r\n");
    o.put(
        "/short2.bin",
        Object::new(body.clone()).cache_control("max-age=600"),
    );
    o.fault_times("/short2.bin", Fault::Raw(chunked), 1);
    let r = get(&n, "/short2.bin", "Range: bytes=99999999-\r\n");
    assert_eq!(r.status, 416);
    assert_eq!(
        xcache(&get(&n, "/short2.bin", "")),
        "MISS",
        "not passed through"
    );
    // A 200 that is not the object (no validator: an error page) is no length of it: passed
    // to the client as it is.
    let page = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy".to_vec();
    o.put(
        "/short3.bin",
        Object::new(body.clone()).cache_control("max-age=600"),
    );
    o.fault_times("/short3.bin", Fault::Raw(page), 2);
    let r = get(&n, "/short3.bin", "Range: bytes=99999999-\r\n");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"busy"[..]));
}

/// An answer passed through spells the origin's field names as stored and static answers do
/// (`ETag`, `Last-Modified`, `Cache-Control`), for GET and HEAD alike.
#[test]
fn passed_through_answers_spell_field_names_as_stored_ones_do() {
    let (o, n) = origin_and_node(SLICED);
    o.put(
        "/p.bin",
        Object::new(pattern(100, 1)).cache_control("private"),
    );
    o.put("/s.bin", Object::new(pattern(100, 1)));
    for (path, method, want) in [
        ("/p.bin", "GET", "BYPASS"),
        ("/p.bin", "HEAD", "BYPASS"),
        ("/s.bin", "GET", "MISS"),
        ("/s.bin", "GET", "HIT"),
    ] {
        let r = if method == "GET" {
            get(&n, path, "")
        } else {
            common::http::request(n.srv.addr, "HEAD", path, &[])
        };
        assert_eq!(xcache(&r), want);
        let names: Vec<&str> = r.headers.iter().map(|(k, _)| k.as_str()).collect();
        for field in ["ETag", "Last-Modified"] {
            assert!(names.contains(&field), "{method} {path}: {names:?}");
        }
    }
}

/// Fields the client's `Connection` names are hop-by-hop (RFC 9110 §7.6.1): its `Origin` and
/// `Authorization` are not forwarded to the origin then (an anonymous request: a shared
/// answer); without `Connection` naming them, both are.
#[test]
fn fields_named_by_connection_are_not_forwarded_to_the_origin() {
    let (o, n) = origin_and_node(SLICED);
    o.put(
        "/hop.bin",
        Object::new(pattern(100, 1)).cache_control("private"),
    );
    let sent = |extra: &str| {
        let before = o.seen().len();
        let r = get(
            &n,
            "/hop.bin",
            &format!("Origin: https://player.example\r\nAuthorization: Bearer t\r\n{extra}"),
        );
        assert_eq!(r.status, 200);
        let seen = o.seen();
        let s = seen[before..].last().expect("asked the origin").clone();
        (
            s.header("origin").map(str::to_string),
            s.header("authorization").map(str::to_string),
        )
    };
    assert_eq!(
        sent(""),
        (
            Some("https://player.example".into()),
            Some("Bearer t".into())
        )
    );
    assert_eq!(
        sent("Connection: keep-alive, Origin\r\n"),
        (None, Some("Bearer t".into()))
    );
    assert_eq!(
        sent("Connection: authorization\r\n"),
        (Some("https://player.example".into()), None)
    );
}

#[test]
fn a_cached_304_repeats_cache_control_expires_and_vary() {
    let (o, n) = origin_and_node(SLICED);
    o.put(
        "/v.vtt",
        Object::new(pattern(100, 1))
            .cache_control("public, max-age=60")
            .header("Expires", "Thu, 01 Jan 2099 00:00:00 GMT")
            .header("Vary", "Accept-Encoding"),
    );
    assert_eq!(xcache(&get(&n, "/v.vtt", "")), "MISS");
    wait_committed(&n);
    let r = get(&n, "/v.vtt", "If-None-Match: \"v1\"\r\n");
    assert_eq!((r.status, xcache(&r)), (304, "HIT"));
    assert_eq!(r.header("Cache-Control"), Some("public, max-age=60"));
    assert_eq!(r.header("Expires"), Some("Thu, 01 Jan 2099 00:00:00 GMT"));
    assert_eq!(r.header("Vary"), Some("Accept-Encoding"));
    assert_eq!(r.header("ETag"), Some("\"v1\""));
}

#[test]
fn utf8_header_values_reach_clients_byte_for_byte() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(1000, 2);
    let disposition = "attachment; filename=\"été — 映画.mp4\"";
    o.put(
        "/u.bin",
        Object::new(body.clone()).header("Content-Disposition", disposition),
    );
    o.put(
        "/uc.bin",
        Object::new(body.clone())
            .header("Content-Disposition", disposition)
            .header("Set-Cookie", "id=1"),
    );
    for (path, want) in [("/u.bin", "MISS"), ("/u.bin", "HIT"), ("/uc.bin", "BYPASS")] {
        if want == "HIT" {
            wait_committed(&n);
        }
        let r = get(&n, path, "");
        assert_eq!((r.status, xcache(&r)), (200, want), "{path}");
        assert_eq!(
            r.header("Content-Disposition"),
            Some(disposition),
            "{path} {want}"
        );
    }
}

#[test]
fn an_answer_stale_on_arrival_is_not_served_stale_past_its_window() {
    let (o, n) = origin_and_node("slice_size = 0");
    // 140 s stale when it arrives: the route's 60 s of stale-while-revalidate are over.
    o.put(
        "/old.txt",
        Object::new(pattern(100, 3))
            .cache_control("max-age=60")
            .header("Age", "200"),
    );
    assert_eq!(xcache(&get(&n, "/old.txt", "")), "MISS");
    wait_committed(&n);
    for _ in 0..2 {
        let r = get(&n, "/old.txt", "");
        assert_eq!(r.status, 200);
        assert_ne!(
            xcache(&r),
            "UPDATING",
            "served stale 140 s past its lifetime"
        );
        assert_ne!(xcache(&r), "HIT");
    }
    // Each use asked the origin before answering.
    assert_eq!(o.requests("/old.txt"), 3);
    // 10 s stale on arrival: 50 s of the window are left, so it is served while it refreshes.
    o.put(
        "/recent.txt",
        Object::new(pattern(100, 4))
            .cache_control("max-age=60")
            .header("Age", "70"),
    );
    assert_eq!(xcache(&get(&n, "/recent.txt", "")), "MISS");
    wait_committed(&n);
    assert_eq!(xcache(&get(&n, "/recent.txt", "")), "UPDATING");
}

#[test]
fn a_passed_through_answer_keeps_the_clients_preconditions() {
    let o = FaultOrigin::start();
    let body = pattern(100_000, 5);
    o.put(
        "/cookie",
        Object::new(body.clone()).header("Set-Cookie", "id=1"),
    );
    let lm = "Wed, 01 Jan 2025 00:00:01 GMT";
    for vol in ["slice_size = 0", SLICED] {
        let d = common::tempdir();
        let n = node(d.path(), &[o.url()], "", vol);
        for (extra, want) in [
            ("If-None-Match: \"v1\"\r\n".to_string(), 304),
            ("If-None-Match: \"v0\"\r\n".to_string(), 200),
            (format!("If-Modified-Since: {lm}\r\n"), 304),
            ("If-Match: \"v0\"\r\n".to_string(), 412),
            ("If-Match: \"v1\"\r\n".to_string(), 200),
            (String::new(), 200),
        ] {
            let r = get(&n, "/cookie", &extra);
            assert_eq!((r.status, xcache(&r)), (want, "BYPASS"), "{vol}: {extra:?}");
            match want {
                200 => assert!(r.body == body, "{vol}: {extra:?}"),
                304 => {
                    assert!(r.body.is_empty(), "{vol}: {extra:?}");
                    assert_eq!(r.header("ETag"), Some("\"v1\""), "{vol}: {extra:?}");
                    // The origin's state change for this client goes along (nginx sends the
                    // 200 then; it was dropped).
                    assert_eq!(r.header("Set-Cookie"), Some("id=1"), "{vol}: {extra:?}");
                    // Names written as in every other answer (they came in lower case).
                    let names: Vec<&str> = r.headers.iter().map(|(n, _)| n.as_str()).collect();
                    for n in ["ETag", "Last-Modified", "Set-Cookie"] {
                        assert!(names.contains(&n), "{vol}: {extra:?}: {names:?}");
                    }
                }
                _ => {}
            }
        }
    }
    // A pass-through asks the origin itself with them (sliced: the slice fill's 206 does not
    // answer the request), so the origin's 304 saves the body.
    assert!(
        o.seen()
            .iter()
            .any(|s| s.path == "/cookie" && s.header("if-none-match") == Some("\"v1\"")),
        "no precondition reached the origin"
    );
}

#[test]
fn a_slow_reader_of_a_passed_through_answer_does_not_keep_the_origin_connection() {
    let o = FaultOrigin::start();
    // Far more than the sockets between the node and a client that reads nothing can take.
    let private = pattern(24 << 20, 8);
    o.put(
        "/private.bin",
        Object::new(private.clone()).header("Set-Cookie", "id=1"),
    );
    o.put("/public.bin", Object::new(pattern(5000, 9)));
    for vol in ["slice_size = 0", SLICED] {
        let d = common::tempdir();
        // One origin connection, and read-ahead past the private answer's size.
        let n = node(
            d.path(),
            &[o.url()],
            "max_connections = 1\npass_buffer_bytes = 33554432",
            vol,
        );
        let mut slow = n.srv.connect();
        slow.send_get("/private.bin");
        // The node reads the private answer ahead of its client, in memory, and the only
        // origin connection is free for the next miss at once.
        std::thread::sleep(Duration::from_millis(300));
        let t = Instant::now();
        let r = get(&n, "/public.bin", "");
        assert_eq!((r.status, xcache(&r)), (200, "MISS"), "{vol}");
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{vol}: the next miss waited {:?} for the slow reader's origin connection",
            t.elapsed()
        );
        // The slow client still gets every byte.
        let r = slow.response(false).expect("the passed-through answer");
        assert_eq!((r.status, xcache(&r)), (200, "BYPASS"), "{vol}");
        assert!(r.body == private, "{vol}: the passed-through body differs");
    }
}

#[test]
fn read_ahead_for_slow_clients_is_bounded_per_origin() {
    use std::io::Write;
    let o = FaultOrigin::start();
    // Each fits the read-ahead: without a total, every stalled reader would hold one.
    let private = pattern(8 << 20, 5);
    o.put(
        "/p.bin",
        Object::new(private.clone()).header("Set-Cookie", "id=1"),
    );
    let d = common::tempdir();
    // At most 1 x 8 MiB held for slow readers, however many there are.
    let n = node(
        d.path(),
        &[o.url()],
        "max_connections = 1\npass_buffer_bytes = 8388608",
        "slice_size = 0",
    );
    // The first answer is stored as not storable (hit-for-pass) so the rest go straight through.
    assert_eq!(xcache(&get(&n, "/p.bin", "")), "BYPASS");
    let before = rss(n.srv.pid());
    let mut stalled = Vec::new();
    for _ in 0..6 {
        let mut s = std::net::TcpStream::connect(n.srv.addr).expect("connect");
        s.write_all(b"GET /p.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            .expect("request");
        stalled.push(s);
    }
    std::thread::sleep(Duration::from_secs(2));
    let grew = rss(n.srv.pid()).saturating_sub(before);
    assert!(
        grew < 32 << 20,
        "6 stalled readers made the node hold {} MiB",
        grew >> 20
    );
    drop(stalled);
    // Once they are gone, answers flow again, whole.
    let t = Instant::now();
    let r = get(&n, "/p.bin", "");
    assert!(r.body == private, "the passed-through body differs");
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn an_answer_not_storable_is_passed_through_at_once_until_purged() {
    let (o, n) = origin_and_purge_node(SLICED);
    let body = pattern(3 * SLICE, 6);
    let cookie = || Object::new(body.clone()).header("Set-Cookie", "id=1");
    for p in ["/p.bin", "/d/q.bin"] {
        o.put(p, cookie());
        for _ in 0..3 {
            let r = get(&n, p, "");
            assert_eq!((r.status, xcache(&r)), (200, "BYPASS"), "{p}");
            assert!(r.body == body, "{p}");
        }
        // The first request asked for the first slice (not storable) and then for the
        // object; the next ones only for the object.
        assert_eq!(
            o.ranges(p),
            [Some(format!("bytes=0-{}", SLICE - 1)), None, None, None]
        );
    }
    // Fixed at the origin, the object is still passed through (for up to a minute) ...
    o.put("/p.bin", Object::new(body.clone()));
    assert_eq!(xcache(&get(&n, "/p.bin", "")), "BYPASS");
    // ... until a purge of its key or of a prefix forgets the mark: then it is stored.
    let r = admin(&n, "POST", "/cache/purge?key=/p.bin", PURGE_AUTH);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    o.put("/d/q.bin", Object::new(body.clone()));
    let r = admin(&n, "POST", "/cache/purge?prefix=/d/", PURGE_AUTH);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    for p in ["/p.bin", "/d/q.bin"] {
        assert_eq!(xcache(&get(&n, p, "")), "MISS", "{p}");
        wait_committed(&n);
        let r = get(&n, p, "");
        assert_eq!((r.status, xcache(&r)), (200, "HIT"), "{p}");
        assert!(r.body == body, "{p}");
    }
}

/// An origin status passed through keeps its registered reason phrase (it said "Unknown" for
/// every status the server does not send itself).
#[test]
fn a_passed_through_status_keeps_its_reason_phrase() {
    use std::io::{Read, Write};
    let (o, n) = origin_and_node(SLICED);
    for (status, phrase) in [
        (302, "Found"),
        (410, "Gone"),
        (429, "Too Many Requests"),
        (451, "Unavailable For Legal Reasons"),
    ] {
        let p = format!("/s{status}");
        o.put(&p, Object::new(b"x".to_vec()).status(status));
        let mut c = std::net::TcpStream::connect(n.srv.addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let req = format!("GET {p} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        c.write_all(req.as_bytes()).expect("send");
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        let text = String::from_utf8_lossy(&got);
        let line = text.lines().next().unwrap_or_default();
        assert_eq!(line, format!("HTTP/1.1 {status} {phrase}"), "{text}");
    }
}

/// An object first asked for by a seek (a range in a later slice) whose slice answer is not
/// storable is marked like one asked from its start: the next seeks go straight through, one
/// origin request each, not a slice fetched and thrown away first every time.
#[test]
fn a_seek_into_an_object_not_storable_marks_it_for_pass() {
    let (o, n) = origin_and_purge_node(SLICED);
    let body = pattern(3 * SLICE + 5, 8);
    o.put(
        "/seek.bin",
        Object::new(body.clone()).header("Set-Cookie", "id=1"),
    );
    let at = 2 * SLICE + 17;
    let asked = format!("bytes={at}-{}", at + 100);
    for i in 0..4 {
        let r = get(&n, "/seek.bin", &format!("Range: {asked}\r\n"));
        assert_eq!((r.status, xcache(&r)), (206, "BYPASS"), "request {i}");
        assert!(r.body == body[at..=at + 100], "request {i}: other bytes");
    }
    let slice = Some(format!("bytes={}-{}", 2 * SLICE, 3 * SLICE - 1));
    let direct = Some(asked.clone());
    assert_eq!(
        o.ranges("/seek.bin"),
        [
            slice,
            direct.clone(),
            direct.clone(),
            direct.clone(),
            direct
        ],
        "the slice is asked for once, then each seek goes through"
    );
    // A 404 to a later slice is not the object refused: its next request is not passed
    // through (the 404 may be stored by the valid rules as the first slice).
    let r = get(&n, "/gone.bin", &format!("Range: {asked}\r\n"));
    assert_eq!(r.status, 404);
    let r = get(&n, "/gone.bin", "");
    assert_eq!(r.status, 404);
    assert_ne!(xcache(&r), "BYPASS", "{:?}", o.ranges("/gone.bin"));
}

/// The next slice is fetched while the current one is sent: at once while the current one
/// still arrives from the origin, and from a stored slice only once its last quarter goes out
/// (a download that stops earlier has fetched nothing it never reads).
#[test]
fn the_next_slice_is_prefetched_while_one_is_sent() {
    // A stored 16 MiB first slice, to a client that reads nothing for a while: the socket
    // buffers (a few MiB) hold far less than three quarters of it.
    let big: usize = 16 << 20;
    let (o, n) = origin_and_node(&format!("slice_size = {big}"));
    let body = pattern(big + 100_000, 7);
    o.put("/big.bin", Object::new(body.clone()));
    assert_eq!(get(&n, "/big.bin", "Range: bytes=0-0\r\n").status, 206);
    wait_committed(&n);
    let second = Some(format!("bytes={big}-{}", 2 * big - 1));
    let mut c = n.srv.connect();
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !o.ranges("/big.bin").contains(&second),
        "the second slice was fetched while most of the first was still unsent"
    );
    let r = c.response(false).expect("the whole object");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == body, "the object differs");
    assert_eq!(
        o.ranges("/big.bin")
            .iter()
            .filter(|r| **r == second)
            .count(),
        1
    );

    // A miss, from an origin sending 64 KiB/s: the second slice is asked for before the
    // first has arrived (a second; the margin is for a loaded machine).
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(3 * SLICE, 8);
    o.put("/slow.bin", Object::new(body.clone()));
    o.set_timing(Timing {
        rate: 64 * 1024,
        ..Timing::default()
    });
    let mut c = n.srv.connect();
    c.send(b"GET /slow.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let second = Some(format!("bytes={SLICE}-{}", 2 * SLICE - 1));
    let t0 = Instant::now();
    assert!(
        common::wait_until(Duration::from_millis(800), || o
            .ranges("/slow.bin")
            .contains(&second)),
        "no prefetch while the first slice arrived ({:?})",
        o.ranges("/slow.bin")
    );
    assert!(t0.elapsed() < Duration::from_millis(900));
    let r = c.response(false).expect("the whole object");
    assert!(r.body == body, "the slow object differs");
}

/// A seek into a missing object (`bytes=N-`, as a player sends while its user drags the seek
/// bar) that the client drops after a few bytes has fetched its slice, not the one after it:
/// the next slice is asked for once the seek's first quarter slice went out. One that reads
/// on gets its whole range, each slice fetched once. Each such seek fetched two slices.
#[test]
fn a_dropped_seek_into_a_missing_object_fetches_only_its_slice() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(4 * SLICE, 11);
    o.put("/seek.bin", Object::new(body.clone()));
    o.set_timing(Timing {
        rate: 64 * 1024,
        ..Timing::default()
    });
    let slice = |k: usize| Some(format!("bytes={}-{}", k * SLICE, (k + 1) * SLICE - 1));
    let from = SLICE + 1000;
    let range = format!("Range: bytes={from}-\r\n");
    // (The head and a few body bytes: the body's first bytes arrive at once.)
    let c = common::http::partly_read(n.srv.addr, "/seek.bin", &range, None, 300);
    assert!(
        c.1.starts_with(b"HTTP/1.1 206"),
        "{:?}",
        String::from_utf8_lossy(&c.1)
    );
    drop(c);
    // The slice goes on arriving (a fill runs detached), at 64 KiB/s: a second.
    std::thread::sleep(Duration::from_millis(1500));
    let asked = o.ranges("/seek.bin");
    assert!(asked.contains(&slice(1)), "{asked:?}");
    assert!(
        !asked.contains(&slice(2)),
        "a dropped seek fetched the next slice: {asked:?}"
    );
    // Nor one that starts at the end of a slice: the next slice is sent, not prefetched from
    // (the slice after it was fetched at once, as the seek's bytes were all but sent).
    // (Dropped once it has the slice's 200 bytes, the next slice's first byte on its way.)
    o.put("/near.bin", Object::new(body.clone()));
    let mut c = std::net::TcpStream::connect(n.srv.addr).expect("connect");
    let req = format!(
        "GET /near.bin HTTP/1.1\r\nHost: t\r\nRange: bytes={}-\r\n\r\n",
        2 * SLICE - 200
    );
    std::io::Write::write_all(&mut c, req.as_bytes()).expect("request");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .is_none_or(|h| got.len() < h + 4 + 201)
    {
        let k = c.read(&mut buf).expect("read");
        assert!(k > 0, "closed early");
        got.extend_from_slice(&buf[..k]);
    }
    assert!(got.starts_with(b"HTTP/1.1 206"));
    drop(c);
    std::thread::sleep(Duration::from_millis(1500));
    let asked = o.ranges("/near.bin");
    assert!(
        !asked.contains(&slice(3)),
        "a dropped seek fetched two slices ahead: {asked:?}"
    );

    let r = get(
        &n,
        "/seek.bin",
        &format!("Range: bytes={}-\r\n", 2 * SLICE + 5),
    );
    assert_eq!(r.status, 206);
    assert!(r.body == body[2 * SLICE + 5..], "the seek's bytes differ");
    let asked = o.ranges("/seek.bin");
    for k in 1..4 {
        assert_eq!(
            asked.iter().filter(|r| **r == slice(k)).count(),
            1,
            "{asked:?}"
        );
    }
}

/// A miss is sent from memory as its bytes arrive, whatever the pool storing it is doing: with
/// every cache file operation taking 600 ms (its temporary file's creation included), the
/// client has the whole answer long before the entry is stored; then it is a hit.
#[cfg(feature = "failpoints")]
#[test]
fn a_miss_does_not_wait_for_its_file_to_be_created() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cfg = config(&[o.url()], &d.path().join("cache"), "", SLICED);
    let n = Node::start_with_env(&cfg, &[("FAILPOINTS", "cache_write=sleep(600)")]);
    let body = pattern(30_000, 9);
    o.put("/slow-disk.bin", Object::new(body.clone()));
    let t0 = Instant::now();
    let r = get(&n, "/slow-disk.bin", "");
    let took = t0.elapsed();
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert!(r.body == body);
    assert!(
        took < Duration::from_millis(400),
        "the miss waited {took:?} for the disk"
    );
    assert!(
        common::wait_until(Duration::from_secs(10), || cache_files(&n.cache) == (0, 1)),
        "the entry was not stored: {:?}",
        cache_files(&n.cache)
    );
    let r = get(&n, "/slow-disk.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == body);
    assert_eq!(o.requests("/slow-disk.bin"), 1);
}

/// only-if-cached right after a miss whose bytes have all arrived, while its entry is still
/// being written (every cache file operation taking 600 ms): answered from the fill (a hit),
/// not 504 because the index has not got it yet.
#[cfg(feature = "failpoints")]
#[test]
fn only_if_cached_right_after_a_miss_is_a_hit() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cfg = config(&[o.url()], &d.path().join("cache"), "", SLICED);
    let n = Node::start_with_env(&cfg, &[("FAILPOINTS", "cache_write=sleep(600)")]);
    let body = pattern(30_000, 7);
    o.put(
        "/o.bin",
        Object::new(body.clone()).cache_control("max-age=100"),
    );
    assert_eq!(xcache(&get(&n, "/o.bin", "")), "MISS");
    let r = get(&n, "/o.bin", "Cache-Control: only-if-cached\r\n");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == body);
    assert_eq!(o.requests("/o.bin"), 1);
    assert_eq!(
        cache_files(&n.cache).1,
        0,
        "the entry was stored already: no window tested"
    );
}

/// Entry files removed by hand while the node runs (`rm -rf` of the levels) are not served from
/// their deleted files, though the node kept them open: each is fetched again, stored again,
/// and the volume's entry count follows what is on the disk.
#[test]
fn entries_removed_by_hand_are_fetched_again_not_served_deleted() {
    let (o, n) = origin_and_node("slice_size = 0");
    let paths: Vec<String> = (0..20).map(|i| format!("/rm/{i}.bin")).collect();
    for (i, p) in paths.iter().enumerate() {
        o.put(p, Object::new(pattern(2000, i as u8)));
        assert_eq!(xcache(&get(&n, p, "")), "MISS");
    }
    wait_committed(&n);
    for p in &paths {
        assert_eq!(xcache(&get(&n, p, "")), "HIT", "{p}");
    }
    assert_eq!(volume_metric(&n, "contentserver_cache_entries", &[]), 20.0);
    for d in std::fs::read_dir(&n.cache).unwrap() {
        let d = d.unwrap().path();
        let name = d.file_name().unwrap().to_string_lossy().to_string();
        if !name.starts_with('.') {
            std::fs::remove_dir_all(&d).unwrap();
        }
    }
    for (i, p) in paths.iter().enumerate() {
        let r = get(&n, p, "");
        assert_eq!(xcache(&r), "MISS", "{p} served from a deleted file");
        assert!(r.body == pattern(2000, i as u8));
        assert_eq!(o.requests(p), 2, "{p}");
    }
    wait_committed(&n);
    assert_eq!(cache_files(&n.cache).1, 20);
    assert_eq!(volume_metric(&n, "contentserver_cache_entries", &[]), 20.0);
    for p in &paths {
        assert_eq!(xcache(&get(&n, p, "")), "HIT", "{p}");
    }
}

/// The entry file of slice `slice` of the object at `path` (its key) in `cache`.
fn entry_path(cache: &Path, path: &str, slice: u32) -> PathBuf {
    let id = content_server::cache::key::CacheKey::new(path.as_bytes().to_vec()).slice(slice);
    cache.join(id.rel_path())
}

/// What is put by hand where an entry belongs is never served nor waited on: a FIFO (its open
/// and read would wait for a writer for ever, on a pool thread), another object's valid entry
/// moved there (it cut every full read at that slice, for ever) and one copied over an entry
/// the node keeps open (its bytes were served under the header read before) are dropped and
/// the slice fetched again; the full reads that meet them get every byte.
#[test]
fn a_fifo_or_another_objects_entry_at_an_entry_path_is_replaced() {
    let (o, n) = origin_and_node(SLICED);
    let (a, b) = (pattern(4 * SLICE, 1), pattern(4 * SLICE, 2));
    o.put("/a.bin", Object::new(a.clone()));
    o.put("/b.bin", Object::new(b.clone()));
    for p in ["/a.bin", "/b.bin"] {
        assert_eq!(get(&n, p, "").status, 200);
    }
    wait_committed(&n);
    let a2 = entry_path(&n.cache, "/a.bin", 2);
    let a3 = entry_path(&n.cache, "/a.bin", 3);
    let b2 = entry_path(&n.cache, "/b.bin", 2);
    assert!(a3.is_file() && b2.is_file(), "{}", n.srv.logs());
    // The node keeps a's slices open from the reads above.
    assert_eq!(xcache(&get(&n, "/a.bin", "")), "HIT");
    // Another object's slice of the same length moved to a's slice 2 and copied over a's
    // slice 3 (written in place), and a FIFO in b's slice 2.
    let moved = n.cache.join("moved");
    std::fs::copy(entry_path(&n.cache, "/b.bin", 1), &moved).expect("copy");
    std::fs::rename(&moved, &a2).expect("move over");
    std::fs::copy(entry_path(&n.cache, "/b.bin", 1), &a3).expect("copy over");
    std::fs::remove_file(&b2).expect("rm");
    let made = std::process::Command::new("mkfifo")
        .arg(&b2)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    for (p, body) in [("/a.bin", &a), ("/b.bin", &b)] {
        let t = Instant::now();
        let r = try_get(&n, p, "").unwrap_or_else(|e| panic!("{p}: {e}\n{}", n.srv.logs()));
        assert_eq!(r.status, 200, "{p}");
        assert!(r.body == *body, "{p}: the bytes differ");
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{p}: {:?}",
            t.elapsed()
        );
    }
    wait_committed(&n);
    assert!(b2.is_file(), "the FIFO is still there");
    for (p, body) in [("/a.bin", &a), ("/b.bin", &b)] {
        let r = get(&n, p, "");
        assert_eq!((r.status, xcache(&r)), (200, "HIT"), "{p}");
        assert!(r.body == *body, "{p}: the stored bytes differ");
    }
}

/// Entry files changed by hand while a slow client reads them. Removed (as an eviction or a
/// purge removes them): the response goes on, every byte right. Written over in place: the
/// response either gets every byte right (a slice met after the change is opened again,
/// found to be another object's and fetched again) or is cut short, never complete with bytes
/// of two files (the slice being sent when its file changed ends the response with a reset).
#[test]
fn entries_changed_while_sent_never_make_a_wrong_or_needlessly_cut_body() {
    use std::io::Write;
    const MIB: usize = 1 << 20;
    let (o, n) = origin_and_node("slice_size = \"16M\"");
    let (a, b) = (pattern(32 * MIB, 1), pattern(32 * MIB, 2));
    o.put("/a.bin", Object::new(a.clone()));
    o.put("/b.bin", Object::new(b.clone()));
    for p in ["/a.bin", "/b.bin"] {
        assert_eq!(get(&n, p, "").status, 200);
    }
    wait_committed(&n);
    assert_eq!(xcache(&get(&n, "/a.bin", "")), "HIT");
    assert_eq!(xcache(&get(&n, "/b.bin", "")), "HIT");
    // b's slices, copied before they are removed below.
    let b_slices: Vec<Vec<u8>> = (0..2)
        .map(|i| std::fs::read(entry_path(&n.cache, "/b.bin", i)).expect("read"))
        .collect();

    // A client that has read half a MiB of `path`: the node is within the first slice (what
    // it has sent is that and its socket's queue, a few MiB at most). Slices of 16 MiB: what
    // sendfile queued references the file's pages, so bytes queued before a change carry it
    // (the documented limit); the rest of the slice must outlast any queue for the check
    // before the next part to be what meets the change.
    let slow_get = |path: &str| {
        common::http::partly_read(
            n.srv.addr,
            path,
            "Connection: close\r\n",
            Some(16 << 10),
            MIB / 2,
        )
    };
    // Removed (a purge's unlink; an eviction's) while it is sent: the bytes read are the
    // file's, so the response goes on, complete and right.
    let body_of = common::http::rest_of_body;
    let slow = slow_get("/b.bin");
    for slice in 0..2 {
        std::fs::remove_file(entry_path(&n.cache, "/b.bin", slice)).expect("rm");
    }
    assert!(
        body_of(slow) == b,
        "a removed entry's response differs or was cut"
    );
    // Written over without truncating (`dd conv=notrunc`): the size never changes.
    let slow = slow_get("/a.bin");
    for (slice, other) in b_slices.iter().enumerate() {
        std::fs::OpenOptions::new()
            .write(true)
            .open(entry_path(&n.cache, "/a.bin", slice as u32))
            .and_then(|mut f| f.write_all(other))
            .expect("write in place");
    }
    let body = body_of(slow);
    assert!(
        body.len() < a.len() || body == a,
        "a complete body of {} bytes, not a's: first difference at {:?}, last at {:?}\n{}",
        body.len(),
        body.iter().zip(a.iter()).position(|(x, y)| x != y),
        body.iter().zip(a.iter()).rposition(|(x, y)| x != y),
        n.srv.logs()
    );
    // The next read is a's, whole.
    let r = get(&n, "/a.bin", "");
    assert!(r.body == a, "{}", n.srv.logs());
    // Written over with more bytes than it had (`rsync --inplace` of a longer file): an entry
    // never grows (the node never writes one after its commit), so that is a change too, not
    // an append served as the prefix it was.
    wait_committed(&n);
    let slow = slow_get("/a.bin");
    std::fs::OpenOptions::new()
        .write(true)
        .open(entry_path(&n.cache, "/a.bin", 0))
        .and_then(|mut f| {
            f.write_all(&b_slices[0])?;
            f.write_all(&[0u8; 4096])
        })
        .expect("write longer in place");
    let body = body_of(slow);
    assert!(
        body.len() < a.len() || body == a,
        "a complete body of {} bytes from a grown entry, not a's",
        body.len()
    );
    let r = get(&n, "/a.bin", "");
    assert!(r.body == a, "{}", n.srv.logs());
}

/// The temporary directory removed while the node runs (an `rm -rf` of the cache's contents)
/// is made again by the next fill: the volume keeps storing, not a miss forever.
#[test]
fn a_temporary_directory_removed_at_run_time_is_made_again() {
    let (o, n) = origin_and_node(SLICED);
    o.put("/a.bin", Object::new(pattern(1000, 1)));
    assert_eq!(xcache(&get(&n, "/a.bin", "")), "MISS");
    wait_committed(&n);
    std::fs::remove_dir_all(n.cache.join(".tmp")).expect("remove .tmp");
    let body = pattern(3000, 2);
    o.put("/b.bin", Object::new(body.clone()));
    let r = get(&n, "/b.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert!(r.body == body);
    // Once the fill is over (a request joining it before is a HIT from its memory), the
    // object is stored: read from the disk, not asked for again.
    wait_committed(&n);
    assert!(n.cache.join(".tmp").is_dir());
    assert_eq!(
        cache_files(&n.cache),
        (0, 2),
        "never stored: {}",
        n.srv.logs()
    );
    let r = get(&n, "/b.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == body);
    assert_eq!(o.requests("/b.bin"), 1);
}

/// A cache directory replaced by a file at run time: every request still gets its whole
/// answer from the origin; what could not be stored is counted
/// (`contentserver_cache_store_failures_total{reason="error"}`) and logged once a second at
/// most per volume, not once per slice of every request.
#[test]
fn entries_that_cannot_be_stored_are_counted_and_logged_once_a_second() {
    let (o, n) = origin_and_node(SLICED);
    let failed = |n: &Node, reason| {
        volume_metric(
            n,
            "contentserver_cache_store_failures_total",
            &[("reason", reason)],
        )
    };
    assert_eq!((failed(&n, "error"), failed(&n, "disk_full")), (0.0, 0.0));
    std::fs::remove_dir_all(&n.cache).expect("remove the cache directory");
    std::fs::write(&n.cache, b"not a directory").expect("a file in its place");
    let t = Instant::now();
    for i in 0..6 {
        let p = format!("/nf/{i}");
        let body = pattern(3 * SLICE, i as u8);
        o.put(&p, Object::new(body.clone()));
        let r = get(&n, &p, "");
        assert_eq!(r.status, 200, "{p}");
        assert!(r.body == body, "{p} differs");
    }
    settle(&n);
    assert!(failed(&n, "error") >= 6.0, "{}", failed(&n, "error"));
    assert_eq!(failed(&n, "disk_full"), 0.0);
    let lines = n.srv.logs().matches("cannot store cache entry").count() as u64;
    let most = t.elapsed().as_secs() + 1;
    assert!(
        (1..=most).contains(&lines),
        "{lines} lines in {:?}:\n{}",
        t.elapsed(),
        n.srv.logs()
    );
    let _ = std::fs::remove_file(&n.cache);
}

/// The cache directory itself removed while the node runs (`rm -rf DIR`, not `DIR/*`) is made
/// again, with its lock and `.tmp`, by the next fill: the volume keeps storing (it stored
/// nothing more until a restart, every fill failing in the removed directory).
#[test]
fn a_cache_directory_removed_at_run_time_is_made_again() {
    let (o, n) = origin_and_node(SLICED);
    let a = pattern(1000, 1);
    o.put("/a.bin", Object::new(a.clone()));
    assert_eq!(xcache(&get(&n, "/a.bin", "")), "MISS");
    wait_committed(&n);
    std::fs::remove_dir_all(&n.cache).expect("remove the cache directory");
    // Made again within a second or two without a request (so the node is ready again: an
    // unready pod gets no request), its entries forgotten.
    let ready = || admin(&n, "GET", "/readyz", "").status == 200;
    assert!(
        common::wait_until(Duration::from_secs(5), ready),
        "not ready again: {}",
        String::from_utf8_lossy(&admin(&n, "GET", "/readyz", "").body)
    );
    assert!(n.cache.join(".lock").is_file());
    assert!(common::wait_until(
        Duration::from_secs(3),
        || volume_metric(&n, "contentserver_cache_entries", &[]) == 0.0
    ));
    // What it held is fetched again (the open entry's file is gone), and stored again.
    for (path, body) in [("/a.bin", &a), ("/b.bin", &pattern(3000, 2))] {
        o.put(path, Object::new(body.clone()));
        let r = get(&n, path, "");
        assert_eq!((r.status, xcache(&r)), (200, "MISS"), "{path}");
        assert!(r.body == *body);
        wait_committed(&n);
        let r = get(&n, path, "");
        assert_eq!(
            (r.status, xcache(&r)),
            (200, "HIT"),
            "{path}: {}",
            n.srv.logs()
        );
        assert!(r.body == *body);
    }
    assert_eq!(cache_files(&n.cache), (0, 2));
    assert!(n.cache.join(".lock").is_file());
    assert!(n.srv.logs().contains("cache directory was removed"));
    // Ready: the directory in use is the one at its path.
    let r = admin(&n, "GET", "/readyz", "");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // Still this node's: a second one is refused.
    let second = Server::try_start_with_env(&config(&[o.url()], &n.cache, "", SLICED), &[]);
    assert!(
        second.is_err(),
        "a second node started on the remade directory"
    );
    // Its lock file alone removed (an `rm -rf DIR` that could not remove the directory, fills
    // making levels in it meanwhile): made again, and a second node is still refused.
    std::fs::remove_file(n.cache.join(".lock")).expect("remove the lock file");
    assert!(common::wait_until(Duration::from_secs(5), || n
        .cache
        .join(".lock")
        .is_file()));
    let second = Server::try_start_with_env(&config(&[o.url()], &n.cache, "", SLICED), &[]);
    assert!(
        second.is_err(),
        "a second node started without the lock file"
    );
    assert!(n.srv.logs().contains("lock file was removed"));
    let r = get(&n, "/a.bin", "");
    assert_eq!(xcache(&r), "HIT");
}

/// A stored slice whose file shrank while the node kept it open (a disk error, someone's
/// `truncate`), or whose body was written in place under its valid header (the body has no
/// checksum), is noticed at its next use (its size or modification time moved): dropped, and
/// that slice alone fetched again for the response that meets it, never served. (One changed
/// while a response reads it cuts that response.)
#[test]
fn a_stored_slice_that_shrank_or_was_written_in_place_is_dropped_and_fetched_again() {
    use std::os::unix::fs::FileExt;
    type Change = fn(&std::fs::File, u64);
    let changes: [(&str, Change); 2] = [
        ("shrunk", |f, len| f.set_len(len - 100).unwrap()),
        ("written in place", |f, len| {
            f.write_all_at(&[0xAA; 100], len - 100).unwrap()
        }),
    ];
    for (i, (what, change)) in changes.into_iter().enumerate() {
        let (o, n) = origin_and_node(SLICED);
        let body = pattern(3 * SLICE, 9 + i as u8);
        o.put("/changed.bin", Object::new(body.clone()));
        assert!(get(&n, "/changed.bin", "").body == body);
        wait_committed(&n);
        // A hit keeps the slices open.
        let r = get(&n, "/changed.bin", "");
        assert_eq!(xcache(&r), "HIT");
        let slice1: Vec<PathBuf> = walk(&n.cache)
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| p.to_string_lossy().ends_with("-1"))
            .collect();
        assert_eq!(slice1.len(), 1, "{slice1:?}");
        // Past the filesystem's timestamp granularity: the write moves the modification time.
        std::thread::sleep(Duration::from_millis(50));
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&slice1[0])
            .unwrap();
        change(&f, f.metadata().unwrap().len());
        drop(f);
        let asked = o.ranges("/changed.bin").len();
        let r = get(&n, "/changed.bin", "");
        assert_eq!(r.status, 200, "{what}");
        assert!(r.body == body, "{what}: the next answer differs");
        let ranges = o.ranges("/changed.bin");
        assert_eq!(
            ranges[asked..],
            [Some(format!("bytes={}-{}", SLICE, 2 * SLICE - 1))],
            "{what}: only the changed slice is fetched again"
        );
        wait_committed(&n);
        let r = get(&n, "/changed.bin", "");
        assert_eq!(xcache(&r), "HIT", "{what}");
        assert!(r.body == body, "{what}");
    }
}

/// An entry the node does not keep open (after a restart, before its first use) is checked
/// against the size and modification time the index has of its file when it is opened: one
/// written in place since is deleted and fetched again. Its header was still valid, and it was
/// served as a HIT with the changed bytes.
#[test]
fn an_entry_not_kept_open_that_was_written_in_place_is_fetched_again() {
    use std::os::unix::fs::FileExt;
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cfg = config(&[o.url()], &d.path().join("cache"), "", SLICED);
    let body = pattern(3 * SLICE, 21);
    o.put("/kept.bin", Object::new(body.clone()));
    stored_then_stopped(&cfg, &[("/kept.bin", &body)]);
    let n = Node::start(&cfg);
    assert!(n
        .srv
        .wait_log("cache index rebuilt", Duration::from_secs(5)));
    let slice1 = n.cache.join(
        content_server::cache::key::CacheKey::new(b"/kept.bin".to_vec())
            .slice(1)
            .rel_path(),
    );
    // Past the filesystem's timestamp granularity: the write moves the modification time.
    std::thread::sleep(Duration::from_millis(50));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&slice1)
        .expect("slice 1's file");
    let len = f.metadata().expect("stat").len();
    f.write_all_at(&[0xAA; 100], len - 100).expect("write");
    drop(f);
    let asked = o.ranges("/kept.bin").len();
    let r = get(&n, "/kept.bin", "");
    assert_eq!(r.status, 200);
    assert!(r.body == body, "the changed bytes were served");
    assert_eq!(
        o.ranges("/kept.bin")[asked..],
        [Some(format!("bytes={}-{}", SLICE, 2 * SLICE - 1))],
        "only the changed slice is fetched again"
    );
    assert!(n.srv.wait_log("written in place", Duration::from_secs(2)));
    wait_committed(&n);
    let r = get(&n, "/kept.bin", "");
    assert_eq!(xcache(&r), "HIT");
    assert!(r.body == body);
    assert_eq!(volume_metric(&n, "contentserver_cache_entries", &[]), 3.0);
}

/// An answer stale at once (`no-cache`, `max-age=0`) is shared only with the requests that
/// were there before it arrived: a request that comes while its body still streams asks the
/// origin itself (RFC 9111 §4, §5.2.2.4), and once stored every use is revalidated.
#[test]
fn an_answer_stale_at_once_is_not_shared_with_later_requests() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(20_000, 3);
    o.put(
        "/nc.bin",
        Object::new(body.clone()).cache_control("no-cache"),
    );
    o.set_timing(Timing {
        chunk_delay: Duration::from_millis(25),
        chunk_size: 1000,
        ..Timing::default()
    });
    let first = {
        let addr = n.srv.addr;
        std::thread::spawn(move || {
            let r = common::http::request(addr, "GET", "/nc.bin", &[]);
            (r.status, r.header("X-Cache").map(String::from), r.body)
        })
    };
    // The first answer's head is in, its body still streams (about 0.5 s).
    assert!(common::wait_until(Duration::from_secs(5), || o
        .requests("/nc.bin")
        == 1));
    std::thread::sleep(Duration::from_millis(150));
    let r = get(&n, "/nc.bin", "");
    assert!(r.body == body);
    // Asked of the origin and not stored: a miss (it was said BYPASS, as if not cacheable).
    assert_eq!(xcache(&r), "MISS");
    assert_eq!(
        o.requests("/nc.bin"),
        2,
        "the later request shared a stale answer"
    );
    let (status, x, got) = first.join().unwrap();
    assert_eq!((status, x.as_deref()), (200, Some("MISS")));
    assert!(got == body);
    o.set_timing(Timing::default());
    wait_committed(&n);
    let r = get(&n, "/nc.bin", "");
    assert_eq!(xcache(&r), "REVALIDATED");
    assert!(r.body == body);
    assert_eq!(o.requests("/nc.bin"), 3);
}

/// A request that finds an answer stale at once (`no-cache`) committed by the fill it would
/// have joined, between its lookup and its fill, revalidates it like any stale entry
/// (REVALIDATED, a conditional request, `Age`); it asked for the whole object again, with its
/// Accept-Encoding, and said MISS without `Age` (tester).
#[cfg(feature = "failpoints")]
#[test]
fn an_answer_stale_at_once_committed_under_a_request_is_revalidated() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cfg = config(&[o.url()], &d.path().join("cache"), "", SLICED);
    let old = pattern(1000, 1);
    o.put("/old.bin", Object::new(old.clone()));
    stored_then_stopped(&cfg, &[("/old.bin", &old)]);
    // While the index is rebuilt (16 x 300 ms) a lookup of an unknown entry opens its path on
    // the pool, which then waits 800 ms: the first request's fill commits meanwhile under the
    // second request's lookup.
    let n = Node::start_with_env(
        &cfg,
        &[(
            "FAILPOINTS",
            "cache_rebuild_level=sleep(300);cache_opened=sleep(800)",
        )],
    );
    let body = pattern(20_000, 3);
    o.put(
        "/nc.bin",
        Object::new(body.clone()).cache_control("no-cache"),
    );
    std::thread::scope(|scope| {
        let first = scope.spawn(|| get(&n, "/nc.bin", ""));
        std::thread::sleep(Duration::from_millis(300));
        let r = get(&n, "/nc.bin", "Accept-Encoding: gzip\r\n");
        assert!(r.body == body);
        assert_eq!(xcache(&r), "REVALIDATED", "{:?}", r.headers);
        assert_eq!(r.header("Age"), Some("0"));
        let r = first.join().expect("the first request");
        assert_eq!(xcache(&r), "MISS");
        assert!(r.body == body);
    });
    assert!(
        !n.srv.logs().contains("cache index rebuilt"),
        "the rebuild ended too soon for this test"
    );
    let seen: Vec<_> = o
        .seen()
        .into_iter()
        .filter(|s| s.path == "/nc.bin")
        .collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[1].header("if-none-match"), Some("\"v1\""));
}

/// An entry removed while it is revalidated (here by hand; a purge that came before the
/// revalidation started, an eviction, or a newer copy renamed over it do the same) is not
/// brought back by the 304: the revalidation copied the old file's body into a new entry at its
/// path, and the next requests were HITs of what was removed.
#[test]
fn an_entry_removed_while_it_is_revalidated_is_not_stored_again() {
    let (o, n) = origin_and_node("slice_size = 0");
    let body = pattern(50_000, 7);
    o.put(
        "/rv.bin",
        Object::new(body.clone()).cache_control("max-age=1, must-revalidate"),
    );
    assert_eq!(xcache(&get(&n, "/rv.bin", "")), "MISS");
    wait_committed(&n);
    assert_eq!(cache_files(&n.cache).1, 1);
    std::thread::sleep(Duration::from_millis(2100));
    // The 304 takes 600 ms; the entry's file goes meanwhile.
    o.set_timing(Timing {
        head_delay: Duration::from_millis(600),
        ..Timing::default()
    });
    std::thread::scope(|scope| {
        let revalidating = scope.spawn(|| get(&n, "/rv.bin", ""));
        assert!(common::wait_until(Duration::from_secs(5), || o
            .requests("/rv.bin")
            == 2));
        for (p, _) in common::cache::walk(&n.cache) {
            std::fs::remove_file(&p).expect("remove the entry");
        }
        let r = revalidating.join().expect("the revalidating request");
        assert_eq!(xcache(&r), "REVALIDATED");
        assert!(r.body == body, "the waiter gets the body it was promised");
    });
    o.set_timing(Timing::default());
    wait_committed(&n);
    assert_eq!(
        cache_files(&n.cache),
        (0, 0),
        "the removed entry was stored again"
    );
    let r = get(&n, "/rv.bin", "");
    assert_eq!(xcache(&r), "MISS", "a removed entry was served");
    assert!(r.body == body);
    assert_eq!(o.requests("/rv.bin"), 3);
}

/// Requests that joined a fill the origin answers with a server error get that status, without
/// an origin request each: they each asked for the whole object at once, a storm on an origin
/// that had just said it was failing (tester). The next request asks again.
#[test]
fn requests_joined_to_a_fill_answered_5xx_do_not_each_ask_the_origin() {
    let (o, n) = origin_and_node(SLICED);
    o.put("/down.bin", Object::new(pattern(3 * SLICE, 5)).status(503));
    o.set_timing(Timing {
        head_delay: Duration::from_millis(500),
        ..Timing::default()
    });
    let addr = n.srv.addr;
    let clients: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                let r = common::http::request(addr, "GET", "/down.bin", &[]);
                (r.status, r.header("X-Cache").map(str::to_string))
            })
        })
        .collect();
    for c in clients {
        let (status, x) = c.join().expect("a client");
        assert_eq!((status, x.as_deref()), (503, Some("BYPASS")));
    }
    assert_eq!(
        o.requests("/down.bin"),
        1,
        "the joined requests asked the origin too"
    );
    o.set_timing(Timing::default());
    let body = pattern(3 * SLICE, 6);
    o.put("/down.bin", Object::new(body.clone()));
    let r = get(&n, "/down.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert!(r.body == body);
}

/// A Range header the answer ignores (malformed: last before first; or ranges turned off) is
/// a request for the whole object, also on a miss whose range would start past the end: the
/// same 200 a stored object gets, never the origin's 416 to a slice that does not exist.
#[test]
fn an_ignored_range_past_the_end_is_the_whole_object_on_a_miss() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(100, 6);
    o.put("/small.bin", Object::new(body.clone()));
    let bad = format!("Range: bytes={}-1\r\n", 40 * SLICE);
    let r = get(&n, "/small.bin", &bad);
    assert_eq!((r.status, xcache(&r)), (200, "MISS"), "{:?}", r.headers);
    assert!(r.body == body);
    let r = get(&n, "/small.bin", &bad);
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));

    let d = common::tempdir();
    let mut cfg = config(&[o.url()], &d.path().join("cache"), "", SLICED);
    cfg.http.max_ranges = 0;
    let n = Node::start(&cfg);
    let r = get(
        &n,
        "/small.bin",
        &format!("Range: bytes={}-\r\n", 40 * SLICE),
    );
    assert_eq!((r.status, xcache(&r)), (200, "MISS"), "{:?}", r.headers);
    assert_eq!(r.header("Accept-Ranges"), Some("none"));
    assert!(r.body == body);
}

/// A passed-through answer (not storable) honours the same Range rules: with ranges off, or a
/// malformed Range, the origin is asked for the whole object and the client gets a 200, never
/// the origin's 206 or 416 (the Range is not forwarded).
#[test]
fn a_passed_through_answer_ignores_the_range_the_node_ignores() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let mut cfg = config(&[o.url()], &d.path().join("cache"), "", SLICED);
    cfg.http.max_ranges = 0;
    let n = Node::start(&cfg);
    let body = pattern(100_000, 7);
    o.put(
        "/priv.bin",
        Object::new(body.clone()).cache_control("private"),
    );
    for range in ["bytes=0-9", "bytes=200000-"] {
        let r = get(&n, "/priv.bin", &format!("Range: {range}\r\n"));
        assert_eq!((r.status, xcache(&r)), (200, "BYPASS"), "{range}");
        assert!(r.body == body, "{range}");
    }
    let (o, n) = origin_and_node(SLICED);
    o.put(
        "/priv.bin",
        Object::new(body.clone()).cache_control("private"),
    );
    let r = get(&n, "/priv.bin", "Range: bytes=abc-def\r\n");
    assert_eq!((r.status, xcache(&r)), (200, "BYPASS"));
    assert!(r.body == body);
    assert!(o
        .seen()
        .iter()
        .all(|s| s.header("Range") != Some("bytes=abc-def")));
    // One the node honours goes written plainly (a trailing empty element some servers refuse
    // is left out).
    let r = get(&n, "/priv.bin", "Range: bytes=0-9,\r\n");
    assert_eq!((r.status, xcache(&r)), (206, "BYPASS"));
    assert!(r.body == body[..10]);
    assert!(o
        .seen()
        .iter()
        .any(|s| s.header("Range") == Some("bytes=0-9")));
}

/// A range past the object's end with an If-Range that does not match is the whole object
/// (RFC 9110 §13.1.5), also when nothing of it is stored yet; a matching one is a 416.
#[test]
fn a_failed_if_range_past_the_end_is_the_whole_object_on_a_miss() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(3 * SLICE, 5);
    o.put("/ir.bin", Object::new(body.clone()));
    let past = format!("Range: bytes={}-\r\n", 5 * SLICE);
    let r = get(&n, "/ir.bin", &format!("{past}If-Range: \"old\"\r\n"));
    assert_eq!(r.status, 200, "{:?}", r.headers);
    assert!(r.body == body);
    o.put("/ir2.bin", Object::new(body.clone()));
    let r = get(&n, "/ir2.bin", &format!("{past}If-Range: \"v1\"\r\n"));
    assert_eq!(r.status, 416);
    assert_eq!(
        r.header("Content-Range"),
        Some(format!("bytes */{}", 3 * SLICE).as_str())
    );
}

/// An empty object at an origin that answers 416 to any range (S3 and others do) costs one
/// origin request per request after the first, not two, also when the 416 has no
/// `Content-Range: bytes */0` (moto's S3 sends none); a client's suffix range on it gets what
/// the origin answers that range (RFC 9110 §14.1.1: satisfiable; here 200 and no bytes), not
/// a 416 of the node's.
#[test]
fn an_empty_object_is_asked_for_once_per_request() {
    let (o, n) = origin_and_node(SLICED);
    o.put("/empty.bin", Object::new(Vec::new()));
    o.put("/s3-empty.bin", Object::new(Vec::new()));
    o.fault_times(
        "/s3-empty.bin",
        Fault::Raw(b"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Length: 0\r\n\r\n".to_vec()),
        1,
    );
    for path in ["/empty.bin", "/s3-empty.bin"] {
        for i in 0..3 {
            let before = o.requests(path);
            let r = get(&n, path, "");
            assert_eq!((r.status, r.body.len()), (200, 0), "{path}: request {i}");
            let asked = o.requests(path) - before;
            assert_eq!(asked, if i == 0 { 2 } else { 1 }, "{path}: request {i}");
        }
    }
    o.put("/suffix.bin", Object::new(Vec::new()));
    o.fault_times(
        "/suffix.bin",
        Fault::Raw(b"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Length: 0\r\n\r\n".to_vec()),
        1,
    );
    let r = get(&n, "/suffix.bin", "Range: bytes=-5\r\n");
    assert_eq!((r.status, r.body.len()), (200, 0), "{:?}", r.headers);
    assert_eq!(
        o.ranges("/suffix.bin"),
        vec![
            Some("bytes=0-65535".to_string()),
            Some("bytes=-5".to_string())
        ]
    );
}

/// A whole object too large to hold in memory (over 16 MiB) that is not admitted yet (here
/// `min_uses = 2`) is streamed through as a MISS and not marked as uncacheable: the next
/// request stores it and the one after is a HIT (it used to be BYPASS for a minute, one whole
/// origin fetch each).
#[test]
fn a_large_object_not_admitted_yet_is_stored_when_asked_again() {
    let (o, n) = origin_and_node("slice_size = 0\nmin_uses = 2");
    let body = pattern(17 << 20, 5);
    o.put("/big.bin", Object::new(body.clone()));
    for (i, want) in ["MISS", "MISS", "HIT"].into_iter().enumerate() {
        let r = get(&n, "/big.bin", "");
        assert_eq!((r.status, xcache(&r)), (200, want), "request {i}");
        assert!(r.body == body, "request {i}");
        wait_committed(&n);
    }
    assert_eq!(o.requests("/big.bin"), 2);
}

/// `min_uses = 2` against a scan of 3,000 objects each asked for once (three times the
/// admission sketch's 1,024 columns, as sized for a `max_size` of 64 MiB): none is stored;
/// those asked for again are. The scan raised the
/// sketch's shared counters, and objects asked for once were stored (61% in a tester's run).
#[test]
fn min_uses_2_stores_no_object_of_a_scan_asked_for_once() {
    let (_o, n) = origin_and_node("slice_size = 0\nmin_uses = 2\nmax_size = \"64M\"");
    let entries = |n: &Node| volume_metric(n, "contentserver_cache_entries", &[]);
    let mut c = common::Conn::new(n.srv.addr);
    // (Paths the origin does not have: 404s, storable for 60 s by the default rules.)
    for i in 0..3000 {
        let r = c.get(&format!("/scan/{i}"));
        assert_eq!((r.status, xcache(&r)), (404, "MISS"), "/scan/{i}");
    }
    wait_committed(&n);
    let stored = entries(&n);
    assert!(
        stored <= 30.0,
        "{stored} of 3000 objects asked for once stored"
    );
    for i in 0..50 {
        assert_eq!(c.get(&format!("/scan/{i}")).status, 404);
    }
    wait_committed(&n);
    assert!(
        entries(&n) >= stored + 50.0 - 2.0,
        "{} entries",
        entries(&n)
    );
}

/// An origin that refuses the first slice's range without a length (416, no Content-Range)
/// does not make a request without a range answer 416: the node asks for the object whole.
#[test]
fn a_416_without_a_length_to_the_first_slice_is_not_given_to_a_request_without_a_range() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(1000, 7);
    o.put("/odd.bin", Object::new(body.clone()));
    o.fault_times(
        "/odd.bin",
        Fault::Raw(b"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Length: 0\r\n\r\n".to_vec()),
        1,
    );
    let r = get(&n, "/odd.bin", "");
    assert_eq!(r.status, 200, "{:?}", r.headers);
    assert_eq!(r.body, body);
    assert_eq!(
        o.ranges("/odd.bin"),
        vec![Some("bytes=0-65535".to_string()), None]
    );
}

/// A cache directory the node cannot write in stops it at start, naming what it tried (it
/// would otherwise run "ready" and store nothing; the lock file is the first thing it writes,
/// before the write probe in `.tmp`): here a read-only filesystem, mounted in a
/// mount namespace of the server's own (a user namespace too when not root).
#[test]
fn a_cache_directory_the_node_cannot_write_in_stops_it_at_start() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cache = d.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let cfg = config(&[o.url()], &cache, "", SLICED);
    let path = d.path().join("config.toml");
    std::fs::write(&path, cfg.to_toml().expect("render the config")).unwrap();
    let script = r#"mount -t tmpfs tmpfs "$1" && mkdir "$1/.tmp" && mount -o remount,ro "$1" && shift && exec "$@""#;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut wrapper = vec!["unshare"];
    if !root {
        wrapper.extend(["--user", "--map-root-user"]);
    }
    wrapper.extend(["--mount", "sh", "-c", script, "sh", cache.to_str().unwrap()]);
    let args = ["serve", "--config", path.to_str().unwrap()];
    match Server::try_spawn_wrapped(&wrapper, &args, &[]) {
        Ok(_) => panic!("the node started on a read-only cache directory"),
        Err(log) => assert!(
            log.contains(&format!("cannot open the lock file {}/.lock", cache.display()))
                && log.contains("Read-only file system"),
            "expected the lock file (the first file the node makes there) to name the path (this test needs root or unprivileged \
             user namespaces for its read-only mount):\n{log}"
        ),
    }
}

/// A fill whose task panics is ended all the same: its waiter gets a 500 at once (not a wait
/// until its timeout), the fills gauge comes back to 0, and the next request fills anew.
#[cfg(feature = "failpoints")]
#[test]
fn a_fill_whose_task_panics_is_ended_and_the_next_request_fills_anew() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cfg = config(&[o.url()], &d.path().join("cache"), "", "");
    let a = pattern(100_000, 3);
    o.put("/a.bin", Object::new(a.clone()));
    let n = Node::start_with_env(&cfg, &[("FAILPOINTS", "cache_fill=1*panic(test)")]);
    let first = common::cache::get_within(&n, "/a.bin", Duration::from_secs(5));
    assert_eq!(first, Some(Ok(500)), "{}", n.srv.logs());
    assert!(n.srv.wait_log("fill abandoned", Duration::from_secs(5)));
    assert_eq!(
        volume_metric(&n, "contentserver_cache_fills_in_flight", &[]),
        0.0
    );
    let r = get(&n, "/a.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"), "{}", n.srv.logs());
    assert!(r.body == a);
}

/// The origin's own `X-Cache` (a cache in front of it) is never passed on: a passed-through
/// answer and a stored one carry this node's only.
#[test]
fn the_origins_x_cache_is_not_passed_on() {
    let (o, n) = origin_and_node("");
    let upstream = |o: Object| o.header("X-Cache", "HIT from upstream");
    o.put(
        "/p.bin",
        upstream(Object::new(pattern(500, 1)).cache_control("no-store")),
    );
    o.put("/s.bin", upstream(Object::new(pattern(500, 2))));
    for (path, want) in [("/p.bin", "BYPASS"), ("/s.bin", "MISS"), ("/s.bin", "HIT")] {
        let r = get(&n, path, "");
        let all: Vec<&str> = (r.headers.iter())
            .filter(|(k, _)| k.eq_ignore_ascii_case("x-cache"))
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(all, [want], "{path}");
    }
}

/// A request that finds an entry's file removed from outside forgets the entry, but not one
/// committed under the same id while its open ran: that entry stays in the index (counted,
/// evictable), not only in the open table.
#[cfg(feature = "failpoints")]
#[test]
fn a_missing_file_found_late_does_not_forget_the_entry_committed_meanwhile() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cfg = config(&[o.url()], &d.path().join("cache"), "", "");
    let a = pattern(100_000, 4);
    o.put("/a.bin", Object::new(a.clone()));
    stored_then_stopped(&cfg, &[("/a.bin", &a)]);
    let n = Node::start_with_env(&cfg, &[("FAILPOINTS", "cache_opened=1*sleep(1500)")]);
    assert!(n
        .srv
        .wait_log("cache index rebuilt", Duration::from_secs(5)));
    for (p, _) in common::cache::walk(&n.cache) {
        if !p.starts_with(n.cache.join(".tmp")) {
            std::fs::remove_file(&p).unwrap();
        }
    }
    // The first request's open finds the file missing, and is held on the pool.
    let late = {
        let addr = n.srv.addr;
        std::thread::spawn(move || {
            let mut c = common::Conn::new(addr);
            c.send(b"GET /a.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
            c.response(false)
                .map(|r| r.status)
                .map_err(|e| e.to_string())
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    // The second finds it missing at once, fetches it and commits a new entry.
    let r = get(&n, "/a.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    settle(&n);
    assert_eq!(volume_metric(&n, "contentserver_cache_entries", &[]), 1.0);
    assert_eq!(late.join().unwrap(), Ok(200));
    assert_eq!(
        volume_metric(&n, "contentserver_cache_entries", &[]),
        1.0,
        "the entry committed meanwhile was forgotten"
    );
    let r = get(&n, "/a.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
}

/// A full read of an object that is not admitted (stored nowhere: `min_uses`) still costs one
/// origin request per slice when the client reads slowly: the slice prefetched while the
/// previous one goes out keeps its bytes for the response, which used to find it ended and
/// fetch it again (a quarter to half more origin requests, tester).
#[test]
fn a_slow_full_read_of_an_object_not_admitted_fetches_each_slice_once() {
    let (o, n) = origin_and_node(&format!("{SLICED}\nmin_uses = 3"));
    // Larger than the socket buffers can take (4 MiB of send buffer at most, by default), so
    // the node waits on the client mid-object.
    let body = pattern(128 * SLICE, 8);
    o.put("/na.bin", Object::new(body.clone()));
    let begun = common::http::partly_read(
        n.srv.addr,
        "/na.bin",
        "Connection: close\r\n",
        Some(65536),
        1000,
    );
    std::thread::sleep(Duration::from_millis(800));
    let got = common::http::rest_of_body(begun);
    assert!(got == body, "{} bytes of {}", got.len(), body.len());
    settle(&n);
    assert_eq!(o.requests("/na.bin"), 128, "one origin request per slice");
    assert_eq!(cache_files(&n.cache).1, 0, "nothing stored");
}

/// A miss that waited for the origin while draining began says `Connection: close` (it then
/// closes): a client reusing the connection would race the close.
#[test]
fn an_answer_made_after_draining_began_says_close() {
    let (o, n) = origin_and_node("");
    let body = pattern(5000, 9);
    o.put("/w.bin", Object::new(body.clone()));
    o.put(
        "/p.bin",
        Object::new(body.clone()).cache_control("no-store"),
    );
    o.set_timing(Timing {
        head_delay: Duration::from_millis(800),
        ..Timing::default()
    });
    let asks: Vec<_> = ["/w.bin", "/p.bin"]
        .into_iter()
        .map(|path| {
            let addr = n.srv.addr;
            std::thread::spawn(move || {
                let mut c = common::Conn::new(addr);
                c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
                c.response(false).expect("an answer")
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    n.srv.signal(common::SIGTERM);
    for (ask, want) in asks.into_iter().zip(["MISS", "BYPASS"]) {
        let r = ask.join().unwrap();
        assert_eq!((r.status, xcache(&r)), (200, want));
        assert!(r.body == body);
        assert_eq!(r.header("Connection"), Some("close"), "{want}");
    }
}

/// A prefetched slice the origin fails (a 503 once) does not cut the download: the response
/// asks for the slice again when it gets there, and the client gets the whole object.
#[test]
fn a_failed_prefetch_is_asked_for_again_not_a_cut() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(4 * SLICE, 12);
    o.put("/pf.bin", Object::new(body.clone()));
    o.fault_after("/pf.bin", Fault::Status(503), 1);
    let r = get(&n, "/pf.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert!(r.body == body, "{} bytes of {}", r.body.len(), body.len());
}
