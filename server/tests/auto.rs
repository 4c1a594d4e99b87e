//! `offload = auto` and the open-file cache, through the real `content-server` process: page-cache
//! hits (ranges mincore proves filled, sent with sendfile from the event loop) are served without
//! any pool task, evicted data goes to the pool, bytes are right for hits,
//! misses and mixed chunks (Range requests included), replaced/modified files are noticed, and a
//! volume whose filesystem has no RWF_NOWAIT (tmpfs) falls back to the pool and says so.
//!
//! Counters come from the admin `/metrics` endpoint. Files live under CARGO_TARGET_TMPDIR (the
//! build disk), not /tmp, which may be a tmpfs without RWF_NOWAIT.

mod common;

use common::*;
use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

const VOL: &str = "disk";

/// Start a server with one volume `disk` at `dir` and the given offload mode / chunk / cache window.
fn start(dir: &Path, offload: Offload, max_chunk: usize, valid_ms: u64) -> Server {
    start_with(dir, offload, max_chunk, valid_ms, "")
}

fn start_with(
    dir: &Path,
    offload: Offload,
    max_chunk: usize,
    valid_ms: u64,
    failpoints: &str,
) -> Server {
    let mut cfg = one_volume(1, volume(VOL, dir).offload(offload).pool(2, 64));
    cfg.limits.sendfile_max_chunk = max_chunk;
    cfg.open_file_cache.max_entries = 64;
    cfg.open_file_cache.valid_ms = valid_ms;
    Server::start_with_failpoints(&cfg, failpoints)
}

/// One GET with `Connection: close`, read to EOF; the body must be as long as Content-Length.
fn fetch(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
    let r = request(addr, "GET", path, headers);
    if let Some(cl) = r.header("Content-Length") {
        assert_eq!(
            cl.parse::<usize>().unwrap(),
            r.body.len(),
            "{:?}",
            r.headers
        );
    }
    r
}

fn write_file(path: &Path, data: &[u8]) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
}

/// Drop the file's pages from the page cache (it is synced first, so DONTNEED drops them all).
/// Pages a previous response sent with sendfile stay referenced by socket buffers until the
/// peer's acknowledgement frees them, so this retries until no page is resident (up to 3 s).
fn evict(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        // SAFETY: plain syscall on a descriptor we own.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0, "posix_fadvise(DONTNEED)");
        let pages = resident_pages(path);
        if pages.iter().all(|r| !r) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} stays resident: pages {:?}",
            path.display(),
            pages
                .iter()
                .enumerate()
                .filter(|(_, r)| **r)
                .map(|(i, _)| i)
                .take(20)
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Make exactly the given byte ranges resident (readahead off for this reader).
fn make_resident(path: &Path, ranges: &[(u64, usize)]) {
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: as above.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    assert_eq!(rc, 0);
    for &(off, len) in ranges {
        let mut buf = vec![0u8; len];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, off).unwrap();
    }
}

/// Pages of `path` resident now (mincore of a mapping), to check the test set up what it meant.
fn resident_pages(path: &Path) -> Vec<bool> {
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    let pages = len.div_ceil(4096);
    let mut vec = vec![0u8; pages];
    // SAFETY: a private read-only mapping of a file we opened, unmapped before returning;
    // mincore writes one byte per page into `vec`, which has exactly that many.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        assert_eq!(libc::mincore(p, len, vec.as_mut_ptr()), 0);
        libc::munmap(p, len);
    }
    vec.iter().map(|b| b & 1 == 1).collect()
}

struct Counters {
    open_hits: f64,
    open_misses: f64,
    read_hits: f64,
    read_misses: f64,
    pool_open: f64,
    pool_sendfile: f64,
    pool_all: f64,
}

/// The volume's counters once no pool task runs: a task counts itself after its work, and a
/// client may have its whole answer (sent by the task) before that.
fn counters(s: &Server) -> Counters {
    let busy = || {
        s.metrics()
            .get("contentserver_pool_busy_threads", &[("volume", VOL)])
    };
    assert!(
        wait_until(Duration::from_secs(5), || busy() == 0.0),
        "a pool task still runs after 5 s"
    );
    let m: Metrics = s.metrics();
    let pc = |name: &str, op: &str| m.get(name, &[("volume", VOL), ("op", op)]);
    Counters {
        open_hits: pc("contentserver_page_cache_hits_total", "open"),
        open_misses: pc("contentserver_page_cache_misses_total", "open"),
        read_hits: pc("contentserver_page_cache_hits_total", "read"),
        read_misses: pc("contentserver_page_cache_misses_total", "read"),
        pool_open: pc("contentserver_pool_tasks_total", "open"),
        pool_sendfile: pc("contentserver_pool_tasks_total", "sendfile"),
        pool_all: m.sum("contentserver_pool_tasks_total", &[("volume", VOL)]),
    }
}

