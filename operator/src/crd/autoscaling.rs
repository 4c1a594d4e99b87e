//! `spec.autoscaling`: the HorizontalPodAutoscaler the operator owns, scaling the ContentServer
//! (its scale subresource) on pool saturation. API shape only; the HPA is built by
//! `builders::hpa`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Scale on the busiest volume's pool utilization (and optionally CPU).
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",
    "message": "minReplicas must not exceed maxReplicas",
    "fieldPath": ".minReplicas"
}]))]
pub struct AutoscalingSpec {
    /// Fewest pods the autoscaler keeps.
    #[serde(default = "default_min_replicas")]
    #[schemars(range(min = 1, max = 10000))]
    pub min_replicas: i32,
    /// Most pods the autoscaler may run.
    #[schemars(range(min = 1, max = 10000))]
    pub max_replicas: i32,
    /// Target utilization of the busiest volume's thread pool, in percent (busy thread-seconds
    /// per second over threads, averaged over pods). At most 85: the metric cannot exceed 1 (every
    /// thread busy) and the HPA scales up only above 1.1 x its target, so a higher target would
    /// never scale up.
    #[serde(default = "default_target_pool_utilization")]
    #[schemars(range(min = 1, max = 85))]
    pub target_pool_utilization: i32,
    /// Optional CPU target in percent of the container's CPU request: needs
    /// spec.resources.requests.cpu (or limits.cpu, which the request defaults to) above 0, as
    /// the HPA cannot compute the utilization otherwise (and then does not scale down).
    #[serde(rename = "targetCPUUtilization")]
    #[schemars(range(min = 1, max = 100))]
    pub target_cpu_utilization: Option<i32>,
    /// How long the recommendation must stay lower before pods are removed (warm page caches
    /// are expensive to rebuild). The HPA allows at most 3600.
    #[serde(default = "default_scale_down_stabilization_seconds")]
    #[schemars(range(min = 0, max = 3600))]
    pub scale_down_stabilization_seconds: i32,
}

fn default_min_replicas() -> i32 {
    1
}
fn default_target_pool_utilization() -> i32 {
    70
}
fn default_scale_down_stabilization_seconds() -> i32 {
    1800
}
