//! The origin client (`content_server::origin`) against the in-process fault origin over real
//! sockets: bodies and ranges, failover on connect errors only, timeouts, truncation, HTTPS
//! with a test CA, Host/SNI overrides, the connection cap and keep-alive reuse.

mod common;

use common::origin::{pattern, refused_url, Fault, FaultOrigin, Object, TestCa, Timing};
use content_server::config::{self, Config};
use content_server::metrics::Metrics;
use content_server::origin::{Method, Origin, OriginError, OriginRequest, Origins, Validators};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn client(o: config::Origin) -> (Arc<Origin>, Metrics) {
    let mut cfg = Config::for_root("/");
    cfg.origins = vec![o];
    let m = Metrics::new(&[], 0);
    let origins = Origins::from_config(&cfg, &m).expect("origin client");
    (origins.get("up").expect("origin up"), m)
}

fn plain(servers: &[String]) -> config::Origin {
    config::Origin::new("up", servers.to_vec())
}

/// An origin holding `body` at `path`, and a client for it alone.
fn serving(path: &str, body: &[u8]) -> (FaultOrigin, Arc<Origin>, Metrics) {
    let o = FaultOrigin::start();
    o.put(path, Object::new(body.to_vec()));
    let (up, m) = client(plain(&[o.url()]));
    (o, up, m)
}

fn count(m: &Metrics, code: &str) -> u64 {
    m.origin_requests_total
        .with_label_values(&["up", code])
        .get()
}

fn range(path: &str, a: u64, b: u64) -> OriginRequest {
    OriginRequest {
        range: Some((a, b)),
        ..OriginRequest::get(path)
    }
}

#[tokio::test]
async fn full_object_range_validators_and_metrics() {
    let body = pattern(100_000, 1);
    let (o, up, m) = serving("/a.bin", &body);

    let mut r = up.fetch(OriginRequest::get("/a.bin")).await.expect("fetch");
    assert_eq!(r.status, 200);
    assert_eq!(r.expected, Some(100_000));
    assert_eq!(r.bytes().await.expect("body"), body);
    let v = r.validators();
    assert_eq!(v.etag.as_deref(), Some("\"v1\""));
    assert_eq!(v.size, Some(100_000));
    assert!(v.last_modified.is_some());

    let mut r = up.fetch(range("/a.bin", 1000, 1999)).await.expect("range");
    assert_eq!(r.status, 206);
    let cr = r.content_range().expect("Content-Range");
    assert_eq!((cr.start, cr.end, cr.total), (1000, 1999, Some(100_000)));
    assert_eq!(r.bytes().await.unwrap(), &body[1000..2000]);
    assert!(Validators::of(206, &r.headers).same_version(&v));
    assert_eq!(
        o.ranges("/a.bin"),
        vec![None, Some("bytes=1000-1999".into())]
    );

    let mut r = up
        .fetch(OriginRequest::get("/missing"))
        .await
        .expect("404 is an answer");
    assert_eq!(r.status, 404);
    r.bytes().await.unwrap();
    let mut r = up
        .fetch(OriginRequest {
            method: Method::Head,
            ..OriginRequest::get("/a.bin")
        })
        .await
        .unwrap();
    assert_eq!((r.status, r.expected), (200, Some(0)));
    assert!(r.chunk().await.unwrap().is_none(), "HEAD has no body");
    assert_eq!(o.seen().last().unwrap().method, "HEAD");

    assert_eq!(count(&m, "2xx"), 3);
    assert_eq!(count(&m, "4xx"), 1);
    assert_eq!(count(&m, "error"), 0);
    let received = m
        .origin_received_bytes_total
        .with_label_values(&["up"])
        .get();
    assert_eq!(
        received,
        100_000 + 1000 + 10,
        "body bytes of 200 + 206 + 404"
    );
    let hist = m.origin_request_duration_seconds.with_label_values(&["up"]);
    assert_eq!(hist.get_sample_count(), 4);
}

