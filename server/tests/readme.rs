//! The README's examples are real: every ```toml block of README.md is accepted by
//! `content-server check-config` as it stands; the Quick start's `serve --root` line, run from
//! the repository root, serves the shipped demo directory `public/` (every page and sample it
//! links to, with the right content types); and its caching-node command (`serve --origin URL
//! --cache-dir DIR ...`) runs as written, with only the origin URL, the cache directories and
//! the listeners replaced, and fills itself from that origin. Only listener and admin addresses
//! are overridden, so no test needs ports 8080 or 9190.

mod common;

use common::origin::{pattern, FaultOrigin, Object};
use common::*;
use std::path::{Path, PathBuf};

/// What the tests add to a README command: kernel-chosen ports on loopback, no admin listener,
/// one worker.
const LOCAL: [&str; 6] = [
    "--listen",
    "127.0.0.1:0",
    "--admin-listen",
    "",
    "--workers",
    "1",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root above server/")
        .to_path_buf()
}

fn readme() -> String {
    std::fs::read_to_string(repo_root().join("README.md")).expect("README.md")
}

/// The arguments after ` -- ` of the first `cargo run` line of `text` that contains `needle`
/// (continuation lines joined).
fn cargo_run_args(text: &str, needle: &str) -> Option<Vec<String>> {
    let joined = text.replace("\\\n", " ");
    let line = joined
        .lines()
        .find(|l| l.starts_with("cargo run") && l.contains(needle))?;
    let (_, args) = line.split_once(" -- ")?;
    Some(args.split_whitespace().map(str::to_string).collect())
}

/// The bodies of the README's fenced blocks of `lang`.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let open = format!("```{lang}");
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in text.lines() {
        match &mut cur {
            None if line.trim() == open => cur = Some(String::new()),
            Some(b) if line.trim() == "```" => {
                out.push(std::mem::take(b));
                cur = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None => {}
        }
    }
    out
}

#[test]
fn every_toml_block_of_the_readme_is_a_valid_configuration() {
    let text = readme();
    let tomls = blocks(&text, "toml");
    assert!(tomls.len() >= 3, "{} toml blocks", tomls.len());
    for (i, b) in tomls.iter().enumerate() {
        let (code, out, err) = check_config(b);
        assert_eq!(code, 0, "README toml block {i}:\n{b}\n{err}");
        assert!(out.contains("[[volumes]]"), "block {i}: {out}");
    }
    // The reference block of Configuration and the cache block both reach every section they
    // document (not a fragment that happens to parse).
    let normalized: Vec<String> = tomls.iter().map(|b| check_config(b).1).collect();
    assert!(normalized
        .iter()
        .any(|o| o.contains("[[listeners]]") && o.contains("[limits]")));
    assert!(normalized.iter().any(|o| o.contains("[[origins]]")
        && o.contains("[volumes.cache]")
        && o.contains("[routes.cache]")));
}

/// The Quick start's `cargo run ... -- serve --origin URL --cache-dir DIR ...` command, its
/// continuation lines joined: the arguments after `--`.
fn quick_start_cache_args(text: &str) -> Vec<String> {
    let quick = text
        .split("## Quick start")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a Quick start section");
    cargo_run_args(&blocks(quick, "sh").join("\n"), "-- serve --origin")
        .expect("Quick start shows `cargo run ... -- serve --origin URL --cache-dir DIR`")
}

#[test]
fn the_quick_start_caching_node_runs_as_written() {
    let args = quick_start_cache_args(&readme());
    assert_eq!(args[..2], ["serve", "--origin"], "{args:?}");
    let dirs = args.iter().filter(|a| *a == "--cache-dir").count();
    assert!(dirs >= 2, "one --cache-dir per disk: {args:?}");

    let o = FaultOrigin::start();
    let body = pattern(300_000, 31);
    o.put("/v/seg1.ts", Object::new(body.clone()));
    let tmp = tempdir();
    let url = o.url();
    let caches: Vec<PathBuf> = (0..dirs)
        .map(|i| tmp.path().join(format!("disk{i}")))
        .collect();
    for c in &caches {
        std::fs::create_dir_all(c).unwrap();
    }
    // The README's arguments, with its URL and directories replaced by ours.
    let mut run: Vec<String> = Vec::new();
    let mut next_dir = caches.iter();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        run.push(a.clone());
        match a.as_str() {
            "--origin" => {
                it.next().expect("the origin URL");
                run.push(url.clone());
            }
            "--cache-dir" => {
                it.next().expect("a cache directory");
                run.push(next_dir.next().unwrap().display().to_string());
            }
            _ => {}
        }
    }
    run.extend(LOCAL.map(String::from));
    let argv: Vec<&str> = run.iter().map(String::as_str).collect();
    let s = Server::spawn(&argv, &[]);
    let r = s.get("/v/seg1.ts");
    assert_eq!((r.status, r.header("X-Cache")), (200, Some("MISS")));
    assert!(r.body == body);
    let r = s.get("/v/seg1.ts");
    assert_eq!((r.status, r.header("X-Cache")), (200, Some("HIT")));
    assert!(r.body == body);
    assert_eq!(
        o.requests("/v/seg1.ts"),
        1,
        "the hit asked the origin nothing"
    );
}

#[test]
fn readme_quick_start_serves_the_demo_directory() {
    let args = cargo_run_args(&readme(), "-p content-server -- serve --root")
        .expect("README has a `cargo run -p content-server -- serve --root DIR` line");
    assert_eq!(args[..2], ["serve", "--root"], "{args:?}");
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend(LOCAL);
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
