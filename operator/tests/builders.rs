//! Unit tests of the pure builders, field by field, from the minimal example to the three-disk
//! media node, plus the operator-side validation and its spec-path mapping.

mod support;

use content_operator::builders::configmap::{config_hash, configmap, render, server_config};
use content_operator::builders::workload::{
    claim_template_signature, deployment, pod_template, statefulset, termination_grace_secs,
    WorkloadKind,
};
use content_operator::builders::{
    self, expose, hpa, networkpolicy, pdb, service, servicemonitor, CONFIG_HASH_ANNOTATION,
};
use content_operator::validation::{spec_path, validate};
use content_server::config::{Config, Offload};
use k8s_openapi::api::core::v1::HTTPGetAction;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use support::*;

fn http_probe(probe: &Option<k8s_openapi::api::core::v1::Probe>) -> HTTPGetAction {
    probe
        .clone()
        .and_then(|p| p.http_get)
        .expect("an httpGet probe")
}

#[test]
fn minimal_renders_one_volume_and_a_deployment() {
    let cs = example("minimal.yaml");
    let cfg = server_config(&cs.spec);
    assert_eq!(cfg.volumes.len(), 1);
    assert_eq!(cfg.volumes[0].name, "content");
    assert_eq!(cfg.volumes[0].path.to_str(), Some("/srv/content/content"));
    assert_eq!(
        cfg.volumes[0].pool.threads,
        content_server::config::DEFAULT_THREADS
    );
    // Every IPv4 and IPv6 address: IPv4, IPv6-only and dual-stack clusters alike.
    assert_eq!(cfg.listeners[0].address, "*");
    assert_eq!(cfg.listeners[0].port, 8080);
    assert_eq!(
        cfg.admin.listen, "*:9190",
        "admin reachable by kubelet probes"
    );
    assert!(
        cfg.routes.is_empty(),
        "one volume: the server's implicit / route"
    );

    let rendered = render(&cs.spec).expect("render");
    let mut back = Config::from_toml(&rendered.toml).expect("server parses what we render");
    back.normalize();
    back.validate().expect("valid");
    assert_eq!(rendered.hash, config_hash(&rendered.toml));
    assert_eq!(rendered.hash.len(), 16);

    let cm = configmap(&cs, &rendered);
    let cm_name = format!("minimal-config-{}", rendered.hash);
    assert_eq!(cm.metadata.name.as_deref(), Some(cm_name.as_str()));
    assert_eq!(cm.immutable, Some(true), "a new config is a new ConfigMap");
    assert_eq!(cm.metadata.namespace.as_deref(), Some(NS));
    assert_eq!(
        cm.data.as_ref().and_then(|d| d.get("config.toml")),
        Some(&rendered.toml)
    );

    assert_eq!(WorkloadKind::of(&cs.spec), WorkloadKind::Deployment);
    let dep = deployment(&cs, &rendered.hash);
    let spec = dep.spec.expect("spec");
    assert_eq!(spec.replicas, Some(1));
    // One pod on an existing claim: Recreate (see a_shared_cache_volume_is_rolled_out_by_recreate).
    assert_eq!(
        spec.strategy.as_ref().and_then(|s| s.type_.as_deref()),
        Some("Recreate")
    );
    let mut two = cs.clone();
    two.spec.replicas = 2;
    let ru = deployment(&two, &rendered.hash)
        .spec
        .and_then(|s| s.strategy)
        .and_then(|s| s.rolling_update)
        .expect("rolling update");
    assert_eq!(
        ru.max_unavailable,
        Some(IntOrString::Int(0)),
        "surge rollouts never lose capacity"
    );
    let pod = spec.template.spec.expect("pod spec");
    let vol = pod
        .volumes
        .expect("volumes")
        .into_iter()
        .find(|v| v.name == "vol-content")
        .expect("data volume");
    let pvc = vol.persistent_volume_claim.expect("pvc source");
    assert_eq!(pvc.claim_name, "content");
    assert_eq!(pvc.read_only, Some(true));
    assert!(pdb::pdb(&cs).is_none(), "one replica: no PDB");
    assert!(servicemonitor::servicemonitor(&cs).is_none());
}

/// A port below 1024 is bound by the non-root server without capabilities only through the
/// `net.ipv4.ip_unprivileged_port_start` sysctl: the default pod security context sets it, and
/// a context of the user's without it is refused on its field (the pod crash-looped).
#[test]
fn a_port_below_1024_gets_the_sysctl_that_lets_the_server_bind_it() {
    let mut cs = example("minimal.yaml");
    let sysctls = |cs: &content_operator::crd::ContentServer| {
        pod_template(cs, "h")
            .spec
            .and_then(|p| p.security_context)
            .and_then(|c| c.sysctls)
            .map(|v| v.into_iter().map(|s| (s.name, s.value)).collect::<Vec<_>>())
    };
    assert!(cs.spec.server.port >= 1024 && cs.spec.metrics.port >= 1024);
    assert_eq!(sysctls(&cs), None);
    cs.spec.server.port = 80;
    assert_eq!(
        sysctls(&cs),
        Some(vec![(
            "net.ipv4.ip_unprivileged_port_start".to_string(),
            "80".to_string()
        )])
    );
    assert_eq!(validate(&cs.spec), Vec::new());
    // The user's own context replaces the default: it must carry the sysctl itself.
    let mut ctx: k8s_openapi::api::core::v1::PodSecurityContext =
        serde_json::from_value(serde_json::json!({"runAsUser": 0, "runAsNonRoot": false}))
            .expect("context");
    cs.spec.pod.security_context = Some(ctx.clone());
    let errs: Vec<String> = validate(&cs.spec).iter().map(|e| e.to_string()).collect();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("spec.pod.securityContext.sysctls: port 80 is below 1024"),
        "{errs:?}"
    );
    ctx.sysctls = Some(vec![k8s_openapi::api::core::v1::Sysctl {
        name: "net.ipv4.ip_unprivileged_port_start".into(),
        value: "0".into(),
    }]);
    cs.spec.pod.security_context = Some(ctx);
    assert_eq!(validate(&cs.spec), Vec::new());
}

/// A cache directory may have one server: a Deployment whose cache volume is shared between
/// pods (an existing claim, a hostPath) is rolled out by Recreate, since a surge pod could not
/// start beside the old one. So is a single pod on an existing claim (a ReadWriteOnce claim
/// cannot be attached to a surge pod on another node: the rollout stalled for ever); other
/// Deployments keep their surge rollout.
#[test]
fn a_shared_cache_volume_is_rolled_out_by_recreate() {
    let mut cs = example("minimal.yaml");
    let kind = |cs: &content_operator::crd::ContentServer| {
        deployment(cs, "h")
            .spec
            .and_then(|s| s.strategy)
            .and_then(|s| s.type_)
    };
    assert_eq!(cs.spec.replicas, 1);
    assert_eq!(kind(&cs).as_deref(), Some("Recreate"), "one pod on a claim");
    cs.spec.replicas = 2;
    assert_eq!(kind(&cs).as_deref(), Some("RollingUpdate"));
    cs.spec.replicas = 1;
    cs.spec.autoscaling = Some(
        serde_json::from_value(serde_json::json!({"minReplicas": 1, "maxReplicas": 4}))
            .expect("autoscaling"),
    );
    assert_eq!(
        kind(&cs).as_deref(),
        Some("RollingUpdate"),
        "an HPA may add pods"
    );
    cs.spec.autoscaling = None;
    cs.spec.volumes[0].source =
        serde_json::from_value(serde_json::json!({"emptyDir": {}})).expect("source");
    assert_eq!(kind(&cs).as_deref(), Some("RollingUpdate"), "no claim");
    let mut cs = example("minimal.yaml");
    cs.spec.replicas = 2;
    cs.spec.volumes[0].cache = Some(serde_json::from_value(serde_json::json!({})).expect("cache"));
    let strategy = deployment(&cs, "h")
        .spec
        .and_then(|s| s.strategy)
        .expect("strategy");
    assert_eq!(strategy.type_.as_deref(), Some("Recreate"));
    assert!(strategy.rolling_update.is_none());
}

