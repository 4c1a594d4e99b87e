//! The NetworkPolicy of `spec.networkPolicy`: ingress to the pods is allowed from anywhere on
//! the HTTP port and only from the listed peers on the admin/metrics port (where `/metrics`,
//! `/config` and the token-protected purge live). The ports are named, as the Services' target
//! ports are: each pod's own number is allowed, so a port change cuts off no old pod while the
//! rollout keeps it serving. Pure.

use crate::builders::{child_meta, selector_labels, workload_name, HTTP_PORT, METRICS_PORT};
use crate::crd::ContentServer;
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn tcp(port: &str) -> Option<Vec<NetworkPolicyPort>> {
    Some(vec![NetworkPolicyPort {
        port: Some(IntOrString::String(port.into())),
        protocol: Some("TCP".into()),
        ..NetworkPolicyPort::default()
    }])
}

/// The NetworkPolicy, or None without `spec.networkPolicy`.
pub fn network_policy(cs: &ContentServer) -> Option<NetworkPolicy> {
    let np = cs.spec.network_policy.as_ref()?;
    let mut ingress = vec![NetworkPolicyIngressRule {
        // No `from`: every source may reach the HTTP port.
        from: None,
        ports: tcp(HTTP_PORT),
    }];
    if !np.metrics_from.is_empty() {
        ingress.push(NetworkPolicyIngressRule {
            from: Some(
                np.metrics_from
                    .iter()
                    .map(|p| NetworkPolicyPeer {
                        namespace_selector: p.namespace_selector.clone(),
                        pod_selector: p.pod_selector.clone(),
                        ..NetworkPolicyPeer::default()
                    })
                    .collect(),
            ),
            ports: tcp(METRICS_PORT),
        });
    }
    Some(NetworkPolicy {
        metadata: child_meta(cs, workload_name(cs)),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(selector_labels(cs)),
                ..LabelSelector::default()
            }),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(ingress),
            ..NetworkPolicySpec::default()
        }),
    })
}