/// A dir on the build disk with one synced file `name` of `len` pseudo-random bytes (`seed`).
fn disk_file(
    name: &str,
    len: usize,
    seed: u64,
) -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    let dir = disk_tempdir();
    let data = bytes(len, seed);
    let path = dir.path().join(name);
    write_file(&path, &data);
    (dir, path, data)
}

#[test]
fn resident_file_is_served_on_the_loop_without_any_pool_task() {
    let (dir, path, data) = disk_file("hot.bin", 3 << 20, 1);
    assert_eq!(std::fs::read(&path).unwrap(), data); // read it once: resident
    let s = start(dir.path(), Offload::Auto, 1 << 20, 60_000);
    let before = counters(&s);
    for _ in 0..3 {
        let r = fetch(s.addr, "/hot.bin", &[]);
        assert_eq!(r.status, 200, "{:?}", r.headers);
        assert!(r.body == data, "body differs");
    }
    let r = fetch(s.addr, "/hot.bin", &[("Range", "bytes=1000000-2500000")]);
    assert_eq!(r.status, 206);
    assert!(r.body == data[1_000_000..=2_500_000]);
    let after = counters(&s);
    assert_eq!(
        after.pool_all, before.pool_all,
        "a resident file must not need the pool"
    );
    // At least one inline send per 1 MiB chunk: 3 per full body, 2 for the range.
    assert!(after.read_hits >= before.read_hits + 3.0 * 3.0 + 2.0);
    assert_eq!(after.read_misses, before.read_misses);
    assert_eq!(after.open_hits, before.open_hits + 4.0);
    assert_eq!(after.open_misses, before.open_misses);
}

/// A small resident answer (head and body together at most 32 KiB) leaves in one send from the
/// loop: right bytes for a closing request, a keep-alive one and a range, no pool task, one read
/// hit each. Pipelined requests that a client does not read for a while fill its socket, so some
/// answers are only partly taken by that send: every byte of every answer still arrives, in order.
/// An evicted small file goes to the pool as before.
#[test]
fn small_resident_answers_leave_in_one_send_and_the_rest_follows_a_short_write() {
    let (dir, path, data) = disk_file("small.bin", 30_000, 7);
    assert_eq!(std::fs::read(&path).unwrap(), data); // read it once: resident
    let s = start(dir.path(), Offload::Auto, 1 << 20, 60_000);
    let before = counters(&s);
    let r = fetch(s.addr, "/small.bin", &[]);
    assert_eq!(r.status, 200, "{:?}", r.headers);
    assert!(r.body == data, "closing answer differs");
    let mut c = Conn::new(s.addr);
    let r = c.get("/small.bin");
    assert!(r.body == data, "keep-alive answer differs");
    let r = c
        .request("GET", "/small.bin", &[("Range", "bytes=100-20099")])
        .unwrap();
    assert_eq!(r.status, 206);
    assert!(r.body == data[100..20100], "range differs");
    let after = counters(&s);
    assert_eq!(
        after.pool_all, before.pool_all,
        "a resident file must not need the pool"
    );
    assert_eq!(after.read_hits, before.read_hits + 3.0);
    assert_eq!(after.read_misses, before.read_misses);

    // 300 answers (9 MB) do not fit in the two socket buffers of an unread connection.
    let mut p = Conn::new(s.addr);
    let mut raw = Vec::new();
    for _ in 0..300 {
        raw.extend_from_slice(&request_bytes("GET", "/small.bin", &[], false));
    }
    p.send(&raw);
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..300 {
        let r = p
            .response(false)
            .unwrap_or_else(|e| panic!("answer {i}: {e}"));
        assert_eq!(r.status, 200);
        assert!(r.body == data, "pipelined answer {i} differs");
    }

    // Another small file, evicted (the served one may stay mapped by the loop's mincore).
    let cold_path = dir.path().join("cold.bin");
    let cold = bytes(20_000, 8);
    write_file(&cold_path, &cold);
    evict(&cold_path);
    let before = counters(&s);
    let r = fetch(s.addr, "/cold.bin", &[]);
    assert!(r.body == cold, "evicted answer differs");
    let after = counters(&s);
    assert!(
        after.pool_sendfile > before.pool_sendfile,
        "an evicted body is sent by the pool"
    );
}

