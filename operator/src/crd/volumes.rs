//! Volumes of a ContentServer: where each one's data comes from (exactly one source) and its
//! bounded thread pool. API shape only.

use super::{default_true, PullPolicy, VolumeCacheSpec, QUANTITY_PATTERN};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A mounted volume and its thread pool.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.cache) || !has(self.source.image)",
    "message": "a cache volume is written by the server: an image volume is read-only",
    "fieldPath": ".cache",
    "reason": "FieldValueForbidden"
}]))]
pub struct VolumeSpec {
    /// Unique name: the server's volume and pool name (metrics label `volume`).
    #[schemars(
        length(min = 1, max = 59),
        regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// Absolute mount path in the container (default `/srv/content/<name>`).
    #[schemars(length(min = 2, max = 4096), regex(pattern = r"^/"))]
    pub mount_path: Option<String>,
    /// Mount read-only (the server only reads; image volumes are always read-only).
    #[serde(default = "default_true")]
    pub read_only: bool,
    /// Where the data comes from: exactly one source.
    pub source: VolumeSource,
    /// The volume's bounded thread pool.
    #[serde(default)]
    pub pool: PoolSpec,
    /// Present = the volume caches origin responses (mounted read-write whatever readOnly says).
    /// A cache directory has one server: on a persistentVolumeClaim at most one replica, on a
    /// hostPath at most one pod per node.
    pub cache: Option<VolumeCacheSpec>,
}

impl VolumeSpec {
    /// Whether the pod mounts the volume read-only: `readOnly`, except a cache volume, which the
    /// server writes.
    pub fn mounted_read_only(&self) -> bool {
        self.read_only && self.cache.is_none()
    }
}

/// Exactly one of the fields.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "[has(self.persistentVolumeClaim), has(self.claimTemplate), has(self.emptyDir), has(self.hostPath), has(self.image)].filter(x, x).size() == 1",
    "message": "set exactly one of persistentVolumeClaim, claimTemplate, emptyDir, hostPath, image"
}]))]
pub struct VolumeSource {
    /// An existing PersistentVolumeClaim shared by all pods (ReadOnlyMany for replicas > 1). As
    /// a cache volume it allows one replica only: a cache directory has one server.
    pub persistent_volume_claim: Option<PvcSource>,
    /// A claim per pod (turns the workload into a StatefulSet).
    pub claim_template: Option<ClaimTemplateSource>,
    /// Scratch space living as long as the pod.
    pub empty_dir: Option<EmptyDirSource>,
    /// A directory of the node (needs spec.allowHostPath and the operator's --allow-host-path).
    pub host_path: Option<HostPathSource>,
    /// An OCI image (or artifact) mounted read-only (Kubernetes image volumes: beta since 1.33,
    /// on by default since 1.35).
    pub image: Option<ImageSource>,
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
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.size.matches('[1-9]')",
    "message": "size must be more than 0",
    "fieldPath": ".size"
}]))]
pub struct ClaimTemplateSource {
    /// StorageClass; unset uses the cluster default.
    pub storage_class_name: Option<String>,
    /// Requested size, a Kubernetes quantity such as `500Gi`.
    #[schemars(regex(pattern = QUANTITY_PATTERN))]
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
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct EmptyDirSource {
    /// Size limit, a quantity such as `1Gi`.
    #[schemars(regex(pattern = QUANTITY_PATTERN))]
    pub size_limit: Option<String>,
    /// Storage medium: `Memory` for tmpfs, unset for the node's disk.
    pub medium: Option<EmptyDirMedium>,
}

/// emptyDir medium.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum EmptyDirMedium {
    Memory,
}

/// A node directory.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostPathSource {
    /// Absolute path on the node.
    #[schemars(regex(pattern = r"^/"))]
    pub path: String,
    /// What the kubelet checks before mounting: `Directory` (it must exist) or
    /// `DirectoryOrCreate`; unset checks nothing. A volume is a directory of files, so the
    /// file, socket and device types are refused. A cache needs a directory the server's user
    /// can write: one `DirectoryOrCreate` makes is root's (mode 0755), which it cannot.
    #[serde(rename = "type")]
    pub type_: Option<HostPathType>,
}

/// The hostPath types a directory volume may have.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum HostPathType {
    Directory,
    DirectoryOrCreate,
}

impl HostPathType {
    pub fn as_str(self) -> &'static str {
        match self {
            HostPathType::Directory => "Directory",
            HostPathType::DirectoryOrCreate => "DirectoryOrCreate",
        }
    }
}

/// An OCI image volume: the image's filesystem, read-only. Its files often carry one constant
/// mtime, so ETags must not rely on mtime alone (see the README, "Validators").
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageSource {
    /// Image reference, e.g. `registry.example/site:2026-01` or a digest.
    #[schemars(length(min = 1, max = 1024))]
    pub reference: String,
    /// Pull policy of the image (Kubernetes' default: Always for `:latest`, else IfNotPresent).
    pub pull_policy: Option<PullPolicy>,
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

fn default_access_modes() -> Vec<AccessMode> {
    vec![AccessMode::ReadWriteOnce]
}
fn default_threads() -> u32 {
    content_server::config::DEFAULT_THREADS as u32
}
fn default_max_queue() -> u32 {
    content_server::config::DEFAULT_MAX_QUEUE as u32
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
