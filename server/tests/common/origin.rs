//! A programmable HTTP/1.1 origin for tests, on 127.0.0.1 (std threads, one per connection),
//! plain or HTTPS with a CA generated at test time.
//!
//! Objects by path (bytes, ETag, Last-Modified, Cache-Control, extra headers), optionally one
//! per `Authorization` or `Origin` value, single ranges (206 + Content-Range, 416), conditionals (304),
//! keep-alive; it records every request (method, path, Range, Host, SNI, conditionals,
//! Authorization, connection number) and counts connections. Timing
//! knobs: a delay before each head, a delay per chunk, a rate limit. Faults per path: hang (no
//! answer), close before the head, stall / reset / clean close mid-body, a wrong
//! Content-Length, a 5xx, raw bytes. `refused_url()` gives a port nobody listens on.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// One object the origin serves.
#[derive(Debug, Clone)]
pub struct Object {
    pub body: Vec<u8>,
    pub status: u16,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    pub cache_control: Option<String>,
    /// Extra response headers (Vary, Set-Cookie, Expires...).
    pub headers: Vec<(String, String)>,
}

impl Object {
    /// A 200 object with ETag `"v1"` and a fixed Last-Modified.
    pub fn new(body: impl Into<Vec<u8>>) -> Object {
        Object::version(body, 1)
    }

    /// Version `v` of an object: ETag `"vN"`, Last-Modified N seconds after a fixed date.
    pub fn version(body: impl Into<Vec<u8>>, v: u32) -> Object {
        Object {
            body: body.into(),
            status: 200,
            etag: Some(format!("\"v{v}\"")),
            last_modified: Some(format!("Wed, 01 Jan 2025 00:00:{:02} GMT", v % 60)),
            cache_control: None,
            headers: Vec::new(),
        }
    }

    pub fn cache_control(mut self, v: &str) -> Object {
        self.cache_control = Some(v.into());
        self
    }

    pub fn header(mut self, k: &str, v: &str) -> Object {
        self.headers.push((k.into(), v.into()));
        self
    }

    pub fn status(mut self, s: u16) -> Object {
        self.status = s;
        self
    }

    pub fn no_validators(mut self) -> Object {
        self.etag = None;
        self.last_modified = None;
        self
    }
}

/// `n` bytes of a pattern that differs per `seed` (so versions differ byte by byte).
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed as u32 * 7) as u8)
        .collect()
}

/// What a request to a path does instead of a normal answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Read the request and never answer (until the origin is dropped).
    Hang,
    /// Close the connection without answering.
    CloseBeforeHead,
    /// Send the head and this many body bytes, then go silent.
    StallAfter(usize),
    /// Send the head and this many body bytes, then reset the connection (RST).
    ResetAfter(usize),
    /// Send the head (full Content-Length) and this many body bytes, then close (FIN).
    TruncateAfter(usize),
    /// Announce this Content-Length, send the body as usual, then close.
    ContentLength(u64),
    /// Answer this status with a short text body.
    Status(u16),
    /// Answer a range request with this many bytes from the range's start (shorter or longer
    /// than asked; Content-Range and Content-Length agree with what is sent).
    RangeBytes(u64),
    /// Answer 200 with the whole body chunked (no Content-Length, Range ignored; chunks of
    /// 10,000 bytes, each after the timing's `chunk_delay`); with `Some(n)`, close after `n`
    /// body bytes without the last chunk (a body that broke off).
    Chunked(Option<usize>),
    /// Write exactly these bytes as the answer, then close (a malformed or unusual head).
    Raw(Vec<u8>),
    /// Answer as usual, with another ETag in every answer (a farm of backends with an ETag of
    /// their own each, or an ETag made per response).
    EtagPerAnswer,
    /// Answer as usual, but with one ETag for a request that starts at byte 0 (no Range, or a
    /// range from 0) and another for every other (a stale first slice in a cache in front).
    EtagByStart,
    /// Answer as usual, but pause this long between the head and the body of an answer that
    /// starts at byte 0 (a first slice slower than the next).
    SlowFromStart(Duration),
}

/// One request as the origin saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// Every header line as received, in order (values decoded lossily as UTF-8).
    pub headers: Vec<(String, String)>,
    /// The TLS server name the client sent (HTTPS only).
    pub sni: Option<String>,
    /// Which accepted connection (0, 1, ...) carried it.
    pub conn: usize,
}

