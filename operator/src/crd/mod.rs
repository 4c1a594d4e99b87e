//! The `ContentServer` custom resource (`contentserver.dev/v1alpha1`): spec and status types, the
//! schema defaults, the CEL validation rules the apiserver enforces and the integer bounds of
//! every field (`bounds.rs`).
//!
//! Owns the API shape only. It must not render anything (see `builders/`) nor re-define the
//! server's configuration format: the server-side knobs here are mapped onto
//! `content_server::config::Config` by `builders::configmap`, and the server's own defaults
//! (`DEFAULT_THREADS`, `DEFAULT_MAX_QUEUE`, ...) are reused as the CRD defaults.
//!
//! The same rules are re-checked by `validation.rs`, because a CRD can be installed without CEL
//! support (or edited by hand).

mod autoscaling;
pub mod bounds;
mod cache;
mod expose;
mod http;
mod pod;
mod routes;
mod server;
mod service;
mod status;
mod volumes;

pub use autoscaling::*;
pub use cache::*;
pub use expose::*;
pub use http::*;
pub use pod::*;
pub use routes::*;
pub use server::*;
pub use service::*;
pub use status::*;
pub use volumes::*;

use k8s_openapi::api::core::v1::{LocalObjectReference, ResourceRequirements};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of the resource.
pub const GROUP: &str = "contentserver.dev";
/// Image used when `spec.image` is not set.
pub const DEFAULT_IMAGE: &str = "ghcr.io/content-platform/content-server:0.1.0";
/// Longest volume name: pod volumes are named `vol-<name>`, which must stay a 63-char DNS label.
pub const MAX_VOLUME_NAME: usize = 59;

