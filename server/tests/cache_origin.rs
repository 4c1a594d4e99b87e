//! The whole caching node (the real binary) against misbehaving and real origins: every origin
//! fault gives the client a clean error or stale content — never a cached truncation — and the
//! next request retries; failover between origin servers; an HTTPS origin with a test CA (SNI
//! and Host overrides); the origin connection cap; Debian's nginx as a real origin (slices are
//! Range requests, revalidation with its ETags, a new version of a file); several ranges of a
//! cached object answered exactly like our static server answers them; an origin answering per
//! `Authorization` never has one user's answer served to another (RFC 9111 §3.5); slices are
//! combined only under a strong validator, so an origin without one never has two versions of
//! the same size served in one body (RFC 9111 §3.4).

mod common;

use common::cache::{
    cache_files, config, get, metric, metrics, node, origin_and_node, series, settle, try_get,
    volume_metric, wait_committed, xcache, Node, SLICE, SLICED,
};
use common::origin::{pattern, refused_url, Fault, FaultOrigin, Object, TestCa, Timing};
use common::{Response, Server};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What a client got for a request that met an origin fault: a clean error status, or a body
/// cut short (never a complete response with wrong bytes).
fn assert_clean_failure(what: &str, r: std::io::Result<Response>) {
    match r {
        Ok(r) => assert!(
            r.status >= 500,
            "{what}: status {} looked like a success (X-Cache {})",
            r.status,
            xcache(&r)
        ),
        Err(e) => {
            // Cut short: fewer bytes than its Content-Length, then the connection closed.
            let msg = e.to_string();
            assert!(msg.contains("body ended after"), "{what}: {msg}");
        }
    }
}

/// Each fault on the first answer for an object: a clean error, nothing stored, and the next
/// request fetches again and is served whole, then from the cache. (A body that breaks off
/// after its head is resumed instead: [`breaks_off_then_resumed`].)
fn faults_then_retry(slice_size: usize) {
    let (o, n) = origin_and_node(&format!("slice_size = {slice_size}"));
    let body = pattern(200_000, 1);
    let mut faults = vec![
        Fault::Hang,
        Fault::CloseBeforeHead,
        // Longer than the body: the rest asked for lies past the object's end.
        Fault::ContentLength(250_000),
        Fault::Status(500),
        Fault::Status(503),
    ];
    // A head far over the origin client's 64 KiB read buffer (README: refused as a fault).
    let mut raw = format!(
        "HTTP/1.1 200 OK\r\nX-Big: {}\r\nContent-Length: 200000\r\n\r\n",
        "a".repeat(300_000)
    )
    .into_bytes();
    raw.extend_from_slice(&body);
    faults.push(Fault::Raw(raw));
    if slice_size > 0 {
        // Shorter than the object: wrong only against the slice's Content-Range.
        faults.push(Fault::ContentLength(50_000));
        // A 206 for another span than the slice asked for (shorter, longer).
        faults.push(Fault::RangeBytes(1000));
        faults.push(Fault::RangeBytes(slice_size as u64 + 5000));
        // Two Content-Range lines that disagree (RFC 9110 §5.3), the first one right: which
        // one is meant would be a guess, as with two Content-Lengths.
        let mut raw = format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-{}/200000\r\n\
             Content-Range: bytes 0-2/3\r\nContent-Length: {slice_size}\r\nETag: \"v1\"\r\n\
             Last-Modified: Wed, 01 Jan 2025 00:00:01 GMT\r\n\r\n",
            slice_size - 1
        )
        .into_bytes();
        raw.extend_from_slice(&body[..slice_size]);
        faults.push(Fault::Raw(raw));
    }
    for (i, fault) in faults.iter().cloned().enumerate() {
        let p = format!("/f{i}.bin");
        o.put(&p, Object::new(body.clone()));
        // A reused connection closed without an answer is retried once on a new one: the
        // fault meets the retry too.
        let times = if fault == Fault::CloseBeforeHead {
            2
        } else {
            1
        };
        o.fault_times(&p, fault.clone(), times);
        let what: String = format!("slice_size {slice_size}, {fault:?}")
            .chars()
            .take(160)
            .collect();
        let t = Instant::now();
        let r = try_get(&n, &p, "");
        o.clear_fault(&p);
        if fault == Fault::Hang {
            // read_timeout_ms = 1000: a gateway timeout, not a hung client.
            let r = r.as_ref().expect("an answer");
            assert_eq!(r.status, 504, "{what}");
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "{what}: {:?}",
                t.elapsed()
            );
        }
        assert_clean_failure(&what, r);
        let requests = o.requests(&p);
        let r = get(&n, &p, "");
        assert_eq!((r.status, xcache(&r)), (200, "MISS"), "{what}: the retry");
        assert!(r.body == body, "{what}: the retried body differs");
        assert!(
            o.requests(&p) > requests,
            "{what}: the retry asked the origin"
        );
        wait_committed(&n);
        let before = o.requests(&p);
        let r = get(&n, &p, "");
        assert_eq!((r.status, xcache(&r)), (200, "HIT"), "{what}");
        assert!(r.body == body, "{what}: the hit differs");
        assert_eq!(
            o.requests(&p),
            before,
            "{what}: a hit asks the origin nothing"
        );
    }
    // Every object ended up stored (at least one entry file each), and the failed fills'
    // temporary files were removed.
    assert!(
        cache_files(&n.cache).1 >= faults.len(),
        "{}",
        cache_files(&n.cache).1
    );
    assert_eq!(cache_files(&n.cache).0, 0, "temporary files left behind");
}

#[test]
fn origin_faults_on_whole_objects_are_clean_errors_and_retried() {
    faults_then_retry(0);
}

/// The origin's body breaks off after its head (a stall past the read timeout, a reset, a
/// truncation): the fill asks for the rest with a Range request, takes it only as the same
/// version, and the client gets the whole object, then a hit. When every try breaks off, or
/// nothing ties a rest to the first part (no ETag, no Last-Modified), the client's response is
/// cut (never completed wrong), nothing is stored and the next request fetches again.
fn breaks_off_then_resumed(slice_size: usize) {
    let (o, n) = origin_and_node(&format!("slice_size = {slice_size}"));
    let body = pattern(200_000, 1);
    let slice = if slice_size == 0 {
        body.len()
    } else {
        slice_size
    };
    // The resume of a break at byte 10,000 of slice k: the rest of that slice.
    let resumed = |ranges: &[Option<String>]| {
        (0..body.len().div_ceil(slice)).any(|k| {
            let (a, z) = (k * slice + 10_000, ((k + 1) * slice).min(body.len()) - 1);
            ranges.contains(&Some(format!("bytes={a}-{z}")))
        })
    };
    let faults = [
        Fault::StallAfter(10_000),
        Fault::ResetAfter(10_000),
        Fault::TruncateAfter(10_000),
    ];
    for (i, fault) in faults.iter().cloned().enumerate() {
        let what = format!("slice_size {slice_size}, {fault:?}");
        let p = format!("/once{i}.bin");
        o.put(&p, Object::new(body.clone()));
        o.fault_times(&p, fault.clone(), 1);
        let r = get(&n, &p, "");
        assert_eq!((r.status, xcache(&r)), (200, "MISS"), "{what}");
        assert!(r.body == body, "{what}: the resumed body differs");
        assert!(resumed(&o.ranges(&p)), "{what}: {:?}", o.ranges(&p));
        wait_committed(&n);
        let before = o.requests(&p);
        let r = get(&n, &p, "");
        assert_eq!((r.status, xcache(&r)), (200, "HIT"), "{what}: stored whole");
        assert!(r.body == body, "{what}: the hit differs");
        assert_eq!(
            o.requests(&p),
            before,
            "{what}: a hit asks the origin nothing"
        );

        // Every answer breaks off: the first and both resumes.
        let p = format!("/always{i}.bin");
        o.put(&p, Object::new(body.clone()));
        o.fault(&p, fault.clone());
        assert_clean_failure(&format!("{what}, every try"), try_get(&n, &p, ""));
        assert!(o.requests(&p) >= 3, "{what}: {:?}", o.ranges(&p));
        wait_committed(&n);
        o.clear_fault(&p);
        let r = get(&n, &p, "");
        assert_eq!(r.status, 200, "{what}: the retry");
        assert!(r.body == body, "{what}: the retried body differs");

        // No validator: the rest could be another version, so it is not asked for. (On a
        // sliced route such an object is not stored as slices at all: the request gets it
        // whole, passed through, from a request of its own after the broken slice answer.)
        let p = format!("/plain{i}.bin");
        o.put(&p, Object::new(body.clone()).no_validators());
        o.fault_times(&p, fault.clone(), 1);
        let r = try_get(&n, &p, "");
        if slice_size == 0 {
            assert_clean_failure(&format!("{what}, no validator"), r);
        } else {
            let r = r.expect("the object passed through");
            assert_eq!(
                (r.status, xcache(&r)),
                (200, "BYPASS"),
                "{what}, no validator"
            );
            assert!(r.body == body, "{what}, no validator: the body differs");
        }
        assert!(!resumed(&o.ranges(&p)), "{what}: {:?}", o.ranges(&p));
        let r = get(&n, &p, "");
        assert_eq!(r.status, 200, "{what}: the retry");
        assert!(r.body == body, "{what}: the retried body differs");
    }
    // The object changes at the origin while the body stalls: the rest is the new version, so
    // it is not taken (never two versions in one body); the new version is served whole next
    // (a slice of the old one prefetched meanwhile may cut one more response while it goes).
    let v2 = pattern(150_000, 9);
    o.put("/changes.bin", Object::new(body.clone()));
    o.fault_times("/changes.bin", Fault::StallAfter(10_000), 1);
    let node_addr = n.srv.addr;
    let client = std::thread::spawn(move || {
        let mut c = common::Conn::new(node_addr);
        c.send(b"GET /changes.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        c.response(false)
    });
    // Once the origin has the request, well within the stall (read_timeout_ms = 1000).
    let asked = Instant::now();
    while o.requests("/changes.bin") == 0 && asked.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));
    o.put("/changes.bin", Object::version(v2.clone(), 2));
    assert_clean_failure(
        "the version changed mid-body",
        client.join().expect("client"),
    );
    let whole = (0..3).any(|_| {
        wait_committed(&n);
        matches!(try_get(&n, "/changes.bin", ""), Ok(r) if r.status == 200 && r.body == v2)
    });
    assert!(whole, "the new version was not served whole");

    let resumes = volume_metric(&n, "contentserver_cache_fill_resumes_total", &[]);
    assert!(resumes >= 9.0, "once 1 + every try 2, per fault: {resumes}");
    // Every fill ended and none left its temporary file.
    wait_committed(&n);
}

