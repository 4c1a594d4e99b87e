//! The README's Quick start, verbatim: the `serve` arguments of its `cargo run` line, run from
//! the repository root, serve the shipped demo directory `public/` (every page and sample it
//! links to, with the right content types). Only the listener and admin addresses are overridden,
//! so the test never needs ports 8080 or 9190.

mod common;

use common::*;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root above server/")
        .to_path_buf()
}

/// The arguments after `--` of the README's `cargo run ... -p content-server -- serve --root`
/// line.
fn readme_serve_args() -> Vec<String> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let line = readme
        .lines()
        .find(|l| l.starts_with("cargo run") && l.contains("-p content-server -- serve --root"))
        .expect("README has a `cargo run -p content-server -- serve --root DIR` line");
    let (_, args) = line.split_once(" -- ").expect("arguments after --");
    args.split_whitespace().map(str::to_string).collect()
}

#[test]
fn readme_quick_start_serves_the_demo_directory() {
    let args = readme_serve_args();
    assert_eq!(args[..2], ["serve", "--root"], "{args:?}");
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend([
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "",
        "--workers",
        "1",
    ]);
    let s = Server::spawn_in(&repo_root(), &args);

    let index = s.get("/");
    assert_eq!(index.status, 200, "{}", index.text());
    assert_eq!(
        index.header("Content-Type"),
        Some("text/html; charset=utf-8")
    );
    assert!(index.text().contains("content-server"), "{}", index.text());

    // Every sample the page links to is served, byte for byte, with its media type.
    let public = repo_root().join(args[2]);
    let links: Vec<String> = index
        .text()
        .split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next().map(str::to_string))
        .collect();
    assert!(
        links.len() >= 3,
        "index.html links to its samples: {links:?}"
    );
    for link in &links {
        let r = s.get(&format!("/{link}"));
        assert_eq!(r.status, 200, "/{link}");
        assert_eq!(
            r.body,
            std::fs::read(public.join(link)).expect("linked file")
        );
        let want = match link.rsplit('.').next() {
            Some("m3u8") => "application/vnd.apple.mpegurl",
            Some("ts") => "video/mp2t",
            Some("svg") => "image/svg+xml",
            other => panic!("unexpected sample type {other:?} ({link})"),
        };
        assert_eq!(r.header("Content-Type"), Some(want), "/{link}");
    }
    // The playlist names a segment that is served too.
    let playlist = s.get("/demo/stream.m3u8").text();
    for segment in playlist
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        assert_eq!(s.get(&format!("/demo/{segment}")).status, 200, "{segment}");
    }
}