/// A cache on an existing claim allows one replica: every pod mounts the claim and a cache
/// directory has one server (the others would crash-loop on its lock). The operator refuses more
/// (spec.replicas, or an autoscaler allowed more) on the field, whatever the workload kind; a
/// hostPath cache is allowed with any count (one pod per node, see below).
#[test]
fn a_cache_on_an_existing_claim_allows_one_replica() {
    let mut cs = example("edge-cache.yaml");
    cs.spec.volumes[1].source = serde_json::from_value(serde_json::json!({
        "persistentVolumeClaim": {"claimName": "shared-cache"}
    }))
    .expect("source");
    assert_eq!(cs.spec.replicas, 3);
    assert_eq!(WorkloadKind::of(&cs.spec), WorkloadKind::StatefulSet);
    let errs = validate(&cs.spec);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "spec.replicas");
    assert!(
        errs[0].message.contains(
            "3 is more than 1: spec.volumes[1] caches on the existing claim \"shared-cache\""
        ),
        "{errs:?}"
    );
    cs.spec.replicas = 1;
    assert_eq!(validate(&cs.spec), vec![]);
    cs.spec.autoscaling =
        Some(serde_json::from_value(serde_json::json!({"maxReplicas": 4})).expect("autoscaling"));
    assert_invalid_fields(&cs.spec, &["spec.autoscaling.maxReplicas"]);
    cs.spec
        .autoscaling
        .as_mut()
        .expect("autoscaling")
        .max_replicas = 1;
    assert_eq!(validate(&cs.spec), vec![]);

    // The claim without a cache (read-only content) is shared by any number of pods.
    cs.spec.replicas = 3;
    cs.spec.volumes[1].cache = None;
    cs.spec.routes[0].split.retain(|t| t.volume != "disk2");
    cs.spec.routes[0].split[0].percent = Some(50.0);
    cs.spec.routes.push(
        serde_json::from_value(serde_json::json!({"prefix": "/static/", "volume": "disk2"}))
            .expect("route"),
    );
    assert_eq!(validate(&cs.spec), vec![]);

    // A hostPath cache: any count.
    let mut cs = example("edge-cache.yaml");
    cs.spec.allow_host_path = true;
    cs.spec.volumes[1].source = serde_json::from_value(serde_json::json!({
        "hostPath": {"path": "/mnt/cache", "type": "Directory"}
    }))
    .expect("source");
    assert_eq!(validate(&cs.spec), vec![]);
}

/// A hostPath cache is one directory per node: the pods get a required anti-affinity on the node
/// name against their own ContentServer's pods (at most one per node), added to the user's
/// affinity, on either workload kind and whatever the replica count (a scale must not change
/// the pod template). Without a hostPath cache the user's affinity is rendered as it is.
#[test]
fn a_host_path_cache_puts_one_pod_per_node() {
    use k8s_openapi::api::core::v1::{Affinity, PodAffinityTerm};
    let anti = |a: Option<Affinity>| -> Vec<PodAffinityTerm> {
        a.and_then(|a| a.pod_anti_affinity)
            .and_then(|p| p.required_during_scheduling_ignored_during_execution)
            .unwrap_or_default()
    };
    let mut cs = example("minimal.yaml");
    cs.spec.allow_host_path = true;
    cs.spec.volumes[0].source = serde_json::from_value(serde_json::json!({
        "hostPath": {"path": "/mnt/content"}
    }))
    .expect("source");
    let pod = |cs: &content_operator::crd::ContentServer| {
        pod_template(cs, "h").spec.expect("pod spec").affinity
    };
    assert_eq!(pod(&cs), None, "a hostPath without cache: no lock, no rule");

    cs.spec.volumes[0].cache = Some(serde_json::from_value(serde_json::json!({})).expect("cache"));
    let terms = anti(pod(&cs));
    assert_eq!(terms.len(), 1, "{terms:?}");
    assert_eq!(terms[0].topology_key, "kubernetes.io/hostname");
    assert_eq!(
        terms[0]
            .label_selector
            .as_ref()
            .and_then(|s| s.match_labels.clone()),
        Some(builders::selector_labels(&cs))
    );
    assert_eq!(cs.spec.replicas, 1);
    let one = pod_template(&cs, "h");
    cs.spec.replicas = 5;
    assert_eq!(
        pod_template(&cs, "h"),
        one,
        "the count does not change the template"
    );
    let d = deployment(&cs, "h").spec.expect("spec");
    assert_eq!(anti(d.template.spec.and_then(|p| p.affinity)).len(), 1);
    assert_eq!(
        d.strategy.and_then(|s| s.type_).as_deref(),
        Some("Recreate")
    );

    // The user's affinity is kept, the rule appended to their own anti-affinity terms.
    let user: Affinity = serde_json::from_value(serde_json::json!({
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}
        ]}},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "topology.kubernetes.io/zone",
             "labelSelector": {"matchLabels": {"app": "other"}}}
        ]}
    }))
    .expect("affinity");
    cs.spec.scheduling.affinity = Some(user.clone());
    let got = pod(&cs).expect("affinity");
    assert_eq!(got.node_affinity, user.node_affinity);
    let terms = anti(Some(got));
    let keys: Vec<&str> = terms.iter().map(|t| t.topology_key.as_str()).collect();
    assert_eq!(
        keys,
        ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    );

    // The StatefulSet (a per-pod claim elsewhere) carries it too.
    let mut cs = example("edge-cache.yaml");
    cs.spec.allow_host_path = true;
    cs.spec.volumes[2].source = serde_json::from_value(serde_json::json!({
        "hostPath": {"path": "/mnt/disk3"}
    }))
    .expect("source");
    let sts = statefulset(&cs, "h").spec.expect("spec");
    assert_eq!(anti(sts.template.spec.and_then(|p| p.affinity)).len(), 1);
    // Without a hostPath cache, the user's affinity only (edge-cache spreads by constraints).
    let cs = example("edge-cache.yaml");
    assert_eq!(pod(&cs), None);
}

#[test]
fn pod_is_hardened_and_probes_the_admin_port() {
    let cs = example("minimal.yaml");
    let t = pod_template(&cs, "abc");
    assert_eq!(
        t.metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(CONFIG_HASH_ANNOTATION))
            .map(String::as_str),
        Some("abc")
    );
    let pod = t.spec.expect("pod spec");
    let psc = pod.security_context.clone().expect("pod security context");
    assert_eq!(psc.run_as_non_root, Some(true));
    // The group is set once per volume, not on every file at every mount (a cache disk holds
    // a million slices).
    assert_eq!(psc.fs_group, Some(65532));
    assert_eq!(
        psc.fs_group_change_policy.as_deref(),
        Some("OnRootMismatch")
    );
    assert_eq!(
        psc.seccomp_profile.map(|s| s.type_).as_deref(),
        Some("RuntimeDefault")
    );
    assert_eq!(pod.automount_service_account_token, Some(false));
    let c = &pod.containers[0];
    let sc = c
        .security_context
        .clone()
        .expect("container security context");
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(
        sc.capabilities.and_then(|c| c.drop),
        Some(vec!["ALL".to_string()])
    );
    assert_eq!(
        sc.seccomp_profile.map(|s| s.type_).as_deref(),
        Some("RuntimeDefault")
    );
    let ready = http_probe(&c.readiness_probe);
    assert_eq!(ready.path.as_deref(), Some("/readyz"));
    assert_eq!(ready.port, IntOrString::String("metrics".into()));
    let live = http_probe(&c.liveness_probe);
    assert_eq!(live.path.as_deref(), Some("/healthz"));
    let metrics_port = c
        .ports
        .clone()
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.name.as_deref() == Some("metrics"))
        .expect("metrics port");
    assert_eq!(metrics_port.container_port, 9190);
    assert_eq!(
        c.args.clone().unwrap_or_default(),
        vec!["serve", "--config", "/etc/content-server/config.toml"]
    );
    // Grace period covers preStop + the server's drain.
    let pre = c
        .lifecycle
        .clone()
        .and_then(|l| l.pre_stop)
        .and_then(|p| p.sleep)
        .expect("preStop sleep");
    let grace = pod.termination_grace_period_seconds.expect("grace");
    assert_eq!(grace, termination_grace_secs(&cs.spec));
    assert!(grace > pre.seconds + i64::from(cs.spec.server.shutdown_timeout_secs));
    // /tmp is writable even with a read-only root filesystem.
    assert!(c
        .volume_mounts
        .clone()
        .unwrap_or_default()
        .iter()
        .any(|m| m.mount_path == "/tmp"));
}

#[test]
fn pod_security_context_override_replaces_the_default() {
    let mut cs = example("minimal.yaml");
    cs.spec.pod.security_context = Some(k8s_openapi::api::core::v1::PodSecurityContext {
        run_as_user: Some(1000),
        sysctls: Some(vec![k8s_openapi::api::core::v1::Sysctl {
            name: "net.core.somaxconn".into(),
            value: "8192".into(),
        }]),
        ..Default::default()
    });
    cs.spec.pod.service_account_name = Some("reader".into());
    let pod = pod_template(&cs, "h").spec.expect("pod");
    let psc = pod.security_context.expect("psc");
    assert_eq!(psc.run_as_user, Some(1000));
    assert_eq!(
        psc.sysctls.map(|s| s[0].value.clone()).as_deref(),
        Some("8192")
    );
    assert_eq!(pod.service_account_name.as_deref(), Some("reader"));
}

