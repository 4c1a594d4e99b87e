//! Conditions, phase and Event-worthy transitions computed from workload state (pure).

use content_operator::status::{
    phase, transitions, workload_conditions, WorkloadState, AVAILABLE, DEGRADED, PROGRESSING,
    RECONCILED,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

fn get<'a>(c: &'a [Condition], t: &str) -> &'a Condition {
    c.iter().find(|x| x.type_ == t).expect("condition")
}

fn state(desired: i32, ready: i32, updated: i32) -> WorkloadState {
    WorkloadState {
        desired,
        replicas: desired,
        ready,
        updated,
        observed_latest: true,
        stalled: false,
        serving_elsewhere: 0,
    }
}

/// Three pods up to date and ready.
fn settled(now: Timestamp) -> Vec<Condition> {
    workload_conditions(&[], &state(3, 3, 3), None, Some(1), now)
}

/// The conditions once settled, and after the next reconcile (generation 2) sees `next`.
fn after_settling(next: WorkloadState) -> (Vec<Condition>, Vec<Condition>) {
    let t0 = Timestamp::now();
    let settled = settled(t0);
    let after = workload_conditions(&settled, &next, None, Some(2), t0);
    (settled, after)
}

#[test]
fn fresh_rollout_progresses_without_degraded_or_warnings() {
    let now = Timestamp::now();
    let c = workload_conditions(&[], &state(3, 0, 3), None, Some(1), now);
    assert_eq!(get(&c, PROGRESSING).status, "True");
    assert_eq!(
        get(&c, DEGRADED).status,
        "False",
        "starting pods are not degraded"
    );
    assert_eq!(get(&c, AVAILABLE).status, "False");
    assert_eq!(get(&c, RECONCILED).status, "True");
    assert_eq!(phase(&c), "Progressing");
    assert!(
        transitions(&[], &c).iter().all(|t| !t.warning),
        "{:?}",
        transitions(&[], &c)
    );
}

#[test]
fn losing_pods_after_settling_is_degraded_with_a_warning_then_recovers() {
    let t0 = Timestamp::now();
    let settled = settled(t0);
    assert_eq!(get(&settled, PROGRESSING).status, "False");
    assert_eq!(get(&settled, AVAILABLE).status, "True");
    assert_eq!(phase(&settled), "Ready");

    let t1 = t0 + SignedDuration::from_secs(60);
    let lost = workload_conditions(&settled, &state(3, 1, 3), None, Some(1), t1);
    assert_eq!(get(&lost, DEGRADED).status, "True");
    assert_eq!(get(&lost, DEGRADED).reason, "ReplicasUnavailable");
    assert_eq!(get(&lost, DEGRADED).last_transition_time.0, t1);
    // Available did not change status: its transition time is kept.
    assert_eq!(get(&lost, AVAILABLE).last_transition_time.0, t0);
    assert_eq!(phase(&lost), "Degraded");
    let tr = transitions(&settled, &lost);
    assert!(
        tr.iter()
            .any(|t| t.warning && t.reason == "ReplicasUnavailable"),
        "{tr:?}"
    );

    let t2 = t1 + SignedDuration::from_secs(60);
    let back = workload_conditions(&lost, &state(3, 3, 3), None, Some(1), t2);
    assert_eq!(get(&back, DEGRADED).status, "False");
    assert_eq!(phase(&back), "Ready");
}

#[test]
fn scale_up_after_settling_progresses_instead_of_degrading() {
    let (_, scaling) = after_settling(state(5, 3, 3));
    assert_eq!(get(&scaling, PROGRESSING).status, "True");
    assert_eq!(get(&scaling, DEGRADED).status, "False");
}

#[test]
fn scaled_to_zero_is_not_available_but_not_a_warning() {
    let (settled, zero) = after_settling(state(0, 0, 0));
    assert_eq!(get(&zero, AVAILABLE).reason, "ScaledToZero");
    let tr = transitions(&settled, &zero);
    assert!(
        tr.iter()
            .all(|t| !(t.warning && t.reason == "ScaledToZero")),
        "{tr:?}"
    );
}

