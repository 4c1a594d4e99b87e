//! Wiring of the kube-runtime Controller: which objects are watched, where (all namespaces or a
//! list), the reconcile and error-policy functions, the Event recorder and the gauge of managed
//! ContentServers. Must not contain reconcile logic (see `reconcile/`).
//!
//! # API access (the Helm chart's RBAC is built from this list; keep it exact)
//!
//! | API group | resource | verbs | why |
//! |---|---|---|---|
//! | contentserver.dev | contentservers | list, watch | the primary resource |
//! | contentserver.dev | contentservers/status | patch | status and conditions |
//! | "" (core) | configmaps | get, list, watch, create, patch, delete | rendered server config, one per config hash (earlier ones deleted after the rollout) |
//! | "" (core) | services | get, list, watch, create, patch, delete | client + headless Services |
//! | apps | deployments | get, list, watch, create, patch, delete | workload without per-pod claims |
//! | apps | statefulsets | get, list, watch, create, patch, delete | workload with claim templates (orphan delete on immutable change) |
//! | policy | poddisruptionbudgets | get, list, watch, create, patch, delete | PDB when replicas > 1 |
//! | autoscaling | horizontalpodautoscalers | get, list, watch, create, patch, delete | HPA of spec.autoscaling |
//! | networking.k8s.io | ingresses | get, list, watch, create, patch, delete | Ingress of spec.expose.ingress |
//! | networking.k8s.io | networkpolicies | get, list, watch, create, patch, delete | NetworkPolicy of spec.networkPolicy |
//! | gateway.networking.k8s.io | httproutes | get, create, patch, delete | optional HTTPRoute (CRD may be missing: not watched) |
//! | monitoring.coreos.com | servicemonitors | get, create, patch, delete | optional ServiceMonitor (CRD may be missing: not watched) |
//! | events.k8s.io | events | create, patch | Events on the ContentServer |
//! | coordination.k8s.io | leases | get, create, update | leader election (operator's own namespace; the chart limits get and update to the `--lease-name`) |
//!
//! # Objects that do not decode
//!
//! ContentServers are watched untyped and decoded one by one (`watch.rs`): one that the typed
//! `ContentServer` cannot hold (an integer beyond its Rust type, a value an older CRD allowed)
//! is reported on its own, a short warning naming the object and the field and a Warning Event
//! on it, while the others are reconciled. The CRD prevents most of it (every integer carries
//! its type's bounds, `crd::bounds`). [`log_filter`] keeps kube's client from logging whole
//! response bodies.
//!
//! Server-side apply is a PATCH (`create` is listed because apply creates missing objects). Every
//! child is read (`get`) before it is applied or deleted: the operator writes only objects it
//! owns (`reconcile/api.rs`). A missing optional CRD shows as a 404 for its kind: no CRD read
//! access is needed.

use crate::builders::servicemonitor;
use crate::crd::ContentServer;
use crate::metrics::Metrics;
use crate::reconcile::{error_policy, reconcile, Context};
use crate::validation::Policy;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{predicates, watcher, Controller, PredicateConfig, WatchStreamExt};
use kube::Client;
use std::sync::Arc;
use std::time::Duration;

/// Name reported on Events.
pub const CONTROLLER_NAME: &str = "content-operator";

/// Where to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    All,
    Namespaces(Vec<String>),
}

/// An Api over one namespace, or all.
fn scoped<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

pub use crate::watch::{brief, MAX_ERROR_LEN};

/// The process's log filter: `RUST_LOG` (default `info`), with kube's HTTP client held to
/// errors unless `RUST_LOG` names `kube_client` (its warning on a body that does not decode
/// carries the whole body, e.g. every ContentServer of a LIST, on every retry).
pub fn log_filter(rust_log: Option<&str>) -> tracing_subscriber::EnvFilter {
    let filter = rust_log
        .and_then(|v| tracing_subscriber::EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| "info".into());
    if rust_log.is_some_and(|v| v.contains("kube_client")) {
        return filter;
    }
    match "kube_client::client=error".parse() {
        Ok(d) => filter.add_directive(d),
        Err(_) => filter,
    }
}

