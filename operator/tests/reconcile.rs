//! Reconcile tests against the in-memory API server (tests/support): create, update (config change
//! rolls, scale changes replicas only), invalid spec, paused, immutable claim-template change,
//! workload-kind switch, status/conditions and Events.

mod support;

use content_operator::builders::CONFIG_HASH_ANNOTATION;
use content_operator::crd::ContentServer;
use content_operator::reconcile::{error_policy, reconcile, Context};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use support::*;

/// A fake holding an example's ContentServer, reconciled once.
async fn reconciled(file: &str) -> (FakeApi, Arc<Context>, String) {
    let fake = FakeApi::new();
    let ctx = context(&fake);
    let name = create(&fake, file);
    run(&fake, &ctx, &name).await;
    (fake, ctx, name)
}

async fn run(fake: &FakeApi, ctx: &Arc<Context>, name: &str) -> ContentServer {
    reconcile(Arc::new(current(fake, name).await), ctx.clone())
        .await
        .expect("reconcile succeeds");
    current(fake, name).await
}

/// The ContentServer as the API has it now.
async fn current(fake: &FakeApi, name: &str) -> ContentServer {
    let api: Api<ContentServer> = Api::namespaced(fake.client(), NS);
    api.get(name).await.expect("get ContentServer")
}

/// Reconcile and assert that no child was written (`why` names the case).
/// Edit the ContentServer as JSON, reconcile it, and read it back.
async fn edit_and_run(
    fake: &FakeApi,
    ctx: &Arc<Context>,
    name: &str,
    f: impl FnOnce(&mut Value),
) -> ContentServer {
    fake.edit(&contentservers(), name, f);
    run(fake, ctx, name).await
}

async fn run_without_child_writes(
    fake: &FakeApi,
    ctx: &Arc<Context>,
    name: &str,
    why: &str,
) -> ContentServer {
    fake.clear_log();
    let cs = run(fake, ctx, name).await;
    let writes: Vec<_> = fake.child_writes();
    assert!(
        writes.is_empty(),
        "{why} must not touch children: {writes:?}"
    );
    cs
}

fn condition<'a>(
    cs: &'a ContentServer,
    type_: &str,
) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    cs.status
        .as_ref()
        .expect("status")
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition"))
}

fn template_hash(workload: &Value) -> String {
    workload["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
        .as_str()
        .expect("config hash annotation")
        .to_string()
}

#[tokio::test]
async fn create_minimal_applies_configmap_deployment_service_and_status() {
    let (fake, ctx, name) = reconciled("minimal.yaml").await;
    let cs = current(&fake, &name).await;
    let uid = cs.metadata.uid.clone().expect("uid");

    let cm = mounted_config(&fake, &name);
    let toml = cm["data"]["config.toml"].as_str().expect("config.toml");
    let mut cfg =
        content_server::config::Config::from_toml(toml).expect("server parses the config");
    cfg.normalize();
    cfg.validate().expect("server accepts the config");
    assert_eq!(cfg.admin.listen, "*:9190");
    assert_eq!(cfg.volumes[0].path.to_str(), Some("/srv/content/content"));

    let dep = fake.get(&deployments(), "minimal").expect("Deployment");
    assert_eq!(dep["spec"]["replicas"], 1);
    let st = cs.status.clone().expect("status");
    assert_eq!(Some(template_hash(&dep)), st.config_hash);
    assert_eq!(st.observed_generation, Some(1));
    assert_eq!(
        st.selector.as_deref(),
        Some("app.kubernetes.io/instance=minimal,app.kubernetes.io/name=content-server")
    );
    assert_eq!(st.volumes, 1);
    for obj in [
        &cm,
        &dep,
        &fake.get(&services(), "minimal").expect("Service"),
    ] {
        let owner = &obj["metadata"]["ownerReferences"][0];
        assert_eq!(owner["uid"], json!(uid));
        assert_eq!(owner["controller"], json!(true));
        assert_eq!(owner["kind"], json!("ContentServer"));
    }
    assert!(
        fake.get(&pdbs(), "minimal").is_none(),
        "no PDB for one replica"
    );
    assert!(fake.get(&statefulsets(), "minimal").is_none());
    assert!(fake.get(&services(), "minimal-headless").is_none());

    // Every child write is a forced server-side apply under the one field manager.
    let writes: Vec<_> = fake.child_writes();
    assert!(!writes.is_empty());
    for w in &writes {
        if w.method == "DELETE" {
            continue;
        }
        assert_eq!(w.method, "PATCH", "{w:?}");
        assert!(w.content_type.contains("apply-patch"), "{w:?}");
        assert!(w.query.contains("fieldManager=content-operator"), "{w:?}");
        assert!(w.query.contains("force=true"), "{w:?}");
    }

    assert_eq!(condition(&cs, "Reconciled").status, "True");
    assert_eq!(condition(&cs, "Available").status, "False");
    assert_eq!(condition(&cs, "Progressing").status, "True");
    assert_eq!(st.phase.as_deref(), Some("Progressing"));
    assert_eq!(ctx.metrics.reconciles.with_label_values(&["ok"]).get(), 1);
}

#[tokio::test]
async fn workload_ready_sets_available_and_emits_event() {
    let (fake, ctx, name) = reconciled("minimal.yaml").await;
    fake.set_rolled_out(&deployments(), &name, 1);
    let cs = run(&fake, &ctx, &name).await;
    assert_eq!(condition(&cs, "Available").status, "True");
    assert_eq!(condition(&cs, "Progressing").status, "False");
    assert_eq!(condition(&cs, "Degraded").status, "False");
    let st = cs.status.clone().expect("status");
    assert_eq!((st.replicas, st.ready_replicas), (1, 1));
    assert_eq!(st.phase.as_deref(), Some("Ready"));
    assert!(
        fake.events()
            .iter()
            .any(|(t, r, _)| t == "Normal" && r == "MinimumReplicasAvailable"),
        "{:?}",
        fake.events()
    );
}

#[tokio::test]
async fn scale_changes_replicas_only_and_config_change_rolls_pods() {
    let fake = FakeApi::new();
    let ctx = context(&fake);
    let name = create(&fake, "hpa.yaml");
    // Scaled by hand here (kubectl scale), without the autoscaler.
    edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["autoscaling"] = Value::Null;
        cs["spec"]["replicas"] = json!(2);
    })
    .await;
    let before = fake.get(&deployments(), &name).expect("Deployment");
    let cm_before = mounted_config(&fake, &name);
    assert!(fake.get(&pdbs(), &name).is_some(), "PDB for 2 replicas");

    // kubectl scale --replicas 5
    edit_and_run(&fake, &ctx, &name, |cs| cs["spec"]["replicas"] = json!(5)).await;
    let scaled = fake.get(&deployments(), &name).expect("Deployment");
    assert_eq!(scaled["spec"]["replicas"], 5);
    assert_eq!(
        scaled["spec"]["template"], before["spec"]["template"],
        "pod template untouched by a scale"
    );
    assert_eq!(mounted_config(&fake, &name)["data"], cm_before["data"]);

    // A config change (pool size) changes the ConfigMap and the pod template's hash.
    let cs = edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["volumes"][0]["pool"]["threads"] = json!(8)
    })
    .await;
    let rolled = fake.get(&deployments(), &name).expect("Deployment");
    assert_ne!(template_hash(&rolled), template_hash(&before));
    assert_eq!(
        Some(template_hash(&rolled)),
        cs.status.clone().and_then(|s| s.config_hash)
    );
    assert_eq!(
        rolled["spec"]["replicas"], 5,
        "a config change keeps the replica count"
    );
    let toml = mounted_config(&fake, &name)["data"]["config.toml"]
        .as_str()
        .expect("toml")
        .to_string();
    let cfg = content_server::config::Config::from_toml(&toml).expect("parses");
    assert_eq!(cfg.volumes[0].pool.threads, 8);

    // Scaling down to one pod removes the PDB.
    edit_and_run(&fake, &ctx, &name, |cs| cs["spec"]["replicas"] = json!(1)).await;
    assert!(
        fake.get(&pdbs(), &name).is_none(),
        "PDB removed at one replica"
    );
}

