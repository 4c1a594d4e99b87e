//! The layer order of the server's modules, and unit tests that hold the sources to it: a
//! module may name (`crate::…`) only modules of a lower layer, so data flows one way and there is
//! no import cycle between modules; and inside every module the files' imports of each other
//! (`super::sibling`, `crate::module::sibling`) form no cycle either ([`file_cycles`], which the
//! operator's tests run over its own sources). Comments and doc links do not count.
//!
//! Owns only this table and that check; nothing of the server uses it (it is checked, not used).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top-level modules by layer, top first. A module of layer `i` may use modules of layers
/// `> i` only (and itself).
pub const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["runtime"],
    &["accept"],
    &["conn"],
    &["idle", "serve"],
    &["shared"],
    &["admin"],
    &["cache"],
    &["volume"],
    &["origin", "pool", "resolve"],
    &["bind", "fs", "http", "logging"],
    &[
        "clock",
        "config",
        "descriptors",
        "lifecycle",
        "memory",
        "metrics",
        "socket",
    ],
];

/// The `.rs` files below `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries = std::fs::read_dir(dir)?.collect::<Result<Vec<_>, _>>()?;
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    Ok(())
}

/// The module path of a source file relative to `src`: `cache/fill.rs` -> `[cache, fill]`,
/// `cache/mod.rs` -> `[cache]`, `lib.rs` -> `[]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut m: Vec<String> = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if matches!(m.last().map(String::as_str), Some("mod"))
        || m.len() == 1 && matches!(m[0].as_str(), "lib" | "main")
    {
        m.pop();
    }
    m
}

/// The paths a piece of code names from `crate::`, `super::` or `self::`, resolved against the
/// file's module path `own`, with `{a, b::c}` lists (also over several lines) expanded.
fn paths_named(code: &str, own: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let starts = code
        .match_indices("crate::")
        .chain(code.match_indices("super::"))
        .chain(code.match_indices("self::"));
    for (i, word) in starts {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '$') {
            continue; // `super::super::x` is read from its first `super`, `$crate` is a macro's
        }
        let mut base: Vec<String> = match word {
            "crate::" => Vec::new(),
            "self::" => own.to_vec(),
            _ => own[..own.len().saturating_sub(1)].to_vec(),
        };
        let mut rest = &code[i + word.len()..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        use_tree(rest, base, &mut out);
    }
    out
}

/// Expand one use tree (`a::b::{c, d::e}` …) after `base` into the paths it names.
fn use_tree(text: &str, mut base: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut rest = text.trim_start();
    loop {
        if let Some(inner) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item = 0;
            for (j, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        use_tree(&inner[item..j], base.clone(), out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        use_tree(&inner[item..j], base.clone(), out);
                        item = j + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            break;
        }
        rest = rest[name.len()..].trim_start();
        if name != "self" {
            base.push(name);
        }
        match rest.strip_prefix("::") {
            Some(r) => rest = r.trim_start(),
            None => break,
        }
    }
    if !base.is_empty() {
        out.push(base);
    }
}

/// Import cycles between the files of one module, at every level (`cache/fill.rs` <->
/// `cache/volume.rs`, or `a/` <-> `b.rs` at the top): one line per cycle, naming its files.
/// A file imports a sibling when it names a path through it; what it names of its parent
/// (`super::Item` defined in `mod.rs`) is not a sibling, and `mod.rs` declaring its children
/// is not an import. Comments do not count.
pub fn file_cycles(src: &Path) -> std::io::Result<Vec<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files)?;
    let mut nodes: BTreeMap<Vec<String>, String> = BTreeMap::new();
    let mut texts = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(src).unwrap_or(f);
        let own = module_path(rel);
        let text = std::fs::read_to_string(f)?;
        let code: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        nodes.insert(own.clone(), rel.display().to_string());
        texts.push((own, code));
    }
    // Edges between siblings: from every ancestor of the naming file that is a sibling of an
    // ancestor of the named path.
    let mut edges: BTreeMap<Vec<String>, Vec<Vec<String>>> = BTreeMap::new();
    for (own, code) in &texts {
        for target in paths_named(code, own) {
            for k in 1..=own.len() {
                let (from, parent) = (&own[..k], &own[..k - 1]);
                if !target.starts_with(parent) || target.len() < k || target[k - 1] == own[k - 1] {
                    continue;
                }
                let to = target[..k].to_vec();
                if nodes.contains_key(&to) {
                    let e = edges.entry(from.to_vec()).or_default();
                    if !e.contains(&to) {
                        e.push(to);
                    }
                }
            }
        }
    }
    // Strongly connected components of more than one node are the cycles.
    let mut cycles = Vec::new();
    let mut seen: Vec<Vec<String>> = Vec::new();
    for start in nodes.keys() {
        if seen.contains(start) {
            continue;
        }
        let reach = |from: &Vec<String>| {
            let mut r = vec![from.clone()];
            let mut i = 0;
            while i < r.len() {
                for n in edges.get(&r[i]).into_iter().flatten() {
                    if !r.contains(n) {
                        r.push(n.clone());
                    }
                }
                i += 1;
            }
            r
        };
        let scc: Vec<Vec<String>> = reach(start)
            .into_iter()
            .filter(|n| reach(n).contains(start))
            .collect();
        if scc.len() > 1 {
            let names: Vec<&str> = scc.iter().map(|n| nodes[n].as_str()).collect();
            cycles.push(names.join(" <-> "));
        }
        seen.extend(scc);
    }
    Ok(cycles)
}