#[test]
fn evicted_file_is_read_on_the_pool_and_unknown_paths_are_looked_up_there() {
    let (dir, path, data) = disk_file("cold.bin", 1 << 20, 2);
    let s = start(dir.path(), Offload::Auto, 256 << 10, 60_000);
    evict(&path);
    assert!(
        resident_pages(&path).iter().all(|r| !r),
        "eviction did not work"
    );
    let before = counters(&s);
    let r = fetch(s.addr, "/cold.bin", &[]);
    assert_eq!(r.status, 200);
    assert!(r.body == data, "body differs");
    let after = counters(&s);
    assert!(after.read_misses > before.read_misses);
    assert!(after.pool_sendfile > before.pool_sendfile);
    // A name never looked up has no dentry: the open goes to the pool (and 404s there).
    let r = fetch(s.addr, "/never-seen-before.bin", &[]);
    assert_eq!(r.status, 404);
    let later = counters(&s);
    assert_eq!(later.open_misses, after.open_misses + 1.0);
    assert_eq!(later.pool_open, after.pool_open + 1.0);
}

#[test]
fn partially_resident_file_mixes_inline_and_pool_chunks_with_correct_bytes() {
    mixed_chunks("");
}

/// Where mappings cannot be made (a filesystem without mmap; injected here), mincore cannot
/// prove a chunk filled: cachestat rules out cold chunks and resident ones are copied with
/// RWF_NOWAIT reads instead of sent with sendfile from the loop.
#[cfg(feature = "failpoints")]
#[test]
fn without_mincore_mixed_chunks_are_copied_with_correct_bytes() {
    mixed_chunks("mincore=return");
}

/// Where cachestat is refused too (EPERM for files the server neither owns nor may write, on
/// 6.x kernels), the RWF_NOWAIT reads alone tell resident chunks from cold ones. Such a read that
/// misses submits the read of what it asked, and a disk answering from its host's cache can
/// complete it before the call returns: the cold chunk is then copied inline, without a wait.
/// So here a pool chunk is not required, only correct bytes and an inline chunk.
#[cfg(feature = "failpoints")]
#[test]
fn without_mincore_and_cachestat_mixed_chunks_are_copied_with_correct_bytes() {
    mixed_chunks_with("mincore=return;nowait::all_resident=return", false);
}

fn mixed_chunks(failpoints: &str) {
    mixed_chunks_with(failpoints, true)
}

fn mixed_chunks_with(failpoints: &str, cold_goes_to_the_pool: bool) {
    let dir = disk_tempdir();
    let len = 2 << 20;
    let data = bytes(len, 3);
    let s = start_with(dir.path(), Offload::Auto, 64 << 10, 60_000, failpoints);
    // Every case's range holds resident bytes and cold ones (served files have no readahead:
    // a pool chunk brings in only itself).
    let resident = [
        (256 << 10, 256 << 10),
        (1 << 20, 192 << 10),
        (1792 << 10, 128 << 10),
    ];
    type Headers<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Headers, usize, usize); 4] = [
        (&[], 0, len),
        (&[("Range", "bytes=200000-1400000")], 200_000, 1_400_001),
        (&[("Range", "bytes=300001-")], 300_001, len),
        (&[("Range", "bytes=-700000")], len - 700_000, len),
    ];
    for (i, (extra, from, to)) in cases.into_iter().enumerate() {
        // A fresh file per case: one already sent may stay referenced by socket buffers.
        let name = format!("mixed-{i}.bin");
        let path = dir.path().join(&name);
        write_file(&path, &data);
        evict(&path);
        make_resident(&path, &resident);
        let pages = resident_pages(&path);
        assert!(pages[64] && pages[300] && !pages[0] && !pages[200] && !pages[400]);
        let before = counters(&s);
        let r = fetch(s.addr, &format!("/{name}"), extra);
        assert_eq!(r.status, if extra.is_empty() { 200 } else { 206 });
        assert!(r.body == data[from..to], "bytes differ for {extra:?}");
        let after = counters(&s);
        assert!(
            after.read_hits > before.read_hits,
            "{extra:?}: no inline chunk"
        );
        assert!(
            !cold_goes_to_the_pool || after.read_misses > before.read_misses,
            "{extra:?}: no pool chunk"
        );
    }
}