#[tokio::test]
async fn invalid_spec_sets_condition_emits_event_and_leaves_children_untouched() {
    let (fake, ctx, name) = reconciled("media-node.yaml").await;
    let sts_before = fake.get(&statefulsets(), &name).expect("StatefulSet");
    let cm_before = mounted_config(&fake, &name);
    let children_before: Vec<Vec<String>> = [configmaps(), statefulsets(), services(), pdbs()]
        .iter()
        .map(|c| fake.names(c))
        .collect();

    // A bad edit: a split names a volume that does not exist, and a pool has 0 threads.
    fake.edit(&contentservers(), &name, |cs| {
        cs["spec"]["routes"][0]["split"][1]["volume"] = json!("disk9");
        cs["spec"]["volumes"][2]["pool"]["threads"] = json!(0);
    });
    let cs = run_without_child_writes(&fake, &ctx, &name, "invalid spec").await;
    assert_eq!(fake.get(&statefulsets(), &name), Some(sts_before));
    assert_eq!(mounted_config(&fake, &name), cm_before);
    let children_after: Vec<Vec<String>> = [configmaps(), statefulsets(), services(), pdbs()]
        .iter()
        .map(|c| fake.names(c))
        .collect();
    assert_eq!(children_before, children_after, "nothing deleted");

    let rec = condition(&cs, "Reconciled");
    assert_eq!(
        (rec.status.as_str(), rec.reason.as_str()),
        ("False", "InvalidSpec")
    );
    assert!(
        rec.message.contains("spec.routes[0].split[1].volume"),
        "{}",
        rec.message
    );
    assert!(
        rec.message.contains("spec.volumes[2].pool.threads"),
        "{}",
        rec.message
    );
    assert_eq!(
        cs.status.clone().and_then(|s| s.phase).as_deref(),
        Some("Invalid")
    );
    assert_eq!(
        cs.status.clone().and_then(|s| s.observed_generation),
        Some(2)
    );
    assert!(
        fake.events()
            .iter()
            .any(|(t, r, n)| t == "Warning" && r == "InvalidSpec" && n.contains("disk9")),
        "{:?}",
        fake.events()
    );
    assert_eq!(
        ctx.metrics.reconciles.with_label_values(&["invalid"]).get(),
        1
    );
}

/// hostPath volumes are the operator's admin's choice (`--allow-host-path`), not only the
/// ContentServer author's (`spec.allowHostPath`): a node directory mounted read-write would let
/// anyone who may create a ContentServer read and write the node's files. Without the flag the
/// spec is InvalidSpec naming the volume and nothing is written; with it, the same spec runs.
#[tokio::test]
async fn host_path_volumes_need_the_operators_flag_as_well_as_the_spec() {
    let fake = FakeApi::new();
    let name = create(&fake, "media-node.yaml");
    fake.edit(&contentservers(), &name, |cs| {
        cs["spec"]["allowHostPath"] = json!(true);
        cs["spec"]["volumes"][1]["source"] =
            json!({"hostPath": {"path": "/mnt/disk2", "type": "Directory"}});
    });
    let refusing = context(&fake);
    let cs = run_without_child_writes(&fake, &refusing, &name, "hostPath without the flag").await;
    let rec = condition(&cs, "Reconciled");
    assert_eq!(
        (rec.status.as_str(), rec.reason.as_str()),
        ("False", "InvalidSpec")
    );
    assert!(
        rec.message.contains(
            "spec.volumes[1].source.hostPath: this operator does not allow hostPath volumes"
        ) && rec.message.contains("--allow-host-path"),
        "{}",
        rec.message
    );
    assert!(fake.names(&statefulsets()).is_empty(), "no workload");

    let allowing = context_with(
        &fake,
        content_operator::validation::Policy {
            allow_host_path: true,
        },
    );
    let cs = run(&fake, &allowing, &name).await;
    let rec = condition(&cs, "Reconciled");
    assert_ne!(rec.reason, "InvalidSpec", "{}", rec.message);
    let sts = fake.get(&statefulsets(), &name).expect("StatefulSet");
    assert_eq!(
        sts["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .filter_map(|v| v["hostPath"]["path"].as_str())
            .collect::<Vec<_>>(),
        ["/mnt/disk2"]
    );
}

/// What a spec copies verbatim into its children's metadata and references (label and
/// annotation keys and values, names of other objects, the image) is checked with Kubernetes'
/// own syntax rules before anything is applied: the API server would refuse the child with a
/// 422 naming the child's field, after the children before it were written. Here the status
/// names each spec field and no child is written.
#[tokio::test]
async fn metadata_and_names_kubernetes_refuses_are_invalid_spec_fields() {
    let (fake, ctx, name) = reconciled("exposed.yaml").await;
    fake.edit(&contentservers(), &name, |cs| {
        let spec = &mut cs["spec"];
        spec["pod"]["labels"] = json!({"team name": "media", "tier": "edge cache"});
        spec["pod"]["annotations"] = json!({"example.com/ok": "any value at all", "a/b/c": "x"});
        spec["pod"]["serviceAccountName"] = json!("My_SA");
        spec["service"]["annotations"] = json!({"-lb": "x"});
        spec["scheduling"]["priorityClassName"] = json!("High");
        spec["scheduling"]["nodeSelector"] = json!({"disk": "ssd nvme"});
        spec["metrics"]["serviceMonitor"]["labels"] = json!({"release/": "kps"});
        spec["expose"]["ingress"]["className"] = json!("nginx_public");
        spec["expose"]["ingress"]["tls"]["secretName"] = json!("Downloads-TLS");
        spec["image"] = json!(" ghcr.io/example/content-server:1.0");
        spec["volumes"][1]["source"]["image"]["reference"] = json!("registry.example/docs-site:2 ");
    });
    let cs = run_without_child_writes(&fake, &ctx, &name, "invalid metadata").await;
    let rec = condition(&cs, "Reconciled");
    assert_eq!(
        (rec.status.as_str(), rec.reason.as_str()),
        ("False", "InvalidSpec")
    );
    for field in [
        "spec.pod.labels: key \"team name\"",
        "spec.pod.labels: value \"edge cache\" of \"tier\"",
        "spec.pod.annotations: key \"a/b/c\"",
        "spec.pod.serviceAccountName: \"My_SA\"",
        "spec.service.annotations: key \"-lb\"",
        "spec.scheduling.priorityClassName: \"High\"",
        "spec.scheduling.nodeSelector: value \"ssd nvme\"",
        "spec.metrics.serviceMonitor.labels: key \"release/\"",
        "spec.expose.ingress.className: \"nginx_public\"",
        "spec.expose.ingress.tls.secretName: \"Downloads-TLS\"",
        "spec.image: must not have leading or trailing whitespace",
        "spec.volumes[1].source.image.reference: must not have leading or trailing whitespace",
    ] {
        assert!(
            rec.message.contains(field),
            "{field} not in {}",
            rec.message
        );
    }
    assert!(!rec.message.contains("example.com/ok"), "{}", rec.message);

    // What Kubernetes accepts stays valid: empty service account and priority class (the pod
    // defaults, as docs/operator.md shows them), annotation keys in any case.
    fake.edit(&contentservers(), &name, |cs| {
        let spec = &mut cs["spec"];
        spec["pod"]["labels"] = json!({"team": "media"});
        spec["pod"]["annotations"] = json!({"Example.com/Team": "x"});
        spec["pod"]["serviceAccountName"] = json!("");
        spec["service"]["annotations"] = json!({});
        spec["scheduling"]["priorityClassName"] = json!("");
        spec["scheduling"]["nodeSelector"] = json!({});
        spec["metrics"]["serviceMonitor"]["labels"] = json!({});
        spec["expose"]["ingress"]["className"] = json!("nginx");
        spec["expose"]["ingress"]["tls"]["secretName"] = json!("downloads-tls");
        spec["image"] = json!("ghcr.io/example/content-server:1.0");
        spec["volumes"][1]["source"]["image"]["reference"] = json!("registry.example/docs-site:2");
    });
    let cs = run(&fake, &ctx, &name).await;
    let rec = condition(&cs, "Reconciled");
    assert_ne!(rec.reason, "InvalidSpec", "{}", rec.message);
    let dep = fake.get(&deployments(), &name).expect("Deployment");
    assert_eq!(
        dep["spec"]["template"]["metadata"]["annotations"]["Example.com/Team"],
        "x"
    );
}

/// Each invalid edit's Warning Event names what is wrong now: one invalid edit, fixed, then
/// another one gets an Event of its own, not a repeat of the first Event's note.
#[tokio::test]
async fn each_invalid_edit_gets_an_event_naming_its_own_field() {
    let (fake, ctx, name) = reconciled("minimal.yaml").await;
    edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["server"]["logLevel"] = json!("verbose")
    })
    .await;
    edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["server"]
            .as_object_mut()
            .expect("server")
            .remove("logLevel");
    })
    .await;
    assert_eq!(
        condition(&run(&fake, &ctx, &name).await, "Reconciled").status,
        "True"
    );
    edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["volumes"][0]["mountPath"] = json!("/tmp")
    })
    .await;
    let invalid: Vec<String> = fake
        .events()
        .into_iter()
        .filter(|(t, r, _)| t == "Warning" && r == "InvalidSpec")
        .map(|(_, _, n)| n)
        .collect();
    assert!(
        invalid.iter().any(|n| n.contains("logLevel")),
        "{invalid:?}"
    );
    assert!(
        invalid.iter().any(|n| n.contains("mountPath")),
        "no Event names the second invalid field: {invalid:?}"
    );
}

