//! What applying the children leaves behind for the status step ([`Applied`]), and the rollout
//! state of an applied workload. Written by `children.rs` and `replace.rs`, read by the status
//! step; it must not call the API.

use crate::builders::workload::WorkloadKind;
use crate::status::WorkloadState;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// What applying the children left behind, for the status step.
pub struct Applied {
    pub config_hash: String,
    pub kind: WorkloadKind,
    /// The workload's rollout state; None while a StatefulSet is being replaced.
    pub state: Option<WorkloadState>,
    /// Pending work, shown in the Reconciled condition's message.
    pub notes: Vec<String>,
    /// Children not applied because their kind's CRD is not installed, as `Kind (crd name)`.
    pub missing_crds: Vec<String>,
    /// Ready pods of the workload of the other kind, still serving until the new one is ready.
    pub serving_elsewhere: i32,
}

impl Applied {
    /// A StatefulSet replacement is under way (requeue soon): the workload left no state.
    pub fn replacing(&self) -> bool {
        self.state.is_none()
    }
}

/// The rollout state of an applied Deployment or StatefulSet from its status counters
/// (`[replicas, readyReplicas, updatedReplicas]`) and observed generation.
pub fn rollout_state(
    meta: &ObjectMeta,
    desired: i32,
    [replicas, ready, updated]: [Option<i32>; 3],
    observed_generation: Option<i64>,
) -> WorkloadState {
    WorkloadState {
        desired,
        replicas: replicas.unwrap_or(0),
        ready: ready.unwrap_or(0),
        updated: updated.unwrap_or(0),
        observed_latest: observed_generation.is_some() && observed_generation >= meta.generation,
    }
}