impl Seen {
    /// The first header `name` (any case), if the request had one.
    pub fn header(&self, name: &str) -> Option<&str> {
        super::http::header(&self.headers, name)
    }
}

/// Timing of every answer.
#[derive(Debug, Clone, Default)]
pub struct Timing {
    /// Sleep before sending each response head.
    pub head_delay: Duration,
    /// Sleep before each body chunk.
    pub chunk_delay: Duration,
    /// Body chunk size (default 16 KiB).
    pub chunk_size: usize,
    /// Body bytes per second per connection (0 = unlimited).
    pub rate: u64,
}

#[derive(Default)]
struct State {
    objects: HashMap<String, Object>,
    /// Objects by (path, Authorization): these win over `objects`.
    per_authorization: HashMap<(String, Option<String>), Object>,
    /// Objects by (path, Origin): these win over both.
    per_origin: HashMap<(String, String), Object>,
    /// Fault, how many more requests it applies to (None = all), and how many requests pass
    /// untouched before it starts.
    faults: HashMap<String, (Fault, Option<usize>, usize)>,
    seen: Vec<Seen>,
    timing: Timing,
    keep_alive: bool,
}

struct Shared {
    state: Mutex<State>,
    stop: AtomicBool,
    /// The accept loop ends (its listener closed) while open connections go on.
    paused: AtomicBool,
    accepted: AtomicUsize,
    open: AtomicUsize,
    max_open: AtomicUsize,
}

/// A running test origin; stops on drop.
pub struct FaultOrigin {
    pub addr: SocketAddr,
    https: bool,
    tls: Option<Arc<rustls::ServerConfig>>,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

/// A `http://127.0.0.1:PORT` URL where nothing listens (connections are refused).
pub fn refused_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

impl FaultOrigin {
    /// A plain HTTP origin.
    pub fn start() -> FaultOrigin {
        FaultOrigin::spawn(None)
    }

    /// An HTTPS origin presenting a certificate from `ca` for `names` (DNS names or IPs).
    pub fn start_tls(ca: &TestCa, names: &[&str]) -> FaultOrigin {
        FaultOrigin::spawn(Some(ca.server_config(names)))
    }

    /// An HTTPS origin with the TLS configuration `tls`.
    pub fn start_tls_with(tls: Arc<rustls::ServerConfig>) -> FaultOrigin {
        FaultOrigin::spawn(Some(tls))
    }

    /// A plain HTTP origin listening on `addr` (a port another test origin left, say).
    pub fn start_at(addr: std::net::SocketAddr) -> FaultOrigin {
        FaultOrigin::spawn_at(addr, None)
    }

    fn spawn(tls: Option<Arc<rustls::ServerConfig>>) -> FaultOrigin {
        FaultOrigin::spawn_at(([127, 0, 0, 1], 0).into(), tls)
    }