/// Slices of an object are served together only under a strong validator (RFC 9111 §3.4): a
/// strong ETag, or a Last-Modified at least a second older than the answer's Date. An object of
/// several slices without one is passed through whole every time (two versions of the same size
/// could otherwise mix in one body); one that fits in a slice needs no combining and is stored.
#[test]
fn slices_are_combined_only_under_a_strong_validator() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(3 * SLICE + 1000, 5);

    // What combining without a strong validator would do: the first slice asked for (and, if
    // sliced, stored) under version 1, the object then replaced by version 2 of the same size,
    // and the whole object asked for. Each answer is one whole version.
    let p = "/changing.bin";
    o.put(p, Object::new(body.clone()).no_validators());
    let r = get(&n, p, "Range: bytes=0-99\r\n");
    assert!(r.body.starts_with(&body[..100]) && r.body.len() <= body.len());
    wait_committed(&n);
    let v2 = pattern(body.len(), 6);
    o.put(p, Object::new(v2.clone()).no_validators());
    let r = get(&n, p, "");
    assert_eq!(r.status, 200);
    assert!(
        r.body[..SLICE] != body[..SLICE],
        "version 1's first slice with version 2's rest"
    );
    assert!(r.body == v2, "version 2 whole");
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs() as i64
    };
    let date = |secs: i64| content_server::http::date::format(secs);
    let lm = date(now() - 3600);
    let weak_etag = || Object::new(body.clone()).no_validators();
    let cases: Vec<(&str, Object, bool)> = vec![
        ("none", Object::new(body.clone()).no_validators(), false),
        (
            "weak-etag",
            {
                let mut ob = weak_etag();
                ob.etag = Some("W/\"w1\"".into());
                ob
            },
            false,
        ),
        (
            "lm-no-date",
            {
                let mut ob = weak_etag();
                ob.last_modified = Some(lm.clone());
                ob
            },
            false,
        ),
        (
            "lm-same-second",
            {
                let mut ob = weak_etag();
                let t = now();
                ob.last_modified = Some(date(t));
                ob.header("Date", &date(t))
            },
            false,
        ),
        ("strong-etag", Object::new(body.clone()), true),
        (
            "lm-older-than-date",
            {
                let mut ob = weak_etag();
                ob.last_modified = Some(lm.clone());
                ob.header("Date", &date(now()))
            },
            true,
        ),
        (
            "weak-etag-and-old-lm",
            {
                let mut ob = weak_etag();
                ob.etag = Some("W/\"w1\"".into());
                ob.last_modified = Some(lm.clone());
                ob.header("Date", &date(now()))
            },
            true,
        ),
    ];
    for (name, obj, sliced) in cases {
        let p = format!("/{name}.bin");
        o.put(&p, obj);
        for round in 0..2 {
            let r = get(&n, &p, "");
            let want = match (sliced, round) {
                (false, _) => "BYPASS",
                (true, 0) => "MISS",
                (true, _) => "HIT",
            };
            assert_eq!(
                (r.status, xcache(&r)),
                (200, want),
                "{name}, request {round}"
            );
            assert!(r.body == body, "{name}, request {round}: the body differs");
            wait_committed(&n);
        }
        let ranges = o.ranges(&p);
        if sliced {
            // One Range request per slice, all from the first request.
            assert_eq!(ranges.len(), 4, "{name}: {ranges:?}");
            assert!(ranges.iter().all(Option::is_some), "{name}: {ranges:?}");
        } else {
            // The first request: the first slice's answer (which shows no strong validator),
            // then the object itself; the second (the object is marked to pass): the object.
            assert_eq!(ranges.len(), 3, "{name}: {ranges:?}");
            assert!(ranges[0].is_some(), "{name}: {ranges:?}");
            assert_eq!(
                ranges.iter().filter(|r| r.is_none()).count(),
                2,
                "{name}: {ranges:?}"
            );
        }
        // A range across two slices: from the stored slices, or passed through (the client's
        // Range and If-Range go to the origin as they are), a 206 of its bytes.
        let range = format!("bytes={}-{}", SLICE - 10, SLICE + 9);
        // (If-Range names no validator of the stored ones: it goes to the passed-through only.)
        let if_range = if sliced { "" } else { "If-Range: \"v1\"\r\n" };
        let r = get(&n, &p, &format!("Range: {range}\r\n{if_range}"));
        assert_eq!(r.status, 206, "{name}: a range");
        assert!(
            r.body == body[SLICE - 10..SLICE + 10],
            "{name}: the range's bytes"
        );
        if !sliced {
            assert_eq!(xcache(&r), "BYPASS", "{name}: a range");
            let last = o.seen().into_iter().rfind(|q| q.path == p).expect("asked");
            assert_eq!(last.header("range"), Some(range.as_str()), "{name}");
            assert_eq!(last.header("if-range"), Some("\"v1\""), "{name}");
            // Several ranges are not forwarded (the origin's multipart answer would not pass
            // through as one range): the whole object.
            let r = get(&n, &p, "Range: bytes=0-9, 100-109\r\n");
            assert_eq!(
                (r.status, xcache(&r)),
                (200, "BYPASS"),
                "{name}: two ranges"
            );
            assert!(r.body == body, "{name}: two ranges");
            let last = o.seen().into_iter().rfind(|q| q.path == p).expect("asked");
            assert_eq!(last.header("range"), None, "{name}: two ranges");
            // HEAD passed through: the length its GET would have.
            let mut c = n.srv.connect();
            c.send(format!("HEAD {p} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes());
            let r = c.response(true).expect("HEAD");
            assert_eq!((r.status, xcache(&r)), (200, "BYPASS"), "{name}: HEAD");
            let len = body.len().to_string();
            assert_eq!(
                r.header("Content-Length"),
                Some(len.as_str()),
                "{name}: HEAD"
            );
        }
    }

    // One slice or less: nothing to combine, stored without a validator.
    let small = pattern(SLICE / 2, 7);
    o.put("/small.bin", Object::new(small.clone()).no_validators());
    for want in ["MISS", "HIT"] {
        let r = get(&n, "/small.bin", "");
        assert_eq!((r.status, xcache(&r)), (200, want), "/small.bin");
        assert!(r.body == small);
        wait_committed(&n);
    }
}

#[test]
fn a_body_that_breaks_off_is_resumed_on_whole_objects() {
    breaks_off_then_resumed(0);
}

#[test]
fn a_body_that_breaks_off_is_resumed_on_slices() {
    breaks_off_then_resumed(SLICE);
}

#[test]
fn origin_faults_on_the_first_slice_are_clean_errors_and_retried() {
    faults_then_retry(SLICE);
}

/// The fault hits a later slice, after the client already has the head and the first bytes: the
/// client's response is cut short (never completed with wrong bytes), the slices that did
/// arrive stay usable, and the next request gets the whole object.
#[test]
fn a_fault_in_a_later_slice_cuts_the_response_and_is_refetched() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(4 * SLICE, 2);
    for (i, fault) in [
        Fault::ResetAfter(1000),
        Fault::TruncateAfter(1000),
        Fault::StallAfter(1000),
        Fault::ContentLength(10),
        Fault::Status(503),
        Fault::CloseBeforeHead,
        Fault::RangeBytes(1000),
        Fault::RangeBytes(SLICE as u64 + 1000),
    ]
    .into_iter()
    .enumerate()
    {
        let p = format!("/later{i}.bin");
        o.put(&p, Object::new(body.clone()));
        // The second origin request of this object (slice 1, or the prefetch of it) fails.
        o.fault_after(&p, fault.clone(), 1);
        let what = format!("{fault:?} on slice 1");
        match try_get(&n, &p, "") {
            Ok(r) => {
                assert!(
                    r.status >= 500 || r.body == body,
                    "{what}: a complete wrong body"
                );
                assert!(r.status >= 500 || r.status == 200, "{what}: {}", r.status);
            }
            Err(e) => assert!(e.to_string().contains("body ended after"), "{what}: {e}"),
        }
        let r = get(&n, &p, "");
        assert_eq!(r.status, 200, "{what}: retry");
        assert!(r.body == body, "{what}: retried body differs");
        // Slice 0 was stored whole the first time: only the failed slices were asked again.
        let ranges = o.ranges(&p);
        let slice0 = format!("bytes=0-{}", SLICE - 1);
        assert_eq!(
            ranges
                .iter()
                .filter(|r| r.as_deref() == Some(slice0.as_str()))
                .count(),
            1,
            "{what}: {ranges:?}"
        );
        wait_committed(&n);
        let r = get(&n, &p, "");
        assert_eq!((r.status, xcache(&r)), (200, "HIT"), "{what}");
        assert!(r.body == body);
    }
}

/// An object that became shorter at the origin: the response of the old version is cut where
/// its next slice no longer exists (416), the old slices are dropped, and the next request gets
/// the new version whole (not the old version cut at the same place until it expires).
#[test]
fn an_object_that_shrank_at_the_origin_is_fetched_whole_next() {
    let (o, n) = origin_and_node(SLICED);
    let p = "/shrinks.bin";
    let v1 = pattern(2 * SLICE + SLICE / 2, 1);
    o.put(p, Object::version(v1.clone(), 1));
    let r = get(&n, p, &format!("Range: bytes=0-{}\r\n", 2 * SLICE - 1));
    assert_eq!(r.status, 206);
    wait_committed(&n);
    let v2 = pattern(2 * SLICE - 100, 2);
    o.put(p, Object::version(v2.clone(), 2));
    // Slices 0 and 1 of version 1 are stored: its response is cut where slice 2 is missing.
    match try_get(&n, p, "") {
        Ok(r) => assert!(r.body == v2 || r.status >= 500, "{}", r.status),
        Err(e) => assert!(e.to_string().contains("body ended after"), "{e}"),
    }
    wait_committed(&n);
    let r = get(&n, p, "");
    assert_eq!(r.status, 200);
    assert!(
        r.body == v2,
        "not the new version whole: {} bytes",
        r.body.len()
    );
    wait_committed(&n);
    let r = get(&n, p, "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == v2);
}

/// An object deleted at the origin while it is read (a later slice answered 404): the response
/// is cut, the stored slices are dropped, and the object is not passed through as an origin
/// whose slices disagree: its 404 is stored, and so is the object once it is back (media
/// tester: every request went to the origin for a minute, the 404 never stored).
#[test]
fn an_object_deleted_at_the_origin_mid_read_is_a_stored_404_not_a_pass() {
    let (o, n) = origin_and_node(SLICED);
    let p = "/gone.bin";
    let v1 = pattern(3 * SLICE, 1);
    o.put(
        p,
        Object::version(v1.clone(), 1).cache_control("max-age=600"),
    );
    let r = get(&n, p, "Range: bytes=0-9\r\n");
    assert_eq!(r.status, 206);
    wait_committed(&n);
    o.put(
        p,
        Object::new(b"not here".to_vec())
            .status(404)
            .cache_control("max-age=600")
            .no_validators(),
    );
    match try_get(&n, p, "") {
        Ok(r) => assert!(r.status == 404 || r.status >= 500, "{}", r.status),
        Err(e) => assert!(e.to_string().contains("body ended after"), "{e}"),
    }
    assert!(
        n.srv
            .wait_log("answered with another status now", Duration::from_secs(5)),
        "{}",
        n.srv.logs()
    );
    settle(&n);
    let r = get(&n, p, "");
    assert_eq!((r.status, xcache(&r)), (404, "MISS"));
    wait_committed(&n);
    let before = o.requests(p);
    for _ in 0..3 {
        let r = get(&n, p, "");
        assert_eq!((r.status, xcache(&r)), (404, "HIT"));
    }
    assert_eq!(o.requests(p), before, "the stored 404 was not used");
    assert!(!n.srv.logs().contains("passed through from now on"));
}

/// Seeks into an object the origin does not have: the 404 a later slice's range got is the
/// object's answer, stored as its first slice, so the next seeks anywhere in it are hits, not
/// one origin request each until somebody reads byte 0. (nginx's slice module stores a 404 per
/// slice: a seek to another slice asks again.)
#[test]
fn seeks_into_a_missing_object_store_its_404_once() {
    let (o, n) = origin_and_node(SLICED);
    let p = "/missing.mp4";
    let seek = |at: usize| get(&n, p, &format!("Range: bytes={at}-\r\n"));
    let r = seek(5 * SLICE + 7);
    assert_eq!((r.status, xcache(&r)), (404, "BYPASS"));
    wait_committed(&n);
    let before = o.requests(p);
    assert!(before <= 2, "{before} origin requests for one seek");
    for at in [5 * SLICE + 7, 9 * SLICE, 2 * SLICE + 1, 0] {
        let r = seek(at);
        assert_eq!((r.status, xcache(&r)), (404, "HIT"), "seek to {at}");
    }
    assert_eq!(o.requests(p), before, "the stored 404 was not used");
    // An answer that may not be stored (a 403 without a lifetime) is not fetched again as
    // the first slice: one origin request per seek.
    let p = "/forbidden.mp4";
    o.put(p, Object::new(pattern(3 * SLICE, 1)));
    o.fault(p, Fault::Status(403));
    for at in [5 * SLICE + 7, 9 * SLICE] {
        let before = o.requests(p);
        let r = get(&n, p, &format!("Range: bytes={at}-\r\n"));
        assert_eq!((r.status, xcache(&r)), (403, "BYPASS"));
        wait_committed(&n);
        assert_eq!(o.requests(p) - before, 1, "seek to {at}");
    }
}

/// A cold range across two slices: the second is prefetched while the first is sent, and it
/// may be stored before the response gets there (here the first slice's body comes 600 ms
/// after its head). Its bytes still came from the origin for this response, and are counted
/// so; they were counted as served from the cache.
#[test]
fn a_prefetched_slice_stored_before_the_response_gets_there_counts_as_the_origins() {
    let (o, n) = origin_and_node(SLICED);
    let p = "/two.bin";
    let body = pattern(3 * SLICE, 9);
    o.put(p, Object::version(body.clone(), 1));
    o.fault(p, Fault::SlowFromStart(Duration::from_millis(600)));
    let served = |source| {
        volume_metric(
            &n,
            "contentserver_cache_served_bytes_total",
            &[("source", source)],
        )
    };
    let (a, b) = (SLICE - 600, SLICE + 1399);
    let r = get(&n, p, &format!("Range: bytes={a}-{b}\r\n"));
    assert_eq!((r.status, xcache(&r)), (206, "MISS"));
    assert!(r.body == body[a..=b]);
    assert_eq!(o.requests(p), 2, "one request per slice");
    // (Counted once the send returned, maybe after the client read the bytes.)
    assert!(common::wait_until(Duration::from_secs(5), || served(
        "origin"
    ) >= 2000.0));
    assert_eq!((served("origin"), served("cache")), (2000.0, 0.0));
}

/// An origin whose answer for a later slice contradicts the first (here the whole body for a
/// range that does not start at 0): that response is cut, and the object is passed through
/// whole from then on, as for an origin without a strong validator, not cut every time.
#[test]
fn an_origin_whose_slices_disagree_is_passed_through() {
    let (o, n) = origin_and_node(SLICED);
    let p = "/disagrees.bin";
    let body = pattern(2 * SLICE + 1000, 3);
    o.put(p, Object::version(body.clone(), 1));
    assert_eq!(get(&n, p, "Range: bytes=0-99\r\n").status, 206);
    wait_committed(&n);
    let mut whole = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nETag: \"v1\"\r\n\r\n",
        body.len()
    )
    .into_bytes();
    whole.extend_from_slice(&body);
    o.fault(p, Fault::Raw(whole));
    match try_get(&n, p, "") {
        Ok(r) => assert!(r.body == body, "a complete wrong body"),
        Err(e) => assert!(e.to_string().contains("body ended after"), "{e}"),
    }
    settle(&n);
    for _ in 0..2 {
        let before = o.requests(p);
        let r = get(&n, p, "");
        assert_eq!((r.status, xcache(&r)), (200, "BYPASS"));
        assert!(r.body == body);
        assert_eq!(o.requests(p) - before, 1, "one origin request");
    }
}

/// An origin that honours Range only for the first slice and answers a later slice's range
/// with the whole object (same version): the response is not cut, its rest comes from one
/// whole answer; later requests are passed through whole. A range request that learns it
/// first (its later slice answered whole) passes the next full read through too, uncut.
#[test]
fn an_origin_ignoring_range_past_the_first_slice_cuts_no_response() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(2 * SLICE + 1000, 5);
    let whole = |body: &[u8]| {
        let mut w = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nETag: \"v1\"\r\nLast-Modified: Wed, 01 Jan 2025 00:00:01 GMT\r\n\r\n",
            body.len()
        )
        .into_bytes();
        w.extend_from_slice(body);
        w
    };
    // The first slice stored from a 206, then every later range answered whole.
    let p = "/first-only.bin";
    o.put(p, Object::version(body.clone(), 1));
    assert_eq!(get(&n, p, "Range: bytes=0-99\r\n").status, 206);
    wait_committed(&n);
    o.fault(p, Fault::Raw(whole(&body)));
    let r = get(&n, p, "");
    assert_eq!(r.status, 200);
    assert!(r.body == body, "the whole object, uncut");
    settle(&n);
    let before = o.requests(p);
    let r = get(&n, p, "");
    assert_eq!((r.status, xcache(&r)), (200, "BYPASS"));
    assert!(r.body == body);
    assert_eq!(
        o.requests(p) - before,
        1,
        "passed through: one origin request"
    );

    // A range in a later slice meets it first.
    let p = "/seek-first.bin";
    o.put(p, Object::version(body.clone(), 1));
    o.fault(p, Fault::Raw(whole(&body)));
    let r = get(
        &n,
        p,
        &format!("Range: bytes={}-{}\r\n", 2 * SLICE, 2 * SLICE + 9),
    );
    assert_eq!((r.status, xcache(&r)), (200, "BYPASS"), "the whole answer");
    assert!(r.body == body);
    settle(&n);
    o.clear_fault(p);
    let before = o.requests(p);
    let r = get(&n, p, "");
    assert_eq!((r.status, xcache(&r)), (200, "BYPASS"), "passed through");
    assert!(r.body == body, "uncut");
    assert_eq!(o.requests(p) - before, 1);
}