#[tokio::test]
async fn conditional_requests_get_304() {
    let (o, up, _m) = serving("/c", &pattern(10, 2));
    let mut r = up
        .fetch(OriginRequest {
            if_none_match: Some("\"v1\"".into()),
            ..OriginRequest::get("/c")
        })
        .await
        .unwrap();
    assert_eq!(r.status, 304);
    assert!(r.chunk().await.unwrap().is_none());
    o.put("/c", Object::version(pattern(10, 3), 2));
    let r = up
        .fetch(OriginRequest {
            if_none_match: Some("\"v1\"".into()),
            ..OriginRequest::get("/c")
        })
        .await
        .unwrap();
    assert_eq!(r.status, 200, "a changed ETag answers the new version");
    let seen = o.seen();
    assert_eq!(seen[0].header("if-none-match"), Some("\"v1\""));
}

#[tokio::test]
async fn refused_server_fails_over_to_the_next() {
    let o = FaultOrigin::start();
    o.put("/x", Object::new(b"hello".to_vec()));
    let dead = refused_url();
    let (up, m) = client(plain(&[dead.clone(), o.url()]));
    let mut r = up
        .fetch(OriginRequest::get("/x"))
        .await
        .expect("second server answers");
    assert_eq!(r.server, o.url());
    assert_eq!(r.bytes().await.unwrap(), b"hello");
    assert_eq!(o.requests("/x"), 1);
    assert_eq!(count(&m, "2xx"), 1);

    // Every server refused: a Connect error naming the origin and the last server.
    let (up, m) = client(plain(&[dead.clone(), refused_url()]));
    let e = up
        .fetch(OriginRequest::get("/x"))
        .await
        .expect_err("nobody listens");
    assert!(matches!(e, OriginError::Connect { .. }), "{e:?}");
    assert!(e.is_connect());
    let msg = e.to_string();
    assert!(
        msg.contains("origin \"up\"") && msg.contains("cannot connect"),
        "{msg}"
    );
    assert_eq!(count(&m, "error"), 1);
}

/// After a failover the requests go back to the first server once its down mark ends, though
/// they keep the second server's idle connection in use all along (it was reused whatever its
/// server: the first server, back up, got nothing while traffic lasted; tester).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_back_to_a_first_server_that_recovered() {
    let first = refused_url();
    let second = FaultOrigin::start();
    second.put("/x", Object::new(b"second".to_vec()));
    let (up, _m) = client(plain(&[first.clone(), second.url()]));
    let mut r = up.fetch(OriginRequest::get("/x")).await.expect("failover");
    assert_eq!(r.server, second.url());
    r.bytes().await.expect("body");
    // The first server comes back; requests keep coming every 250 ms.
    let addr = first
        .strip_prefix("http://")
        .and_then(|a| a.parse().ok())
        .expect("an address");
    let back = FaultOrigin::start_at(addr);
    back.put("/x", Object::new(b"first".to_vec()));
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < Duration::from_secs(13) {
        let mut r = up.fetch(OriginRequest::get("/x")).await.expect("answer");
        let body = r.bytes().await.expect("body");
        assert_eq!(
            body,
            if r.server == first {
                &b"first"[..]
            } else {
                b"second"
            }
        );
        last = r.server.clone();
        if last == first {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        last,
        first,
        "still on the second server {:?} after the down mark",
        start.elapsed()
    );
    assert!(
        start.elapsed() >= Duration::from_secs(8),
        "back before the down mark ended: {:?}",
        start.elapsed()
    );
}

