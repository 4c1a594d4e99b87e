//! Reconcile edge cases against the in-memory API server (tests/support): same-named objects the
//! ContentServer does not own (neither deleted nor taken over; an orphan of its own is adopted),
//! a recreated workload its controller has not reported on yet (the status keeps the serving
//! pods), and the status of a failed reconcile (plain message, observedGeneration, nothing
//! unobserved written).

mod support;

use content_operator::crd::ContentServer;
use content_operator::reconcile::{reconcile, Context};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::Api;
use serde_json::{json, Value};
use std::sync::Arc;
use support::*;

async fn current(fake: &FakeApi, name: &str) -> ContentServer {
    let api: Api<ContentServer> = Api::namespaced(fake.client(), NS);
    api.get(name).await.expect("get ContentServer")
}

async fn try_run(
    fake: &FakeApi,
    ctx: &Arc<Context>,
    name: &str,
) -> Result<ContentServer, content_operator::reconcile::Error> {
    reconcile(Arc::new(current(fake, name).await), ctx.clone()).await?;
    Ok(current(fake, name).await)
}

async fn run(fake: &FakeApi, ctx: &Arc<Context>, name: &str) -> ContentServer {
    try_run(fake, ctx, name).await.expect("reconcile succeeds")
}

fn condition(cs: &ContentServer, type_: &str) -> Condition {
    cs.status
        .as_ref()
        .expect("status")
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
        .unwrap_or_else(|| panic!("no {type_} condition"))
}

/// Objects someone else created (no owner reference) under the names of optional children.
fn foreign(name: &str) -> Vec<(String, Value)> {
    let meta = |n: &str| json!({"name": n, "labels": {"team": "other"}});
    vec![
        (
            ingresses(),
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta(name),
                   "spec": {"rules": [{"host": "a.example"}]}}),
        ),
        (
            networkpolicies(),
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                   "metadata": meta(name), "spec": {"podSelector": {}}}),
        ),
        (
            hpas(),
            json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                   "metadata": meta(name), "spec": {"maxReplicas": 3,
                   "scaleTargetRef": {"kind": "Deployment", "name": "other"}}}),
        ),
        (
            pdbs(),
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(name),
                   "spec": {"maxUnavailable": 1}}),
        ),
        (
            services(),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": meta(&format!("{name}-headless")),
                   "spec": {"clusterIP": "None"}}),
        ),
    ]
}

/// The tester's t12: a one-replica Deployment ContentServer wants none of these kinds; the
/// same-named objects of others stay, untouched, and a steady reconcile sends no DELETE at all.
#[tokio::test]
async fn same_named_objects_it_does_not_own_are_not_deleted() {
    let fake = FakeApi::new();
    let ctx = context(&fake);
    let others = foreign("minimal");
    for (coll, obj) in &others {
        fake.insert(coll, obj.clone());
    }
    let before: Vec<Value> = others
        .iter()
        .map(|(c, o)| {
            fake.get(c, o["metadata"]["name"].as_str().expect("name"))
                .expect("stored")
        })
        .collect();
    let name = create(&fake, "minimal.yaml");
    let cs = run(&fake, &ctx, &name).await;
    assert_eq!(condition(&cs, "Reconciled").reason, "Applied");
    for ((coll, obj), was) in others.iter().zip(&before) {
        let n = obj["metadata"]["name"].as_str().expect("name");
        assert_eq!(
            fake.get(coll, n).as_ref(),
            Some(was),
            "{coll}/{n} left as it was"
        );
    }
    fake.clear_log();
    run(&fake, &ctx, &name).await;
    let deletes: Vec<_> = fake
        .log()
        .into_iter()
        .filter(|l| l.method == "DELETE")
        .collect();
    assert!(deletes.is_empty(), "{deletes:?}");
}