/// A content server: N identical pods, each mounting the listed volumes and serving them with one
/// bounded thread pool per volume.
#[serde_with::skip_serializing_none]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "contentserver.dev",
    version = "v1alpha1",
    kind = "ContentServer",
    namespaced,
    shortname = "csrv",
    category = "content",
    status = "ContentServerStatus",
    derive = "PartialEq",
    doc = "A static content server with one bounded thread pool per mounted volume.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas", "description": "Pods wanted"}"#,
    printcolumn = r#"{"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas", "description": "Pods ready"}"#,
    printcolumn = r#"{"name": "Volumes", "type": "integer", "jsonPath": ".status.volumes", "description": "Mounted volumes"}"#,
    printcolumn = r#"{"name": "Status", "type": "string", "jsonPath": ".status.phase", "description": "Ready, Progressing, Degraded, Unavailable, Invalid, Paused or Error"}"#,
    printcolumn = r#"{"name": "Hosts", "type": "string", "jsonPath": ".status.hostnames", "description": "External host names (HTTPRoute, Ingress)"}"#,
    printcolumn = r#"{"name": "URL", "type": "string", "jsonPath": ".status.url", "description": "In-cluster URL of the Service", "priority": 1}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = bounds::integer_bounds)]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.volumes.all(v, self.volumes.exists_one(w, w.name == v.name))",
        "message": "volume names must be unique",
        "fieldPath": ".volumes",
        "reason": "FieldValueDuplicate"
    },
    {
        "rule": "!has(self.routes) || self.routes.all(r, (!has(r.volume) || self.volumes.exists(v, v.name == r.volume)) && (!has(r.split) || r.split.all(t, self.volumes.exists(v, v.name == t.volume))))",
        "message": "every route must name volumes listed in spec.volumes",
        "fieldPath": ".routes"
    },
    {
        "rule": "size(self.volumes) <= 1 || (has(self.routes) && size(self.routes) > 0)",
        "message": "with more than one volume, routes must say which prefix each volume serves",
        "fieldPath": ".routes",
        "reason": "FieldValueRequired"
    },
    {
        "rule": "(has(self.allowHostPath) && self.allowHostPath) || self.volumes.all(v, !has(v.source.hostPath))",
        "message": "hostPath volumes require spec.allowHostPath: true",
        "fieldPath": ".volumes",
        "reason": "FieldValueForbidden"
    },
    {
        "rule": "!has(self.metrics) || !has(self.metrics.port) || !has(self.service) || !has(self.service.port) || (has(self.service.type) && self.service.type != 'ClusterIP') || self.metrics.port != self.service.port",
        "message": "service.port must differ from metrics.port: a ClusterIP Service exposes both",
        "fieldPath": ".service.port",
        "reason": "FieldValueDuplicate"
    },
    {
        "rule": "!has(self.metrics) || !has(self.metrics.port) || !has(self.server) || !has(self.server.port) || self.metrics.port != self.server.port",
        "message": "metrics.port must differ from server.port",
        "fieldPath": ".metrics.port"
    },
    {
        "rule": "has(self.origin) || !has(self.routes) || self.routes.all(r, !has(r.cache))",
        "message": "a route with cache needs spec.origin",
        "fieldPath": ".routes",
        "reason": "FieldValueRequired"
    },
    {
        "rule": "!has(self.routes) || self.routes.all(r, !has(r.cache) || ((!has(r.volume) || self.volumes.exists(v, v.name == r.volume && has(v.cache))) && (!has(r.split) || r.split.all(t, self.volumes.exists(v, v.name == t.volume && has(v.cache))))))",
        "message": "a route with cache must use only volumes with cache",
        "fieldPath": ".routes"
    },
    {
        "rule": "!has(self.routes) || self.routes.all(r, has(r.cache) || ((!has(r.volume) || !self.volumes.exists(v, v.name == r.volume && has(v.cache))) && (!has(r.split) || !r.split.exists(t, self.volumes.exists(v, v.name == t.volume && has(v.cache))))))",
        "message": "a volume with cache may only be used by routes with cache",
        "fieldPath": ".routes"
    },
    {
        "rule": "!has(self.replicas) || self.replicas <= 1 || !self.volumes.exists(v, has(v.cache) && has(v.source.persistentVolumeClaim))",
        "message": "replicas must be at most 1 while a cache volume is an existing persistentVolumeClaim: every pod mounts that claim and only one server may use a cache directory (use claimTemplate for a cache per pod)",
        "fieldPath": ".replicas",
        "reason": "FieldValueForbidden"
    },
    {
        "rule": "!has(self.autoscaling) || self.autoscaling.maxReplicas <= 1 || !self.volumes.exists(v, has(v.cache) && has(v.source.persistentVolumeClaim))",
        "message": "autoscaling.maxReplicas must be at most 1 while a cache volume is an existing persistentVolumeClaim: every pod mounts that claim and only one server may use a cache directory (use claimTemplate for a cache per pod)",
        "fieldPath": ".autoscaling.maxReplicas",
        "reason": "FieldValueForbidden"
    },
    {
        "rule": "!has(self.autoscaling) || !has(self.autoscaling.targetCPUUtilization) || (has(self.resources) && (has(self.resources.requests) && 'cpu' in self.resources.requests ? string(self.resources.requests.cpu).matches('[1-9]') : has(self.resources.limits) && 'cpu' in self.resources.limits && string(self.resources.limits.cpu).matches('[1-9]')))",
        "message": "autoscaling.targetCPUUtilization needs resources.requests.cpu above 0 (or resources.limits.cpu, which the request defaults to): the HPA measures CPU utilization against the request and, while that metric is missing, does not scale down",
        "fieldPath": ".autoscaling.targetCPUUtilization"
    }
]))]
pub struct ContentServerSpec {
    /// Number of serving pods (the scale subresource's spec.replicas).
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// Container image of content-server.
    #[serde(default = "default_image")]
    #[schemars(length(min = 1))]
    pub image: String,
    /// Image pull policy.
    #[serde(default)]
    pub image_pull_policy: PullPolicy,
    /// Secrets for pulling the image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Mounted volumes, one thread pool each (one per disk is the intended layout).
    #[schemars(length(min = 1, max = 32))]
    pub volumes: Vec<VolumeSpec>,
    /// Allow `hostPath` volume sources (off: a hostPath exposes the node's filesystem). The
    /// operator must allow them too (its `--allow-host-path`, the chart's `allowHostPath`).
    #[serde(default)]
    pub allow_host_path: bool,
    /// URI prefix -> volume or weighted split. May be empty with exactly one volume (`/` -> it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub routes: Vec<RouteSpec>,
    /// Server tuning.
    #[serde(default)]
    pub server: ServerSpec,
    /// Compute resources of the server container.
    pub resources: Option<ResourceRequirements>,
    /// Where pods may run.
    #[serde(default)]
    pub scheduling: SchedulingSpec,
    /// Pod metadata, security context and service account overrides.
    #[serde(default)]
    pub pod: PodSpecOverrides,
    /// The Service in front of the pods.
    #[serde(default)]
    pub service: ServiceSpec,
    /// PodDisruptionBudget (created when replicas > 1).
    #[serde(default)]
    pub pdb: PdbSpec,
    /// Admin/metrics listener and Prometheus Operator integration.
    #[serde(default)]
    pub metrics: MetricsSpec,
    /// An owned HorizontalPodAutoscaler scaling this ContentServer on pool saturation. It sets
    /// spec.replicas through the scale subresource: leave spec.replicas out of your manifests.
    pub autoscaling: Option<AutoscalingSpec>,
    /// HTTPRoute and/or Ingress in front of the Service.
    pub expose: Option<ExposeSpec>,
    /// A NetworkPolicy guarding the admin/metrics port.
    pub network_policy: Option<NetworkPolicySpec>,
    /// Stop reconciling: children are left exactly as they are.
    #[serde(default)]
    pub paused: bool,
    /// The origin that routes with `cache` fetch misses from (a caching node).
    pub origin: Option<OriginSpec>,
    /// Token enabling cache purges on the admin port.
    pub purge_token: Option<PurgeTokenSpec>,
}

/// Image pull policy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PullPolicy {
    Always,
    #[default]
    IfNotPresent,
    Never,
}

impl PullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

impl ContentServerSpec {
    /// The mount path of a volume: `mountPath`, or `/srv/content/<name>`.
    pub fn mount_path(v: &VolumeSpec) -> String {
        v.mount_path
            .clone()
            .unwrap_or_else(|| format!("/srv/content/{}", v.name))
    }

    /// True when any volume needs a per-pod claim (the workload is a StatefulSet).
    pub fn uses_claim_templates(&self) -> bool {
        self.volumes
            .iter()
            .any(|v| v.source.claim_template.is_some())
    }
}

fn default_replicas() -> i32 {
    1
}
fn default_image() -> String {
    DEFAULT_IMAGE.into()
}
pub(crate) fn default_true() -> bool {
    true
}
