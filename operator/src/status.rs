//! Computing a ContentServer's status: conditions (Available, Progressing, Degraded, Reconciled),
//! the phase shown by `kubectl get`, and which condition changes deserve an Event.
//!
//! Pure: the caller passes the current time and what it observed; a condition keeps its
//! lastTransitionTime while its status does not change. Must not talk to the API server.

use crate::crd::ContentServerStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

pub const AVAILABLE: &str = "Available";
pub const PROGRESSING: &str = "Progressing";
pub const DEGRADED: &str = "Degraded";
pub const RECONCILED: &str = "Reconciled";
/// Progressing and Degraded reason: the workload's rollout passed its progress deadline.
pub const STALLED: &str = "ProgressDeadlineExceeded";
/// Reconciled reason: an optional kind's CRD (Gateway API, Prometheus Operator) is missing.
pub const CRD_MISSING: &str = "CRDMissing";
/// Reconciled reason: a child's name is still held by a child of an earlier ContentServer of the
/// same name, which the garbage collector is about to remove (not a Warning; phase Progressing).
pub const AWAITING_GC: &str = "AwaitingGarbageCollection";

/// What the workload reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkloadState {
    pub desired: i32,
    pub replicas: i32,
    pub ready: i32,
    pub updated: i32,
    /// The workload controller has seen the latest workload spec.
    pub observed_latest: bool,
    /// The rollout made no progress within its deadline (a Deployment's
    /// `Progressing=False/ProgressDeadlineExceeded`: new pods that never become ready).
    pub stalled: bool,
    /// Ready pods of the workload of the other kind, still serving during a switch (counted in
    /// `ready`): the switch is not done while there are any.
    pub serving_elsewhere: i32,
}

impl WorkloadState {
    pub fn rolled_out(&self) -> bool {
        self.serving_elsewhere == 0
            && self.observed_latest
            && self.updated >= self.desired
            && self.ready >= self.desired
            && self.replicas <= self.desired
    }
}

/// A condition with its transition time carried over from `previous` when its status is unchanged.
pub fn condition(
    previous: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let status = if status { "True" } else { "False" }.to_string();
    let last = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: type_.into(),
        status,
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: last,
    }
}

/// Replace (or add) conditions by type, keeping the others.
pub fn merge_conditions(previous: &[Condition], updates: Vec<Condition>) -> Vec<Condition> {
    let mut out: Vec<Condition> = previous
        .iter()
        .filter(|c| !updates.iter().any(|u| u.type_ == c.type_))
        .cloned()
        .collect();
    out.extend(updates);
    let order = [AVAILABLE, PROGRESSING, DEGRADED, RECONCILED];
    out.sort_by_key(|c| {
        order
            .iter()
            .position(|o| *o == c.type_)
            .unwrap_or(order.len())
    });
    out
}

/// Conditions after a successful apply, from the workload's state.
pub fn workload_conditions(
    previous: &[Condition],
    w: &WorkloadState,
    note: Option<&str>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let set = |type_: &str, status: bool, reason: &str, message: String| {
        condition(previous, type_, status, reason, message, generation, now)
    };
    let ready = format!("{}/{} pods ready", w.ready, w.desired);
    let available = if w.desired == 0 {
        set(
            AVAILABLE,
            false,
            "ScaledToZero",
            "spec.replicas is 0".into(),
        )
    } else if w.ready > 0 {
        set(AVAILABLE, true, "MinimumReplicasAvailable", ready.clone())
    } else {
        set(AVAILABLE, false, "NoReadyReplicas", ready.clone())
    };
    // Degraded: pods missing after the workload had settled (not while it starts or rolls).
    let settled_before = previous.iter().any(|c| {
        (c.type_ == PROGRESSING && c.status == "False")
            || (c.type_ == DEGRADED && c.status == "True")
    });
    let template_current = w.observed_latest && w.updated >= w.desired;
    let degraded = w.desired > 0 && w.ready < w.desired && template_current && settled_before;
    let rolling = format!(
        "{}/{} pods updated, {}/{} ready",
        w.updated, w.desired, w.ready, w.desired
    );
    // (Only for the spec its controller has seen: a fix of the stalled spec starts afresh.)
    if w.stalled && w.observed_latest && !w.rolled_out() {
        // A rollout that will not finish by itself (a crash-looping template): said, with an
        // Event, instead of Progressing forever.
        let message = format!(
            "{rolling}: no progress within the Deployment's progress deadline (see its new pods)"
        );
        let progressing = set(PROGRESSING, false, STALLED, message.clone());
        let degraded = set(DEGRADED, true, STALLED, message);
        let reconciled = set(
            RECONCILED,
            true,
            "Applied",
            note.unwrap_or("children applied").to_string(),
        );
        return merge_conditions(previous, vec![available, progressing, degraded, reconciled]);
    }
    let progressing = if w.rolled_out() || degraded {
        let message = format!("{} pods up to date", w.updated);
        set(PROGRESSING, false, "RolloutComplete", message)
    } else {
        set(PROGRESSING, true, "RollingOut", rolling)
    };
    let degraded = if degraded {
        set(DEGRADED, true, "ReplicasUnavailable", ready)
    } else {
        set(DEGRADED, false, "AsExpected", String::new())
    };
    let message = note.unwrap_or("children applied").to_string();
    let reconciled = set(RECONCILED, true, "Applied", message);
    merge_conditions(previous, vec![available, progressing, degraded, reconciled])
}

