//! What every connection shares: the validated configuration, the metrics, the lifecycle (drain
//! state and connection count), the router, the run-time volumes and the caches of the cache
//! volumes and routes. Built once by
//! [`crate::runtime`] and handed to each worker behind an `Arc`.
//!
//! Owns nothing but the bundle; it must not start anything or handle requests.

use crate::config::Config;
use crate::http::plan::Policy;
use crate::lifecycle::Lifecycle;
use crate::metrics::Metrics;
use crate::resolve::Router;
use crate::volume::Volume;
use std::sync::Arc;

/// Everything a connection needs, shared by all workers.
pub struct Shared {
    pub config: Config,
    pub metrics: Metrics,
    pub lifecycle: Arc<Lifecycle>,
    pub router: Router,
    /// Response policy of every route (headers, CORS, ranges, siblings, listings).
    pub http: Policy,
    /// Same order as `config.volumes`.
    pub volumes: Vec<Volume>,
    /// The cache of each cache volume (same order as `config.volumes`; None = static volume).
    pub caches: Vec<Option<Arc<crate::cache::volume::CacheVolume<crate::cache::fill::Fill>>>>,
    /// Each cache route's origin and policy (same order as `config.routes`; None = static).
    pub cache_routes: Vec<Option<crate::cache::serve::CacheRoute>>,
}
