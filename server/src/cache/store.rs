//! The files of one cache directory: opening an entry by id, writing a new one through a
//! temporary file in the same directory (`.tmp/`, on the same filesystem, so committing it is one
//! rename: nginx `use_temp_path=off`), deleting entries, and walking the `L1/L2` levels.
//!
//! Every function here is blocking file work: callers run it on the volume's pool (the event
//! loop never writes, fsyncs, renames or unlinks). It owns no index and no policy: what to store
//! or evict is decided by [`super::index`]. Files are not fsynced: a killed process loses nothing
//! the kernel has (the page cache survives it), and a header whose length does not match its file
//! is refused on open ([`super::entry`]); after a power loss the cache may lose entries, as nginx's.
//!
//! One process owns a cache directory: [`Store::open`] takes an exclusive `flock` on
//! [`LOCK_FILE`] before it touches anything else (the temporary-file cleanup, the rebuild) and
//! holds it while the store lives; a second process opening the directory is refused. The kernel
//! drops the lock when the process exits or is killed, so no stale lock is ever left. The lock
//! file is no entry, level directory nor temporary file: the walks and purges never look at it.

use super::entry::{self, EntryError, EntryMeta};
use super::key::EntryId;
use crate::fs::open::{without_readahead, FileVersion, NoAtime};
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Temporary files live here, inside the cache directory.
pub const TMP_DIR: &str = ".tmp";

/// The lock file of the directory's owner (holds the owner's pid, for the operator to read;
/// the `flock` on it, not its content, is the lock).
pub const LOCK_FILE: &str = ".lock";

/// NONBLOCK: opening a FIFO put where an entry belongs must not wait for a writer (it has no
/// effect on a regular file's reads; [`entry::read_meta`] refuses what is not one).
const READ_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::CLOEXEC)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NOCTTY)
    .union(OFlags::NONBLOCK);

/// What [`Store::remove_object`] did.
#[derive(Debug, Default)]
pub struct Removed {
    pub removed: Vec<EntryId>,
    pub failed: Vec<(EntryId, io::Error)>,
}

/// One cache directory.
pub struct Store {
    path: PathBuf,
    seq: AtomicU64,
    /// Entries are opened O_NOATIME ([`NoAtime`]): their bodies are sent from the event loop,
    /// and with relatime the first read after each write of a filling entry would update the
    /// access time. The cache needs none (its index keeps recency); entries are the server's own
    /// files, so the flag is allowed unless they were left by another user.
    noatime: NoAtime,
    /// The directory open, and its lock; replaced when the directory was removed at run time
    /// and is made again ([`Store::made_again`]).
    dir: RwLock<Arc<Dir>>,
    /// Called when the directory was made again (its entries are gone): the volume forgets
    /// them.
    on_remade: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

/// The cache directory, open.
struct Dir {
    root: OwnedFd,
    /// [`LOCK_FILE`], `flock`ed exclusively while the store uses this directory.
    lock: OwnedFd,
}

fn io_err(e: Errno) -> io::Error {
    io::Error::from(e)
}

impl Store {
    /// Open (creating it if needed, not its parents) the cache directory and its `.tmp/`, removing every temporary
    /// file an earlier process left (a fill it did not finish). Returns the store and how many
    /// temporary files were removed. Fails, before changing anything, when another process holds
    /// the directory ([`LOCK_FILE`]).
    pub fn open(path: &Path) -> io::Result<(Store, usize)> {
        let store = Store {
            path: path.to_path_buf(),
            seq: AtomicU64::new(0),
            noatime: NoAtime::new(),
            dir: RwLock::new(Arc::new(open_dir(path)?)),
            on_remade: std::sync::OnceLock::new(),
        };
        let removed = store.clean_temp()?;
        store.probe_write()?;
        Ok((store, removed))
    }

    /// Call `f` whenever the directory is made again (set once).
    pub fn on_remade(&self, f: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_remade.set(Box::new(f));
    }

    /// Once a second, on the pool: the directory removed at run time is made again, and so is
    /// its lock file when only that went (an `rm -rf DIR` that could not remove the directory
    /// itself, fills making levels in it meanwhile), so that a second node is still refused.
    pub fn heal(&self) -> io::Result<()> {
        let was = self.dir();
        if self.made_again(&was)? {
            return Ok(());
        }
        let ours = rustix::fs::fstat(&was.lock).map_err(io_err)?;
        let file = self.path.join(LOCK_FILE);
        let same = rustix::fs::stat(&file)
            .is_ok_and(|st| (st.st_dev, st.st_ino) == (ours.st_dev, ours.st_ino));
        if same {
            return Ok(());
        }
        let mut cur = self.dir.write().unwrap_or_else(|p| p.into_inner());
        if !Arc::ptr_eq(&cur, &was) {
            return Ok(());
        }
        *cur = Arc::new(open_dir(&self.path)?);
        tracing::warn!(path = %file.display(), "cache: the lock file was removed while the node runs; made again");
        Ok(())
    }

    /// The (device, inode) of the directory in use (made again if it was removed).
    pub fn identity(&self) -> Option<(u64, u64)> {
        let st = rustix::fs::fstat(&self.dir().root).ok()?;
        Some((st.st_dev, st.st_ino))
    }