#[test]
fn hpa_example_scales_through_the_spec_and_gets_a_pdb() {
    let cs = example("hpa.yaml");
    let cfg = server_config(&cs.spec);
    assert_eq!(cfg.volumes[0].offload, Offload::Auto);
    assert_eq!(cfg.volumes[0].path.to_str(), Some("/srv/site"));
    let p = pdb::pdb(&cs).expect("PDB: the autoscaler keeps at least 2 pods");
    let spec = p.spec.expect("spec");
    assert_eq!(
        spec.max_unavailable,
        Some(IntOrString::String("25%".into()))
    );
    assert_eq!(
        spec.selector.and_then(|s| s.match_labels).map(|m| m.len()),
        Some(2)
    );
    let dep = deployment(&cs, "h");
    let res = dep
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers[0].resources.clone())
        .expect("resources");
    assert!(
        res.and_then(|r| r.requests)
            .is_some_and(|r| r.contains_key("cpu")),
        "HPA needs cpu requests"
    );
    // The operator's HPA targets the ContentServer's scale subresource (the autoscaling contract).
    let h = hpa::hpa(&cs).expect("HPA for spec.autoscaling");
    assert_eq!(h.metadata.name.as_deref(), Some("web"));
    assert_eq!(
        h.metadata
            .owner_references
            .as_ref()
            .map(|o| o[0].kind.as_str()),
        Some("ContentServer")
    );
    let spec = h.spec.expect("HPA spec");
    let target = &spec.scale_target_ref;
    assert_eq!(
        (
            target.api_version.as_deref(),
            target.kind.as_str(),
            target.name.as_str()
        ),
        (Some("contentserver.dev/v1alpha1"), "ContentServer", "web")
    );
    assert_eq!((spec.min_replicas, spec.max_replicas), (Some(2), 10));
    let metrics = spec.metrics.expect("metrics");
    let pods = metrics[0].pods.as_ref().expect("Pods metric first");
    assert_eq!(metrics[0].type_, "Pods");
    assert_eq!(pods.metric.name, "contentserver_pool_utilization");
    assert_eq!(pods.target.type_, "AverageValue");
    assert_eq!(pods.target.average_value, Some(Quantity("700m".into())));
    let cpu = metrics[1].resource.as_ref().expect("CPU metric second");
    assert_eq!(
        (metrics[1].type_.as_str(), cpu.name.as_str()),
        ("Resource", "cpu")
    );
    assert_eq!(
        (cpu.target.type_.as_str(), cpu.target.average_utilization),
        ("Utilization", Some(80))
    );
    assert_eq!(
        spec.behavior
            .and_then(|b| b.scale_down)
            .and_then(|d| d.stabilization_window_seconds),
        Some(1800)
    );
}

#[test]
fn hpa_quantities_defaults_and_absence() {
    let q = |p| hpa::utilization_quantity(p).0;
    assert_eq!([q(70), q(5), q(100), q(1)], ["700m", "50m", "1", "10m"]);
    let mut cs = example("hpa.yaml");
    let a = cs.spec.autoscaling.as_mut().expect("autoscaling");
    a.target_cpu_utilization = None;
    let spec = hpa::hpa(&cs).and_then(|h| h.spec).expect("HPA");
    assert_eq!(
        spec.metrics.map(|m| m.len()),
        Some(1),
        "no CPU metric unless asked"
    );
    // Defaults: target 70 %, scale-down window 1800 s, min 1.
    let defaulted: content_operator::crd::AutoscalingSpec =
        serde_json::from_value(serde_json::json!({"maxReplicas": 4})).expect("defaults");
    assert_eq!(
        (
            defaulted.min_replicas,
            defaulted.target_pool_utilization,
            defaulted.scale_down_stabilization_seconds
        ),
        (1, 70, 1800)
    );
    assert!(hpa::hpa(&example("minimal.yaml")).is_none());
    // The workload's replicas are spec.replicas, which the HPA sets through /scale.
    cs.spec.replicas = 7;
    assert_eq!(deployment(&cs, "h").spec.and_then(|s| s.replicas), Some(7));
}

#[test]
fn exposed_example_renders_route_ingress_network_policy_and_an_image_volume() {
    let cs = example("exposed.yaml");
    let route = expose::http_route(&cs).expect("HTTPRoute");
    assert_eq!(route.metadata.name.as_deref(), Some("downloads"));
    assert!(route.metadata.owner_references.is_some());
    let v = serde_json::to_value(&route).expect("json");
    assert_eq!(v["apiVersion"], "gateway.networking.k8s.io/v1");
    assert_eq!(v["kind"], "HTTPRoute");
    assert_eq!(
        v["spec"]["parentRefs"],
        serde_json::json!([{"name": "public", "namespace": "gateways", "sectionName": "https"}])
    );
    assert_eq!(
        v["spec"]["hostnames"],
        serde_json::json!(["downloads.example.com"])
    );
    let rule = &v["spec"]["rules"][0];
    assert_eq!(
        rule["matches"],
        serde_json::json!([
            {"path": {"type": "PathPrefix", "value": "/releases/"}},
            {"path": {"type": "PathPrefix", "value": "/docs/"}}
        ])
    );
    assert_eq!(
        rule["backendRefs"],
        serde_json::json!([{"name": "downloads", "port": 80}])
    );

    let ing = expose::ingress(&cs).expect("Ingress");
    let annotations = ing.metadata.annotations.clone().expect("annotations");
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/proxy-buffering"],
        "off"
    );
    let spec = ing.spec.expect("spec");
    assert_eq!(spec.ingress_class_name.as_deref(), Some("nginx"));
    let tls = spec.tls.expect("tls");
    assert_eq!(tls[0].secret_name.as_deref(), Some("downloads-tls"));
    assert_eq!(
        tls[0].hosts,
        Some(vec!["downloads.example.com".to_string()])
    );
    let rules = spec.rules.expect("rules");
    assert_eq!(rules[0].host.as_deref(), Some("downloads.example.com"));
    let paths = &rules[0].http.as_ref().expect("http").paths;
    let got: Vec<(&str, &str)> = paths
        .iter()
        .map(|p| (p.path.as_deref().unwrap_or(""), p.path_type.as_str()))
        .collect();
    assert_eq!(got, [("/releases/", "Prefix"), ("/docs/", "Prefix")]);
    let backend = paths[0].backend.service.as_ref().expect("service backend");
    assert_eq!(backend.name, "downloads");
    assert_eq!(backend.port.as_ref().and_then(|p| p.number), Some(80));
    assert_eq!(
        expose::hostnames(&cs),
        ["downloads.example.com"],
        "one host named twice is listed once"
    );
    assert_eq!(
        builders::service_url(&cs),
        "http://downloads.media-ns.svc:80"
    );

    let np = networkpolicy::network_policy(&cs).expect("NetworkPolicy");
    let spec = np.spec.expect("spec");
    assert_eq!(spec.policy_types, Some(vec!["Ingress".to_string()]));
    assert_eq!(
        spec.pod_selector.and_then(|s| s.match_labels),
        Some(builders::selector_labels(&cs))
    );
    let ingress = spec.ingress.expect("rules");
    let port = |r: &k8s_openapi::api::networking::v1::NetworkPolicyIngressRule| {
        r.ports.as_ref().and_then(|p| p[0].port.clone())
    };
    assert_eq!(ingress.len(), 2);
    // By name, as the container's ports: a port change cuts off no old pod during its rollout.
    let container_ports: Vec<_> = pod_template(&cs, "h").spec.expect("pod").containers[0]
        .ports
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|p| (p.name.unwrap_or_default(), p.container_port))
        .collect();
    assert_eq!(
        container_ports,
        [("http".to_string(), 8080), ("metrics".to_string(), 9190)]
    );
    assert_eq!(port(&ingress[0]), Some(IntOrString::String("http".into())));
    assert!(ingress[0].from.is_none(), "HTTP port open to every client");
    assert_eq!(
        port(&ingress[1]),
        Some(IntOrString::String("metrics".into()))
    );
    let from = ingress[1].from.as_ref().expect("metrics peers");
    assert_eq!(from.len(), 1);
    assert_eq!(
        from[0]
            .namespace_selector
            .as_ref()
            .and_then(|s| s.match_labels.as_ref())
            .map(|m| m["kubernetes.io/metadata.name"].as_str()),
        Some("monitoring")
    );
    assert!(
        from[0].pod_selector.is_some(),
        "namespace AND pod selector in one peer"
    );

    // The image volume: a pod volume with the reference and pull policy, mounted read-only.
    let pod = pod_template(&cs, "h").spec.expect("pod");
    let vol = pod
        .volumes
        .as_ref()
        .and_then(|v| v.iter().find(|v| v.name == "vol-docs"))
        .and_then(|v| v.image.clone())
        .expect("image volume");
    assert_eq!(
        vol.reference.as_deref(),
        Some("registry.example/docs-site:2026.01")
    );
    assert_eq!(vol.pull_policy.as_deref(), Some("IfNotPresent"));
    let mount = pod.containers[0]
        .volume_mounts
        .as_ref()
        .and_then(|m| m.iter().find(|m| m.name == "vol-docs"))
        .expect("mount");
    assert_eq!(mount.read_only, Some(true));
    let mut rw = cs.clone();
    rw.spec.volumes[1].read_only = false;
    let pod = pod_template(&rw, "h").spec.expect("pod");
    let mount = pod.containers[0]
        .volume_mounts
        .as_ref()
        .and_then(|m| m.iter().find(|m| m.name == "vol-docs"))
        .expect("mount");
    assert_eq!(
        mount.read_only,
        Some(true),
        "image volumes are always read-only"
    );
}

