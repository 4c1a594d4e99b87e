//! The pod template and the workload running it: a Deployment, or a StatefulSet when any volume
//! uses a per-pod claim template.
//!
//! Why two kinds: per-pod claims exist only as StatefulSet volumeClaimTemplates; without them a
//! Deployment is preferred because it rolls with surge (maxSurge 25%, maxUnavailable 0), so a
//! config change never lowers serving capacity, and it has no immutable claim templates.
//! Except when a cache volume is shared between pods (an existing persistentVolumeClaim, a
//! hostPath): the server locks its cache directory and a second process on it refuses to start,
//! so a surge pod would crash until the old pod left, which a surge rollout waits for its new pod
//! to be ready before doing. Such a Deployment is `Recreate` (old pods stop first), and so is
//! one pod on an existing claim (a ReadWriteOnce claim cannot follow a surge pod to another
//! node). Across pods:
//! a cache on an existing claim allows one replica (refused by the CRD's CEL rules and
//! `validation.rs`), and a hostPath cache gets a required pod anti-affinity on the node name (one
//! pod per node) for either kind. A StatefulSet
//! replaces a pod only after it stopped, and per-pod claims and emptyDirs are never shared. The
//! StatefulSet uses `podManagementPolicy: Parallel` (pods are interchangeable replicas, not an
//! ordered cluster) and keeps claims on scale-down and deletion (`Retain`).
//!
//! Pod hardening lives here: probes on the admin port (`/readyz`, `/healthz`), a preStop sleep so
//! endpoints are removed before the server drains, a grace period longer than the server's
//! `shutdown_timeout_secs`, non-root, read-only root filesystem, no capabilities, seccomp
//! RuntimeDefault. Pure functions only.

use crate::builders::configmap::{CONFIG_DIR, CONFIG_KEY};
use crate::builders::{
    child_meta, configmap_name, headless_service_name, pod_volume_name, selector_labels,
    workload_name, CONFIG_HASH_ANNOTATION,
};
use crate::crd::{ContentServer, ContentServerSpec};
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment, StatefulSet,
    StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource,
    HTTPGetAction, HostPathVolumeSource, ImageVolumeSource, Lifecycle, LifecycleHandler,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource,
    PodAffinityTerm, PodAntiAffinity, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    SeccompProfile, SecurityContext, SleepAction, Sysctl, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use std::collections::BTreeMap;

/// Name of the server container.
pub const CONTAINER: &str = "content-server";
/// Seconds the preStop hook waits so Service endpoints drop the pod before SIGTERM.
pub const PRESTOP_SLEEP_SECS: i64 = 5;
/// Extra seconds of grace beyond preStop + the server's drain timeout.
pub const GRACE_MARGIN_SECS: i64 = 5;
/// uid/gid the pods run as by default (distroless `nonroot`).
pub const DEFAULT_UID: i64 = 65532;

/// Which workload kind a spec needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
}

impl WorkloadKind {
    pub fn of(spec: &ContentServerSpec) -> WorkloadKind {
        if spec.uses_claim_templates() {
            WorkloadKind::StatefulSet
        } else {
            WorkloadKind::Deployment
        }
    }
}

/// terminationGracePeriodSeconds: preStop sleep + server drain + margin.
pub fn termination_grace_secs(spec: &ContentServerSpec) -> i64 {
    PRESTOP_SLEEP_SECS + i64::from(spec.server.shutdown_timeout_secs) + GRACE_MARGIN_SECS
}

/// The sysctl that lets the non-root server, with no capabilities, bind ports from its value
/// up (a namespaced sysctl Kubernetes allows by default since 1.22).
pub const UNPRIVILEGED_PORT_SYSCTL: &str = "net.ipv4.ip_unprivileged_port_start";

/// The lowest port the pod binds (its HTTP and metrics ports).
pub fn lowest_port(spec: &ContentServerSpec) -> i32 {
    spec.server.port.min(spec.metrics.port)
}

