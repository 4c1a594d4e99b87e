//! The caching options of a ContentServer (issue 12) reach the server's own config:
//! `examples/edge-cache.yaml` rendered field by field (quantities as bytes, one origin, cache
//! routes), its CA and purge token mounted, and the rules reported on spec paths (a cache larger
//! than its claim is InvalidSpec naming the field).

mod support;

use content_operator::builders::configmap::server_config;
use content_operator::builders::workload::statefulset;
use content_operator::crd::{ORIGIN_CA_DIR, PURGE_TOKEN_DIR};
use content_operator::validation::validate;
use content_server::config::ByteSize;
use support::*;

#[test]
fn edge_cache_example_renders_into_the_server_config() {
    let cs = example("edge-cache.yaml");
    let cfg = server_config(&cs.spec);
    assert_eq!(cfg.origins.len(), 1);
    let o = &cfg.origins[0];
    assert_eq!(o.name, "origin");
    assert_eq!(
        o.servers,
        vec![
            "https://origin-a.media.example",
            "https://origin-b.media.example"
        ]
    );
    assert_eq!(o.host.as_deref(), Some("media.example"));
    assert_eq!(
        o.ca_file.as_deref(),
        Some(std::path::Path::new(&format!("{ORIGIN_CA_DIR}/ca.pem")))
    );
    assert_eq!(
        (o.connect_timeout_ms, o.max_connections, o.pass_buffer_bytes),
        (2000, 512, 2 << 20)
    );
    for v in &cfg.volumes {
        let c = v.cache.as_ref().expect("cache volume");
        assert_eq!(c.max_size, Some(ByteSize(900 << 30)), "{}", v.name);
        assert_eq!((c.slice_size, c.inactive_secs), (1 << 20, 86400));
    }
    let r = &cfg.routes[0];
    assert_eq!(r.origin.as_deref(), Some("origin"));
    let p = r.cache.as_ref().expect("cache policy");
    assert_eq!(p.valid[1].status, vec![404]);
    assert_eq!(p.stale_if_error_secs, 86400);
    assert_eq!(
        cfg.admin.purge_token_file,
        format!("{PURGE_TOKEN_DIR}/token")
    );
    assert_eq!(validate(&cs.spec), Vec::new());
    let back = rendered_back(&cs.spec);
    assert_eq!(back.origins, cfg.origins);
    assert_eq!(back.volumes[1].cache, cfg.volumes[1].cache);
}

#[test]
fn without_cache_options_nothing_is_rendered() {
    assert_rendered_without(
        "media-node.yaml",
        &[
            "origins",
            "[volumes.cache]",
            "[routes.cache]",
            "purge_token_file = \"/",
        ],
    );
}

#[test]
fn a_cache_larger_than_its_claim_names_the_field() {
    let mut cs = example("edge-cache.yaml");
    cs.spec.volumes[1].cache.as_mut().expect("cache").max_size = Some("200Gi".into());
    cs.spec.volumes[1]
        .source
        .claim_template
        .as_mut()
        .expect("claim")
        .size = "100Gi".into();
    let errs: Vec<String> = validate(&cs.spec).iter().map(|e| e.to_string()).collect();
    assert_eq!(
        errs,
        vec!["spec.volumes[1].cache.maxSize: 200Gi exceeds claimTemplate.size 100Gi"]
    );
    // Exactly the claim's size fits.
    cs.spec.volumes[1].cache.as_mut().expect("cache").max_size = Some("100Gi".into());
    assert_eq!(validate(&cs.spec), Vec::new());
}