#[test]
fn no_expose_no_network_policy_without_their_specs() {
    let cs = example("minimal.yaml");
    assert!(expose::http_route(&cs).is_none());
    assert!(expose::ingress(&cs).is_none());
    assert!(networkpolicy::network_policy(&cs).is_none());
    assert!(expose::hostnames(&cs).is_empty());
    // Without routes the one volume serves `/`.
    assert_eq!(expose::path_prefixes(&cs), ["/"]);
}

/// The HTTPRoute the operator writes uses only fields of the released Gateway API CRD, with the
/// required ones present and enum values it allows (upstream schema in ../shared/schemas, as the
/// Gateway API project releases it).
/// The released HTTPRoute v1 schema.
fn gateway_route_schema() -> serde_json::Value {
    let crd_file = repo_root()
        .parent()
        .expect("parent of the repository")
        .join("shared/schemas/gateway-api-v1.6.1/gateway.networking.k8s.io_httproutes.yaml");
    let text = std::fs::read_to_string(&crd_file)
        .unwrap_or_else(|e| panic!("{}: {e}", crd_file.display()));
    let crd: serde_json::Value = serde_yaml_ng::from_str(&text).expect("CRD yaml");
    let version = crd["spec"]["versions"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "v1"))
        .expect("v1");
    version["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn http_route_matches_the_upstream_gateway_api_schema() {
    let schema = &gateway_route_schema();
    let route = serde_json::to_value(expose::http_route(&example("exposed.yaml")).expect("route"))
        .expect("json");
    let mut spec_only = route.clone();
    spec_only
        .as_object_mut()
        .expect("object")
        .remove("metadata");
    let problems = schema_problems(schema, &spec_only, "$");
    assert!(problems.is_empty(), "{problems:#?}");
    // The check is not vacuous: a misspelt field and a bad enum value are found.
    let mut bad = spec_only.clone();
    bad["spec"]["rules"][0]["matches"][0]["path"]["type"] = serde_json::json!("Prefix");
    bad["spec"]["parentRef"] = serde_json::json!([]);
    assert_eq!(schema_problems(schema, &bad, "$").len(), 2);
}

/// A route prefix is a decoded path: the HTTPRoute carries it percent-encoded (the Gateway API
/// refuses a bare `é`, space or `[`), in the form the server's canonical path has, so it routes
/// to the same place; the released CRD's CEL rules accept it. The Ingress keeps it as written.
#[test]
fn http_route_percent_encodes_route_prefixes() {
    let schema = gateway_route_schema();
    let mut cs = example("exposed.yaml");
    let volume = cs.spec.volumes[0].name.clone();
    let prefixes = ["/vidéos/", "/a b", "/a[1]", "/50%", "/ok-._~!$&'()*+,;=:@/"];
    cs.spec.routes = prefixes
        .iter()
        .map(|p| {
            serde_json::from_value(serde_json::json!({"prefix": p, "volume": volume}))
                .expect("route")
        })
        .collect();
    let route = expose::http_route(&cs).expect("route");
    let values: Vec<String> = route.spec.rules[0]
        .matches
        .iter()
        .filter_map(|m| m.path.as_ref().map(|p| p.value.clone()))
        .collect();
    assert_eq!(
        values,
        [
            "/vid%C3%A9os/",
            "/a%20b",
            "/a%5B1%5D",
            "/50%25",
            "/ok-._~!$&'()*+,;=:@/"
        ]
    );
    for (p, v) in prefixes.iter().zip(&values) {
        assert_eq!(
            content_server::resolve::canonical(v),
            content_server::resolve::canonical(&expose::encoded_prefix(p)),
            "{v} is already canonical"
        );
        assert_eq!(
            content_server::resolve::canonical(v).as_deref(),
            Ok(v.as_str())
        );
    }
    let mut obj = serde_json::to_value(&route).expect("json");
    obj.as_object_mut().expect("object").remove("metadata");
    assert_eq!(schema_problems(&schema, &obj, "$"), Vec::<String>::new());
    let cel = |o: &serde_json::Value| match kube_cel::validate(&schema, o, None) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
    };
    assert_eq!(cel(&obj), Vec::<String>::new());
    // The rules do refuse the prefixes as written.
    obj["spec"]["rules"][0]["matches"][0]["path"]["value"] = serde_json::json!("/vidéos/");
    assert_eq!(cel(&obj).len(), 1, "{:?}", cel(&obj));
    let ingress = expose::ingress(&cs).expect("ingress");
    let rules = ingress.spec.and_then(|s| s.rules).expect("rules");
    let paths = &rules[0].http.as_ref().expect("http").paths;
    assert_eq!(paths[0].path.as_deref(), Some("/vidéos/"));
}

/// Unknown fields, missing required fields, wrong types and values outside an enum.
fn schema_problems(schema: &serde_json::Value, v: &serde_json::Value, at: &str) -> Vec<String> {
    use serde_json::Value;
    let mut out = Vec::new();
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(v) {
            out.push(format!("{at}: {v} not in {allowed:?}"));
        }
    }
    match (schema["type"].as_str(), v) {
        (Some("object"), Value::Object(o)) => {
            let props = schema["properties"].as_object();
            for r in schema["required"].as_array().into_iter().flatten() {
                if !o.contains_key(r.as_str().unwrap_or("")) {
                    out.push(format!("{at}: required {r} missing"));
                }
            }
            for (k, child) in o {
                let path = format!("{at}.{k}");
                match props.and_then(|p| p.get(k)) {
                    Some(s) => out.extend(schema_problems(s, child, &path)),
                    None if at == "$" && (k == "apiVersion" || k == "kind") => {}
                    None => out.push(format!("{path}: not in the schema")),
                }
            }
        }
        (Some("array"), Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                out.extend(schema_problems(
                    &schema["items"],
                    item,
                    &format!("{at}[{i}]"),
                ));
            }
        }
        (Some("string"), Value::String(_))
        | (Some("integer"), Value::Number(_))
        | (Some("boolean"), Value::Bool(_))
        | (None, _) => {}
        (Some(t), other) => out.push(format!("{at}: {other} is not {t}")),
    }
    out
}

#[test]
fn media_node_renders_three_pools_a_split_and_a_statefulset() {
    let cs = example("media-node.yaml");
    let cfg = server_config(&cs.spec);
    let names: Vec<&str> = cfg.volumes.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["disk1", "disk2", "disk3"]);
    for (i, v) in cfg.volumes.iter().enumerate() {
        assert_eq!(v.pool.threads, 16);
        assert_eq!(
            v.path.to_str().map(str::to_string),
            Some(format!("/srv/disk{}", i + 1))
        );
    }
    assert_eq!(cfg.routes.len(), 1);
    let split: Vec<(String, Option<f64>)> = cfg.routes[0]
        .split
        .iter()
        .map(|t| (t.volume.clone(), t.percent))
        .collect();
    assert_eq!(
        split,
        vec![
            ("disk1".into(), Some(33.3)),
            ("disk2".into(), Some(33.3)),
            ("disk3".into(), None)
        ]
    );
    assert!(cfg.field_errors().is_empty(), "{:?}", cfg.field_errors());

    assert_eq!(WorkloadKind::of(&cs.spec), WorkloadKind::StatefulSet);
    let sts = statefulset(&cs, "h").spec.expect("spec");
    assert_eq!(sts.replicas, Some(3));
    assert_eq!(sts.pod_management_policy.as_deref(), Some("Parallel"));
    assert_eq!(sts.service_name.as_deref(), Some("media-headless"));
    let templates = sts.volume_claim_templates.expect("claim templates");
    assert_eq!(templates.len(), 3);
    let t = &templates[0];
    assert_eq!(t.metadata.name.as_deref(), Some("vol-disk1"));
    let ts = t.spec.clone().expect("pvc spec");
    assert_eq!(ts.storage_class_name.as_deref(), Some("local-hdd"));
    assert_eq!(ts.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
    assert_eq!(
        ts.resources
            .and_then(|r| r.requests)
            .and_then(|r| r.get("storage").map(|q| q.0.clone()))
            .as_deref(),
        Some("4Ti")
    );
    // Claim-template volumes are not pod volumes; their mounts use the template name.
    let pod = sts.template.spec.expect("pod");
    assert!(!pod
        .volumes
        .clone()
        .unwrap_or_default()
        .iter()
        .any(|v| v.name.starts_with("vol-disk")));
    let mounts = pod.containers[0].volume_mounts.clone().unwrap_or_default();
    assert!(mounts
        .iter()
        .any(|m| m.name == "vol-disk3" && m.mount_path == "/srv/disk3"));
    assert_eq!(pod.topology_spread_constraints.map(|t| t.len()), Some(1));

    let svc = service::service(&cs).spec.expect("svc");
    assert_eq!(svc.type_.as_deref(), Some("ClusterIP"));
    let ports = svc.ports.expect("ports");
    assert_eq!(
        (ports[0].name.as_deref(), ports[0].port),
        (Some("http"), 80)
    );
    assert_eq!(
        (ports[1].name.as_deref(), ports[1].port),
        (Some("metrics"), 9190)
    );
    let headless = service::headless_service(&cs).spec.expect("headless");
    assert_eq!(headless.cluster_ip.as_deref(), Some("None"));

    let sm = servicemonitor::servicemonitor(&cs).expect("ServiceMonitor");
    assert_eq!(
        sm.types.as_ref().map(|t| t.kind.as_str()),
        Some("ServiceMonitor")
    );
    assert_eq!(
        sm.data["spec"]["selector"]["matchLabels"]["contentserver.dev/service"],
        "client"
    );
    assert!(pdb::pdb(&cs).is_some());
}

