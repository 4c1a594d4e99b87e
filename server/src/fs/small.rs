//! Small files named by the configuration (a purge token, an origin's CA bundle) read whole:
//! opened without blocking and only when regular, since a FIFO or a device put in their place
//! would block the opener (at start-up, before the signal handlers can stop it, or on a thread
//! every origin connection waits for). Knows nothing of what the bytes mean.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The whole of the regular file at `path`, at most `max` bytes; the error says what is
/// wrong with it (not a regular file, unreadable, larger than `max`) and names the path.
pub fn read(path: &Path, max: u64, holding: &str) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    let kind = f
        .metadata()
        .map_err(|e| format!("cannot read {shown}: {e}"))?
        .file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else {
            "not a regular file"
        };
        return Err(format!(
            "{shown} is {what}: it must be a regular file holding {holding}"
        ));
    }
    let mut bytes = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(format!(
            "{shown} is larger than {max} bytes: it should hold {holding}"
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_up_to_the_limit_are_read() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(read(&p, 3, "x").unwrap(), b"abc");
        let e = read(&p, 2, "one token").unwrap_err();
        assert!(
            e.contains("larger than 2 bytes: it should hold one token"),
            "{e}"
        );
        let fifo = d.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // Returns at once (a blocking open would wait for a writer for ever).
        let e = read(&fifo, 10, "PEM certificates").unwrap_err();
        assert!(
            e.ends_with("is a FIFO: it must be a regular file holding PEM certificates"),
            "{e}"
        );
        let e = read(d.path(), 10, "x").unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let e = read(&d.path().join("missing"), 10, "x").unwrap_err();
        assert!(e.starts_with("cannot read "), "{e}");
    }
}
