//! Replacements that must not cost an outage: a StatefulSet whose immutable fields changed is
//! deleted with orphaning (its pods keep serving and are adopted by the recreated one), and the
//! workload of the previous kind (Deployment <-> StatefulSet) goes only once the new one has all
//! pods ready. Must never delete with cascading propagation while pods are still needed.

use crate::builders::workload::{claim_template_signature, statefulset, WorkloadKind};
use crate::builders::{self, headless_service_name};
use crate::reconcile::api::{apply, delete_if_exists, owned_by, publish};
use crate::reconcile::applied::{rollout_state, Applied};
use crate::reconcile::{Error, Scope};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// Apply the StatefulSet, or start/continue its orphaning replacement when an immutable field
/// changed (then `applied.state` stays None).
pub async fn apply_statefulset(scope: &Scope<'_>, applied: &mut Applied) -> Result<(), Error> {
    let cs = scope.cs;
    let stss: Api<StatefulSet> = scope.api();
    let name = builders::workload_name(cs);
    let desired = statefulset(cs, &applied.config_hash);
    let existing = stss.get_opt(&name).await?;
    if existing
        .as_ref()
        .is_some_and(|e| e.metadata.deletion_timestamp.is_some())
    {
        applied
            .notes
            .push("waiting for the replaced StatefulSet to be removed (pods keep serving)".into());
        return Ok(());
    }
    if let Some(what) = existing
        .as_ref()
        .and_then(|e| immutable_change(e, &desired))
    {
        delete_if_exists(&stss, &name, &DeleteParams::orphan()).await?;
        publish(
            scope.ctx,
            cs,
            false,
            "StatefulSetReplaced",
            format!("{what} changed (immutable): StatefulSet deleted with orphaning and will be recreated; pods keep serving, existing claims are kept as they are"),
            "ReplaceStatefulSet",
        )
        .await;
        applied.notes.push(format!(
            "replacing the StatefulSet: {what} changed; existing pods and claims are kept"
        ));
        return Ok(());
    }
    let s = apply(&stss, &desired).await?;
    let st = s.status.unwrap_or_default();
    applied.state = Some(rollout_state(
        &s.metadata,
        cs.spec.replicas,
        [Some(st.replicas), st.ready_replicas, st.updated_replicas],
        st.observed_generation,
    ));
    Ok(())
}

/// Remove the workload of the other kind once the new one is fully ready; the headless Service
/// goes with the StatefulSet it governs.
pub async fn remove_other_kind(scope: &Scope<'_>, applied: &mut Applied) -> Result<(), Error> {
    let ready = applied
        .state
        .is_some_and(|s| s.ready >= scope.cs.spec.replicas && s.observed_latest);
    match applied.kind {
        WorkloadKind::StatefulSet => {
            let deps: Api<Deployment> = scope.api();
            let serving = |d: &Deployment| d.status.as_ref().and_then(|s| s.ready_replicas);
            remove_when_ready(
                &deps,
                scope,
                ready,
                ["Deployment", "StatefulSet"],
                serving,
                applied,
            )
            .await?;
        }
        WorkloadKind::Deployment => {
            let stss: Api<StatefulSet> = scope.api();
            let serving = |s: &StatefulSet| s.status.as_ref().and_then(|s| s.ready_replicas);
            let sts_remains = remove_when_ready(
                &stss,
                scope,
                ready,
                ["StatefulSet", "Deployment"],
                serving,
                applied,
            )
            .await?;
            if !sts_remains {
                let svcs: Api<Service> = scope.api();
                delete_if_exists(
                    &svcs,
                    &headless_service_name(scope.cs),
                    &DeleteParams::default(),
                )
                .await?;
            }
        }
    }
    Ok(())
}

/// Delete our workload of kind `[old, new]`'s `old` when `ready`; true when it still exists
/// (its ready pods, by `serving`, then count as serving in the status).
async fn remove_when_ready<K>(
    api: &Api<K>,
    scope: &Scope<'_>,
    ready: bool,
    [old, new]: [&str; 2],
    serving: impl Fn(&K) -> Option<i32>,
    applied: &mut Applied,
) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let name = builders::workload_name(scope.cs);
    let Some(existing) = api.get_opt(&name).await?.filter(|o| owned_by(o, scope.cs)) else {
        return Ok(false);
    };
    if !ready {
        applied.notes.push(format!(
            "the previous {old} keeps serving until the {new} is ready"
        ));
        applied.serving_elsewhere = serving(&existing).unwrap_or(0);
        return Ok(true);
    }
    delete_if_exists(api, &existing.name_any(), &DeleteParams::background()).await?;
    publish(
        scope.ctx,
        scope.cs,
        false,
        "WorkloadReplaced",
        format!("{old} removed: the {new} is ready"),
        "ReplaceWorkload",
    )
    .await;
    Ok(false)
}

/// What immutable StatefulSet field differs, if any.
pub fn immutable_change(existing: &StatefulSet, desired: &StatefulSet) -> Option<String> {
    let e = existing.spec.clone().unwrap_or_default();
    let d = desired.spec.clone().unwrap_or_default();
    if claim_template_signature(&e.volume_claim_templates.unwrap_or_default())
        != claim_template_signature(&d.volume_claim_templates.unwrap_or_default())
    {
        return Some("volumeClaimTemplates".into());
    }
    if e.pod_management_policy
        .unwrap_or_else(|| "OrderedReady".into())
        != d.pod_management_policy
            .unwrap_or_else(|| "OrderedReady".into())
    {
        return Some("podManagementPolicy".into());
    }
    if e.service_name != d.service_name {
        return Some("serviceName".into());
    }
    if e.selector != d.selector {
        return Some("selector".into());
    }
    None
}
