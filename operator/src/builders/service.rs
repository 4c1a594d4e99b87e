//! The client-facing Service (and, for a StatefulSet, its headless governing Service).
//! Both expose the `http` and `metrics` ports; the ServiceMonitor scrapes `metrics`. Pure.

use crate::builders::{child_meta, headless_service_name, selector_labels, workload_name};
use crate::crd::ContentServer;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Label telling the client Service from the headless one (the ServiceMonitor selects `client`).
pub const ROLE_LABEL: &str = "contentserver.dev/service";

fn ports(cs: &ContentServer, service_port: i32) -> Vec<ServicePort> {
    vec![
        ServicePort {
            name: Some("http".into()),
            port: service_port,
            target_port: Some(IntOrString::String("http".into())),
            protocol: Some("TCP".into()),
            ..ServicePort::default()
        },
        ServicePort {
            name: Some("metrics".into()),
            port: cs.spec.metrics.port,
            target_port: Some(IntOrString::String("metrics".into())),
            protocol: Some("TCP".into()),
            ..ServicePort::default()
        },
    ]
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
            ports: Some(ports(cs, cs.spec.service.port)),
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
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}