/// The ServiceMonitor carries the user's labels (for a Prometheus selector), but never in
/// place of the operator's own: a `managed-by` or `instance` of theirs would make it look like
/// someone else's object.
#[test]
fn service_monitor_labels_never_replace_the_operators_own() {
    let mut cs = example("media-node.yaml");
    cs.spec.metrics.service_monitor.enabled = true;
    cs.spec.metrics.service_monitor.labels = [
        ("release", "kube-prometheus-stack"),
        ("app.kubernetes.io/managed-by", "helm"),
        ("app.kubernetes.io/instance", "other"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let sm = servicemonitor::servicemonitor(&cs).expect("ServiceMonitor");
    let labels = sm.metadata.labels.expect("labels");
    assert_eq!(labels["release"], "kube-prometheus-stack");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "content-operator");
    assert_eq!(labels["app.kubernetes.io/instance"], "media");
}

#[test]
fn config_hash_changes_with_config_not_with_replicas() {
    let cs = example("media-node.yaml");
    let base = render(&cs.spec).expect("render").hash;
    let mut scaled = cs.clone();
    scaled.spec.replicas = 10;
    assert_eq!(render(&scaled.spec).expect("render").hash, base);
    let mut tuned = cs.clone();
    tuned.spec.volumes[1].pool.max_queue = 10;
    assert_ne!(render(&tuned.spec).expect("render").hash, base);
}

#[test]
fn every_example_is_valid_for_the_operator() {
    for (file, _, cs) in example_contentservers() {
        assert_eq!(validate(&cs.spec), vec![], "examples/{file}");
    }
}

#[test]
fn validation_names_spec_fields() {
    let mut cs = example("media-node.yaml");
    cs.spec.volumes[1].pool.max_queue = 20_000_000;
    cs.spec.volumes[0].mount_path = Some("relative".into());
    cs.spec.routes[0].split[0].percent = Some(150.0);
    cs.spec.server.sendfile_max_chunk = 10;
    cs.spec.server.limits.max_header_bytes = 1;
    cs.spec.metrics.port = cs.spec.server.port;
    cs.spec.volumes[2].source.empty_dir = Some(Default::default());
    assert_invalid_fields(
        &cs.spec,
        &[
            "spec.volumes[1].pool.maxQueue",
            "spec.volumes[0].mountPath",
            "spec.routes[0].split[0].percent",
            "spec.server.sendfileMaxChunk",
            "spec.server.limits.maxHeaderBytes",
            "spec.metrics.port",
            "spec.volumes[2].source",
        ],
    );
}

/// `examples/<file>`'s ContentServer with `spec.server.congestionControl` set as a user writes it.
fn with_congestion_control(file: &str, name: &str) -> content_operator::crd::ContentServer {
    let mut doc = serde_json::to_value(example(file)).expect("json");
    doc["spec"]["server"]["congestionControl"] = serde_json::json!(name);
    serde_json::from_value(doc).expect("ContentServer with congestionControl")
}

#[test]
fn congestion_control_is_rendered_into_the_listener_only_when_set() {
    let cs = with_congestion_control("minimal.yaml", "cubic");
    assert_eq!(cs.spec.server.congestion_control.as_deref(), Some("cubic"));
    let toml = render(&cs.spec).expect("render").toml;
    let listener = toml
        .split("[[listeners]]")
        .nth(1)
        .and_then(|l| l.split("\n[").next())
        .unwrap_or_else(|| panic!("no [[listeners]] in\n{toml}"));
    assert!(
        listener
            .lines()
            .any(|l| l.trim() == r#"congestion_control = "cubic""#),
        "congestion_control not in the listener:\n{toml}"
    );
    let back = rendered_back(&cs.spec);
    assert_eq!(
        back.listeners[0].congestion_control.as_deref(),
        Some("cubic")
    );
    assert_eq!(validate(&cs.spec), vec![]);

    // Unset: no line (the node's default), and the spec does not serialize the field.
    let plain = example("minimal.yaml");
    assert_eq!(plain.spec.server.congestion_control, None);
    assert_rendered_without("minimal.yaml", &["congestion_control"]);
    assert_eq!(
        rendered_back(&plain.spec).listeners[0].congestion_control,
        None
    );
    let json = serde_json::to_value(&plain.spec.server).expect("json");
    assert!(json.get("congestionControl").is_none(), "{json}");
}

#[test]
fn bad_congestion_control_is_reported_on_its_spec_field() {
    for bad in ["BBR!", "", "a_very_long_name_x"] {
        let cs = with_congestion_control("minimal.yaml", bad);
        let errs = validate(&cs.spec);
        assert_eq!(errs.len(), 1, "{bad:?}: {errs:?}");
        assert_eq!(errs[0].field, "spec.server.congestionControl", "{bad:?}");
    }
}

/// spec.server.logLevel is the server's `logging.level`, checked by the same rule: a word that
/// is not a level (`warning`) would silence the pods' logs.
#[test]
fn bad_log_level_is_reported_on_its_spec_field() {
    for bad in [
        "warning",
        "content_server",
        "info,content_server=verbose",
        "",
    ] {
        let mut cs = example("minimal.yaml");
        cs.spec.server.log_level = bad.into();
        let errs = validate(&cs.spec);
        assert_eq!(errs.len(), 1, "{bad:?}: {errs:?}");
        assert_eq!(errs[0].field, "spec.server.logLevel", "{bad:?}");
    }
    for good in ["debug", "info,content_server::cache=debug"] {
        let mut cs = example("minimal.yaml");
        cs.spec.server.log_level = good.into();
        assert_eq!(validate(&cs.spec), vec![], "{good:?}");
    }
}

/// A cache volume mounted inside another volume's mount path (whose route would serve the
/// cache's entry files), or around one, is reported on its spec.volumes[i].mountPath, as the
/// server's own rule on the rendered volume paths.
#[test]
fn cache_volumes_must_not_nest_with_other_mounts() {
    let mut cs = example("edge-cache.yaml");
    assert!(cs.spec.volumes[0].cache.is_some() && cs.spec.volumes[1].cache.is_some());
    cs.spec.volumes[1].mount_path = Some("/srv/disk1/cache".into());
    let errs = validate(&cs.spec);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "spec.volumes[1].mountPath");
    assert!(errs[0].message.contains("lies inside"), "{errs:?}");
    cs.spec.volumes[1].mount_path = Some("/srv/disk1x".into());
    assert_eq!(validate(&cs.spec), vec![]);
}

#[test]
fn validation_of_kubernetes_side_rules() {
    let mut cs = example("minimal.yaml");
    cs.spec.volumes[0].source.persistent_volume_claim = None;
    cs.spec.volumes[0].source.host_path = Some(content_operator::crd::HostPathSource {
        path: "/mnt".into(),
        type_: None,
    });
    let errs = validate(&cs.spec);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "spec.volumes[0].source.hostPath");
    cs.spec.allow_host_path = true;
    assert_eq!(validate(&cs.spec), vec![]);

    cs.spec.volumes[0].mount_path = Some("/etc/content-server".into());
    assert_invalid_fields(&cs.spec, &["spec.volumes[0].mountPath"]);
    cs.spec.volumes[0].mount_path = Some("/tmp/x".into());
    assert_invalid_fields(&cs.spec, &["spec.volumes[0].mountPath"]);
    cs.spec.volumes[0].mount_path = None;
    cs.spec.pdb.max_unavailable = IntOrString::String("lots".into());
    assert_invalid_fields(&cs.spec, &["spec.pdb.maxUnavailable"]);
    cs.spec.pdb.max_unavailable = IntOrString::Int(1);
    cs.spec.replicas = -1;
    assert_invalid_fields(&cs.spec, &["spec.replicas"]);
}