/// An origin whose ETag differs in every answer: each response that meets a later slice of
/// another ETag is cut (versions never mix), and after the second such change within a minute
/// the object is passed through whole, not cut for ever.
#[test]
fn an_origin_with_an_etag_per_answer_is_passed_through_after_two_changes() {
    let (o, n) = origin_and_node(SLICED);
    let p = "/etag-per-answer.bin";
    let body = pattern(3 * SLICE, 6);
    o.put(p, Object::version(body.clone(), 1));
    o.fault(p, Fault::EtagPerAnswer);
    let mut cut = 0;
    for _ in 0..2 {
        match try_get(&n, p, "") {
            Ok(r) => assert!(r.body == body, "a complete wrong body"),
            Err(e) => {
                assert!(e.to_string().contains("body ended after"), "{e}");
                cut += 1;
            }
        }
        settle(&n);
    }
    assert!(cut >= 1, "versions would have been mixed");
    for _ in 0..2 {
        let r = get(&n, p, "");
        assert_eq!((r.status, xcache(&r)), (200, "BYPASS"));
        assert!(r.body == body);
    }

    // A later slice stored before the mark (a seek) is not served while the object is passed
    // through: its refresh would store a first slice again and the next full read be cut.
    let p = "/etag-per-answer-seek.bin";
    o.put(
        p,
        Object::version(body.clone(), 1).cache_control("max-age=1"),
    );
    o.fault(p, Fault::EtagPerAnswer);
    let seek = format!("Range: bytes={}-{}\r\n", 2 * SLICE, 2 * SLICE + 9);
    assert_eq!(get(&n, p, &seek).status, 206);
    wait_committed(&n);
    for _ in 0..3 {
        let _ = try_get(&n, p, "");
        settle(&n);
    }
    std::thread::sleep(Duration::from_millis(2100));
    for _ in 0..2 {
        let r = get(&n, p, &seek);
        assert_eq!(r.status, 206);
        assert_eq!(xcache(&r), "BYPASS", "passed through, not served stale");
        assert!(r.body[..] == body[2 * SLICE..2 * SLICE + 10]);
        settle(&n);
        let r = get(&n, p, "");
        assert_eq!((r.status, xcache(&r)), (200, "BYPASS"));
        assert!(r.body == body, "uncut");
    }
}

/// One update at the origin met by several full reads at once is one change: each of them is
/// cut (versions never mix), and the object is then stored again in its new version, not
/// passed through for a minute as an origin with an ETag per answer is. Each response used
/// to count as a change of its own.
#[test]
fn one_update_met_by_concurrent_reads_is_one_change() {
    let (o, n) = origin_and_node(SLICED);
    let p = "/updated.bin";
    let v1 = pattern(8 * SLICE, 1);
    let v2 = pattern(8 * SLICE, 2);
    o.put(p, Object::version(v1.clone(), 1));
    o.set_timing(Timing {
        rate: 256 * 1024,
        ..Timing::default()
    });
    let addr = n.srv.addr;
    let readers: Vec<_> = (0..3)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = common::Conn::new(addr);
                c.send(
                    format!("GET {p} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
                );
                c.response(false).map(|r| r.body)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(150));
    o.put(p, Object::version(v2.clone(), 2));
    for r in readers {
        if let Ok(body) = r.join().expect("reader") {
            assert!(body == v1 || body == v2, "a complete body of two versions");
        }
    }
    o.set_timing(Timing::default());
    settle(&n);
    let r = get(&n, p, "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"), "{:?}", r.headers);
    assert!(r.body == v2);
    wait_committed(&n);
    let r = get(&n, p, "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == v2);
    assert!(
        !n.srv.logs().contains("twice within a minute"),
        "{}",
        n.srv.logs()
    );
}

/// An origin whose first slice always comes in another version than the rest (a stale first
/// slice in a cache in front of it): every full read meets the same change, from the same
/// version. The second read, begun after the first change was found, counts as a second
/// change, and the object is passed through whole, not cut after its first slice for ever.
#[test]
fn an_origin_whose_first_slice_is_always_another_version_is_passed_through() {
    let (o, n) = origin_and_node(SLICED);
    let p = "/first-differs.bin";
    let body = pattern(3 * SLICE, 5);
    o.put(p, Object::new(body.clone()));
    o.fault(p, Fault::EtagByStart);
    for _ in 0..2 {
        let r = try_get(&n, p, "");
        let cut = r.expect_err("two versions in one response");
        assert!(cut.to_string().contains("body ended after"), "{cut}");
        settle(&n);
    }
    let r = get(&n, p, "");
    assert_eq!((r.status, xcache(&r)), (200, "BYPASS"));
    assert!(r.body == body, "uncut");
}

/// The later slice whose other ETag makes an object passed through is being fetched when the
/// mark is set (a slow origin here): it stores nothing, so no slice of the marked object is
/// served (a seek into it is passed through too) and none is left to cut a full read once
/// the mark expires.
#[test]
fn the_slice_that_marks_an_object_passed_through_is_not_stored() {
    let (o, n) = origin_and_node(SLICED);
    let p = "/etag-per-answer-slow.bin";
    let body = pattern(3 * SLICE, 7);
    o.put(
        p,
        Object::version(body.clone(), 1).cache_control("max-age=60"),
    );
    o.fault(p, Fault::EtagPerAnswer);
    o.set_timing(Timing {
        rate: 512 * 1024,
        ..Timing::default()
    });
    for _ in 0..3 {
        let _ = try_get(&n, p, "");
        settle(&n);
    }
    let seek = format!("Range: bytes={}-{}\r\n", SLICE + 5, SLICE + 14);
    let r = get(&n, p, &seek);
    assert_eq!(r.status, 206);
    assert_eq!(
        xcache(&r),
        "BYPASS",
        "no slice of a marked object is served"
    );
    assert!(r.body[..] == body[SLICE + 5..SLICE + 15]);
}

/// A stale entry is served (STALE) for every kind of origin failure within stale-if-error, and
/// a refresh that breaks mid-body replaces nothing.
#[test]
fn stale_if_error_covers_every_origin_fault() {
    let (o, n) = origin_and_node("slice_size = 0");
    let v1 = pattern(50_000, 3);
    // Fresh for 1 s; every check waits 2.1 s so whole-second clocks see it stale.
    let cc = "max-age=1, stale-while-revalidate=0, stale-if-error=600";
    o.put("/s.bin", Object::new(v1.clone()).cache_control(cc));
    assert_eq!(xcache(&get(&n, "/s.bin", "")), "MISS");
    for fault in [
        Fault::Hang,
        Fault::CloseBeforeHead,
        Fault::Status(500),
        Fault::Status(503),
        // A switch of protocols nobody asked for is no answer either.
        Fault::Raw(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n"
                .to_vec(),
        ),
    ] {
        std::thread::sleep(Duration::from_millis(2100));
        o.fault_times("/s.bin", fault.clone(), 1);
        let r = get(&n, "/s.bin", "");
        assert_eq!((r.status, xcache(&r)), (200, "STALE"), "{fault:?}");
        assert!(r.body == v1, "{fault:?}: stale body differs");
    }
    // A new version whose body breaks: the client may see the new head cut short, but the
    // stored version is not replaced by a truncation, and the next request gets v2 whole.
    std::thread::sleep(Duration::from_millis(2100));
    let v2 = pattern(60_000, 4);
    // Fresh for 3 s: ages are whole seconds (the origin's Date against the node's clock), so a
    // fetch that crosses a second boundary starts 1 s old; max-age=1 could be stale already at
    // the HIT check below (a CI run saw MISS there).
    let cc2 = "max-age=3, stale-while-revalidate=0, stale-if-error=600";
    o.put("/s.bin", Object::version(v2.clone(), 2).cache_control(cc2));
    o.fault_times("/s.bin", Fault::TruncateAfter(5_000), 1);
    match try_get(&n, "/s.bin", "") {
        Ok(r) => assert!(
            r.body == v1 || r.body == v2 || r.status >= 500,
            "a mixed or short body passed as complete ({} bytes)",
            r.body.len()
        ),
        Err(e) => assert!(e.to_string().contains("body ended after"), "{e}"),
    }
    let r = get(&n, "/s.bin", "");
    assert_eq!(r.status, 200);
    assert!(r.body == v2, "after the fault: {} bytes", r.body.len());
    wait_committed(&n);
    let r = get(&n, "/s.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == v2);

    // The origin's listener is gone (connection refused): stale too.
    std::thread::sleep(Duration::from_millis(3100));
    let mut o = o;
    o.close_listener();
    let r = get(&n, "/s.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "STALE"));
    assert!(r.body == v2);
    // And an object never stored is a clean 502.
    assert_eq!(get(&n, "/never.bin", "").status, 502);
}

/// Servers are tried in order on a connect error, and when a server took the request on a new
/// connection and closed it without an answer head; a request a server answered (here a 503)
/// is never sent elsewhere.
#[test]
fn origin_servers_fail_over_on_connect_errors_and_unanswered_requests() {
    let good = FaultOrigin::start();
    good.put("/a", Object::new(pattern(1000, 5)));
    let d = common::tempdir();
    let n = node(d.path(), &[refused_url(), good.url()], "", "");
    let r = get(&n, "/a", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert!(r.body == pattern(1000, 5));
    assert_eq!(good.requests("/a"), 1);

    // The first server takes the request and closes the connection unanswered: the second
    // answers it.
    let first = FaultOrigin::start();
    let second = FaultOrigin::start();
    for o in [&first, &second] {
        o.put("/b", Object::new(pattern(1000, 6)));
        o.put("/c", Object::new(pattern(1000, 7)));
    }
    first.fault_times("/b", Fault::CloseBeforeHead, 1);
    let d = common::tempdir();
    let n = node(d.path(), &[first.url(), second.url()], "", "");
    let r = get(&n, "/b", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert!(r.body == pattern(1000, 6));
    assert_eq!((first.requests("/b"), second.requests("/b")), (1, 1));
    // An answer is the answer: a 503 of the second (the first is marked down now) is not
    // sent to the first.
    second.fault_times("/c", Fault::Status(503), 1);
    assert_eq!(get(&n, "/c", "").status, 503);
    assert_eq!((first.requests("/c"), second.requests("/c")), (0, 1));
    let r = get(&n, "/c", "");
    assert_eq!(
        (r.status, xcache(&r)),
        (200, "MISS"),
        "the next request retries"
    );
}

/// A node out of descriptors cannot open an origin connection: that is its own limit, so the
/// answer is 503 with Retry-After (as for a file it cannot open), not a 502, it is no origin
/// error in the metrics, and the origin server is not marked down.
#[test]
fn out_of_descriptors_for_origin_connections_is_503_not_an_origin_error() {
    let o = FaultOrigin::start();
    for i in 0..48 {
        o.put(&format!("/slow/{i}"), Object::new(pattern(1000, i as u8)));
    }
    o.set_timing(Timing {
        head_delay: Duration::from_millis(1500),
        ..Timing::default()
    });
    let d = common::tempdir();
    let cfg = config(
        &[o.url()],
        &d.path().join("cache"),
        "read_timeout_ms = 5000",
        "",
    );
    let n = Node::new(
        Server::start_with_nofile(d.path(), &cfg, 100),
        d.path().join("cache"),
    );
    let addr = n.srv.addr;
    let clients: Vec<_> = (0..48)
        .map(|i| {
            std::thread::spawn(move || {
                common::Conn::new(addr)
                    .request("GET", &format!("/slow/{i}"), &[])
                    .map(|r| (r.status, r.header("Retry-After").map(str::to_string)))
            })
        })
        .collect();
    let answers: Vec<_> = clients
        .into_iter()
        .map(|c| c.join().expect("client"))
        .collect();
    let unavailable = answers
        .iter()
        .filter(|a| matches!(a, Ok((503, Some(_)))))
        .count();
    assert!(
        answers
            .iter()
            .all(|a| matches!(a, Ok((200, _)) | Ok((503, Some(_))))),
        "{answers:?}"
    );
    assert!(
        unavailable > 0,
        "the descriptors never ran out: {answers:?}"
    );
    let m = metrics(&n);
    assert_eq!(
        series(
            &m,
            "contentserver_origin_requests_total{code=\"error\",origin=\"origin\"}"
        ),
        0.0
    );
}

/// The open-entry table of a cache volume keeps at most its share of RLIMIT_NOFILE (with the
/// open-file caches, a quarter of it): many stored slices on a node with a low limit leave
/// descriptors for connections, fills and the origin, so it keeps answering and storing.
#[test]
fn open_cache_entries_stay_within_the_descriptor_limit() {
    let o = FaultOrigin::start();
    let d = common::tempdir();
    let cfg = config(&[o.url()], &d.path().join("cache"), "", "slice_size = 4096");
    let n = Node::new(
        Server::start_with_nofile(d.path(), &cfg, 256),
        d.path().join("cache"),
    );
    // Descriptors of files in the cache directory (the open entries; not the lock file).
    let cache = std::fs::canonicalize(d.path().join("cache")).expect("cache dir");
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", n.srv.pid()))
            .expect("the server's descriptors")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|p| p.starts_with(&cache) && !p.ends_with(".lock") && p.is_file())
            .count()
    };
    // 12 objects of 25 slices: 300 entries stored and served, more than the whole limit.
    for i in 0..12 {
        let body = pattern(100_000, i as u8);
        let path = format!("/many/{i}");
        o.put(&path, Object::new(body.clone()));
        for want in ["MISS", "HIT"] {
            let r = get(&n, &path, "");
            assert_eq!((r.status, xcache(&r)), (200, want), "{path}");
            assert!(r.body == body, "{path}");
            wait_committed(&n);
        }
    }
    let held = fds();
    assert!(
        (1..=256 / 4).contains(&held),
        "{held} cache files open: not within a quarter of the limit (one volume)"
    );
    // The object served last is open: each of its 25 slices took a random other entry's
    // place in the full table. (They took each other's: one or two stayed open, and a hand's
    // change to the others went unseen.)
    let last: Vec<PathBuf> = (0..25)
        .map(|i| {
            let id = content_server::cache::key::CacheKey::new(b"/many/11".to_vec()).slice(i);
            cache.join(id.rel_path())
        })
        .collect();
    let open_last = std::fs::read_dir(format!("/proc/{}/fd", n.srv.pid()))
        .expect("the server's descriptors")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|p| last.contains(p))
        .count();
    assert!(
        open_last >= 12,
        "{open_last} of the last object's 25 slices open"
    );
    // A slice of the first object is no longer open; written in place by a hand, it is not
    // served: the size and modification time its commit recorded no longer match.
    let first = |i: u32| {
        let id = content_server::cache::key::CacheKey::new(b"/many/0".to_vec()).slice(i);
        cache.join(id.rel_path())
    };
    let open_now: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{}/fd", n.srv.pid()))
        .expect("the server's descriptors")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .collect();
    let k = (0..25)
        .find(|&i| !open_now.contains(&first(i)))
        .expect("a slice of /many/0 not open");
    std::thread::sleep(Duration::from_millis(50));
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(first(k))
            .expect("the slice's file");
        let len = f.metadata().expect("stat").len();
        f.write_all_at(&[0xAA; 64], len - 64).expect("write");
    }
    let asked = o.ranges("/many/0").len();
    let r = get(&n, "/many/0", "");
    assert!(
        r.body == pattern(100_000, 0),
        "slice {k}'s changed bytes were served"
    );
    let start = k as usize * 4096;
    let end = (start + 4095).min(100_000 - 1);
    assert_eq!(
        o.ranges("/many/0")[asked..],
        [Some(format!("bytes={start}-{end}"))],
        "only the changed slice is fetched again"
    );
    wait_committed(&n);
    // New misses are still fetched and stored.
    o.put("/after", Object::new(pattern(10_000, 99)));
    for want in ["MISS", "HIT"] {
        let r = get(&n, "/after", "");
        assert_eq!((r.status, xcache(&r)), (200, want));
        wait_committed(&n);
    }
}

