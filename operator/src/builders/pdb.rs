//! The PodDisruptionBudget, wanted only when replicas > 1 or the autoscaler keeps more than one
//! pod (with one pod a PDB would block node drains forever). Pure.

use crate::builders::{child_meta, selector_labels, workload_name};
use crate::crd::ContentServer;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// The PDB, or None when the spec does not want one.
pub fn pdb(cs: &ContentServer) -> Option<PodDisruptionBudget> {
    let min_autoscaled = cs.spec.autoscaling.as_ref().map_or(0, |a| a.min_replicas);
    if cs.spec.replicas <= 1 && min_autoscaled <= 1 {
        return None;
    }
    Some(PodDisruptionBudget {
        metadata: child_meta(cs, workload_name(cs)),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(cs.spec.pdb.max_unavailable.clone()),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(cs)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    })
}
