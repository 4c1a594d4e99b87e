//! The operator's own check of a ContentServer spec, run before anything is applied.
//!
//! A CRD may be installed without its CEL rules (or the apiserver may not enforce them), so the
//! same rules are checked here: the spec is rendered into the server's `Config` and checked with
//! `Config::field_errors()` (the server's rules, defined once), whose field paths are mapped back
//! to spec paths (`volumes[1].pool.max_queue` -> `spec.volumes[1].pool.maxQueue`), plus the
//! Kubernetes-side rules the server cannot know (one volume source, hostPath opt-in, ports,
//! quantities, the Gateway API's rules for HTTPRoute parents, a CPU request for a CPU target,
//! label, annotation and object-name syntax in `meta`).
//! Pure: no API calls.

use crate::builders::configmap::server_config;
use crate::builders::configmap::CONFIG_DIR;
use crate::crd::{
    default_cache_bytes, empty_dir_cache_bytes, quantity_bytes, quantity_nanos, quantity_value,
    ContentServerSpec, EmptyDirMedium, GatewayParentRef, EMPTY_DIR_CACHE_PERCENT, MAX_VOLUME_NAME,
    ORIGIN_CA_DIR, PURGE_TOKEN_DIR,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::HashSet;
use std::fmt;

mod meta;

pub use meta::{dns_label, dns_subdomain};

/// One invalid spec field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// Path in the resource, e.g. `spec.volumes[1].pool.threads`.
    pub field: String,
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// What Kubernetes refuses in an image reference (a container's image, an image volume's
/// reference) that the CRD's schema lets through.
fn image_problem(image: &str) -> Option<&'static str> {
    if image.trim().is_empty() {
        Some("must not be empty")
    } else if image.trim() != image {
        Some("must not have leading or trailing whitespace")
    } else {
        None
    }
}

/// What the operator itself allows, whatever a spec asks: set by the operator's flags (the
/// cluster admin), not by a ContentServer (its author).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Policy {
    /// `--allow-host-path`: a hostPath volume reads and writes the node's own files, so anyone
    /// who may create a ContentServer could mount any node directory. Off unless turned on.
    pub allow_host_path: bool,
}

/// What `policy` refuses in a spec that is otherwise valid (empty when allowed).
pub fn validate_policy(spec: &ContentServerSpec, policy: Policy) -> Vec<SpecError> {
    if policy.allow_host_path {
        return Vec::new();
    }
    spec.volumes
        .iter()
        .enumerate()
        .filter(|(_, v)| v.source.host_path.is_some())
        .map(|(i, _)| SpecError {
            field: format!("spec.volumes[{i}].source.hostPath"),
            message: "this operator does not allow hostPath volumes (its admin turns them on \
                      with --allow-host-path, the chart's allowHostPath)"
                .into(),
        })
        .collect()
}