/// A listening socket whose accept queue is full (backlog 0, one connection waiting that is
/// never accepted): a connect to it hangs until the client's timeout, as with a dead host.
fn hanging_server() -> (String, Vec<impl Sized>) {
    use rustix::net::{AddressFamily, SocketType};
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).expect("socket");
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    rustix::net::bind(&fd, &any).expect("bind");
    rustix::net::listen(&fd, 0).expect("listen");
    let addr = std::net::SocketAddr::try_from(rustix::net::getsockname(&fd).expect("getsockname"))
        .expect("an inet address");
    let mut held: Vec<Box<dyn std::any::Any>> = vec![Box::new(fd)];
    for _ in 0..2 {
        if let Ok(c) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            held.push(Box::new(c));
        }
    }
    (format!("http://{addr}"), held)
}

/// GET `/h{i}` for each `i` at once, each on a connection of its own: (status, time taken)
/// in order.
fn at_once(n: &Node, ids: std::ops::Range<usize>) -> Vec<(Option<u16>, Duration)> {
    let addr = n.srv.addr;
    let clients: Vec<_> = ids
        .map(|i| {
            std::thread::spawn(move || {
                let t = Instant::now();
                let r = common::Conn::new(addr).request("GET", &format!("/h{i}"), &[]);
                (r.map(|r| r.status).ok(), t.elapsed())
            })
        })
        .collect();
    clients
        .into_iter()
        .map(|c| c.join().expect("client"))
        .collect()
}

/// A server that hangs on connect costs its timeout once, not on every new origin connection:
/// it is tried after the others for a while (nginx `fail_timeout`).
#[test]
fn a_hanging_origin_server_is_tried_last_for_a_while() {
    let (hang, _held) = hanging_server();
    let good = FaultOrigin::start();
    for i in 0..4 {
        good.put(&format!("/h{i}"), Object::new(pattern(1000, i as u8)));
    }
    let d = common::tempdir();
    let n = node(
        d.path(),
        &[hang, good.url()],
        "connect_timeout_ms = 500",
        "",
    );
    let t = Instant::now();
    assert_eq!(get(&n, "/h0", "").status, 200);
    assert!(
        t.elapsed() >= Duration::from_millis(450),
        "{:?}",
        t.elapsed()
    );
    // Three at once: new connections are opened, to the good server first. (Each answer takes
    // 100 ms, so the three overlap however the clients are scheduled: one connection is not
    // enough.)
    good.set_timing(Timing {
        head_delay: Duration::from_millis(100),
        ..Timing::default()
    });
    for (status, took) in at_once(&n, 1..4) {
        assert_eq!(status, Some(200));
        assert!(
            took < Duration::from_millis(450),
            "a new connection waited {took:?}"
        );
    }
    assert!(
        good.connections() >= 2,
        "{} connections",
        good.connections()
    );
    // Once its mark ends (10 s after the failure), one request at a time tries the hanging
    // server again; the others keep to the good one and do not wait. (All of them waited.)
    std::thread::sleep(Duration::from_millis(11_000).saturating_sub(t.elapsed()));
    for i in 4..8 {
        good.put(&format!("/h{i}"), Object::new(pattern(1000, i as u8)));
    }
    let mut waited = 0;
    for (status, took) in at_once(&n, 4..8) {
        assert_eq!(status, Some(200));
        if took >= Duration::from_millis(450) {
            waited += 1;
        }
    }
    assert!(
        waited <= 1,
        "{waited} requests waited for the hanging server"
    );
}

/// The probe of a server whose down mark ended connects anew: a keep-alive connection to it,
/// kept from before its connect failed, would answer and leave the mark "probing", and all
/// but one request every few seconds would keep going to the second server. Once the probe
/// connects, the traffic is the first server's again.
#[test]
fn a_recovered_server_gets_its_traffic_back_after_one_probe() {
    let mut a = FaultOrigin::start();
    let b = FaultOrigin::start();
    for i in 0..10 {
        let p = format!("/r{i}");
        a.put(&p, Object::new(pattern(1000, i as u8)));
        b.put(&p, Object::new(pattern(1000, i as u8)));
    }
    let d = common::tempdir();
    let n = node(
        d.path(),
        &[a.url(), b.url()],
        "connect_timeout_ms = 500",
        "slice_size = 0",
    );
    // One idle connection to the first server.
    assert_eq!(get(&n, "/r0", "").status, 200);
    assert_eq!(a.requests("/r0"), 1);
    // Two at once while it refuses new connections: one of them must connect, fails, and the
    // server is marked down; the idle connection goes back to the pool.
    a.set_timing(Timing {
        head_delay: Duration::from_millis(300),
        ..Timing::default()
    });
    a.pause_listener();
    let failed = Instant::now();
    let addr = n.srv.addr;
    let both: Vec<_> = (1..3)
        .map(|i| {
            std::thread::spawn(move || {
                common::Conn::new(addr)
                    .request("GET", &format!("/r{i}"), &[])
                    .map(|r| r.status)
                    .ok()
            })
        })
        .collect();
    for c in both {
        assert_eq!(c.join().expect("client"), Some(200));
    }
    assert!(n.srv.logs().contains("trying the next"), "{}", n.srv.logs());
    a.resume_listener();
    a.set_timing(Timing::default());
    // After the mark (10 s): one probe, then every request to the first server again.
    std::thread::sleep(Duration::from_millis(10_700).saturating_sub(failed.elapsed()));
    for i in 3..9 {
        assert_eq!(get(&n, &format!("/r{i}"), "").status, 200);
    }
    let to_a = (3..9)
        .filter(|i| a.requests(&format!("/r{i}")) == 1)
        .count();
    assert!(
        to_a >= 5,
        "{to_a} of 6 requests went to the recovered server"
    );
}

/// Servers that cannot be reached: each request tries them all while every one is down, but
/// the log gets one line per server per 10 s (with the count of failures not logged), not one
/// per server per request; `origin_server_down` names the servers marked down, from the first
/// failure until one connects again.
#[test]
fn servers_down_are_logged_once_per_10_s_and_shown_per_server() {
    let up = FaultOrigin::start();
    up.put("/x", Object::new(b"x".to_vec()));
    let (dead_a, dead_b) = (refused_url(), refused_url());
    let d = common::tempdir();
    let n = node(
        d.path(),
        &[dead_a.clone(), dead_b.clone()],
        "",
        "slice_size = 0",
    );
    let down = |n: &Node, server: &str| {
        metric(
            n,
            &format!("contentserver_origin_server_down{{origin=\"origin\",server=\"{server}\"}}"),
        )
    };
    assert_eq!((down(&n, &dead_a), down(&n, &dead_b)), (0.0, 0.0));
    for i in 0..40 {
        assert_eq!(get(&n, &format!("/r{i}"), "").status, 502);
    }
    assert_eq!((down(&n, &dead_a), down(&n, &dead_b)), (1.0, 1.0));
    let lines = n.srv.logs();
    let lines: Vec<_> = lines
        .lines()
        .filter(|l| l.contains("origin server failed"))
        .collect();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(lines[0].contains(&dead_a) && lines[0].contains("trying the next"));
    assert!(lines[1].contains(&dead_b) && lines[1].contains("no other is left"));
    // A partial outage: the second server answers, the first is shown down.
    let d2 = common::tempdir();
    let n = node(d2.path(), &[dead_a.clone(), up.url()], "", "slice_size = 0");
    assert_eq!(get(&n, "/x", "").status, 200);
    assert_eq!((down(&n, &dead_a), down(&n, &up.url())), (1.0, 0.0));
}