fn default_pod_security_context(spec: &ContentServerSpec) -> PodSecurityContext {
    // A port below 1024 needs CAP_NET_BIND_SERVICE, which the container drops, or the sysctl.
    let port = lowest_port(spec);
    let sysctls = (port < 1024).then(|| {
        vec![Sysctl {
            name: UNPRIVILEGED_PORT_SYSCTL.into(),
            value: port.to_string(),
        }]
    });
    PodSecurityContext {
        sysctls,
        run_as_non_root: Some(true),
        run_as_user: Some(DEFAULT_UID),
        run_as_group: Some(DEFAULT_UID),
        fs_group: Some(DEFAULT_UID),
        // Without it the kubelet changes the owner of every file of every writable volume at
        // each mount: minutes per pod start on a cache disk of a million slices.
        fs_group_change_policy: Some("OnRootMismatch".into()),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}

fn container_security_context() -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        read_only_root_filesystem: Some(true),
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..SecurityContext::default()
    }
}

fn probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String(super::METRICS_PORT.into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(2),
        ..Probe::default()
    }
}

/// Pod volumes for everything except claim templates (those come from the StatefulSet); the
/// config is the ConfigMap of this config's hash.
fn pod_volumes(cs: &ContentServer, config_hash: &str) -> Vec<Volume> {
    let mut vols = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: configmap_name(cs, config_hash),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
    ];
    for v in &cs.spec.volumes {
        let name = pod_volume_name(&v.name);
        let src = &v.source;
        let vol = if let Some(pvc) = &src.persistent_volume_claim {
            Volume {
                name,
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: pvc.claim_name.clone(),
                    read_only: Some(v.mounted_read_only()),
                }),
                ..Volume::default()
            }
        } else if let Some(ed) = &src.empty_dir {
            Volume {
                name,
                empty_dir: Some(EmptyDirVolumeSource {
                    medium: ed.medium.map(|_| "Memory".to_string()),
                    size_limit: ed.size_limit.clone().map(Quantity),
                }),
                ..Volume::default()
            }
        } else if let Some(hp) = &src.host_path {
            Volume {
                name,
                host_path: Some(HostPathVolumeSource {
                    path: hp.path.clone(),
                    type_: hp.type_.map(|t| t.as_str().to_string()),
                }),
                ..Volume::default()
            }
        } else if let Some(img) = &src.image {
            Volume {
                name,
                image: Some(ImageVolumeSource {
                    reference: Some(img.reference.clone()),
                    pull_policy: img.pull_policy.map(|p| p.as_str().to_string()),
                }),
                ..Volume::default()
            }
        } else {
            // claimTemplate: provided by volumeClaimTemplates under the same name.
            continue;
        };
        vols.push(vol);
    }
    vols
}

/// The StatefulSet volumeClaimTemplates (empty for a Deployment).
pub fn claim_templates(cs: &ContentServer) -> Vec<PersistentVolumeClaim> {
    let mut templates: Vec<PersistentVolumeClaim> = cs
        .spec
        .volumes
        .iter()
        .filter_map(|v| {
            let ct = v.source.claim_template.as_ref()?;
            Some(PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(pod_volume_name(&v.name)),
                    labels: Some(selector_labels(cs)),
                    ..ObjectMeta::default()
                },
                spec: Some(PersistentVolumeClaimSpec {
                    access_modes: Some(
                        ct.access_modes
                            .iter()
                            .map(|m| m.as_str().to_string())
                            .collect(),
                    ),
                    storage_class_name: ct.storage_class_name.clone(),
                    resources: Some(VolumeResourceRequirements {
                        requests: Some(BTreeMap::from([(
                            "storage".to_string(),
                            Quantity(ct.size.clone()),
                        )])),
                        ..VolumeResourceRequirements::default()
                    }),
                    ..PersistentVolumeClaimSpec::default()
                }),
                ..PersistentVolumeClaim::default()
            })
        })
        .collect();
    // In name order: the API server compares the list in order, so the spec's order of
    // volumes (which a user may change freely) must not reorder it.
    templates.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    templates
}