/// `Reconciled=False/CRDMissing`: children of the kinds in `missing` (e.g. `HTTPRoute
/// (httproutes.gateway.networking.k8s.io)`) could not be applied because the cluster does not
/// have their CRD; everything else was applied. The reconcile does not fail (no retry storm):
/// the periodic requeue applies them once the CRD is installed.
pub fn crd_missing(
    previous: &[Condition],
    missing: &[String],
    note: Option<&str>,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let mut message = format!(
        "not applied, CRD not installed: {}; the other children are applied",
        missing.join(", ")
    );
    if let Some(n) = note {
        message = format!("{message}; {n}");
    }
    condition(
        previous,
        RECONCILED,
        false,
        CRD_MISSING,
        message,
        generation,
        now,
    )
}

/// The phase printed in the Status column.
pub fn phase(conditions: &[Condition]) -> String {
    let get = |t: &str| conditions.iter().find(|c| c.type_ == t);
    if let Some(r) = get(RECONCILED) {
        // A missing optional CRD leaves the pods serving: the phase follows them.
        if r.status == "False" && r.reason != CRD_MISSING {
            return match r.reason.as_str() {
                "Paused" => "Paused".into(),
                "InvalidSpec" => "Invalid".into(),
                AWAITING_GC => "Progressing".into(),
                _ => "Error".into(),
            };
        }
    }
    if get(DEGRADED).is_some_and(|c| c.status == "True") {
        return "Degraded".into();
    }
    if get(PROGRESSING).is_some_and(|c| c.status == "True") {
        return "Progressing".into();
    }
    if get(AVAILABLE).is_some_and(|c| c.status == "True") {
        return "Ready".into();
    }
    "Unavailable".into()
}

/// A condition change worth an Event: (type, warning?, reason, message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

/// Transitions between two condition lists: a type whose status or reason changed. Progressing
/// is left out (it flips on every rollout, the workload's own events cover it).
pub fn transitions(old: &[Condition], new: &[Condition]) -> Vec<Transition> {
    new.iter()
        .filter(|c| c.type_ != PROGRESSING)
        .filter(|c| {
            !old.iter()
                .any(|o| o.type_ == c.type_ && o.status == c.status && o.reason == c.reason)
        })
        .map(|c| {
            let bad = match c.type_.as_str() {
                DEGRADED => c.status == "True",
                // Losing availability is bad; not having it yet (a fresh create) is not.
                AVAILABLE => {
                    c.status == "False"
                        && c.reason != "ScaledToZero"
                        && old
                            .iter()
                            .any(|o| o.type_ == AVAILABLE && o.status == "True")
                }
                RECONCILED => {
                    c.status == "False" && c.reason != "Paused" && c.reason != AWAITING_GC
                }
                _ => false,
            };
            Transition {
                warning: bad,
                reason: c.reason.clone(),
                message: if c.message.is_empty() {
                    format!("{} is {}", c.type_, c.status)
                } else {
                    format!("{} is {}: {}", c.type_, c.status, c.message)
                },
            }
        })
        .collect()
}

/// `previous` with only `Reconciled` set to False (reason, message): the status written when a
/// reconcile leaves the children alone (paused, invalid spec, failed apply).
pub fn not_reconciled(
    previous: &ContentServerStatus,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> ContentServerStatus {
    let cond = condition(
        &previous.conditions,
        RECONCILED,
        false,
        reason,
        message,
        generation,
        now,
    );
    with_conditions(
        Some(previous),
        merge_conditions(&previous.conditions, vec![cond]),
    )
}

/// The status with new conditions; counts from `w` when given, else carried over.
pub fn with_conditions(
    previous: Option<&ContentServerStatus>,
    conditions: Vec<Condition>,
) -> ContentServerStatus {
    let mut st = previous.cloned().unwrap_or_default();
    st.phase = Some(phase(&conditions));
    st.conditions = conditions;
    st
}
