//! Replacements that must not cost an outage: a StatefulSet whose immutable fields changed is
//! deleted with orphaning (its pods keep serving and are adopted by the recreated one), and the
//! workload of the previous kind (Deployment <-> StatefulSet) goes only once the new one has all
//! pods ready — except when the pods share a cache directory, which only one server may use, or
//! the one pod mounts an existing claim (a ReadWriteOnce claim attaches to one node): then it
//! goes at once, as a `Recreate` rollout would. Must never delete with cascading propagation
//! while pods are still needed.

use crate::builders::workload::{
    claim_template_signature, one_pod_on_an_existing_claim, shares_a_cache_directory, statefulset,
    WorkloadKind,
};
use crate::builders::{self, headless_service_name};
use crate::reconcile::api::{
    apply, call, delete_if_exists, delete_owned, name_taken, ours_or_orphan, publish, same_object,
};
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
    let object = format!("StatefulSet {name}");
    let existing = stss.get_opt(&name).await.map_err(call(object.clone()))?;
    if let Some(e) = existing.as_ref().filter(|e| !ours_or_orphan(*e, cs)) {
        return Err(name_taken(e, cs, object));
    }
    if existing
        .as_ref()
        .is_some_and(|e| e.metadata.deletion_timestamp.is_some())
    {
        applied
            .notes
            .push("waiting for the replaced StatefulSet to be removed (pods keep serving)".into());
        return Ok(());
    }
    if let Some((ours, what)) = existing
        .as_ref()
        .and_then(|e| immutable_change(e, &desired).map(|what| (e, what)))
    {
        let deleted = delete_if_exists(&stss, &name, &same_object(&DeleteParams::orphan(), ours))
            .await
            .map_err(call(object))?;
        if !deleted {
            // Gone meanwhile, or replaced by someone else's: the next reconcile looks again.
            applied.notes.push(format!(
                "{what} changed; the StatefulSet changed meanwhile, looking again"
            ));
            return Ok(());
        }
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
    applied.state = rollout_state(
        &s.metadata,
        cs.spec.replicas,
        [Some(st.replicas), st.ready_replicas, st.updated_replicas],
        st.observed_generation,
    );
    Ok(())
}

/// Remove the workload of the other kind once the new one is fully ready, or at once when a
/// cache directory is shared between pods ([`shares_a_cache_directory`]): the old pods hold the
/// directory's lock, so the new pods could never become ready beside them (the switch would
/// stall forever); like a `Recreate` rollout, serving stops until the new pods start. The
/// headless Service goes with the StatefulSet it governs. Only workloads and Services of this
/// ContentServer (owned, or orphans of it) are removed (`api::delete_owned`).
pub async fn remove_other_kind(scope: &Scope<'_>, applied: &mut Applied) -> Result<(), Error> {
    let ready = applied
        .state
        .is_some_and(|s| s.ready >= scope.cs.spec.replicas && s.observed_latest);
    let why = if ready {
        Removal::Ready
    } else if shares_a_cache_directory(&scope.cs.spec) {
        Removal::SharedCache
    } else if one_pod_on_an_existing_claim(&scope.cs.spec) {
        Removal::OnePodOnAClaim
    } else {
        Removal::NotYet
    };
    match applied.kind {
        WorkloadKind::StatefulSet => {
            let deps: Api<Deployment> = scope.api();
            let serving = |d: &Deployment| d.status.as_ref().and_then(|s| s.ready_replicas);
            applied.previous_workload_remains = remove_when_ready(
                &deps,
                scope,
                why,
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
                why,
                ["StatefulSet", "Deployment"],
                serving,
                applied,
            )
            .await?;
            applied.previous_workload_remains = sts_remains;
            if !sts_remains {
                let svcs: Api<Service> = scope.api();
                let headless = headless_service_name(scope.cs);
                let dp = DeleteParams::default();
                delete_owned(&svcs, scope.cs, "Service", &headless, &dp).await?;
            }
        }
    }
    Ok(())
}

/// Whether (and why) the workload of the other kind goes now.
#[derive(Clone, Copy)]
enum Removal {
    /// The new workload has all pods ready.
    Ready,
    /// The pods share a cache directory: the old pods must stop for the new ones to start.
    SharedCache,
    /// One pod on an existing claim, often ReadWriteOnce: the new pod may not attach it on
    /// another node while the old one holds it.
    OnePodOnAClaim,
    /// Keep it serving.
    NotYet,
}

/// Delete our workload of kind `[old, new]`'s `old` unless `Removal::NotYet`; true when it still
/// exists (its ready pods, by `serving`, then count as serving in the status).
async fn remove_when_ready<K>(
    api: &Api<K>,
    scope: &Scope<'_>,
    why: Removal,
    [old, new]: [&str; 2],
    serving: impl Fn(&K) -> Option<i32>,
    applied: &mut Applied,
) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let name = builders::workload_name(scope.cs);
    let what = format!("{old} {name}");
    let existing = api.get_opt(&name).await.map_err(call(what.clone()))?;
    let Some(existing) = existing.filter(|o| ours_or_orphan(o, scope.cs)) else {
        return Ok(false);
    };
    let message = match why {
        Removal::NotYet => {
            applied.notes.push(format!(
                "the previous {old} keeps serving until the {new} is ready"
            ));
            applied.serving_elsewhere = serving(&existing).unwrap_or(0);
            return Ok(true);
        }
        Removal::Ready => format!("{old} removed: the {new} is ready"),
        Removal::SharedCache => format!(
            "{old} removed before the {new} is ready: their pods share a cache directory, which only one server may use"
        ),
        Removal::OnePodOnAClaim => format!(
            "{old} removed before the {new} is ready: its one pod mounts an existing claim, which a ReadWriteOnce claim lets only one node attach"
        ),
    };
    let dp = same_object(&DeleteParams::background(), &existing);
    let deleted = delete_if_exists(api, &existing.name_any(), &dp)
        .await
        .map_err(call(what))?;
    if !deleted {
        // Gone meanwhile, or replaced by someone else's: not ours to remove or report.
        return Ok(false);
    }
    publish(
        scope.ctx,
        scope.cs,
        false,
        "WorkloadReplaced",
        message,
        "ReplaceWorkload",
    )
    .await;
    Ok(false)
}

/// The immutable StatefulSet fields that differ (`a, b`), if any.
pub fn immutable_change(existing: &StatefulSet, desired: &StatefulSet) -> Option<String> {
    let e = existing.spec.clone().unwrap_or_default();
    let d = desired.spec.clone().unwrap_or_default();
    let policy = |p: Option<String>| p.unwrap_or_else(|| "OrderedReady".into());
    let changed: Vec<&str> = [
        (
            claim_template_signature(&e.volume_claim_templates.unwrap_or_default())
                != claim_template_signature(&d.volume_claim_templates.unwrap_or_default()),
            "volumeClaimTemplates",
        ),
        (
            policy(e.pod_management_policy) != policy(d.pod_management_policy),
            "podManagementPolicy",
        ),
        (e.service_name != d.service_name, "serviceName"),
        (e.selector != d.selector, "selector"),
    ]
    .into_iter()
    .filter_map(|(differs, field)| differs.then_some(field))
    .collect();
    (!changed.is_empty()).then(|| changed.join(", "))
}
