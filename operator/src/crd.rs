//! The `ContentServer` custom resource (`contentserver.dev/v1alpha1`): spec and status types, the
//! schema defaults and the CEL validation rules the apiserver enforces.
//!
//! Owns the API shape only. It must not render anything (see `builders/`) nor re-define the
//! server's configuration format: the server-side knobs here are mapped onto
//! `content_server::config::Config` by `builders::configmap`, and the server's own defaults
//! (`DEFAULT_THREADS`, `DEFAULT_MAX_QUEUE`, ...) are reused as the CRD defaults.
//!
//! The same rules are re-checked by `validation.rs`, because a CRD can be installed without CEL
//! support (or edited by hand).

use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, PodSecurityContext, ResourceRequirements, Toleration,
    TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// API group of the resource.
pub const GROUP: &str = "contentserver.dev";
/// Image used when `spec.image` is not set.
pub const DEFAULT_IMAGE: &str = "ghcr.io/content-platform/content-server:0.1.0";
/// Longest volume name: pod volumes are named `vol-<name>`, which must stay a 63-char DNS label.
pub const MAX_VOLUME_NAME: usize = 59;

/// A content server: N identical pods, each mounting the listed volumes and serving them with one
/// bounded thread pool per volume.
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
    printcolumn = r#"{"name": "Status", "type": "string", "jsonPath": ".status.phase", "description": "Ready, Progressing, Degraded, Invalid or Paused"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
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
        "rule": "!has(self.metrics) || !has(self.metrics.port) || !has(self.server) || !has(self.server.port) || self.metrics.port != self.server.port",
        "message": "metrics.port must differ from server.port",
        "fieldPath": ".metrics.port"
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
    /// Allow `hostPath` volume sources (off: a hostPath exposes the node's filesystem).
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
    /// Stop reconciling: children are left exactly as they are.
    #[serde(default)]
    pub paused: bool,
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

/// A mounted volume and its thread pool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSpec {
    /// Unique name: the server's volume and pool name (metrics label `volume`).
    #[schemars(
        length(min = 1, max = 59),
        regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// Absolute mount path in the container (default `/srv/content/<name>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 4096), regex(pattern = r"^/"))]
    pub mount_path: Option<String>,
    /// Mount read-only (the server only reads).
    #[serde(default = "default_true")]
    pub read_only: bool,
    /// Where the data comes from: exactly one source.
    pub source: VolumeSource,
    /// The volume's bounded thread pool.
    #[serde(default)]
    pub pool: PoolSpec,
}

/// Exactly one of the fields.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "[has(self.persistentVolumeClaim), has(self.claimTemplate), has(self.emptyDir), has(self.hostPath)].filter(x, x).size() == 1",
    "message": "set exactly one of persistentVolumeClaim, claimTemplate, emptyDir, hostPath"
}]))]
pub struct VolumeSource {
    /// An existing PersistentVolumeClaim shared by all pods (ReadOnlyMany for replicas > 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PvcSource>,
    /// A claim per pod (turns the workload into a StatefulSet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_template: Option<ClaimTemplateSource>,
    /// Scratch space living as long as the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_dir: Option<EmptyDirSource>,
    /// A directory of the node (needs spec.allowHostPath).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<HostPathSource>,
}

/// An existing claim.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PvcSource {
    /// Name of the PersistentVolumeClaim in the ContentServer's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub claim_name: String,
}

/// A per-pod claim (StatefulSet volumeClaimTemplate). Immutable once created: a change replaces
/// the StatefulSet with orphaning deletion (pods keep serving, existing claims are kept).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimTemplateSource {
    /// StorageClass; unset uses the cluster default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Requested size, a Kubernetes quantity such as `500Gi`.
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"))]
    pub size: String,
    /// Access modes of each claim.
    #[serde(default = "default_access_modes")]
    #[schemars(length(min = 1, max = 4))]
    pub access_modes: Vec<AccessMode>,
}

/// PersistentVolume access mode.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum AccessMode {
    ReadWriteOnce,
    ReadOnlyMany,
    ReadWriteMany,
    ReadWriteOncePod,
}

impl AccessMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::ReadWriteOnce => "ReadWriteOnce",
            AccessMode::ReadOnlyMany => "ReadOnlyMany",
            AccessMode::ReadWriteMany => "ReadWriteMany",
            AccessMode::ReadWriteOncePod => "ReadWriteOncePod",
        }
    }
}

/// An emptyDir.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmptyDirSource {
    /// Size limit, a quantity such as `1Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"))]
    pub size_limit: Option<String>,
    /// Storage medium: `Memory` for tmpfs, unset for the node's disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub medium: Option<EmptyDirMedium>,
}

/// emptyDir medium.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum EmptyDirMedium {
    Memory,
}