#[tokio::test]
async fn paused_leaves_children_as_they_are() {
    let (fake, ctx, name) = reconciled("minimal.yaml").await;
    let dep_before = fake.get(&deployments(), &name).expect("Deployment");
    fake.edit(&contentservers(), &name, |cs| {
        cs["spec"]["paused"] = json!(true);
        cs["spec"]["replicas"] = json!(4);
        cs["spec"]["volumes"][0]["pool"]["threads"] = json!(4);
    });
    let cs = run_without_child_writes(&fake, &ctx, &name, "paused").await;
    assert_eq!(fake.get(&deployments(), &name), Some(dep_before));
    let rec = condition(&cs, "Reconciled");
    assert_eq!(
        (rec.status.as_str(), rec.reason.as_str()),
        ("False", "Paused")
    );
    assert_eq!(
        cs.status.clone().and_then(|s| s.phase).as_deref(),
        Some("Paused")
    );

    // Unpausing applies the pending change.
    edit_and_run(&fake, &ctx, &name, |cs| cs["spec"]["paused"] = json!(false)).await;
    assert_eq!(deployment_replicas(&fake, &name), 4);
}

/// A ContentServer being deleted in the foreground (deletionTimestamp set, the
/// foregroundDeletion finalizer waiting for its children) gets no writes: children the garbage
/// collector removed are not recreated, changed ones are not re-applied, no status is written.
#[tokio::test]
async fn a_contentserver_being_deleted_gets_no_writes() {
    let (fake, ctx, name) = reconciled("minimal.yaml").await;
    fake.edit(&contentservers(), &name, |cs| {
        cs["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        cs["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
        cs["spec"]["replicas"] = json!(4);
    });
    // The garbage collector already removed some children.
    for (collection, child) in [
        (configmaps(), mounted_config_name(&fake, &name)),
        (services(), name.clone()),
    ] {
        assert!(fake.get(&collection, &child).is_some(), "{child} exists");
        fake.remove(&collection, &child)
            .expect("removed by the garbage collector");
    }
    let dep_before = fake.get(&deployments(), &name).expect("Deployment");
    fake.clear_log();
    run(&fake, &ctx, &name).await;
    let writes: Vec<_> = fake.log().into_iter().filter(|l| !l.is_read()).collect();
    assert!(writes.is_empty(), "writes while deleting: {writes:?}");
    assert!(config_names(&fake, &name).is_empty());
    assert!(fake.get(&services(), &name).is_none());
    assert_eq!(fake.get(&deployments(), &name), Some(dep_before));
}

#[tokio::test]
async fn media_node_statefulset_headless_pdb_and_servicemonitor_when_crd_exists() {
    let (fake, ctx, name) = reconciled("media-node.yaml").await;
    let cs = current(&fake, &name).await;
    let sts = fake.get(&statefulsets(), &name).expect("StatefulSet");
    assert_eq!(sts["spec"]["podManagementPolicy"], "Parallel");
    assert_eq!(sts["spec"]["serviceName"], "media-headless");
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"].as_array().map(Vec::len),
        Some(3)
    );
    assert!(fake.get(&deployments(), &name).is_none());
    assert_eq!(
        fake.get(&services(), "media-headless").expect("headless")["spec"]["clusterIP"],
        "None"
    );
    assert!(fake.get(&pdbs(), &name).is_some());
    // No Prometheus Operator CRD: no ServiceMonitor, and the condition says so.
    assert!(fake.get(&servicemonitors(), &name).is_none());
    assert!(condition(&cs, "Reconciled")
        .message
        .contains("ServiceMonitor"));

    fake.insert(
        &crds(),
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "servicemonitors.monitoring.coreos.com"}}),
    );
    run(&fake, &ctx, &name).await;
    let sm = fake.get(&servicemonitors(), &name).expect("ServiceMonitor");
    assert_eq!(sm["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");

    // Disabling it removes it.
    edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["metrics"]["serviceMonitor"]["enabled"] = json!(false)
    })
    .await;
    assert!(fake.get(&servicemonitors(), &name).is_none());
}