/// A first server that takes connections but never answers: the request goes to the next
/// server after `read_timeout_ms` (nginx's default `proxy_next_upstream error timeout`), and
/// the first is marked down as for a failed connect, so the next requests go to the second at
/// once. Every miss was a 504 for as long as the first server hung.
#[test]
fn a_hanging_first_server_fails_over_to_the_next() {
    let (a, b) = (FaultOrigin::start(), FaultOrigin::start());
    for o in [&a, &b] {
        o.put("/h.bin", Object::new(pattern(5000, 3)));
        o.put("/x.bin", Object::new(pattern(3000, 4)));
    }
    a.fault("/h.bin", Fault::Hang);
    let d = common::tempdir();
    let n = node(
        d.path(),
        &[a.url(), b.url()],
        "read_timeout_ms = 500",
        "slice_size = 0",
    );
    let t = Instant::now();
    let r = get(&n, "/h.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert!(r.body == pattern(5000, 3));
    assert!(
        t.elapsed() >= Duration::from_millis(450),
        "{:?}",
        t.elapsed()
    );
    assert_eq!((a.requests("/h.bin"), b.requests("/h.bin")), (1, 1));
    let t = Instant::now();
    assert_eq!(get(&n, "/x.bin", "").status, 200);
    assert!(
        t.elapsed() < Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    assert_eq!((a.requests("/x.bin"), b.requests("/x.bin")), (0, 1));
    let down = format!(
        "contentserver_origin_server_down{{origin=\"origin\",server=\"{}\"}}",
        a.url()
    );
    assert_eq!(metric(&n, &down), 1.0);
    assert!(
        n.srv.logs().contains("no response head within 500 ms"),
        "{}",
        n.srv.logs()
    );
}

/// A request is sent to each server once: the first hangs, the second refuses connections, and
/// the request ends after one read timeout with the first asked once. It went back to the
/// first server (marked down, still in the connect order) and waited a second read timeout.
#[test]
fn a_request_no_server_answers_is_sent_to_each_once() {
    let a = FaultOrigin::start();
    a.put("/h.bin", Object::new(pattern(5000, 3)));
    a.fault("/h.bin", Fault::Hang);
    let d = common::tempdir();
    let n = node(
        d.path(),
        &[a.url(), refused_url()],
        "read_timeout_ms = 700",
        "slice_size = 0",
    );
    let t = Instant::now();
    let r = get(&n, "/h.bin", "");
    assert!(r.status == 502 || r.status == 504, "{}", r.status);
    assert!(
        t.elapsed() < Duration::from_millis(1300),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        a.requests("/h.bin"),
        1,
        "the hanging server was asked again"
    );
}

/// Within stale-while-revalidate, no background refresh starts while every origin server is
/// known down: the entry is served STALE (each such request started one, and a hanging server
/// held a connection per object for its read timeout).
#[test]
fn no_background_refresh_starts_while_the_origin_is_known_down() {
    let o = FaultOrigin::start();
    for p in ["/a.bin", "/b.bin"] {
        o.put(
            p,
            Object::new(pattern(2000, 6))
                .cache_control("max-age=1, stale-while-revalidate=600, stale-if-error=600"),
        );
    }
    let d = common::tempdir();
    let n = node(
        d.path(),
        &[o.url()],
        "read_timeout_ms = 600",
        "slice_size = 0",
    );
    for p in ["/a.bin", "/b.bin"] {
        assert_eq!(xcache(&get(&n, p, "")), "MISS");
    }
    wait_committed(&n);
    std::thread::sleep(Duration::from_millis(1100));
    for p in ["/a.bin", "/b.bin"] {
        o.fault(p, Fault::Hang);
    }
    // The refresh this starts finds the server hanging, and marks it down.
    assert_eq!(xcache(&get(&n, "/a.bin", "")), "UPDATING");
    let down = format!(
        "contentserver_origin_server_down{{origin=\"origin\",server=\"{}\"}}",
        o.url()
    );
    assert!(common::wait_until(Duration::from_secs(5), || metric(
        &n, &down
    ) == 1.0));
    let asked = (o.requests("/a.bin"), o.requests("/b.bin"));
    for p in ["/b.bin", "/a.bin", "/b.bin"] {
        let r = get(&n, p, "");
        assert_eq!((r.status, xcache(&r)), (200, "STALE"), "{p}");
        assert!(r.body == pattern(2000, 6));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        (o.requests("/a.bin"), o.requests("/b.bin")),
        asked,
        "a refresh went to an origin known down"
    );
}

/// A prefetched later slice that failed because the only server hangs (marked down by it) is
/// not asked for again: the response is cut after one read timeout. It was asked for twice,
/// each waiting the whole read timeout.
#[test]
fn a_prefetch_failed_on_a_server_now_down_is_not_asked_again() {
    let o = FaultOrigin::start();
    let body = pattern(3 * SLICE, 8);
    o.put("/p.bin", Object::new(body.clone()));
    let d = common::tempdir();
    let n = node(d.path(), &[o.url()], "read_timeout_ms = 800", SLICED);
    assert_eq!(get(&n, "/p.bin", "Range: bytes=0-99\r\n").status, 206);
    wait_committed(&n);
    o.fault("/p.bin", Fault::Hang);
    let second = Some(format!("bytes={SLICE}-{}", 2 * SLICE - 1));
    let t = Instant::now();
    match try_get(&n, "/p.bin", "") {
        Ok(r) => panic!("a whole answer without its second slice: {}", r.status),
        Err(e) => assert!(e.to_string().contains("body ended after"), "{e}"),
    }
    assert!(
        t.elapsed() < Duration::from_millis(1400),
        "{:?}",
        t.elapsed()
    );
    let asked = o.ranges("/p.bin").iter().filter(|r| **r == second).count();
    assert_eq!(asked, 1, "{:?}", o.ranges("/p.bin"));
}

/// When an origin server's down mark ends, one request probes it: the requests arriving with
/// it for stale copies (stale-if-error) are answered STALE at once, none asks the origin too,
/// nor waits for the probe (those of its object joined it). All those arriving in the same few
/// milliseconds asked; then those of the probed object waited for its read timeout.
#[test]
fn requests_arriving_together_when_a_mark_ends_send_one_probe() {
    let o = FaultOrigin::start();
    let paths: Vec<String> = (0..5).map(|i| format!("/t{i}.bin")).collect();
    for p in &paths {
        o.put(
            p,
            Object::new(pattern(3000, 2))
                .cache_control("max-age=1, stale-while-revalidate=0, stale-if-error=600"),
        );
    }
    let d = common::tempdir();
    let n = node(
        d.path(),
        &[o.url()],
        "read_timeout_ms = 1500",
        "slice_size = 0",
    );
    for p in &paths {
        assert_eq!(xcache(&get(&n, p, "")), "MISS");
    }
    wait_committed(&n);
    std::thread::sleep(Duration::from_millis(1100));
    for p in &paths {
        o.fault(p, Fault::Hang);
    }
    let r = get(&n, &paths[0], "");
    let failed = Instant::now();
    assert_eq!(xcache(&r), "STALE");
    let asked = |o: &FaultOrigin| paths.iter().map(|p| o.requests(p)).sum::<usize>();
    let before = asked(&o);
    std::thread::sleep(Duration::from_millis(10_200).saturating_sub(failed.elapsed()));
    let addr = n.srv.addr;
    let go = std::sync::Arc::new(std::sync::Barrier::new(20));
    let clients: Vec<_> = (0..20)
        .map(|i| {
            let (p, go) = (paths[i % 5].clone(), go.clone());
            std::thread::spawn(move || {
                let mut c = common::Conn::new(addr);
                go.wait();
                let t = Instant::now();
                let r = c.request("GET", &p, &[]).expect("an answer");
                (r.status, xcache(&r).to_string(), t.elapsed(), p)
            })
        })
        .collect();
    let answers: Vec<_> = clients
        .into_iter()
        .map(|c| c.join().expect("client"))
        .collect();
    assert!(
        answers.iter().all(|(s, x, ..)| *s == 200 && x == "STALE"),
        "{answers:?}"
    );
    assert_eq!(asked(&o) - before, 1, "more than one probe: {answers:?}");
    // Only the probe waited: the requests for its object that joined it did not.
    let waited = (answers.iter())
        .filter(|(_, _, t, _)| *t > Duration::from_millis(500))
        .count();
    assert_eq!(waited, 1, "{answers:?}");
}

/// A stale entry (stale-if-error) of an origin known down is served at once: the request that
/// found the origin hanging waited its read timeout and marked it down; the next ones, within
/// the 10 s mark, ask nothing and wait for nothing (each waited the whole read timeout). Once
/// the mark ends one request asks again (the probe) and revalidates the entry.
#[test]
fn stale_if_error_answers_at_once_while_the_origin_is_known_down() {
    let o = FaultOrigin::start();
    let body = pattern(3000, 5);
    o.put(
        "/s.bin",
        Object::new(body.clone())
            .cache_control("max-age=1, stale-while-revalidate=0, stale-if-error=600"),
    );
    let d = common::tempdir();
    let n = node(
        d.path(),
        &[o.url()],
        "read_timeout_ms = 800",
        "slice_size = 0",
    );
    assert_eq!(xcache(&get(&n, "/s.bin", "")), "MISS");
    wait_committed(&n);
    std::thread::sleep(Duration::from_millis(1100));
    o.fault("/s.bin", Fault::Hang);
    let t = Instant::now();
    let r = get(&n, "/s.bin", "");
    let failed = Instant::now();
    assert_eq!((r.status, xcache(&r)), (200, "STALE"));
    assert!(r.body == body);
    assert!(
        t.elapsed() >= Duration::from_millis(750),
        "{:?}",
        t.elapsed()
    );
    let asked = o.requests("/s.bin");
    for _ in 0..3 {
        let t = Instant::now();
        let r = get(&n, "/s.bin", "");
        assert_eq!((r.status, xcache(&r)), (200, "STALE"));
        assert!(r.body == body);
        assert!(
            t.elapsed() < Duration::from_millis(400),
            "waited for an origin known down: {:?}",
            t.elapsed()
        );
    }
    assert_eq!(o.requests("/s.bin"), asked, "asked an origin known down");
    // The mark ended: one request asks again, and the origin answers now.
    o.clear_fault("/s.bin");
    std::thread::sleep(Duration::from_millis(10_300).saturating_sub(failed.elapsed()));
    let r = get(&n, "/s.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "REVALIDATED"));
    assert!(r.body == body);
    assert_eq!(o.requests("/s.bin"), asked + 1);
}

/// A hung first server whose 10 s mark ended is tried again by one request (a probe), not by
/// every miss that comes while it waits: its connect succeeding does not end its mark, only an
/// answer does. Every miss in the probe's `read_timeout_ms` went to it and waited.
#[test]
fn a_hung_server_is_probed_by_one_request_at_a_time() {
    let (a, b) = (FaultOrigin::start(), FaultOrigin::start());
    for i in 0..8 {
        for o in [&a, &b] {
            o.put(&format!("/p{i}"), Object::new(pattern(2000, i)));
        }
        a.fault(&format!("/p{i}"), Fault::Hang);
    }
    let d = common::tempdir();
    let n = node(
        d.path(),
        &[a.url(), b.url()],
        "read_timeout_ms = 800",
        "slice_size = 0",
    );
    let down = format!(
        "contentserver_origin_server_down{{origin=\"origin\",server=\"{}\"}}",
        a.url()
    );
    assert_eq!(get(&n, "/p0", "").status, 200);
    let failed = Instant::now();
    assert_eq!(metric(&n, &down), 1.0);
    std::thread::sleep(Duration::from_millis(10_300).saturating_sub(failed.elapsed()));
    let addr = n.srv.addr;
    let misses: Vec<_> = (1..7)
        .map(|i| {
            std::thread::sleep(Duration::from_millis(60));
            std::thread::spawn(move || {
                let t = Instant::now();
                let r = common::Conn::new(addr).request("GET", &format!("/p{i}"), &[]);
                (r.map(|r| r.status).ok(), t.elapsed())
            })
        })
        .collect();
    // (While the probe waits, the server is still shown down.)
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(metric(&n, &down), 1.0);
    let slow = misses
        .into_iter()
        .map(|m| m.join().expect("client"))
        .inspect(|(status, _)| assert_eq!(*status, Some(200)))
        .filter(|(_, took)| *took >= Duration::from_millis(700))
        .count();
    assert_eq!(slow, 1, "misses that waited for the hung server");
    assert_eq!(metric(&n, &down), 1.0);
    assert!(!n.srv.logs().contains("answers again"), "{}", n.srv.logs());
}

/// An origin that resets every request before its head: the node logs one line a second with
/// the count of those left out, not one per request.
#[test]
fn request_failures_are_logged_once_a_second() {
    let (o, n) = origin_and_node("slice_size = 0");
    for i in 0..30 {
        o.put(&format!("/r{i}"), Object::new(pattern(100, 1)));
        o.fault(&format!("/r{i}"), Fault::CloseBeforeHead);
    }
    let t = Instant::now();
    for i in 0..30 {
        assert_eq!(get(&n, &format!("/r{i}"), "").status, 502);
    }
    let secs = t.elapsed().as_secs() as usize;
    let logs = n.srv.logs();
    let lines = logs
        .lines()
        .filter(|l| l.contains("origin request failed"))
        .count();
    assert!(
        (1..=secs + 2).contains(&lines),
        "{lines} lines in {secs} s:\n{logs}"
    );
    assert!(logs.contains("left_out="), "{logs}");
}

#[test]
fn an_https_origin_with_a_test_ca_and_host_sni_overrides() {
    let ca = TestCa::new("node test CA");
    let o = FaultOrigin::start_tls(&ca, &["cdn.test"]);
    let body = pattern(300_000, 7);
    o.put("/tls.bin", Object::new(body.clone()));
    let d = common::tempdir();
    let ca_file = ca.write_pem(d.path(), "ca.pem");
    let extra = format!(
        "ca_file = {:?}\nsni = \"cdn.test\"\nhost = \"bucket.example\"",
        ca_file.display().to_string()
    );
    let n = node(d.path(), &[o.url()], &extra, SLICED);
    let r = get(&n, "/tls.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    wait_committed(&n);
    assert!(r.body == body);
    let r = get(&n, "/tls.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    let seen = o.seen();
    assert!(!seen.is_empty());
    for s in &seen {
        assert_eq!(s.sni.as_deref(), Some("cdn.test"), "{s:?}");
        assert_eq!(s.header("host"), Some("bucket.example"), "{s:?}");
    }
    // Slices of one fill share kept-alive connections rather than a handshake each.
    assert!(
        o.connections() < seen.len(),
        "{} connections for {} requests",
        o.connections(),
        seen.len()
    );
    let m = metrics(&n);
    assert!(
        series(
            &m,
            "contentserver_origin_requests_total{code=\"2xx\",origin=\"origin\"}"
        ) >= 1.0
    );

    // Without the CA file the certificate is refused: 502, nothing stored, no request sent.
    let d2 = common::tempdir();
    let n2 = node(d2.path(), &[o.url()], "sni = \"cdn.test\"", "");
    let before = o.requests("/tls.bin");
    assert_eq!(get(&n2, "/tls.bin", "").status, 502);
    assert_eq!(o.requests("/tls.bin"), before);
    assert_eq!(cache_files(&n2.cache).1, 0);
    // The log line may reach the captured stderr just after the 502 did.
    assert!(
        common::wait_until(Duration::from_secs(5), || n2
            .srv
            .logs()
            .contains("TLS handshake")),
        "{}",
        n2.srv.logs()
    );
}

/// An object of more slices than an entry id numbers (a lying origin's total of 2^64 - 1) is
/// never stored: a seek into its last numbered slice leaves no entry behind.
#[test]
fn an_object_of_more_slices_than_can_be_numbered_is_not_stored() {
    let (o, n) = origin_and_node(SLICED);
    let start = u64::from(u32::MAX) * SLICE as u64;
    let end = start + SLICE as u64 - 1;
    let mut raw = format!(
        "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{end}/{}\r\n\
         Content-Length: {SLICE}\r\nETag: \"v1\"\r\n\r\n",
        u64::MAX
    )
    .into_bytes();
    raw.extend(pattern(SLICE, 3));
    o.put("/huge", Object::new(pattern(10, 1)));
    o.fault("/huge", Fault::Raw(raw));
    let r = common::cache::try_get(
        &n,
        "/huge",
        &format!("Range: bytes={start}-{}\r\n", start + 99),
    );
    if let Ok(r) = &r {
        assert_ne!(r.status, 200, "{:?}", r.headers);
    }
    assert!(o.requests("/huge") >= 1);
    wait_committed(&n);
    assert_eq!(
        cache_files(&n.cache).1,
        0,
        "{:?}",
        common::cache::walk(&n.cache)
    );
}

/// A self-signed certificate that is a CA (what `openssl req -x509` makes by default) is
/// refused as a server certificate even from `ca_file` (rustls): the log says why and what to
/// issue instead, not a bare error code; so does one from a CA the node does not trust.
#[test]
fn a_ca_certificate_as_the_origin_certificate_is_refused_with_the_remedy() {
    let (tls, pem) = TestCa::self_signed_ca_as_server(&["cdn.test"]);
    let o = FaultOrigin::start_tls_with(tls);
    o.put("/x", Object::new(pattern(100, 1)));
    let d = common::tempdir();
    let ca_file = d.path().join("self.pem");
    std::fs::write(&ca_file, pem).unwrap();
    let extra = format!(
        "ca_file = {:?}\nsni = \"cdn.test\"",
        ca_file.display().to_string()
    );
    let n = node(d.path(), &[o.url()], &extra, "");
    assert_eq!(get(&n, "/x", "").status, 502);
    assert_eq!(o.requests("/x"), 0);
    assert!(
        common::wait_until(Duration::from_secs(5), || n
            .srv
            .logs()
            .contains("basicConstraints CA:FALSE")),
        "{}",
        n.srv.logs()
    );

    // A certificate from a CA the node does not trust: the log says where the CA goes.
    let other = TestCa::new("another CA");
    let o = FaultOrigin::start_tls(&other, &["cdn.test"]);
    o.put("/y", Object::new(pattern(100, 2)));
    let d = common::tempdir();
    let n = node(d.path(), &[o.url()], "sni = \"cdn.test\"", "");
    assert_eq!(get(&n, "/y", "").status, 502);
    assert!(
        common::wait_until(Duration::from_secs(5), || n.srv.logs().contains(
            "UnknownIssuer: the origin's certificate was not issued by a CA this node trusts"
        ) && n
            .srv
            .logs()
            .contains("put the issuing CA's certificate in ca_file")),
        "{}",
        n.srv.logs()
    );

    // A self-signed certificate named like a CA the node trusts (its issuer's name is found,
    // its signature is not that CA's): said as such, not a bare `BadSignature`.
    let ca = TestCa::new("localhost");
    let o = FaultOrigin::start_tls_with(TestCa::self_signed_named_like("localhost", &["cdn.test"]));
    o.put("/z", Object::new(pattern(100, 3)));
    let d = common::tempdir();
    let extra = format!(
        "ca_file = {:?}\nsni = \"cdn.test\"",
        ca.write_pem(d.path(), "ca.pem").display().to_string()
    );
    let n = node(d.path(), &[o.url()], &extra, "");
    assert_eq!(get(&n, "/z", "").status, 502);
    assert!(
        common::wait_until(Duration::from_secs(5), || n
            .srv
            .logs()
            .contains("a self-signed certificate whose name matches a trusted one")),
        "{}",
        n.srv.logs()
    );
}

#[test]
fn max_connections_caps_the_origin_connections_of_the_whole_node() {
    let o = FaultOrigin::start();
    o.set_timing(Timing {
        head_delay: Duration::from_millis(100),
        ..Timing::default()
    });
    for i in 0..12 {
        o.put(&format!("/m{i}"), Object::new(pattern(5000, i as u8)));
    }
    let d = common::tempdir();
    let n = node(
        d.path(),
        &[o.url()],
        "max_connections = 2\nread_timeout_ms = 5000",
        "slice_size = 0",
    );
    let addr = n.srv.addr;
    let clients: Vec<_> = (0..12)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = common::Conn::new(addr);
                c.send(
                    format!("GET /m{i} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                );
                c.response(false).expect("response")
            })
        })
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        let r = c.join().unwrap();
        assert_eq!(r.status, 200, "/m{i}");
        assert!(r.body == pattern(5000, i as u8));
    }
    assert!(
        o.max_open_connections() <= 2,
        "{} origin connections at once",
        o.max_open_connections()
    );
    let m = metrics(&n);
    assert!(series(&m, "contentserver_origin_connections{origin=\"origin\"}") <= 2.0);
    assert_eq!(
        series(
            &m,
            "contentserver_origin_requests_total{code=\"2xx\",origin=\"origin\"}"
        ),
        12.0
    );
}

/// A version change of an object whose origin claims 2^32 slices looks at a bounded number
/// of them: the response that met it is cut at once. It used to walk every slice number (and
/// allocate an id for each) on the event loop: minutes and gigabytes.
#[test]
fn a_version_change_of_a_huge_claimed_object_is_bounded_work() {
    let (o, n) = origin_and_node(SLICED);
    let total = u64::from(u32::MAX) * SLICE as u64;
    let slice = |k: u64, v: u32| {
        let (start, end) = (k * SLICE as u64, (k + 1) * SLICE as u64 - 1);
        let mut raw = format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{end}/{total}\r\n\
             Content-Length: {SLICE}\r\nETag: \"v{v}\"\r\n\r\n"
        )
        .into_bytes();
        raw.extend(pattern(SLICE, v as u8));
        Fault::Raw(raw)
    };
    o.put("/claims", Object::new(pattern(10, 1)));
    o.fault_times("/claims", slice(0, 1), 1);
    let r = get(&n, "/claims", "Range: bytes=0-99\r\n");
    assert_eq!((r.status, xcache(&r)), (206, "MISS"));
    wait_committed(&n);
    // The second slice comes in another version.
    o.fault("/claims", slice(1, 2));
    let r = common::cache::get_within(&n, "/claims", Duration::from_secs(15))
        .expect("the response was not ended in 15 s");
    let cut = r.expect_err("two versions in one response");
    assert!(cut.contains(&format!("after {SLICE} of")), "{cut}");
    // The node still answers.
    o.put("/ok", Object::new(pattern(10, 1)));
    assert_eq!(get(&n, "/ok", "").status, 200);
}

/// A `.` or `..` next to a backslash, raw or encoded, is 400 and never reaches the origin:
/// IIS and other Windows stacks take `\` for a separator, so `/pub/%5C..%5Csecret` would be
/// `/secret` there, outside the route's prefix.
#[test]
fn dot_segments_next_to_a_backslash_never_reach_the_origin() {
    let (o, n) = origin_and_node(SLICED);
    o.put("/pub/a.bin", Object::new(pattern(1000, 1)));
    for target in [
        "/pub/%5C..%5Csecret",
        "/pub/\\..\\secret",
        "/pub/..%5csecret",
    ] {
        let r = get(&n, target, "");
        assert_eq!(r.status, 400, "{target}");
    }
    assert_eq!(o.seen().len(), 0, "the origin was asked");
    // A backslash elsewhere is a name's byte, asked for encoded.
    o.put("/pub/a%5Cb.bin", Object::new(pattern(1000, 2)));
    let r = get(&n, "/pub/a\\b.bin", "");
    assert_eq!(r.status, 200, "{:?}", r.headers);
    assert!(r.body == pattern(1000, 2));
}

/// A request waits for a free origin connection as long as it would for an answer
/// (`read_timeout_ms`), then gets a 504: connections all held by long transfers (slow
/// readers of answers passed through, a trickling origin) must not hang every other miss
/// until they end. It used to wait without limit.
#[test]
fn waiting_for_a_free_origin_connection_ends_at_the_read_timeout() {
    let o = FaultOrigin::start();
    o.put("/long.bin", Object::new(pattern(2 << 20, 1)));
    o.put("/other.bin", Object::new(pattern(1000, 2)));
    o.set_timing(Timing {
        rate: 256 * 1024,
        ..Timing::default()
    });
    let d = common::tempdir();
    let n = node(
        d.path(),
        &[o.url()],
        "max_connections = 1\nread_timeout_ms = 1000",
        "slice_size = 0",
    );
    let addr = n.srv.addr;
    // The only connection: 2 MiB at 256 KiB/s, 8 s.
    let long = std::thread::spawn(move || {
        let mut c = common::Conn::new(addr);
        c.send(b"GET /long.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        c.response(false).map(|r| r.body.len())
    });
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let r = get(&n, "/other.bin", "");
    let took = t.elapsed();
    assert_eq!(r.status, 504, "{:?}", r.headers);
    assert!(took < Duration::from_secs(4), "answered after {took:?}");
    // (The line may reach the log file after the answer reached the client.)
    assert!(
        n.srv.wait_log(
            "no free connection (all max_connections busy) within 1000 ms",
            Duration::from_secs(5)
        ),
        "{}",
        n.srv.logs()
    );
    assert_eq!(long.join().unwrap().expect("the long answer"), 2 << 20);
}

/// Debian's nginx serving a directory, killed on drop.
struct Nginx {
    child: Child,
    port: u16,
    root: PathBuf,
    log: PathBuf,
}

impl Nginx {
    fn start(dir: &Path) -> Nginx {
        let bin = ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("nginx is not installed (scripts/deps.sh installs nginx-light)");
        let root = dir.join("www");
        std::fs::create_dir_all(root.join("short")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = dir.join("access.log");
        let conf = dir.join("nginx.conf");
        let tmp = dir.join("nginx-tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::write(
            &conf,
            format!(
                r#"daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 64; }}
http {{
    log_format origin '$request_method $uri "$http_range" "$http_if_none_match" $status';
    access_log {log} origin;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location /short/ {{ expires 1s; }}
    }}
}}
"#,
                tmp = tmp.display(),
                log = log.display(),
                root = root.display(),
            ),
        )
        .unwrap();
        let child = Command::new(bin)
            .args(["-p", tmp.to_str().unwrap(), "-c", conf.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nginx");
        let mut child = child;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(st)) = child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                panic!("nginx exited ({st}): {err}");
            }
            assert!(Instant::now() < deadline, "nginx did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nginx {
            child,
            port,
            root,
            log,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Access log lines for `uri` (method, uri, Range, If-None-Match, status).
    fn requests(&self, uri: &str) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.split(' ').nth(1) == Some(uri))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn debian_nginx_as_the_origin() {
    let d = common::tempdir();
    let ng = Nginx::start(d.path());
    let big = pattern(3 * SLICE + 1234, 8);
    std::fs::write(ng.root.join("big.bin"), &big).unwrap();
    let nd = common::tempdir();
    let n = node(nd.path(), &[ng.url()], "", SLICED);

    // A full download: one Range request per slice, nginx answers 206s.
    let r = get(&n, "/big.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert!(r.body == big);
    common::wait_until(Duration::from_secs(5), || {
        ng.requests("/big.bin").len() >= 4
    });
    let lines = ng.requests("/big.bin");
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains("\"bytes=") && l.ends_with(" 206")),
        "{lines:?}"
    );
    wait_committed(&n);
    let r = get(&n, "/big.bin", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == big);
    assert_eq!(ng.requests("/big.bin").len(), 4, "a hit asks nginx nothing");

    // A seek into an object never fetched: only the slice it needs.
    std::fs::write(ng.root.join("seek.bin"), &big).unwrap();
    let start = 2 * SLICE + 100;
    let r = try_get(
        &n,
        "/seek.bin",
        &format!("Range: bytes={start}-{}\r\n", start + 99),
    )
    .unwrap();
    assert_eq!(r.status, 206);
    assert!(r.body == big[start..start + 100]);
    // nginx logs a request once it has sent it all, which may be after our client got its
    // bytes: wait for the line.
    common::wait_until(Duration::from_secs(5), || {
        !ng.requests("/seek.bin").is_empty()
    });
    let lines = ng.requests("/seek.bin");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(&format!("bytes={}-{}", 2 * SLICE, 3 * SLICE - 1)),
        "{lines:?}"
    );

    // Revalidation with nginx's own ETag (expires 1s -> Cache-Control: max-age=1): 304.
    let small = pattern(2000, 9);
    std::fs::write(ng.root.join("short/s.txt"), &small).unwrap();
    let r = get(&n, "/short/s.txt", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    std::thread::sleep(Duration::from_millis(2100));
    let r = get(&n, "/short/s.txt", "");
    assert_eq!(r.status, 200);
    assert!(r.body == small);
    assert!(
        matches!(xcache(&r), "REVALIDATED" | "UPDATING"),
        "{}",
        xcache(&r)
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !ng
        .requests("/short/s.txt")
        .iter()
        .any(|l| l.ends_with(" 304"))
    {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            ng.requests("/short/s.txt")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The 304 answered a request carrying nginx's ETag (not an unconditional one).
    let reval = ng.requests("/short/s.txt");
    assert!(
        reval
            .iter()
            .any(|l| l.ends_with(" 304") && !l.contains("\"-\" 304")),
        "{reval:?}"
    );

    // A new version of the file (new size and mtime, so a new ETag): served whole once stale.
    std::thread::sleep(Duration::from_millis(1100));
    let v2 = pattern(3000, 10);
    std::fs::write(ng.root.join("short/s.txt"), &v2).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = get(&n, "/short/s.txt", "");
        assert_eq!(r.status, 200);
        assert!(
            r.body == small || r.body == v2,
            "mixed versions: {} bytes",
            r.body.len()
        );
        if r.body == v2 {
            break;
        }
        assert!(Instant::now() < deadline, "the new version never arrived");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A response with its multipart boundary replaced by a fixed word (boundaries are random).
fn normalized(r: &Response) -> (u16, Option<String>, Option<String>, Vec<u8>) {
    let ctype = r.header("Content-Type").map(str::to_string);
    let boundary = ctype
        .as_deref()
        .and_then(|t| t.split_once("boundary="))
        .map(|(_, b)| b.to_string());
    let (ctype, body) = match &boundary {
        Some(b) => {
            let body = replace_all(&r.body, b.as_bytes(), b"BOUNDARY");
            assert!(
                r.body.is_empty() || body != r.body,
                "the boundary frames the body"
            );
            (ctype.map(|t| t.replace(b.as_str(), "BOUNDARY")), body)
        }
        None => (ctype, r.body.clone()),
    };
    if let Some(l) = r.header("Content-Length") {
        if !r.body.is_empty() {
            assert_eq!(
                l.parse::<usize>().ok(),
                Some(r.body.len()),
                "Content-Length"
            );
        }
    }
    (
        r.status,
        ctype,
        r.header("Content-Range").map(str::to_string),
        body,
    )
}

fn replace_all(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

/// Several ranges of a cached object (whole, and in slices, some of them not fetched yet) get
/// the answer our static server gives for the same file: 206 multipart/byteranges with the
/// same parts, and the same fallbacks (overlapping or too many ranges: 200; some unsatisfiable:
/// the others; none: 416; If-Range of another version: 200), for GET and HEAD.
#[test]
fn several_ranges_of_a_cached_object_are_answered_like_a_static_file() {
    let www = common::tempdir();
    let len = 4 * SLICE + 500;
    let body = pattern(len, 12);
    std::fs::write(www.path().join("m.bin"), &body).unwrap();
    let origin = Server::root(www.path(), &[]);
    let s = SLICE;
    let mut many: Vec<String> = (0..17)
        .map(|i| format!("{}-{}", i * 10, i * 10 + 1))
        .collect();
    let seventeen = format!("bytes={}", many.join(","));
    many.truncate(16);
    let sixteen = format!("bytes={}", many.join(","));
    let asks: Vec<(&str, Vec<String>)> = vec![
        ("GET", vec!["Range: bytes=0-9,100-109".into()]),
        // The last slice (not fetched yet), one part across two slices, one in the first.
        (
            "GET",
            vec![format!(
                "Range: bytes={}-{},{}-{},10-19",
                3 * s + 5,
                3 * s + 10,
                s - 5,
                s + 5
            )],
        ),
        (
            "GET",
            vec![format!("Range: bytes=-10,{}-{}", 2 * s, 2 * s + 3)],
        ),
        ("HEAD", vec!["Range: bytes=0-9,100-109".into()]),
        ("GET", vec!["Range: bytes=0-9,5-20".into()]),
        ("GET", vec![format!("Range: {sixteen}")]),
        ("GET", vec![format!("Range: {seventeen}")]),
        ("GET", vec![format!("Range: bytes=0-0,{len}-")]),
        ("GET", vec![format!("Range: bytes={len}-,{}-", len + 5)]),
        (
            "GET",
            vec!["Range: bytes=0-1,4-5".into(), "If-Range: \"other\"".into()],
        ),
    ];
    for slice_size in [0, SLICE] {
        let d = common::tempdir();
        let n = node(
            d.path(),
            &[format!("http://{}", origin.addr)],
            "",
            &format!("slice_size = {slice_size}"),
        );
        // Twice: first while slices are still missing, then all from the cache.
        for round in 0..2 {
            wait_committed(&n);
            for (method, headers) in &asks {
                let h: Vec<(&str, &str)> = headers
                    .iter()
                    .map(|l| l.split_once(": ").expect("header line"))
                    .collect();
                let want = common::request(origin.addr, method, "/m.bin", &h);
                let got = common::request(n.srv.addr, method, "/m.bin", &h);
                let what = format!("slice_size {slice_size}, round {round}: {method} {headers:?}");
                let (g, w) = (normalized(&got), normalized(&want));
                assert_eq!((g.0, &g.1, &g.2), (w.0, &w.1, &w.2), "{what}");
                assert!(
                    g.3 == w.3,
                    "{what}: bodies differ ({} and {} bytes)",
                    g.3.len(),
                    w.3.len()
                );
                if want.status == 206 && want.header("Content-Range").is_none() {
                    assert!(
                        got.header("Content-Type")
                            .is_some_and(|t| t.starts_with("multipart/byteranges; boundary=")),
                        "{what}"
                    );
                }
                if *method == "GET" && round == 1 && got.status < 300 {
                    assert_eq!(xcache(&got), "HIT", "{what}");
                }
            }
        }
        wait_committed(&n);
        let r = get(&n, "/m.bin", "");
        assert_eq!((r.status, xcache(&r)), (200, "HIT"));
        assert!(r.body == body);
    }
}

/// An origin that answers each user (and anonymous requests) differently: the node forwards
/// each request's Authorization, never serves one user's answer to another nor a stored
/// anonymous answer to a user, stores nothing an authorized answer does not allow to share,
/// and shares what does (`public`).
#[test]
fn answers_to_authorized_requests_are_never_served_to_anyone_else() {
    let (o, n) = origin_and_node(SLICED);
    let len = 2 * SLICE + 100; // three slices
    let users = [("Bearer alice", 21u8), ("Bearer bob", 22u8)];
    let cc = "max-age=600";
    for (auth, seed) in users {
        o.put_for(
            "/me",
            Some(auth),
            Object::new(pattern(len, seed)).cache_control(cc),
        );
    }
    o.put_for(
        "/me",
        None,
        Object::new(b"log in first\n".to_vec())
            .status(401)
            .cache_control(cc),
    );
    let as_user = |auth: &str| format!("Authorization: {auth}\r\n");
    for round in 0..2 {
        for (auth, seed) in users {
            let r = try_get(&n, "/me", &as_user(auth)).expect("answer");
            assert_eq!(
                (r.status, xcache(&r)),
                (200, "BYPASS"),
                "{auth} round {round}"
            );
            assert!(
                r.body == pattern(len, seed),
                "{auth} got someone else's answer"
            );
        }
        // The anonymous 401 has a lifetime of its own: stored, then a hit.
        let r = get(&n, "/me", "");
        let want = if round == 0 { "MISS" } else { "HIT" };
        assert_eq!(
            (r.status, xcache(&r)),
            (401, want),
            "anonymous, round {round}"
        );
        assert_eq!(r.body, b"log in first\n");
    }
    // Every origin request carried the credentials of the client it was made for.
    let seen: Vec<_> = o.seen().into_iter().filter(|s| s.path == "/me").collect();
    for auth in [Some("Bearer alice"), Some("Bearer bob"), None] {
        assert!(
            seen.iter().any(|s| s.header("authorization") == auth),
            "{auth:?}: {seen:?}"
        );
    }
    // Concurrent requests of both users for an object being fetched: no collapsing across them.
    o.set_timing(Timing {
        head_delay: Duration::from_millis(200),
        ..Timing::default()
    });
    let addr = n.srv.addr;
    let clients: Vec<_> = (0..6)
        .map(|i| {
            let (auth, seed) = users[i % 2];
            std::thread::spawn(move || {
                let r = common::request(addr, "GET", "/me", &[("Authorization", auth)]);
                (auth, r.status, r.body == pattern(len, seed))
            })
        })
        .collect();
    for c in clients {
        let (auth, status, own) = c.join().unwrap();
        assert_eq!(status, 200, "{auth}");
        assert!(own, "{auth} got someone else's answer");
    }
    o.set_timing(Timing::default());
    wait_committed(&n);
    assert_eq!(
        cache_files(&n.cache).1,
        1,
        "an answer for credentials was stored (only the anonymous 401 may be)"
    );

    // A stored anonymous answer (no `public`) is not one for a user, and the user's request
    // neither replaces nor drops it.
    o.put("/page", Object::new(pattern(1000, 23)).cache_control(cc));
    o.put_for(
        "/page",
        Some("Bearer alice"),
        Object::new(pattern(1000, 24)).cache_control(cc),
    );
    assert_eq!(xcache(&get(&n, "/page", "")), "MISS");
    wait_committed(&n);
    let r = try_get(&n, "/page", &as_user("Bearer alice")).unwrap();
    assert_eq!((r.status, xcache(&r)), (200, "BYPASS"));
    assert!(r.body == pattern(1000, 24), "alice got the anonymous page");
    let r = get(&n, "/page", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == pattern(1000, 23));

    // An answer that says `public` (or s-maxage, or must-revalidate) may be shared: stored
    // once, then a hit for everyone, users included.
    for (p, cc) in [
        ("/pub", "public, max-age=600"),
        ("/smax", "s-maxage=600"),
        ("/mustrv", "must-revalidate, max-age=600"),
    ] {
        o.put_for(
            p,
            Some("Bearer alice"),
            Object::new(pattern(len, 25)).cache_control(cc),
        );
        o.put_for(p, None, Object::new(b"no".to_vec()).status(401));
        let r = try_get(&n, p, &as_user("Bearer alice")).unwrap();
        assert_eq!((r.status, xcache(&r)), (200, "MISS"), "{p}");
        assert!(r.body == pattern(len, 25));
        wait_committed(&n);
        let asked = o.requests(p);
        for extra in [
            String::new(),
            as_user("Bearer bob"),
            as_user("Bearer alice"),
        ] {
            let r = try_get(&n, p, &extra).unwrap();
            assert_eq!((r.status, xcache(&r)), (200, "HIT"), "{p} {extra:?}");
            assert!(r.body == pattern(len, 25));
        }
        assert_eq!(o.requests(p), asked, "{p}: hits ask the origin nothing");
    }

    // proxy-revalidate is not among them (RFC 9111 §3.5): each user keeps getting their own.
    let stored = cache_files(&n.cache).1;
    let cc = "proxy-revalidate, max-age=600";
    for (auth, seed) in users {
        o.put_for(
            "/proxyrv",
            Some(auth),
            Object::new(pattern(len, seed)).cache_control(cc),
        );
    }
    for round in 0..2 {
        for (auth, seed) in users {
            let r = try_get(&n, "/proxyrv", &as_user(auth)).unwrap();
            assert_eq!((r.status, xcache(&r)), (200, "BYPASS"), "{auth} {round}");
            assert!(
                r.body == pattern(len, seed),
                "{auth} got someone else's answer"
            );
        }
    }
    assert!(
        o.requests("/proxyrv") >= 4,
        "every request reached the origin"
    );
    wait_committed(&n);
    assert_eq!(
        cache_files(&n.cache).1,
        stored,
        "nothing of /proxyrv stored"
    );
}

/// An answer that may not be stored, for an object of several slices: the client asked for the
/// whole object and gets it whole (200), not the first slice's 206 the node asked for.
#[test]
fn a_private_object_larger_than_a_slice_is_passed_through_whole() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(3 * SLICE, 26);
    for (p, cc) in [
        ("/private", "private, max-age=60"),
        ("/nostore", "no-store"),
    ] {
        o.put(p, Object::new(body.clone()).cache_control(cc));
        for _ in 0..2 {
            let r = get(&n, p, "");
            assert_eq!((r.status, xcache(&r)), (200, "BYPASS"), "{p}");
            assert!(r.body == body, "{p}: {} bytes", r.body.len());
            assert_eq!(r.header("Content-Range"), None, "{p}");
        }
    }
    assert_eq!(cache_files(&n.cache).1, 0);

    // An object within one slice: the first slice's 206 held all of it, so it is passed
    // through as the 200 it stands for, and the origin is asked once per request, the first
    // one included (HEAD too: the length its GET would have).
    let small = pattern(SLICE / 2, 29);
    o.put(
        "/small",
        Object::new(small.clone()).cache_control("no-store"),
    );
    for i in 1..=3 {
        let r = get(&n, "/small", "");
        assert_eq!((r.status, xcache(&r)), (200, "BYPASS"));
        assert!(r.body == small, "{} bytes", r.body.len());
        assert_eq!(r.header("Content-Range"), None);
        assert_eq!(r.header("Content-Length"), Some(&*small.len().to_string()));
        assert_eq!(
            o.requests("/small"),
            i,
            "origin requests after {i} requests"
        );
    }
    o.put("/head", Object::new(small.clone()).cache_control("private"));
    let r = common::request(n.srv.addr, "HEAD", "/head", &[]);
    assert_eq!((r.status, r.header("Content-Range")), (200, None));
    assert_eq!(r.header("Content-Length"), Some(&*small.len().to_string()));
    assert!(r.body.is_empty());
    assert_eq!(o.requests("/head"), 1);
}

/// Requests with Authorization for an object whose answers may not be shared: after the first
/// (its first slice, then the object itself), each asks the origin once, whoever the user;
/// what anonymous requests get is not changed by it (stored and hit).
#[test]
fn requests_with_authorization_for_a_private_object_ask_the_origin_once_each() {
    let (o, n) = origin_and_node(SLICED);
    let len = 3 * SLICE + 10;
    for (auth, seed) in [("Bearer alice", 30u8), ("Bearer bob", 31u8)] {
        o.put_for(
            "/acct",
            Some(auth),
            Object::new(pattern(len, seed)).cache_control("max-age=600"),
        );
    }
    o.put(
        "/acct",
        Object::new(pattern(len, 32)).cache_control("max-age=600"),
    );
    let r = try_get(
        &n,
        "/acct",
        "Authorization: Bearer alice
",
    )
    .unwrap();
    assert_eq!((r.status, xcache(&r)), (200, "BYPASS"));
    assert!(r.body == pattern(len, 30));
    let first = o.requests("/acct");
    assert_eq!(first, 2, "the first slice, then the object");
    for (i, (auth, seed)) in [
        ("Bearer bob", 31u8),
        ("Bearer alice", 30),
        ("Bearer bob", 31),
    ]
    .into_iter()
    .enumerate()
    {
        let r = try_get(&n, "/acct", &format!("Authorization: {auth}\r\n")).unwrap();
        assert_eq!((r.status, xcache(&r)), (200, "BYPASS"), "{auth}");
        assert!(r.body == pattern(len, seed), "{auth} got another answer");
        assert_eq!(
            o.requests("/acct"),
            first + i + 1,
            "{auth}: one origin request"
        );
    }
    // Anonymous requests are another matter: stored, then hits.
    let r = get(&n, "/acct", "");
    assert_eq!((r.status, xcache(&r)), (200, "MISS"));
    assert!(r.body == pattern(len, 32));
    wait_committed(&n);
    let r = get(&n, "/acct", "");
    assert_eq!((r.status, xcache(&r)), (200, "HIT"));
    assert!(r.body == pattern(len, 32));
    assert_eq!(
        cache_files(&n.cache).1,
        4,
        "the anonymous object's four slices"
    );
}

/// The object changes at the origin while a slice of the old version is still being filled: a
/// response that joined that fill stops at the first new-version slice, and the old fill, which
/// ends after that, must not leave its slice behind to be served with the new version's.
#[test]
fn a_new_version_while_the_old_one_still_fills_is_served_whole_next() {
    let (o, n) = origin_and_node(SLICED);
    let v1 = pattern(4 * SLICE, 27);
    let v2 = pattern(4 * SLICE, 28);
    o.put("/v.bin", Object::version(v1.clone(), 1));
    // Slice 0 of v1 takes ~0.8 s to arrive (16 KiB chunks 200 ms apart).
    o.set_timing(Timing {
        chunk_delay: Duration::from_millis(200),
        ..Timing::default()
    });
    let r = try_get(&n, "/v.bin", "Range: bytes=0-999\r\n").expect("the first bytes");
    assert_eq!(r.status, 206);
    assert!(r.body == v1[..1000]);
    // v2 now, answered at once; the v1 fill of slice 0 is still running.
    o.put("/v.bin", Object::version(v2.clone(), 2));
    o.set_timing(Timing::default());
    match try_get(&n, "/v.bin", "") {
        Ok(r) => assert!(
            r.body == v1 || r.body == v2,
            "a complete body is one version"
        ),
        Err(e) => assert!(e.to_string().contains("body ended after"), "{e}"),
    }
    let r = get(&n, "/v.bin", "");
    assert_eq!(r.status, 200);
    assert!(r.body == v2, "the next response is not v2 whole");
    assert_eq!(r.header("ETag"), Some("\"v2\""));
}

/// A chunked body: its bytes and whether the last chunk (`0\r\n\r\n`) came.
fn dechunk(mut raw: &[u8]) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    loop {
        let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") else {
            return (body, false);
        };
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..eol]).unwrap().trim(), 16)
            .expect("chunk size");
        raw = &raw[eol + 2..];
        if size == 0 {
            return (body, raw.starts_with(b"\r\n"));
        }
        if raw.len() < size + 2 {
            body.extend_from_slice(&raw[..size.min(raw.len())]);
            return (body, false);
        }
        body.extend_from_slice(&raw[..size]);
        assert_eq!(&raw[size..size + 2], b"\r\n", "chunk framing");
        raw = &raw[size + 2..];
    }
}