/// A node directory.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostPathSource {
    /// Absolute path on the node.
    #[schemars(regex(pattern = r"^/"))]
    pub path: String,
    /// hostPath type, e.g. `Directory`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// A volume's bounded thread pool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolSpec {
    /// Worker threads.
    #[serde(default = "default_threads")]
    #[schemars(range(min = 1, max = 4096))]
    pub threads: u32,
    /// Tasks allowed to wait beyond the busy threads; excess gets 503.
    #[serde(default = "default_max_queue")]
    #[schemars(range(min = 0, max = 16777216))]
    pub max_queue: u32,
    /// Where blocking file work runs: auto (page-cache hits inline, misses to the pool; the default),
    /// always (everything on the pool), never (inline; a baseline).
    #[serde(default)]
    pub offload: OffloadMode,
}

/// Offload mode: the server's own type (one definition), serialized `always|never|auto`.
pub use content_server::config::Offload as OffloadMode;

/// A URI prefix served by one volume or spread over several.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.volume) != (has(self.split) && size(self.split) > 0)",
        "message": "set exactly one of volume and split"
    },
    {
        "rule": "!has(self.split) || self.split.map(t, has(t.percent) ? double(t.percent) : 0.0).sum() <= 100.0",
        "message": "split percentages must add up to at most 100",
        "fieldPath": ".split"
    },
    {
        "rule": "!has(self.split) || self.split.filter(t, !has(t.percent)).size() == 0 || (self.split.filter(t, !has(t.percent)).size() == 1 && !has(self.split[size(self.split) - 1].percent))",
        "message": "only the last split target may omit percent (it takes the rest)",
        "fieldPath": ".split"
    }
]))]
pub struct RouteSpec {
    /// URI path prefix starting with `/`; the longest match wins.
    #[schemars(length(min = 1, max = 1024), regex(pattern = r"^/"))]
    pub prefix: String,
    /// Serve the prefix from this volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    /// Spread the prefix over volumes by a stable hash of the URI path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub split: Vec<SplitTargetSpec>,
    /// Remove the prefix before the lookup in the volume.
    #[serde(default)]
    pub strip_prefix: bool,
    /// Response headers, CORS, precompressed siblings and listings of this route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<crate::crd_http::RouteHttpSpec>,
}

/// One share of a split.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SplitTargetSpec {
    /// Volume name.
    #[schemars(length(min = 1, max = 59))]
    pub volume: String,
    /// Share in percent (0 < percent <= 100); omit on the last target to take the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0001, max = 100))]
    pub percent: Option<f64>,
}

/// Server tuning (maps onto the server's config file).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerSpec {
    /// HTTP port of the container.
    #[serde(default = "default_http_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// listen(2) backlog (capped by the node's net.core.somaxconn).
    #[serde(default = "default_backlog")]
    #[schemars(range(min = 1))]
    pub backlog: u32,
    /// Event-loop workers; 0 = one per CPU the container sees.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1024))]
    pub workers: u32,
    /// Connection and request limits.
    #[serde(default)]
    pub limits: LimitsSpec,
    /// Largest single sendfile/read chunk in bytes.
    #[serde(default = "default_sendfile_max_chunk")]
    #[schemars(range(min = 4096, max = 1073741824))]
    pub sendfile_max_chunk: u64,
    /// One log line per response.
    #[serde(default)]
    pub access_log: bool,
    /// Log format.
    #[serde(default)]
    pub log_format: LogFormatSpec,
    /// Log filter such as `info`.
    #[serde(default = "default_log_level")]
    pub log_level: String,
    /// Index files tried for directory requests.
    #[serde(default = "default_index")]
    #[schemars(length(max = 16))]
    pub index: Vec<String>,
    /// Seconds in-flight responses may take after SIGTERM (the pod's grace period is longer).
    #[serde(default = "default_shutdown_timeout_secs")]
    #[schemars(range(min = 1, max = 3600))]
    pub shutdown_timeout_secs: u32,
    /// Ranges, ETags, listings, media types and headers by media type.
    #[serde(flatten)]
    pub http: crate::crd_http::ServerHttpSpec,
}

/// Log format.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormatSpec {
    #[default]
    Text,
    Json,
}

/// Connection and request limits.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LimitsSpec {
    /// Open client connections per pod.
    #[serde(default = "default_max_connections")]
    #[schemars(range(min = 1))]
    pub max_connections: u32,
    /// Idle keep-alive timeout.
    #[serde(default = "default_keepalive_timeout_secs")]
    #[schemars(range(min = 1))]
    pub keepalive_timeout_secs: u32,
    /// Time to receive a request head.
    #[serde(default = "default_header_read_timeout_secs")]
    #[schemars(range(min = 1))]
    pub header_read_timeout_secs: u32,
    /// Largest request head in bytes.
    #[serde(default = "default_max_header_bytes")]
    #[schemars(range(min = 256, max = 1048576))]
    pub max_header_bytes: u32,
    /// Time a response may wait for the client to accept bytes.
    #[serde(default = "default_send_timeout_secs")]
    #[schemars(range(min = 1))]
    pub send_timeout_secs: u32,
}