/// What the CRD's patterns let through but the API server (an Ingress host) or the Gateway API
/// (an HTTPRoute's path, at most 1024 characters percent-encoded) would refuse at apply time:
/// refused first, naming the field.
#[test]
fn validation_of_what_kubernetes_refuses_in_exposed_objects() {
    let mut cs = example("exposed.yaml");
    assert_eq!(validate(&cs.spec), vec![]);
    let e = cs.spec.expose.as_mut().unwrap();
    e.ingress.as_mut().unwrap().hosts[0].0 = "10.0.0.1".into();
    e.http_route.as_mut().unwrap().hostnames[0].0 = "192.168.1.20".into();
    assert_invalid_fields(
        &cs.spec,
        &[
            "spec.expose.httpRoute.hostnames[0]",
            "spec.expose.ingress.hosts[0]",
        ],
    );
    // Not addresses: names made of digits are DNS names.
    let e = cs.spec.expose.as_mut().unwrap();
    e.ingress.as_mut().unwrap().hosts[0].0 = "10.0.0.256".into();
    e.http_route.as_mut().unwrap().hostnames[0].0 = "1.2.3".into();
    assert_eq!(validate(&cs.spec), vec![]);

    // 200 `é` are 400 bytes, 1200 characters as %C3%A9.
    cs.spec.routes[1].prefix = format!("/{}/", "é".repeat(200));
    let errs = validate(&cs.spec);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "spec.routes[1].prefix");
    assert!(errs[0].message.contains("1024"), "{}", errs[0].message);
    // Without an HTTPRoute the same prefix is fine.
    cs.spec.expose.as_mut().unwrap().http_route = None;
    assert_eq!(validate(&cs.spec), vec![]);
}

#[test]
fn spec_path_maps_server_fields() {
    assert_eq!(
        spec_path("volumes[2].pool.threads"),
        "spec.volumes[2].pool.threads"
    );
    assert_eq!(spec_path("volumes[0].path"), "spec.volumes[0].mountPath");
    assert_eq!(
        spec_path("routes[1].split[0].volume"),
        "spec.routes[1].split[0].volume"
    );
    assert_eq!(
        spec_path("routes[1].strip_prefix"),
        "spec.routes[1].stripPrefix"
    );
    assert_eq!(
        spec_path("limits.keepalive_timeout_secs"),
        "spec.server.limits.keepaliveTimeoutSecs"
    );
    assert_eq!(spec_path("listeners[0].backlog"), "spec.server.backlog");
    assert_eq!(
        spec_path("listeners[0].congestion_control"),
        "spec.server.congestionControl"
    );
    assert_eq!(spec_path("admin.listen"), "spec.metrics.port");
    assert_eq!(spec_path("http.index[0]"), "spec.server.index[0]");
    assert_eq!(spec_path("workers"), "spec.server.workers");
    // Map keys that are not bare (quoted by the server) are kept as written.
    assert_eq!(
        spec_path("http.media_types.\"m_4s\""),
        "spec.server.mediaTypes.\"m_4s\""
    );
    assert_eq!(
        spec_path("http.media_types.\"m.4s\""),
        "spec.server.mediaTypes.\"m.4s\""
    );
    assert_eq!(
        spec_path("http.media_types.vtt"),
        "spec.server.mediaTypes.vtt"
    );
}

#[test]
fn contentserver_names_must_leave_room_for_child_names() {
    use content_operator::validation::{validate_name, MAX_NAME};
    assert!(validate_name("media").is_empty());
    assert!(validate_name(&"a".repeat(MAX_NAME)).is_empty());
    assert_eq!(
        validate_name(&"a".repeat(MAX_NAME + 1))[0].field,
        "metadata.name"
    );
    assert!(
        !validate_name("1media").is_empty(),
        "Service names must start with a letter"
    );
    assert!(
        !validate_name("media.v2").is_empty(),
        "no dots in Service names"
    );
}

/// A claim size as the API server stores it (canonical: `4096Gi` comes back as `4Ti`) is the
/// same claim template: no replacement of the StatefulSet (it was replaced on every other
/// reconcile, forever); another size is a change.
#[test]
fn a_claim_size_in_canonical_form_is_no_change() {
    let signature = |size: &str| {
        let mut cs = example("media-node.yaml");
        for v in &mut cs.spec.volumes {
            if let Some(t) = v.source.claim_template.as_mut() {
                t.size = size.to_string();
            }
        }
        let sts = statefulset(&cs, "h").spec.expect("spec");
        claim_template_signature(&sts.volume_claim_templates.expect("templates"))
    };
    assert_eq!(signature("4096Gi"), signature("4Ti"));
    assert_eq!(signature("1024Mi"), signature("1Gi"));
    assert_eq!(signature("1.5T"), signature("1500G"));
    // Not a whole number of bytes: the API server gives it back in milli-units.
    assert_eq!(signature("1.3Gi"), signature("1395864371200m"));
    assert_ne!(signature("4Ti"), signature("8Ti"));
    assert_ne!(signature("1.3Gi"), signature("1395864371"));
}

/// What the CRD's CEL refuses is also reported on its spec field when the spec reaches the
/// operator (a cluster without CEL): a cache on an image volume (read-only: the pods would
/// crash-loop on it) and a Service port equal to the metrics port (Kubernetes refuses the
/// Service, and every later apply with it).
#[test]
fn image_cache_volumes_and_a_service_port_on_the_metrics_port_are_reported() {
    let mut cs = example("edge-cache.yaml");
    cs.spec.volumes[0].source = serde_json::from_value(serde_json::json!({
        "image": {"reference": "registry.example/cache-seed:1"}
    }))
    .expect("source");
    let errs = validate(&cs.spec);
    assert!(
        errs.iter()
            .any(|e| e.field == "spec.volumes[0].cache" && e.message.contains("read-only")),
        "{errs:?}"
    );
    let mut cs = example("minimal.yaml");
    cs.spec.service.port = cs.spec.metrics.port;
    let errs = validate(&cs.spec);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "spec.service.port");
    // Published, the client Service carries only `http`: the same number is no clash, and the
    // children are built with one port each.
    cs.spec.service.type_ = content_operator::crd::ServiceType::LoadBalancer;
    assert_eq!(validate(&cs.spec), Vec::new());
    let client = content_operator::builders::service::service(&cs);
    let ports = client.spec.and_then(|s| s.ports).unwrap_or_default();
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert_eq!(ports[0].port, cs.spec.metrics.port);
    let metrics =
        content_operator::builders::service::metrics_service(&cs).expect("metrics Service");
    let ports = metrics.spec.and_then(|s| s.ports).unwrap_or_default();
    assert_eq!(ports.len(), 1, "{ports:?}");
}

/// One error per spec, on its field.
fn only_error(cs: &content_operator::crd::ContentServer) -> (String, String) {
    let errs = validate(&cs.spec);
    assert_eq!(errs.len(), 1, "{errs:?}");
    (errs[0].field.clone(), errs[0].message.clone())
}

/// The CEL rules of the CRD are re-checked by the operator (a CRD may be installed without them).
#[test]
fn validation_rechecks_the_crd_cel_rules() {
    let mut cs = example("hpa.yaml");
    let a = cs.spec.autoscaling.as_mut().expect("autoscaling");
    a.min_replicas = 5;
    a.max_replicas = 2;
    assert_eq!(only_error(&cs).0, "spec.autoscaling.minReplicas");
    // A pool target the metric (at most 1) can never exceed by the HPA's 10% tolerance.
    let mut cs = example("hpa.yaml");
    let a = cs.spec.autoscaling.as_mut().expect("autoscaling");
    a.target_pool_utilization = 95;
    let (field, message) = only_error(&cs);
    assert_eq!(field, "spec.autoscaling.targetPoolUtilization");
    assert!(message.contains("1..85"), "{message}");

    let mut cs = example("edge-cache.yaml");
    let ca = cs
        .spec
        .origin
        .as_mut()
        .and_then(|o| o.ca.as_mut())
        .expect("origin.ca");
    let key =
        serde_json::from_value(serde_json::json!({"name": "n", "key": "ca.pem"})).expect("key ref");
    ca.secret_key_ref = Some(key);
    ca.config_map_key_ref.get_or_insert_with(|| {
        serde_json::from_value(serde_json::json!({"name": "n", "key": "ca.pem"})).expect("key")
    });
    let (field, message) = only_error(&cs);
    assert_eq!(field, "spec.origin.ca");
    assert!(message.contains("exactly one"), "{message}");
    let ca = cs
        .spec
        .origin
        .as_mut()
        .and_then(|o| o.ca.as_mut())
        .expect("ca");
    ca.secret_key_ref = None;
    ca.config_map_key_ref = None;
    assert_eq!(only_error(&cs).0, "spec.origin.ca");

    let mut cs = example("exposed.yaml");
    cs.spec.network_policy = Some(
        serde_json::from_value(serde_json::json!({"metricsFrom": [{"podSelector": {}}, {}]}))
            .expect("network policy"),
    );
    assert_eq!(only_error(&cs).0, "spec.networkPolicy.metricsFrom[1]");
}