/// The pod template; `config_hash` names the mounted ConfigMap and goes into an annotation, so a
/// config change rolls the pods.
pub fn pod_template(cs: &ContentServer, config_hash: &str) -> PodTemplateSpec {
    let spec = &cs.spec;
    let mut labels = spec.pod.labels.clone();
    labels.extend(selector_labels(cs));
    let mut annotations = spec.pod.annotations.clone();
    annotations.insert(CONFIG_HASH_ANNOTATION.into(), config_hash.into());

    let mut mounts = vec![
        VolumeMount {
            name: "config".into(),
            mount_path: CONFIG_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
        VolumeMount {
            name: "tmp".into(),
            mount_path: "/tmp".into(),
            ..VolumeMount::default()
        },
    ];
    mounts.extend(spec.volumes.iter().map(|v| VolumeMount {
        name: pod_volume_name(&v.name),
        mount_path: ContentServerSpec::mount_path(v),
        // An image volume is read-only whatever the spec says; a cache volume is written.
        read_only: Some(v.mounted_read_only() || v.source.image.is_some()),
        ..VolumeMount::default()
    }));
    let (cache_vols, cache_mounts) = crate::builders::cache::pod_volumes(spec);
    mounts.extend(cache_mounts);

    let container = Container {
        name: CONTAINER.into(),
        image: Some(spec.image.clone()),
        image_pull_policy: Some(spec.image_pull_policy.as_str().into()),
        args: Some(vec![
            "serve".into(),
            "--config".into(),
            format!("{CONFIG_DIR}/{CONFIG_KEY}"),
        ]),
        ports: Some(vec![
            ContainerPort {
                name: Some(super::HTTP_PORT.into()),
                container_port: spec.server.port,
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some(super::METRICS_PORT.into()),
                container_port: spec.metrics.port,
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            },
        ]),
        readiness_probe: Some(probe("/readyz", 5, 2)),
        liveness_probe: Some(probe("/healthz", 10, 3)),
        lifecycle: Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction {
                    seconds: PRESTOP_SLEEP_SECS,
                }),
                ..LifecycleHandler::default()
            }),
            ..Lifecycle::default()
        }),
        resources: spec.resources.clone(),
        security_context: Some(container_security_context()),
        volume_mounts: Some(mounts),
        ..Container::default()
    };

    let sched = &spec.scheduling;
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers: vec![container],
            volumes: Some(
                pod_volumes(cs, config_hash)
                    .into_iter()
                    .chain(cache_vols)
                    .collect(),
            ),
            security_context: Some(
                spec.pod
                    .security_context
                    .clone()
                    .unwrap_or_else(|| default_pod_security_context(spec)),
            ),
            service_account_name: spec.pod.service_account_name.clone(),
            automount_service_account_token: Some(false),
            termination_grace_period_seconds: Some(termination_grace_secs(spec)),
            image_pull_secrets: (!spec.image_pull_secrets.is_empty())
                .then(|| spec.image_pull_secrets.clone()),
            node_selector: (!sched.node_selector.is_empty()).then(|| sched.node_selector.clone()),
            affinity: affinity(cs),
            tolerations: (!sched.tolerations.is_empty()).then(|| sched.tolerations.clone()),
            topology_spread_constraints: (!sched.topology_spread_constraints.is_empty())
                .then(|| sched.topology_spread_constraints.clone()),
            priority_class_name: sched.priority_class_name.clone(),
            ..PodSpec::default()
        }),
    }
}

/// Label of a node's name, the topology key of the one-pod-per-node rule.
pub const HOSTNAME_TOPOLOGY_KEY: &str = "kubernetes.io/hostname";

/// True when some cache volume is a hostPath: pods on one node would share its directory.
pub fn caches_on_host_path(spec: &ContentServerSpec) -> bool {
    spec.volumes
        .iter()
        .any(|v| v.cache.is_some() && v.source.host_path.is_some())
}

/// `scheduling.affinity`, plus, when a cache volume is a hostPath ([`caches_on_host_path`]), a
/// required pod anti-affinity on the node name against this ContentServer's own pods: one server
/// per node, so no two share the node's cache directory (the second would crash-loop on its
/// lock). Rendered whatever the replica count, so scaling never changes the pod template.
fn affinity(cs: &ContentServer) -> Option<Affinity> {
    let mut affinity = cs.spec.scheduling.affinity.clone();
    if caches_on_host_path(&cs.spec) {
        let a = affinity.get_or_insert_with(Affinity::default);
        let anti = a
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default);
        anti.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(PodAffinityTerm {
                label_selector: Some(selector(cs)),
                topology_key: HOSTNAME_TOPOLOGY_KEY.into(),
                ..PodAffinityTerm::default()
            });
    }
    affinity
}

fn selector(cs: &ContentServer) -> LabelSelector {
    LabelSelector {
        match_labels: Some(selector_labels(cs)),
        ..LabelSelector::default()
    }
}

