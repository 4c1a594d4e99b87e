//! Apply every child the spec wants, in dependency order: the ConfigMap (pods mount it), the
//! Services, the workload, then the optional children (PDB, HPA, NetworkPolicy, Ingress,
//! HTTPRoute, ServiceMonitor), each pruned when the spec stops wanting it. Past the workload
//! each child is attempted whatever became of the others; their refusals are kept in
//! `Applied::optional_failed` (the reconcile fails with them after the workload switch, the
//! pruning and the status). Every write goes
//! through the ownership check of `api.rs`: a same-named object this ContentServer does not own
//! is neither taken over nor deleted. A kind whose CRD is not installed (HTTPRoute,
//! ServiceMonitor: the API answers 404 for the kind) is reported in `Applied::missing_crds`, not
//! failed on. Must not remove the workload of the other kind (see `replace.rs`).
//!
//! Replicas: the workload always gets `spec.replicas`. With `spec.autoscaling` the HPA writes
//! that field through the ContentServer's scale subresource, so the operator (the only writer of
//! the workload's replicas) carries the HPA's decision to the pods and never writes the field the
//! HPA owns.

use crate::builders::configmap::{configmap, render};
use crate::builders::workload::{deployment, WorkloadKind};
use crate::builders::{self, expose, hpa, networkpolicy, pdb, service, servicemonitor};
use crate::crd::ContentServer;
use crate::gateway::HTTPRoute;
use crate::reconcile::api::{apply_or_delete, apply_owned};
use crate::reconcile::applied::{progress_deadline_exceeded, rollout_state, Applied};
use crate::reconcile::{replace, Error, Scope};
use crate::status::WorkloadState;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DynamicObject};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;

/// Apply the ConfigMap, the Services, the workload and the optional children.
pub async fn apply_all(scope: &Scope<'_>) -> Result<Applied, Error> {
    let cs = scope.cs;
    let rendered = render(&cs.spec)?;
    let cms: Api<ConfigMap> = scope.api();
    let svcs: Api<Service> = scope.api();
    apply_owned(&cms, cs, &configmap(cs, &rendered)).await?;
    apply_owned(&svcs, cs, &service::service(cs)).await?;

    let mut applied = Applied {
        config_hash: rendered.hash,
        kind: WorkloadKind::of(&cs.spec),
        state: None,
        notes: Vec::new(),
        missing_crds: Vec::new(),
        serving_elsewhere: 0,
        previous_workload_remains: false,
        optional_failed: None,
    };
    match applied.kind {
        WorkloadKind::StatefulSet => {
            apply_owned(&svcs, cs, &service::headless_service(cs)).await?;
            replace::apply_statefulset(scope, &mut applied).await?;
        }
        WorkloadKind::Deployment => {
            let deps: Api<Deployment> = scope.api();
            let d = apply_owned(&deps, cs, &deployment(cs, &applied.config_hash)).await?;
            let s = d.status.unwrap_or_default();
            let stalled = progress_deadline_exceeded(s.conditions.as_deref().unwrap_or_default());
            applied.state = rollout_state(
                &d.metadata,
                cs.spec.replicas,
                [s.replicas, s.ready_replicas, s.updated_replicas],
                s.observed_generation,
            )
            .map(|w| WorkloadState { stalled, ..w });
        }
    }

    // A failure past the workload (an admission webhook refusing the Ingress, say) must not
    // stop the workload switch, the pruning of old configs or the status: kept for the end.
    if let Err(e) = apply_optional(scope, &mut applied).await {
        applied.optional_failed = Some(e);
    }
    Ok(applied)
}

/// The children past the workload: the metrics Service, PDB, HPA, NetworkPolicy, Ingress,
/// HTTPRoute and ServiceMonitor. Each is applied (or pruned) whatever became of the others: a
/// refused Ingress must not keep the ServiceMonitor (the autoscaler's metric) from being
/// written. The refusals, if any, are returned together.
async fn apply_optional(scope: &Scope<'_>, applied: &mut Applied) -> Result<(), Error> {
    let cs = scope.cs;
    let svcs: Api<Service> = scope.api();
    let name = builders::workload_name(cs);
    let mut refused = Vec::new();
    let mut keep = |r: Result<(), Error>| {
        if let Err(e) = r {
            refused.push(e);
        }
    };
    let metrics_svc = service::metrics_service(cs);
    let metrics_name = service::metrics_service_name(cs);
    keep(
        apply_or_delete(&svcs, cs, "Service", &metrics_name, metrics_svc)
            .await
            .map(drop),
    );
    let pdbs: Api<PodDisruptionBudget> = scope.api();
    keep(
        apply_or_delete(&pdbs, cs, "PodDisruptionBudget", &name, pdb::pdb(cs))
            .await
            .map(drop),
    );
    let hpas: Api<HorizontalPodAutoscaler> = scope.api();
    keep(
        apply_or_delete(&hpas, cs, "HorizontalPodAutoscaler", &name, hpa::hpa(cs))
            .await
            .map(drop),
    );
    let netpols: Api<NetworkPolicy> = scope.api();
    let netpol = networkpolicy::network_policy(cs);
    keep(
        apply_or_delete(&netpols, cs, "NetworkPolicy", &name, netpol)
            .await
            .map(drop),
    );
    let ingresses: Api<Ingress> = scope.api();
    keep(
        apply_or_delete(&ingresses, cs, "Ingress", &name, expose::ingress(cs))
            .await
            .map(drop),
    );

    let routes: Api<HTTPRoute> = scope.api();
    let route = expose::http_route(cs);
    match apply_if_kind_exists(&routes, cs, "HTTPRoute", &name, route).await {
        Ok(true) => {}
        Ok(false) => applied
            .missing_crds
            .push("HTTPRoute (httproutes.gateway.networking.k8s.io)".into()),
        Err(e) => refused.push(e),
    }
    let sms: Api<DynamicObject> = Api::namespaced_with(
        scope.ctx.client.clone(),
        &scope.ns,
        &servicemonitor::api_resource(),
    );
    let sm = servicemonitor::servicemonitor(cs);
    match apply_if_kind_exists(&sms, cs, "ServiceMonitor", &name, sm).await {
        Ok(true) => {}
        Ok(false) => applied.missing_crds.push(format!(
            "ServiceMonitor ({})",
            servicemonitor::SERVICEMONITOR_CRD
        )),
        Err(e) => refused.push(e),
    }
    match refused.len() {
        0 => Ok(()),
        1 => Err(refused.remove(0)),
        _ => Err(Error::Several(refused)),
    }
}

/// [`apply_or_delete`] for a kind defined by an optional CRD: false when the API does not know
/// the kind (404 on the apply; a 404 on the delete of an unwanted child is already fine).
async fn apply_if_kind_exists<K>(
    api: &Api<K>,
    cs: &ContentServer,
    kind: &str,
    name: &str,
    desired: Option<K>,
) -> Result<bool, Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    match apply_or_delete(api, cs, kind, name, desired).await {
        Ok(_) => Ok(true),
        Err(Error::Call {
            source: kube::Error::Api(s),
            ..
        }) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}
