//! One reconcile of one ContentServer: validate, render, server-side apply every child under one
//! field manager, handle workload-kind switches and immutable StatefulSet changes without an
//! outage, then write status and emit Events on condition transitions.
//!
//! Safety rules this module must keep: an invalid spec never touches a child; `paused` never
//! touches a child; a StatefulSet whose immutable fields (claim templates, pod management policy,
//! service name) changed is deleted with `propagationPolicy: Orphan` — its pods keep serving and
//! are adopted by the replacement — never with cascading deletion; a workload of the previous
//! kind (Deployment <-> StatefulSet) is removed only after the new one has all pods ready.

use crate::builders::configmap::{configmap, render};
use crate::builders::workload::{claim_template_signature, deployment, statefulset, WorkloadKind};
use crate::builders::{self, pdb, service, servicemonitor, FIELD_MANAGER};
use crate::crd::{ContentServer, ContentServerStatus};
use crate::metrics::{result, Metrics};
use crate::status::{self, WorkloadState, RECONCILED};
use crate::validation;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Requeue interval once everything is rolled out.
pub const STEADY_REQUEUE: Duration = Duration::from_secs(300);
/// Requeue interval while a rollout or replacement is in progress.
pub const PROGRESS_REQUEUE: Duration = Duration::from_secs(10);

/// Why a reconcile failed (the controller retries with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("rendering the server config: {0}")]
    Render(#[from] content_server::config::ConfigError),
    #[error("ContentServer has no {0}")]
    Missing(&'static str),
}

/// Shared state of every reconcile.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Metrics,
    /// Consecutive failures per object, for the error policy's backoff.
    pub failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(client: Client, recorder: Recorder, metrics: Metrics) -> Context {
        Context {
            client,
            recorder,
            metrics,
            failures: Mutex::new(HashMap::new()),
        }
    }
}

fn key(cs: &ContentServer) -> String {
    format!("{}/{}", cs.namespace().unwrap_or_default(), cs.name_any())
}

/// The controller's reconcile function: records metrics around [`reconcile_inner`].
pub async fn reconcile(cs: Arc<ContentServer>, ctx: Arc<Context>) -> Result<Action, Error> {
    let start = Instant::now();
    let res = reconcile_inner(&cs, &ctx).await;
    ctx.metrics.duration.observe(start.elapsed().as_secs_f64());
    match &res {
        Ok((_, label)) => {
            ctx.metrics.reconciles.with_label_values(&[label]).inc();
            if let Ok(mut f) = ctx.failures.lock() {
                f.remove(&key(&cs));
            }
        }
        Err(e) => {
            ctx.metrics
                .reconciles
                .with_label_values(&[result::ERROR])
                .inc();
            ctx.metrics.errors.inc();
            tracing::warn!(contentserver = %key(&cs), error = %e, "reconcile failed");
            record_failure(&cs, &ctx, e).await;
        }
    }
    res.map(|(a, _)| a)
}

/// Best effort: show a failed reconcile as `Reconciled=False/ApplyFailed` (with an Event on the
/// transition). A failure to write the status is only logged; the error policy retries anyway.
async fn record_failure(cs: &ContentServer, ctx: &Context, err: &Error) {
    let previous = cs.status.clone().unwrap_or_default();
    let st = status::not_reconciled(
        &previous,
        "ApplyFailed",
        err.to_string(),
        cs.metadata.generation,
        Timestamp::now(),
    );
    if let Err(e) = write_status(ctx, cs, st).await {
        tracing::warn!(contentserver = %key(cs), error = %e, "cannot record the failure in status");
    }
}

/// The error policy: exponential backoff per object, 5 s doubling up to 5 min.
pub fn error_policy(cs: Arc<ContentServer>, _err: &Error, ctx: Arc<Context>) -> Action {
    let n = ctx
        .failures
        .lock()
        .map(|mut f| {
            let n = f.entry(key(&cs)).or_insert(0);
            *n = n.saturating_add(1);
            *n
        })
        .unwrap_or(1);
    Action::requeue(backoff(n))
}

/// Backoff after `n` consecutive failures.
pub fn backoff(n: u32) -> Duration {
    let secs = 5u64.saturating_mul(1u64 << n.saturating_sub(1).min(16));
    Duration::from_secs(secs.min(300))
}

async fn apply<K>(api: &Api<K>, obj: &K) -> Result<K, kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
}

async fn delete_if_exists<K>(
    api: &Api<K>,
    name: &str,
    dp: &DeleteParams,
) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, dp).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

async fn publish(
    ctx: &Context,
    cs: &ContentServer,
    warning: bool,
    reason: &str,
    note: String,
    action: &str,
) {
    let ev = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &cs.object_ref(&())).await {
        tracing::warn!(contentserver = %key(cs), error = %e, "cannot publish event");
    }
}