    /// The directory as open now.
    fn dir(&self) -> Arc<Dir> {
        self.dir.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Make the cache directory again if it was removed while the node runs (an `rm -rf` of the
    /// directory itself, not only its contents: nothing could be stored in the removed one any
    /// more). True when it was (or another thread just did it).
    fn made_again(&self, was: &Arc<Dir>) -> io::Result<bool> {
        let mut cur = self.dir.write().unwrap_or_else(|p| p.into_inner());
        if !Arc::ptr_eq(&cur, was) {
            return Ok(true);
        }
        match rustix::fs::fstat(&cur.root) {
            Ok(st) if st.st_nlink == 0 => {}
            _ => return Ok(false),
        }
        *cur = Arc::new(open_dir(&self.path)?);
        if let Some(f) = self.on_remade.get() {
            f();
        }
        tracing::warn!(path = %self.path.display(), "cache: the cache directory was removed while the node runs; made again");
        Ok(true)
    }

    /// Can this process store entries here? A file made and removed in `.tmp` (a directory
    /// left by another user, read-only, would otherwise make a node that caches nothing).
    fn probe_write(&self) -> io::Result<()> {
        let name = format!("{TMP_DIR}/write-probe.{}", std::process::id());
        let at = |e: Errno, what: &str| {
            let e = io_err(e);
            io::Error::new(
                e.kind(),
                format!("cannot {what} {}: {e}", self.path.join(&name).display()),
            )
        };
        let fd = rustix::fs::openat(
            &self.dir().root,
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| at(e, "create"))?;
        drop(fd);
        rustix::fs::unlinkat(&self.dir().root, name.as_str(), AtFlags::empty())
            .map_err(|e| at(e, "remove"))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn clean_temp(&self) -> io::Result<usize> {
        let dir = rustix::fs::openat(
            &self.dir().root,
            TMP_DIR,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err)?;
        let mut n = 0;
        for name in list(&dir)? {
            match rustix::fs::unlinkat(&dir, name.as_slice(), AtFlags::empty()) {
                Ok(()) => n += 1,
                Err(Errno::NOENT) => {}
                // A directory (one moved aside by `clear_dir`, or put there by hand): removed
                // with what is in it (symlinks inside are removed, never followed).
                Err(e) => {
                    let p = self
                        .path
                        .join(TMP_DIR)
                        .join(std::ffi::OsStr::from_bytes(&name));
                    let r = match e {
                        Errno::ISDIR => std::fs::remove_dir_all(&p),
                        e => Err(io_err(e)),
                    };
                    r.map_err(|e| {
                        io::Error::new(e.kind(), format!("cannot remove {}: {e}", p.display()))
                    })?;
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// Make the `L1/L2` directories of `dir`, replacing a file or symlink in their place.
    fn make_levels(&self, dir: &str) -> io::Result<()> {
        let dir_now = self.dir();
        let root = &dir_now.root;
        for d in [&dir[..1], dir] {
            match rustix::fs::mkdirat(root, d, Mode::from_raw_mode(0o755)) {
                Ok(()) => {}
                Err(Errno::EXIST) => {
                    let st =
                        rustix::fs::statat(root, d, AtFlags::SYMLINK_NOFOLLOW).map_err(io_err)?;
                    if rustix::fs::FileType::from_raw_mode(st.st_mode)
                        != rustix::fs::FileType::Directory
                    {
                        tracing::warn!(path = %self.path.join(d).display(), "cache: replacing what is not a directory in the levels");
                        rustix::fs::unlinkat(root, d, AtFlags::empty()).map_err(io_err)?;
                        rustix::fs::mkdirat(root, d, Mode::from_raw_mode(0o755)).map_err(io_err)?;
                    }
                }
                Err(e) => return Err(io_err(e)),
            }
        }
        Ok(())
    }

    /// Take the directory at `rel` (where an entry file belongs) out of the way: moved into
    /// `.tmp/` and removed there, so the entry can be stored (the node made no such directory).
    fn clear_dir(&self, rel: &str) -> io::Result<()> {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let aside = format!("{TMP_DIR}/in-the-way.{}.{n}", std::process::id());
        let root = &self.dir().root;
        rustix::fs::renameat(root, rel, root, aside.as_str()).map_err(io_err)?;
        tracing::warn!(path = %self.path.join(rel).display(), "cache: removed a directory where an entry belongs");
        std::fs::remove_dir_all(self.path.join(&aside))
    }

    /// Open the entry `id` and check it belongs to `key` (collision) and is whole (length and
    /// header checksum). The returned descriptor serves the body from `meta.body_offset()`.
    pub fn open_entry(&self, id: EntryId, key: &[u8]) -> Result<(OwnedFd, EntryMeta), EntryError> {
        super::failpoint_open()?;
        let fd = match self.open_read(id) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Err(EntryError::Missing),
            Err(e) => return Err(EntryError::Io(io_err(e))),
        };
        let meta = entry::read_meta(&fd)?;
        if meta.key != key {
            // Another key's entry: a collision only when that key's hash names this file too;
            // otherwise a file moved or copied here (by hand), which no request would reach
            // again to replace it: dropped like a corrupt one.
            if xxhash_rust::xxh3::xxh3_128(&meta.key) != id.hash() {
                return Err(EntryError::Corrupt("an entry of another key at this path"));
            }
            return Err(EntryError::Collision);
        }
        if meta.slice != id.slice {
            return Err(EntryError::Corrupt(
                "slice number differs from the file name",
            ));
        }
        Ok((fd, meta))
    }

    /// Open entry `id` for reading, without access-time updates where allowed and without
    /// readahead (so its header read marks no body page: see [`without_readahead`]).
    fn open_read(&self, id: EntryId) -> Result<OwnedFd, Errno> {
        let rel = id.rel_path();
        let fd = crate::descriptors::for_data_plane(self.noatime.open(READ_FLAGS, |flags| {
            rustix::fs::openat(&self.dir().root, rel.as_str(), flags, Mode::empty())
        }))?;
        without_readahead(fd.as_fd());
        Ok(fd)
    }

    /// Start writing entry `id`: a new temporary file holding `meta`'s header. The body is then
    /// written with [`TempEntry::write`] and the entry published with [`TempEntry::commit`].
    pub fn create_temp(self: &Arc<Self>, id: EntryId, meta: EntryMeta) -> io::Result<TempEntry> {
        crate::cache::failpoint_write()?;
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let tmp = format!("{TMP_DIR}/{}.{}.{}", id.file_name(), std::process::id(), n);
        // O_NOATIME: reads of a filling entry are served from it (its creator may always set it).
        let open = |dir: &Dir| {
            rustix::fs::openat(
                &dir.root,
                tmp.as_str(),
                OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOATIME,
                Mode::from_raw_mode(0o644),
            )
        };
        let mut dir = self.dir();
        let mut remade = false;
        let fd = loop {
            match open(&dir) {
                Err(Errno::NOENT) => {}
                r => break r.map_err(io_err)?,
            }
            // `.tmp` removed while the node runs (an `rm -rf` of the cache's contents): made
            // again, as the levels are, rather than every fill of the volume failing.
            match rustix::fs::mkdirat(&dir.root, TMP_DIR, Mode::from_raw_mode(0o755)) {
                Ok(()) => {
                    tracing::warn!(path = %self.path.join(TMP_DIR).display(), "cache: the temporary directory was removed; made again");
                }
                Err(Errno::EXIST) => {}
                // The cache directory itself was removed: made again (once per fill).
                Err(Errno::NOENT) if !remade && self.made_again(&dir)? => {
                    remade = true;
                    dir = self.dir();
                    continue;
                }
                Err(e) => return Err(io_err(e)),
            }
            break open(&dir).map_err(io_err)?;
        };
        // Its bytes are served while it fills, and read back if evicted meanwhile.
        without_readahead(fd.as_fd());
        let header = meta.encode();
        let t = TempEntry {
            store: self.clone(),
            dir,
            fd: Arc::new(fd),
            tmp,
            id,
            body_offset: header.len() as u64,
            written: 0,
            meta,
        };
        // A number of the admin port's reserve: the data plane is out of descriptors.
        if crate::descriptors::in_admin_reserve(t.fd.as_fd()) {
            t.abort();
            return Err(io::Error::from_raw_os_error(libc::EMFILE));
        }
        if let Err(e) = entry::pwrite_all(t.fd.as_fd(), &header, 0) {
            t.abort();
            return Err(e);
        }
        Ok(t)
    }

    /// Replace entry `id`'s header by `meta` (a 304 refreshed its freshness), keeping its body:
    /// a new temporary file with the new header and the body copied from `old` (copy_file_range,
    /// no user-space copy), renamed over the old one. Returns the new file and its length.
    pub fn rewrite(
        self: &Arc<Self>,
        id: EntryId,
        old: &OwnedFd,
        old_body_offset: u64,
        meta: EntryMeta,
    ) -> io::Result<(Arc<OwnedFd>, u64)> {
        let len = meta.body_len;
        let mut t = self.create_temp(id, meta)?;
        let mut from = old_body_offset;
        let mut to = t.body_offset;
        let end = old_body_offset + len;
        while from < end {
            let want = (end - from) as usize;
            let n = rustix::fs::copy_file_range(
                old,
                Some(&mut from),
                t.fd.as_fd(),
                Some(&mut to),
                want,
            );
            match n {
                Ok(0) => {
                    t.abort();
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "cache entry shorter than its header says",
                    ));
                }
                Ok(_) => {}
                Err(Errno::INTR) => continue,
                Err(e) => {
                    t.abort();
                    return Err(io_err(e));
                }
            }
        }
        // Removed meanwhile (purged, replaced by a newer entry, evicted, deleted by hand): the
        // copy must not bring the old entry back, nor replace a newer one at its path.
        if rustix::fs::fstat(old).map_err(io_err)?.st_nlink == 0 {
            t.abort();
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the cache entry was removed while it was revalidated",
            ));
        }
        t.written = len;
        let fd = t.fd();
        let n = t.commit()?;
        Ok((fd, n))
    }

    /// Delete entry `id`'s file (or a directory in its place); false when it was not there.
    pub fn remove(&self, id: EntryId) -> io::Result<bool> {
        self.remove_unless(id, &|_| false)
    }

    /// [`Self::remove`], unless the regular file at `id`'s path is one `keep` names by its size
    /// and modification time (a newer entry committed there since the caller decided).
    pub fn remove_unless(
        &self,
        id: EntryId,
        keep: &dyn Fn(FileVersion) -> bool,
    ) -> io::Result<bool> {
        super::failpoint_remove()?;
        let rel = id.rel_path();
        match rustix::fs::statat(&self.dir().root, rel.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st)
                if rustix::fs::FileType::from_raw_mode(st.st_mode)
                    == rustix::fs::FileType::RegularFile
                    && keep(FileVersion::of_stat(&st)) =>
            {
                return Ok(false)
            }
            Err(Errno::NOENT) => return Ok(false),
            _ => {}
        }
        match rustix::fs::unlinkat(&self.dir().root, rel.as_str(), AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(Errno::ISDIR) => self.clear_dir(&rel).map(|()| true),
            Err(e) => Err(io_err(e)),
        }
    }

    /// Delete every stored slice of the object `hash` (found by listing its `L1/L2` directory):
    /// the slices deleted, and those that could not be (each with its error; the others are
    /// still deleted).
    pub fn remove_object(&self, hash: u128) -> io::Result<Removed> {
        let out = self.remove_listed(hash);
        super::failpoint_object_removed();
        out
    }

    fn remove_listed(&self, hash: u128) -> io::Result<Removed> {
        let probe = EntryId::new(hash, 0);
        let mut out = Removed::default();
        let Some(dir) = self.open_dir(&probe.dir())? else {
            return Ok(out);
        };
        for name in list(&dir)? {
            let Some(id) = EntryId::parse_file_name(&name).filter(|id| id.hash() == hash) else {
                continue;
            };
            match self.remove(id) {
                Ok(true) => out.removed.push(id),
                Ok(false) => {}
                Err(e) => out.failed.push((id, e)),
            }
        }
        Ok(out)
    }

    /// A level directory, or None when there is none: nothing, or something else by that
    /// name (a stray file holds no entries; the walks and purges skip it).
    fn open_dir(&self, rel: &str) -> io::Result<Option<OwnedFd>> {
        match rustix::fs::openat(
            &self.dir().root,
            rel,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(d) => Ok(Some(d)),
            Err(Errno::NOENT | Errno::NOTDIR) => Ok(None),
            Err(e) => Err(io_err(e)),
        }
    }

    /// Walk the entries under level-1 directory `l1` (0..16), calling `f(id, file's size and
    /// modification time)` for each file named like an entry (stat only, no read: headers are
    /// checked on open). Other names are skipped.
    pub fn walk_level(&self, l1: u8, f: &mut dyn FnMut(EntryId, FileVersion)) -> io::Result<()> {
        let l1 = format!("{:x}", l1 & 0xF);
        let Some(d1) = self.open_dir(&l1)? else {
            return Ok(());
        };
        for l2 in list(&d1)? {
            let Ok(l2s) = std::str::from_utf8(&l2) else {
                continue;
            };
            let Some(d2) = self.open_dir(&format!("{l1}/{l2s}"))? else {
                continue;
            };
            for name in list(&d2)? {
                let Some(id) = EntryId::parse_file_name(&name) else {
                    continue;
                };
                if id.dir() != format!("{l1}/{l2s}") {
                    continue;
                }
                match rustix::fs::statat(&d2, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW) {
                    // Not an entry (a FIFO, a directory...): left to the first request's open,
                    // which refuses and removes it.
                    Ok(st)
                        if rustix::fs::FileType::from_raw_mode(st.st_mode)
                            != rustix::fs::FileType::RegularFile => {}
                    Ok(st) => f(id, FileVersion::of_stat(&st)),
                    Err(Errno::NOENT) => {}
                    Err(e) => return Err(io_err(e)),
                }
            }
        }
        Ok(())
    }

    /// Every entry whose key is under `prefix` by whole segments ([`super::key::under_prefix`];
    /// reads each header: purge by prefix is rare), and how many entries could not be read
    /// for want of descriptors or memory (they may be under it: the caller must say so).
    /// Entries removed meanwhile or unreadable otherwise (not entries) are skipped.
    pub fn find_prefix(&self, prefix: &[u8]) -> io::Result<(Vec<EntryId>, usize)> {
        let mut ids = Vec::new();
        for l1 in 0..16u8 {
            self.walk_level(l1, &mut |id, _| ids.push(id))?;
        }
        let mut unread = 0;
        let mut found = Vec::new();
        for id in ids {
            let opened = match super::failpoint_prefix_open() {
                Ok(()) => self.open_read(id),
                Err(_) => Err(Errno::MFILE),
            };
            match opened {
                Ok(fd) => {
                    if entry::read_meta(&fd).is_ok_and(|m| super::key::under_prefix(&m.key, prefix))
                    {
                        found.push(id);
                    }
                }
                Err(e) if node_short_of(&io_err(e)) => unread += 1,
                Err(_) => {}
            }
        }
        Ok((found, unread))
    }

    /// Filesystem size and free bytes (statvfs), for "keep 10% free" and full-disk handling.
    pub fn fs_space(&self) -> io::Result<(u64, u64)> {
        let s = rustix::fs::fstatvfs(&self.dir().root).map_err(io_err)?;
        Ok((s.f_blocks * s.f_frsize, s.f_bavail * s.f_frsize))
    }
}

/// An error of this node's resources, not of the file: out of descriptors or memory.
pub fn node_short_of(e: &io::Error) -> bool {
    crate::descriptors::out_of_descriptors(e) || e.raw_os_error() == Some(libc::ENOMEM)
}

/// The lock file of `dir` when a running process holds it (tried with a shared lock, let go at
/// once); None when there is none or nobody holds it.
fn held_lock(dir: &Path) -> Option<std::path::PathBuf> {
    let theirs = dir.join(LOCK_FILE);
    let other = rustix::fs::open(
        &theirs,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .ok()?;
    matches!(
        rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockShared),
        Err(Errno::WOULDBLOCK)
    )
    .then_some(theirs)
}

/// Refused (`WouldBlock`) when `path`, which need not exist yet, is inside the cache directory
/// of another running process (one of its levels, say): its files and ours would mix. Each
/// ancestor's lock file, if any, is tried and let go at once.
pub fn not_inside_another_cache(path: &Path) -> io::Result<()> {
    let real = match std::fs::canonicalize(path) {
        Ok(real) => real,
        // Not made yet: where it would be.
        Err(_) => match (path.parent().map(std::fs::canonicalize), path.file_name()) {
            (Some(Ok(parent)), Some(name)) => parent.join(name),
            _ => return Ok(()),
        },
    };
    for dir in real.ancestors().skip(1) {
        if let Some(theirs) = held_lock(dir) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "cache directory {} is inside {}, the cache directory of another process (it holds {})",
                    path.display(),
                    dir.display(),
                    theirs.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Refused (`WouldBlock`) when a running process's cache directory is inside `path` where this
/// one puts files (a level directory, one level below it, or `.tmp`): its files and ours would
/// mix, and our start would remove its temporary files. Each lock file found is tried and let
/// go at once.
pub fn no_other_cache_inside(path: &Path) -> io::Result<()> {
    let subdirs = |dir: &Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut dirs = Vec::new();
    for d1 in subdirs(path) {
        dirs.extend(subdirs(&d1));
        dirs.push(d1);
    }
    for dir in dirs {
        if let Some(theirs) = held_lock(&dir) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "cache directory {} holds {}, the cache directory of another process (it holds {}): their files would mix",
                    path.display(),
                    dir.display(),
                    theirs.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Open (creating it if needed, not its parents) the cache directory, lock it and make sure its
/// `.tmp/` is a directory of its own.
fn open_dir(path: &Path) -> io::Result<Dir> {
    // Its parent must exist (`cache::create_dirs` says so at start-up, naming the path).
    match std::fs::create_dir(path) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let lock = lock_dir(path)?;
    // `.tmp` must be a directory of this cache: a symlink there would have start-up empty
    // (and fills write into) whatever it points at. Anything else in its place goes.
    let tmp = path.join(TMP_DIR);
    match std::fs::symlink_metadata(&tmp) {
        Ok(m) if m.is_dir() => {}
        Ok(m) => {
            tracing::warn!(path = %tmp.display(), kind = ?m.file_type(), "cache: replacing what is not a directory at .tmp");
            std::fs::remove_file(&tmp)?;
            std::fs::create_dir(&tmp)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::create_dir(&tmp)?,
        Err(e) => return Err(e),
    }
    let root = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_err)?;
    Ok(Dir { root, lock })
}

/// The pid written in lock file `file`, if it holds one.
fn lock_holder(file: &Path) -> Option<String> {
    std::fs::read_to_string(file)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
}

/// "Cache directory `path` is in use by another process (its lock file `file`, `holder`)".
fn in_use(path: &Path, file: &Path, holder: Option<String>) -> io::Error {
    let holder = holder
        .map(|pid| format!(" (pid {pid})"))
        .unwrap_or_default();
    io::Error::new(
        io::ErrorKind::WouldBlock,
        format!(
            "cache directory {} is in use by another process{holder}: it holds {}; two nodes must not share a cache directory",
            path.display(),
            file.display()
        ),
    )
}

/// Refused (`WouldBlock`) when another running process holds cache directory `path` (its lock
/// is tried with a shared lock and let go at once): at start-up, before anything is made for
/// any volume.
pub fn not_held_by_another(path: &Path) -> io::Result<()> {
    match held_lock(path) {
        Some(file) => Err(in_use(path, &file, lock_holder(&file))),
        None => Ok(()),
    }
}

/// Take the exclusive lock of cache directory `path` ([`LOCK_FILE`], created if needed) and
/// write this process's pid into it. Refused (`WouldBlock`) when another process holds it, with
/// a message naming the directory and the pid written by the holder.
fn lock_dir(path: &Path) -> io::Result<OwnedFd> {
    not_inside_another_cache(path)?;
    no_other_cache_inside(path)?;
    let file = path.join(LOCK_FILE);
    let ctx = |e: io::Error, what: &str| {
        io::Error::new(e.kind(), format!("cannot {what} {}: {e}", file.display()))
    };
    let fd = rustix::fs::open(
        &file,
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::from_raw_mode(0o644),
    )
    .map_err(|e| ctx(io_err(e), "open the lock file"))?;
    match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(Errno::WOULDBLOCK) => {
            let holder = lock_holder(&file);
            if holder.as_deref() == Some(std::process::id().to_string().as_str()) {
                // This node holds it: another of its volumes is this directory under another
                // path (a bind mount), which the configuration's path checks cannot see.
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "cache directory {} is the directory of another cache volume of this node (the same directory under another path: a bind mount?); each cache volume needs its own",
                        path.display()
                    ),
                ));
            }
            return Err(in_use(path, &file, holder));
        }
        Err(e) => return Err(ctx(io_err(e), "lock")),
    }
    // Informational only: who holds the lock.
    let pid = format!("{}\n", std::process::id());
    rustix::fs::ftruncate(&fd, 0).map_err(|e| ctx(io_err(e), "truncate"))?;
    rustix::io::pwrite(&fd, pid.as_bytes(), 0).map_err(|e| ctx(io_err(e), "write"))?;
    Ok(fd)
}

fn list(dir: &OwnedFd) -> io::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut d = rustix::fs::Dir::read_from(dir).map_err(io_err)?;
    while let Some(e) = d.read() {
        let e = e.map_err(io_err)?;
        let name = e.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(name.to_vec());
        }
    }
    Ok(out)
}

