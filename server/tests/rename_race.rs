//! A link inside the volume whose target goes through `..` (`sub/up.txt -> ../hello.txt`) while
//! files are renamed elsewhere on the machine: the kernel fails such a scoped lookup with
//! EAGAIN when a rename races its `..` step, and every request must still be answered 200 (the
//! open is tried again), not 500. Alone in its test binary: the renames slow down every scoped
//! lookup on the machine, which other tests running beside it would feel.

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn a_rename_elsewhere_never_fails_a_lookup_through_dotdot() {
    let base = tempdir();
    let vol = base.path().join("vol");
    std::fs::create_dir_all(vol.join("sub")).unwrap();
    std::fs::write(vol.join("hello.txt"), b"hello").unwrap();
    std::os::unix::fs::symlink("../hello.txt", vol.join("sub/up.txt")).unwrap();
    // `never`: every open is the pool's blocking one (the cached attempt of `auto` gives up on
    // EAGAIN by design and hands over to it).
    let s = Server::root(&vol, &["--offload", "never"]);
    let stop = Arc::new(AtomicBool::new(false));
    let renamer = {
        let (stop, d) = (stop.clone(), base.path().to_path_buf());
        std::thread::spawn(move || {
            std::fs::write(d.join("x"), b"x").unwrap();
            while !stop.load(Ordering::Relaxed) {
                std::fs::rename(d.join("x"), d.join("y")).unwrap();
                std::fs::rename(d.join("y"), d.join("x")).unwrap();
            }
        })
    };
    let mut c = s.connect();
    let (mut ok, mut failed) = (0, Vec::new());
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let r = c.get("/sub/up.txt");
        if r.status == 200 && r.body == b"hello" {
            ok += 1;
        } else {
            failed.push(r.status);
        }
    }
    stop.store(true, Ordering::Relaxed);
    renamer.join().unwrap();
    assert!(
        failed.is_empty(),
        "{} of {} failed: {:?}",
        failed.len(),
        ok + failed.len(),
        &failed[..failed.len().min(5)]
    );
}