/// The volumes' order in the spec is free: the claim templates are rendered in name order, so
/// a reorder changes nothing (the API server compares the list in order and would refuse the
/// apply, for ever). A StatefulSet whose templates are in another order (written by an older
/// operator) is replaced, naming every immutable field that differs.
#[tokio::test]
async fn claim_templates_in_another_order_are_no_change_or_a_replacement() {
    let (fake, ctx, name) = reconciled("media-node.yaml").await;
    let templates = |fake: &FakeApi| -> Vec<String> {
        fake.get(&statefulsets(), &name).expect("StatefulSet")["spec"]["volumeClaimTemplates"]
            .as_array()
            .expect("templates")
            .iter()
            .map(|t| {
                t["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    let before = templates(&fake);
    let mut sorted = before.clone();
    sorted.sort();
    assert_eq!(before, sorted, "rendered in name order");

    fake.edit(&contentservers(), &name, |cs| {
        let vols = cs["spec"]["volumes"].as_array_mut().expect("volumes");
        vols.reverse();
    });
    fake.clear_log();
    run(&fake, &ctx, &name).await;
    assert!(
        !fake.log().iter().any(|l| l.method == "DELETE"),
        "a reorder replaced something: {:?}",
        fake.log()
    );
    assert_eq!(templates(&fake), before);

    fake.edit(&statefulsets(), &name, |sts| {
        let t = sts["spec"]["volumeClaimTemplates"]
            .as_array_mut()
            .expect("templates");
        t.reverse();
        sts["spec"]["serviceName"] = json!("elsewhere");
    });
    run(&fake, &ctx, &name).await;
    assert!(
        fake.events()
            .iter()
            .any(|(_, r, n)| r == "StatefulSetReplaced"
                && n.contains("volumeClaimTemplates, serviceName changed")),
        "{:?}",
        fake.events()
    );
    run(&fake, &ctx, &name).await;
    assert_eq!(templates(&fake), before);
}

#[tokio::test]
async fn claim_template_change_replaces_statefulset_with_orphaning_delete() {
    let (fake, ctx, name) = reconciled("media-node.yaml").await;
    fake.edit(&contentservers(), &name, |cs| {
        cs["spec"]["volumes"][0]["source"]["claimTemplate"]["size"] = json!("8Ti")
    });
    fake.clear_log();
    let cs = run(&fake, &ctx, &name).await;

    let deletes: Vec<_> = fake
        .log()
        .into_iter()
        .filter(|l| l.method == "DELETE")
        .collect();
    let sts_deletes: Vec<_> = deletes
        .iter()
        .filter(|l| l.path.contains("/statefulsets/"))
        .collect();
    assert_eq!(sts_deletes.len(), 1, "{deletes:?}");
    assert_eq!(
        sts_deletes[0].body["propagationPolicy"], "Orphan",
        "never a cascading delete"
    );
    assert!(
        sts_deletes[0].body["preconditions"]["uid"].is_string(),
        "only the StatefulSet just read: {:?}",
        sts_deletes[0].body
    );
    for d in &deletes {
        assert_ne!(d.body["propagationPolicy"], "Foreground", "{d:?}");
        assert_ne!(d.body["propagationPolicy"], "Background", "{d:?}");
    }
    assert!(fake
        .events()
        .iter()
        .any(|(_, r, n)| r == "StatefulSetReplaced" && n.contains("volumeClaimTemplates")));
    assert!(condition(&cs, "Reconciled")
        .message
        .contains("replacing the StatefulSet"));
    assert_eq!(condition(&cs, "Progressing").status, "True");

    // The next reconcile recreates it with the new template (the pods were orphaned, not deleted).
    run(&fake, &ctx, &name).await;
    let sts = fake
        .get(&statefulsets(), &name)
        .expect("StatefulSet recreated");
    let sizes: Vec<&str> = sts["spec"]["volumeClaimTemplates"]
        .as_array()
        .expect("templates")
        .iter()
        .map(|t| {
            t["spec"]["resources"]["requests"]["storage"]
                .as_str()
                .expect("size")
        })
        .collect();
    assert_eq!(sizes, vec!["8Ti", "4Ti", "4Ti"]);

    // A mutable change (threads) does not replace it.
    fake.edit(&contentservers(), &name, |cs| {
        cs["spec"]["volumes"][1]["pool"]["threads"] = json!(8)
    });
    fake.clear_log();
    run(&fake, &ctx, &name).await;
    assert!(
        !fake
            .log()
            .iter()
            .any(|l| l.method == "DELETE" && l.path.contains("/statefulsets/")),
        "a mutable change must not replace the StatefulSet"
    );
}

#[tokio::test]
async fn switching_to_claim_templates_keeps_the_deployment_until_the_statefulset_is_ready() {
    let (fake, ctx, name) = reconciled("minimal.yaml").await;
    let cs = edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["volumes"][0]["source"] =
            json!({"claimTemplate": {"size": "10Gi", "accessModes": ["ReadWriteOnce"]}})
    })
    .await;
    assert!(fake.get(&statefulsets(), &name).is_some());
    assert!(
        fake.get(&deployments(), &name).is_some(),
        "old Deployment keeps serving"
    );
    assert!(condition(&cs, "Reconciled")
        .message
        .contains("previous Deployment keeps serving"));
    // The StatefulSet's controller made its pod, not ready yet; the Deployment's pod serves.
    // The status counts that pod as ready but does not call the switch done.
    fake.set_rolled_out(&deployments(), &name, 1);
    let gen =
        fake.get(&statefulsets(), &name).expect("StatefulSet")["metadata"]["generation"].clone();
    fake.set_status(
        &statefulsets(),
        &name,
        json!({"replicas": 1, "readyReplicas": 0, "updatedReplicas": 1, "observedGeneration": gen}),
    );
    let cs = run(&fake, &ctx, &name).await;
    assert!(fake.get(&deployments(), &name).is_some());
    assert_eq!(cs.status.as_ref().map(|s| s.ready_replicas), Some(1));
    let progressing = condition(&cs, "Progressing");
    assert_eq!(
        (progressing.status.as_str(), progressing.reason.as_str()),
        ("True", "RollingOut"),
        "the switch is not complete while the old workload serves"
    );
    assert_ne!(cs.status.and_then(|s| s.phase).as_deref(), Some("Ready"));

    fake.set_rolled_out(&statefulsets(), &name, 1);
    let uid = fake.get(&deployments(), &name).expect("Deployment")["metadata"]["uid"].clone();
    fake.clear_log();
    run(&fake, &ctx, &name).await;
    assert!(
        fake.get(&deployments(), &name).is_none(),
        "Deployment removed once the StatefulSet is ready"
    );
    let delete = fake
        .log()
        .into_iter()
        .find(|l| l.method == "DELETE" && l.path.contains("/deployments/"))
        .expect("Deployment deleted");
    assert_eq!(
        delete.body["preconditions"]["uid"], uid,
        "only the Deployment just read: one made in between by someone else stays"
    );
}

#[tokio::test]
async fn api_failure_is_reported_in_status_and_retried_with_backoff() {
    let fake = FakeApi::new();
    let ctx = context(&fake);
    let name = create(&fake, "minimal.yaml");
    fake.fail("PATCH", "/deployments/", 422);
    let api: Api<ContentServer> = Api::namespaced(fake.client(), NS);
    let cs = Arc::new(api.get(&name).await.expect("get"));
    let err = reconcile(cs.clone(), ctx.clone())
        .await
        .expect_err("apply of the Deployment fails");
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert_eq!(ctx.metrics.errors.get(), 1);
    assert_eq!(
        ctx.metrics.reconciles.with_label_values(&["error"]).get(),
        1
    );
    let cs_after = api.get(&name).await.expect("get");
    let rec = condition(&cs_after, "Reconciled");
    assert_eq!(
        (rec.status.as_str(), rec.reason.as_str()),
        ("False", "ApplyFailed")
    );
    assert!(rec.message.contains("injected failure"), "{}", rec.message);
    assert!(fake
        .events()
        .iter()
        .any(|(t, r, _)| t == "Warning" && r == "ApplyFailed"));
    // Backoff doubles per consecutive failure and is capped.
    assert_eq!(
        error_policy(cs.clone(), &err, ctx.clone()),
        Action::requeue(Duration::from_secs(5))
    );
    assert_eq!(
        error_policy(cs.clone(), &err, ctx.clone()),
        Action::requeue(Duration::from_secs(10))
    );
    assert_eq!(
        error_policy(cs.clone(), &err, ctx.clone()),
        Action::requeue(Duration::from_secs(20))
    );
    assert_eq!(
        content_operator::reconcile::backoff(30),
        Duration::from_secs(300)
    );
}

#[tokio::test]
async fn switching_away_from_claim_templates_keeps_the_statefulset_and_its_headless_service_until_ready(
) {
    let (fake, ctx, name) = reconciled("media-node.yaml").await;
    edit_and_run(&fake, &ctx, &name, |cs| {
        for i in 0..3 {
            cs["spec"]["volumes"][i]["source"] = json!({"emptyDir": {}});
        }
    })
    .await;
    assert!(fake.get(&deployments(), &name).is_some());
    assert!(
        fake.get(&statefulsets(), &name).is_some(),
        "StatefulSet keeps serving"
    );
    assert!(
        fake.get(&services(), "media-headless").is_some(),
        "its headless Service stays"
    );

    fake.set_rolled_out(&deployments(), &name, 3);
    fake.clear_log();
    run(&fake, &ctx, &name).await;
    assert!(fake.get(&statefulsets(), &name).is_none());
    assert!(fake.get(&services(), "media-headless").is_none());
    let sts_delete = fake
        .log()
        .into_iter()
        .find(|l| l.method == "DELETE" && l.path.contains("/statefulsets/"))
        .expect("StatefulSet deleted");
    assert_eq!(sts_delete.body["propagationPolicy"], "Background");
    assert!(
        sts_delete.body["preconditions"]["uid"].is_string(),
        "{:?}",
        sts_delete.body
    );
}

/// The HPA controller's write: spec.replicas through the ContentServer's scale subresource.
async fn hpa_scales(fake: &FakeApi, name: &str, replicas: i32) {
    let api: Api<ContentServer> = Api::namespaced(fake.client(), NS);
    let patch = json!({"spec": {"replicas": replicas}});
    let scale = api
        .patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch /scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(replicas));
}

/// The operator wrote nothing to the ContentServer itself but its status.
fn assert_no_contentserver_spec_write(fake: &FakeApi) {
    let writes: Vec<Logged> = fake
        .log()
        .into_iter()
        .filter(|l| l.path.contains("/contentservers/") && !l.is_read() && !l.is_status())
        .collect();
    assert!(
        writes.is_empty(),
        "operator wrote the ContentServer: {writes:?}"
    );
}

fn deployment_replicas(fake: &FakeApi, name: &str) -> Value {
    fake.get(&deployments(), name).expect("Deployment")["spec"]["replicas"].clone()
}

#[tokio::test]
async fn autoscaling_hpa_owns_replicas_through_the_scale_subresource() {
    let (fake, ctx, name) = reconciled("hpa.yaml").await;
    let hpa = fake.get(&hpas(), &name).expect("HPA");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "ContentServer");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], "web");
    assert_eq!(
        hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"],
        "700m"
    );
    assert_eq!(
        hpa["metadata"]["ownerReferences"][0]["kind"],
        "ContentServer"
    );
    // What the HPA reads through /scale: the selector and replica count the operator reports.
    let api: Api<ContentServer> = Api::namespaced(fake.client(), NS);
    let scale = api.get_scale(&name).await.expect("GET /scale");
    assert_eq!(
        scale.status.and_then(|s| s.selector).as_deref(),
        Some("app.kubernetes.io/instance=web,app.kubernetes.io/name=content-server")
    );

    // The HPA scales to 6: the operator carries it to the Deployment and writes nothing back.
    hpa_scales(&fake, &name, 6).await;
    fake.clear_log();
    run(&fake, &ctx, &name).await;
    assert_eq!(deployment_replicas(&fake, &name), 6);
    assert_no_contentserver_spec_write(&fake);

    // Reconciles for other reasons (a config change, a periodic requeue) keep the HPA's count.
    fake.edit(&contentservers(), &name, |cs| {
        cs["spec"]["volumes"][0]["pool"]["threads"] = json!(8)
    });
    fake.clear_log();
    run(&fake, &ctx, &name).await;
    run(&fake, &ctx, &name).await;
    let cs = api.get(&name).await.expect("get");
    assert_eq!(
        cs.spec.replicas, 6,
        "the operator never writes spec.replicas"
    );
    assert_eq!(deployment_replicas(&fake, &name), 6);
    assert_no_contentserver_spec_write(&fake);
    let applied_replicas: Vec<Value> = fake
        .log()
        .into_iter()
        .filter(|l| l.method == "PATCH" && l.path.contains("/deployments/"))
        .map(|l| l.body["spec"]["replicas"].clone())
        .collect();
    assert_eq!(applied_replicas, [json!(6), json!(6)]);

    // Scaling in follows too; removing spec.autoscaling deletes the HPA.
    hpa_scales(&fake, &name, 3).await;
    run(&fake, &ctx, &name).await;
    assert_eq!(deployment_replicas(&fake, &name), 3);
    edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["autoscaling"] = Value::Null
    })
    .await;
    assert!(fake.get(&hpas(), &name).is_none(), "HPA pruned");
    assert_eq!(deployment_replicas(&fake, &name), 3);
}