/// A request a server took and did not answer (closed before the head, or no head within
/// `read_timeout_ms`) goes to the next server up, which the first is marked down for; with no
/// other server it fails. A request a server answered, even with a 5xx, is never sent again.
#[tokio::test]
async fn a_request_goes_elsewhere_only_before_an_answer() {
    let a = FaultOrigin::start();
    let b = FaultOrigin::start();
    for o in [&a, &b] {
        o.put("/x", Object::new(b"data".to_vec()));
    }
    a.fault("/x", Fault::CloseBeforeHead);
    let mut cfg = plain(&[a.url(), b.url()]);
    cfg.read_timeout_ms = 300;
    // The status of an answer to GET /x (its body not read).
    async fn status(up: &Origin) -> u16 {
        let r = up.fetch(OriginRequest::get("/x")).await.expect("an answer");
        r.status
    }
    let (up, m) = client(cfg.clone());
    assert_eq!(status(&up).await, 200, "answered by the second server");
    assert_eq!((a.requests("/x"), b.requests("/x")), (1, 1));
    // (Brought to the marks when the metrics are rendered.)
    let down = |m: &Metrics, server: &str| {
        let _ = m.render();
        m.origin_server_down
            .with_label_values(&["up", server])
            .get()
    };
    assert_eq!((down(&m, &a.url()), down(&m, &b.url())), (1, 0));

    // One server: the same failures are the request's.
    let mut one = cfg.clone();
    one.servers = vec![a.url()];
    let (up, m) = client(one);
    let e = up
        .fetch(OriginRequest::get("/x"))
        .await
        .expect_err("closed before head");
    assert!(matches!(e, OriginError::Protocol { .. }), "{e:?}");
    assert!(!e.is_connect());
    a.fault("/x", Fault::Hang);
    let t = Instant::now();
    let e = up
        .fetch(OriginRequest::get("/x"))
        .await
        .expect_err("no answer");
    assert_timeout(&e, "response head");
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(count(&m, "error"), 2);
    // The wait for a head that never came is in the latency histogram (the closed connection,
    // which answered nothing at once, is not).
    let h = m.origin_request_duration_seconds.with_label_values(&["up"]);
    assert_eq!(h.get_sample_count(), 1);
    assert!(h.get_sample_sum() >= 0.3, "{}", h.get_sample_sum());

    // A hang, then another server: answered there after the timeout.
    let (up, _m) = client(cfg.clone());
    let before = b.requests("/x");
    assert_eq!(status(&up).await, 200, "answered by the second server");
    assert_eq!(b.requests("/x"), before + 1);

    a.fault("/x", Fault::Status(503));
    let (up, _m) = client(cfg);
    let before = b.requests("/x");
    assert_eq!(status(&up).await, 503, "a 5xx is an answer");
    assert_eq!(b.requests("/x"), before, "a 5xx is not retried elsewhere");
}

/// `e` is a timeout of the step `what` ("connect", "response head", "body bytes").
fn assert_timeout(e: &OriginError, what: &str) {
    assert!(
        matches!(e, OriginError::Timeout { what: w, .. } if *w == what),
        "want a {what} timeout: {e:?}"
    );
}

/// `(expected, got)` of a truncated body; any other error fails the test.
fn truncated(e: &OriginError) -> (u64, u64) {
    match e {
        OriginError::Truncated { expected, got, .. } => (*expected, *got),
        other => panic!("want a truncated body: {other:?}"),
    }
}

/// A server that accepts TCP but never speaks: the TLS handshake times out.
fn silent_listener() -> (std::net::TcpListener, String) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", l.local_addr().unwrap());
    (l, url)
}

#[tokio::test]
async fn connect_timeout_covers_the_tls_handshake_and_fails_over() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test CA");
    let good = FaultOrigin::start_tls(&ca, &["127.0.0.1"]);
    good.put("/x", Object::new(b"tls".to_vec()));
    let (_keep, silent) = silent_listener();
    let mut cfg = plain(&[silent.clone(), good.url()]);
    cfg.ca_file = Some(ca.write_pem(dir.path(), "ca.pem"));
    cfg.connect_timeout_ms = 300;
    let (up, _m) = client(cfg.clone());
    let t = Instant::now();
    let mut r = up
        .fetch(OriginRequest::get("/x"))
        .await
        .expect("second server");
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert_eq!(r.server, good.url());
    assert_eq!(r.bytes().await.unwrap(), b"tls");

    cfg.servers = vec![silent];
    let (up, _m) = client(cfg);
    let e = up
        .fetch(OriginRequest::get("/x"))
        .await
        .expect_err("silent");
    // Said as what it is: the server took the connection and never finished TLS.
    assert_timeout(&e, content_server::origin::TLS_HANDSHAKE);
    assert!(
        e.to_string()
            .contains("no TLS handshake (TCP connected) within 300 ms"),
        "{e}"
    );
    assert!(e.is_connect());
}