async fn write_status(
    ctx: &Context,
    cs: &ContentServer,
    st: ContentServerStatus,
) -> Result<(), Error> {
    let ns = cs.namespace().ok_or(Error::Missing("namespace"))?;
    let api: Api<ContentServer> = Api::namespaced(ctx.client.clone(), &ns);
    let old = cs.status.clone().unwrap_or_default();
    for t in status::transitions(&old.conditions, &st.conditions) {
        publish(ctx, cs, t.warning, &t.reason, t.message, "Reconcile").await;
    }
    if cs.status.as_ref() == Some(&st) {
        return Ok(());
    }
    let patch = serde_json::json!({ "status": st });
    api.patch_status(
        &cs.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

async fn reconcile_inner(
    cs: &ContentServer,
    ctx: &Context,
) -> Result<(Action, &'static str), Error> {
    let ns = cs.namespace().ok_or(Error::Missing("namespace"))?;
    let generation = cs.metadata.generation;
    let now = Timestamp::now();
    let previous = cs.status.clone().unwrap_or_default();

    if cs.spec.paused {
        let mut st = status::not_reconciled(
            &previous,
            "Paused",
            "spec.paused is true: children are left as they are".into(),
            generation,
            now,
        );
        st.observed_generation = generation;
        write_status(ctx, cs, st).await?;
        return Ok((Action::await_change(), result::PAUSED));
    }

    let mut errors = validation::validate_name(&cs.name_any());
    errors.extend(validation::validate(&cs.spec));
    if !errors.is_empty() {
        let message = errors
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("; ");
        let mut st =
            status::not_reconciled(&previous, "InvalidSpec", message.clone(), generation, now);
        st.observed_generation = generation;
        // A repeated invalid edit with a new message is worth a new event too.
        let old_msg = previous
            .conditions
            .iter()
            .find(|c| c.type_ == RECONCILED)
            .map(|c| c.message.clone());
        let same_reason = previous
            .conditions
            .iter()
            .any(|c| c.type_ == RECONCILED && c.reason == "InvalidSpec");
        if same_reason && old_msg.as_deref() != Some(message.as_str()) {
            publish(
                ctx,
                cs,
                true,
                "InvalidSpec",
                format!("Reconciled is False: {message}"),
                "Validate",
            )
            .await;
        }
        write_status(ctx, cs, st).await?;
        return Ok((Action::await_change(), result::INVALID));
    }

    let rendered = render(&cs.spec)?;
    let client = ctx.client.clone();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let stss: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let svcs: Api<Service> = Api::namespaced(client.clone(), &ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    let name = builders::workload_name(cs);

    apply(&cms, &configmap(cs, &rendered)).await?;
    apply(&svcs, &service::service(cs)).await?;

    let kind = WorkloadKind::of(&cs.spec);
    let mut notes: Vec<String> = Vec::new();
    let mut replacing = false;
    let state = match kind {
        WorkloadKind::StatefulSet => {
            apply(&svcs, &service::headless_service(cs)).await?;
            let desired = statefulset(cs, &rendered.hash);
            let existing = stss.get_opt(&name).await?;
            let terminating = existing
                .as_ref()
                .is_some_and(|e| e.metadata.deletion_timestamp.is_some());
            let conflict = existing
                .as_ref()
                .and_then(|e| immutable_change(e, &desired));
            if terminating {
                replacing = true;
                notes.push(
                    "waiting for the replaced StatefulSet to be removed (pods keep serving)".into(),
                );
                None
            } else if let Some(what) = conflict {
                let dp = DeleteParams::orphan();
                delete_if_exists(&stss, &name, &dp).await?;
                publish(
                    ctx,
                    cs,
                    false,
                    "StatefulSetReplaced",
                    format!("{what} changed (immutable): StatefulSet deleted with orphaning and will be recreated; pods keep serving, existing claims are kept as they are"),
                    "ReplaceStatefulSet",
                )
                .await;
                replacing = true;
                notes.push(format!(
                    "replacing the StatefulSet: {what} changed; existing pods and claims are kept"
                ));
                None
            } else {
                let applied = apply(&stss, &desired).await?;
                Some(sts_state(&applied, cs.spec.replicas))
            }
        }
        WorkloadKind::Deployment => {
            let applied = apply(&deps, &deployment(cs, &rendered.hash)).await?;
            Some(deployment_state(&applied, cs.spec.replicas))
        }
    };

    // The workload of the other kind goes only once the new one is fully ready.
    let ready = state.is_some_and(|s| s.ready >= cs.spec.replicas && s.observed_latest);
    match kind {
        WorkloadKind::StatefulSet => {
            if let Some(old) = deps.get_opt(&name).await?.filter(|d| owned_by(d, cs)) {
                if ready {
                    delete_if_exists(&deps, &old.name_any(), &DeleteParams::background()).await?;
                    publish(
                        ctx,
                        cs,
                        false,
                        "WorkloadReplaced",
                        "Deployment removed: the StatefulSet is ready".into(),
                        "ReplaceWorkload",
                    )
                    .await;
                } else {
                    notes.push(
                        "the previous Deployment keeps serving until the StatefulSet is ready"
                            .into(),
                    );
                }
            }
        }
        WorkloadKind::Deployment => {
            let old_sts = stss.get_opt(&name).await?.filter(|d| owned_by(d, cs));
            let sts_remains = old_sts.is_some() && !ready;
            if let Some(old) = old_sts {
                if ready {
                    delete_if_exists(&stss, &old.name_any(), &DeleteParams::background()).await?;
                    publish(
                        ctx,
                        cs,
                        false,
                        "WorkloadReplaced",
                        "StatefulSet removed: the Deployment is ready".into(),
                        "ReplaceWorkload",
                    )
                    .await;
                } else {
                    notes.push(
                        "the previous StatefulSet keeps serving until the Deployment is ready"
                            .into(),
                    );
                }
            }
            // The headless Service governs the StatefulSet's pods: it goes with them.
            if !sts_remains {
                delete_if_exists(
                    &svcs,
                    &builders::headless_service_name(cs),
                    &DeleteParams::default(),
                )
                .await?;
            }
        }
    }

    match pdb::pdb(cs) {
        Some(p) => {
            apply(&pdbs, &p).await?;
        }
        None => {
            delete_if_exists(&pdbs, &name, &DeleteParams::default()).await?;
        }
    }

    reconcile_servicemonitor(ctx, cs, &ns, &mut notes).await?;

    let w = state.unwrap_or(WorkloadState {
        desired: cs.spec.replicas,
        ..WorkloadState::default()
    });
    let note = (!notes.is_empty()).then(|| notes.join("; "));
    let conditions =
        status::workload_conditions(&previous.conditions, &w, note.as_deref(), generation, now);
    let mut st = status::with_conditions(Some(&previous), conditions);
    st.observed_generation = generation;
    st.replicas = w.replicas;
    st.ready_replicas = w.ready;
    st.selector = Some(builders::selector_string(cs));
    st.config_hash = Some(rendered.hash.clone());
    st.volumes = i32::try_from(cs.spec.volumes.len()).unwrap_or(i32::MAX);
    write_status(ctx, cs, st).await?;

    let requeue = if replacing || !w.rolled_out() {
        PROGRESS_REQUEUE
    } else {
        STEADY_REQUEUE
    };
    Ok((Action::requeue(requeue), result::OK))
}

async fn reconcile_servicemonitor(
    ctx: &Context,
    cs: &ContentServer,
    ns: &str,
    notes: &mut Vec<String>,
) -> Result<(), Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), ns, &servicemonitor::api_resource());
    let Some(sm) = servicemonitor::servicemonitor(cs) else {
        // Disabled: remove ours if it exists (404 also covers "CRD not installed").
        delete_if_exists(&api, &builders::workload_name(cs), &DeleteParams::default()).await?;
        return Ok(());
    };
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    if crds
        .get_opt(servicemonitor::SERVICEMONITOR_CRD)
        .await?
        .is_none()
    {
        notes.push(
            "ServiceMonitor not created: the Prometheus Operator CRD is not installed".into(),
        );
        return Ok(());
    }
    api.patch(
        &sm.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&sm),
    )
    .await?;
    Ok(())
}

fn owned_by<K: Resource>(obj: &K, cs: &ContentServer) -> bool {
    let uid = cs.meta().uid.as_deref();
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .any(|o| Some(o.uid.as_str()) == uid)
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

fn deployment_state(d: &Deployment, desired: i32) -> WorkloadState {
    let st = d.status.clone().unwrap_or_default();
    WorkloadState {
        desired,
        replicas: st.replicas.unwrap_or(0),
        ready: st.ready_replicas.unwrap_or(0),
        updated: st.updated_replicas.unwrap_or(0),
        observed_latest: st.observed_generation.is_some()
            && st.observed_generation >= d.metadata.generation,
    }
}

fn sts_state(s: &StatefulSet, desired: i32) -> WorkloadState {
    let st = s.status.clone().unwrap_or_default();
    WorkloadState {
        desired,
        replicas: st.replicas,
        ready: st.ready_replicas.unwrap_or(0),
        updated: st.updated_replicas.unwrap_or(0),
        observed_latest: st.observed_generation.is_some()
            && st.observed_generation >= s.metadata.generation,
    }
}