fn install_gateway_api(fake: &FakeApi) {
    fake.insert(
        &crds(),
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "httproutes.gateway.networking.k8s.io"}}),
    );
}

#[tokio::test]
async fn expose_applies_route_ingress_and_network_policy_updates_and_prunes_them() {
    let fake = FakeApi::new();
    install_gateway_api(&fake);
    let ctx = context(&fake);
    let name = create(&fake, "exposed.yaml");
    let cs = run(&fake, &ctx, &name).await;
    let route = fake.get(&httproutes(), &name).expect("HTTPRoute");
    assert_eq!(route["spec"]["parentRefs"][0]["name"], "public");
    assert_eq!(
        route["spec"]["rules"][0]["backendRefs"][0]["name"],
        "downloads"
    );
    let ing = fake.get(&ingresses(), &name).expect("Ingress");
    assert_eq!(ing["spec"]["ingressClassName"], "nginx");
    assert_eq!(ing["spec"]["tls"][0]["secretName"], "downloads-tls");
    let np = fake.get(&networkpolicies(), &name).expect("NetworkPolicy");
    assert_eq!(np["spec"]["ingress"][1]["ports"][0]["port"], "metrics");
    for obj in [&route, &ing, &np] {
        assert_eq!(
            obj["metadata"]["ownerReferences"][0]["kind"],
            "ContentServer"
        );
    }
    let st = cs.status.clone().expect("status");
    assert_eq!(st.url.as_deref(), Some("http://downloads.media-ns.svc:80"));
    assert_eq!(st.hostnames, ["downloads.example.com"]);
    assert_eq!(condition(&cs, "Reconciled").reason, "Applied");

    // Update: new host names reach both objects and the status.
    let cs = edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["expose"]["httpRoute"]["hostnames"] = json!(["dl.example.com"]);
        cs["spec"]["expose"]["ingress"]["hosts"] = json!(["dl.example.com", "www.example.com"]);
    })
    .await;
    assert_eq!(
        fake.get(&httproutes(), &name).expect("route")["spec"]["hostnames"],
        json!(["dl.example.com"])
    );
    let rules = fake.get(&ingresses(), &name).expect("ingress")["spec"]["rules"].clone();
    assert_eq!(rules.as_array().map(Vec::len), Some(2));
    assert_eq!(
        cs.status.expect("status").hostnames,
        ["dl.example.com", "www.example.com"]
    );

    // Removal prunes, one part at a time.
    edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["expose"]["ingress"] = Value::Null
    })
    .await;
    assert!(fake.get(&ingresses(), &name).is_none(), "Ingress pruned");
    assert!(fake.get(&httproutes(), &name).is_some(), "HTTPRoute kept");
    let cs = edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["expose"] = Value::Null;
        cs["spec"]["networkPolicy"] = Value::Null;
    })
    .await;
    assert!(fake.get(&httproutes(), &name).is_none(), "HTTPRoute pruned");
    assert!(
        fake.get(&networkpolicies(), &name).is_none(),
        "NetworkPolicy pruned"
    );
    assert!(cs.status.expect("status").hostnames.is_empty());
    assert!(fake.get(&services(), &name).is_some(), "the Service stays");
}

#[tokio::test]
async fn missing_gateway_api_crd_is_a_condition_not_a_failing_reconcile() {
    let (fake, ctx, name) = reconciled("exposed.yaml").await;
    let cs = run(&fake, &ctx, &name).await;
    let rec = condition(&cs, "Reconciled");
    assert_eq!(
        (rec.status.as_str(), rec.reason.as_str()),
        ("False", "CRDMissing")
    );
    assert!(
        rec.message
            .contains("HTTPRoute (httproutes.gateway.networking.k8s.io)"),
        "{}",
        rec.message
    );
    assert_ne!(
        cs.status.clone().and_then(|s| s.phase).as_deref(),
        Some("Error")
    );
    assert!(
        fake.get(&ingresses(), &name).is_some(),
        "the rest is applied"
    );
    assert_eq!(ctx.metrics.reconciles.with_label_values(&["ok"]).get(), 2);
    assert_eq!(ctx.metrics.errors.get(), 0);
    assert!(fake
        .events()
        .iter()
        .any(|(t, r, n)| t == "Warning" && r == "CRDMissing" && n.contains("HTTPRoute")));

    // Once the CRD is installed the next reconcile creates the route.
    install_gateway_api(&fake);
    let cs = run(&fake, &ctx, &name).await;
    assert!(fake.get(&httproutes(), &name).is_some());
    assert_eq!(condition(&cs, "Reconciled").reason, "Applied");
}

#[tokio::test]
async fn cache_config_change_restarts_pods_onto_the_same_claims() {
    let (fake, ctx, name) = reconciled("edge-cache.yaml").await;
    let sts = fake.get(&statefulsets(), &name).expect("StatefulSet");
    assert_eq!(
        sts["spec"]["persistentVolumeClaimRetentionPolicy"],
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
    );
    assert!(fake.get(&pdbs(), &name).is_some(), "3 replicas get a PDB");
    let cm = mounted_config(&fake, &name);
    let toml = cm["data"]["config.toml"].as_str().expect("config");
    assert!(
        toml.contains("[[origins]]") && toml.contains("[volumes.cache]"),
        "{toml}"
    );
    let before = template_hash(&sts);
    // Config-only changes (freshness, cache size, origin): a rolling restart, never a new
    // StatefulSet (which would lose the claims' caches if it were not orphaning) nor new claims.
    fake.edit(&contentservers(), &name, |cs| {
        cs["spec"]["routes"][0]["cache"]["staleIfErrorSecs"] = json!(600);
        cs["spec"]["volumes"][0]["cache"]["maxSize"] = json!("800Gi");
        cs["spec"]["origin"]["readTimeoutMs"] = json!(5000);
    });
    fake.clear_log();
    run(&fake, &ctx, &name).await;
    assert!(
        !fake.log().iter().any(|l| l.method == "DELETE"
            && (l.path.contains("/statefulsets/") || l.path.contains("/persistentvolumeclaims"))),
        "a config change deletes neither the StatefulSet nor claims: {:?}",
        fake.log()
    );
    let after = fake.get(&statefulsets(), &name).expect("StatefulSet");
    assert_ne!(
        template_hash(&after),
        before,
        "pods restart on the new config"
    );
    assert_eq!(
        after["spec"]["volumeClaimTemplates"], sts["spec"]["volumeClaimTemplates"],
        "same claims"
    );
    assert_eq!(after["metadata"]["uid"], sts["metadata"]["uid"]);
}