#[tokio::test]
async fn read_timeout_between_body_chunks() {
    let o = FaultOrigin::start();
    o.put("/slow", Object::new(pattern(50_000, 4)));
    o.set_timing(Timing {
        chunk_size: 10_000,
        chunk_delay: Duration::from_millis(100),
        ..Timing::default()
    });
    let mut cfg = plain(&[o.url()]);
    cfg.read_timeout_ms = 400;
    let (up, m) = client(cfg);
    // Slow but steady: each gap is under the read timeout, the whole body takes longer.
    let t = Instant::now();
    let mut r = up.fetch(OriginRequest::get("/slow")).await.unwrap();
    assert_eq!(r.bytes().await.expect("steady body").len(), 50_000);
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );

    o.set_timing(Timing::default());
    o.fault("/slow", Fault::StallAfter(20_000));
    let mut r = up.fetch(OriginRequest::get("/slow")).await.unwrap();
    let mut got = 0;
    let e = loop {
        match r.chunk().await {
            Ok(Some(c)) => got += c.len(),
            Ok(None) => panic!("a stalled body must not end cleanly"),
            Err(e) => break e,
        }
    };
    assert_eq!(got, 20_000);
    assert_timeout(&e, "body bytes");
    assert!(r.chunk().await.is_err(), "a failed body stays failed");
    assert_eq!(count(&m, "error"), 1);
}

#[tokio::test]
async fn heads_that_are_not_an_answer_or_whose_framing_is_unusable_are_errors() {
    let (o, up, _m) = serving("/h", &pattern(10, 1));
    for (raw, why) in [
        // A switch of protocols nobody asked for (RFC 9110 §15.2.2).
        (
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            "101 is not a final answer",
        ),
        // A status with no class (RFC 9110 §15): a client could not interpret it.
        (
            "HTTP/1.1 999 Whatever\r\nContent-Length: 5\r\n\r\nhello",
            "999 is not an HTTP status",
        ),
        // A transfer coding hyper does not decode: its bytes are not the content.
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            "transfer coding \"gzip\" is not supported",
        ),
        // Both framings (RFC 9112 §6.3).
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\na\r\nhellohello\r\n0\r\n\r\n",
            "both Transfer-Encoding and Content-Length",
        ),
    ] {
        o.fault_times("/h", Fault::Raw(raw.as_bytes().to_vec()), 1);
        let e = up
            .fetch(OriginRequest::get("/h"))
            .await
            .expect_err(why);
        assert!(e.to_string().contains(why), "{why}: {e}");
    }
    // Chunked alone (any case) is fine.
    o.fault_times(
        "/h",
        Fault::Raw(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                .to_vec(),
        ),
        1,
    );
    let mut r = up.fetch(OriginRequest::get("/h")).await.expect("chunked");
    assert_eq!(r.bytes().await.expect("body"), b"hello");
}

#[tokio::test]
async fn truncated_reset_and_wrong_length_bodies_are_errors() {
    let body = pattern(64_000, 5);
    let (o, up, m) = serving("/t", &body);

    o.fault_times("/t", Fault::TruncateAfter(10_000), 1);
    let mut r = up.fetch(OriginRequest::get("/t")).await.unwrap();
    let e = r.bytes().await.expect_err("short body");
    assert_eq!(truncated(&e), (64_000, 10_000));

    o.fault_times("/t", Fault::ResetAfter(5_000), 1);
    let mut r = up.fetch(OriginRequest::get("/t")).await.unwrap();
    let e = r.bytes().await.expect_err("reset");
    assert_eq!(truncated(&e).0, 64_000);

    // A range cut short is checked against the Content-Range span.
    o.fault_times("/t", Fault::TruncateAfter(100), 1);
    let mut r = up.fetch(range("/t", 0, 4095)).await.unwrap();
    let e = r.bytes().await.expect_err("short range");
    assert_eq!(truncated(&e), (4096, 100));

    // Content-Length larger than the bytes sent, then close: truncated.
    o.fault_times("/t", Fault::ContentLength(70_000), 1);
    let mut r = up.fetch(OriginRequest::get("/t")).await.unwrap();
    let e = r.bytes().await.expect_err("announced more than sent");
    assert_eq!(truncated(&e), (70_000, 64_000));

    // A 206 whose Content-Length disagrees with its Content-Range: rejected at the head.
    o.fault_times("/t", Fault::ContentLength(10), 1);
    let e = up
        .fetch(range("/t", 0, 4095))
        .await
        .expect_err("inconsistent head");
    assert!(
        e.to_string().contains("disagrees with Content-Range"),
        "{e}"
    );

    assert_eq!(count(&m, "error"), 5);
    // After all that, a clean fetch works (broken connections were not reused).
    let mut r = up.fetch(OriginRequest::get("/t")).await.unwrap();
    assert_eq!(r.bytes().await.unwrap(), body);
}

