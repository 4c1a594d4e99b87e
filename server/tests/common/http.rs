//! A raw-socket HTTP/1.1 client: exactly the bytes a test means to send, and the response as
//! the server wrote it. Two ways to read:
//! - one-shot ([`request`], [`get`]): a fresh connection with `Connection: close`, read to EOF;
//!   the body is every byte after the head, so a server sending more or less than its
//!   Content-Length shows;
//! - [`Conn`]: a connection kept open for keep-alive and pipelining, each response framed by its
//!   Content-Length (none after HEAD and 304), unread bytes kept for the next one.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Read timeout of every client socket: a server that stops answering fails the test, it does
/// not hang it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(15);

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The value of the first header named `name` (case-insensitive) in `headers`.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

impl Response {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// The body as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The bytes of a request: `METHOD path HTTP/1.1`, `Host: t`, `headers`, and `Connection:
/// close` when `close`.
pub fn request_bytes(method: &str, path: &str, headers: &[(&str, &str)], close: bool) -> Vec<u8> {
    let mut raw = format!("{method} {path} HTTP/1.1\r\nHost: t\r\n");
    for (name, value) in headers {
        raw.push_str(&format!("{name}: {value}\r\n"));
    }
    if close {
        raw.push_str("Connection: close\r\n");
    }
    raw.push_str("\r\n");
    raw.into_bytes()
}

/// One request on a fresh connection with `Connection: close`, read to EOF.
pub fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Response> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(READ_TIMEOUT))?;
    s.write_all(&request_bytes(method, path, headers, true))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let (mut resp, head_len) = parse_head(&raw)?.ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("closed before a response head ({} bytes)", raw.len()),
        )
    })?;
    resp.body = raw[head_len..].to_vec();
    Ok(resp)
}

/// [`try_request`], panicking with what went wrong.
pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    try_request(addr, method, path, headers)
        .unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"))
}

/// `GET path` on a fresh connection, read to EOF.
pub fn try_get(addr: SocketAddr, path: &str) -> std::io::Result<Response> {
    try_request(addr, "GET", path, &[])
}

/// [`try_get`], panicking with what went wrong.
pub fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, &[])
}

/// The head at the start of `raw` when complete: the response without body, and its length.
fn parse_head(raw: &[u8]) -> std::io::Result<Option<(Response, usize)>> {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {status_line:?}")))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let resp = Response {
        status,
        headers,
        body: Vec::new(),
    };
    Ok(Some((resp, end + 4)))
}

/// A client connection that keeps unread bytes between responses (pipelining).
pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn new(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    /// Write raw bytes.
    pub fn send(&mut self, raw: &[u8]) {
        self.stream.write_all(raw).expect("write request");
    }

    /// Send `GET path` (keep-alive) without reading the response.
    pub fn send_get(&mut self, path: &str) {
        self.send(&request_bytes("GET", path, &[], false));
    }

    /// One keep-alive request and its response.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> std::io::Result<Response> {
        self.send(&request_bytes(method, path, headers, false));
        self.response(method == "HEAD")
    }

    /// `GET path` (keep-alive) and its response.
    pub fn get(&mut self, path: &str) -> Response {
        self.request("GET", path, &[])
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    fn fill(&mut self) -> std::io::Result<usize> {
        let mut tmp = [0u8; 65536];
        let n = self.stream.read(&mut tmp)?;
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(n)
    }

    /// Read one response; `head_request`: no body follows regardless of Content-Length.
    pub fn response(&mut self, head_request: bool) -> std::io::Result<Response> {
        let (mut resp, head_len) = loop {
            if let Some(parsed) = parse_head(&self.buf)? {
                break parsed;
            }
            if self.fill()? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("closed before a response head ({} bytes)", self.buf.len()),
                ));
            }
        };
        self.buf.drain(..head_len);
        let len: usize = if head_request || resp.status == 304 {
            0
        } else {
            resp.header("Content-Length")
                .map(|v| v.parse().expect("numeric Content-Length"))
                .unwrap_or(0)
        };
        while self.buf.len() < len {
            if self.fill()? == 0 {
                resp.body = std::mem::take(&mut self.buf);
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("body ended after {} of {len} bytes", resp.body.len()),
                ));
            }
        }
        resp.body = self.buf.drain(..len).collect();
        Ok(resp)
    }

    /// True when the server closed the connection (EOF) within `timeout`.
    pub fn closed_within(&mut self, timeout: Duration) -> bool {
        self.stream.set_read_timeout(Some(timeout)).unwrap();
        loop {
            match self.fill() {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }

    /// Bytes received and not yet consumed by `response`.
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }

    /// Read until EOF; returns everything received (including pending bytes).
    pub fn read_to_end(&mut self) -> Vec<u8> {
        while let Ok(n) = self.fill() {
            if n == 0 {
                break;
            }
        }
        std::mem::take(&mut self.buf)
    }
}

/// A `GET path` (with `extra` header lines) of which the first `first` bytes of the answer were
/// read and the rest left unread. With `recv_buffer`, a receive buffer that small is set
/// before connect, so the server, not the client's kernel, holds the rest. Returns the stream
/// and those bytes; [`rest_of_body`] reads on.
pub fn partly_read(
    addr: SocketAddr,
    path: &str,
    extra: &str,
    recv_buffer: Option<usize>,
    first: usize,
) -> (TcpStream, Vec<u8>) {
    use rustix::net::{sockopt, AddressFamily, SocketType};
    let family = if addr.is_ipv6() {
        AddressFamily::INET6
    } else {
        AddressFamily::INET
    };
    let fd = rustix::net::socket(family, SocketType::STREAM, None).expect("socket");
    if let Some(size) = recv_buffer {
        sockopt::set_socket_recv_buffer_size(&fd, size).expect("SO_RCVBUF");
    }
    rustix::net::connect(&fd, &addr).expect("connect");
    let mut c = TcpStream::from(fd);
    c.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n").as_bytes())
        .expect("request");
    let mut got = vec![0u8; first];
    c.read_exact(&mut got).expect("the answer's first bytes");
    (c, got)
}

/// The body of an answer [`partly_read`] began: the rest read to the end (a reset after a cut
/// is not an error here), the head cut off.
pub fn rest_of_body((mut c, mut got): (TcpStream, Vec<u8>)) -> Vec<u8> {
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    got.extend_from_slice(&rest);
    let head = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    got.split_off(head)
}