/// All problems of a spec (empty when valid).
pub fn validate(spec: &ContentServerSpec) -> Vec<SpecError> {
    let mut errs = Vec::new();
    let mut push = |field: String, message: String| errs.push(SpecError { field, message });

    if spec.replicas < 0 {
        push("spec.replicas".into(), "must be at least 0".into());
    }
    if let Some(problem) = image_problem(&spec.image) {
        push("spec.image".into(), problem.into());
    }
    if let Some(e) = privileged_port_without_sysctl(spec) {
        push(e.field, e.message);
    }
    let mut mounts = HashSet::new();
    for (i, v) in spec.volumes.iter().enumerate() {
        let f = format!("spec.volumes[{i}]");
        if v.name.len() > MAX_VOLUME_NAME {
            push(
                format!("{f}.name"),
                format!("must be at most {MAX_VOLUME_NAME} characters"),
            );
        }
        let s = &v.source;
        let set = [
            s.persistent_volume_claim.is_some(),
            s.claim_template.is_some(),
            s.empty_dir.is_some(),
            s.host_path.is_some(),
            s.image.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count();
        if set != 1 {
            push(
                format!("{f}.source"),
                "set exactly one of persistentVolumeClaim, claimTemplate, emptyDir, hostPath, image"
                    .into(),
            );
        }
        if s.host_path.is_some() && !spec.allow_host_path {
            push(
                format!("{f}.source.hostPath"),
                "hostPath volumes require spec.allowHostPath: true".into(),
            );
        }
        if let Some(problem) = s.image.as_ref().and_then(|i| image_problem(&i.reference)) {
            push(format!("{f}.source.image.reference"), problem.into());
        }
        if let Some(pvc) = &s.persistent_volume_claim {
            if pvc.claim_name.is_empty() {
                push(
                    format!("{f}.source.persistentVolumeClaim.claimName"),
                    "must not be empty".into(),
                );
            }
        }
        if let Some(ct) = &s.claim_template {
            if !is_quantity(&ct.size) {
                push(
                    format!("{f}.source.claimTemplate.size"),
                    format!("{:?} is not a quantity such as 500Gi", ct.size),
                );
            } else if quantity_bytes(&ct.size) == Some(0) {
                push(
                    format!("{f}.source.claimTemplate.size"),
                    format!("{:?} is 0 bytes: a claim must have a size", ct.size),
                );
            }
            if ct.access_modes.is_empty() {
                push(
                    format!("{f}.source.claimTemplate.accessModes"),
                    "at least one access mode".into(),
                );
            }
        }
        if let Some(limit) = s.empty_dir.as_ref().and_then(|e| e.size_limit.as_ref()) {
            if !is_quantity(limit) {
                push(
                    format!("{f}.source.emptyDir.sizeLimit"),
                    format!("{limit:?} is not a quantity such as 1Gi"),
                );
            }
        }
        if let Some(hp) = &s.host_path {
            if !hp.path.starts_with('/') {
                push(
                    format!("{f}.source.hostPath.path"),
                    "must be an absolute path".into(),
                );
            } else if !is_clean_path(&hp.path) {
                // `/data/../etc` reaches outside the directory it names (and the kubelet
                // refuses `..` anyway): refused, like mountPath.
                push(
                    format!("{f}.source.hostPath.path"),
                    format!("{} must not contain '//' or '.' or '..' segments", hp.path),
                );
            }
        }
        let mp = ContentServerSpec::mount_path(v);
        // Refused rather than normalized: `/srv/../etc/content-server` would pass a string
        // comparison with the reserved paths below.
        if !is_clean_path(&mp) {
            push(
                format!("{f}.mountPath"),
                format!("{mp} must not contain '//' or '.' or '..' segments"),
            );
        }
        let reserved = [CONFIG_DIR, ORIGIN_CA_DIR, PURGE_TOKEN_DIR, "/tmp", "/"];
        let under = |dir: &str, path: &str| path.starts_with(&format!("{dir}/"));
        let trimmed = mp.trim_end_matches('/');
        // A directory itself, one inside it, or one holding it (`/etc` would put the config
        // and the purge token inside the served volume).
        let collides = |r: &&str| trimmed == *r || under(r, &mp) || under(trimmed, r);
        if reserved.iter().any(|r| *r != "/" && collides(r)) || mp == "/" {
            push(
                format!("{f}.mountPath"),
                format!("{mp} is reserved: it is, is inside or holds a directory the pod uses (/, /tmp, {CONFIG_DIR}, {ORIGIN_CA_DIR} and {PURGE_TOKEN_DIR})"),
            );
        }
        // The image's own files: the server binary, the C library and loader (distroless cc)
        // and the CA bundle https origins are verified with, hidden by a volume on, in or
        // above them; or a kernel filesystem the runtime mounts (a volume there fails the
        // container's start): a pod that never starts, or never reaches its origin.
        let image = [
            "/usr/local/bin",
            "/usr/lib",
            "/lib",
            "/lib64",
            "/etc/ssl",
            "/proc",
            "/sys",
            "/dev",
        ];
        if let Some(r) = image.iter().find(|r| collides(r)) {
            push(
                format!("{f}.mountPath"),
                format!("{mp} would hide or mount into {r}, which the container needs from its image or its runtime (its binary, C library and CA bundle; the kernel's filesystems): its pods would not start, or not verify https origins"),
            );
        }
        if !mounts.insert(mp.trim_end_matches('/').to_string()) {
            push(format!("{f}.mountPath"), format!("{mp} is mounted twice"));
        }
    }
    for (name, port) in [
        ("spec.server.port", spec.server.port),
        ("spec.metrics.port", spec.metrics.port),
        ("spec.service.port", spec.service.port),
    ] {
        if !(1..=65535).contains(&port) {
            push(name.into(), format!("{port} is not a port (1-65535)"));
        }
    }
    if spec.metrics.port == spec.server.port {
        push(
            "spec.metrics.port".into(),
            "must differ from spec.server.port".into(),
        );
    }
    if spec.service.port == spec.metrics.port && !spec.service.type_.published() {
        // A ClusterIP Service has a port for each: Kubernetes refuses two with the same
        // number. (A published one carries only `http`; metrics have a Service of their own.)
        push(
            "spec.service.port".into(),
            "must differ from spec.metrics.port (a ClusterIP Service exposes both)".into(),
        );
    }
    match &spec.pdb.max_unavailable {
        IntOrString::Int(n) if *n < 0 => push(
            "spec.pdb.maxUnavailable".into(),
            "must be at least 0".into(),
        ),
        IntOrString::String(s)
            if !(s.ends_with('%') && s[..s.len() - 1].parse::<u32>().is_ok_and(|p| p <= 100)) =>
        {
            push(
                "spec.pdb.maxUnavailable".into(),
                format!("{s:?} must be a number or a percentage such as 25%"),
            )
        }
        _ => {}
    }
    if let Some(a) = &spec.autoscaling {
        if !(1..=85).contains(&a.target_pool_utilization) {
            push(
                "spec.autoscaling.targetPoolUtilization".into(),
                format!(
                    "{} is outside 1..85 (the pool metric tops out at 100% and the HPA scales up only above 1.1 x its target: a higher target never scales up)",
                    a.target_pool_utilization
                ),
            );
        }
        if a.target_cpu_utilization.is_some() && !has_cpu_request(spec) {
            push(
                "spec.autoscaling.targetCPUUtilization".into(),
                "needs spec.resources.requests.cpu above 0 (or spec.resources.limits.cpu, which the request defaults to): the HPA measures CPU utilization against the request and, while that metric is missing, does not scale down".into(),
            );
        }
        if a.min_replicas > a.max_replicas {
            push(
                "spec.autoscaling.minReplicas".into(),
                format!(
                    "{} must not exceed maxReplicas {}",
                    a.min_replicas, a.max_replicas
                ),
            );
        }
    }
    if let Some(ca) = spec.origin.as_ref().and_then(|o| o.ca.as_ref()) {
        if ca.secret_key_ref.is_some() == ca.config_map_key_ref.is_some() {
            push(
                "spec.origin.ca".into(),
                "set exactly one of secretKeyRef and configMapKeyRef".into(),
            );
        }
    }
    for (i, peer) in spec
        .network_policy
        .iter()
        .flat_map(|n| n.metrics_from.iter())
        .enumerate()
    {
        if peer.namespace_selector.is_none() && peer.pod_selector.is_none() {
            push(
                format!("spec.networkPolicy.metricsFrom[{i}]"),
                "set namespaceSelector, podSelector or both".into(),
            );
        }
    }
    if let Some(e) = &spec.expose {
        let hosts = e.http_route.iter().flat_map(|r| {
            let f = |i| format!("spec.expose.httpRoute.hostnames[{i}]");
            r.hostnames.iter().enumerate().map(move |(i, h)| (f(i), h))
        });
        let ingress = e.ingress.iter().flat_map(|g| {
            let f = |i| format!("spec.expose.ingress.hosts[{i}]");
            g.hosts.iter().enumerate().map(move |(i, h)| (f(i), h))
        });
        for (field, h) in hosts.chain(ingress) {
            if h.0.parse::<std::net::Ipv4Addr>().is_ok() {
                push(
                    field,
                    format!("{:?} must be a DNS name, not an IP address", h.0),
                );
            }
        }
        for (i, message) in e
            .http_route
            .iter()
            .flat_map(|r| parent_ref_errors(&r.parent_refs))
        {
            push(
                format!("spec.expose.httpRoute.parentRefs[{i}]"),
                message.into(),
            );
        }
        if e.http_route.is_some() {
            for (i, r) in spec.routes.iter().enumerate() {
                let n = crate::builders::expose::encoded_prefix(&r.prefix).len();
                if n > HTTPROUTE_MAX_PATH {
                    push(
                        format!("spec.routes[{i}].prefix"),
                        format!("is {n} characters percent-encoded, as the HTTPRoute carries it: the Gateway API allows {HTTPROUTE_MAX_PATH}"),
                    );
                }
            }
        }
    }
    let mut unconverted = HashSet::new();
    for e in validate_cache(spec) {
        if e.field.ends_with(".maxSize") || e.field.ends_with(".sliceSize") {
            unconverted.insert(e.field.clone());
        }
        push(e.field, e.message);
    }
    let mut cfg = server_config(spec);
    cfg.normalize();
    for e in cfg.field_errors() {
        // A cache route without spec.origin was reported by validate_cache.
        if spec.origin.is_none() && e.field.starts_with("routes") && e.field.ends_with(".origin") {
            continue;
        }
        // Ports out of u16 range were reported above (the config holds 0 then).
        if e.field.starts_with("listeners") && !(1..=65535).contains(&spec.server.port) {
            continue;
        }
        let field = spec_path(&e.field);
        // A size that did not convert was reported above (the config holds a stand-in then).
        if unconverted.contains(&field) {
            continue;
        }
        push(field, e.message);
    }
    for e in resources_valid(spec) {
        push(e.field, e.message);
    }
    let monitor = &spec.metrics.service_monitor;
    if let (true, Some(i)) = (monitor.enabled, &monitor.interval) {
        if !is_prometheus_duration(i) {
            push(
                "spec.metrics.serviceMonitor.interval".into(),
                format!("{i:?} is not a Prometheus duration such as 30s or 1m30s"),
            );
        }
    }
    errs.extend(meta::errors(spec));
    errs
}

/// The Prometheus Operator's duration pattern (the CRD's, for a cluster without it): `0`, or
/// numbers with units in the order y, w, d, h, m, s, ms, each at most once.
fn is_prometheus_duration(s: &str) -> bool {
    const UNITS: [&str; 7] = ["y", "w", "d", "h", "m", "s", "ms"];
    if s == "0" {
        return true;
    }
    let mut rest = s;
    let mut next = 0;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let Some(at) = UNITS.iter().rposition(|u| rest.starts_with(u)) else {
            return false;
        };
        let unit = UNITS[at];
        if at < next {
            return false;
        }
        next = at + 1;
        rest = &rest[unit.len()..];
    }
    true
}