#[tokio::test]
async fn https_with_the_test_ca_and_host_sni_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test CA");
    let o = FaultOrigin::start_tls(&ca, &["cdn.test", "127.0.0.1"]);
    o.put("/s", Object::new(b"secret".to_vec()));
    let ca_path = ca.write_pem(dir.path(), "ca.pem");

    // IP literal URL: no SNI, the certificate's IP SAN is checked.
    let mut cfg = plain(&[o.url()]);
    cfg.ca_file = Some(ca_path.clone());
    let (up, _m) = client(cfg.clone());
    let mut r = up
        .fetch(OriginRequest::get("/s"))
        .await
        .expect("trusted CA");
    assert_eq!(r.bytes().await.unwrap(), b"secret");
    let s = o.seen().pop().unwrap();
    assert_eq!(s.sni, None);
    assert_eq!(s.header("host"), Some(o.addr.to_string().as_str()));

    // Host and SNI overridden separately.
    cfg.host = Some("bucket.example".into());
    cfg.sni = Some("cdn.test".into());
    let (up, _m) = client(cfg.clone());
    let mut r = up
        .fetch(OriginRequest::get("/s"))
        .await
        .expect("SNI override");
    r.bytes().await.unwrap();
    let s = o.seen().pop().unwrap();
    assert_eq!(s.sni.as_deref(), Some("cdn.test"));
    assert_eq!(s.header("host"), Some("bucket.example"));

    // Host alone also names the TLS server: a name the certificate lacks fails the handshake.
    cfg.sni = None;
    let (up, _m) = client(cfg.clone());
    let e = up
        .fetch(OriginRequest::get("/s"))
        .await
        .expect_err("bucket.example not in cert");
    assert!(matches!(e, OriginError::Tls { .. }), "{e:?}");

    // Without the CA file the test CA is unknown: TLS error, the request never went out.
    let before = o.requests("/s");
    let (up, _m) = client(plain(&[o.url()]));
    let e = up
        .fetch(OriginRequest::get("/s"))
        .await
        .expect_err("unknown CA");
    assert!(matches!(e, OriginError::Tls { .. }), "{e:?}");
    assert!(e.to_string().contains("TLS handshake"), "{e}");
    assert_eq!(o.requests("/s"), before);

    // Another CA's file does not help either.
    let other = TestCa::new("other CA");
    let mut cfg = plain(&[o.url()]);
    cfg.ca_file = Some(other.write_pem(dir.path(), "other.pem"));
    let (up, _m) = client(cfg);
    assert!(matches!(
        up.fetch(OriginRequest::get("/s")).await,
        Err(OriginError::Tls { .. })
    ));
}

/// The CA file is read again when it changes (a ConfigMap or Secret updated in place by the
/// kubelet: a new file behind the path): new connections trust the new CA without a restart;
/// a changed file that cannot be used keeps the last good CA.
#[tokio::test]
async fn a_changed_ca_file_is_trusted_by_new_connections() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (TestCa::new("old CA"), TestCa::new("new CA"));
    // The origin's certificate was re-issued by the new CA; it closes every connection.
    let o = FaultOrigin::start_tls(&new, &["127.0.0.1"]);
    o.set_keep_alive(false);
    o.put("/s", Object::new(b"secret".to_vec()));
    let ca_path = dir.path().join("ca.pem");
    // Written as the kubelet does: a new file renamed over the path.
    let publish = |pem: &[u8]| {
        let tmp = dir.path().join("ca.pem.tmp");
        std::fs::write(&tmp, pem).unwrap();
        std::fs::rename(&tmp, &ca_path).unwrap();
    };
    publish(&std::fs::read(old.write_pem(dir.path(), "old.pem")).unwrap());
    let mut cfg = plain(&[o.url()]);
    cfg.ca_file = Some(ca_path.clone());
    let (up, _m) = client(cfg);
    let e = up
        .fetch(OriginRequest::get("/s"))
        .await
        .expect_err("the old CA does not vouch for the new certificate");
    assert!(matches!(e, OriginError::Tls { .. }), "{e:?}");
    publish(&std::fs::read(new.write_pem(dir.path(), "new.pem")).unwrap());
    let mut r = up
        .fetch(OriginRequest::get("/s"))
        .await
        .expect("the new CA file is read again");
    assert_eq!(r.bytes().await.unwrap(), b"secret");
    // A broken update (cut short), or the file gone, is not used: the last good CA stays.
    publish(b"-----BEGIN CERTIFICATE-----\nMIIB");
    for step in ["cut", "cut", "gone", "gone"] {
        if step == "gone" {
            let _ = std::fs::remove_file(&ca_path);
        }
        let mut r = up
            .fetch(OriginRequest::get("/s"))
            .await
            .expect("the last good CA");
        assert_eq!(r.bytes().await.unwrap(), b"secret", "{step}");
    }
    // Back to the old CA: new connections follow it again.
    publish(&std::fs::read(dir.path().join("old.pem")).unwrap());
    up.fetch(OriginRequest::get("/s"))
        .await
        .expect_err("the old CA is read again");
}