/// A claim of 0 bytes is refused by Kubernetes only when the pods' claims are made.
#[test]
fn a_zero_claim_size_is_invalid() {
    let mut cs = example("media-node.yaml");
    let i = cs
        .spec
        .volumes
        .iter()
        .position(|v| v.source.claim_template.is_some())
        .expect("a claimTemplate volume");
    assert_eq!(validate(&cs.spec), vec![]);
    for zero in ["0", "0Gi", "0.0Ti"] {
        if let Some(ct) = cs.spec.volumes[i].source.claim_template.as_mut() {
            ct.size = zero.into();
        }
        let errs = validate(&cs.spec);
        assert_eq!(errs.len(), 1, "{zero}: {errs:?}");
        assert_eq!(
            errs[0].field,
            format!("spec.volumes[{i}].source.claimTemplate.size")
        );
    }
}

/// A mountPath holding a reserved one (`/etc` holds the config and the purge token's
/// directories) is refused like the reserved ones: the pod's own files would be mounted inside
/// the served volume, and served.
#[test]
fn mount_paths_holding_the_pods_own_directories_are_invalid() {
    for mp in [
        "/etc",
        "/etc/",
        "/tmp/x",
        "/etc/content-server",
        "/etc/content-server-purge/a",
    ] {
        let mut cs = example("minimal.yaml");
        cs.spec.volumes[0].mount_path = Some(mp.into());
        let errs = validate(&cs.spec);
        assert!(
            errs.iter()
                .any(|e| e.field == "spec.volumes[0].mountPath" && e.message.contains("reserved")),
            "{mp}: {errs:?}"
        );
    }
    for mp in ["/etcetera", "/srv/etc", "/var/media", "/et"] {
        let mut cs = example("minimal.yaml");
        cs.spec.volumes[0].mount_path = Some(mp.into());
        assert_eq!(validate(&cs.spec), vec![], "{mp}");
    }
}

/// A mountPath that would hide the image's binary or C library, or mount into a kernel
/// filesystem, is refused: the pods would never start (the review's `/usr/local`).
#[test]
fn mount_paths_hiding_the_image_or_in_kernel_filesystems_are_invalid() {
    for mp in [
        "/usr/local",
        "/usr/local/bin",
        "/usr",
        "/lib",
        "/lib64/",
        "/usr/lib",
        "/proc",
        "/sys/fs",
        "/dev/shm",
        "/lib/x86_64-linux-gnu",
        "/usr/local/bin/content-server",
        "/etc/ssl/certs",
    ] {
        let mut cs = example("minimal.yaml");
        cs.spec.volumes[0].mount_path = Some(mp.into());
        let errs = validate(&cs.spec);
        assert!(
            errs.iter().any(|e| e.field == "spec.volumes[0].mountPath"
                && e.message.contains("its pods would not start")),
            "{mp}: {errs:?}"
        );
    }
    for mp in [
        "/usr/share/media",
        "/usr/local/media",
        "/library",
        "/devices",
        "/srv/lib",
    ] {
        let mut cs = example("minimal.yaml");
        cs.spec.volumes[0].mount_path = Some(mp.into());
        assert_eq!(validate(&cs.spec), vec![], "{mp}");
    }
}

/// The reserved mount paths are not reachable through `..`, `.` or `//`.
#[test]
fn mount_paths_with_dot_segments_or_double_slashes_are_invalid() {
    for mp in [
        "/srv/../etc/content-server",
        "//tmp",
        "/etc//content-server",
        "/srv/./x",
        "/srv/x/..",
    ] {
        let mut cs = example("minimal.yaml");
        cs.spec.volumes[0].mount_path = Some(mp.into());
        let errs = validate(&cs.spec);
        assert!(
            errs.iter()
                .any(|e| e.field == "spec.volumes[0].mountPath"
                    && e.message.contains("'..' segments")),
            "{mp}: {errs:?}"
        );
    }
    let mut cs = example("minimal.yaml");
    cs.spec.volumes[0].mount_path = Some("/srv/x.y/..z/".into());
    assert_eq!(validate(&cs.spec), vec![]);
}

/// A hostPath with `..`, `.` or `//` is refused like a mountPath (`/data/../etc` names /etc).
#[test]
fn host_paths_with_dot_segments_or_double_slashes_are_invalid() {
    let with_path = |p: &str| {
        let mut cs = example("minimal.yaml");
        cs.spec.allow_host_path = true;
        cs.spec.volumes[0].source = serde_json::from_value(serde_json::json!({
            "hostPath": {"path": p, "type": "DirectoryOrCreate"}
        }))
        .expect("source");
        validate(&cs.spec)
    };
    for p in [
        "/data/../etc",
        "/data/..",
        "//data",
        "/data//x",
        "/data/./x",
    ] {
        let errs = with_path(p);
        assert!(
            errs.iter()
                .any(|e| e.field == "spec.volumes[0].source.hostPath.path"
                    && e.message.contains("'..' segments")),
            "{p}: {errs:?}"
        );
    }
    for p in ["/data/cache", "/data/x..y/", "/mnt/.cache"] {
        assert_eq!(with_path(p), vec![], "{p}");
    }
}

/// A cache size too large for 64 bits is one error saying so (not "not a quantity", nor a
/// second error about the 0 bytes the config would hold).
#[test]
fn a_cache_size_beyond_u64_is_one_clear_error() {
    let mut cs = example("edge-cache.yaml");
    let i = cs
        .spec
        .volumes
        .iter()
        .position(|v| v.cache.is_some())
        .expect("a cache volume");
    let cache = |cs: &mut content_operator::crd::ContentServer| {
        cs.spec.volumes[i].cache.as_mut().expect("cache").clone()
    };
    let mut c = cache(&mut cs);
    c.max_size = Some("20Ei".into());
    cs.spec.volumes[i].cache = Some(c.clone());
    let errs = validate(&cs.spec);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, format!("spec.volumes[{i}].cache.maxSize"));
    assert!(
        errs[0]
            .message
            .contains("20Ei is more than 18446744073709551615 bytes"),
        "{}",
        errs[0].message
    );
    c.max_size = None;
    c.slice_size = "17Ei".into();
    cs.spec.volumes[i].cache = Some(c);
    let errs = validate(&cs.spec);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, format!("spec.volumes[{i}].cache.sliceSize"));
}

/// A CPU target without a CPU request (a limit alone defaults it) is refused: the HPA would find
/// no utilization to compute and, with a metric missing, never scale down.
#[test]
fn validation_refuses_a_cpu_target_without_a_cpu_request() {
    let mut cs = example("hpa.yaml");
    assert_eq!(
        cs.spec.autoscaling.as_ref().unwrap().target_cpu_utilization,
        Some(80)
    );
    assert_eq!(validate(&cs.spec), vec![]);
    let resources = cs.spec.resources.as_mut().expect("resources");
    resources.requests.as_mut().expect("requests").remove("cpu");
    let (field, message) = only_error(&cs);
    assert_eq!(field, "spec.autoscaling.targetCPUUtilization");
    assert!(message.contains("spec.resources.requests.cpu"), "{message}");
    for (request, limit, ok) in [
        (Some("0"), None, false),
        (Some("0m"), Some("2"), false),
        (None, Some("0.0"), false),
        (Some("250m"), None, true),
        (Some("0.1"), None, true),
        (None, Some("1"), true),
    ] {
        let r = cs.spec.resources.as_mut().expect("resources");
        let set = |m: &mut Option<std::collections::BTreeMap<String, Quantity>>,
                   q: Option<&str>| {
            let m = m.get_or_insert_with(Default::default);
            match q {
                Some(q) => m.insert("cpu".into(), Quantity(q.into())),
                None => m.remove("cpu"),
            };
        };
        set(&mut r.requests, request);
        set(&mut r.limits, limit);
        let errs = validate(&cs.spec);
        assert_eq!(errs.is_empty(), ok, "{request:?} {limit:?}: {errs:?}");
    }
    // No CPU target: no request needed.
    cs.spec.resources = None;
    cs.spec.autoscaling.as_mut().unwrap().target_cpu_utilization = None;
    assert_eq!(validate(&cs.spec), vec![]);
}

/// The messages of the Gateway API's two parentRefs rules found in `errs`.
fn parent_ref_messages<'a>(errs: impl IntoIterator<Item = &'a str>) -> Vec<&'static str> {
    const RULES: [&str; 2] = [
        "sectionName must be specified when parentRefs includes 2 or more references to the same parent",
        "sectionName must be unique when parentRefs includes 2 or more references to the same parent",
    ];
    let errs: Vec<&str> = errs.into_iter().collect();
    RULES
        .into_iter()
        .filter(|r| errs.iter().any(|e| e.contains(r)))
        .collect()
}

