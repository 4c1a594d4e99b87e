//! The real kube-runtime Controller wiring (`controller::run`) against the in-memory API server:
//! it lists ContentServers in the watched namespace, reconciles them into children and reports
//! the managed-ContentServers gauge and the reconcile counter.

mod support;

use content_operator::controller::{self, Scope};
use content_operator::crd::ContentServer;
use content_operator::metrics::Metrics;
use std::time::{Duration, Instant};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_reconciles_listed_contentservers() {
    let fake = FakeApi::new();
    for file in ["minimal.yaml", "media-node.yaml"] {
        let doc = example_docs(file)
            .into_iter()
            .find(|d| d["kind"] == "ContentServer")
            .expect("ContentServer");
        let typed: ContentServer = serde_json::from_value(doc).expect("typed");
        fake.insert(
            &contentservers(),
            serde_json::to_value(&typed).expect("json"),
        );
    }
    let metrics = Metrics::new();
    let task = tokio::spawn(controller::run(
        fake.client(),
        Scope::Namespaces(vec![NS.into()]),
        metrics.clone(),
        "test".into(),
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let done = fake.get(&deployments(), "minimal").is_some()
            && fake.get(&statefulsets(), "media").is_some()
            && metrics.managed.get() == 2;
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "controller did not reconcile within 20s: deployments {:?}, statefulsets {:?}, gauge {}",
            fake.names(&deployments()),
            fake.names(&statefulsets()),
            metrics.managed.get()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    task.abort();
    assert!(metrics.reconciles.with_label_values(&["ok"]).get() >= 2);
    let cs = fake.get(&contentservers(), "media").expect("media");
    assert!(cs["status"]["configHash"].is_string(), "{cs}");
}
