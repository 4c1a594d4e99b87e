//! The NetworkPolicy of `spec.networkPolicy`: ingress to the pods is allowed from anywhere on
//! the HTTP port and only from the listed peers on the admin/metrics port (where `/metrics`,
//! `/config` and the token-protected purge live). Pure.

use crate::builders::{child_meta, selector_labels, workload_name};
use crate::crd::ContentServer;
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn tcp(port: i32) -> Option<Vec<NetworkPolicyPort>> {
    Some(vec![NetworkPolicyPort {
        port: Some(IntOrString::Int(port)),
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
        ports: tcp(cs.spec.server.port),
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
            ports: tcp(cs.spec.metrics.port),
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
