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
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid TOML: {0}")]
    Parse(String),
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