/// Write `dir/name` = `body`, serve `dir` (1 MiB chunks, 300 ms cache window) and GET it twice:
/// the server and the counters between the two requests.
fn served_twice(
    dir: &Path,
    offload: Offload,
    name: &str,
    body: &[u8],
) -> (Server, Counters, Counters) {
    write_file(&dir.join(name), body);
    let s = start(dir, offload, 1 << 20, 300);
    let uri = format!("/{name}");
    assert_eq!(fetch(s.addr, &uri, &[]).body, body);
    let c0 = counters(&s);
    assert_eq!(fetch(s.addr, &uri, &[]).body, body);
    let c1 = counters(&s);
    (s, c0, c1)
}

/// Replace `path` by a new file (another inode) holding `body`, renamed over it.
fn rename_over(path: &Path, body: &[u8]) {
    let tmp = path.with_extension("tmp");
    write_file(&tmp, body);
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn open_file_cache_notices_replaced_and_modified_files() {
    let dir = disk_tempdir();
    let path = dir.path().join("page.html");
    let (s, c0, c1) = served_twice(dir.path(), Offload::Auto, "page.html", b"version one");
    // Served from the cache: an open hit, no pool open.
    assert_eq!(c1.open_hits, c0.open_hits + 1.0);
    assert_eq!(c1.pool_open, c0.pool_open);

    // Renamed over: the cached inode is unlinked, noticed on the next request.
    rename_over(&path, b"version two, longer");
    assert_eq!(
        fetch(s.addr, "/page.html", &[]).body,
        b"version two, longer"
    );

    // Modified in place (same inode): the new size is served at once.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(b" + appended").unwrap();
    f.sync_all().unwrap();
    assert_eq!(
        fetch(s.addr, "/page.html", &[]).body,
        b"version two, longer + appended"
    );

    // Replaced while the old inode keeps another name: only the path re-check after valid_ms
    // (300 ms here) can notice it.
    std::fs::hard_link(&path, dir.path().join("keep.html")).unwrap();
    rename_over(&path, b"version three");
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(fetch(s.addr, "/page.html", &[]).body, b"version three");

    // Deleted: 404, not the cached descriptor.
    std::fs::remove_file(&path).unwrap();
    assert_eq!(fetch(s.addr, "/page.html", &[]).status, 404);
}

#[test]
fn always_mode_uses_the_cache_for_opens_within_the_window() {
    let dir = disk_tempdir();
    let (s, c0, c1) = served_twice(dir.path(), Offload::Always, "a.txt", b"first");
    assert_eq!(
        c1.pool_open, c0.pool_open,
        "a cached open needs no pool task"
    );
    assert_eq!(c1.pool_sendfile, c0.pool_sendfile + 1.0);
    // No page-cache accounting outside auto.
    assert_eq!(c1.open_hits + c1.read_hits, 0.0);
    rename_over(&dir.path().join("a.txt"), b"second");
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(fetch(s.addr, "/a.txt", &[]).body, b"second");
    assert!(counters(&s).pool_open > c1.pool_open);
}

#[test]
fn volume_without_rwf_nowait_falls_back_to_the_pool_and_says_so() {
    // tmpfs answers RWF_NOWAIT reads with EOPNOTSUPP on current kernels.
    let shm = Path::new("/dev/shm");
    assert!(shm.is_dir(), "this test needs /dev/shm (a tmpfs)");
    let dir = tempfile::tempdir_in(shm).unwrap();
    let data = bytes(300 << 10, 4);
    std::fs::write(dir.path().join("t.bin"), &data).unwrap();
    let mut s = start(dir.path(), Offload::Auto, 1 << 20, 60_000);
    let before = counters(&s);
    let r = fetch(s.addr, "/t.bin", &[("Range", "bytes=100-200099")]);
    assert_eq!(r.status, 206);
    assert!(r.body == data[100..200_100]);
    let after = counters(&s);
    assert_eq!(after.read_hits, before.read_hits);
    assert!(after.read_misses > before.read_misses);
    assert!(after.pool_sendfile > before.pool_sendfile);
    let log = s.stop();
    assert!(
        log.contains("RWF_NOWAIT is not supported on this volume") && log.contains(VOL),
        "no fallback message in the log:\n{log}"
    );
    assert_eq!(
        log.matches("RWF_NOWAIT").count(),
        1,
        "logged more than once:\n{log}"
    );
}

/// Kernels without openat2 RESOLVE_CACHED (before 5.12) or gVisor cannot be had here, so the
/// probe's answer is injected (failpoint `nowait::probe`): the whole volume then runs as
/// `always` — opens and reads on the pool, no page-cache hits — and the log says so once.
#[cfg(feature = "failpoints")]
#[test]
fn volume_whose_probe_fails_runs_as_always_and_says_so() {
    let dir = disk_tempdir();
    let data = bytes(100 << 10, 5);
    write_file(&dir.path().join("f.bin"), &data);
    std::fs::read(dir.path().join("f.bin")).unwrap();
    let mut s = start_with(
        dir.path(),
        Offload::Auto,
        1 << 20,
        60_000,
        "nowait::probe=return(ENOSYS injected)",
    );
    let before = counters(&s);
    let r = fetch(s.addr, "/f.bin", &[]);
    assert_eq!(r.status, 200);
    assert!(r.body == data);
    let after = counters(&s);
    assert_eq!(after.pool_open, before.pool_open + 1.0);
    assert_eq!(after.pool_sendfile, before.pool_sendfile + 1.0);
    assert_eq!(after.open_hits + after.read_hits, 0.0);
    assert_eq!(after.open_misses, before.open_misses + 1.0);
    assert_eq!(after.read_misses, before.read_misses + 1.0);
    let log = s.stop();
    assert_eq!(
        log.matches("offload=auto is not supported on this volume")
            .count(),
        1,
        "{log}"
    );
    assert!(log.contains("ENOSYS injected"), "{log}");
}

/// The point of `auto`: with the volume's only pool thread stalled on a cold read (failpoint
/// `pool_task` delays every task of the pool) and nothing allowed to queue, resident files of the
/// same volume are still served at once on the same event loop, with no 503; `always` would need
/// that pool for every body chunk.
#[cfg(feature = "failpoints")]
#[test]
fn hits_are_served_while_the_pool_is_stalled_on_a_miss() {
    let dir = disk_tempdir();
    let hot = bytes(512 << 10, 6);
    let cold = bytes(256 << 10, 7);
    write_file(&dir.path().join("hot.bin"), &hot);
    write_file(&dir.path().join("cold.bin"), &cold);
    std::fs::read(dir.path().join("hot.bin")).unwrap();
    let cfg = one_volume(1, volume(VOL, dir.path()).offload(Offload::Auto).pool(1, 0));
    let s = Server::start_with_failpoints(&cfg, &format!("pool_task=return({VOL}:1500)"));
    // Warm the opens (fstat-checked cache entries), then evict the cold file's data.
    assert_eq!(
        fetch(s.addr, "/hot.bin", &[("Range", "bytes=0-0")]).status,
        206
    );
    evict(&dir.path().join("cold.bin"));
    let addr = s.addr;
    let t0 = std::time::Instant::now();
    let cold_req = std::thread::spawn(move || fetch(addr, "/cold.bin", &[]));
    assert!(
        wait_until(Duration::from_secs(2), || {
            s.metrics()
                .get("contentserver_pool_busy_threads", &[("volume", VOL)])
                == 1.0
        }),
        "the cold read never reached the pool"
    );
    for _ in 0..10 {
        let t = std::time::Instant::now();
        let r = fetch(s.addr, "/hot.bin", &[]);
        assert_eq!(r.status, 200);
        assert!(r.body == hot);
        assert!(
            t.elapsed() < Duration::from_millis(300),
            "hot request took {:?} while the pool was stalled",
            t.elapsed()
        );
    }
    let r = cold_req.join().unwrap();
    assert_eq!(r.status, 200);
    assert!(r.body == cold);
    assert!(t0.elapsed() >= Duration::from_millis(1500));
    assert_eq!(
        s.metrics()
            .get("contentserver_pool_rejected_total", &[("volume", VOL)]),
        0.0
    );
}
