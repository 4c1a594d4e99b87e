//! Test configurations made of the server's own types (`content_server::config`), so a test
//! config cannot drift from what the server parses: start from [`config`] and struct-update it,
//! `Config { volumes: vec![volume("v", dir)], ..config(1) }`, or mutate its public fields.
//! [`Server::start`](super::Server::start) renders it with `Config::to_toml()`.
//!
//! Values are taken from the server's defaults and then changed, never written out whole, so
//! fields added to the config types later need no change here.

use std::path::Path;

pub use content_server::config::{Config, LogFormat, Offload, Route, SplitTarget, Volume};

/// The base of a test configuration: one listener on 127.0.0.1 with a kernel-chosen port, the
/// admin listener on 127.0.0.1 with a kernel-chosen port, `workers` event loops, and no volumes
/// yet (add them; with exactly one volume the implicit `/` route applies).
pub fn config(workers: usize) -> Config {
    let mut c = Config::for_root("/");
    c.volumes.clear();
    c.workers = workers;
    c.listeners[0].address = "127.0.0.1".into();
    c.listeners[0].port = 0;
    c.admin.listen = "127.0.0.1:0".into();
    c
}

/// [`config`] with the one volume `v` (served at `/` by the implicit route).
pub fn one_volume(workers: usize, v: Volume) -> Config {
    Config {
        volumes: vec![v],
        ..config(workers)
    }
}

/// A volume `name` serving `path`, with the default offload mode and pool.
pub fn volume(name: &str, path: &Path) -> Volume {
    let mut v = Config::for_root(path).volumes.remove(0);
    v.name = name.into();
    v
}

/// Chained settings of a [`Volume`]: `volume("v", dir).offload(Offload::Never).pool(1, 0)`.
pub trait VolumeExt {
    fn offload(self, offload: Offload) -> Self;
    /// The volume's pool: `threads` and `max_queue`.
    fn pool(self, threads: usize, max_queue: usize) -> Self;
}

impl VolumeExt for Volume {
    fn offload(mut self, offload: Offload) -> Self {
        self.offload = offload;
        self
    }
    fn pool(mut self, threads: usize, max_queue: usize) -> Self {
        self.pool.threads = threads;
        self.pool.max_queue = max_queue;
        self
    }
}

/// `prefix` -> `volume` (the whole URI path looked up under the volume root).
pub fn route(prefix: &str, volume: &str) -> Route {
    let mut c = Config::for_root("/");
    c.normalize();
    let mut r = c.routes.remove(0);
    r.prefix = prefix.into();
    r.volume = Some(volume.into());
    r
}

/// `prefix` split over volumes by the stable path hash: `(volume, percent)`, `None` = the rest.
pub fn split_route(prefix: &str, shares: &[(&str, Option<f64>)]) -> Route {
    let mut r = route(prefix, "");
    r.volume = None;
    r.split = shares
        .iter()
        .map(|&(volume, percent)| SplitTarget {
            volume: volume.into(),
            percent,
        })
        .collect();
    r
}

/// Chained settings of a [`Route`].
pub trait RouteExt {
    /// Remove the prefix before the lookup in the volume (nginx `alias`).
    fn strip_prefix(self) -> Self;
}

impl RouteExt for Route {
    fn strip_prefix(mut self) -> Self {
        self.strip_prefix = true;
        self
    }
}

/// One route `/NAME` (prefix stripped) per volume: each volume's files under its own name.
pub fn route_per_volume(volumes: &[Volume]) -> Vec<Route> {
    volumes
        .iter()
        .map(|v| route(&format!("/{}", v.name), &v.name).strip_prefix())
        .collect()
}
