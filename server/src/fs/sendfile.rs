//! sendfile(2) of one chunk of a file to a non-blocking socket. Blocking when the pages are not
//! in memory; the caller decides where it runs (it must not).

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, OwnedFd};

/// One sendfile call from `file` at `offset` to the non-blocking socket. Returns bytes sent
/// (0 = end of file) or the error (EAGAIN = socket full).
pub fn sendfile_chunk(
    sock: &TcpStream,
    file: &OwnedFd,
    offset: u64,
    len: usize,
) -> io::Result<usize> {
    if let Some(r) = failpoint_send(offset) {
        return r;
    }
    let mut off = offset;
    rustix::fs::sendfile(sock.as_fd(), file.as_fd(), Some(&mut off), len).map_err(io::Error::from)
}

/// Failpoint `send_chunk`: `return(eio)` fails every chunk that does not start at file offset 0
/// with EIO; `return(truncate)` reports end of file there instead (as if the file shrank). So a
/// body larger than one chunk breaks after its first chunk.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
fn failpoint_send(offset: u64) -> Option<io::Result<usize>> {
    fail::fail_point!("send_chunk", |arg: Option<String>| {
        if offset == 0 {
            return None;
        }
        match arg.as_deref() {
            Some("eio") => Some(Err(io::Error::from_raw_os_error(libc::EIO))),
            Some("truncate") => Some(Ok(0)),
            _ => None,
        }
    });
    None
}