/// A cache on an emptyDir lives on the node's filesystem, where the server's default (keep 10%
/// free) is the kubelet's eviction threshold: it defaults to 90% of its sizeLimit and may not
/// hold more (the kubelet evicts a pod whose emptyDir goes over it), one without a limit needs
/// maxSize, and those in memory must together leave the server a quarter of the container's
/// memory limit. A hostPath is often a disk of its own: the server's default stands there.
#[test]
fn a_cache_on_the_nodes_filesystem_is_bounded_below_what_the_kubelet_evicts_at() {
    use content_operator::crd::{EmptyDirMedium, EmptyDirSource, HostPathSource};
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let mut cs = example("edge-cache.yaml");
    let errors = |cs: &content_operator::crd::ContentServer| -> Vec<String> {
        validate(&cs.spec).iter().map(|e| e.to_string()).collect()
    };
    let empty_dir = |limit: Option<&str>, medium: Option<EmptyDirMedium>| EmptyDirSource {
        size_limit: limit.map(str::to_string),
        medium,
    };
    cs.spec.volumes[0].source.claim_template = None;
    cs.spec.volumes[0].source.empty_dir = Some(empty_dir(Some("100Gi"), None));
    // At most 90% of the limit; absent, exactly that (in bytes) is rendered.
    cs.spec.volumes[0].cache.as_mut().expect("cache").max_size = Some("91Gi".into());
    assert_eq!(
        errors(&cs),
        vec!["spec.volumes[0].cache.maxSize: 91Gi is more than 90% of emptyDir.sizeLimit 100Gi: fills in flight and the filesystem need the rest, and the kubelet evicts a pod whose emptyDir goes over its sizeLimit"]
    );
    cs.spec.volumes[0].cache.as_mut().expect("cache").max_size = Some("90Gi".into());
    assert_eq!(errors(&cs), Vec::<String>::new());
    cs.spec.volumes[0].cache.as_mut().expect("cache").max_size = None;
    assert_eq!(errors(&cs), Vec::<String>::new());
    let cache = |cs: &content_operator::crd::ContentServer| {
        server_config(&cs.spec).volumes[0]
            .cache
            .as_ref()
            .expect("a cache volume")
            .max_size
    };
    assert_eq!(cache(&cs), Some(ByteSize(90 << 30)));
    // A default below one slice is said in terms of what was written.
    cs.spec.volumes[0].source.empty_dir = Some(empty_dir(Some("1Mi"), None));
    assert_eq!(
        errors(&cs),
        vec!["spec.volumes[0].cache.maxSize: is 90% of emptyDir.sizeLimit 1Mi when absent (943718 bytes), less than one slice (sliceSize 1Mi): raise sizeLimit or lower sliceSize"]
    );
    // No limit: maxSize is required (and nothing is made up for it).
    cs.spec.volumes[0].source.empty_dir = Some(empty_dir(None, None));
    assert_eq!(cache(&cs), None);
    let errs = errors(&cs);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("spec.volumes[0].cache.maxSize: is required on an emptyDir without sizeLimit: the server's default keeps 10% of the filesystem free"),
        "{errs:?}"
    );
    cs.spec.allow_host_path = true;
    cs.spec.volumes[0].source.empty_dir = None;
    cs.spec.volumes[0].source.host_path = Some(HostPathSource {
        path: "/mnt/disk1".into(),
        type_: None,
    });
    assert!(
        !errors(&cs).iter().any(|e| e.contains("maxSize")),
        "{:?}",
        errors(&cs)
    );
    assert_eq!(
        cache(&cs),
        None,
        "the server's default: keep 10% of that disk free"
    );
    // In memory: charged to the container's memory limit.
    cs.spec.allow_host_path = false;
    cs.spec.volumes[0].source.host_path = None;
    cs.spec.volumes[0].source.empty_dir =
        Some(empty_dir(Some("8Gi"), Some(EmptyDirMedium::Memory)));
    cs.spec.volumes[0].cache.as_mut().expect("cache").max_size = None;
    cs.spec.resources = Some(ResourceRequirements {
        limits: Some([("memory".to_string(), Quantity("8Gi".into()))].into()),
        ..ResourceRequirements::default()
    });
    assert_eq!(
        errors(&cs),
        vec!["spec.resources.limits.memory: caches on emptyDirs of medium Memory count against resources.limits.memory 8Gi: together they may hold at most three quarters of it (6442450944 bytes; they hold 7730941132)"]
    );
    cs.spec.volumes[0].cache.as_mut().expect("cache").max_size = Some("3Gi".into());
    assert_eq!(errors(&cs), Vec::<String>::new());
    // Two of them are counted together.
    cs.spec.volumes[1].source.claim_template = None;
    cs.spec.volumes[1].source.empty_dir =
        Some(empty_dir(Some("8Gi"), Some(EmptyDirMedium::Memory)));
    cs.spec.volumes[1].cache.as_mut().expect("cache").max_size = Some("3Gi".into());
    assert_eq!(errors(&cs), Vec::<String>::new());
    cs.spec.volumes[1].cache.as_mut().expect("cache").max_size = Some("4Gi".into());
    assert_eq!(
        errors(&cs),
        vec!["spec.resources.limits.memory: caches on emptyDirs of medium Memory count against resources.limits.memory 8Gi: together they may hold at most three quarters of it (6442450944 bytes; they hold 7516192768)"]
    );
    // Any form of quantity the API server takes for the limit (it was skipped for these).
    for limit in ["8589934592000m", "8.589934592e9"] {
        cs.spec.resources = Some(ResourceRequirements {
            limits: Some([("memory".to_string(), Quantity(limit.into()))].into()),
            ..ResourceRequirements::default()
        });
        assert_eq!(errors(&cs).len(), 1, "{limit}: {:?}", errors(&cs));
    }
}

#[test]
fn server_cache_rules_are_reported_on_spec_paths() {
    let mut cs = example("edge-cache.yaml");
    let origin = cs.spec.origin.as_mut().expect("origin");
    origin.servers.push("ftp://nope".into());
    cs.spec.volumes[2].cache.as_mut().expect("cache").slice_size = "1k".into();
    cs.spec.volumes[0].cache.as_mut().expect("cache").min_uses = 0;
    cs.spec.routes[0].cache.as_mut().expect("cache").valid[1].status = vec![200];
    let fields: Vec<String> = validate(&cs.spec).into_iter().map(|e| e.field).collect();
    assert_eq!(
        fields,
        vec![
            "spec.origin.servers[2]",
            "spec.volumes[0].cache.minUses",
            "spec.volumes[2].cache.sliceSize",
            "spec.routes[0].cache.valid[1].status",
        ]
    );
    // A cache route without spec.origin is one error on the route, not the server's wording.
    let mut cs = example("edge-cache.yaml");
    cs.spec.origin = None;
    let errs: Vec<String> = validate(&cs.spec).iter().map(|e| e.to_string()).collect();
    assert!(
        errs.contains(&"spec.routes[0].cache: a route with cache needs spec.origin".to_string()),
        "{errs:?}"
    );
    assert!(!errs.iter().any(|e| e.contains("spec.origin.")), "{errs:?}");
}