/// Our CEL rules on `spec.expose.httpRoute.parentRefs`, the operator's own check and the released
/// Gateway API CRD's rules on the HTTPRoute the operator renders refuse exactly the same lists,
/// with the same messages (the route would otherwise be refused only at apply time).
#[test]
fn parent_refs_are_refused_exactly_as_the_gateway_api_refuses_them() {
    use kube::CustomResourceExt;
    let upstream = gateway_route_schema();
    let ours = serde_json::to_value(content_operator::crd::ContentServer::crd()).expect("CRD")
        ["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        .clone();
    let cel = |schema: &serde_json::Value, o: &serde_json::Value| match kube_cel::validate(
        schema, o, None,
    ) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
    };
    use serde_json::json as j;
    for (refs, refused) in [
        (j!([{"name": "gw"}, {"name": "gw"}]), true),
        (
            j!([{"name": "gw"}, {"name": "gw", "sectionName": "https"}]),
            true,
        ),
        (
            j!([{"name": "gw", "sectionName": "a", "port": 443},
                {"name": "gw", "sectionName": "a", "port": 8443}]),
            true,
        ),
        (
            j!([{"name": "gw", "port": 443}, {"name": "gw", "port": 8443}]),
            true,
        ),
        (
            j!([{"name": "gw", "namespace": "n", "sectionName": "a"},
                {"name": "gw", "namespace": "n"}]),
            true,
        ),
        (
            j!([{"name": "gw"}, {"name": "gw"}, {"name": "gw", "sectionName": "a"}]),
            true,
        ),
        (
            j!([{"name": "gw", "sectionName": "a"}, {"name": "gw", "sectionName": "b"}]),
            false,
        ),
        (
            j!([{"name": "gw", "sectionName": "a", "port": 443},
                {"name": "gw", "sectionName": "b", "port": 443}]),
            false,
        ),
        (j!([{"name": "gw"}, {"name": "other"}]), false),
        (
            j!([{"name": "gw", "namespace": "a"}, {"name": "gw", "namespace": "b"}]),
            false,
        ),
        (
            j!([{"name": "gw"}, {"name": "gw", "namespace": "n"}]),
            false,
        ),
        (j!([{"name": "gw", "sectionName": "a"}]), false),
    ] {
        let mut cs = example("exposed.yaml");
        cs.spec
            .expose
            .as_mut()
            .unwrap()
            .http_route
            .as_mut()
            .unwrap()
            .parent_refs = serde_json::from_value(refs.clone()).expect("parentRefs");
        let mut route =
            serde_json::to_value(expose::http_route(&cs).expect("route")).expect("json");
        route.as_object_mut().expect("object").remove("metadata");
        let theirs_errs = cel(&upstream, &route);
        let theirs = parent_ref_messages(theirs_errs.iter().map(String::as_str));
        let crd_errs = cel(&ours, &serde_json::to_value(&cs).expect("json"));
        let crd = parent_ref_messages(crd_errs.iter().map(String::as_str));
        let op_errs = validate(&cs.spec);
        assert!(
            op_errs
                .iter()
                .all(|e| e.field.starts_with("spec.expose.httpRoute.parentRefs[")),
            "{op_errs:?}"
        );
        let operator = parent_ref_messages(op_errs.iter().map(|e| e.message.as_str()));
        assert_eq!(
            !theirs.is_empty(),
            refused,
            "{refs}: upstream says {theirs_errs:?}"
        );
        assert_eq!(crd, theirs, "{refs}: our CEL says {crd_errs:?}");
        assert_eq!(operator, theirs, "{refs}: the operator says {op_errs:?}");
        assert_eq!(op_errs.is_empty(), !refused, "{refs}: {op_errs:?}");
    }
}

/// `spec.service.ipFamilyPolicy` reaches every Service (client, the separate metrics one of a
/// published client Service, headless), so a dual-stack cluster serves both families; unset,
/// none says one (the cluster's default, and a policy patched in by hand is left alone by the
/// operator's server-side apply, which then owns no such field).
#[test]
fn ip_family_policy_reaches_every_service() {
    let mut cs = example("minimal.yaml");
    let policies = |cs: &content_operator::crd::ContentServer| {
        let mut out = vec![
            service::service(cs).spec.expect("svc").ip_family_policy,
            service::headless_service(cs)
                .spec
                .expect("headless")
                .ip_family_policy,
        ];
        if let Some(m) = service::metrics_service(cs) {
            out.push(m.spec.expect("metrics svc").ip_family_policy);
        }
        out
    };
    assert!(policies(&cs).iter().all(Option::is_none));
    cs.spec.service.ip_family_policy = Some(content_operator::crd::IpFamilyPolicy::PreferDualStack);
    cs.spec.service.type_ = content_operator::crd::ServiceType::LoadBalancer;
    let got = policies(&cs);
    assert_eq!(
        got.len(),
        3,
        "a published Service has a metrics Service beside it"
    );
    assert!(
        got.iter().all(|p| p.as_deref() == Some("PreferDualStack")),
        "{got:?}"
    );
    // The CRD field takes Kubernetes' spelling only.
    let v: serde_json::Value = serde_json::to_value(&cs.spec.service).expect("json");
    assert_eq!(v["ipFamilyPolicy"], "PreferDualStack");
    let bad = serde_json::json!({"ipFamilyPolicy": "DualStack"});
    assert!(serde_json::from_value::<content_operator::crd::ServiceSpec>(bad).is_err());
}

/// The container's resources are checked as the API server would check them in the
/// Deployment, naming the field: a value that is no quantity, a negative one, a request above
/// its limit. (Accepted, every apply of the Deployment failed, its ConfigMap already written.)
#[test]
fn container_resources_are_quantities_with_requests_within_limits() {
    let with = |requests: serde_json::Value, limits: serde_json::Value| {
        let mut cs = example("minimal.yaml");
        cs.spec.resources = Some(
            serde_json::from_value(serde_json::json!({"requests": requests, "limits": limits}))
                .expect("resources"),
        );
        validate(&cs.spec)
            .into_iter()
            .filter(|e| e.field.starts_with("spec.resources"))
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        with(
            serde_json::json!({"cpu": "500m", "memory": "1.5Gi"}),
            serde_json::json!({"cpu": 2, "memory": "8589934592000m"})
        ),
        Vec::<String>::new()
    );
    // Equal values in two spellings are equal (as f64, 700m came out above 0.7).
    for (req, lim) in [
        ("700m", "0.7"),
        ("9m", "0.009"),
        ("13m", "0.013"),
        ("1Gi", "1024Mi"),
    ] {
        assert_eq!(
            with(
                serde_json::json!({"cpu": req}),
                serde_json::json!({"cpu": lim})
            ),
            Vec::<String>::new(),
            "{req} / {lim}"
        );
    }
    let errs = with(
        serde_json::json!({"cpu": "abc", "memory": "2Gi", "ephemeral-storage": "-1Gi"}),
        serde_json::json!({"memory": "1Gi"}),
    );
    assert_eq!(errs.len(), 3, "{errs:?}");
    assert!(
        errs.iter()
            .any(|e| e.starts_with("spec.resources.requests.cpu: \"abc\" is not a quantity")),
        "{errs:?}"
    );
    assert!(
        errs.iter()
            .any(|e| e
                .starts_with("spec.resources.requests.ephemeral-storage: \"-1Gi\" is negative")),
        "{errs:?}"
    );
    assert!(
        errs.iter()
            .any(|e| e == "spec.resources.requests.memory: 2Gi is above its limit 1Gi"),
        "{errs:?}"
    );
    // A CPU request that only contains a digit is not one above 0 for the HPA.
    let mut cs = example("hpa.yaml");
    cs.spec.resources = Some(
        serde_json::from_value(serde_json::json!({"requests": {"cpu": "abc1"}}))
            .expect("resources"),
    );
    if let Some(a) = cs.spec.autoscaling.as_mut() {
        a.target_cpu_utilization = Some(70);
    }
    assert!(validate(&cs.spec)
        .iter()
        .any(|e| e.field == "spec.autoscaling.targetCPUUtilization"));
}

/// A ServiceMonitor interval the Prometheus Operator would refuse is reported, naming the
/// field, when a ServiceMonitor is rendered; left alone while none is.
#[test]
fn a_service_monitor_interval_is_checked_when_one_is_rendered() {
    let errs = |enabled: bool| {
        let mut cs = example("minimal.yaml");
        cs.spec.metrics.service_monitor.enabled = enabled;
        cs.spec.metrics.service_monitor.interval = Some("30".into());
        validate(&cs.spec)
            .into_iter()
            .filter(|e| e.field == "spec.metrics.serviceMonitor.interval")
            .count()
    };
    assert_eq!(errs(true), 1);
    assert_eq!(errs(false), 0);
}