/// An optional child the spec no longer wants is still pruned when it is ours, and only then.
#[tokio::test]
async fn an_owned_child_is_pruned_and_a_foreign_one_with_its_name_is_not_taken_over() {
    let fake = FakeApi::new();
    let ctx = context(&fake);
    let name = create(&fake, "media-node.yaml");
    run(&fake, &ctx, &name).await;
    assert!(fake.get(&pdbs(), &name).is_some(), "3 replicas: a PDB");
    let cs = current(&fake, &name).await;
    // One replica: the PDB is pruned.
    fake.edit(&contentservers(), &name, |cs| {
        cs["spec"]["replicas"] = json!(1)
    });
    run(&fake, &ctx, &name).await;
    assert!(fake.get(&pdbs(), &name).is_none(), "our PDB pruned");

    // Someone else creates a PDB with the name; three replicas again: the operator wants its
    // PDB but does not take over theirs.
    let (_, theirs) = foreign(&name).remove(3);
    let theirs = fake.insert(&pdbs(), theirs);
    fake.edit(&contentservers(), &name, |cs| {
        cs["spec"]["replicas"] = json!(3)
    });
    fake.clear_log();
    let err = try_run(&fake, &ctx, &name)
        .await
        .expect_err("the name is taken");
    assert!(
        err.to_string()
            .contains("PodDisruptionBudget media exists and does not belong to this ContentServer"),
        "{err}"
    );
    assert_eq!(fake.get(&pdbs(), &name), Some(theirs), "theirs untouched");
    assert!(
        !fake
            .child_writes()
            .iter()
            .any(|w| w.path.contains("/poddisruptionbudgets/")),
        "{:?}",
        fake.child_writes()
    );
    let after = current(&fake, &name).await;
    let rec = condition(&after, "Reconciled");
    assert_eq!(
        (rec.status.as_str(), rec.reason.as_str()),
        ("False", "NameTaken")
    );
    assert!(
        rec.message.contains("PodDisruptionBudget media"),
        "{}",
        rec.message
    );
    assert!(fake
        .events()
        .iter()
        .any(|(t, r, n)| t == "Warning" && r == "NameTaken" && n.contains("PodDisruptionBudget")));
    assert_eq!(cs.metadata.uid, after.metadata.uid);
}

/// A wanted core child (the Service) whose name another object holds: nothing of theirs is
/// written. An orphan carrying this ContentServer's labels (left by an orphaning delete of an
/// earlier ContentServer of the same name) is adopted instead.
#[tokio::test]
async fn a_foreign_service_is_not_taken_over_and_an_own_orphan_is_adopted() {
    let fake = FakeApi::new();
    let ctx = context(&fake);
    let svc = fake.insert(
        &services(),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "minimal"},
               "spec": {"ports": [{"port": 8080}]}}),
    );
    let hash = content_operator::builders::configmap::render(&example("minimal.yaml").spec)
        .expect("render")
        .hash;
    let cm_name = format!("minimal-config-{hash}");
    fake.insert(
        &configmaps(),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm_name,
               "labels": {"app.kubernetes.io/managed-by": "content-operator",
                          "app.kubernetes.io/instance": "minimal",
                          "app.kubernetes.io/name": "content-server"}},
               "data": {"config.toml": "old"}}),
    );
    let name = create(&fake, "minimal.yaml");
    let err = try_run(&fake, &ctx, &name).await.expect_err("name taken");
    assert!(
        err.to_string().starts_with("Service minimal exists"),
        "{err}"
    );
    assert_eq!(
        fake.get(&services(), &name),
        Some(svc),
        "their Service untouched"
    );
    let cm = fake.get(&configmaps(), &cm_name).expect("ConfigMap");
    let uid = current(&fake, &name).await.metadata.uid;
    assert_eq!(
        cm["metadata"]["ownerReferences"][0]["uid"].as_str(),
        uid.as_deref(),
        "our orphan adopted"
    );
    assert_ne!(cm["data"]["config.toml"], "old");
    assert!(
        fake.get(&deployments(), &name).is_none(),
        "stopped at the Service"
    );
}

/// The tester's t13: a ready StatefulSet whose claim size changes is deleted with orphaning and
/// recreated; until its controller reports on the recreated one (no observedGeneration yet) the
/// status keeps the serving pods: Available stays True, no Warning Event.
#[tokio::test]
async fn a_recreated_statefulset_not_yet_observed_keeps_the_status() {
    let fake = FakeApi::new();
    let ctx = context(&fake);
    let name = create(&fake, "media-node.yaml");
    run(&fake, &ctx, &name).await;
    fake.set_rolled_out(&statefulsets(), &name, 3);
    let cs = run(&fake, &ctx, &name).await;
    assert_eq!(condition(&cs, "Available").status, "True");
    fake.edit(&contentservers(), &name, |cs| {
        cs["spec"]["volumes"][0]["source"]["claimTemplate"]["size"] = json!("8Ti")
    });
    let events = fake.events().len();
    run(&fake, &ctx, &name).await;
    assert!(
        fake.get(&statefulsets(), &name).is_none(),
        "deleted (orphan)"
    );
    let cs = run(&fake, &ctx, &name).await;
    let sts = fake.get(&statefulsets(), &name).expect("recreated");
    assert!(sts["status"]["observedGeneration"].is_null(), "{sts}");
    let st = cs.status.clone().expect("status");
    assert_eq!((st.replicas, st.ready_replicas), (3, 3));
    let available = condition(&cs, "Available");
    assert_eq!(
        (available.status.as_str(), available.reason.as_str()),
        ("True", "MinimumReplicasAvailable")
    );
    assert_eq!(condition(&cs, "Progressing").status, "True");
    let new_events = &fake.events()[events..];
    assert!(
        !new_events.iter().any(|(t, _, _)| t == "Warning"),
        "{new_events:?}"
    );

    // Once its controller reports, its counts are the status'.
    fake.set_status(
        &statefulsets(),
        &name,
        json!({"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3,
               "observedGeneration": sts["metadata"]["generation"]}),
    );
    let cs = run(&fake, &ctx, &name).await;
    assert_eq!(cs.status.expect("status").ready_replicas, 2);
}

