//! The README's examples are real: every ```toml block of README.md is accepted by
//! `content-server check-config` as it stands, and the Quick start's caching-node command (`serve
//! --origin URL --cache-dir DIR ...`) runs as written, with only the origin URL, the cache
//! directories and the listeners replaced, and fills itself from that origin.

mod common;

use common::origin::{pattern, FaultOrigin, Object};
use common::*;
use std::path::{Path, PathBuf};

fn readme() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root above server/")
        .to_path_buf();
    std::fs::read_to_string(root.join("README.md")).expect("README.md")
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
    let sh = blocks(quick, "sh");
    let cmd = sh
        .iter()
        .map(|b| b.replace("\\\n", " "))
        .flat_map(|b| b.lines().map(str::to_string).collect::<Vec<_>>())
        .find(|l| l.starts_with("cargo run") && l.contains("-- serve --origin"))
        .expect("Quick start shows `cargo run ... -- serve --origin URL --cache-dir DIR`");
    let (_, args) = cmd.split_once(" -- ").expect("arguments after --");
    args.split_whitespace().map(str::to_string).collect()
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
    run.extend(
        [
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "",
            "--workers",
            "1",
        ]
        .map(String::from),
    );
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
