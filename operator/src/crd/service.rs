//! The Service, the PodDisruptionBudget and the metrics listener with its optional
//! ServiceMonitor. API shape only.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The client-facing Service.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// Service port (targets the container's http port).
    #[serde(default = "default_service_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// IP families of the Services (client, metrics, headless): `PreferDualStack` or
    /// `RequireDualStack` for both families in a dual-stack cluster; unset leaves the
    /// cluster's default (one family). The pods listen on both whatever it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_family_policy: Option<IpFamilyPolicy>,
}

/// Service `ipFamilyPolicy` (Kubernetes' values).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum IpFamilyPolicy {
    SingleStack,
    PreferDualStack,
    RequireDualStack,
}

impl IpFamilyPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            IpFamilyPolicy::SingleStack => "SingleStack",
            IpFamilyPolicy::PreferDualStack => "PreferDualStack",
            IpFamilyPolicy::RequireDualStack => "RequireDualStack",
        }
    }
}

/// Service type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

impl ServiceType {
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }

    /// Published outside the cluster (NodePort, LoadBalancer): the client Service then carries
    /// only the `http` port, and the metrics port has a ClusterIP Service of its own.
    pub fn published(self) -> bool {
        !matches!(self, ServiceType::ClusterIP)
    }
}

/// A percentage from 0% to 100% (what `validation.rs` takes as a string maxUnavailable).
pub const PERCENT_PATTERN: &str = "^0*(100|[1-9]?[0-9])%$";

/// PodDisruptionBudget settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PdbSpec {
    /// Pods that may be voluntarily disrupted at once (number or percentage). The bounds apply
    /// to a number (an i32: the operator could not read a larger one), the pattern to a string.
    // Not nullable: a null is pruned and defaulted by the API server (kept, it would be an
    // object the operator cannot read).
    #[serde(default = "default_max_unavailable")]
    #[schemars(extend(
        "minimum" = 0,
        "maximum" = i32::MAX,
        "pattern" = PERCENT_PATTERN,
        "nullable" = false
    ))]
    pub max_unavailable: IntOrString,
}

/// Metrics and admin listener.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricsSpec {
    /// Admin port (/metrics, /healthz, /readyz), bound on every address (IPv4 and IPv6) so
    /// kubelet probes reach it.
    #[serde(default = "default_metrics_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    #[serde(default)]
    pub service_monitor: ServiceMonitorSpec,
}

/// Prometheus Operator ServiceMonitor.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceMonitorSpec {
    /// Create a ServiceMonitor (only when its CRD is installed).
    pub enabled: bool,
    /// Labels on the ServiceMonitor (to match the Prometheus selector).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Scrape interval such as `30s` (a Prometheus duration: the Prometheus Operator's own
    /// pattern, so a value it would refuse is refused here, not when the ServiceMonitor is applied).
    #[schemars(regex(
        pattern = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
    ))]
    pub interval: Option<String>,
}

fn default_service_port() -> i32 {
    80
}
fn default_max_unavailable() -> IntOrString {
    IntOrString::Int(1)
}
fn default_metrics_port() -> i32 {
    9190
}

impl Default for ServiceSpec {
    fn default() -> Self {
        ServiceSpec {
            type_: ServiceType::default(),
            port: default_service_port(),
            annotations: BTreeMap::new(),
            ip_family_policy: None,
        }
    }
}
impl Default for PdbSpec {
    fn default() -> Self {
        PdbSpec {
            max_unavailable: default_max_unavailable(),
        }
    }
}
impl Default for MetricsSpec {
    fn default() -> Self {
        MetricsSpec {
            port: default_metrics_port(),
            service_monitor: ServiceMonitorSpec::default(),
        }
    }
}
