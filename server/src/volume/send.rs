//! A response body: bytes `start..start + len` of a file, in chunks of at most
//! `limits.sendfile_max_chunk`, each sent where [`Volume::send_chunk`] decides, resuming after a
//! short write when the socket is writable again. A file that shrinks or fails (EIO) mid-body ends
//! the response with an error: the caller closes the connection and logs it. So does a file
//! that no longer is what the caller holds it to ([`Watch`]: a served file rewritten in place,
//! shorter or its size with another modification time for a moment, while one that grew may
//! just be appended to and is served as the prefix it was; a cache entry changed at all),
//! found by an fstat before each part that waited for the client: the client gets a short
//! body, not one of two versions. It must not write headers or know about HTTP.

use super::Volume;
use crate::fs::open::{Change, FileVersion};
use crate::socket::Socket;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

/// What the file a response sends must stay while it is sent (checked where fstat may run on
/// the event loop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// A served file: this version, or a longer one (only appended to: a recording being
    /// written), whose growth is followed (a later rewrite at its new size is caught too).
    Prefix(FileVersion),
    /// A cache entry, never written after its commit: exactly this version.
    Exact(FileVersion),
}

/// Why a body was not sent completely. Each says how many of its bytes were sent before
/// (`sent`), for the response's byte count.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("file ended at byte {at}, {missing} bytes before the announced length (file shrank?)")]
    Truncated { at: u64, missing: u64, sent: u64 },
    #[error("file {how} at byte {at} of the response; the rest would be another version")]
    Changed {
        at: u64,
        /// "shrank", "grew" or "was rewritten in place".
        how: &'static str,
        sent: u64,
    },
    #[error("reading the file failed at byte {at}: {source}")]
    File {
        at: u64,
        source: io::Error,
        sent: u64,
    },
    #[error("client write failed: {source}")]
    Client { source: io::Error, sent: u64 },
    #[error("client accepted no data for {after:?}")]
    Timeout { after: Duration, sent: u64 },
}

impl BodyError {
    /// Body bytes that went out before it.
    pub fn sent(&self) -> u64 {
        match self {
            BodyError::Truncated { sent, .. }
            | BodyError::Changed { sent, .. }
            | BodyError::File { sent, .. }
            | BodyError::Client { sent, .. }
            | BodyError::Timeout { sent, .. } => *sent,
        }
    }
}

impl Volume {
    /// Send bytes `start..start + len` of `file` (any file: a byte range of an admitted response)
    /// to `sock`, waiting at most `send_timeout` for the client to take more. Returns the bytes
    /// sent (== len on success). With `watch`, the file must stay as it says while more of it
    /// is to be sent (the caller passes one where fstat may run on the event loop:
    /// [`Volume::fstat_on_use`] for a served file, always for a cache entry).
    pub async fn send_body(
        &self,
        sock: &Socket,
        file: &Arc<OwnedFd>,
        start: u64,
        len: u64,
        send_timeout: Duration,
        mut watch: Option<Watch>,
    ) -> Result<u64, BodyError> {
        let shared = sock.shared();
        let mut sent = 0u64;
        while sent < len {
            let chunk = (len - sent).min(self.max_chunk as u64) as usize;
            // A socket that never waited is tried directly (no timer, no registration): it is
            // registered by the first chunk that would block, and waited for from then on.
            let mut guard = if sock.is_registered() {
                let g = sock
                    .writable_within(send_timeout)
                    .await
                    .map_err(|source| match source.kind() {
                        std::io::ErrorKind::TimedOut => BodyError::Timeout {
                            after: send_timeout,
                            sent,
                        },
                        _ => BodyError::Client { source, sent },
                    })?;
                Some(g)
            } else {
                None
            };
            // Checked when the socket took more, just before its bytes are read: a rewrite while
            // the response waited (a slow client) is caught before any of the new bytes go out,
            // the last chunk's included. (A first chunk sent without waiting is covered by the
            // caller's check at use. A rewrite after a chunk was queued can still reach the
            // client through the page cache: sendfile does not copy.)
            if let Some(w) = watch.filter(|_| sent > 0 || guard.is_some()) {
                match changed(file, w).await {
                    Ok(grown) => watch = grown.or(watch),
                    Err(how) => {
                        return Err(BodyError::Changed {
                            at: start + sent,
                            how,
                            sent,
                        })
                    }
                }
            }
            match self.send_chunk(&shared, file, start + sent, chunk).await {
                Ok(0) => {
                    return Err(BodyError::Truncated {
                        at: start + sent,
                        missing: len - sent,
                        sent,
                    })
                }
                Ok(n) => sent += n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => match guard.as_mut() {
                    Some(g) => g.clear_ready(),
                    None => sock
                        .register()
                        .map_err(|source| BodyError::Client { source, sent })?,
                },
                Err(e) if is_client_error(&e) => return Err(BodyError::Client { source: e, sent }),
                Err(e) => {
                    return Err(BodyError::File {
                        at: start + sent,
                        source: e,
                        sent,
                    })
                }
            }
        }
        Ok(sent)
    }
}

/// How long a served file of its planned size but another modification time is given to grow
/// before it counts as rewritten in place, and how often it is looked at meanwhile. An append
/// sets the time before it adds its bytes, and may wait for the filesystem's journal in between
/// (tens of milliseconds after a large write); a rewrite at the same size never grows.
const TOUCHED_GRACE: Duration = Duration::from_millis(200);
const TOUCHED_STEP: Duration = Duration::from_millis(5);

/// Whether `file` is still what `watch` holds it to: `Ok(None)` as it was, `Ok(Some(w))` a
/// served file that grew (now held to `w`), `Err(how)` changed. A served file of its size
/// with another modification time is given [`TOUCHED_GRACE`] to grow (nothing more is sent
/// meanwhile); a cache entry is never written after its commit, so any change is one.
async fn changed(file: &OwnedFd, watch: Watch) -> Result<Option<Watch>, &'static str> {
    let now = || FileVersion::of(file);
    let mut waited = Duration::ZERO;
    loop {
        // A failed fstat: the next read says what is wrong, if anything.
        let Ok(now) = now() else { return Ok(None) };
        match watch {
            Watch::Exact(v) => {
                return match v.change(now) {
                    Change::Same => Ok(None),
                    Change::Grew => Err("grew"),
                    Change::Shrank => Err("shrank"),
                    Change::Touched => Err("was rewritten in place"),
                }
            }
            Watch::Prefix(v) => match v.change(now) {
                Change::Same => return Ok(None),
                Change::Grew => return Ok(Some(Watch::Prefix(now))),
                Change::Shrank => return Err("shrank"),
                Change::Touched if waited >= TOUCHED_GRACE => return Err("was rewritten in place"),
                Change::Touched => {
                    tokio::time::sleep(TOUCHED_STEP).await;
                    waited += TOUCHED_STEP;
                }
            },
        }
    }
}

fn is_client_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPIPE) | Some(libc::ECONNRESET) | Some(libc::ENOTCONN) | Some(libc::ETIMEDOUT)
    )
}
