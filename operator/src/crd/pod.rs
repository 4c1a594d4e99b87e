//! Pod placement and pod-level overrides. API shape only.

use k8s_openapi::api::core::v1::{
    Affinity, PodSecurityContext, Toleration, TopologySpreadConstraint,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Scheduling constraints copied onto the pod.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct SchedulingSpec {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    pub affinity: Option<Affinity>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub tolerations: Vec<Toleration>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    pub priority_class_name: Option<String>,
}

/// Pod-level overrides.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSpecOverrides {
    /// Extra pod labels (the selector labels always win).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra pod annotations.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Replaces the default pod security context (non-root uid 65532, seccomp RuntimeDefault,
    /// fsGroup 65532 with fsGroupChangePolicy OnRootMismatch, and for a port below 1024 the
    /// sysctl net.ipv4.ip_unprivileged_port_start, which a context of your own must then carry).
    /// Sysctls such as net.core.somaxconn go here (the node must allow them).
    pub security_context: Option<PodSecurityContext>,
    /// Service account of the pods.
    pub service_account_name: Option<String>,
}
