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
    /// The workload's rollout state; None while a StatefulSet is being replaced or while the
    /// workload's controller has not reported on it yet ([`rollout_state`]).
    pub state: Option<WorkloadState>,
    /// Pending work, shown in the Reconciled condition's message.
    pub notes: Vec<String>,
    /// Children not applied because their kind's CRD is not installed, as `Kind (crd name)`.
    pub missing_crds: Vec<String>,
    /// Ready pods of the workload of the other kind, still serving until the new one is ready.
    pub serving_elsewhere: i32,
    /// The workload of the other kind still exists (its pods may mount an earlier config).
    pub previous_workload_remains: bool,
    /// Applying a child past the workload failed: the reconcile fails with it once the
    /// workload switch and the pruning are done.
    pub optional_failed: Option<crate::reconcile::Error>,
}

impl Applied {
    /// A StatefulSet replacement is under way or the workload is not observed yet (requeue
    /// soon): the workload left no state.
    pub fn replacing(&self) -> bool {
        self.state.is_none()
    }
}

/// The rollout state of an applied Deployment or StatefulSet from its status counters
/// (`[replicas, readyReplicas, updatedReplicas]`) and observed generation.
///
/// None while the workload's controller has not reported on it at all (no observedGeneration:
/// a workload just created, e.g. the StatefulSet recreated after an orphaning delete, whose
/// adopted pods still serve): its zero counts are not an observation, so the status step keeps
/// the counts and conditions it last wrote. A status with an older observedGeneration still
/// counts (its pods exist; `observed_latest` is false, so the rollout is not complete).
pub fn rollout_state(
    meta: &ObjectMeta,
    desired: i32,
    [replicas, ready, updated]: [Option<i32>; 3],
    observed_generation: Option<i64>,
) -> Option<WorkloadState> {
    observed_generation?;
    Some(WorkloadState {
        desired,
        replicas: replicas.unwrap_or(0),
        ready: ready.unwrap_or(0),
        updated: updated.unwrap_or(0),
        observed_latest: observed_generation >= meta.generation,
        stalled: false,
        serving_elsewhere: 0,
    })
}

/// Whether a Deployment's rollout passed its progress deadline (its controller's
/// `Progressing=False/ProgressDeadlineExceeded`).
pub fn progress_deadline_exceeded(
    conditions: &[k8s_openapi::api::apps::v1::DeploymentCondition],
) -> bool {
    conditions.iter().any(|c| {
        c.type_ == "Progressing"
            && c.status == "False"
            && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    })
}
