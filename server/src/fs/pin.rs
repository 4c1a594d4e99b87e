//! Keep the server's own code in memory: `mlock(2)` of the private read-only file mappings of the
//! process (the executable's and shared libraries' code and read-only data, about 10 MiB), so that an
//! event loop never waits for the disk to page its own instructions back in. Without it, on a
//! node whose page cache is flooded by cold reads (seedbench: a 256 MiB memory budget, a
//! throttled disk), the kernel evicts the binary's text like any file page and the loops stall
//! in page faults (`filemap_fault` -> `folio_wait_bit`, sampled from the workers' kernel stacks:
//! hot p99 up to 2.7 s with every body byte already in memory).
//!
//! Best effort: where the locked-memory limit is too small (RLIMIT_MEMLOCK without
//! CAP_IPC_LOCK), what fits is locked, code first, and the rest is said once in the log. It must
//! not decide anything else; the volume calls it once per process for `offload = auto`.

use std::io;

/// Bytes locked per mlock call.
const STEP: usize = 1 << 20;

/// Lock every private read-only file mapping listed in `/proc/self/maps` now: executable ones first, then
/// the read-only ones. Returns the bytes locked and the first error met (the rest is skipped).
pub fn pin_own_mappings() -> (usize, Option<io::Error>) {
    let maps = match std::fs::read_to_string("/proc/self/maps") {
        Ok(m) => m,
        Err(e) => return (0, Some(e)),
    };
    let mut ranges: Vec<(bool, usize, usize)> = maps.lines().filter_map(file_mapping).collect();
    // Code first: it is what a loop faults on.
    ranges.sort_by_key(|&(exec, start, _)| (!exec, start));
    let mut locked = 0usize;
    for (_, start, end) in ranges {
        // In steps, so that a limit smaller than one mapping still locks what fits.
        let mut at = start;
        while at < end {
            let n = (end - at).min(STEP);
            // SAFETY: mlock only pins pages of a range the kernel just listed as mapped in
            // this process; it reads nothing through it and changes no contents.
            if unsafe { libc::mlock(at as *const libc::c_void, n) } != 0 {
                return (locked, Some(io::Error::last_os_error()));
            }
            (at, locked) = (at + n, locked + n);
        }
    }
    (locked, None)
}

/// `(executable, start, end)` of a line of `/proc/self/maps` naming a file that is mapped
/// private and without write permission (code, read-only data); `None` for anonymous, writable,
/// shared or special (`[vdso]`...) mappings. Shared read-only mappings are data, never code:
/// the mincore windows over served files ([`super::mincore`]) are such, and locking one would
/// read the whole window in and keep it (measured in the tests: an evicted file read back).
fn file_mapping(line: &str) -> Option<(bool, usize, usize)> {
    let mut f = line.split_ascii_whitespace();
    let (range, perms) = (f.next()?, f.next()?);
    let path = f.nth(3)?;
    let perms = perms.as_bytes();
    if !path.starts_with('/') || perms.get(1) == Some(&b'w') || perms.get(3) != Some(&b'p') {
        return None;
    }
    let (a, b) = range.split_once('-')?;
    let (start, end) = (
        usize::from_str_radix(a, 16).ok()?,
        usize::from_str_radix(b, 16).ok()?,
    );
    (end > start).then_some((perms.get(2) == Some(&b'x'), start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_name_read_only_file_mappings_only() {
        let code = "55d0c0a00000-55d0c0b00000 r-xp 00100000 fd:01 1234 /usr/bin/content-server";
        assert_eq!(
            file_mapping(code),
            Some((true, 0x55d0c0a00000, 0x55d0c0b00000))
        );
        let ro = "7f0000000000-7f0000001000 r--p 00000000 fd:01 99 /usr/lib/libc.so.6";
        assert_eq!(
            file_mapping(ro),
            Some((false, 0x7f0000000000, 0x7f0000001000))
        );
        for skip in [
            "7f0000000000-7f0000001000 rw-p 00000000 fd:01 99 /usr/lib/libc.so.6",
            "7f0000000000-7f0000001000 rw-p 00000000 00:00 0 ",
            "7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]",
            "7f0000000000-7f0000040000 r--s 00000000 fd:01 77 /srv/media/a.mp4",
        ] {
            assert_eq!(file_mapping(skip), None, "{skip}");
        }
    }

    #[test]
    fn the_test_binary_code_is_resident_and_locked_after_pinning() {
        let (locked, err) = pin_own_mappings();
        // Under a small RLIMIT_MEMLOCK only part fits; the code of this binary comes first.
        if let Some(e) = &err {
            assert!(
                matches!(e.raw_os_error(), Some(libc::ENOMEM) | Some(libc::EPERM)),
                "{e}"
            );
        }
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let vm_lck: usize = status
            .lines()
            .find_map(|l| l.strip_prefix("VmLck:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap();
        let limit = rustix::process::getrlimit(rustix::process::Resource::Memlock).current;
        assert!(locked > 0 || limit == Some(0), "nothing locked: {err:?}");
        assert!(
            vm_lck > 0 || limit == Some(0),
            "VmLck is 0 after locking {locked} bytes"
        );
        // `locked` also counts files other tests of this process mapped for a moment (mincore
        // tests map and unmap temporary files), so compare VmLck with what cannot go away: this
        // binary's own code, all of it locked when nothing stopped the pinning.
        if err.is_none() {
            let exe = std::fs::read_link("/proc/self/exe").unwrap();
            let own_code: usize = std::fs::read_to_string("/proc/self/maps")
                .unwrap()
                .lines()
                .filter(|l| l.ends_with(exe.to_str().unwrap()))
                .filter_map(file_mapping)
                .filter(|&(exec, _, _)| exec)
                .map(|(_, start, end)| end - start)
                .sum();
            assert!(own_code > 0, "no code mapping of {}", exe.display());
            assert!(
                vm_lck * 1024 >= own_code,
                "VmLck {vm_lck} kB < the binary's code, {own_code} bytes"
            );
        }
    }
}