/// The tester's t10 shape: the first reconcile fails on an apply the API refuses. The status
/// gets observedGeneration, the API's own words (object, code, reason, message) and nothing the
/// operator did not observe (no zero counts, no empty host names).
#[tokio::test]
async fn a_failed_first_reconcile_writes_a_plain_message_and_only_what_it_knows() {
    let fake = FakeApi::new();
    let ctx = context(&fake);
    let name = create(&fake, "minimal.yaml");
    fake.fail("PATCH", "/deployments/", 422);
    let err = try_run(&fake, &ctx, &name)
        .await
        .expect_err("apply refused");
    let want = format!(
        "Deployment minimal: 422 Invalid: injected failure for PATCH {}/minimal",
        deployments()
    );
    assert_eq!(err.to_string(), want);
    let raw = fake.get(&contentservers(), &name).expect("ContentServer")["status"].clone();
    assert_eq!(raw["observedGeneration"], 1, "{raw}");
    assert_eq!(raw["phase"], "Error", "{raw}");
    for absent in [
        "volumes",
        "hostnames",
        "replicas",
        "readyReplicas",
        "url",
        "selector",
    ] {
        assert!(raw.get(absent).is_none(), "{absent} in {raw}");
    }
    let cs = current(&fake, &name).await;
    let rec = condition(&cs, "Reconciled");
    assert_eq!(
        (rec.status.as_str(), rec.reason.as_str()),
        ("False", "ApplyFailed")
    );
    assert_eq!(rec.message, want);
    assert!(!rec.message.contains("Status {"), "{}", rec.message);
}

/// A proxy's 3 KB HTML error page (not a Kubernetes Status) is not quoted whole in the
/// Reconciled message: whitespace collapsed, cut to 300 characters, the code kept.
#[tokio::test]
async fn a_non_status_error_body_is_shortened_in_the_message() {
    let fake = FakeApi::new();
    let ctx = context(&fake);
    let name = create(&fake, "minimal.yaml");
    let page = format!(
        "<html>\n  <head><title>502 Bad Gateway</title></head>\n<body>\n{}</body></html>\n",
        "<p>upstream   connect error\t or disconnect</p>\n".repeat(70)
    );
    assert!(page.len() > 3000);
    fake.fail_with_body("PATCH", "/deployments/", 502, &page);
    let err = try_run(&fake, &ctx, &name)
        .await
        .expect_err("apply refused");
    let cs = current(&fake, &name).await;
    let rec = condition(&cs, "Reconciled");
    assert_eq!(rec.message, err.to_string());
    assert!(
        rec.message.starts_with("Deployment minimal: 502 (not a Kubernetes Status): <html> <head><title>502 Bad Gateway</title></head> <body> <p>upstream connect error or disconnect</p>"),
        "{}",
        rec.message
    );
    assert!(rec.message.chars().count() <= 400, "{}", rec.message);
    assert!(rec.message.ends_with('…'), "{}", rec.message);
    assert!(!rec.message.contains('\n') && !rec.message.contains("  "));
}