/// True when some cache volume's directory is shared by pods: an existing claim (every replica
/// mounts it) or a hostPath (pods on one node). Only one server may use a cache directory.
pub fn shares_a_cache_directory(spec: &ContentServerSpec) -> bool {
    spec.volumes.iter().any(|v| {
        v.cache.is_some()
            && (v.source.persistent_volume_claim.is_some() || v.source.host_path.is_some())
    })
}

/// True when the one pod of a ContentServer that may not have more mounts an existing claim.
/// Such a claim is often ReadWriteOnce (a default StorageClass), and a surge pod the scheduler
/// puts on another node can never attach it: the rollout would wait for it for ever.
pub fn one_pod_on_an_existing_claim(spec: &ContentServerSpec) -> bool {
    spec.replicas <= 1
        && spec
            .autoscaling
            .as_ref()
            .is_none_or(|a| a.max_replicas <= 1)
        && spec
            .volumes
            .iter()
            .any(|v| v.source.persistent_volume_claim.is_some())
}

/// The Deployment's rollout: surge (capacity never drops), or `Recreate` when a cache
/// directory is shared ([`shares_a_cache_directory`]: a new pod could not start beside the old;
/// with a hostPath cache the one-pod-per-node anti-affinity would also keep a surge pod off the
/// nodes whose old pod it replaces) or when one pod mounts an existing claim
/// ([`one_pod_on_an_existing_claim`]).
fn deployment_strategy(spec: &ContentServerSpec) -> DeploymentStrategy {
    if shares_a_cache_directory(spec) || one_pod_on_an_existing_claim(spec) {
        return DeploymentStrategy {
            type_: Some("Recreate".into()),
            rolling_update: None,
        };
    }
    DeploymentStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(IntOrString::String("25%".into())),
            max_unavailable: Some(IntOrString::Int(0)),
        }),
    }
}

/// The Deployment (no per-pod claims).
pub fn deployment(cs: &ContentServer, config_hash: &str) -> Deployment {
    Deployment {
        metadata: child_meta(cs, workload_name(cs)),
        spec: Some(DeploymentSpec {
            replicas: Some(cs.spec.replicas),
            selector: selector(cs),
            template: pod_template(cs, config_hash),
            strategy: Some(deployment_strategy(&cs.spec)),
            revision_history_limit: Some(5),
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// The StatefulSet (some volume has a per-pod claim): the [`deployment`]'s metadata, replicas,
/// selector, pod template and history, so the two kinds cannot drift apart, plus the claims,
/// the governing (headless) Service and its own rollout settings.
pub fn statefulset(cs: &ContentServer, config_hash: &str) -> StatefulSet {
    let Deployment { metadata, spec, .. } = deployment(cs, config_hash);
    let DeploymentSpec {
        replicas,
        selector,
        template,
        revision_history_limit,
        ..
    } = spec.unwrap_or_default();
    StatefulSet {
        metadata,
        spec: Some(StatefulSetSpec {
            replicas,
            selector,
            template,
            revision_history_limit,
            service_name: Some(headless_service_name(cs)),
            pod_management_policy: Some("Parallel".into()),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                ..StatefulSetUpdateStrategy::default()
            }),
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some("Retain".into()),
                    when_scaled: Some("Retain".into()),
                },
            ),
            volume_claim_templates: Some(claim_templates(cs)),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}

/// A comparable summary of claim templates: what the API server forbids changing, in order
/// (it compares the list in order: a StatefulSet whose templates are in another order than
/// rendered is replaced, not applied and refused). Sizes are compared by their exact value: the
/// API server stores a quantity in its canonical form (`1024Mi` comes back as `1Gi`, `1.3Gi` as
/// `1395864371200m`), which must not read as a change.
pub fn claim_template_signature(templates: &[PersistentVolumeClaim]) -> Vec<String> {
    templates
        .iter()
        .map(|t| {
            let spec = t.spec.clone().unwrap_or_default();
            let size = spec
                .resources
                .and_then(|r| r.requests)
                .and_then(|r| {
                    r.get("storage")
                        .map(|q| match crate::crd::quantity_nanos(&q.0) {
                            Some(nanos) => nanos.to_string(),
                            None => q.0.clone(),
                        })
                })
                .unwrap_or_default();
            format!(
                "{}|{}|{}|{}",
                t.name_any(),
                spec.storage_class_name.unwrap_or_default(),
                spec.access_modes.unwrap_or_default().join(","),
                size
            )
        })
        .collect()
}