/// The CPU request the pods get, above 0: `resources.requests.cpu`, or without one
/// `resources.limits.cpu` (the API server defaults the request to the limit). The HPA's CPU
/// utilization is usage over it; a missing or zero request gives no metric.
fn has_cpu_request(spec: &ContentServerSpec) -> bool {
    let r = spec.resources.as_ref();
    let request = r
        .and_then(|r| r.requests.as_ref())
        .and_then(|m| m.get("cpu"));
    let limit = r.and_then(|r| r.limits.as_ref()).and_then(|m| m.get("cpu"));
    request
        .or(limit)
        .is_some_and(|q| quantity_value(&q.0).is_some_and(|v| v > 0.0))
}

/// The container's `resources`, as the API server would take them in the Deployment: each a
/// quantity of at least 0, and no request above its limit. (Refused there, the ContentServer
/// would fail every apply with its ConfigMap already written; here the field is named.)
fn resources_valid(spec: &ContentServerSpec) -> Vec<SpecError> {
    let Some(r) = &spec.resources else {
        return Vec::new();
    };
    let mut errs = Vec::new();
    let values = |kind: &str, m: Option<&std::collections::BTreeMap<String, Quantity>>| {
        m.into_iter()
            .flatten()
            .map(|(name, q)| {
                (
                    format!("spec.resources.{kind}.{name}"),
                    name.clone(),
                    q.0.clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    let requests = values("requests", r.requests.as_ref());
    let limits = values("limits", r.limits.as_ref());
    for (field, _, q) in requests.iter().chain(&limits) {
        match quantity_value(q) {
            Some(v) if v >= 0.0 => {}
            Some(_) => errs.push(SpecError {
                field: field.clone(),
                message: format!("{q:?} is negative"),
            }),
            None => errs.push(SpecError {
                field: field.clone(),
                message: format!("{q:?} is not a quantity such as 500m or 2Gi"),
            }),
        }
    }
    for (field, name, q) in &requests {
        let Some((_, _, lq)) = limits.iter().find(|(_, n, _)| n == name) else {
            continue;
        };
        // Exactly where both are plain quantities (`700m` is `0.7`: as f64 they differ).
        let above = match (quantity_nanos(q), quantity_nanos(lq)) {
            (Some(req), Some(lim)) => Some(req > lim),
            _ => quantity_value(q)
                .zip(quantity_value(lq))
                .map(|(req, lim)| req > lim * (1.0 + 1e-12)),
        };
        if above == Some(true) {
            errs.push(SpecError {
                field: field.clone(),
                message: format!("{q} is above its limit {lq}"),
            });
        }
    }
    errs
}

/// The Gateway API's two rules for an HTTPRoute's `parentRefs` (CEL in its CRD, the same in
/// ours): references to the same Gateway (name and namespace; unset is a value of its own) must
/// all set `sectionName`, and no two may name the same one (`port` does not count). Each
/// offending later reference, with the upstream message.
fn parent_ref_errors(refs: &[GatewayParentRef]) -> Vec<(usize, &'static str)> {
    // Set and not empty (the Gateway API reads an empty namespace or sectionName as unset).
    fn given(s: &Option<String>) -> Option<&str> {
        s.as_deref().filter(|s| !s.is_empty())
    }
    let mut errs = Vec::new();
    for (i, p) in refs.iter().enumerate() {
        let same_parent =
            |q: &&GatewayParentRef| q.name == p.name && given(&q.namespace) == given(&p.namespace);
        let earlier: Vec<_> = refs[..i].iter().filter(same_parent).collect();
        if earlier
            .iter()
            .any(|q| given(&q.section_name).is_some() != given(&p.section_name).is_some())
        {
            errs.push((i, "sectionName must be specified when parentRefs includes 2 or more references to the same parent"));
        }
        if earlier
            .iter()
            .any(|q| given(&q.section_name) == given(&p.section_name))
        {
            errs.push((i, "sectionName must be unique when parentRefs includes 2 or more references to the same parent"));
        }
    }
    errs
}

/// Longest path value of an HTTPRoute match (the Gateway API's `maxLength`).
pub const HTTPROUTE_MAX_PATH: usize = 1024;

/// Longest ContentServer name: children are named `<name>-headless` (a 63-char DNS-1035 Service
/// name) and StatefulSet pods carry `controller-revision-hash: <name>-<10 chars>` (a 63-char label).
pub const MAX_NAME: usize = 52;

/// Problems with the ContentServer's own name (children derive their names from it).
pub fn validate_name(name: &str) -> Vec<SpecError> {
    let dns1035 = !name.is_empty()
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if name.len() > MAX_NAME || !dns1035 {
        vec![SpecError {
            field: "metadata.name".into(),
            message: format!(
                "{name:?} must be a DNS-1035 label of at most {MAX_NAME} characters (its children are named after it)"
            ),
        }]
    } else {
        Vec::new()
    }
}

/// True for a Kubernetes quantity such as `500Gi`, `1.5T` or `1000`.
pub fn is_quantity(s: &str) -> bool {
    const SUFFIXES: [&str; 13] = [
        "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E", "",
    ];
    SUFFIXES.iter().any(|suf| {
        s.strip_suffix(suf).is_some_and(|num| {
            !num.is_empty()
                && num.chars().all(|c| c.is_ascii_digit() || c == '.')
                && num.matches('.').count() <= 1
                && !num.starts_with('.')
                && !num.ends_with('.')
        })
    })
}

fn camel(seg: &str) -> String {
    let mut out = String::with_capacity(seg.len());
    let mut upper = false;
    for c in seg.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The `.`-separated segments of a field path; a dot inside a quoted key does not separate.
fn segments(path: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted) = (0, false);
    for (i, c) in path.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '.' if !quoted => {
                out.push(&path[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&path[start..]);
    out
}

/// Map a server config field path onto the ContentServer field that produced it.
pub fn spec_path(config_field: &str) -> String {
    let (head, rest) = config_field
        .split_once('.')
        .map_or((config_field, None), |(h, r)| (h, Some(r)));
    let head_name = head.split('[').next().unwrap_or(head);
    // A quoted segment is a map key as the user wrote it (`mediaTypes."m.4s"`): kept verbatim.
    let rest_camel = rest.map(|r| {
        segments(r)
            .into_iter()
            .map(|s| {
                if s.starts_with('"') {
                    s.to_string()
                } else {
                    camel(s)
                }
            })
            .collect::<Vec<_>>()
            .join(".")
    });
    match (head_name, rest) {
        ("listeners", Some("backlog")) => "spec.server.backlog".into(),
        ("listeners", Some("congestion_control")) => "spec.server.congestionControl".into(),
        ("listeners", _) => "spec.server.port".into(),
        ("workers", _) => "spec.server.workers".into(),
        ("limits", Some("sendfile_max_chunk")) => "spec.server.sendfileMaxChunk".into(),
        ("limits", _) => format!("spec.server.limits.{}", rest_camel.unwrap_or_default()),
        ("http", Some(_)) => format!("spec.server.{}", rest_camel.unwrap_or_default()),
        ("http", None) => "spec.server.index".into(),
        ("admin", Some("purge_token_file")) => "spec.purgeToken".into(),
        ("admin", _) => "spec.metrics.port".into(),
        ("origins", Some("ca_file")) => "spec.origin.ca".into(),
        ("origins", _) => match rest_camel {
            Some(r) => format!("spec.origin.{r}"),
            None => "spec.origin".into(),
        },
        ("routes", Some("origin")) => format!("spec.{head}.cache"),
        ("logging", Some("format")) => "spec.server.logFormat".into(),
        ("logging", Some("level")) => "spec.server.logLevel".into(),
        ("logging", _) => "spec.server.accessLog".into(),
        ("shutdown_timeout_secs", _) => "spec.server.shutdownTimeoutSecs".into(),
        ("volumes", Some("path")) => format!("spec.{head}.mountPath"),
        ("volumes", Some("offload")) => format!("spec.{head}.pool.offload"),
        _ => match rest_camel {
            Some(r) => format!("spec.{}.{r}", camel(head)),
            None => format!("spec.{}", camel(head)),
        },
    }
}

/// Why a quantity gives no byte count: too large for 64 bits, or not a quantity.
fn not_bytes(q: &str, example: &str) -> String {
    if is_quantity(q) {
        format!("{q} is more than {} bytes (16Ei)", u64::MAX)
    } else {
        format!("{q:?} is not a quantity such as {example}")
    }
}

/// Two volumes of one spec on one directory, one of them a cache: the same existing claim
/// twice, or hostPaths one inside the other. The server sees two mount paths and cannot tell;
/// two caches would fight over the directory's lock (a crash loop) or evict each other's
/// files, a static volume holding a cache would serve its entry files.
fn shared_cache_dirs(spec: &ContentServerSpec) -> Vec<SpecError> {
    let mut errs = Vec::new();
    // (field, what, where on the node or cluster): claims by name, hostPaths by path.
    let place = |v: &crate::crd::VolumeSpec| {
        if let Some(pvc) = &v.source.persistent_volume_claim {
            Some((
                "persistentVolumeClaim.claimName",
                format!("pvc:{}", pvc.claim_name),
            ))
        } else {
            v.source.host_path.as_ref().map(|hp| {
                (
                    "hostPath.path",
                    format!("host:{}", hp.path.trim_end_matches('/')),
                )
            })
        }
    };
    for (j, vj) in spec.volumes.iter().enumerate() {
        let Some((field, pj)) = place(vj) else {
            continue;
        };
        for vi in spec.volumes.iter().take(j) {
            let Some((_, pi)) = place(vi) else { continue };
            if vi.cache.is_none() && vj.cache.is_none() {
                continue;
            }
            let inside = |a: &str, b: &str| {
                a.starts_with("host:") && b.starts_with("host:") && a.starts_with(&format!("{b}/"))
            };
            let relation = if pi == pj {
                "is the same directory as"
            } else if inside(&pj, &pi) {
                "lies inside"
            } else if inside(&pi, &pj) {
                "contains"
            } else {
                continue;
            };
            errs.push(SpecError {
                field: format!("spec.volumes[{j}].source.{field}"),
                message: format!(
                    "volume {:?} {relation} volume {:?} ({}): a cache volume needs a directory of its own, neither inside nor containing another volume's",
                    vj.name,
                    vi.name,
                    pi.split_once(':').map_or(pi.as_str(), |(_, p)| p),
                ),
            });
        }
    }
    errs
}

/// A port below 1024 with a pod security context of the user's that does not let the server
/// bind it: the container runs without capabilities (no CAP_NET_BIND_SERVICE, root or not), so
/// only the `net.ipv4.ip_unprivileged_port_start` sysctl can (the default context sets it).
fn privileged_port_without_sysctl(spec: &ContentServerSpec) -> Option<SpecError> {
    use crate::builders::workload::{lowest_port, UNPRIVILEGED_PORT_SYSCTL};
    let port = lowest_port(spec);
    let ctx = spec.pod.security_context.as_ref()?;
    let allowed = ctx.sysctls.iter().flatten().any(|s| {
        s.name == UNPRIVILEGED_PORT_SYSCTL && s.value.trim().parse::<i32>().is_ok_and(|v| v <= port)
    });
    (port < 1024 && !allowed).then(|| SpecError {
        field: "spec.pod.securityContext.sysctls".into(),
        message: format!(
            "port {port} is below 1024 and the server runs without capabilities: add {{name: {UNPRIVILEGED_PORT_SYSCTL}, value: \"{port}\"}} (some container runtimes allow it already, which the operator cannot tell; or use a port from 1024: the Service's port may still be 80)"
        ),
    })
}

/// Caches on emptyDirs of medium Memory (tmpfs) are charged to the container's memory: with a
/// memory limit, together they must leave the server a quarter of it, or the pod is OOM-killed
/// as they fill.
fn memory_caches_fit(spec: &ContentServerSpec) -> Vec<SpecError> {
    let limit = spec
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"));
    let Some((limit, limit_bytes)) = limit.and_then(|q| Some((q, quantity_value(&q.0)?))) else {
        return Vec::new();
    };
    let limit_bytes = limit_bytes.max(0.0) as u64;
    let mut any = false;
    let mut total = 0u128;
    for v in &spec.volumes {
        let (Some(c), Some(ed)) = (&v.cache, &v.source.empty_dir) else {
            continue;
        };
        if ed.medium != Some(EmptyDirMedium::Memory) {
            continue;
        }
        let size = (c.max_size.as_deref())
            .and_then(quantity_bytes)
            .or_else(|| default_cache_bytes(&v.source));
        total += u128::from(size.unwrap_or(0));
        any = true;
    }
    if !any || total * 4 <= u128::from(limit_bytes) * 3 {
        return Vec::new();
    }
    vec![SpecError {
        field: "spec.resources.limits.memory".into(),
        message: format!(
            "caches on emptyDirs of medium Memory count against resources.limits.memory {}: together they may hold at most three quarters of it ({} bytes; they hold {total})",
            limit.0,
            limit_bytes / 4 * 3
        ),
    }]
}

/// The cache rules the server cannot know: quantities, a cache must fit its claim (or emptyDir
/// limit), a cache on an existing claim allows one replica (autoscaling included), a route with
/// cache needs spec.origin.
pub fn validate_cache(spec: &ContentServerSpec) -> Vec<SpecError> {
    let mut errs = Vec::new();
    let mut push = |field: String, message: String| errs.push(SpecError { field, message });
    for (i, v) in spec.volumes.iter().enumerate() {
        let Some(c) = &v.cache else { continue };
        let f = format!("spec.volumes[{i}].cache");
        if v.source.image.is_some() {
            push(
                f.clone(),
                "a cache volume is written by the server: an image volume is read-only".into(),
            );
        }
        if quantity_bytes(&c.slice_size).is_none() {
            push(format!("{f}.sliceSize"), not_bytes(&c.slice_size, "1Mi"));
        }
        let empty_dir = v.source.empty_dir.as_ref();
        let size_limit = empty_dir.and_then(|e| e.size_limit.as_deref());
        let Some(max) = &c.max_size else {
            if empty_dir.is_some() && size_limit.is_none() {
                push(
                    format!("{f}.maxSize"),
                    format!("is required on an emptyDir without sizeLimit: the server's default keeps 10% of the filesystem free, and an emptyDir's filesystem is the node's (its disk, where the kubelet evicts pods at 10% free, or its memory for medium Memory); set maxSize, or emptyDir.sizeLimit (maxSize is then {EMPTY_DIR_CACHE_PERCENT}% of it)"),
                );
            }
            // The default from sizeLimit must hold a slice (the server refuses less, and would
            // name a maxSize nobody wrote).
            let default = default_cache_bytes(&v.source);
            if let (Some(d), Some(slice)) = (default, quantity_bytes(&c.slice_size)) {
                if d < slice {
                    push(
                        format!("{f}.maxSize"),
                        format!("is {EMPTY_DIR_CACHE_PERCENT}% of emptyDir.sizeLimit {} when absent ({d} bytes), less than one slice (sliceSize {}): raise sizeLimit or lower sliceSize", size_limit.unwrap_or_default(), c.slice_size),
                    );
                }
            }
            continue;
        };
        let Some(max_bytes) = quantity_bytes(max) else {
            push(format!("{f}.maxSize"), not_bytes(max, "90Gi"));
            continue;
        };
        if let Some(ct) = &v.source.claim_template {
            if quantity_bytes(&ct.size).is_some_and(|b| max_bytes > b) {
                push(
                    format!("{f}.maxSize"),
                    format!("{max} exceeds claimTemplate.size {}", ct.size),
                );
            }
        }
        if let Some(size) = size_limit {
            if quantity_bytes(size).is_some_and(|b| max_bytes > empty_dir_cache_bytes(b)) {
                push(
                    format!("{f}.maxSize"),
                    format!("{max} is more than {EMPTY_DIR_CACHE_PERCENT}% of emptyDir.sizeLimit {size}: fills in flight and the filesystem need the rest, and the kubelet evicts a pod whose emptyDir goes over its sizeLimit"),
                );
            }
        }
    }
    for e in shared_cache_dirs(spec) {
        push(e.field, e.message);
    }
    // One server per cache directory: every pod mounts an existing claim, so a cache on one
    // allows a single replica (the others would crash-loop on the directory's lock).
    if let Some((i, claim)) = spec.volumes.iter().enumerate().find_map(|(i, v)| {
        let pvc = v.source.persistent_volume_claim.as_ref()?;
        v.cache.as_ref().map(|_| (i, pvc.claim_name.as_str()))
    }) {
        let why = format!(
            "spec.volumes[{i}] caches on the existing claim {claim:?}, which every pod mounts, and only one server may use a cache directory (use claimTemplate for a cache per pod)"
        );
        if spec.replicas > 1 {
            push(
                "spec.replicas".into(),
                format!("{} is more than 1: {why}", spec.replicas),
            );
        }
        if let Some(a) = spec.autoscaling.as_ref().filter(|a| a.max_replicas > 1) {
            push(
                "spec.autoscaling.maxReplicas".into(),
                format!("{} is more than 1: {why}", a.max_replicas),
            );
        }
    }
    if spec.origin.is_none() {
        for (i, r) in spec.routes.iter().enumerate() {
            if r.cache.is_some() {
                push(
                    format!("spec.routes[{i}].cache"),
                    "a route with cache needs spec.origin".into(),
                );
            }
        }
    }
    errs.extend(memory_caches_fit(spec));
    errs
}

/// No `//` and no `.` or `..` segment (a trailing `/` is fine).
fn is_clean_path(p: &str) -> bool {
    !p.contains("//") && !p.split('/').any(|seg| seg == "." || seg == "..")
}

#[cfg(test)]
mod tests {
    use super::is_prometheus_duration;

    #[test]
    fn prometheus_durations() {
        for ok in ["0", "30s", "1m30s", "1h", "500ms", "1y2w3d4h5m6s7ms", ""] {
            assert!(is_prometheus_duration(ok), "{ok:?}");
        }
        for bad in [
            "30", "s", "1s1m", "1m1m", "1.5s", "-1s", "1S", "1sms", "1µs",
        ] {
            assert!(!is_prometheus_duration(bad), "{bad:?}");
        }
    }
}
