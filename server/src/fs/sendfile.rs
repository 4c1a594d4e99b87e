//! sendfile(2) of one chunk of a file to a non-blocking socket, and the readahead of a whole
//! chunk before it. Blocking when the pages are not in memory; the caller decides where it runs
//! (it must not).

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

/// Ask the kernel to read `len` bytes of `file` from `offset` now (posix_fadvise WILLNEED), as
/// one request that marks no page for readahead. Served files have readahead off
/// ([`crate::fs::open::without_readahead`]), so without this a sendfile would read a cold chunk
/// one pipe's worth (64 KiB) at a time; and the kernel's own readahead starts small and doubles
/// (16 KiB, 64, 256...), so a 1 MiB chunk cost four or five reads where this costs one: on a disk
/// limited in operations per second that is the difference. Resident pages are skipped (no I/O);
/// best effort (an error only loses the hint). May block (block mapping, request allocation).
pub fn read_whole(file: &OwnedFd, offset: u64, len: usize) {
    let _ = rustix::fs::fadvise(
        file.as_fd(),
        offset,
        std::num::NonZeroU64::new(len as u64),
        rustix::fs::Advice::WillNeed,
    );
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
