//! A volume at run time: its name, an O_PATH descriptor of its root (every open is resolved
//! beneath it), its offload mode, its thread pool, its open-file cache and, for `offload = auto`,
//! its page-cache hot path (`volume/hot.rs`).
//!
//! This is the one place that decides where file work runs — inline on the event loop or on the
//! volume's pool — for each open ([`Volume::open`]), each admission ([`Volume::admit`]), each
//! body chunk ([`Volume::send_chunk`], looped by [`Volume::send_body`]) and any other blocking
//! work beneath the root ([`Volume::run_blocking`]). The modes:
//! - `never`: everything inline (blocking calls on the loop, as nginx without `aio threads`);
//! - `always`: every open and chunk on the pool (open-file cache hits excepted);
//! - `auto`: what the page cache can answer without I/O (RESOLVE_CACHED opens, RWF_NOWAIT reads)
//!   inline, everything else on the pool.
//!
//! The blocking work itself is in [`crate::fs`]; the overflow rule in [`crate::pool`]. It must not
//! know about HTTP (status codes, heads) nor read from the socket.

mod hot;
mod send;

pub use crate::fs::open::{OpenError, OpenedFile};
pub use send::BodyError;

use crate::config::{self, Offload};
use crate::fs::open::open_file;
use crate::fs::sendfile::sendfile_chunk;
use crate::metrics::{Metrics, PoolOp};
use crate::pool::{Pool, PoolError};
use anyhow::Context;
use hot::{HotPath, InlineOpen, InlineSend};
use rustix::fs::{Mode, OFlags};
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

/// One volume, shared by every worker.
pub struct Volume {
    name: String,
    root: Arc<OwnedFd>,
    offload: Offload,
    pool: Pool,
    /// Index file names tried for directories (from `http.index`).
    index: Arc<[String]>,
    /// Largest sendfile chunk (`limits.sendfile_max_chunk`).
    max_chunk: usize,
    /// Open-file cache and, for `offload = auto`, the page-cache-only fast path.
    hot: HotPath,
}

/// A file opened through [`Volume::open`], and whether the volume's pool already admitted the
/// request by running its open (then [`Volume::admit`] needs no second check).
pub struct RequestFile {
    pub file: OpenedFile,
    admitted_by_pool: bool,
}