#[tokio::test]
async fn cache_bigger_than_its_claim_is_invalid_spec_naming_the_field() {
    let fake = FakeApi::new();
    let ctx = context(&fake);
    let name = create(&fake, "edge-cache.yaml");
    fake.edit(&contentservers(), &name, |cs| {
        cs["spec"]["volumes"][1]["cache"]["maxSize"] = json!("200Gi");
        cs["spec"]["volumes"][1]["source"]["claimTemplate"]["size"] = json!("100Gi");
    });
    let cs = run(&fake, &ctx, &name).await;
    assert!(
        fake.get(&statefulsets(), &name).is_none(),
        "nothing applied"
    );
    let rec = condition(&cs, "Reconciled");
    assert_eq!(rec.reason, "InvalidSpec");
    assert!(
        rec.message
            .contains("spec.volumes[1].cache.maxSize: 200Gi exceeds claimTemplate.size 100Gi"),
        "{}",
        rec.message
    );
}

/// Neither replacement takes the service down, and the status says so: while the StatefulSet is
/// replaced its orphaned pods keep serving (as last seen), and while the StatefulSet of a
/// Deployment -> StatefulSet switch is not ready the Deployment's ready pods serve. Available
/// stays True, the ready count is the serving pods', and no NoReadyReplicas Warning is emitted
/// (it said 0/3 ready during a no-outage replacement).
#[tokio::test]
async fn replacements_keep_the_serving_pods_in_the_status() {
    let (fake, ctx, name) = reconciled("media-node.yaml").await;
    fake.set_rolled_out(&statefulsets(), &name, 3);
    let cs = run(&fake, &ctx, &name).await;
    assert_eq!(condition(&cs, "Available").status, "True");
    let events = fake.events().len();
    let cs = edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["volumes"][0]["source"]["claimTemplate"]["size"] = json!("8Ti")
    })
    .await;
    assert!(fake.get(&statefulsets(), &name).is_none(), "being replaced");
    let st = cs.status.clone().expect("status");
    assert_eq!(st.ready_replicas, 3);
    assert_eq!(condition(&cs, "Available").status, "True");
    assert_eq!(condition(&cs, "Progressing").status, "True");
    assert!(
        !fake.events()[events..]
            .iter()
            .any(|(_, reason, _)| reason == "NoReadyReplicas"),
        "{:?}",
        &fake.events()[events..]
    );

    let (fake, ctx, name) = reconciled("minimal.yaml").await;
    fake.set_rolled_out(&deployments(), &name, 1);
    let cs = run(&fake, &ctx, &name).await;
    assert_eq!(condition(&cs, "Available").status, "True");
    let events = fake.events().len();
    let cs = edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["volumes"][0]["source"] =
            json!({"claimTemplate": {"size": "10Gi", "accessModes": ["ReadWriteOnce"]}})
    })
    .await;
    assert!(fake.get(&deployments(), &name).is_some());
    assert_eq!(cs.status.clone().expect("status").ready_replicas, 1);
    assert_eq!(condition(&cs, "Available").status, "True");
    assert!(!fake.events()[events..]
        .iter()
        .any(|(_, reason, _)| reason == "NoReadyReplicas"));
}

/// Switching kinds with one pod on an existing claim (often ReadWriteOnce: the new pod cannot
/// attach it on another node while the old pod holds it, and waiting for it stalled for
/// ever): the old workload goes at once, as its Recreate rollout would; with two replicas it
/// keeps serving until the new one is ready.
#[tokio::test]
async fn switching_kinds_with_one_pod_on_an_existing_claim_removes_the_old_workload_at_once() {
    for replicas in [1, 2] {
        let (fake, ctx, name) = reconciled("minimal.yaml").await;
        edit_and_run(&fake, &ctx, &name, |cs| {
            cs["spec"]["replicas"] = json!(replicas)
        })
        .await;
        fake.set_rolled_out(&deployments(), &name, replicas);
        run(&fake, &ctx, &name).await;
        edit_and_run(&fake, &ctx, &name, |cs| {
            let volumes = cs["spec"]["volumes"].as_array_mut().expect("volumes");
            volumes.push(json!({"name": "scratch", "source":
                {"claimTemplate": {"size": "1Gi", "accessModes": ["ReadWriteOnce"]}}}));
            cs["spec"]["routes"] = json!([
                {"prefix": "/scratch/", "volume": "scratch"},
                {"prefix": "/", "volume": "content"}
            ]);
        })
        .await;
        assert!(fake.get(&statefulsets(), &name).is_some(), "{replicas}");
        let removed = fake.events().iter().any(|(_, r, n)| {
            r == "WorkloadReplaced"
                && n.contains("Deployment removed before the StatefulSet is ready: its one pod mounts an existing claim")
        });
        assert_eq!(
            (fake.get(&deployments(), &name).is_none(), removed),
            (replicas == 1, replicas == 1),
            "{replicas} replicas: {:?}",
            fake.events()
        );
    }
}

/// minimal.yaml turned into a caching node whose cache is the existing claim `content` (one
/// replica: every pod would mount the claim).
async fn shared_claim_cache() -> (FakeApi, Arc<Context>, String) {
    let (fake, ctx, name) = reconciled("minimal.yaml").await;
    edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["origin"] = json!({"servers": ["https://origin.example"]});
        cs["spec"]["volumes"][0]["cache"] = json!({});
        cs["spec"]["routes"] = json!([{"prefix": "/", "volume": "content", "cache": {}}]);
    })
    .await;
    let d = fake.get(&deployments(), &name).expect("Deployment");
    assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
    (fake, ctx, name)
}

/// A cache on an existing claim with more than one replica (here through `/scale`, which a
/// cluster without the CRD's CEL rules lets through) is an invalid spec naming spec.replicas:
/// nothing is applied, so the one pod keeps serving instead of more crash-looping on the cache
/// directory's lock.
#[tokio::test]
async fn more_replicas_on_a_shared_claim_cache_are_refused_and_the_pod_keeps_serving() {
    let (fake, ctx, name) = shared_claim_cache().await;
    let before = fake.get(&deployments(), &name).expect("Deployment");
    hpa_scales(&fake, &name, 3).await;
    let cs = run_without_child_writes(&fake, &ctx, &name, "more replicas on a shared cache").await;
    assert_eq!(fake.get(&deployments(), &name), Some(before));
    assert_eq!(deployment_replicas(&fake, &name), 1);
    let rec = condition(&cs, "Reconciled");
    assert_eq!(rec.reason, "InvalidSpec");
    assert!(
        rec.message.contains(
            "spec.replicas: 3 is more than 1: spec.volumes[0] caches on the existing claim \"content\""
        ),
        "{}",
        rec.message
    );
    hpa_scales(&fake, &name, 1).await;
    let cs = run(&fake, &ctx, &name).await;
    assert_eq!(condition(&cs, "Reconciled").reason, "Applied");
}

/// A child past the workload that the API refuses (an admission webhook refusing the Ingress)
/// fails the reconcile, but only after the workload switch: with a cache on an existing claim
/// the old workload still goes at once (its pods hold the lock the new pods need), and the
/// failure is in the status.
#[tokio::test]
async fn a_refused_ingress_does_not_stop_the_workload_switch() {
    let (fake, ctx, name) = shared_claim_cache().await;
    fake.set_rolled_out(&deployments(), &name, 1);
    run(&fake, &ctx, &name).await;
    fake.fail("PATCH", "/ingresses/", 422);
    fake.edit(&contentservers(), &name, |cs| {
        let volumes = cs["spec"]["volumes"].as_array_mut().expect("volumes");
        volumes.push(json!({"name": "scratch", "source":
            {"claimTemplate": {"size": "1Gi", "accessModes": ["ReadWriteOnce"]}}}));
        let routes = cs["spec"]["routes"].as_array_mut().expect("routes");
        routes.insert(0, json!({"prefix": "/scratch/", "volume": "scratch"}));
        cs["spec"]["expose"]["ingress"]["hosts"] = json!(["shop.example"]);
    });
    let err = reconcile(Arc::new(current(&fake, &name).await), ctx.clone())
        .await
        .expect_err("the Ingress is refused");
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert!(fake.get(&statefulsets(), &name).is_some());
    assert!(
        fake.get(&deployments(), &name).is_none(),
        "the Deployment's pod holds the lock the StatefulSet's pod needs"
    );
    let cs = current(&fake, &name).await;
    let rec = condition(&cs, "Reconciled");
    assert_eq!(
        (rec.status.as_str(), rec.reason.as_str()),
        ("False", "ApplyFailed")
    );
}