    fn spawn_at(at: std::net::SocketAddr, tls: Option<Arc<rustls::ServerConfig>>) -> FaultOrigin {
        let listener = TcpListener::bind(at).expect("bind test origin");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                keep_alive: true,
                timing: Timing {
                    chunk_size: 16 * 1024,
                    ..Timing::default()
                },
                ..State::default()
            }),
            stop: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            max_open: AtomicUsize::new(0),
        });
        let https = tls.is_some();
        let accept = accept_loop(listener, shared.clone(), tls.clone());
        FaultOrigin {
            addr,
            https,
            tls,
            shared,
            accept: Some(accept),
        }
    }

    /// Stop listening (new connections are refused) while open connections go on serving.
    pub fn pause_listener(&mut self) {
        self.shared.paused.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }

    /// Listen again on the same address after [`FaultOrigin::pause_listener`].
    pub fn resume_listener(&mut self) {
        self.shared.paused.store(false, Ordering::SeqCst);
        let listener = TcpListener::bind(self.addr).expect("bind the test origin again");
        self.accept = Some(accept_loop(listener, self.shared.clone(), self.tls.clone()));
    }

    /// `http://127.0.0.1:PORT` (or `https://`).
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Serve `obj` at `path` (replacing what was there: a new version).
    pub fn put(&self, path: &str, obj: Object) {
        self.state().objects.insert(path.into(), obj);
    }

    /// Serve `obj` at `path` to requests whose Authorization is `authorization` (None: to
    /// requests without one), before what [`FaultOrigin::put`] serves there.
    pub fn put_for(&self, path: &str, authorization: Option<&str>, obj: Object) {
        self.state()
            .per_authorization
            .insert((path.into(), authorization.map(str::to_string)), obj);
    }

    /// Serve `obj` at `path` to requests whose `Origin` is `origin`, before the others (an
    /// origin answering CORS per Origin, as S3 does).
    pub fn put_for_origin(&self, path: &str, origin: &str, obj: Object) {
        self.state()
            .per_origin
            .insert((path.into(), origin.into()), obj);
    }

    /// Stop serving `path` (404 from now on).
    pub fn remove(&self, path: &str) {
        self.state().objects.remove(path);
    }

    /// Apply `fault` to every request for `path` (`"*"`: every path) until cleared.
    pub fn fault(&self, path: &str, fault: Fault) {
        self.state().faults.insert(path.into(), (fault, None, 0));
    }

    /// Apply `fault` to the next `times` requests for `path`.
    pub fn fault_times(&self, path: &str, fault: Fault, times: usize) {
        self.state()
            .faults
            .insert(path.into(), (fault, Some(times), 0));
    }

    /// Let the next `skip` requests for `path` pass, then apply `fault` to one request (the
    /// second slice of an object: `fault_after(path, f, 1)`).
    pub fn fault_after(&self, path: &str, fault: Fault, skip: usize) {
        self.state()
            .faults
            .insert(path.into(), (fault, Some(1), skip));
    }

    pub fn clear_fault(&self, path: &str) {
        self.state().faults.remove(path);
    }

    pub fn set_timing(&self, t: Timing) {
        let chunk = if t.chunk_size == 0 {
            16 * 1024
        } else {
            t.chunk_size
        };
        self.state().timing = Timing {
            chunk_size: chunk,
            ..t
        };
    }

    /// false: answer `Connection: close` and close after each response.
    pub fn set_keep_alive(&self, on: bool) {
        self.state().keep_alive = on;
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state().seen.clone()
    }

    /// Requests for `path` so far.
    pub fn requests(&self, path: &str) -> usize {
        self.state().seen.iter().filter(|s| s.path == path).count()
    }

    /// The Range header of each request for `path`, in order.
    pub fn ranges(&self, path: &str) -> Vec<Option<String>> {
        self.state()
            .seen
            .iter()
            .filter(|s| s.path == path)
            .map(|s| s.header("range").map(String::from))
            .collect()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// Most connections open at the same time so far.
    pub fn max_open_connections(&self) -> usize {
        self.shared.max_open.load(Ordering::SeqCst)
    }

    /// Close the listener: new connections are refused from now on (open ones go on).
    pub fn close_listener(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap()
    }
}

impl Drop for FaultOrigin {
    fn drop(&mut self) {
        self.close_listener();
    }
}

/// Accept connections on `listener` until the origin stops or pauses, each served on a thread.
fn accept_loop(
    listener: TcpListener,
    sh: Arc<Shared>,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            if sh.stop.load(Ordering::SeqCst) || sh.paused.load(Ordering::SeqCst) {
                break;
            }
            let Ok(stream) = stream else { continue };
            let id = sh.accepted.fetch_add(1, Ordering::SeqCst);
            let now = sh.open.fetch_add(1, Ordering::SeqCst) + 1;
            sh.max_open.fetch_max(now, Ordering::SeqCst);
            let sh2 = sh.clone();
            let tls = tls.clone();
            std::thread::spawn(move || {
                serve_connection(stream, tls, id, &sh2);
                sh2.open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    })
}

/// A byte stream: plain TCP or TLS over TCP.
trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

fn serve_connection(
    tcp: TcpStream,
    tls: Option<Arc<rustls::ServerConfig>>,
    id: usize,
    sh: &Shared,
) {
    let _ = tcp.set_nodelay(true);
    let Ok(raw) = tcp.try_clone() else { return };
    let (mut stream, sni): (Box<dyn Stream>, Option<String>) = match tls {
        None => (Box::new(tcp), None),
        Some(cfg) => {
            let Ok(mut conn) = rustls::ServerConnection::new(cfg) else {
                return;
            };
            let mut tcp = tcp;
            let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
            while conn.is_handshaking() {
                if conn.complete_io(&mut tcp).is_err() {
                    return; // the client rejected our certificate, or hung up
                }
            }
            let _ = tcp.set_read_timeout(None);
            let sni = conn.server_name().map(str::to_string);
            (Box::new(rustls::StreamOwned::new(conn, tcp)), sni)
        }
    };
    let mut buf = Vec::new();
    loop {
        let Some((head_len, seen)) = read_head(&mut stream, &mut buf, id, sni.clone(), sh) else {
            return;
        };
        buf.drain(..head_len);
        let keep = answer(&mut stream, &raw, &seen, sh);
        if !keep {
            let _ = stream.flush();
            return;
        }
    }
}