/// A ContentServer deleted and recreated under the same name while its old children still wait
/// for the garbage collector: the reconcile says so (owned by an earlier ContentServer of this
/// name, its uid, awaiting garbage collection), writes none of them, emits no Warning, retries
/// soon, and applies its children once they are gone.
#[tokio::test]
async fn a_recreated_contentserver_waits_for_the_old_children_to_be_collected() {
    let fake = FakeApi::new();
    let ctx = context(&fake);
    let name = create(&fake, "minimal.yaml");
    let old_uid = run(&fake, &ctx, &name).await.metadata.uid.expect("uid");
    let old = fake.remove(&contentservers(), &name).expect("deleted");
    let mut again = old.clone();
    again["metadata"] = json!({"name": name, "namespace": NS});
    again.as_object_mut().expect("object").remove("status");
    fake.insert(&contentservers(), again);
    let cs = current(&fake, &name).await;
    assert_ne!(cs.metadata.uid.as_deref(), Some(old_uid.as_str()));
    fake.clear_log();

    let err = try_run(&fake, &ctx, &name)
        .await
        .expect_err("the old children hold the names");
    let msg = err.to_string();
    assert!(
        msg.contains("earlier ContentServer of this name")
            && msg.contains(&old_uid)
            && msg.contains("awaits garbage collection"),
        "{msg}"
    );
    assert!(!msg.contains("delete or rename"), "{msg}");
    assert!(fake.child_writes().is_empty(), "{:?}", fake.child_writes());
    let after = current(&fake, &name).await;
    let rec = condition(&after, "Reconciled");
    assert_eq!(
        (rec.status.as_str(), rec.reason.as_str()),
        ("False", "AwaitingGarbageCollection")
    );
    assert!(rec.message.contains(&old_uid), "{}", rec.message);
    assert!(
        !fake.events().iter().any(|(t, _, _)| t == "Warning"),
        "{:?}",
        fake.events()
    );
    let action = content_operator::reconcile::error_policy(Arc::new(after), &err, ctx.clone());
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(10))
    );

    // The garbage collector removes the old children: the next reconcile applies the new ones.
    for collection in [deployments(), configmaps(), services()] {
        for child in fake.names(&collection) {
            fake.remove(&collection, &child);
        }
    }
    let cs = run(&fake, &ctx, &name).await;
    assert_eq!(condition(&cs, "Reconciled").status, "True");
    let dep = fake.get(&deployments(), &name).expect("Deployment");
    assert_eq!(
        dep["metadata"]["ownerReferences"][0]["uid"],
        json!(cs.metadata.uid)
    );
}

/// Objects left by an orphaning delete of an earlier ContentServer of the same name (its labels,
/// no owner reference) count as this one's: the ones it no longer wants are deleted, as its own
/// would be. Here the earlier one ran as a Deployment with a NetworkPolicy; the new one is a
/// StatefulSet without: the orphaned Deployment goes once the StatefulSet is ready (its pods
/// would otherwise stay behind the Service forever, serving the old config), the NetworkPolicy
/// at once, and the earlier config's ConfigMap after the rollout.
#[tokio::test]
async fn orphans_of_an_earlier_contentserver_are_removed_when_not_wanted() {
    let fake = FakeApi::new();
    let ctx = context(&fake);
    let labels = json!({"app.kubernetes.io/managed-by": "content-operator",
                        "app.kubernetes.io/instance": "media",
                        "app.kubernetes.io/name": "content-server"});
    fake.insert(
        &deployments(),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "media", "labels": labels},
               "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                        "template": {"metadata": {"labels": labels},
                                     "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
    );
    fake.insert(
        &networkpolicies(),
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": {"name": "media", "labels": labels}, "spec": {"podSelector": {}}}),
    );
    fake.insert(
        &configmaps(),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "media-config-0123456789", "labels": labels},
               "data": {"config.toml": "old"}}),
    );
    // Someone else's, by the same names' rules: never touched.
    let theirs = fake.insert(
        &configmaps(),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "media-config-9876543210", "labels": {"team": "other"}},
               "data": {"config.toml": "theirs"}}),
    );
    let name = create(&fake, "media-node.yaml");
    assert_eq!(name, "media");
    run(&fake, &ctx, &name).await;
    assert!(
        fake.get(&networkpolicies(), &name).is_none(),
        "the orphaned NetworkPolicy is not wanted"
    );
    assert!(
        fake.get(&deployments(), &name).is_some(),
        "the orphaned Deployment serves until the StatefulSet is ready"
    );
    let replicas = current(&fake, &name).await.spec.replicas;
    fake.set_rolled_out(&statefulsets(), &name, replicas);
    run(&fake, &ctx, &name).await;
    assert!(
        fake.get(&deployments(), &name).is_none(),
        "the orphaned Deployment removed once the StatefulSet is ready"
    );
    run(&fake, &ctx, &name).await;
    assert!(
        fake.get(&configmaps(), "media-config-0123456789").is_none(),
        "the earlier config's orphaned ConfigMap pruned after the rollout"
    );
    assert_eq!(
        fake.get(&configmaps(), "media-config-9876543210"),
        Some(theirs)
    );
}
