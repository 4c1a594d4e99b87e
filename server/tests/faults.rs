//! Failing file operations (fault injection): EIO or a file ending early in the middle of a
//! body closes that connection with fewer bytes than announced and logs it; EIO on open is 500.
#![cfg(feature = "failpoints")]

mod common;

use common::*;
use std::time::Duration;

fn serve(fp: &str, offload: Offload) -> (tempfile::TempDir, Server, Vec<u8>) {
    let d = tempdir();
    let data = bytes(64 * 1024, 3);
    std::fs::write(d.path().join("f.bin"), &data).unwrap();
    std::fs::write(d.path().join("small.txt"), b"x").unwrap();
    let mut cfg = one_volume(1, volume("v", d.path()).offload(offload));
    cfg.limits.sendfile_max_chunk = 4096;
    let s = Server::start_with_failpoints(&cfg, fp);
    (d, s, data)
}

fn broken_body(fp: &str, offload: Offload, log: &str) {
    let (_d, s, data) = serve(fp, offload);
    let mut c = s.connect();
    c.send(b"GET /f.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    let err = c.response(false).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    assert!(
        err.to_string().contains("body ended after 4096 of 65536"),
        "{err}"
    );
    assert!(s.wait_log(log, Duration::from_secs(2)), "{}", s.logs());
    // Small bodies (one chunk at offset 0) are unaffected; the server keeps serving.
    let r = s.get("/small.txt");
    assert_eq!((r.status, r.body.as_slice()), (200, b"x".as_slice()));
    let _ = data;
}

#[test]
fn eio_mid_body_closes_the_connection() {
    broken_body(
        "send_chunk=return(eio)",
        Offload::Always,
        "response body failed; closing connection",
    );
    broken_body(
        "send_chunk=return(eio)",
        Offload::Never,
        "Input/output error",
    );
}

#[test]
fn truncation_mid_body_closes_the_connection() {
    broken_body(
        "send_chunk=return(truncate)",
        Offload::Always,
        "file ended at byte 4096",
    );
    broken_body(
        "send_chunk=return(truncate)",
        Offload::Never,
        "file ended at byte 4096",
    );
}

#[test]
fn eio_on_open_is_500() {
    let (_d, s, _) = serve("open_file=return(eio)", Offload::Always);
    assert_eq!(s.get("/f.bin").status, 500);
    assert!(
        s.wait_log("cannot open file", Duration::from_secs(2)),
        "{}",
        s.logs()
    );
}
