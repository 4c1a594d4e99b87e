//! Measurement (not a test): how should `offload = auto` send a body chunk whose pages are
//! resident in the page cache? Run with `bash scripts/measure-copy-vs-sendfile.sh`.
//!
//! Strategies, each sending a resident file over a loopback TCP connection to a reader thread:
//! - `copy`: `cachestat` of the chunk's range, `preadv2(RWF_NOWAIT)` into a reusable buffer,
//!   then `write` from the loop thread (`offload = auto`'s earlier hit path; today it copies this
//!   way only while its inline sendfile is paused).
//! - `sendfile-inline`: `cachestat` of the chunk's range (all pages resident?), then `sendfile`
//!   on the loop thread (today's `offload = auto` proves the range resident with `mincore`
//!   instead, `fs/mincore.rs`: cachestat also counts pages readahead inserted and not yet read).
//! - `sendfile-pool`: the loop hands each chunk to a pool thread (channel round trip), which runs
//!   `sendfile`; this is what `offload = always` does.
//!
//! Printed per strategy and chunk size: throughput, CPU of the loop thread per MiB (what limits
//! how many requests one event loop can serve), and CPU of loop + pool threads per MiB.

use content_server::fs::nowait::{all_resident, read_at, Nowait};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn thread_cpu() -> Duration {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(us(ru.ru_utime) + us(ru.ru_stime))
}

fn connected_pair(expect: u64) -> (TcpStream, std::thread::JoinHandle<u64>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0u64;
        while got < expect {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0);
            got += n as u64;
        }
        got
    });
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    (s, reader)
}

#[derive(Clone, Copy, Debug)]
enum Strategy {
    Copy,
    SendfileInline,
    SendfilePool,
}

struct Result {
    wall: Duration,
    loop_cpu: Duration,
    total_cpu: Duration,
}

fn sendfile_all(sock: &TcpStream, f: &File, mut off: u64, mut len: usize) {
    while len > 0 {
        let n = rustix::fs::sendfile(sock.as_fd(), f.as_fd(), Some(&mut off), len).unwrap();
        assert!(n > 0);
        len -= n;
    }
}

/// Send `rounds` times the byte range `0..file_len` of `f` in chunks of `chunk`.
fn run(strategy: Strategy, f: &File, file_len: u64, chunk: usize, rounds: u64) -> Result {
    let total = file_len * rounds;
    let (mut sock, reader) = connected_pair(total);
    let mut buf = vec![0u8; chunk];
    let pool = match strategy {
        Strategy::SendfilePool => {
            let (tx, rx) = mpsc::channel::<(u64, usize, mpsc::Sender<()>)>();
            let (s2, f2) = (sock.try_clone().unwrap(), f.try_clone().unwrap());
            let h = std::thread::spawn(move || {
                let start = thread_cpu();
                for (off, len, done) in rx {
                    sendfile_all(&s2, &f2, off, len);
                    done.send(()).unwrap();
                }
                thread_cpu() - start
            });
            Some((tx, h))
        }
        _ => None,
    };
    let t0 = Instant::now();
    let c0 = thread_cpu();
    for _ in 0..rounds {
        let mut off = 0u64;
        while off < file_len {
            let len = chunk.min((file_len - off) as usize);
            match strategy {
                Strategy::Copy => {
                    // As offload=auto copies: residency check, then the RWF_NOWAIT read, then write.
                    assert!(
                        all_resident(f.as_fd(), off, len as u64).unwrap(),
                        "not resident"
                    );
                    let n = match read_at(f.as_fd(), &mut buf[..len], off).unwrap() {
                        Nowait::Ready(n) => n,
                        Nowait::WouldBlock => panic!("file not resident"),
                    };
                    assert_eq!(n, len, "file not resident");
                    sock.write_all(&buf[..n]).unwrap();
                }
                Strategy::SendfileInline => {
                    assert!(
                        all_resident(f.as_fd(), off, len as u64).unwrap(),
                        "not resident"
                    );
                    sendfile_all(&sock, f, off, len);
                }
                Strategy::SendfilePool => {
                    let (done_tx, done_rx) = mpsc::channel();
                    pool.as_ref().unwrap().0.send((off, len, done_tx)).unwrap();
                    done_rx.recv().unwrap();
                }
            }
            off += len as u64;
        }
    }
    let loop_cpu = thread_cpu() - c0;
    let pool_cpu = match pool {
        Some((tx, h)) => {
            drop(tx);
            h.join().unwrap()
        }
        None => Duration::ZERO,
    };
    assert_eq!(reader.join().unwrap(), total);
    let wall = t0.elapsed();
    Result {
        wall,
        loop_cpu,
        total_cpu: loop_cpu + pool_cpu,
    }
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| std::env::temp_dir().display().to_string());
    let dir = tempfile::tempdir_in(dir).unwrap();
    println!("| file | chunk | strategy | MiB/s | loop CPU µs/MiB | loop+pool CPU µs/MiB | loop CPU µs/request |");
    println!("|---|---|---|---|---|---|---|");
    for &(file_len, chunks, rounds) in &[
        (16u64 << 10, &[16usize << 10][..], 20_000u64),
        (256 << 10, &[256 << 10][..], 4_000),
        (64 << 20, &[64 << 10, 256 << 10, 1 << 20, 2 << 20][..], 16),
    ] {
        let path = dir.path().join(format!("f{file_len}"));
        let mut w = File::create(&path).unwrap();
        let data: Vec<u8> = (0..file_len).map(|i| (i % 253) as u8).collect();
        w.write_all(&data).unwrap();
        w.sync_all().unwrap();
        let f = File::open(&path).unwrap();
        for &chunk in chunks {
            for strategy in [
                Strategy::Copy,
                Strategy::SendfileInline,
                Strategy::SendfilePool,
            ] {
                // Make it resident again (proactive reclaim such as DAMON may have paged out
                // parts), warm up, then the best of 3 (the machine is shared).
                let mut sink = vec![0u8; file_len as usize];
                std::os::unix::fs::FileExt::read_exact_at(&f, &mut sink, 0).unwrap();
                run(strategy, &f, file_len, chunk, rounds / 4 + 1);
                let best = (0..3)
                    .map(|_| run(strategy, &f, file_len, chunk, rounds))
                    .min_by_key(|r| r.wall)
                    .unwrap();
                let mib = (file_len * rounds) as f64 / (1 << 20) as f64;
                println!(
                    "| {} KiB | {} KiB | {:?} | {:.0} | {:.0} | {:.0} | {:.1} |",
                    file_len >> 10,
                    chunk >> 10,
                    strategy,
                    mib / best.wall.as_secs_f64(),
                    best.loop_cpu.as_micros() as f64 / mib,
                    best.total_cpu.as_micros() as f64 / mib,
                    best.loop_cpu.as_micros() as f64 / rounds as f64,
                );
            }
        }
    }
}