impl Volume {
    /// Open the root directory, start the pool and (for `auto`) probe the page-cache support.
    pub fn start(
        v: &config::Volume,
        cfg: &config::Config,
        metrics: &Metrics,
    ) -> anyhow::Result<Volume> {
        let root = rustix::fs::open(
            &v.path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .with_context(|| {
            format!(
                "volume {:?}: cannot open directory {}",
                v.name,
                v.path.display()
            )
        })?;
        let pool = Pool::start(&v.name, v.pool.threads, v.pool.max_queue, metrics)
            .with_context(|| format!("volume {:?}: cannot start thread pool", v.name))?;
        let hot = HotPath::start(&v.name, root.as_fd(), v.offload, cfg, metrics);
        Ok(Volume {
            hot,
            name: v.name.clone(),
            root: Arc::new(root),
            offload: v.offload,
            pool,
            index: cfg.http.index.clone().into(),
            max_chunk: cfg.limits.sendfile_max_chunk,
        })
    }

    /// The volume's name (its metrics label).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The `http.index` name a directory request opened ([`OpenedFile::via_index`]).
    pub fn index_name(&self, i: usize) -> &str {
        &self.index[i]
    }

    /// Open `rel` (relative, normalized, no leading `/`; empty = the root; a directory opens its
    /// first `http.index` file) for a request: from the open-file cache or, for `auto`, a
    /// RESOLVE_CACHED open on the event loop when that needs no I/O; otherwise on the volume's
    /// pool (`always`, `auto` misses: [`OpenError::Overflow`] when it is full) or inline (`never`).
    pub async fn open(&self, rel: Vec<u8>) -> Result<RequestFile, OpenError> {
        if let InlineOpen::Hit(file) = self.hot.open_inline(self.root.as_fd(), &rel, &self.index)? {
            return Ok(RequestFile {
                file,
                admitted_by_pool: false,
            });
        }
        let key = rel.clone();
        let result = match self.offload {
            Offload::Never => open_file(self.root.as_fd(), &rel, &self.index),
            Offload::Always | Offload::Auto => {
                let index = self.index.clone();
                self.run_blocking(PoolOp::Open, move |root| open_file(root, &rel, &index))
                    .await
                    .unwrap_or_else(|e| Err(pool_error(e)))
            }
        };
        self.hot.opened(&key, &result);
        result.map(|file| RequestFile {
            file,
            admitted_by_pool: self.offload != Offload::Never,
        })
    }

    /// Admission before a response head goes out: whether bytes `start..start + len` of `file`
    /// may be sent. A response whose body may need the pool is checked against the overflow rule
    /// now (counted and logged like any rejection), so overflow is a clean 503 and never a 200
    /// cut short; its chunks are then never rejected (see [`crate::pool`]). A file whose open
    /// ran on the pool was admitted then. For `auto` the residency of the first chunk is asked
    /// only when the pool has no room, so the common case costs no syscall here.
    pub fn admit(&self, file: &RequestFile, start: u64, len: u64) -> bool {
        if file.admitted_by_pool {
            return true;
        }
        match self.offload {
            Offload::Never => true,
            Offload::Always => self.pool.admit().is_ok(),
            Offload::Auto => {
                self.pool.has_room()
                    || self.hot.chunk_resident(&file.file.fd, start, len)
                    || self.pool.admit().is_ok()
            }
        }
    }

    /// Send one chunk (at most `len` bytes of `file` from `offset`) of an admitted response to
    /// the non-blocking socket: `auto` tries resident bytes inline first (RWF_NOWAIT read,
    /// written from the loop); the rest is sendfile on the pool (`always`, `auto` misses; never
    /// rejected) or inline (`never`). Returns bytes sent (0 = end of file) or the error
    /// (`WouldBlock` = socket full: wait for writability).
    pub async fn send_chunk(
        &self,
        sock: &Arc<TcpStream>,
        file: &Arc<OwnedFd>,
        offset: u64,
        len: usize,
    ) -> io::Result<usize> {
        if self.offload == Offload::Auto {
            match self.hot.send_inline(sock, file, offset, len) {
                Ok(InlineSend::Sent(n)) => return Ok(n),
                Ok(InlineSend::SocketFull) => return Err(io::ErrorKind::WouldBlock.into()),
                Ok(InlineSend::Miss) => {}
                Err(e) => return Err(e),
            }
        }
        match self.offload {
            Offload::Never => sendfile_chunk(sock, file, offset, len),
            Offload::Always | Offload::Auto => {
                let (s, f) = (sock.clone(), file.clone());
                // The response was admitted before its head went out: never rejected.
                self.pool
                    .run_continuation(PoolOp::Sendfile, move || {
                        sendfile_chunk(&s, &f, offset, len)
                    })
                    .await
                    .unwrap_or_else(|e| Err(io::Error::other(e)))
            }
        }
    }

    /// Run blocking work beneath the root (`f` gets the root's descriptor) where the offload mode
    /// says: inline for `never`, else on the volume's pool, admitted by the overflow rule
    /// ([`PoolError::Overflow`]: nothing ran; answer 503). `op` labels the pool's metrics.
    pub async fn run_blocking<F, R>(&self, op: PoolOp, f: F) -> Result<R, PoolError>
    where
        F: FnOnce(BorrowedFd<'_>) -> R + Send + 'static,
        R: Send + 'static,
    {
        match self.offload {
            Offload::Never => Ok(f(self.root.as_fd())),
            Offload::Always | Offload::Auto => {
                let root = self.root.clone();
                self.pool.run(op, move || f(root.as_fd())).await
            }
        }
    }
}

fn pool_error(e: PoolError) -> OpenError {
    match e {
        PoolError::Overflow(_) => OpenError::Overflow,
        PoolError::Lost(e) => OpenError::Io(io::Error::other(e)),
    }
}