/// Scheduling constraints copied onto the pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingSpec {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

/// Pod-level overrides.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecOverrides {
    /// Extra pod labels (the selector labels always win).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra pod annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Replaces the default pod security context (non-root uid 65532, seccomp RuntimeDefault).
    /// Sysctls such as net.core.somaxconn go here (the node must allow them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    /// Service account of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
}

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
}

/// PodDisruptionBudget settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PdbSpec {
    /// Pods that may be voluntarily disrupted at once (number or percentage).
    #[serde(default = "default_max_unavailable")]
    pub max_unavailable: IntOrString,
}

/// Metrics and admin listener.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricsSpec {
    /// Admin port (/metrics, /healthz, /readyz) bound on 0.0.0.0 so kubelet probes reach it.
    #[serde(default = "default_metrics_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    #[serde(default)]
    pub service_monitor: ServiceMonitorSpec,
}

/// Prometheus Operator ServiceMonitor.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceMonitorSpec {
    /// Create a ServiceMonitor (only when its CRD is installed).
    #[serde(default)]
    pub enabled: bool,
    /// Labels on the ServiceMonitor (to match the Prometheus selector).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Scrape interval such as `30s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
}

/// Observed state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContentServerStatus {
    /// The generation last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods of the workload (scale subresource status.replicas).
    #[serde(default)]
    pub replicas: i32,
    /// Ready pods.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Label selector of the pods (scale subresource, for HPAs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Hash of the rendered server config (the pod template's config-hash annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// Number of volumes.
    #[serde(default)]
    pub volumes: i32,
    /// Ready, Progressing, Degraded, Invalid or Paused (the Status printer column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Available, Progressing, Degraded and Reconciled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
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
fn default_true() -> bool {
    true
}
fn default_access_modes() -> Vec<AccessMode> {
    vec![AccessMode::ReadWriteOnce]
}
fn default_threads() -> u32 {
    content_server::config::DEFAULT_THREADS as u32
}
fn default_max_queue() -> u32 {
    content_server::config::DEFAULT_MAX_QUEUE as u32
}
fn default_http_port() -> i32 {
    8080
}
fn default_backlog() -> u32 {
    content_server::config::Listener::default().backlog
}
fn default_sendfile_max_chunk() -> u64 {
    content_server::config::Limits::default().sendfile_max_chunk as u64
}
fn default_log_level() -> String {
    content_server::config::Logging::default().level
}
fn default_index() -> Vec<String> {
    content_server::config::Http::default().index
}
fn default_shutdown_timeout_secs() -> u32 {
    content_server::config::Config::for_root("/").shutdown_timeout_secs as u32
}
fn default_max_connections() -> u32 {
    content_server::config::Limits::default().max_connections as u32
}
fn default_keepalive_timeout_secs() -> u32 {
    content_server::config::Limits::default().keepalive_timeout_secs as u32
}
fn default_header_read_timeout_secs() -> u32 {
    content_server::config::Limits::default().header_read_timeout_secs as u32
}
fn default_max_header_bytes() -> u32 {
    content_server::config::Limits::default().max_header_bytes as u32
}
fn default_send_timeout_secs() -> u32 {
    content_server::config::Limits::default().send_timeout_secs as u32
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

impl Default for PoolSpec {
    fn default() -> Self {
        PoolSpec {
            threads: default_threads(),
            max_queue: default_max_queue(),
            offload: OffloadMode::default(),
        }
    }
}
impl Default for ServerSpec {
    fn default() -> Self {
        ServerSpec {
            port: default_http_port(),
            backlog: default_backlog(),
            workers: 0,
            limits: LimitsSpec::default(),
            sendfile_max_chunk: default_sendfile_max_chunk(),
            access_log: false,
            log_format: LogFormatSpec::default(),
            log_level: default_log_level(),
            index: default_index(),
            shutdown_timeout_secs: default_shutdown_timeout_secs(),
            http: Default::default(),
        }
    }
}
impl Default for LimitsSpec {
    fn default() -> Self {
        LimitsSpec {
            max_connections: default_max_connections(),
            keepalive_timeout_secs: default_keepalive_timeout_secs(),
            header_read_timeout_secs: default_header_read_timeout_secs(),
            max_header_bytes: default_max_header_bytes(),
            send_timeout_secs: default_send_timeout_secs(),
        }
    }
}
impl Default for ServiceSpec {
    fn default() -> Self {
        ServiceSpec {
            type_: ServiceType::default(),
            port: default_service_port(),
            annotations: BTreeMap::new(),
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
