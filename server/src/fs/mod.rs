//! File access beneath a volume root: resolving, opening, stat, reads. Runs wherever the caller
//! puts it (a pool thread or, for `never`/`auto` hits, the event loop); it never decides that.

pub mod cache;
pub mod nowait;
