//! The Prometheus Operator ServiceMonitor (`monitoring.coreos.com/v1`), as a dynamic object so
//! the operator needs no compiled-in Prometheus Operator types. Wanted only when
//! `spec.metrics.serviceMonitor.enabled`; the reconciler also checks that its CRD exists. Pure.

use crate::builders::service::ROLE_LABEL;
use crate::builders::{child_meta, selector_labels, workload_name};
use crate::crd::ContentServer;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

/// Name of the ServiceMonitor CRD.
pub const SERVICEMONITOR_CRD: &str = "servicemonitors.monitoring.coreos.com";

/// The API resource of ServiceMonitor.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("monitoring.coreos.com", "v1", "ServiceMonitor"),
        "servicemonitors",
    )
}

/// The ServiceMonitor, or None when disabled.
pub fn servicemonitor(cs: &ContentServer) -> Option<DynamicObject> {
    let sm = &cs.spec.metrics.service_monitor;
    if !sm.enabled {
        return None;
    }
    let mut meta = child_meta(cs, workload_name(cs));
    // The user's labels (a Prometheus selector's) go under the operator's own: a
    // `managed-by` or `instance` of theirs would make the child look like someone else's.
    let mut labels = sm.labels.clone();
    labels.extend(meta.labels.take().unwrap_or_default());
    meta.labels = Some(labels);
    // The dashboards and alerts (dashboards/README.md) select by a `contentserver` target label:
    // the ContentServer's name, from the pod label app.kubernetes.io/instance.
    let mut endpoint = json!({
        "port": super::METRICS_PORT,
        "path": "/metrics",
        "relabelings": [{
            "sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"],
            "targetLabel": "contentserver",
        }],
    });
    if let Some(interval) = &sm.interval {
        endpoint["interval"] = json!(interval);
    }
    let mut select = selector_labels(cs);
    select.insert(
        ROLE_LABEL.into(),
        crate::builders::service::metrics_role(cs).into(),
    );
    let mut obj = DynamicObject::new(&workload_name(cs), &api_resource());
    obj.metadata = meta;
    obj.data = json!({
        "spec": {
            "selector": {"matchLabels": select},
            "endpoints": [endpoint],
        }
    });
    Some(obj)
}
