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
//! - `auto`: what the page cache can answer without I/O (RESOLVE_CACHED opens, sendfile of ranges
//!   mincore proves filled) inline, everything else on the pool.
//!
//! A layer that serves other bytes from a volume (a cache volume) uses the same four doors: its
//! writes, renames and unlinks go through [`Volume::run_blocking`], its reads of a stored file
//! through [`Volume::open`] (or [`RequestFile::from`] a file it opened itself), [`Volume::admit`]
//! and [`Volume::send_body`] for any byte range, so the offload policy stays here.
//!
//! The blocking work itself is in [`crate::fs`]; the overflow rule in [`crate::pool`]. It must not
//! know about HTTP (status codes, heads) nor read from the socket.

mod hot;
mod send;

pub use crate::fs::listdir::DirEntry;
pub use crate::fs::open::{OpenError, OpenedFile};
pub use send::{BodyError, Watch};

use crate::config::{self, Offload};
use crate::fs::listdir::read_dir;
use crate::fs::open::open_file;
use crate::fs::sendfile::{read_whole, sendfile_chunk};
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

impl From<OpenedFile> for RequestFile {
    /// A file opened another way (for example by work given to [`Volume::run_blocking`]): not
    /// admitted yet, so [`Volume::admit`] checks it before its head goes out.
    fn from(file: OpenedFile) -> RequestFile {
        RequestFile {
            file,
            admitted_by_pool: false,
        }
    }
}

impl Volume {
    /// Whether a file served from this volume may be fstat'ed at each use on the event loop
    /// (not with `offload = always`, nor `auto` where reads are not tried inline).
    pub fn fstat_on_use(&self) -> bool {
        self.hot.fstat_on_use()
    }

    /// (device, inode) of the root directory this volume holds open: what `/readyz` compares
    /// with the configured path's, since a directory removed and made again at that path is
    /// not the one served.
    pub fn root_identity(&self) -> Option<(u64, u64)> {
        let st = rustix::fs::fstat(&*self.root).ok()?;
        Some((st.st_dev, st.st_ino))
    }

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
        // Every file is opened beneath it: without search permission nothing could be served.
        rustix::fs::access(&v.path, rustix::fs::Access::EXEC_OK).with_context(|| {
            format!(
                "volume {:?}: cannot search directory {} (this process needs execute permission on it)",
                v.name,
                v.path.display()
            )
        })?;
        let pool = Pool::start(&v.name, v.pool.threads, v.pool.max_queue, metrics)
            .with_context(|| format!("volume {:?}: cannot start thread pool", v.name))?;
        if v.offload == Offload::Auto {
            pin_code_once();
        }
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
    pub async fn open(&self, rel: &[u8]) -> Result<RequestFile, OpenError> {
        if let InlineOpen::Hit(file) = self.hot.open_inline(self.root.as_fd(), rel, &self.index)? {
            return Ok(RequestFile {
                file,
                admitted_by_pool: false,
            });
        }
        let result = match self.offload {
            Offload::Never => open_file(self.root.as_fd(), rel, &self.index),
            Offload::Always | Offload::Auto => {
                let (owned, index) = (rel.to_vec(), self.index.clone());
                self.run_blocking(PoolOp::Open, move |root| open_file(root, &owned, &index))
                    .await
                    .unwrap_or_else(|e| Err(pool_error(e)))
            }
        };
        self.hot.opened(rel, &result);
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
        file.admitted_by_pool || self.admit_range(&file.file.fd, start, len)
    }

    /// [`Volume::admit`] for bytes of any open file of this volume (a cache entry, a fill's
    /// temporary file) whose open did not run on the pool.
    pub fn admit_range(&self, fd: &OwnedFd, start: u64, len: u64) -> bool {
        match self.offload {
            Offload::Never => true,
            Offload::Always => self.pool.admit().is_ok(),
            Offload::Auto => {
                self.pool.has_room()
                    || self.hot.chunk_resident(fd, start, len)
                    || self.pool.admit().is_ok()
            }
        }
    }

    /// `auto`: send a small response (`head`, then bytes `start..start + len` of `file`) whose
    /// body is resident in one send from the event loop (see [`HotPath::send_small`]).
    /// `Ok(None)`: nothing sent, the caller sends head and body the usual way; `Ok(Some(n))`: `n`
    /// bytes of head and body went out, the caller sends the rest.
    pub fn send_small(
        &self,
        sock: &TcpStream,
        head: &[u8],
        file: &OwnedFd,
        start: u64,
        len: u64,
    ) -> io::Result<Option<usize>> {
        if self.offload != Offload::Auto {
            return Ok(None);
        }
        self.hot.send_small(sock, head, file, start, len)
    }

