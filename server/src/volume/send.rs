//! Response body transmission with sendfile(2) in chunks of at most `limits.sendfile_max_chunk`.
//!
//! [`send_chunk`] is the one place that decides where a chunk is sent (the volume's pool for
//! `always`, inline for `never`); [`send_body`] loops over chunks, resuming after a short write
//! when the socket is writable again. A file that shrinks or fails (EIO) mid-body ends the
//! response with an error: the caller closes the connection and logs it. It must not write
//! headers or know about HTTP.

use crate::config::Offload;
use crate::fs::hot::InlineSend;
use crate::metrics::PoolOp;
use crate::socket::Socket;
use crate::volume::Volume;
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

/// Why a body was not sent completely.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("file ended at byte {at}, {missing} bytes before the announced length (file shrank?)")]
    Truncated { at: u64, missing: u64 },
    #[error("reading the file failed at byte {at}: {source}")]
    File { at: u64, source: io::Error },
    #[error("client write failed: {0}")]
    Client(io::Error),
    #[error("client accepted no data for {0:?}")]
    Timeout(Duration),
}

/// The blocking work: one sendfile call from `file` at `offset` to the non-blocking socket.
/// Returns bytes sent (0 = end of file) or the error (EAGAIN = socket full).
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

/// Send one body chunk where the volume's offload mode says.
pub async fn send_chunk(
    vol: &Volume,
    sock: &Arc<TcpStream>,
    file: &Arc<OwnedFd>,
    offset: u64,
    len: usize,
) -> Result<io::Result<usize>, BodyError> {
    if vol.offload == Offload::Auto {
        // Resident bytes are read (RWF_NOWAIT) and written here; only misses go to the pool.
        match vol.hot.send_inline(sock, file, offset, len) {
            Ok(InlineSend::Sent(n)) => return Ok(Ok(n)),
            Ok(InlineSend::SocketFull) => return Ok(Err(io::ErrorKind::WouldBlock.into())),
            Ok(InlineSend::Miss) => {}
            Err(e) => return Ok(Err(e)),
        }
    }
    match vol.offload {
        Offload::Never => Ok(sendfile_chunk(sock, file, offset, len)),
        Offload::Always | Offload::Auto => {
            let (s, f) = (sock.clone(), file.clone());
            // The response was admitted before its head went out: its chunks are never rejected.
            match vol
                .pool
                .run_continuation(PoolOp::Sendfile, move || {
                    sendfile_chunk(&s, &f, offset, len)
                })
                .await
            {
                Ok(r) => Ok(r),
                Err(e) => Ok(Err(io::Error::other(e))),
            }
        }
    }
}

/// Send bytes `start..start+len` of `file`. Returns the bytes sent (== len on success).
pub async fn send_body(
    vol: &Volume,
    sock: &Socket,
    file: &Arc<OwnedFd>,
    start: u64,
    len: u64,
    send_timeout: Duration,
) -> Result<u64, BodyError> {
    let shared = sock.shared();
    let mut sent = 0u64;
    while sent < len {
        let chunk = (len - sent).min(vol.max_chunk as u64) as usize;
        let mut guard = tokio::time::timeout(send_timeout, sock.writable())
            .await
            .map_err(|_| BodyError::Timeout(send_timeout))?
            .map_err(BodyError::Client)?;
        match send_chunk(vol, &shared, file, start + sent, chunk).await? {
            Ok(0) => {
                return Err(BodyError::Truncated {
                    at: start + sent,
                    missing: len - sent,
                })
            }
            Ok(n) => sent += n as u64,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
            Err(e) if is_client_error(&e) => return Err(BodyError::Client(e)),
            Err(e) => {
                return Err(BodyError::File {
                    at: start + sent,
                    source: e,
                })
            }
        }
    }
    Ok(sent)
}

fn is_client_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPIPE) | Some(libc::ECONNRESET) | Some(libc::ENOTCONN) | Some(libc::ETIMEDOUT)
    )
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
