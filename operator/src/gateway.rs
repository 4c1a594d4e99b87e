//! Gateway API `HTTPRoute` (gateway.networking.k8s.io/v1, standard channel): the typed subset
//! the operator writes. A local definition because the maintained crate (`gateway-api`) is built
//! on kube 4 / k8s-openapi 0.28, whose types do not work with this operator's kube 5 client.
//! Field names and shapes follow the upstream CRD (checked against it in tests/builders.rs).
//! Must not grow fields the operator does not set.

use crate::crd::GatewayParentRef;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// HTTPRoute spec: where it attaches, which hosts, which requests go to which backend.
#[serde_with::apply(Vec => #[serde(skip_serializing_if = "Vec::is_empty")])]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "HTTPRoute",
    plural = "httproutes",
    namespaced,
    schema = "disabled"
)]
#[serde(default, rename_all = "camelCase")]
pub struct HTTPRouteSpec {
    /// Gateway API `ParentReference`s: the spec's own, as they are (group and kind left to
    /// their defaults, a Gateway).
    pub parent_refs: Vec<GatewayParentRef>,
    pub hostnames: Vec<String>,
    pub rules: Vec<HTTPRouteRule>,
}

/// Requests matching any of `matches` go to `backendRefs`.
#[serde_with::apply(Vec => #[serde(skip_serializing_if = "Vec::is_empty")])]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct HTTPRouteRule {
    pub matches: Vec<HTTPRouteMatch>,
    pub backend_refs: Vec<HTTPBackendRef>,
}

/// A request match (the operator matches on the path only).
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct HTTPRouteMatch {
    pub path: Option<HTTPPathMatch>,
}

/// A path match: `type` is `Exact`, `PathPrefix` or `RegularExpression`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct HTTPPathMatch {
    #[serde(rename = "type")]
    pub type_: String,
    pub value: String,
}

/// A Service backend.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct HTTPBackendRef {
    pub name: String,
    pub port: Option<i32>,
}
