//! Unit tests of the pure builders, field by field, from the minimal example to the three-disk
//! media node, plus the operator-side validation and its spec-path mapping.

mod support;

use content_operator::builders::configmap::{config_hash, configmap, render, server_config};
use content_operator::builders::workload::{
    deployment, pod_template, statefulset, termination_grace_secs, WorkloadKind,
};
use content_operator::builders::{pdb, service, servicemonitor, CONFIG_HASH_ANNOTATION};
use content_operator::validation::{spec_path, validate};
use content_server::config::{Config, Offload};
use k8s_openapi::api::core::v1::HTTPGetAction;
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
    assert_eq!(cfg.listeners[0].address, "0.0.0.0");
    assert_eq!(cfg.listeners[0].port, 8080);
    assert_eq!(
        cfg.admin.listen, "0.0.0.0:9190",
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
    assert_eq!(cm.metadata.name.as_deref(), Some("minimal-config"));
    assert_eq!(cm.metadata.namespace.as_deref(), Some(NS));
    assert_eq!(
        cm.data.as_ref().and_then(|d| d.get("config.toml")),
        Some(&rendered.toml)
    );

    assert_eq!(WorkloadKind::of(&cs.spec), WorkloadKind::Deployment);
    let dep = deployment(&cs, &rendered.hash);
    let spec = dep.spec.expect("spec");
    assert_eq!(spec.replicas, Some(1));
    let ru = spec
        .strategy
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
    let p = pdb::pdb(&cs).expect("PDB with 2 replicas");
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
    // The HPA document targets the ContentServer's scale subresource.
    let hpa = example_docs("hpa.yaml")
        .into_iter()
        .find(|d| d["kind"] == "HorizontalPodAutoscaler")
        .expect("HPA");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "ContentServer");
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["apiVersion"],
        "contentserver.dev/v1alpha1"
    );
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["name"],
        cs.metadata.name.clone().expect("name").as_str()
    );
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
    let fields: Vec<String> = validate(&cs.spec).into_iter().map(|e| e.field).collect();
    for want in [
        "spec.volumes[1].pool.maxQueue",
        "spec.volumes[0].mountPath",
        "spec.routes[0].split[0].percent",
        "spec.server.sendfileMaxChunk",
        "spec.server.limits.maxHeaderBytes",
        "spec.metrics.port",
        "spec.volumes[2].source",
    ] {
        assert!(
            fields.iter().any(|f| f == want),
            "missing {want} in {fields:?}"
        );
    }
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
    assert!(validate(&cs.spec)
        .iter()
        .any(|e| e.field == "spec.volumes[0].mountPath"));
    cs.spec.volumes[0].mount_path = Some("/tmp/x".into());
    assert!(validate(&cs.spec)
        .iter()
        .any(|e| e.field == "spec.volumes[0].mountPath"));
    cs.spec.volumes[0].mount_path = None;
    cs.spec.pdb.max_unavailable = IntOrString::String("lots".into());
    assert!(validate(&cs.spec)
        .iter()
        .any(|e| e.field == "spec.pdb.maxUnavailable"));
    cs.spec.pdb.max_unavailable = IntOrString::Int(1);
    cs.spec.replicas = -1;
    assert!(validate(&cs.spec)
        .iter()
        .any(|e| e.field == "spec.replicas"));
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
    assert_eq!(spec_path("admin.listen"), "spec.metrics.port");
    assert_eq!(spec_path("http.index[0]"), "spec.server.index[0]");
    assert_eq!(spec_path("workers"), "spec.server.workers");
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
