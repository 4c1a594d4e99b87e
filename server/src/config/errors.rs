//! How configuration problems are reported: [`FieldError`] (a field path and what is wrong),
//! [`ConfigError`], and the collector every check writes into, with the shared name and path
//! rules.
//!
//! Owns the error shapes only; it must not hold any check of a particular section (those live
//! next to their types: `validate.rs`, `cache.rs`, `origin.rs`, `headers.rs`...).

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;

/// One invalid field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path of the field, e.g. `routes[0].split[2].percent`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    // (`io`, not `source`: the message already says it, a chain would say it twice.)
    #[error("cannot read {path}: {io}")]
    Read { path: PathBuf, io: std::io::Error },
    #[error("invalid TOML: {0}")]
    Parse(String),
    #[error("{path} is not UTF-8 text: the first bad byte is at {at}")]
    NotUtf8 { path: PathBuf, at: String },
    #[error("cannot render configuration: {0}")]
    Render(String),
    #[error("invalid configuration:\n{}", .0.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<FieldError>),
}

pub(super) struct Errors(pub(super) Vec<FieldError>);

impl Errors {
    pub(super) fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }
}

/// A serde type error in words: `expected u64` (Rust's type names) becomes `expected a whole
/// number from 0 to 18446744073709551615`, and so on for every integer and float type a config
/// field has.
pub(super) fn plain_types(message: &str) -> String {
    const NAMES: [(&str, &str); 10] = [
        ("expected u8", "expected a whole number from 0 to 255"),
        ("expected u16", "expected a whole number from 0 to 65535"),
        (
            "expected u32",
            "expected a whole number from 0 to 4294967295",
        ),
        (
            "expected u64",
            "expected a whole number from 0 to 18446744073709551615",
        ),
        (
            "expected usize",
            "expected a whole number from 0 to 18446744073709551615",
        ),
        (
            "expected i32",
            "expected a whole number from -2147483648 to 2147483647",
        ),
        ("expected i64", "expected a whole number"),
        ("expected f32", "expected a number"),
        ("expected f64", "expected a number"),
        ("expected a boolean", "expected true or false"),
    ];
    // A number past i64 is read as i128 and reported as such: too large is what it is.
    let mut out = message.replace("` as i128, expected", "` (too large), expected");
    // A section given as a value (`logging = "json"`) names the Rust struct it was read into.
    const STRUCT: &str = "expected struct ";
    while let Some(at) = out.find(STRUCT) {
        let name_end = out[at + STRUCT.len()..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(out.len(), |i| at + STRUCT.len() + i);
        out.replace_range(at..name_end, "expected a table");
    }
    for (rust, words) in NAMES {
        // Only the whole word: `expected u8` must not match inside `expected u8x`.
        let mut from = 0;
        while let Some(at) = out[from..].find(rust).map(|i| i + from) {
            let end = at + rust.len();
            let whole = !out[end..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
            if whole {
                out.replace_range(at..end, words);
                from = at + words.len();
            } else {
                from = end;
            }
        }
    }
    out
}

/// The longest line of a TOML error's excerpt kept whole: a 5,000-character value is shown by
/// its start (the error's line and column still say where it is).
const EXCERPT_LINE_MAX: usize = 160;
/// The longest line of the message itself (which may quote the value too); long enough for
/// the list of a table's known fields.
const MESSAGE_LINE_MAX: usize = 600;

/// `message` with every excerpt line over [`EXCERPT_LINE_MAX`] characters, and every other
/// line over [`MESSAGE_LINE_MAX`], cut there and ending in `…`.
pub(super) fn shorten_lines(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(4096));
    for (i, line) in message.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        // Excerpt lines are `N | text` and `  | ^^^`; the message's own lines stay whole.
        let excerpt = line
            .trim_start_matches(|c: char| c.is_ascii_digit() || c == ' ')
            .starts_with('|');
        let max = if excerpt {
            EXCERPT_LINE_MAX
        } else {
            MESSAGE_LINE_MAX
        };
        match line.char_indices().nth(max) {
            Some((cut, _)) => {
                out.push_str(&line[..cut]);
                out.push('…');
            }
            None => out.push_str(line),
        }
    }
    out
}

/// Where the first byte that is not UTF-8 is: `line L, column C (byte B)`, counted as an
/// editor does (columns in characters, from 1).
pub(super) fn utf8_position(bytes: &[u8], e: &std::str::Utf8Error) -> String {
    let at = e.valid_up_to();
    // Valid up to `at`, so this slice is text.
    let before = std::str::from_utf8(&bytes[..at]).unwrap_or_default();
    let (line, column) = line_column(before, at);
    format!("line {line}, column {column} (byte {at})")
}

/// 1-based line and column (in characters) of byte `at` of `text`, as an editor counts.
pub(super) fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = text.get(..at.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// `FIELD.name` must be a valid name, not used by an earlier entry of the same `kind`.
pub(super) fn check_unique_name<'a>(
    e: &mut Errors,
    field: &str,
    kind: &str,
    name: &'a str,
    seen: &mut HashSet<&'a str>,
) {
    if !valid_name(name) {
        e.push(
            format!("{field}.name"),
            format!("{name:?} must be 1-63 characters of a-z, 0-9 and '-', starting with a letter"),
        );
    }
    if !seen.insert(name) {
        e.push(
            format!("{field}.name"),
            format!("{kind} {name:?} is defined twice"),
        );
    }
}

/// Does the path `p` hold a NUL byte (which no system call takes)? Shared by every path field.
pub(super) fn has_nul(p: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    p.as_os_str().as_bytes().contains(&0)
}

/// A DNS-label-like name: it becomes a metrics label and, in the operator, part of object names.
pub(crate) fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && !s.ends_with('-')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}