/// Head and the rest of what a raw request got until the node closed (or reset) the
/// connection: (head, bytes after it, reset).
fn raw_exchange(n: &common::cache::Node, request: &str) -> (String, Vec<u8>, bool) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(n.srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    let reset = loop {
        match s.read(&mut buf) {
            Ok(0) => break false,
            Ok(k) => got.extend_from_slice(&buf[..k]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(e) => panic!("{request:?}: {e}"),
        }
    };
    let end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&got[..end + 4]).to_string();
    (head, got[end + 4..].to_vec(), reset)
}

/// An origin answer of unknown length (chunked) is passed through so that its end stays
/// visible: chunked to an HTTP/1.1 client (the connection stays usable; a body that broke off
/// lacks the last chunk), and to an HTTP/1.0 client a body that broke off ends in a reset,
/// never in the clean close that ends a complete one.
#[test]
fn a_body_of_unknown_length_keeps_its_end_visible_when_passed_through() {
    let (o, n) = origin_and_node(SLICED);
    let body = pattern(300_000, 4);
    o.put("/ch.bin", Object::new(body.clone()));
    o.fault("/ch.bin", Fault::Chunked(None));
    o.put("/cut.bin", Object::new(body.clone()));
    o.fault("/cut.bin", Fault::Chunked(Some(100_000)));

    // Whole, then a second request on the same connection.
    let (head, rest, reset) = raw_exchange(
        &n,
        "GET /ch.bin HTTP/1.1\r\nHost: t\r\n\r\nGET /ch.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert!(!reset);
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("transfer-encoding: chunked"), "{head}");
    assert!(!lower.contains("content-length"), "{head}");
    assert!(lower.contains("x-cache: bypass"), "{head}");
    let (got, complete) = dechunk(&rest);
    assert!(complete, "the last chunk is missing");
    assert!(got == body, "the chunked body differs");
    let second = rest
        .windows(9)
        .position(|w| w == b"HTTP/1.1 ")
        .expect("the second answer on the same connection");
    let (got, complete) = dechunk(
        &rest[second..][rest[second..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap()
            + 4..],
    );
    assert!(complete && got == body, "the second answer");

    // A HEAD keeps the connection (no body to frame): the request after it on the same
    // connection is answered (it was closed, that request dropped).
    let (head, rest, _) = raw_exchange(
        &n,
        "HEAD /ch.bin HTTP/1.1\r\nHost: t\r\n\r\nGET /ch.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    let lower = head.to_ascii_lowercase();
    assert!(!lower.contains("connection: close"), "{head}");
    assert!(rest.starts_with(b"HTTP/1.1 200 "), "the GET after the HEAD");
    let after = &rest[rest.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
    let (got, complete) = dechunk(after);
    assert!(complete && got == body, "the GET after the HEAD");

    // Broken off: HTTP/1.1 misses the last chunk.
    let (_, rest, _) = raw_exchange(
        &n,
        "GET /cut.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    let (got, complete) = dechunk(&rest);
    assert!(!complete, "a body that broke off ended with the last chunk");
    assert!(got.len() <= 100_000 && body.starts_with(&got));
    // HTTP/1.0: reset, not a clean close.
    let (head, rest, reset) = raw_exchange(&n, "GET /cut.bin HTTP/1.0\r\n\r\n");
    assert!(
        !head.to_ascii_lowercase().contains("transfer-encoding"),
        "{head}"
    );
    assert!(reset, "a clean close after {} bytes", rest.len());
    // Nothing of either was stored.
    assert_eq!(cache_files(&n.cache).1, 0);
}

/// What is forwarded of an origin answer: never a field its `Connection` names (RFC 9110
/// §7.6.1), stored or passed through, and no Content-Length on a 204 or a 304 (§8.6).
#[test]
fn connection_named_fields_and_bodiless_lengths_are_not_forwarded() {
    let (o, n) = origin_and_node(SLICED);
    for (p, obj) in [
        ("/kept.bin", Object::new(pattern(1000, 1))),
        (
            "/passed.bin",
            Object::new(pattern(1000, 2)).cache_control("no-store"),
        ),
    ] {
        o.put(
            p,
            obj.header("Connection", "X-Internal-Token")
                .header("X-Internal-Token", "secret"),
        );
        for _ in 0..2 {
            let r = get(&n, p, "");
            assert_eq!(r.status, 200);
            assert!(r.header("X-Internal-Token").is_none(), "{p} {}", xcache(&r));
            wait_committed(&n);
        }
    }
    let r = get(&n, "/kept.bin", "");
    assert_eq!(xcache(&r), "HIT");
    o.put("/empty", Object::new(Vec::new()).status(204));
    let r = get(&n, "/empty", "");
    assert_eq!((r.status, xcache(&r)), (204, "BYPASS"));
    assert!(r.header("Content-Length").is_none(), "{:?}", r.headers);
    // The first answer marks /passed.bin for pass-through; a revalidation then gets the
    // origin's own 304, passed through.
    let r = get(&n, "/passed.bin", "If-None-Match: \"v1\"\r\n");
    assert_eq!((r.status, xcache(&r)), (304, "BYPASS"));
    assert!(r.header("Content-Length").is_none(), "{:?}", r.headers);
}

/// A redirect to the origin's own address (or its Host) is rewritten to the path it names, so
/// clients resolve it against this node (nginx `proxy_redirect default`), stored or passed
/// through; a redirect elsewhere is kept as it is.
#[test]
fn redirects_to_the_origin_itself_are_made_relative_to_the_node() {
    let (o, n) = origin_and_node(SLICED);
    let own = format!("{}/dir/", o.url());
    let upper = format!("{}/up/", o.url().to_ascii_uppercase());
    o.put(
        "/dir",
        Object::new(Vec::new()).status(301).header("Location", &own),
    );
    o.put(
        "/up",
        Object::new(Vec::new())
            .status(302)
            .header("Location", &upper),
    );
    o.put(
        "/away",
        Object::new(Vec::new())
            .status(302)
            .header("Location", "http://elsewhere.example/x"),
    );
    o.put(
        "/passed",
        Object::new(Vec::new())
            .status(302)
            .header("Location", &format!("{}/p?q=1", o.url()))
            .cache_control("no-store"),
    );
    // A path on the node starting `//` or `/\` would be another site to a browser (an open
    // redirect): such a Location stays absolute, on the origin.
    let other_site = format!("{}//evil.example/x/", o.url());
    let backslash = format!("{}/\\evil.example/x/", o.url());
    // Browsers drop tabs from a URL before reading it (WHATWG URL): `/<TAB>/host` is `//host`.
    let tab = format!("{}/\t/evil.example/x/", o.url());
    for (path, location) in [
        ("/slashes", &other_site),
        ("/backslash", &backslash),
        ("/tab", &tab),
    ] {
        o.put(
            path,
            Object::new(Vec::new())
                .status(301)
                .header("Location", location),
        );
    }
    for (path, want, status) in [
        ("/dir", "/dir/", 301),
        ("/up", "/up/", 302),
        ("/away", "http://elsewhere.example/x", 302),
        ("/passed", "/p?q=1", 302),
        ("/slashes", other_site.as_str(), 301),
        ("/backslash", backslash.as_str(), 301),
        ("/tab", tab.as_str(), 301),
    ] {
        for _ in 0..2 {
            let r = get(&n, path, "");
            assert_eq!(r.status, status, "{path}");
            assert_eq!(r.header("Location"), Some(want), "{path} ({})", xcache(&r));
            wait_committed(&n);
        }
    }
    assert_eq!(xcache(&get(&n, "/dir", "")), "HIT");

    // The Host sent to the origin names it too, with or without its scheme's default port.
    let o = FaultOrigin::start();
    let n = common::cache::temp_node(&[o.url()], "host = \"bucket.example\"", SLICED);
    for (path, location) in [
        ("/bare", "http://bucket.example/bare/"),
        ("/port", "http://Bucket.example:80/port/"),
    ] {
        o.put(
            path,
            Object::new(Vec::new())
                .status(301)
                .header("Location", location),
        );
        let r = get(&n, path, "");
        assert_eq!(
            r.header("Location"),
            Some(&*format!("{path}/")),
            "{location}"
        );
    }
}

/// An answer of unknown length (chunked, no Content-Length) is stored when it ends within a
/// slice (1 MiB on a volume of whole objects) and then served with its length; a longer one is
/// passed through whole; one that breaks off is a clean error and the next request retries.
#[test]
fn a_short_answer_of_unknown_length_is_stored() {
    for vol in ["slice_size = 0", SLICED] {
        let (o, n) = origin_and_node(vol);
        let small = pattern(50_000, 6);
        o.put("/small.json", Object::new(small.clone()));
        o.fault("/small.json", Fault::Chunked(None));
        let r = get(&n, "/small.json", "");
        assert_eq!((r.status, xcache(&r)), (200, "MISS"), "{vol}");
        assert_eq!(r.header("Content-Length"), Some("50000"), "{vol}");
        assert!(r.body == small, "{vol}");
        wait_committed(&n);
        let r = get(&n, "/small.json", "Range: bytes=100-199\r\n");
        assert_eq!((r.status, xcache(&r)), (206, "HIT"), "{vol}");
        assert!(r.body == small[100..200], "{vol}");
        assert_eq!(o.requests("/small.json"), 1, "{vol}");

        let cut = pattern(40_000, 7);
        o.put("/cut.json", Object::new(cut.clone()));
        o.fault_times("/cut.json", Fault::Chunked(Some(20_000)), 1);
        let r = try_get(&n, "/cut.json", "");
        assert_clean_failure(&format!("{vol}: chunked body broken off"), r);
        let r = get(&n, "/cut.json", "");
        assert_eq!((r.status, xcache(&r)), (200, "MISS"), "{vol}: retry");
        assert!(r.body == cut, "{vol}");
    }
    // Longer than a slice: passed through, complete, not stored.
    let (o, n) = origin_and_node(SLICED);
    let big = pattern(3 * SLICE, 8);
    o.put("/big.json", Object::new(big.clone()));
    o.fault("/big.json", Fault::Chunked(None));
    for _ in 0..2 {
        let (head, rest, _) = raw_exchange(
            &n,
            "GET /big.json HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        );
        assert!(
            head.to_ascii_lowercase().contains("x-cache: bypass"),
            "{head}"
        );
        let (got, complete) = dechunk(&rest);
        assert!(complete && got == big);
    }
    assert_eq!(cache_files(&n.cache).1, 0);
}

/// An origin request that fails after it went out (no head within the read timeout, a head
/// that is not an answer) is logged at WARN with its reason, not only counted.
#[test]
fn origin_failures_after_sending_are_logged_with_their_reason() {
    let (o, n) = origin_and_node("slice_size = 0");
    o.put("/w.bin", Object::new(pattern(1000, 1)));
    o.fault_times(
        "/w.bin",
        Fault::Raw(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello".to_vec(),
        ),
        1,
    );
    assert_eq!(get(&n, "/w.bin", "").status, 502);
    assert!(
        n.srv
            .wait_log("origin request failed", Duration::from_secs(5)),
        "{}",
        n.srv.logs()
    );
    let logs = n.srv.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("origin request failed"))
        .unwrap_or_default();
    assert!(line.contains("WARN") && line.contains(&o.url()), "{line}");
    // The line names what was asked (tester: nothing told which object failed).
    assert!(line.contains("request=GET /w.bin"), "{line}");
    // The next request is answered.
    assert_eq!(get(&n, "/w.bin", "").status, 200);
    // A body that fails names its request too, with the slice's range.
    let (o, n) = origin_and_node(SLICED);
    o.put("/b.bin", Object::new(pattern(3 * SLICE, 2)));
    o.fault_times("/b.bin", Fault::ResetAfter(1000), 1);
    let _ = try_get(&n, "/b.bin", "");
    assert!(
        n.srv.wait_log("origin body failed", Duration::from_secs(5)),
        "{}",
        n.srv.logs()
    );
    let logs = n.srv.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("origin body failed"))
        .unwrap_or_default();
    assert!(
        line.contains(&format!("request=GET /b.bin bytes=0-{}", SLICE - 1)),
        "{line}"
    );
}

/// Idle origin connections are closed once they expire (30 s), also when no request comes to
/// take them.
#[test]
fn idle_origin_connections_are_closed_when_they_expire() {
    let (o, n) = origin_and_node("slice_size = 0");
    o.put("/i.bin", Object::new(pattern(1000, 1)));
    assert_eq!(get(&n, "/i.bin", "").status, 200);
    let open = || {
        series(
            &metrics(&n),
            "contentserver_origin_connections{origin=\"origin\"}",
        )
    };
    assert_eq!(open(), 1.0);
    let t = Instant::now();
    while open() > 0.0 && t.elapsed() < Duration::from_secs(45) {
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(open(), 0.0, "still open after {:?}", t.elapsed());
    assert!(t.elapsed() >= Duration::from_secs(29), "{:?}", t.elapsed());
}

/// An origin that sends more after a complete answer (a stray response, on a keep-alive
/// connection with no request out): the connection is closed, not reused, and it is said at
/// warn, as nginx says "upstream sent more data than specified". The next request gets its own
/// answer. (Bytes that arrive only after the next request went out cannot be told from its
/// answer, in HTTP/1.1, by us or nginx: the warning is what names the origin to fix.)
#[test]
fn bytes_after_a_complete_answer_close_the_origin_connection_with_a_warning() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for c in listener.incoming() {
            let Ok(mut c) = c else { return };
            std::thread::spawn(move || {
                let _ = c.set_nodelay(true);
                let mut buf = Vec::new();
                let mut b = [0u8; 4096];
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match c.read(&mut b) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&b[..n]),
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0) + 4;
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end);
                    let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                    let body = format!("ok {path}");
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nCache-Control: max-age=600\r\nETag: \"v\"\r\n\r\n{body}",
                        body.len()
                    );
                    if c.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                    if path.starts_with("/early") {
                        std::thread::sleep(Duration::from_millis(20));
                        let _ = c.write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nCache-Control: max-age=600\r\n\r\nPOISONED",
                        );
                    }
                }
            });
        }
    });
    let d = common::tempdir();
    let n = node(d.path(), &[url], "", "");
    assert_eq!(get(&n, "/early", "").body, b"ok /early");
    assert!(
        n.srv.wait_log(
            "origin sent bytes after a complete answer",
            Duration::from_secs(5)
        ),
        "{}",
        n.srv.logs()
    );
    let next = get(&n, "/next", "");
    assert_eq!(next.body, b"ok /next", "{}", n.srv.logs());
    assert_eq!(get(&n, "/next", "").body, b"ok /next", "stored right");
}

