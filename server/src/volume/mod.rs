//! A mounted volume at run time: its name, an O_PATH descriptor of its root (every open is
//! resolved beneath it), its offload mode and its thread pool.
//!
//! Owns opening the root once at start; it must not serve requests itself.

use crate::config::{self, Offload};
use crate::metrics::Metrics;
use crate::pool::Pool;
use anyhow::Context;
use rustix::fs::{Mode, OFlags};
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// One volume, shared by every worker.
pub struct Volume {
    pub name: String,
    pub root: Arc<OwnedFd>,
    pub offload: Offload,
    pub pool: Pool,
    /// Index file names tried for directories (from `http.index`).
    pub index: Arc<[String]>,
    /// Largest sendfile chunk (`limits.sendfile_max_chunk`).
    pub max_chunk: usize,
    /// Open-file cache and, for `offload = auto`, the page-cache-only fast path.
    pub hot: crate::fs::hot::HotPath,
}

impl Volume {
    /// Open the root directory and start the pool.
    pub fn start(
        v: &config::Volume,
        cfg: &config::Config,
        metrics: &Metrics,
    ) -> anyhow::Result<Volume> {
        let root = rustix::fs::open(
            &v.path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .with_context(|| {
            format!(
                "volume {:?}: cannot open directory {}",
                v.name,
                v.path.display()
            )
        })?;
        let pool = Pool::start(&v.name, v.pool.threads, v.pool.max_queue, metrics)
            .with_context(|| format!("volume {:?}: cannot start thread pool", v.name))?;
        let hot = crate::fs::hot::HotPath::start(
            &v.name,
            std::os::fd::AsFd::as_fd(&root),
            v.offload,
            cfg,
            metrics,
        );
        Ok(Volume {
            hot,
            name: v.name.clone(),
            root: Arc::new(root),
            offload: v.offload,
            pool,
            index: cfg.http.index.clone().into(),
            max_chunk: cfg.limits.sendfile_max_chunk,
        })
    }
}