#[test]
fn unreadable_ca_file_fails_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::for_root("/");
    let mut o = plain(&["https://127.0.0.1:1".into()]);
    o.ca_file = Some(dir.path().join("missing.pem"));
    cfg.origins = vec![o.clone()];
    let err = Origins::from_config(&cfg, &Metrics::new(&[], 0))
        .err()
        .expect("missing file");
    assert!(
        err.to_string().contains("ca_file") && err.to_string().contains("missing.pem"),
        "{err}"
    );
    // What is wrong with a broken file is said in words (tester: the end marker came as a
    // list of bytes, bad DER as "invalid peer certificate").
    let ca = TestCa::new("cut CA");
    let pem = std::fs::read_to_string(ca.write_pem(dir.path(), "whole.pem")).unwrap();
    for (name, text, want) in [
        (
            "empty.pem",
            "not a certificate\n".to_string(),
            "no PEM certificate".to_string(),
        ),
        (
            "cut.pem",
            pem[..pem.len() / 2].to_string(),
            "a PEM block has no \"-----END CERTIFICATE-----\" line (cut short?)".to_string(),
        ),
        (
            "base64.pem",
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n".to_string(),
            "a PEM block is not valid base64".to_string(),
        ),
        (
            "der.pem",
            format!("{pem}-----BEGIN CERTIFICATE-----\nAAAAAAAA\n-----END CERTIFICATE-----\n"),
            "certificate 2 is not a usable X.509 CA certificate".to_string(),
        ),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap();
        o.ca_file = Some(dir.path().join(name));
        cfg.origins = vec![o.clone()];
        let err = Origins::from_config(&cfg, &Metrics::new(&[], 0))
            .err()
            .expect(name);
        let err = err.to_string();
        assert!(err.contains(name) && err.contains(&want), "{name}: {err}");
        assert!(!err.contains("peer"), "{name}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_is_honoured() {
    let o = FaultOrigin::start();
    o.put("/m", Object::new(pattern(1000, 6)));
    o.set_timing(Timing {
        head_delay: Duration::from_millis(150),
        ..Timing::default()
    });
    let mut cfg = plain(&[o.url()]);
    cfg.max_connections = 2;
    let (up, m) = client(cfg);
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let up = up.clone();
        tasks.push(tokio::spawn(async move {
            let mut r = up.fetch(OriginRequest::get("/m")).await?;
            r.bytes().await
        }));
    }
    for t in tasks {
        assert_eq!(
            t.await.unwrap().expect("every request completes").len(),
            1000
        );
    }
    assert_eq!(o.requests("/m"), 6);
    assert!(
        o.max_open_connections() <= 2,
        "{} connections at once",
        o.max_open_connections()
    );
    assert!(
        o.connections() <= 2,
        "{} connections opened",
        o.connections()
    );
    assert!(m.origin_connections.with_label_values(&["up"]).get() <= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_ahead_frees_the_connection_of_a_slow_reader() {
    // Far more than the socket buffers of both ends can take while nobody reads.
    let body = pattern(24 << 20, 9);
    let o = FaultOrigin::start();
    o.put("/big", Object::new(body.clone()));
    o.put("/small", Object::new(pattern(1000, 3)));
    let mut cfg = plain(&[o.url()]);
    cfg.max_connections = 1;
    cfg.pass_buffer_bytes = 32 << 20;
    let (up, _m) = client(cfg);
    let small = || up.fetch(OriginRequest::get("/small"));

    // Unread, the body keeps the only connection: the next request waits for it.
    let mut slow = up.fetch(OriginRequest::get("/big")).await.expect("fetch");
    let waited = tokio::time::timeout(Duration::from_millis(500), small()).await;
    assert!(waited.is_err(), "the unread body left its connection");
    // Asked to read ahead past its size, the body is taken at the origin's pace and the
    // connection freed (and reused) while the reader still reads nothing.
    slow.read_ahead(32 << 20);
    let mut next = tokio::time::timeout(Duration::from_secs(10), small())
        .await
        .expect("the connection was not freed by the read-ahead")
        .expect("fetch");
    assert_eq!(next.bytes().await.expect("body").len(), 1000);
    assert_eq!(o.connections(), 1, "the freed connection was reused");
    // The held bytes arrive whole and in order.
    assert!(
        slow.bytes().await.expect("body") == body,
        "held body differs"
    );

    // A read-ahead shorter than the body: what fits is held, the rest waits for the reader.
    let mut slow = up.fetch(OriginRequest::get("/big")).await.expect("fetch");
    slow.read_ahead(1 << 20);
    let waited = tokio::time::timeout(Duration::from_millis(500), small()).await;
    assert!(
        waited.is_err(),
        "a body longer than the read-ahead left its connection"
    );
    assert!(slow.bytes().await.expect("body") == body, "body differs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_held_bytes_comes_after_them() {
    let body = pattern(300_000, 4);
    let o = FaultOrigin::start();
    o.put("/cut", Object::new(body.clone()));
    o.fault("/cut", Fault::TruncateAfter(200_000));
    let (up, _m) = client(plain(&[o.url()]));
    let mut r = up.fetch(OriginRequest::get("/cut")).await.expect("fetch");
    r.read_ahead(1 << 20);
    // Let the body task read all it can (and meet the truncation) before anything is taken.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut got = Vec::new();
    let err = loop {
        match r.chunk().await {
            Ok(Some(c)) => got.extend_from_slice(&c),
            Ok(None) => panic!("a truncated body ended cleanly after {} bytes", got.len()),
            Err(e) => break e,
        }
    };
    assert_eq!(truncated(&err), (300_000, 200_000));
    assert!(got == body[..200_000], "the bytes before the cut differ");
}

#[tokio::test]
async fn keep_alive_connections_are_reused() {
    let (o, up, m) = serving("/k", &pattern(200_000, 7));
    for i in 0..5u64 {
        let mut r = up
            .fetch(range("/k", i * 1000, i * 1000 + 999))
            .await
            .unwrap();
        assert_eq!(r.bytes().await.unwrap().len(), 1000);
    }
    assert_eq!(o.connections(), 1, "five slices, one handshake");
    assert_eq!(up.idle_connections(), 1);
    assert_eq!(m.origin_connections.with_label_values(&["up"]).get(), 1);
    let conns: Vec<usize> = o.seen().iter().map(|s| s.conn).collect();
    assert_eq!(conns, vec![0; 5]);

    // A body dropped half-read closes its connection; the next request opens a new one.
    let mut r = up.fetch(OriginRequest::get("/k")).await.unwrap();
    r.chunk().await.unwrap().expect("a first chunk");
    drop(r);
    let mut r = up.fetch(OriginRequest::get("/k")).await.unwrap();
    assert_eq!(r.bytes().await.unwrap().len(), 200_000);
    assert_eq!(o.connections(), 2);

    // An origin that closes after each answer is not a reuse candidate, and nothing breaks.
    o.set_keep_alive(false);
    for _ in 0..3 {
        let mut r = up.fetch(OriginRequest::get("/k")).await.unwrap();
        assert_eq!(r.bytes().await.unwrap().len(), 200_000);
    }
    assert_eq!(
        o.connections(),
        2 + 3 - 1,
        "the pooled connection carried one, then each closed"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while m.origin_connections.with_label_values(&["up"]).get() != 0 {
        assert!(
            Instant::now() < deadline,
            "closed connections leave the gauge"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn usable_from_any_runtime() {
    let (_o, up, _m) = serving("/r", &pattern(30_000, 8));
    // Two independent current-thread runtimes on two threads, like two workers, plus a
    // runtime without timers or I/O: the client needs neither from its caller.
    let mut threads = Vec::new();
    for enable in [true, true, false] {
        let up = up.clone();
        threads.push(std::thread::spawn(move || {
            let mut b = tokio::runtime::Builder::new_current_thread();
            if enable {
                b.enable_all();
            }
            let rt = b.build().unwrap();
            rt.block_on(async {
                let mut r = up.fetch(OriginRequest::get("/r")).await.unwrap();
                r.bytes().await.unwrap().len()
            })
        }));
    }
    for t in threads {
        assert_eq!(t.join().unwrap(), 30_000);
    }
}

/// A reused keep-alive connection that the origin closes without answering (its keep-alive
/// timeout racing the request) is retried once on a new connection: GET and HEAD are
/// idempotent. A new connection that does the same is an error (no second retry). Over TLS the
/// origin closes without close_notify (rustls: unexpected EOF), which was a 502 (tester).
#[tokio::test]
async fn a_reused_connection_closed_without_an_answer_is_retried_once() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("retry CA");
    let tls = FaultOrigin::start_tls(&ca, &["127.0.0.1"]);
    let mut tls_cfg = plain(&[tls.url()]);
    tls_cfg.ca_file = Some(ca.write_pem(dir.path(), "ca.pem"));
    let plain_origin = FaultOrigin::start();
    let plain_cfg = plain(&[plain_origin.url()]);
    for (o, cfg) in [(plain_origin, plain_cfg), (tls, tls_cfg)] {
        let body = pattern(10_000, 3);
        o.put("/k", Object::new(body.clone()));
        let (up, m) = client(cfg);
        let mut r = up.fetch(OriginRequest::get("/k")).await.expect("first");
        assert_eq!(r.bytes().await.expect("body"), body);
        assert_eq!(up.idle_connections(), 1);

        o.fault_times("/k", Fault::CloseBeforeHead, 1);
        let mut r = up
            .fetch(OriginRequest::get("/k"))
            .await
            .expect("retried on a new connection");
        assert_eq!(r.bytes().await.expect("body"), body);
        let seen = o.seen();
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[1].conn, seen[0].conn, "the idle connection was reused");
        assert_ne!(
            seen[2].conn, seen[1].conn,
            "the retry took a new connection"
        );
        assert_eq!(count(&m, "error"), 0);

        o.fault_times("/k", Fault::CloseBeforeHead, 2);
        let e = up
            .fetch(OriginRequest::get("/k"))
            .await
            .expect_err("the new connection closed too");
        assert!(e.to_string().contains("no response"), "{e}");
        assert_eq!(o.seen().len(), 5, "one retry, not more");
        assert_eq!(count(&m, "error"), 1);
    }
}

/// Bytes a URI cannot carry as they are (`` ` ``, `<`, `"`, `{`, `|`, non-ASCII...) are sent
/// percent-encoded, always; escapes (`%2F`, `%20`) go out as received.
#[tokio::test]
async fn targets_are_sent_with_unsendable_bytes_percent_encoded() {
    let o = FaultOrigin::start();
    let (up, m) = client(plain(&[o.url()]));
    for (asked, sent) in [
        ("/a`b<c>\"d\"", "/a%60b%3Cc%3E%22d%22"),
        ("/x%2Fy?q={1}|^", "/x%2Fy?q=%7B1%7D%7C%5E"),
        ("/caf\u{e9}", "/caf%C3%A9"),
        ("/q?x=[1]", "/q?x=%5B1%5D"),
        ("/plain%20name?x=1", "/plain%20name?x=1"),
    ] {
        let mut r = up
            .fetch(OriginRequest::get(asked))
            .await
            .unwrap_or_else(|e| panic!("{asked}: {e}"));
        r.bytes().await.expect("body");
        assert_eq!(
            o.seen().last().map(|s| s.path.clone()).as_deref(),
            Some(sent)
        );
    }
    assert_eq!(count(&m, "error"), 0);
}