    /// Send one chunk (at most `len` bytes of `file` from `offset`) of an admitted response to
    /// the non-blocking socket: `auto` tries resident bytes inline first (sendfile of the pages
    /// mincore proves filled, or an RWF_NOWAIT copy where it cannot); the rest is sendfile on the pool (`always`, `auto` misses; never
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
            Offload::Never => send_from_disk(sock, file, offset, len),
            Offload::Always | Offload::Auto => {
                let (s, f) = (sock.clone(), file.clone());
                // The response was admitted before its head went out: never rejected.
                self.pool
                    .run_continuation(PoolOp::Sendfile, move || {
                        send_from_disk(&s, &f, offset, len)
                    })
                    .await
                    .unwrap_or_else(|e| Err(io::Error::other(e)))
            }
        }
    }

    /// The entries of directory `rel` for a listing (at most `max`, and whether there were more),
    /// read where the offload mode says (as one `open` task on the pool).
    pub async fn list_dir(
        &self,
        rel: Vec<u8>,
        max: usize,
    ) -> Result<(Vec<DirEntry>, bool), OpenError> {
        self.run_blocking(PoolOp::Open, move |root| read_dir(root, &rel, max))
            .await
            .map_err(pool_error)?
    }

    /// The volume's pool, for work that never runs inline whatever the offload mode: the cache's
    /// writes, renames and unlinks (the event loop never writes), queued by `crate::cache`.
    pub fn pool(&self) -> &Pool {
        &self.pool
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

/// `auto` promises that an event loop never waits for the disk, its own code included: lock the
/// process's code in memory once ([`crate::fs::pin`]), before the first request.
fn pin_code_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| match crate::fs::pin::pin_own_mappings() {
        (locked, None) => tracing::info!(
            locked_kib = locked / 1024,
            "offload=auto: the server's code is locked in memory"
        ),
        (locked, Some(e)) => tracing::info!(
            locked_kib = locked / 1024,
            "offload=auto: only part of the server's code could be locked in memory ({e}; \
             raise RLIMIT_MEMLOCK or grant CAP_IPC_LOCK): under memory pressure an event loop \
             may wait for its own code to be read back"
        ),
    });
}

fn pool_error(e: PoolError) -> OpenError {
    match e {
        PoolError::Overflow(_) => OpenError::Overflow,
        PoolError::Lost(e) => OpenError::Io(io::Error::other(e)),
    }
}

