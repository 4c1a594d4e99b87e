//! The real kube-runtime Controller wiring (`controller::run`) against the in-memory API server:
//! it lists ContentServers in the watched namespace, reconciles them into children and reports
//! the managed-ContentServers gauge and the reconcile counter.

mod support;

use content_operator::controller::{self, Scope};
use content_operator::crd::ContentServer;
use content_operator::metrics::Metrics;
use std::time::{Duration, Instant};
use support::*;

/// The ContentServer of `examples/FILE`, as the API server would store it.
fn example_contentserver(file: &str) -> serde_json::Value {
    let doc = example_docs(file)
        .into_iter()
        .find(|d| d["kind"] == "ContentServer")
        .expect("ContentServer");
    let typed: ContentServer = serde_json::from_value(doc).expect("typed");
    serde_json::to_value(&typed).expect("json")
}

/// The controller running against `fake` in the test namespace, and its metrics.
fn start(fake: &FakeApi) -> (Metrics, tokio::task::JoinHandle<()>) {
    let metrics = Metrics::new();
    let task = tokio::spawn(controller::run(
        fake.client(),
        Scope::Namespaces(vec![NS.into()]),
        metrics.clone(),
        "test".into(),
        content_operator::validation::Policy::default(),
    ));
    (metrics, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_reconciles_listed_contentservers() {
    let fake = FakeApi::new();
    for file in ["minimal.yaml", "media-node.yaml"] {
        fake.insert(&contentservers(), example_contentserver(file));
    }
    let (metrics, task) = start(&fake);
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

/// While the ContentServers cannot be listed (the API server answers 503), nothing is
/// reconciled and `contentoperator_watch_errors_total` counts the failures, so a dashboard
/// can tell "none managed" from "cannot see them"; once the API server answers, the
/// ContentServer is reconciled and the counter stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_watches_are_counted_until_the_api_server_answers() {
    let fake = FakeApi::new();
    fake.insert(&contentservers(), example_contentserver("minimal.yaml"));
    fake.fail("GET", "contentservers", 503);
    let (metrics, task) = start(&fake);
    let deadline = Instant::now() + Duration::from_secs(20);
    while metrics.watch_errors.get() == 0 {
        assert!(Instant::now() < deadline, "no watch error counted in 20s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(fake.get(&deployments(), "minimal").is_none());
    assert_eq!(metrics.managed.get(), 0);

    fake.heal();
    while fake.get(&deployments(), "minimal").is_none() || metrics.managed.get() != 1 {
        assert!(
            Instant::now() < deadline + Duration::from_secs(20),
            "not reconciled after the API server came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = metrics.watch_errors.get();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        metrics.watch_errors.get(),
        after,
        "still counting after healing"
    );
    task.abort();
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

/// A stored ContentServer that the typed `ContentServer` cannot hold (the CRD prevents it; a
/// CRD installed by hand or an older one may not) is reported on its own: one short warning
/// naming the object and the field, a Warning Event on it, and never kube's dump of the whole
/// list. Every other ContentServer in the scope is still reconciled.
#[tokio::test(flavor = "current_thread")]
async fn an_undecodable_contentserver_is_reported_and_the_others_reconciled() {
    let fake = FakeApi::new();
    let mut bad = example_contentserver("minimal.yaml");
    bad["spec"]["replicas"] = serde_json::json!(3_000_000_000_i64);
    bad["spec"]["image"] = serde_json::json!("x".repeat(2000));
    fake.insert(&contentservers(), bad);
    fake.insert(&contentservers(), example_contentserver("media-node.yaml"));

    let buf = LogBuf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(controller::log_filter(Some("info")))
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let (metrics, task) = start(&fake);
    let log = || String::from_utf8_lossy(&buf.0.lock().expect("log buffer")).into_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(log().contains("expected i32")
        && fake.get(&statefulsets(), "media").is_some()
        && metrics.managed.get() == 1
        && fake
            .events()
            .iter()
            .any(|(_, r, _)| r == content_operator::watch::UNDECODABLE_REASON))
    {
        assert!(
            Instant::now() < deadline,
            "within 20s: no decode warning, no Event or media not reconciled:\n{}\nstatefulsets {:?}",
            log(),
            fake.names(&statefulsets())
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
    assert!(line.contains("spec.replicas"), "{line}");
    assert!(line.contains("minimal"), "{line}");
    assert!(line.len() < 600, "not brief: {} characters", line.len());
    assert!(
        !text.contains("xxxxxxxxxx"),
        "the list body was logged:\n{}",
        &text[..text.len().min(3000)]
    );
    // Not reconciled, not counted (the gauge is 1: media); the other one is.
    assert!(fake.get(&deployments(), "minimal").is_none());
    let events = fake.events();
    let (kind, reason, note) = events
        .iter()
        .find(|(_, r, _)| r == content_operator::watch::UNDECODABLE_REASON)
        .unwrap_or_else(|| {
            panic!(
                "no {} Event: {events:?}",
                content_operator::watch::UNDECODABLE_REASON
            )
        });
    assert_eq!(kind, "Warning");
    assert!(
        note.contains("spec.replicas") && note.contains("expected i32"),
        "{reason}: {note}"
    );
}

/// A failed reconcile writes its status, and the API server tells every watcher of the
/// ContentServer about that write. The write must not trigger the next attempt: the retry waits
/// for the backoff (5 s first), even when the error's text differs every time (an admission
/// webhook's denial quoting a temporary file), which would otherwise write a new status and
/// retry at once, in a loop. A change of the spec (a new generation) is still reconciled at
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_write_does_not_retrigger_a_failed_reconcile() {
    let fake = FakeApi::new();
    fake.stream_watches(&contentservers());
    fake.insert(&contentservers(), example_contentserver("exposed.yaml"));
    let name = fake.names(&contentservers())[0].clone();
    fake.vary_failure_messages();
    fake.fail("PATCH", "/ingresses/", 422);
    let (_metrics, task) = start(&fake);
    let ingress_patches = || {
        fake.log()
            .iter()
            .filter(|l| l.method == "PATCH" && l.path.contains("/ingresses/"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while ingress_patches() == 0 {
        assert!(Instant::now() < deadline, "the Ingress was never applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The failure is in the status (so the status was written)...
    let written = Instant::now() + Duration::from_secs(5);
    loop {
        let cs = fake.get(&contentservers(), &name).expect("contentserver");
        if cs["status"].to_string().contains("injected failure") {
            break;
        }
        assert!(Instant::now() < written, "failure not in the status: {cs}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // ...and the next attempt waits for the backoff.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert_eq!(
        ingress_patches(),
        1,
        "the Ingress was retried before the backoff (status writes re-triggered the reconcile)"
    );
    // A new generation is reconciled at once, backoff or not.
    fake.heal();
    let before = fake.log().len();
    fake.edit(&contentservers(), &name, |cs| {
        cs["spec"]["replicas"] = serde_json::json!(3);
    });
    // The edit happened behind the watch's back: tell the watchers as the API server would.
    let edited = fake.get(&contentservers(), &name).expect("contentserver");
    fake.announce(&contentservers(), &edited);
    let quick = Instant::now() + Duration::from_secs(2);
    while !fake.log()[before..]
        .iter()
        .any(|l| l.method == "PATCH" && l.path.contains("/ingresses/"))
    {
        assert!(
            Instant::now() < quick,
            "a spec change was not reconciled at once"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    task.abort();
}

/// The autoscaler rewrites its HPA's status at every sync (currentMetrics): that must not run a
/// full reconcile of the ContentServer each time. An edit of the HPA's spec still does, so the
/// operator puts its own spec back, and so does its deletion (it is made again). The fake's
/// HPAs carry no generation, as before Kubernetes 1.37.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hpa_status_updates_do_not_trigger_reconciles_but_spec_edits_do() {
    let fake = FakeApi::new();
    fake.stream_watches(&hpas());
    fake.insert(&contentservers(), example_contentserver("hpa.yaml"));
    let name = fake.names(&contentservers())[0].clone();
    let (metrics, task) = start(&fake);
    let ok = || metrics.reconciles.with_label_values(&["ok"]).get();
    let deadline = Instant::now() + Duration::from_secs(20);
    while fake.get(&hpas(), &name).is_none() || ok() == 0 {
        assert!(Instant::now() < deadline, "no HPA within 20s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let settled = ok();
    for i in 0..5 {
        fake.set_status(
            &hpas(),
            &name,
            serde_json::json!({"currentReplicas": 2, "desiredReplicas": 2,
                "currentMetrics": [{"type": "Pods", "pods": {"metric": {"name": "m"},
                    "current": {"averageValue": format!("{}m", 500 + i)}}}]}),
        );
        let hpa = fake.get(&hpas(), &name).expect("HPA");
        fake.announce(&hpas(), &hpa);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ok(), settled, "HPA status updates ran reconciles");
    // Someone edits the HPA's spec: reconciled at once (the operator's spec is applied again).
    fake.edit(&hpas(), &name, |h| {
        h["spec"]["maxReplicas"] = serde_json::json!(99);
    });
    let hpa = fake.get(&hpas(), &name).expect("HPA");
    fake.announce(&hpas(), &hpa);
    let quick = Instant::now() + Duration::from_secs(3);
    while fake.get(&hpas(), &name).expect("HPA")["spec"]["maxReplicas"] == 99 {
        assert!(
            Instant::now() < quick,
            "an edited HPA spec was not put back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok() > settled);
    // Deleted (a hand's `kubectl delete hpa`): made again at once, not at the 5-minute requeue.
    let gone = fake.remove(&hpas(), &name).expect("HPA");
    fake.notify_deleted(&hpas(), &gone);
    let quick = Instant::now() + Duration::from_secs(3);
    while fake.get(&hpas(), &name).is_none() {
        assert!(Instant::now() < quick, "a deleted HPA was not made again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    task.abort();
}
