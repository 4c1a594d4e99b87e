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

/// A `Write` into a shared buffer, for capturing the log.
#[derive(Clone, Default)]
struct LogBuf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A stored ContentServer that the typed LIST cannot decode (the CRD prevents it; a hand-made
/// CRD may not): the failure is one short warning per retry, not kube's dump of the whole list.
#[tokio::test(flavor = "current_thread")]
async fn an_undecodable_contentserver_is_logged_briefly() {
    let fake = FakeApi::new();
    let doc = example_docs("minimal.yaml")
        .into_iter()
        .find(|d| d["kind"] == "ContentServer")
        .expect("ContentServer");
    let mut bad =
        serde_json::to_value(serde_json::from_value::<ContentServer>(doc).expect("typed"))
            .expect("json");
    bad["spec"]["replicas"] = serde_json::json!(3_000_000_000_i64);
    bad["spec"]["image"] = serde_json::json!("x".repeat(2000));
    fake.insert(&contentservers(), bad);

    let buf = LogBuf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(controller::log_filter(Some("info")))
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let task = tokio::spawn(controller::run(
        fake.client(),
        Scope::Namespaces(vec![NS.into()]),
        Metrics::new(),
        "test".into(),
    ));
    let log = || String::from_utf8_lossy(&buf.0.lock().expect("log buffer")).into_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !log().contains("expected i32") {
        assert!(
            Instant::now() < deadline,
            "no decode warning within 20s:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    task.abort();
    let text = log();
    let line = text
        .lines()
        .find(|l| l.contains("expected i32"))
        .expect("warning line");
    assert!(line.contains("WARN"), "{line}");
    assert!(line.len() < 600, "not brief: {} characters", line.len());
    assert!(
        !text.contains("xxxxxxxxxx"),
        "the list body was logged:\n{}",
        &text[..text.len().min(3000)]
    );
}