/// Every phase the operator can write is named where users read about it: the CRD's phase
/// field and Status printer column (docs/operator.md "Status" too). `Error` and `Unavailable`
/// were written but named nowhere.
#[test]
fn every_phase_written_is_named_in_the_crd() {
    let cond = |t: &str, status: &str, reason: &str| Condition {
        type_: t.into(),
        status: status.into(),
        reason: reason.into(),
        message: String::new(),
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        observed_generation: None,
    };
    let mut phases: Vec<String> = ["Paused", "InvalidSpec", "NameTaken", "ApplyFailed"]
        .iter()
        .map(|r| phase(&[cond(RECONCILED, "False", r)]))
        .collect();
    phases.push(phase(&settled(Timestamp::now())));
    for (t, s) in [
        (DEGRADED, "True"),
        (PROGRESSING, "True"),
        (AVAILABLE, "False"),
    ] {
        phases.push(phase(&[cond(t, s, "X")]));
    }
    for p in [
        "Ready",
        "Progressing",
        "Degraded",
        "Unavailable",
        "Invalid",
        "Paused",
        "Error",
    ] {
        assert!(
            phases.iter().any(|x| x == p),
            "{p} not produced: {phases:?}"
        );
    }
    let crd = content_operator::crd_yaml().expect("CRD YAML");
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operator.md"))
        .expect("docs/operator.md");
    for p in &phases {
        let in_column = crd
            .lines()
            .any(|l| l.contains("Ready, Progressing") && l.contains(p.as_str()));
        assert!(
            in_column,
            "phase {p} is not named in the CRD's phase descriptions"
        );
        assert!(
            docs.contains(p.as_str()),
            "phase {p} is not in docs/operator.md"
        );
    }
}

/// A Deployment whose rollout passed its progress deadline (new pods that never become ready):
/// Progressing False and Degraded True with the Deployment's reason, a Warning-worthy change,
/// phase Degraded, instead of "RollingOut" forever. Once it rolls out, it settles.
#[test]
fn a_rollout_past_its_progress_deadline_is_degraded() {
    let now = Timestamp::now();
    let settled = settled(now);
    let stuck = WorkloadState {
        stalled: true,
        ..state(3, 3, 1)
    };
    let c = workload_conditions(&settled, &stuck, None, Some(2), now);
    let (p, d) = (get(&c, PROGRESSING), get(&c, DEGRADED));
    assert_eq!(
        (p.status.as_str(), p.reason.as_str()),
        ("False", "ProgressDeadlineExceeded")
    );
    assert_eq!(
        (d.status.as_str(), d.reason.as_str()),
        ("True", "ProgressDeadlineExceeded")
    );
    assert!(
        d.message.starts_with("1/3 pods updated, 3/3 ready"),
        "{}",
        d.message
    );
    assert_eq!(get(&c, AVAILABLE).status, "True");
    assert_eq!(phase(&c), "Degraded");
    assert!(transitions(&settled, &c)
        .iter()
        .any(|t| t.warning && t.reason == "ProgressDeadlineExceeded"));
    // A fix of the spec, not yet seen by the Deployment's controller (its old condition still
    // there): rolling out, not stalled.
    let unseen = WorkloadState {
        stalled: true,
        observed_latest: false,
        ..state(3, 3, 0)
    };
    let c2 = workload_conditions(&c, &unseen, None, Some(3), now);
    assert_eq!(get(&c2, PROGRESSING).reason, "RollingOut");
    let fixed = workload_conditions(&c, &state(3, 3, 3), None, Some(3), now);
    assert_eq!(phase(&fixed), "Ready");
    assert_eq!(get(&fixed, DEGRADED).status, "False");
}