/// Read one request head; None when the client closed or the origin stops.
fn read_head(
    stream: &mut Box<dyn Stream>,
    buf: &mut Vec<u8>,
    id: usize,
    sni: Option<String>,
    sh: &Shared,
) -> Option<(usize, Seen)> {
    loop {
        if let Some(end) = find(buf, b"\r\n\r\n") {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            req.parse(&buf[..end + 4]).ok()?;
            let seen = Seen {
                method: req.method?.to_string(),
                path: req.path?.to_string(),
                headers: req
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_string(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect(),
                sni,
                conn: id,
            };
            sh.state.lock().unwrap().seen.push(seen.clone());
            return Some((end + 4, seen));
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if sh.stop.load(Ordering::SeqCst) {
            return None;
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The single range of a `Range` header over `len` bytes: Ok(Some((start, end))), Ok(None) to
/// ignore it (absent, multiple ranges, malformed), Err(()) when unsatisfiable.
fn range_of(h: Option<&str>, len: u64) -> Result<Option<(u64, u64)>, ()> {
    let Some(spec) = h.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let Some((a, b)) = spec.split_once('-') else {
        return Ok(None);
    };
    let (a, b) = (a.trim(), b.trim());
    let r = match (a.parse::<u64>(), b.parse::<u64>()) {
        // A suffix of an empty representation is satisfiable (RFC 9110 §14.1.1) but has no
        // bytes to send as a 206: the whole (empty) answer, as S3 gives.
        (Err(_), Ok(n)) if a.is_empty() && n > 0 && len == 0 => return Ok(None),
        (Ok(s), Ok(e)) if s <= e => (s, e.min(len.saturating_sub(1))),
        (Ok(s), Err(_)) if b.is_empty() => (s, len.saturating_sub(1)),
        (Err(_), Ok(n)) if a.is_empty() && n > 0 => (len.saturating_sub(n), len.saturating_sub(1)),
        _ => return Ok(None),
    };
    if r.0 >= len {
        return Err(());
    }
    Ok(Some(r))
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        304 => "Not Modified",
        401 => "Unauthorized",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// Answer one request; returns whether the connection stays open.
fn answer(stream: &mut Box<dyn Stream>, raw: &TcpStream, req: &Seen, sh: &Shared) -> bool {
    let (obj, fault, timing, keep_alive) = {
        let mut st = sh.state.lock().unwrap();
        let key = if st.faults.contains_key(&req.path) {
            Some(req.path.clone())
        } else if st.faults.contains_key("*") {
            Some("*".to_string())
        } else {
            None
        };
        let fault = key.and_then(|k| {
            let (f, left, skip) = st.faults.get_mut(&k)?;
            if *skip > 0 {
                *skip -= 1;
                return None;
            }
            let f = f.clone();
            if let Some(n) = left {
                *n -= 1;
                if *n == 0 {
                    st.faults.remove(&k);
                }
            }
            Some(f)
        });
        let by_auth = (
            req.path.clone(),
            req.header("authorization").map(String::from),
        );
        let by_origin = req
            .header("origin")
            .map(|o| (req.path.clone(), o.to_string()));
        (
            by_origin
                .and_then(|k| st.per_origin.get(&k))
                .or_else(|| st.per_authorization.get(&by_auth))
                .or_else(|| st.objects.get(&req.path))
                .cloned(),
            fault,
            st.timing.clone(),
            st.keep_alive,
        )
    };
    match fault {
        Some(Fault::Hang) => {
            while !sh.stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
            return false;
        }
        Some(Fault::CloseBeforeHead) => return false,
        _ => {}
    }
    if !timing.head_delay.is_zero() {
        std::thread::sleep(timing.head_delay);
    }
    if let Some(Fault::Raw(bytes)) = &fault {
        let _ = stream.write_all(bytes);
        return false;
    }
    if let Some(Fault::Status(s)) = fault {
        let body = format!("origin fault {s}\n");
        let head = format!(
            "HTTP/1.1 {s} {}\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n{}\r\n",
            reason(s),
            body.len(),
            conn_header(keep_alive)
        );
        let ok = stream.write_all(head.as_bytes()).is_ok()
            && (req.method == "HEAD" || stream.write_all(body.as_bytes()).is_ok());
        return ok && keep_alive;
    }
    let Some(obj) = obj else {
        let head = format!(
            "HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\n{}\r\n",
            conn_header(keep_alive)
        );
        let ok = stream.write_all(head.as_bytes()).is_ok()
            && (req.method == "HEAD" || stream.write_all(b"not found\n").is_ok());
        return ok && keep_alive;
    };
    let mut obj = obj;
    if let Some(Fault::EtagPerAnswer) = fault {
        static ANSWERS: AtomicUsize = AtomicUsize::new(0);
        let n = ANSWERS.fetch_add(1, Ordering::SeqCst);
        obj.etag = Some(format!("\"per-answer-{n}\""));
    }
    if let Some(Fault::EtagByStart) = fault {
        let from_0 = req
            .header("range")
            .and_then(|r| r.trim().strip_prefix("bytes="))
            .is_none_or(|r| r.starts_with("0-"));
        obj.etag = Some(if from_0 { "\"first\"" } else { "\"rest\"" }.into());
    }
    let len = obj.body.len() as u64;
    let mut head = String::new();
    let mut validators = String::new();
    if let Some(e) = &obj.etag {
        validators.push_str(&format!("ETag: {e}\r\n"));
    }
    if let Some(lm) = &obj.last_modified {
        validators.push_str(&format!("Last-Modified: {lm}\r\n"));
    }
    let not_modified = obj.status == 200
        && match (req.header("if-none-match"), req.header("if-modified-since")) {
            (Some(inm), _) => obj
                .etag
                .as_ref()
                .is_some_and(|e| inm.split(',').any(|t| t.trim() == e || t.trim() == "*")),
            (None, Some(ims)) => obj.last_modified.as_deref() == Some(ims),
            (None, None) => false,
        };
    let mut extra = String::new();
    if let Some(cc) = &obj.cache_control {
        extra.push_str(&format!("Cache-Control: {cc}\r\n"));
    }
    for (k, v) in &obj.headers {
        extra.push_str(&format!("{k}: {v}\r\n"));
    }
    if not_modified {
        head.push_str(&format!(
            "HTTP/1.1 304 Not Modified\r\n{validators}{extra}{}\r\n",
            conn_header(keep_alive)
        ));
        return stream.write_all(head.as_bytes()).is_ok() && keep_alive;
    }
    if let Some(Fault::Chunked(cut)) = fault {
        head.push_str(&format!(
            "HTTP/1.1 {} {}\r\nTransfer-Encoding: chunked\r\nContent-Type: application/octet-stream\r\n{validators}{extra}{}\r\n",
            obj.status,
            reason(obj.status),
            conn_header(keep_alive && cut.is_none())
        ));
        if stream.write_all(head.as_bytes()).is_err() || req.method == "HEAD" {
            return false;
        }
        let limit = cut.unwrap_or(obj.body.len()).min(obj.body.len());
        for part in obj.body[..limit].chunks(10_000) {
            if !timing.chunk_delay.is_zero() {
                std::thread::sleep(timing.chunk_delay);
            }
            let framed = [format!("{:x}\r\n", part.len()).as_bytes(), part, b"\r\n"].concat();
            if stream.write_all(&framed).is_err() {
                return false;
            }
        }
        if cut.is_some() {
            return false;
        }
        return stream.write_all(b"0\r\n\r\n").is_ok() && keep_alive;
    }
    let (status, span) = if obj.status == 200 {
        match range_of(req.header("range"), len) {
            Ok(Some((s, e))) => (206, Some((s, e))),
            Ok(None) => (200, None),
            Err(()) => {
                let head = format!(
                    "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{len}\r\nContent-Length: 0\r\n{validators}{}\r\n",
                    conn_header(keep_alive)
                );
                return stream.write_all(head.as_bytes()).is_ok() && keep_alive;
            }
        }
    } else {
        (obj.status, None)
    };
    let span = match (&fault, span) {
        (Some(Fault::RangeBytes(n)), Some((s, _))) => Some((s, (s + n - 1).min(len - 1))),
        (_, span) => span,
    };
    let (start, end) = span.unwrap_or((0, len.saturating_sub(1)));
    let body: &[u8] = if len == 0 {
        &[]
    } else {
        &obj.body[start as usize..=end as usize]
    };
    let announced = match &fault {
        Some(Fault::ContentLength(n)) => *n,
        _ => body.len() as u64,
    };
    let closes = !keep_alive
        || matches!(
            fault,
            Some(Fault::ContentLength(_))
                | Some(Fault::TruncateAfter(_))
                | Some(Fault::ResetAfter(_))
        );
    head.push_str(&format!(
        "HTTP/1.1 {status} {}\r\nContent-Length: {announced}\r\nAccept-Ranges: bytes\r\nContent-Type: application/octet-stream\r\n",
        reason(status)
    ));
    if let Some((s, e)) = span {
        head.push_str(&format!("Content-Range: bytes {s}-{e}/{len}\r\n"));
    }
    head.push_str(&validators);
    head.push_str(&extra);
    head.push_str(conn_header(!closes));
    head.push_str("\r\n");
    if stream.write_all(head.as_bytes()).is_err() || stream.flush().is_err() {
        return false;
    }
    if req.method == "HEAD" {
        return !closes;
    }
    if let (Some(Fault::SlowFromStart(d)), 0) = (&fault, start) {
        std::thread::sleep(*d);
    }
    let limit = match fault {
        Some(Fault::StallAfter(n)) | Some(Fault::ResetAfter(n)) | Some(Fault::TruncateAfter(n)) => {
            n.min(body.len())
        }
        _ => body.len(),
    };
    let mut sent = 0;
    while sent < limit {
        if !timing.chunk_delay.is_zero() {
            std::thread::sleep(timing.chunk_delay);
        }
        let n = timing.chunk_size.max(1).min(limit - sent);
        if stream.write_all(&body[sent..sent + n]).is_err() || stream.flush().is_err() {
            return false;
        }
        sent += n;
        if timing.rate > 0 {
            std::thread::sleep(Duration::from_secs_f64(n as f64 / timing.rate as f64));
        }
        if sh.stop.load(Ordering::SeqCst) {
            return false;
        }
    }
    match fault {
        Some(Fault::StallAfter(_)) => {
            while !sh.stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
            false
        }
        Some(Fault::ResetAfter(_)) => {
            reset(raw);
            false
        }
        _ => !closes,
    }
}

fn conn_header(keep_alive: bool) -> &'static str {
    if keep_alive {
        "Connection: keep-alive\r\n"
    } else {
        "Connection: close\r\n"
    }
}

/// Close with RST: SO_LINGER 0, then close the descriptor's connection.
fn reset(tcp: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a descriptor we own, with a correctly sized linger value.
    unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    let _ = tcp.shutdown(std::net::Shutdown::Both);
}

/// A certificate authority made at test time, and the server certificates it signs.
pub struct TestCa {
    pub cert_pem: String,
    cert_der: rustls::pki_types::CertificateDer<'static>,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    pub fn new(common_name: &str) -> TestCa {
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("self-signed CA");
        TestCa {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// Write the CA certificate as PEM to `dir/NAME` and return the path.
    pub fn write_pem(&self, dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, &self.cert_pem).expect("write CA PEM");
        p
    }

    /// A rustls server configuration presenting a self-signed CA certificate (CA:TRUE) for
    /// `names` as its own, as `openssl req -x509` makes one, and that certificate's PEM.
    pub fn self_signed_ca_as_server(names: &[&str]) -> (Arc<rustls::ServerConfig>, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).expect("self-signed");
        (tls_server(vec![cert.der().clone()], &key), cert.pem())
    }

    /// A rustls server configuration presenting a self-signed (CA:FALSE) certificate for
    /// `names` whose subject, so its issuer, is `CN=common_name`: named like a CA the client
    /// may trust, signed by another key (as Debian's `CN=localhost` snakeoil certificate and a
    /// self-signed `CN=localhost` one).
    pub fn self_signed_named_like(common_name: &str, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().expect("key");
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        let cert = params.self_signed(&key).expect("self-signed");
        tls_server(vec![cert.der().clone()], &key)
    }

    /// A rustls server configuration with a leaf certificate for `names`.
    pub fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).expect("leaf params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test origin");
        let leaf = params.signed_by(&key, &self.issuer).expect("sign leaf");
        tls_server(vec![leaf.der().clone(), self.cert_der.clone()], &key)
    }
}

/// A rustls server configuration presenting `chain` with the private key `key`.
fn tls_server(
    chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: &rcgen::KeyPair,
) -> Arc<rustls::ServerConfig> {
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(
        rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()),
    );
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .expect("server certificate");
    Arc::new(cfg)
}
