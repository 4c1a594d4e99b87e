//! `spec.expose`: the Gateway API HTTPRoute and the Ingress in front of the client Service.
//! Both send every route prefix of the spec (`/` with no routes) to the Service's `http` port,
//! so what is reachable outside is exactly what the server serves. Pure.
//!
//! A route prefix is a decoded path (the server matches it against the decoded request path).
//! The HTTPRoute gets it percent-encoded ([`encoded_prefix`]): the Gateway API takes only the
//! characters a path may hold bare, and a Gateway matches the encoded request path. The Ingress
//! gets it as written: Kubernetes accepts any character in an Ingress path, and Ingress
//! controllers (ingress-nginx) match the decoded path.

use crate::builders::{child_meta, workload_name};
use crate::crd::ContentServer;
use crate::gateway::{
    HTTPBackendRef, HTTPPathMatch, HTTPRoute, HTTPRouteMatch, HTTPRouteRule, HTTPRouteSpec,
};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, IngressTLS, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A route prefix as an HTTP request carries it: every byte but the ones a path holds bare
/// (RFC 3986 unreserved, sub-delimiters, `:`, `@` and `/`) as `%XX` (upper-case hex, the
/// server's canonical form), so `/vidéos` is `/vid%C3%A9os` and `/a b` is `/a%20b`.
pub fn encoded_prefix(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len());
    for b in prefix.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The URI prefixes the server answers: every route's prefix, in spec order, or `/`.
pub fn path_prefixes(cs: &ContentServer) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in &cs.spec.routes {
        if !out.contains(&r.prefix) {
            out.push(r.prefix.clone());
        }
    }
    if out.is_empty() {
        out.push("/".into());
    }
    out
}

/// The external host names the spec asks for (HTTPRoute hostnames, then Ingress hosts), once each.
pub fn hostnames(cs: &ContentServer) -> Vec<String> {
    let Some(e) = &cs.spec.expose else {
        return Vec::new();
    };
    let route = e.http_route.iter().flat_map(|r| &r.hostnames);
    let ingress = e.ingress.iter().flat_map(|i| &i.hosts);
    let mut out: Vec<String> = Vec::new();
    for h in route.chain(ingress) {
        if !out.contains(&h.0) {
            out.push(h.0.clone());
        }
    }
    out
}

fn meta(cs: &ContentServer, annotations: &BTreeMap<String, String>) -> ObjectMeta {
    let mut m = child_meta(cs, workload_name(cs));
    if !annotations.is_empty() {
        m.annotations = Some(annotations.clone());
    }
    m
}

/// The HTTPRoute, or None without `spec.expose.httpRoute`.
pub fn http_route(cs: &ContentServer) -> Option<HTTPRoute> {
    let r = cs.spec.expose.as_ref()?.http_route.as_ref()?;
    let spec = HTTPRouteSpec {
        parent_refs: r.parent_refs.clone(),
        hostnames: r.hostnames.iter().map(|h| h.0.clone()).collect(),
        rules: vec![HTTPRouteRule {
            matches: path_prefixes(cs)
                .into_iter()
                .map(|value| HTTPRouteMatch {
                    path: Some(HTTPPathMatch {
                        type_: "PathPrefix".into(),
                        value: encoded_prefix(&value),
                    }),
                })
                .collect(),
            backend_refs: vec![HTTPBackendRef {
                name: workload_name(cs),
                port: Some(cs.spec.service.port),
            }],
        }],
    };
    let mut route = HTTPRoute::new(&workload_name(cs), spec);
    route.metadata = meta(cs, &r.annotations);
    Some(route)
}

/// The Ingress, or None without `spec.expose.ingress`.
pub fn ingress(cs: &ContentServer) -> Option<Ingress> {
    let i = cs.spec.expose.as_ref()?.ingress.as_ref()?;
    let paths: Vec<HTTPIngressPath> = path_prefixes(cs)
        .into_iter()
        .map(|path| HTTPIngressPath {
            path: Some(path),
            path_type: "Prefix".into(),
            backend: IngressBackend {
                service: Some(IngressServiceBackend {
                    name: workload_name(cs),
                    port: Some(ServiceBackendPort {
                        number: Some(cs.spec.service.port),
                        ..ServiceBackendPort::default()
                    }),
                }),
                ..IngressBackend::default()
            },
        })
        .collect();
    let hosts: Vec<String> = i.hosts.iter().map(|h| h.0.clone()).collect();
    Some(Ingress {
        metadata: meta(cs, &i.annotations),
        spec: Some(IngressSpec {
            ingress_class_name: i.class_name.clone(),
            rules: Some(
                hosts
                    .iter()
                    .map(|h| IngressRule {
                        host: Some(h.clone()),
                        http: Some(HTTPIngressRuleValue {
                            paths: paths.clone(),
                        }),
                    })
                    .collect(),
            ),
            tls: i.tls.as_ref().map(|t| {
                vec![IngressTLS {
                    hosts: Some(hosts.clone()),
                    secret_name: Some(t.secret_name.clone()),
                }]
            }),
            ..IngressSpec::default()
        }),
        ..Ingress::default()
    })
}
