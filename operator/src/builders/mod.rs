//! Pure functions from a `ContentServer` to the child objects the operator applies.
//!
//! Owns object names, labels, the selector and owner references shared by every child. Nothing
//! here talks to the API server, reads the clock or the environment: same input, same output
//! (which is what the builder unit tests pin down).

pub mod cache;
pub mod configmap;
pub mod expose;
pub mod hpa;
pub mod networkpolicy;
pub mod pdb;
pub mod service;
pub mod servicemonitor;
pub mod workload;

use crate::crd::ContentServer;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;

/// Field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "content-operator";
/// Pod template annotation holding the config hash: a change rolls the pods.
pub const CONFIG_HASH_ANNOTATION: &str = "contentserver.dev/config-hash";
/// Label naming the application.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
/// Label naming the ContentServer.
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Label naming the operator.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`NAME_LABEL`].
pub const APP_NAME: &str = "content-server";
/// Name of the container's HTTP port: Services, probes and the NetworkPolicy name it, so that
/// a port change reaches old pods and new ones alike during the rollout.
pub const HTTP_PORT: &str = "http";
/// Name of the container's admin port (`/metrics`, probes, purge).
pub const METRICS_PORT: &str = "metrics";

/// Selector labels: the same on every child and on the pods.
pub fn selector_labels(cs: &ContentServer) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_LABEL.to_string(), APP_NAME.to_string()),
        (INSTANCE_LABEL.to_string(), cs.name_any()),
    ])
}

/// The in-cluster URL of the client Service (status.url).
pub fn service_url(cs: &ContentServer) -> String {
    format!(
        "http://{}.{}.svc:{}",
        workload_name(cs),
        cs.namespace().unwrap_or_default(),
        cs.spec.service.port
    )
}

/// The selector as a string (status.selector, for the scale subresource).
pub fn selector_string(cs: &ContentServer) -> String {
    selector_labels(cs)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Labels of every child object.
pub fn labels(cs: &ContentServer) -> BTreeMap<String, String> {
    let mut l = selector_labels(cs);
    l.insert(MANAGED_BY_LABEL.to_string(), FIELD_MANAGER.to_string());
    l
}

/// The controller owner reference (absent only for an object without uid, which the API
/// server never returns).
pub fn owner_ref(cs: &ContentServer) -> Option<OwnerReference> {
    cs.controller_owner_ref(&())
}

/// Metadata of a child named `name`.
pub fn child_meta(cs: &ContentServer, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: cs.namespace(),
        labels: Some(labels(cs)),
        owner_references: owner_ref(cs).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// Name of the ConfigMap holding one version of the config: each rendered config (by its hash)
/// has its own, so a pod always reads the config of its own template, also when it restarts in
/// the middle of a rollout to another one.
pub fn configmap_name(cs: &ContentServer, config_hash: &str) -> String {
    format!("{}{config_hash}", configmap_prefix(cs))
}
/// What every config ConfigMap's name of this ContentServer starts with.
pub fn configmap_prefix(cs: &ContentServer) -> String {
    format!("{}-config-", cs.name_any())
}
/// Name of the Deployment or StatefulSet, the Service, the PDB, the ServiceMonitor, the HPA,
/// the HTTPRoute, the Ingress and the NetworkPolicy.
pub fn workload_name(cs: &ContentServer) -> String {
    cs.name_any()
}
/// Name of the headless Service of a StatefulSet.
pub fn headless_service_name(cs: &ContentServer) -> String {
    format!("{}-headless", cs.name_any())
}
/// Pod volume name of a data volume.
pub fn pod_volume_name(volume: &str) -> String {
    format!("vol-{volume}")
}