/// Each child past the workload is applied whatever became of the ones before it: a refused
/// PDB and a refused Ingress (an admission webhook) no longer keep the NetworkPolicy and the
/// HTTPRoute (after them) from being written. Reconciled names both refusals.
#[tokio::test]
async fn each_optional_child_is_applied_whatever_became_of_the_others() {
    let fake = FakeApi::new();
    install_gateway_api(&fake);
    let ctx = context(&fake);
    let name = create(&fake, "exposed.yaml");
    fake.fail("PATCH", "/poddisruptionbudgets/", 422);
    fake.fail("PATCH", "/ingresses/", 422);
    let err = reconcile(Arc::new(current(&fake, &name).await), ctx.clone())
        .await
        .expect_err("the PDB and the Ingress are refused");
    let text = err.to_string();
    assert!(
        text.contains("PodDisruptionBudget") && text.contains("Ingress"),
        "{text}"
    );
    assert!(
        fake.get(&networkpolicies(), &name).is_some(),
        "NetworkPolicy"
    );
    assert!(fake.get(&httproutes(), &name).is_some(), "HTTPRoute");
    assert!(fake.get(&pdbs(), &name).is_none() && fake.get(&ingresses(), &name).is_none());
    let cs = current(&fake, &name).await;
    let rec = condition(&cs, "Reconciled");
    assert_eq!(
        (rec.status.as_str(), rec.reason.as_str()),
        ("False", "ApplyFailed")
    );
    assert!(
        rec.message.contains("PodDisruptionBudget") && rec.message.contains("Ingress"),
        "{}",
        rec.message
    );
    fake.heal();
    let cs = run(&fake, &ctx, &name).await;
    assert!(fake.get(&pdbs(), &name).is_some() && fake.get(&ingresses(), &name).is_some());
    assert_eq!(condition(&cs, "Reconciled").status, "True");
}

/// Several children awaiting the garbage collector (a ContentServer deleted and made again) are
/// a wait, retried every 10 s without backoff, like one; a real refusal beside them is a
/// failure, backed off.
#[tokio::test]
async fn several_refusals_wait_for_gc_only_when_each_one_does() {
    use content_operator::reconcile::Error;
    let fake = FakeApi::new();
    let ctx = context(&fake);
    let cs = Arc::new(example("minimal.yaml"));
    let gc = |what: &str| Error::AwaitingGc {
        what: what.into(),
        uid: "old".into(),
    };
    let waiting = Error::Several(vec![
        gc("PodDisruptionBudget web"),
        gc("HorizontalPodAutoscaler web"),
    ]);
    assert!(waiting.awaiting_gc_only());
    for _ in 0..3 {
        assert_eq!(
            error_policy(cs.clone(), &waiting, ctx.clone()),
            Action::requeue(Duration::from_secs(10))
        );
    }
    let mixed = Error::Several(vec![
        gc("PodDisruptionBudget web"),
        Error::Missing("namespace"),
    ]);
    assert!(!mixed.awaiting_gc_only());
    assert_eq!(
        error_policy(cs.clone(), &mixed, ctx.clone()),
        Action::requeue(Duration::from_secs(5))
    );
}

/// A child past the workload that keeps being refused does not freeze the rest of the status:
/// the config hash and the counts follow the workload (a config change shows its new hash, the
/// pods' loss of readiness shows), and Reconciled names the refusal.
#[tokio::test]
async fn a_refused_optional_child_still_lets_the_status_follow_the_workload() {
    let (fake, ctx, name) = reconciled("minimal.yaml").await;
    fake.set_rolled_out(&deployments(), &name, 1);
    run(&fake, &ctx, &name).await;
    let before = current(&fake, &name).await.status.expect("status");
    assert_eq!(before.ready_replicas, 1);
    fake.fail("PATCH", "/ingresses/", 422);
    fake.edit(&contentservers(), &name, |cs| {
        cs["spec"]["volumes"][0]["pool"]["threads"] = json!(8);
        cs["spec"]["expose"]["ingress"]["hosts"] = json!(["shop.example"]);
    });
    let refused = || async {
        let err = reconcile(Arc::new(current(&fake, &name).await), ctx.clone())
            .await
            .expect_err("the Ingress is refused");
        assert!(err.to_string().contains("injected failure"), "{err}");
        current(&fake, &name).await
    };
    let st = refused().await.status.expect("status");
    let dep = fake.get(&deployments(), &name).expect("Deployment");
    assert_ne!(st.config_hash, before.config_hash);
    assert_eq!(st.config_hash, Some(template_hash(&dep)));
    // The new pod never gets ready (a crash loop), as its controller reports.
    let gen = dep["metadata"]["generation"].clone();
    fake.set_status(
        &deployments(),
        &name,
        json!({"replicas": 1, "readyReplicas": 0, "updatedReplicas": 1, "observedGeneration": gen}),
    );
    let cs = refused().await;
    let st = cs.status.clone().expect("status");
    assert_eq!(st.ready_replicas, 0);
    assert_eq!(condition(&cs, "Available").status, "False");
    let rec = condition(&cs, "Reconciled");
    assert_eq!(
        (rec.status.as_str(), rec.reason.as_str()),
        ("False", "ApplyFailed")
    );
    assert!(rec.message.contains("injected failure"), "{}", rec.message);
    assert_eq!(st.phase.as_deref(), Some("Error"));
}

/// Switching kinds with a cache on an existing claim: the new workload's pods cannot take the
/// cache directory's lock while the old pods hold it, so waiting for them to be ready would
/// stall forever. The old workload is removed at once (an Event says why), both ways.
#[tokio::test]
async fn switching_kinds_with_a_shared_claim_cache_removes_the_old_workload_at_once() {
    let (fake, ctx, name) = shared_claim_cache().await;
    fake.set_rolled_out(&deployments(), &name, 1);
    run(&fake, &ctx, &name).await;
    let cs = edit_and_run(&fake, &ctx, &name, |cs| {
        let volumes = cs["spec"]["volumes"].as_array_mut().expect("volumes");
        volumes.push(json!({"name": "scratch", "source":
            {"claimTemplate": {"size": "1Gi", "accessModes": ["ReadWriteOnce"]}}}));
        let routes = cs["spec"]["routes"].as_array_mut().expect("routes");
        routes.insert(0, json!({"prefix": "/scratch/", "volume": "scratch"}));
    })
    .await;
    assert!(fake.get(&statefulsets(), &name).is_some());
    assert!(
        fake.get(&deployments(), &name).is_none(),
        "the Deployment's pod holds the lock the StatefulSet's pod needs"
    );
    assert!(
        !condition(&cs, "Reconciled")
            .message
            .contains("keeps serving"),
        "{}",
        condition(&cs, "Reconciled").message
    );
    assert!(
        fake.events().iter().any(|(_, r, n)| r == "WorkloadReplaced"
            && n.contains("Deployment removed before the StatefulSet is ready")),
        "{:?}",
        fake.events()
    );

    edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["volumes"]
            .as_array_mut()
            .expect("volumes")
            .truncate(1);
        cs["spec"]["routes"]
            .as_array_mut()
            .expect("routes")
            .remove(0);
    })
    .await;
    assert!(fake.get(&deployments(), &name).is_some());
    assert!(fake.get(&statefulsets(), &name).is_none());
    assert!(fake.get(&services(), "minimal-headless").is_none());
}