/// The blocking send of one chunk: read the whole chunk as one request, then sendfile it. Served
/// files have no readahead ([`crate::fs::open::without_readahead`]: it would mark pages whose
/// later inline send starts disk reads from the event loop), so this read is the only one, sized
/// to the chunk; resident pages are skipped. Runs where the offload mode says.
fn send_from_disk(sock: &TcpStream, file: &OwnedFd, offset: u64, len: usize) -> io::Result<usize> {
    read_whole(file, offset, len);
    sendfile_chunk(sock, file, offset, len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::test_support::disk_tempdir;
    use crate::metrics::CacheOp;
    use std::path::Path;
    use std::thread::{self, ThreadId};

    /// A started volume "v" over `dir` with one pool thread and no queue.
    fn volume(dir: &Path, offload: Offload) -> Arc<Volume> {
        volume_and_metrics(dir, offload).0
    }

    fn volume_and_metrics(dir: &Path, offload: Offload) -> (Arc<Volume>, Metrics) {
        let mut cfg = config::Config::for_root(dir);
        let v = &mut cfg.volumes[0];
        (v.name, v.offload, v.pool.threads, v.pool.max_queue) = ("v".into(), offload, 1, 0);
        let m = Metrics::new(&["v"], 1);
        (
            Arc::new(Volume::start(&cfg.volumes[0], &cfg, &m).unwrap()),
            m,
        )
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// Create `name` beneath `root` holding `data`.
    fn create(root: BorrowedFd<'_>, name: &str, data: &[u8]) -> io::Result<usize> {
        let flags = OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(root, name, flags, Mode::from_raw_mode(0o644))?;
        Ok(rustix::io::write(&fd, data)?)
    }

    #[test]
    fn run_blocking_writes_beneath_the_root_and_open_reads_it_back() {
        let dir = disk_tempdir();
        for offload in [Offload::Always, Offload::Auto, Offload::Never] {
            let v = volume(dir.path(), offload);
            let name = format!("new-{}.txt", offload.as_str());
            let n = block_on(v.run_blocking(PoolOp::Open, {
                let name = name.clone();
                move |root| create(root, &name, b"hello")
            }))
            .unwrap()
            .unwrap();
            assert_eq!(n, 5);
            assert_eq!(std::fs::read(dir.path().join(&name)).unwrap(), b"hello");
            let f = block_on(v.open(name.as_bytes())).unwrap();
            assert_eq!(f.file.size, 5);
            // Admission of a file opened any way is the volume's rule (here: room in the pool).
            assert!(v.admit(&RequestFile::from(f.file), 0, 5));
        }
    }

    #[test]
    fn run_blocking_runs_inline_only_for_never() {
        let dir = disk_tempdir();
        let here = thread::current().id();
        let ran_on = |offload| -> ThreadId {
            let v = volume(dir.path(), offload);
            block_on(v.run_blocking(PoolOp::Open, |_| thread::current().id())).unwrap()
        };
        assert_eq!(ran_on(Offload::Never), here);
        assert_ne!(ran_on(Offload::Always), here);
        assert_ne!(ran_on(Offload::Auto), here);
    }

    #[test]
    fn run_blocking_is_refused_when_the_pool_is_full() {
        let dir = disk_tempdir();
        let v = volume(dir.path(), Offload::Always);
        block_on(async {
            let (started_tx, started) = tokio::sync::oneshot::channel();
            let (release, wait) = std::sync::mpsc::channel::<()>();
            let busy = tokio::spawn({
                let v = v.clone();
                async move {
                    v.run_blocking(PoolOp::Open, move |_| {
                        let _ = started_tx.send(());
                        wait.recv().is_ok()
                    })
                    .await
                }
            });
            // The only thread is busy and no task may wait: the next work is refused at once.
            started.await.unwrap();
            let refused = v.run_blocking(PoolOp::Open, |_| ()).await;
            assert!(
                matches!(refused, Err(PoolError::Overflow(_))),
                "{refused:?}"
            );
            // So is a request whose open would need the pool.
            assert!(matches!(v.open(b"missing").await, Err(OpenError::Overflow)));
            release.send(()).unwrap();
            assert!(busy.await.unwrap().unwrap());
            // Room again.
            assert!(v.run_blocking(PoolOp::Open, |_| ()).await.is_ok());
        });
    }

    #[test]
    fn the_loop_reads_nothing_from_the_disk_after_the_pool_read_a_chunk() {
        // Readahead marks one page of each window it reads, and reading a marked page starts the
        // next window's reads even when every page sent is in memory. A pool read must mark
        // nothing, so the event loop's inline sendfile of the bytes it brought in submits no
        // read. This thread plays the event loop; getrusage counts the reads it submitted.
        let dir = disk_tempdir();
        let data: Vec<u8> = (0..4usize << 20).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("big"), &data).unwrap();
        let (v, m) = volume_and_metrics(dir.path(), Offload::Auto);
        let file = block_on(v.open(b"big")).unwrap().file.fd;
        crate::fs::test_support::evict(&std::fs::File::open(dir.path().join("big")).unwrap());
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        // A small send buffer: the pool's sendfile of a chunk stops short, and the rest of the
        // chunk, read in by the pool, goes out from this thread.
        rustix::net::sockopt::set_socket_send_buffer_size(&server, 64 * 1024).unwrap();
        server.set_nonblocking(true).unwrap();
        let server = Arc::new(server);
        let reader = thread::spawn(move || {
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut &client, &mut got).unwrap();
            got
        });
        let before = crate::fs::rusage::blocks_read();
        let mut sent = 0usize;
        block_on(async {
            while sent < data.len() {
                let chunk = (data.len() - sent).min(v.max_chunk);
                match v.send_chunk(&server, &file, sent as u64, chunk).await {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        tokio::time::sleep(std::time::Duration::from_millis(1)).await
                    }
                    Err(e) => panic!("send failed at {sent}: {e}"),
                }
            }
        });
        let read_here = crate::fs::rusage::blocks_read() - before;
        server.shutdown(std::net::Shutdown::Write).unwrap();
        assert!(reader.join().unwrap() == data, "the body arrived changed");
        let inline = m
            .page_cache_hits_total
            .with_label_values(&["v", CacheOp::Read.as_str()])
            .get();
        assert!(
            inline > 0,
            "no chunk was sent from memory: the test proves nothing"
        );
        assert_eq!(
            read_here, 0,
            "the event loop submitted reads of {read_here} blocks"
        );
    }
}
