//! File access beneath a volume root: resolving, opening, stat, reads. Runs wherever the caller
//! puts it (a pool thread or, for `never`/`auto` hits, the event loop); it never decides that.

pub mod cache;
pub mod hot;
pub mod nowait;
pub mod open;

/// Failpoint `open_file`: `FAILPOINTS="open_file=return(eio)"` makes every open fail with EIO.
pub(crate) fn failpoint_open() -> Result<(), open::OpenError> {
    fail::fail_point!("open_file", |arg: Option<String>| {
        match arg.as_deref() {
            Some("eio") => Err(open::OpenError::Io(std::io::Error::from_raw_os_error(
                libc::EIO,
            ))),
            _ => Ok(()),
        }
    });
    Ok(())
}
