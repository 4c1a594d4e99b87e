//! The layer order of the server's modules, and a unit test that holds the sources to it: a
//! module may name (`crate::…`) only modules of a lower layer, so data flows one way and there is
//! no import cycle between modules. Comments and doc links do not count.
//!
//! Owns only this table; it must not be imported by anything (it is checked, not used).

/// Top-level modules by layer, top first. A module of layer `i` may use modules of layers
/// `> i` only (and itself).
pub const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["runtime"],
    &["accept"],
    &["conn"],
    &["serve"],
    &["shared"],
    &["admin"],
    &["cache"],
    &["volume"],
    &["logging", "origin", "pool", "resolve"],
    &["fs", "http"],
    &["config", "lifecycle", "metrics", "socket"],
];

#[cfg(test)]
mod tests {
    use super::LAYERS;
    use std::path::{Path, PathBuf};

    fn layer(module: &str) -> Option<usize> {
        LAYERS.iter().position(|l| l.contains(&module))
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// The modules a line of code names with `crate::name` or `crate::{a, b::c}`.
    fn named(code: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let list = match rest.strip_prefix('{') {
                Some(inner) => inner.split(',').map(str::trim).collect(),
                None => vec![rest],
            };
            for item in list {
                let name: String = item
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
        }
        out
    }

    #[test]
    fn modules_only_use_lower_layers() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
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
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for used in named(code) {
                    if used == module {
                        continue;
                    }
                    match layer(&used) {
                        Some(l) if l > own => {}
                        _ => {
                            wrong.push(format!("{}:{}: {module} uses {used}", rel.display(), n + 1))
                        }
                    }
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
        assert_eq!(named("use crate::fs::open::OpenError;"), ["fs"]);
        assert_eq!(
            named("use crate::{pool, volume::Volume};"),
            ["pool", "volume"]
        );
        assert_eq!(
            named("let x = crate::metrics::method_label(m);"),
            ["metrics"]
        );
        assert!(named("let s = \"no path\";").is_empty());
        assert_eq!(layer("serve").unwrap() + 1, layer("shared").unwrap());
    }
}