/// Each config has its own ConfigMap (named by its hash), so a pod that restarts during a
/// rollout reads its own template's config; the earlier ones are deleted once the rollout is
/// complete, along with the single `NAME-config` of earlier operator versions. A ConfigMap this
/// ContentServer does not own (another controller's, whatever its labels) is never deleted.
#[tokio::test]
async fn a_config_change_gets_a_new_configmap_and_the_old_one_goes_after_the_rollout() {
    let (fake, ctx, name) = reconciled("minimal.yaml").await;
    let uid = current(&fake, &name).await.metadata.uid.expect("uid");
    let owner = json!([{"apiVersion": "contentserver.dev/v1alpha1", "kind": "ContentServer",
                        "name": name, "uid": uid, "controller": true}]);
    let labels = json!({"app.kubernetes.io/managed-by": "content-operator",
                        "app.kubernetes.io/instance": name,
                        "app.kubernetes.io/name": "content-server"});
    fake.insert(
        &configmaps(),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": format!("{name}-config"), "labels": labels,
                            "ownerReferences": owner},
               "data": {"config.toml": "from an operator before per-hash names"}}),
    );
    let foreign = fake.insert(
        &configmaps(),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": format!("{name}-config-theirs"), "labels": labels,
                            "ownerReferences": [{"apiVersion": "v1", "kind": "Secret",
                                                 "name": "x", "uid": "another-controller",
                                                 "controller": true}]},
               "data": {"x": "y"}}),
    );
    let first = mounted_config_name(&fake, &name);
    assert!(first.starts_with(&format!("{name}-config-")), "{first}");
    assert_eq!(mounted_config(&fake, &name)["immutable"], true);

    let cs = edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["volumes"][0]["pool"]["threads"] = json!(8)
    })
    .await;
    let second = mounted_config_name(&fake, &name);
    assert_ne!(first, second, "a new config is a new ConfigMap");
    assert_eq!(
        Some(format!(
            "{name}-config-{}",
            template_hash(&fake.get(&deployments(), &name).expect("Deployment"))
        )),
        Some(second.clone())
    );
    assert_eq!(
        cs.status.and_then(|s| s.config_hash),
        Some(second[name.len() + 8..].to_string())
    );
    let first_cm = fake.get(&configmaps(), &first).expect("first config kept");
    let toml = first_cm["data"]["config.toml"].as_str().expect("toml");
    let cfg = content_server::config::Config::from_toml(toml).expect("parses");
    assert_ne!(
        cfg.volumes[0].pool.threads, 8,
        "the first config is as it was"
    );

    // Mid-rollout (the Deployment controller has not finished): old pods may restart, so
    // the first config stays.
    let gen =
        fake.get(&deployments(), &name).expect("Deployment")["metadata"]["generation"].clone();
    fake.set_status(
        &deployments(),
        &name,
        json!({"replicas": 2, "readyReplicas": 1, "updatedReplicas": 1, "observedGeneration": gen}),
    );
    run(&fake, &ctx, &name).await;
    assert!(
        fake.get(&configmaps(), &first).is_some(),
        "kept mid-rollout"
    );
    assert!(fake.get(&configmaps(), &format!("{name}-config")).is_some());

    fake.set_rolled_out(&deployments(), &name, 1);
    run(&fake, &ctx, &name).await;
    let mut left = vec![format!("{name}-config-theirs"), second.clone()];
    left.sort();
    assert_eq!(config_names(&fake, &name), left);
    assert!(
        fake.get(&configmaps(), &first).is_none(),
        "first config deleted"
    );
    assert!(
        fake.get(&configmaps(), &format!("{name}-config")).is_none(),
        "the ConfigMap of an earlier operator deleted"
    );
    assert_eq!(
        fake.get(&configmaps(), &format!("{name}-config-theirs")),
        Some(foreign),
        "not ours: untouched"
    );
    assert_eq!(mounted_config_name(&fake, &name), second);
}

/// During a Deployment -> StatefulSet switch with a config change, the Deployment's pods keep
/// their config until the Deployment is gone.
#[tokio::test]
async fn the_previous_workloads_config_stays_until_the_previous_workload_is_removed() {
    let (fake, ctx, name) = reconciled("minimal.yaml").await;
    fake.set_rolled_out(&deployments(), &name, 1);
    run(&fake, &ctx, &name).await;
    let first = mounted_config_name(&fake, &name);
    edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["volumes"][0]["source"] =
            json!({"claimTemplate": {"size": "10Gi", "accessModes": ["ReadWriteOnce"]}});
        cs["spec"]["volumes"][0]["pool"]["threads"] = json!(8);
    })
    .await;
    let sts = fake.get(&statefulsets(), &name).expect("StatefulSet");
    let second = format!("{name}-config-{}", template_hash(&sts));
    assert_ne!(first, second);
    assert_eq!(
        mounted_config_name(&fake, &name),
        first,
        "Deployment as it was"
    );
    assert!(fake.get(&configmaps(), &second).is_some());

    // The Deployment is still rolled out (its status is complete): its config stays while it exists.
    run(&fake, &ctx, &name).await;
    assert!(
        fake.get(&configmaps(), &first).is_some(),
        "the Deployment's pods mount it"
    );

    fake.set_rolled_out(&statefulsets(), &name, 1);
    run(&fake, &ctx, &name).await;
    assert!(fake.get(&deployments(), &name).is_none());
    assert_eq!(config_names(&fake, &name), vec![second]);
}

/// A client Service published outside the cluster (LoadBalancer, NodePort) carries only
/// `http`: the admin port (/metrics, /config, purges) goes on a ClusterIP `NAME-metrics`
/// Service, which the ServiceMonitor scrapes; back to ClusterIP, that Service goes and the
/// client Service carries the port again.
#[tokio::test]
async fn a_published_client_service_does_not_publish_the_admin_port() {
    let (fake, ctx, name) = reconciled("media-node.yaml").await;
    fake.insert(
        &crds(),
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "servicemonitors.monitoring.coreos.com"}}),
    );
    let port_names = |svc: &Value| -> Vec<String> {
        svc["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .map(|p| p["name"].as_str().expect("name").to_string())
            .collect()
    };
    let role = |fake: &FakeApi| {
        fake.get(&servicemonitors(), &name).expect("ServiceMonitor")["spec"]["selector"]
            ["matchLabels"]["contentserver.dev/service"]
            .clone()
    };
    let metrics_svc = format!("{name}-metrics");
    for type_ in ["LoadBalancer", "NodePort"] {
        edit_and_run(&fake, &ctx, &name, |cs| {
            cs["spec"]["service"]["type"] = json!(type_)
        })
        .await;
        let client = fake.get(&services(), &name).expect("client Service");
        assert_eq!(client["spec"]["type"], type_);
        assert_eq!(port_names(&client), ["http"], "{type_}");
        let m = fake
            .get(&services(), &metrics_svc)
            .expect("metrics Service");
        assert_eq!(m["spec"]["type"], "ClusterIP");
        assert_eq!(port_names(&m), ["metrics"]);
        assert_eq!(
            m["metadata"]["labels"]["contentserver.dev/service"],
            "metrics"
        );
        assert_eq!(role(&fake), "metrics", "the ServiceMonitor scrapes it");
    }
    edit_and_run(&fake, &ctx, &name, |cs| {
        cs["spec"]["service"]["type"] = json!("ClusterIP")
    })
    .await;
    let client = fake.get(&services(), &name).expect("client Service");
    assert_eq!(port_names(&client), ["http", "metrics"]);
    assert!(fake.get(&services(), &metrics_svc).is_none(), "pruned");
    assert_eq!(role(&fake), "client");
}

/// A Deployment whose controller says the rollout passed its progress deadline makes the
/// ContentServer Degraded with that reason and a Warning Event (it said RollingOut forever).
#[tokio::test]
async fn a_deployment_past_its_progress_deadline_is_reported_degraded() {
    let fake = FakeApi::new();
    let ctx = context(&fake);
    let name = create(&fake, "minimal.yaml");
    run(&fake, &ctx, &name).await;
    let d = fake.get(&deployments(), &name).expect("deployment");
    let (gen, want) = (
        d["metadata"]["generation"].clone(),
        d["spec"]["replicas"].clone(),
    );
    fake.set_status(
        &deployments(),
        &name,
        json!({"replicas": want, "readyReplicas": want, "updatedReplicas": 0,
               "observedGeneration": gen,
               "conditions": [{"type": "Progressing", "status": "False",
                               "reason": "ProgressDeadlineExceeded",
                               "message": "ReplicaSet has timed out progressing."}]}),
    );
    let cs = run(&fake, &ctx, &name).await;
    let degraded = condition(&cs, "Degraded");
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "ProgressDeadlineExceeded")
    );
    assert_eq!(cs.status.and_then(|s| s.phase).as_deref(), Some("Degraded"));
    assert!(fake
        .events()
        .iter()
        .any(|(t, r, _)| t == "Warning" && r == "ProgressDeadlineExceeded"));
}
