//! The client-facing Service (and, for a StatefulSet, its headless governing Service, and for
//! a client Service published outside the cluster, a ClusterIP Service of the admin port).
//! The `metrics` port (the admin listener: /metrics, /config, purges) is never published
//! outside the cluster: a ClusterIP client Service carries it beside `http`, a NodePort or
//! LoadBalancer one does not, and `NAME-metrics` carries it instead; the ServiceMonitor
//! scrapes whichever has it ([`metrics_role`]). Pure.

use crate::builders::{child_meta, headless_service_name, selector_labels, workload_name};
use crate::crd::ContentServer;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Label telling the client Service from the headless one (the ServiceMonitor selects `client`).
pub const ROLE_LABEL: &str = "contentserver.dev/service";

fn port(name: &str, port: i32) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port,
        target_port: Some(IntOrString::String(name.into())),
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    }
}

fn ports(cs: &ContentServer, service_port: i32) -> Vec<ServicePort> {
    vec![
        port(super::HTTP_PORT, service_port),
        port(super::METRICS_PORT, cs.spec.metrics.port),
    ]
}

/// Whether the client Service is published outside the cluster (NodePort, LoadBalancer).
fn published(cs: &ContentServer) -> bool {
    cs.spec.service.type_.published()
}

/// The [`ROLE_LABEL`] value of the Service carrying the `metrics` port.
pub fn metrics_role(cs: &ContentServer) -> &'static str {
    if published(cs) {
        "metrics"
    } else {
        "client"
    }
}

/// Name of the ClusterIP Service of the admin port of a published client Service.
pub fn metrics_service_name(cs: &ContentServer) -> String {
    format!("{}-metrics", workload_name(cs))
}

/// The ClusterIP Service of the `metrics` port, when the client Service is published
/// outside the cluster (else None: the client Service carries the port).
pub fn metrics_service(cs: &ContentServer) -> Option<Service> {
    if !published(cs) {
        return None;
    }
    let mut meta = child_meta(cs, metrics_service_name(cs));
    if let Some(l) = meta.labels.as_mut() {
        l.insert(ROLE_LABEL.into(), "metrics".into());
    }
    Some(Service {
        metadata: meta,
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector_labels(cs)),
            ports: Some(vec![port(super::METRICS_PORT, cs.spec.metrics.port)]),
            ip_family_policy: ip_family_policy(cs),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

/// `spec.service.ipFamilyPolicy`, for every Service (unset: the cluster's default).
fn ip_family_policy(cs: &ContentServer) -> Option<String> {
    cs.spec.service.ip_family_policy.map(|p| p.as_str().into())
}

/// The Service clients use.
pub fn service(cs: &ContentServer) -> Service {
    let mut meta = child_meta(cs, workload_name(cs));
    if let Some(l) = meta.labels.as_mut() {
        l.insert(ROLE_LABEL.into(), "client".into());
    }
    if !cs.spec.service.annotations.is_empty() {
        meta.annotations = Some(cs.spec.service.annotations.clone());
    }
    Service {
        metadata: meta,
        spec: Some(ServiceSpec {
            type_: Some(cs.spec.service.type_.as_str().into()),
            selector: Some(selector_labels(cs)),
            ports: Some(if published(cs) {
                vec![port(super::HTTP_PORT, cs.spec.service.port)]
            } else {
                ports(cs, cs.spec.service.port)
            }),
            ip_family_policy: ip_family_policy(cs),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The headless Service governing a StatefulSet's pod DNS names.
pub fn headless_service(cs: &ContentServer) -> Service {
    let mut meta = child_meta(cs, headless_service_name(cs));
    if let Some(l) = meta.labels.as_mut() {
        l.insert(ROLE_LABEL.into(), "headless".into());
    }
    Service {
        metadata: meta,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector_labels(cs)),
            ports: Some(ports(cs, cs.spec.server.port)),
            ip_family_policy: ip_family_policy(cs),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}
