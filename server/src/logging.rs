//! Log output via tracing: text or JSON lines on stderr, level from `logging.level` unless
//! RUST_LOG is set. Access lines use the target `access` (only when `logging.access_log`).
//! Owns only the subscriber set-up; what is logged, and when, is decided where it happens.

use crate::config::{LogFormat, Logging};
use tracing_subscriber::EnvFilter;

/// Install the global subscriber (once; later calls are ignored).
pub fn init(cfg: &Logging) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&cfg.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let _ = match cfg.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