/// Run the controller(s) until a shutdown signal.
pub async fn run(client: Client, scope: Scope, metrics: Metrics, instance: String, policy: Policy) {
    let reporter = Reporter {
        controller: CONTROLLER_NAME.into(),
        instance: Some(instance),
    };
    let recorder = Recorder::new(client.clone(), reporter.clone());
    let ctx = Arc::new(Context::new(
        client.clone(),
        reporter,
        metrics.clone(),
        policy,
    ));
    let resource = ApiResource::erase::<ContentServer>(&());
    let apis: Vec<(Api<DynamicObject>, Option<String>)> = match scope {
        Scope::All => vec![(Api::all_with(client.clone(), &resource), None)],
        Scope::Namespaces(list) => list
            .into_iter()
            .map(|ns| {
                let api = Api::namespaced_with(client.clone(), &ns, &resource);
                (api, Some(ns))
            })
            .collect(),
    };
    let mut runs = Vec::new();
    let mut stores = Vec::new();
    for (api, ns) in apis {
        let cms: Api<ConfigMap> = scoped(&client, ns.as_deref());
        let deps: Api<Deployment> = scoped(&client, ns.as_deref());
        let stss: Api<StatefulSet> = scoped(&client, ns.as_deref());
        let svcs: Api<Service> = scoped(&client, ns.as_deref());
        let pdbs: Api<PodDisruptionBudget> = scoped(&client, ns.as_deref());
        let hpas: Api<HorizontalPodAutoscaler> = scoped(&client, ns.as_deref());
        let ingresses: Api<Ingress> = scoped(&client, ns.as_deref());
        let netpols: Api<NetworkPolicy> = scoped(&client, ns.as_deref());
        let owned = watcher::Config::default().labels(&format!(
            "{}={}",
            crate::builders::MANAGED_BY_LABEL,
            crate::builders::FIELD_MANAGER
        ));
        let (contentservers, store) = crate::watch::contentservers(
            api,
            watcher::Config::default().any_semantic(),
            recorder.clone(),
        );
        // Only a new generation (a spec change, a deletion's start) triggers: the operator's
        // own status writes would retrigger at once, past the error policy's backoff, and in a
        // loop when a failure's text differs each time. Children, requeues and the
        // periodic resync reconcile the rest.
        let contentservers =
            contentservers.predicate_filter(predicates::generation, PredicateConfig::default());
        let controller = Controller::for_stream(contentservers, store)
            .owns(cms, owned.clone())
            .owns(deps, owned.clone())
            .owns(stss, owned.clone())
            .owns(svcs, owned.clone())
            .owns(pdbs, owned.clone())
            // A new HPA, an edited spec, a deletion; not the autoscaler's status syncs.
            .owns_stream(crate::watch::hpa_triggers(hpas, owned.clone()))
            .owns(ingresses, owned.clone())
            .owns(netpols, owned)
            .shutdown_on_signal();
        stores.push(controller.store());
        let ctx = ctx.clone();
        let watch_errors = metrics.watch_errors.clone();
        runs.push(async move {
            controller
                .run(reconcile, error_policy, ctx)
                .for_each(|res| {
                    let watch_errors = watch_errors.clone();
                    async move {
                        match res {
                            Err(kube::runtime::controller::Error::QueueError(e)) => {
                                watch_errors.inc();
                                tracing::warn!(
                                    error = %brief(&e),
                                    "watching ContentServers or their children failed (retrying)"
                                );
                            }
                            Err(e) => tracing::debug!(error = %e, "controller event"),
                            Ok(_) => {}
                        }
                    }
                })
                .await;
        });
    }
    let gauge = metrics.managed.clone();
    let counter = tokio::spawn(async move {
        loop {
            let n: usize = stores.iter().map(|s| s.state().len()).sum();
            gauge.set(i64::try_from(n).unwrap_or(i64::MAX));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    tracing::info!(
        servicemonitor_crd = servicemonitor::SERVICEMONITOR_CRD,
        "controller running"
    );
    futures::future::join_all(runs).await;
    counter.abort();
}
