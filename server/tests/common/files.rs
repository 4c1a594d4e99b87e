//! Files for tests: temp dirs, directories of same-sized files, deterministic contents, and
//! polling with a deadline. No server here.

use std::time::{Duration, Instant};

/// A fresh temp dir (removed on drop).
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// A temp dir on the build disk (CARGO_TARGET_TMPDIR), for tests that need RWF_NOWAIT and a
/// page cache: /tmp may be a tmpfs.
pub fn disk_tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir on the build disk")
}

/// A directory with `files` of `size` bytes each, named `f0.bin`, `f1.bin`, ...
pub fn content_dir(files: usize, size: usize) -> tempfile::TempDir {
    let dir = tempdir();
    for i in 0..files {
        std::fs::write(dir.path().join(format!("f{i}.bin")), vec![b'x'; size]).expect("write");
    }
    dir
}

/// Deterministic, position-dependent pseudo-random bytes (a wrong offset shows as wrong bytes).
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Poll `cond` every 10 ms until true or `within` passes; whether it became true.
pub fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
