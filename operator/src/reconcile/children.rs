//! Apply every child the spec wants, in dependency order: the ConfigMap (pods mount it), the
//! Services, the workload, then the optional children (PDB, ServiceMonitor), each pruned when
//! the spec stops wanting it. Must not remove the workload of the other kind (see `replace.rs`).

use crate::builders::configmap::{configmap, render};
use crate::builders::workload::{deployment, WorkloadKind};
use crate::builders::{self, pdb, service, servicemonitor};
use crate::reconcile::api::{apply, apply_or_delete};
use crate::reconcile::{replace, Error, Scope};
use crate::status::WorkloadState;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject};

/// What applying the children left behind, for the status step.
pub struct Applied {
    pub config_hash: String,
    pub kind: WorkloadKind,
    /// The workload's rollout state; None while a StatefulSet is being replaced.
    pub state: Option<WorkloadState>,
    /// Pending work, shown in the Reconciled condition's message.
    pub notes: Vec<String>,
    /// A StatefulSet replacement is under way (requeue soon).
    pub replacing: bool,
}

/// Apply the ConfigMap, the Services, the workload, the PDB and the ServiceMonitor.
pub async fn apply_all(scope: &Scope<'_>) -> Result<Applied, Error> {
    let cs = scope.cs;
    let rendered = render(&cs.spec)?;
    let cms: Api<ConfigMap> = scope.api();
    let svcs: Api<Service> = scope.api();
    apply(&cms, &configmap(cs, &rendered)).await?;
    apply(&svcs, &service::service(cs)).await?;

    let mut applied = Applied {
        config_hash: rendered.hash,
        kind: WorkloadKind::of(&cs.spec),
        state: None,
        notes: Vec::new(),
        replacing: false,
    };
    match applied.kind {
        WorkloadKind::StatefulSet => {
            apply(&svcs, &service::headless_service(cs)).await?;
            replace::apply_statefulset(scope, &mut applied).await?;
        }
        WorkloadKind::Deployment => {
            let deps: Api<Deployment> = scope.api();
            let d = apply(&deps, &deployment(cs, &applied.config_hash)).await?;
            let s = d.status.unwrap_or_default();
            applied.state = Some(rollout_state(
                &d.metadata,
                cs.spec.replicas,
                [s.replicas, s.ready_replicas, s.updated_replicas],
                s.observed_generation,
            ));
        }
    }

    let name = builders::workload_name(cs);
    let pdbs: Api<PodDisruptionBudget> = scope.api();
    apply_or_delete(&pdbs, &name, pdb::pdb(cs)).await?;
    apply_servicemonitor(scope, &mut applied.notes).await?;
    Ok(applied)
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

/// The ServiceMonitor, when enabled and its CRD (Prometheus Operator) is installed.
async fn apply_servicemonitor(scope: &Scope<'_>, notes: &mut Vec<String>) -> Result<(), Error> {
    let client = scope.ctx.client.clone();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &scope.ns, &servicemonitor::api_resource());
    let desired = servicemonitor::servicemonitor(scope.cs);
    if desired.is_some() {
        let crds: Api<CustomResourceDefinition> = Api::all(client);
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
    }
    // Disabled: remove ours if it exists (404 also covers "CRD not installed").
    apply_or_delete(&api, &builders::workload_name(scope.cs), desired).await?;
    Ok(())
}