/// Start writing bytes `at..at + len` of `fd` back to the disk now, without waiting for it
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`; best effort, errors ignored: the commit does not
/// depend on it). Fill data then does not pile up as dirty pages: under a memory limit, reclaim
/// finds clean pages to drop instead of waiting for writeback, and so does every thread of the
/// node that allocates (an event loop among them), and the hot objects' pages are not pushed
/// out by dirty ones. Runs where the write runs (the volume's pool).
fn start_writeback(fd: BorrowedFd<'_>, at: u64, len: u64) {
    let (Ok(off), Ok(n)) = (libc::off64_t::try_from(at), libc::off64_t::try_from(len)) else {
        return;
    };
    // SAFETY: a plain syscall on a descriptor we own for the call's duration; no memory is passed.
    unsafe {
        libc::sync_file_range(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            off,
            n,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

/// An entry being written: the header is on disk, the body is appended. Readers may read the
/// body bytes written so far from [`TempEntry::fd`] (read-while-write). Dropping it without
/// [`TempEntry::commit`] or [`TempEntry::abort`] leaves the temporary file for the next start to
/// remove (a drop may run on the event loop, which must not unlink).
pub struct TempEntry {
    store: Arc<Store>,
    /// The directory it was made in (its commit renames it there).
    dir: Arc<Dir>,
    fd: Arc<OwnedFd>,
    tmp: String,
    id: EntryId,
    body_offset: u64,
    written: u64,
    meta: EntryMeta,
}

impl TempEntry {
    pub fn id(&self) -> EntryId {
        self.id
    }

    pub fn meta(&self) -> &EntryMeta {
        &self.meta
    }

    /// The file, for readers of the bytes written so far (valid after the rename too).
    pub fn fd(&self) -> Arc<OwnedFd> {
        self.fd.clone()
    }

    pub fn body_offset(&self) -> u64 {
        self.body_offset
    }

    /// Body bytes written.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Append body bytes. More than the header's `body_len` is an error (the origin sent more
    /// than it announced).
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        crate::cache::failpoint_write()?;
        if self.written + bytes.len() as u64 > self.meta.body_len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "body longer than announced: {} bytes expected",
                    self.meta.body_len
                ),
            ));
        }
        let at = self.body_offset + self.written;
        entry::pwrite_all(self.fd.as_fd(), bytes, at)?;
        start_writeback(self.fd.as_fd(), at, bytes.len() as u64);
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Publish the entry under its name (replacing any older file); fails, removing the
    /// temporary file, unless exactly `body_len` bytes were written. Returns the file length.
    pub fn commit(self) -> io::Result<u64> {
        crate::cache::failpoint_commit();
        if self.written != self.meta.body_len {
            let e = io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "entry incomplete: {} of {} body bytes",
                    self.written, self.meta.body_len
                ),
            );
            self.abort();
            return Err(e);
        }
        let root = self.dir.root.as_fd();
        let target = self.id.rel_path();
        let rename = || rustix::fs::renameat(root, self.tmp.as_str(), root, target.as_str());
        let mut r = rename();
        // What the first attempt met, made right once each: the L1/L2 directories missing
        // (their first entry) or something else in their place, a directory where the entry
        // belongs. None of these was made by the node; none is followed if a symlink.
        for _ in 0..2 {
            let fixed = match r {
                Err(Errno::NOENT | Errno::NOTDIR) => self.store.make_levels(&self.id.dir()),
                Err(Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST) => self.store.clear_dir(&target),
                _ => break,
            };
            if let Err(e) = fixed {
                self.abort();
                return Err(e);
            }
            r = rename();
        }
        match r {
            Ok(()) => {
                crate::cache::failpoint_renamed();
                Ok(self.body_offset + self.written)
            }
            Err(e) => {
                self.abort();
                Err(io_err(e))
            }
        }
    }

    /// Remove the temporary file (the fill failed or is not to be stored).
    pub fn abort(self) {
        let _ = rustix::fs::unlinkat(&self.dir.root, self.tmp.as_str(), AtFlags::empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::entry::sample_meta;
    use crate::cache::key::CacheKey;

    fn store() -> (tempfile::TempDir, Arc<Store>) {
        let dir = tempfile::tempdir().unwrap();
        let (s, removed) = Store::open(&dir.path().join("cache")).unwrap();
        assert_eq!(removed, 0);
        (dir, Arc::new(s))
    }

    fn put(s: &Arc<Store>, key: &[u8], slice: u32, body: &[u8]) -> EntryId {
        let id = CacheKey::new(key.to_vec()).slice(slice);
        let mut t = s
            .create_temp(id, sample_meta(key, slice, body.len() as u64))
            .unwrap();
        t.write(&body[..body.len() / 2]).unwrap();
        t.write(&body[body.len() / 2..]).unwrap();
        t.commit().unwrap();
        id
    }

    fn body_of(fd: &OwnedFd, meta: &EntryMeta) -> Vec<u8> {
        let mut b = vec![0; meta.body_len as usize];
        let n = entry::pread_full(fd.as_fd(), &mut b, meta.body_offset()).unwrap();
        b.truncate(n);
        b
    }

    #[test]
    fn reading_an_entry_leaves_its_access_time() {
        let dir = crate::fs::test_support::disk_tempdir();
        let (s, _) = Store::open(&dir.path().join("cache")).unwrap();
        let s = Arc::new(s);
        let id = put(&s, b"/v.mp4", 0, b"video bytes");
        let path = s.path().join(id.rel_path());
        crate::fs::test_support::assert_plain_read_updates_atime(&path);
        let before = crate::fs::test_support::atime(&path);
        let (fd, meta) = s.open_entry(id, b"/v.mp4").unwrap();
        assert_eq!(body_of(&fd, &meta), b"video bytes");
        assert_eq!(crate::fs::test_support::atime(&path), before);
    }

    #[test]
    fn opening_an_evicted_entry_reads_its_header_and_nothing_more() {
        // A readahead window from the header read would bring in (and mark) the first body
        // pages, and an inline sendfile of them would then start reads from the event loop.
        let dir = crate::fs::test_support::disk_tempdir();
        let (s, _) = Store::open(&dir.path().join("cache")).unwrap();
        let s = Arc::new(s);
        let body: Vec<u8> = (0..256 * 1024).map(|i| (i % 253) as u8).collect();
        let id = put(&s, b"/big.mp4", 0, &body);
        let file = std::fs::File::open(s.path().join(id.rel_path())).unwrap();
        crate::fs::test_support::evict(&file);
        let (fd, meta) = s.open_entry(id, b"/big.mp4").unwrap();
        let len = meta.file_len() as usize;
        let header_pages = meta.body_offset() as usize / 4096;
        assert_eq!(
            crate::fs::test_support::resident_pages(&file, len),
            header_pages,
            "the header read brought in body pages"
        );
        assert_eq!(body_of(&fd, &meta), body);
    }

    #[test]
    fn write_rename_read() {
        let (_d, s) = store();
        let id = put(&s, b"/a.mp4", 2, b"hello world");
        let (fd, meta) = s.open_entry(id, b"/a.mp4").unwrap();
        assert_eq!(body_of(&fd, &meta), b"hello world");
        assert_eq!(meta.slice, 2);
        let on_disk = s.path().join(id.rel_path());
        assert!(on_disk.is_file(), "{}", on_disk.display());
        // Nothing left in .tmp.
        assert_eq!(
            std::fs::read_dir(s.path().join(TMP_DIR)).unwrap().count(),
            0
        );
        // A second version replaces the first.
        put(&s, b"/a.mp4", 2, b"second");
        let (fd, meta) = s.open_entry(id, b"/a.mp4").unwrap();
        assert_eq!(body_of(&fd, &meta), b"second");
    }

    #[test]
    fn readers_see_bytes_while_they_are_written() {
        let (_d, s) = store();
        let id = CacheKey::new(b"/live".to_vec()).slice(0);
        let mut t = s.create_temp(id, sample_meta(b"/live", 0, 8)).unwrap();
        let fd = t.fd();
        t.write(b"abcd").unwrap();
        let mut b = [0u8; 8];
        let n = entry::pread_full(fd.as_fd(), &mut b, t.body_offset()).unwrap();
        assert_eq!(&b[..n], b"abcd");
        // Not visible under its name before the commit.
        assert!(matches!(
            s.open_entry(id, b"/live"),
            Err(EntryError::Missing)
        ));
        t.write(b"efgh").unwrap();
        t.commit().unwrap();
        let n = entry::pread_full(fd.as_fd(), &mut b, 4096).unwrap();
        assert_eq!(&b[..n], b"abcdefgh");
    }

    #[test]
    fn incomplete_or_overlong_bodies_are_not_published() {
        let (_d, s) = store();
        let id = CacheKey::new(b"/x".to_vec()).slice(0);
        let mut t = s.create_temp(id, sample_meta(b"/x", 0, 10)).unwrap();
        t.write(b"12345").unwrap();
        assert!(t.commit().is_err());
        assert!(matches!(s.open_entry(id, b"/x"), Err(EntryError::Missing)));
        let mut t = s.create_temp(id, sample_meta(b"/x", 0, 3)).unwrap();
        assert!(t.write(b"1234").is_err());
        t.abort();
        assert_eq!(
            std::fs::read_dir(s.path().join(TMP_DIR)).unwrap().count(),
            0
        );
    }

    #[test]
    fn rewrite_replaces_the_header_and_keeps_the_body() {
        let (_d, s) = store();
        let id = put(&s, b"/r", 0, b"body bytes");
        let (fd, meta) = s.open_entry(id, b"/r").unwrap();
        let mut newer = meta.clone();
        newer.fresh_until_ms += 1_000_000;
        newer.headers.push(("X-Extra".into(), "y".repeat(5000)));
        let (_fd, len) = s
            .rewrite(id, &fd, meta.body_offset(), newer.clone())
            .unwrap();
        assert_eq!(len, newer.file_len());
        let (fd2, meta2) = s.open_entry(id, b"/r").unwrap();
        assert_eq!(meta2, newer);
        assert_eq!(body_of(&fd2, &meta2), b"body bytes");
    }

    /// A FIFO where an entry belongs is no entry: the rebuild's walk skips it and an open
    /// refuses it at once (a blocking open would wait for a writer for ever).
    #[test]
    fn a_fifo_at_an_entry_path_is_skipped_and_refused() {
        let (_d, s) = store();
        let id = put(&s, b"/f", 0, b"data");
        let p = s.path().join(id.rel_path());
        std::fs::remove_file(&p).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &p,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let mut seen = Vec::new();
        for l1 in 0..16u8 {
            s.walk_level(l1, &mut |id, _| seen.push(id)).unwrap();
        }
        assert!(seen.is_empty(), "{seen:?}");
        let e = s.open_entry(id, b"/f").unwrap_err();
        assert!(e.is_invalid(), "{e:?}");
    }

    /// Another key's entry moved to this key's path is corrupt (dropped), not a collision.
    #[test]
    fn another_keys_entry_at_this_path_is_corrupt() {
        let (_d, s) = store();
        let real = put(&s, b"/real", 0, b"data");
        let other = put(&s, b"/other", 0, b"atad");
        std::fs::rename(
            s.path().join(other.rel_path()),
            s.path().join(real.rel_path()),
        )
        .unwrap();
        let e = s.open_entry(real, b"/real").unwrap_err();
        assert!(e.is_invalid(), "{e:?}");
    }

    /// The same directory opened twice by one node (a bind mount, here a symlink to it) is
    /// named as that, not as "another process" with this node's own pid.
    #[test]
    fn one_directory_as_two_volumes_of_one_node_says_so() {
        let (d, _s) = store();
        let alias = d.path().join("alias");
        std::os::unix::fs::symlink(d.path().join("cache"), &alias).unwrap();
        let e = Store::open(&alias).err().expect("refused");
        let msg = e.to_string();
        assert!(
            msg.contains("another cache volume of this node") && !msg.contains("pid"),
            "{msg}"
        );
    }

    #[test]
    fn collisions_are_detected_not_served() {
        let (_d, s) = store();
        let id = put(&s, b"/real", 0, b"data");
        // Another key whose hash names the same file (simulated: the file is opened for another key).
        assert!(matches!(
            s.open_entry(id, b"/other"),
            Err(EntryError::Collision)
        ));
        assert!(s.open_entry(id, b"/real").is_ok());
    }

    #[test]
    fn short_and_corrupt_entries_are_refused() {
        let (_d, s) = store();
        let id = put(&s, b"/cut", 0, &[7u8; 5000]);
        let p = s.path().join(id.rel_path());
        let full = std::fs::read(&p).unwrap();
        // Truncated body (a crash or a full disk mid-write).
        std::fs::write(&p, &full[..full.len() - 1]).unwrap();
        let e = s.open_entry(id, b"/cut").unwrap_err();
        assert!(
            matches!(e, EntryError::Short { .. }) && e.is_invalid(),
            "{e:?}"
        );
        // Corrupt header byte.
        let mut bad = full.clone();
        bad[40] ^= 1;
        std::fs::write(&p, &bad).unwrap();
        let e = s.open_entry(id, b"/cut").unwrap_err();
        assert!(matches!(e, EntryError::Corrupt(_)), "{e:?}");
        // Header only.
        std::fs::write(&p, &full[..100]).unwrap();
        assert!(s.open_entry(id, b"/cut").unwrap_err().is_invalid());
        assert!(s.remove(id).unwrap());
        assert!(!s.remove(id).unwrap());
    }

    #[test]
    fn restart_removes_temp_files_and_walk_finds_entries() {
        let (d, s) = store();
        let a = put(&s, b"/a", 0, b"aaaa");
        let b = put(&s, b"/b", 0, b"bb");
        let c = put(&s, b"/b", 1, b"b1");
        // A fill in progress when the process died.
        let id = CacheKey::new(b"/dying".to_vec()).slice(0);
        let mut t = s.create_temp(id, sample_meta(b"/dying", 0, 100)).unwrap();
        t.write(b"partial").unwrap();
        drop(t);
        std::fs::write(s.path().join(a.dir()).join("stray-file"), b"x").unwrap();
        drop(s);
        let (s, removed) = Store::open(&d.path().join("cache")).unwrap();
        assert_eq!(removed, 1);
        let mut found = Vec::new();
        for l1 in 0..16 {
            s.walk_level(l1, &mut |id, v| found.push((id, v.size)))
                .unwrap();
        }
        found.sort();
        let mut want = vec![(a, 4096 + 4), (b, 4096 + 2), (c, 4096 + 2)];
        want.sort();
        assert_eq!(found, want);
        assert!(matches!(
            s.open_entry(id, b"/dying"),
            Err(EntryError::Missing)
        ));
    }

    #[test]
    fn one_process_owns_a_directory() {
        let (d, s) = store();
        let a = put(&s, b"/a", 0, b"aaaa");
        let lock = s.path().join(LOCK_FILE);
        assert_eq!(
            std::fs::read_to_string(&lock).unwrap(),
            format!("{}\n", std::process::id())
        );
        // Another open file description is refused like another process (flock), and
        // changes nothing; in this process, it is named as this node's other volume.
        let mut t = s
            .create_temp(a, sample_meta(b"/a", 0, 100))
            .map(Some)
            .unwrap();
        let e = Store::open(&d.path().join("cache")).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        let msg = e.to_string();
        assert!(msg.contains(&s.path().display().to_string()), "{msg}");
        assert!(msg.contains("another cache volume of this node"), "{msg}");
        assert_eq!(
            std::fs::read_dir(s.path().join(TMP_DIR)).unwrap().count(),
            1
        );
        drop(t.take());
        // The lock file is no entry: walks and purges pass it by.
        let mut found = Vec::new();
        for l1 in 0..16 {
            s.walk_level(l1, &mut |id, _| found.push(id)).unwrap();
        }
        assert_eq!(found, vec![a]);
        assert_eq!(s.find_prefix(b"/").unwrap(), (vec![a], 0));
        drop(s);
        let (s, removed) = Store::open(&d.path().join("cache")).unwrap();
        assert_eq!(removed, 1);
        assert!(lock.exists());
        drop(s);
    }

    #[test]
    fn purge_by_object_and_prefix() {
        let (_d, s) = store();
        let k = CacheKey::new(b"/v/big".to_vec());
        put(&s, b"/v/big", 0, b"0");
        put(&s, b"/v/big", 5, b"5");
        let other = put(&s, b"/w/x", 0, b"x");
        let mut gone = s.remove_object(k.hash()).unwrap().removed;
        gone.sort();
        assert_eq!(gone, vec![k.slice(0), k.slice(5)]);
        assert!(s.open_entry(other, b"/w/x").is_ok());
        let v1 = put(&s, b"/v/1", 0, b"1");
        let v2 = put(&s, b"/v/2?q", 3, b"2");
        let mut found = s.find_prefix(b"/v/").unwrap().0;
        found.sort();
        let mut want = vec![v1, v2];
        want.sort();
        assert_eq!(found, want);
    }

    #[test]
    fn strays_in_the_levels_are_skipped_by_walks_and_purges() {
        let (d, s) = store();
        let a = put(&s, b"/dir/a", 0, b"aaaa");
        let b = put(&s, b"/dir/b", 0, b"bb");
        // A stray file where level-2 directories live, and one where a level-1 one would be.
        let l1 = &a.dir()[..1];
        std::fs::write(s.path().join(l1).join("zz-stray"), b"x").unwrap();
        let free_l1 = (0..16u8)
            .map(|i| format!("{i:x}"))
            .find(|l| !s.path().join(l).exists())
            .expect("a level-1 name not in use");
        std::fs::write(s.path().join(&free_l1), b"x").unwrap();
        drop(s);
        let (s, _) = Store::open(&d.path().join("cache")).unwrap();
        let mut found = Vec::new();
        for l1 in 0..16 {
            s.walk_level(l1, &mut |id, _| found.push(id)).unwrap();
        }
        found.sort();
        let mut want = vec![a, b];
        want.sort();
        assert_eq!(found, want);
        let mut purged = s.find_prefix(b"/dir/").unwrap().0;
        purged.sort();
        assert_eq!(purged, want);
    }

    #[test]
    fn things_in_the_way_of_an_entry_are_replaced() {
        let (d, s) = store();
        // A directory where the entry file belongs, with something in it.
        let id = CacheKey::new(b"/x".to_vec()).slice(0);
        let p = s.path().join(id.rel_path());
        std::fs::create_dir_all(p.join("sub")).unwrap();
        std::fs::write(p.join("sub/f"), b"f").unwrap();
        assert_eq!(put(&s, b"/x", 0, b"xx"), id);
        assert!(s.open_entry(id, b"/x").is_ok());
        // And one found by a removal (a purge, an eviction).
        std::fs::remove_file(&p).unwrap();
        std::fs::create_dir(&p).unwrap();
        assert!(s.remove(id).unwrap());
        assert!(!p.exists());
        // A file where a level directory belongs.
        let id = CacheKey::new(b"/y".to_vec()).slice(0);
        let l1 = s.path().join(&id.dir()[..1]);
        if l1.exists() {
            std::fs::remove_dir_all(&l1).unwrap();
        }
        std::fs::write(&l1, b"not a dir").unwrap();
        assert_eq!(put(&s, b"/y", 0, b"yy"), id);
        assert!(s.open_entry(id, b"/y").is_ok());
        // A directory left in .tmp does not stop the next start.
        std::fs::create_dir_all(s.path().join(TMP_DIR).join("d/e")).unwrap();
        drop(s);
        let (s, removed) = Store::open(&d.path().join("cache")).unwrap();
        assert_eq!(removed, 1);
        assert_eq!(
            std::fs::read_dir(s.path().join(TMP_DIR)).unwrap().count(),
            0
        );
    }

    #[test]
    fn a_tmp_symlink_is_replaced_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let elsewhere = d.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("precious"), b"keep me").unwrap();
        let cache = d.path().join("cache");
        std::fs::create_dir(&cache).unwrap();
        std::os::unix::fs::symlink(&elsewhere, cache.join(TMP_DIR)).unwrap();
        let (s, removed) = Store::open(&cache).unwrap();
        assert_eq!(removed, 0);
        assert_eq!(
            std::fs::read(elsewhere.join("precious")).unwrap(),
            b"keep me"
        );
        let tmp = std::fs::symlink_metadata(cache.join(TMP_DIR)).unwrap();
        assert!(tmp.is_dir(), ".tmp is a directory of the cache now");
        // Fills write inside the cache.
        let s = Arc::new(s);
        put(&s, b"/z", 0, b"z");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 1);
    }
}
