//! `spec.expose` (a Gateway API HTTPRoute and/or an Ingress in front of the Service) and
//! `spec.networkPolicy` (who may reach which port). API shape only; the objects are built by
//! `builders::expose` and `builders::networkpolicy`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How clients outside the cluster reach the Service. Both parts are optional; removing one
/// deletes the object the operator made for it.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct ExposeSpec {
    /// A Gateway API HTTPRoute (gateway.networking.k8s.io/v1) attached to existing Gateways.
    pub http_route: Option<HttpRouteExpose>,
    /// A networking.k8s.io/v1 Ingress.
    pub ingress: Option<IngressExpose>,
}

/// The HTTPRoute: one rule matching every route prefix (`PathPrefix`), backed by the Service.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteExpose {
    /// Gateways (or listeners of them) the route attaches to. Two references to the same Gateway
    /// must both set sectionName, each a different one (the Gateway API's rule; port does not
    /// tell them apart).
    #[schemars(
        length(min = 1, max = 32),
        extend("x-kubernetes-validations" = [
            {
                "rule": "self.all(p1, self.all(p2, p1.name == p2.name && ((!has(p1.__namespace__) && !has(p2.__namespace__)) || (has(p1.__namespace__) && has(p2.__namespace__) && p1.__namespace__ == p2.__namespace__)) ? has(p1.sectionName) == has(p2.sectionName) : true))",
                "message": "sectionName must be specified when parentRefs includes 2 or more references to the same parent",
                "reason": "FieldValueRequired"
            },
            {
                "rule": "self.all(p1, self.exists_one(p2, p1.name == p2.name && ((!has(p1.__namespace__) && !has(p2.__namespace__)) || (has(p1.__namespace__) && has(p2.__namespace__) && p1.__namespace__ == p2.__namespace__)) && ((!has(p1.sectionName) && !has(p2.sectionName)) || (has(p1.sectionName) && has(p2.sectionName) && p1.sectionName == p2.sectionName))))",
                "message": "sectionName must be unique when parentRefs includes 2 or more references to the same parent",
                "reason": "FieldValueDuplicate"
            }
        ])
    )]
    pub parent_refs: Vec<GatewayParentRef>,
    /// Host names the route answers; empty = the Gateway listener's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub hostnames: Vec<Hostname>,
    /// Extra annotations on the HTTPRoute.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A dotted-quad IPv4 address as Go's `net.ParseIP` reads one (no leading zeros).
/// (`[.]`, not `\.`: the pattern sits in a CEL string literal, where `\.` is no escape.)
pub const IPV4_PATTERN: &str = "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$";

/// A host name (RFC 1123; a leading `*.` wildcard label is allowed), not an IP address: the
/// API server refuses one as an Ingress host, and the Gateway API as an HTTPRoute hostname.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(transparent)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": format!("!self.matches('{IPV4_PATTERN}')"),
    "message": "must be a DNS name, not an IP address"
}]))]
pub struct Hostname(
    #[schemars(
        length(min = 1, max = 253),
        regex(
            pattern = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
        )
    )]
    pub String,
);

/// A Gateway the HTTPRoute attaches to (Gateway API `ParentReference`, kind Gateway).
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayParentRef {
    /// Name of the Gateway.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the Gateway (default: the ContentServer's). A DNS label, as the Gateway
    /// API's own schema requires.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub namespace: Option<String>,
    /// A listener of the Gateway, by name (a DNS subdomain, as the Gateway API requires).
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub section_name: Option<String>,
    /// A listener of the Gateway, by port.
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
}

/// The Ingress: one rule per host, a `Prefix` path per route prefix, backed by the Service.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressExpose {
    /// IngressClass; unset uses the cluster's default class.
    #[schemars(length(min = 1, max = 253))]
    pub class_name: Option<String>,
    /// Host names of the rules.
    #[schemars(length(min = 1, max = 16))]
    pub hosts: Vec<Hostname>,
    /// Terminate TLS for every host with this Secret.
    pub tls: Option<IngressTls>,
    /// Annotations on the Ingress (controller-specific settings).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// TLS of the Ingress.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressTls {
    /// Secret (type kubernetes.io/tls) in the ContentServer's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
}

/// A NetworkPolicy for the pods: anyone may reach the HTTP port; only `metricsFrom` reaches the
/// admin/metrics port (`/metrics`, `/config` and, with caches, purge).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    /// Peers allowed on the admin/metrics port, e.g. the monitoring namespace. Empty: nobody
    /// (kubelet probes come from the node, which network plugins let through).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub metrics_from: Vec<NetworkPeer>,
}

/// Pods selected by namespace and/or pod labels (both set: those pods in those namespaces).
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.namespaceSelector) || has(self.podSelector)",
    "message": "set namespaceSelector, podSelector or both"
}]))]
pub struct NetworkPeer {
    pub namespace_selector: Option<LabelSelector>,
    pub pod_selector: Option<LabelSelector>,
}