/// An answer head over the origin client's 32 KiB limit is refused (502, not stored) every
/// time, on a new connection and on a reused one alike; one under it is stored and served with
/// its fields. (Refused by hyper's read buffer alone, a head of 66 KB passed or not by how its
/// reads fell: on a fresh connection yes, on a reused one no.)
#[test]
fn an_answer_head_over_the_limit_is_refused_every_time() {
    let (o, n) = origin_and_node("");
    let big = "x".repeat(40_000);
    let fits = "y".repeat(24_000);
    for i in 0..4 {
        o.put(
            &format!("/big{i}.bin"),
            Object::new(pattern(5000, i)).header("X-Big", &big),
        );
        o.put(
            &format!("/fits{i}.bin"),
            Object::new(pattern(5000, i)).header("X-Fits", &fits),
        );
    }
    for i in 0..4 {
        let r = get(&n, &format!("/fits{i}.bin"), "");
        assert_eq!((r.status, xcache(&r)), (200, "MISS"), "fits{i}");
        assert_eq!(r.header("X-Fits"), Some(fits.as_str()));
        assert!(r.body == pattern(5000, i));
        let r = get(&n, &format!("/big{i}.bin"), "");
        assert_eq!(r.status, 502, "big{i}: {}", n.srv.logs());
    }
    assert!(n.srv.logs().contains("is over the 32 KiB limit"));
    let r = get(&n, "/big0.bin", "");
    assert_eq!(r.status, 502);
    assert_eq!(o.requests("/big0.bin"), 2, "not stored: asked again");
}