#[test]
fn cache_pods_mount_claims_read_write_and_the_ca_and_token_read_only() {
    let cs = example("edge-cache.yaml");
    let sts = statefulset(&cs, "h");
    let spec = sts.spec.expect("spec");
    let retain = spec
        .persistent_volume_claim_retention_policy
        .expect("retention");
    assert_eq!(
        (
            retain.when_scaled.as_deref(),
            retain.when_deleted.as_deref()
        ),
        (Some("Retain"), Some("Retain"))
    );
    assert_eq!(spec.volume_claim_templates.expect("claims").len(), 3);
    let pod = spec.template.spec.expect("pod");
    let mounts = pod.containers[0].volume_mounts.clone().expect("mounts");
    let ro = |name: &str| {
        mounts
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("mount {name}"))
            .read_only
    };
    for d in ["vol-disk1", "vol-disk2", "vol-disk3"] {
        assert_eq!(ro(d), Some(false), "{d}: the cache is written");
    }
    assert_eq!(
        (ro("origin-ca"), ro("purge-token")),
        (Some(true), Some(true))
    );
    let vols = pod.volumes.expect("volumes");
    let ca = vols
        .iter()
        .find(|v| v.name == "origin-ca")
        .expect("ca volume");
    let cm = ca.config_map.as_ref().expect("from the ConfigMap");
    assert_eq!(cm.name, "origin-ca");
    let items = cm.items.as_ref().expect("items");
    assert_eq!(
        (items[0].key.as_str(), items[0].path.as_str()),
        ("ca.pem", "ca.pem")
    );
    assert!(ca.secret.is_none());
    let token = vols
        .iter()
        .find(|v| v.name == "purge-token")
        .expect("token volume");
    let secret = token.secret.as_ref().expect("from the Secret");
    assert_eq!(secret.secret_name.as_deref(), Some("edge-purge"));
    assert_eq!(secret.items.as_ref().expect("items")[0].path, "token");
}

/// One directory for two volumes, one of them a cache: the server sees two mount paths and
/// cannot tell (two caches fight over the lock and crash-loop, or evict each other's files; a
/// static volume holding a cache serves its entry files). The same claim twice, or hostPaths
/// one inside the other, are InvalidSpec naming the later volume's source.
#[test]
fn a_cache_needs_a_directory_of_its_own() {
    use content_operator::crd::{HostPathSource, HostPathType, PvcSource};
    let errors = |cs: &content_operator::crd::ContentServer| -> Vec<String> {
        validate(&cs.spec).iter().map(|e| e.to_string()).collect()
    };
    let mut cs = example("edge-cache.yaml");
    cs.spec.replicas = 1;
    cs.spec.autoscaling = None;
    for v in &mut cs.spec.volumes[..2] {
        v.source.claim_template = None;
        v.source.persistent_volume_claim = Some(PvcSource {
            claim_name: "data".into(),
        });
    }
    assert_eq!(
        errors(&cs),
        vec!["spec.volumes[1].source.persistentVolumeClaim.claimName: volume \"disk2\" is the same directory as volume \"disk1\" (data): a cache volume needs a directory of its own, neither inside nor containing another volume's"]
    );
    // A static volume on the claim a cache uses is refused too.
    let cache = cs.spec.volumes[1].cache.take();
    assert!(
        errors(&cs)
            .iter()
            .any(|e| e.starts_with("spec.volumes[1].source.persistentVolumeClaim.claimName: volume \"disk2\" is the same directory")),
        "{:?}",
        errors(&cs)
    );
    cs.spec.volumes[1].cache = cache;
    cs.spec.allow_host_path = true;
    let host = |path: &str, type_| HostPathSource {
        path: path.into(),
        type_,
    };
    for (i, path) in [(0, "/data/cache"), (1, "/data/")] {
        let v = &mut cs.spec.volumes[i];
        v.source.persistent_volume_claim = None;
        v.source.host_path = Some(host(path, Some(HostPathType::Directory)));
    }
    assert_eq!(
        errors(&cs),
        vec!["spec.volumes[1].source.hostPath.path: volume \"disk2\" contains volume \"disk1\" (/data/cache): a cache volume needs a directory of its own, neither inside nor containing another volume's"]
    );
    // Siblings are two directories.
    cs.spec.volumes[1].source.host_path = Some(host("/data/static", Some(HostPathType::Directory)));
    assert_eq!(errors(&cs), Vec::<String>::new());
}
