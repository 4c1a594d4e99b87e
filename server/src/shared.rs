//! What every connection shares: the validated configuration, the metrics, the lifecycle (drain
//! state and connection count), the router and the run-time volumes. Built once by
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
}