#[cfg(test)]
mod tests {
    use super::{file_cycles, paths_named, rust_files, LAYERS};
    use std::path::Path;

    fn layer(module: &str) -> Option<usize> {
        LAYERS.iter().position(|l| l.contains(&module))
    }

    #[test]
    fn modules_only_use_lower_layers() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files).unwrap();
        let top: Vec<String> = files
            .iter()
            .filter_map(|f| {
                super::module_path(f.strip_prefix(&src).ok()?)
                    .first()
                    .cloned()
            })
            .collect();
        let mut wrong = Vec::new();
        for f in &files {
            let rel = f.strip_prefix(&src).unwrap();
            let first = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_str()
                .unwrap();
            let module = first.trim_end_matches(".rs");
            if matches!(module, "lib" | "main" | "layers") {
                continue;
            }
            let own = layer(module).unwrap_or_else(|| panic!("{module} is in no layer of LAYERS"));
            let text = std::fs::read_to_string(f).unwrap();
            // Over the whole file, so `use crate::{` lists over several lines count.
            let code: Vec<&str> = text
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect();
            let own_path = super::module_path(rel);
            for p in paths_named(&code.join("\n"), &own_path) {
                let used = p[0].as_str();
                let is_module = top.iter().any(|t| t == used);
                if used != module && is_module && layer(used).is_none_or(|l| l <= own) {
                    wrong.push(format!("{}: {module} uses {used}", rel.display()));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "imports against the layer order:\n{}",
            wrong.join("\n")
        );
    }

    #[test]
    fn the_check_sees_imports() {
        let own = |p: &str| p.split("::").map(String::from).collect::<Vec<_>>();
        let first = |code: &str| -> Vec<String> {
            paths_named(code, &own("serve"))
                .into_iter()
                .map(|p| p[0].clone())
                .collect()
        };
        assert_eq!(first("use crate::fs::open::OpenError;"), ["fs"]);
        assert_eq!(
            first("use crate::{pool, volume::Volume};"),
            ["pool", "volume"]
        );
        assert_eq!(
            first("let x = crate::metrics::method_label(m);"),
            ["metrics"]
        );
        assert!(first("let s = \"no path\";").is_empty());
        assert_eq!(layer("serve").unwrap() + 1, layer("shared").unwrap());
    }

    #[test]
    fn no_import_cycle_between_the_files_of_a_module() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let cycles = file_cycles(&src).unwrap();
        assert!(
            cycles.is_empty(),
            "import cycles between files:\n{}",
            cycles.join("\n")
        );
    }

    #[test]
    fn the_file_check_sees_cycles() {
        let own = |p: &str| p.split("::").map(String::from).collect::<Vec<_>>();
        assert_eq!(
            paths_named(
                "use super::volume::{CacheVolume, Stored};",
                &own("cache::fill")
            ),
            [
                own("cache::volume::CacheVolume"),
                own("cache::volume::Stored")
            ]
        );
        assert_eq!(
            paths_named(
                "use crate::{\n    cache::{fill, volume::X},\n    http,\n};",
                &own("serve")
            ),
            [own("cache::fill"), own("cache::volume::X"), own("http")]
        );
        assert_eq!(paths_named("use self::a::B;", &own("x")), [own("x::a::B")]);
        assert_eq!(
            paths_named("super::super::y::Z", &own("x::a::b")),
            [own("x::y::Z")]
        );
        assert!(paths_named("pub(super) fn f() {}", &own("x::a")).is_empty());
        // Two sibling files naming each other, a third beside them, and a parent item.
        let dir = std::env::temp_dir().join(format!("layers-check-{}", std::process::id()));
        let m = dir.join("m");
        std::fs::create_dir_all(&m).unwrap();
        std::fs::write(dir.join("lib.rs"), "pub mod m;\n").unwrap();
        std::fs::write(
            m.join("mod.rs"),
            "pub mod a;\npub mod b;\npub mod c;\npub struct P;\n",
        )
        .unwrap();
        std::fs::write(
            m.join("a.rs"),
            "use super::b::B;\nuse super::P; // super::c\n",
        )
        .unwrap();
        std::fs::write(m.join("c.rs"), "use super::a;\n").unwrap();
        std::fs::write(m.join("b.rs"), "pub struct B;\n").unwrap();
        let before = file_cycles(&dir).unwrap();
        std::fs::write(m.join("b.rs"), "pub struct B(crate::m::a::A);\n").unwrap();
        let after = file_cycles(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(before.is_empty(), "{before:?}");
        assert_eq!(after, ["m/a.rs <-> m/b.rs"]);
    }
}
