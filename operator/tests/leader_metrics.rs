//! Lease-based leader election against the in-memory API server (two candidates, expiry,
//! release) and the operator's /metrics + /healthz endpoint over a real socket.

mod support;

use content_operator::leader::{LeaderElector, LeaseState};
use content_operator::metrics::{self, Metrics};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::Api;
use std::io::{Read, Write};
use std::time::Duration;
use support::*;

fn elector(fake: &FakeApi, id: &str) -> LeaderElector {
    LeaderElector::new(
        Api::<Lease>::namespaced(fake.client(), NS),
        "content-operator",
        id,
        Duration::from_secs(15),
    )
}

async fn acquire(e: &LeaderElector, now: Timestamp) -> LeaseState {
    e.try_acquire_or_renew(now).await.expect("lease call")
}

/// Two candidates on one fake; `a` acquired the lease at the returned time.
async fn a_leads() -> (FakeApi, [LeaderElector; 2], Timestamp) {
    let fake = FakeApi::new();
    let [a, b] = ["a", "b"].map(|id| elector(&fake, id));
    let t0 = Timestamp::now();
    assert_eq!(acquire(&a, t0).await, LeaseState::Leading);
    (fake, [a, b], t0)
}

#[tokio::test]
async fn only_one_candidate_leads_until_the_lease_expires() {
    let (fake, [a, b], t0) = a_leads().await;
    assert_eq!(
        acquire(&b, t0).await,
        LeaseState::Following { holder: "a".into() }
    );
    // a renews within the lease; b still follows.
    let t1 = t0 + SignedDuration::from_secs(10);
    assert_eq!(acquire(&a, t1).await, LeaseState::Leading);
    let t2 = t1 + SignedDuration::from_secs(10);
    assert_eq!(
        acquire(&b, t2).await,
        LeaseState::Following { holder: "a".into() },
        "renewed at t1, live until t1+15"
    );
    // a stops renewing: the lease duration after b first saw a's last renewal (at t2, on b's
    // own clock), b takes over, and a learns it follows.
    let t3 = t2 + SignedDuration::from_secs(16);
    assert_eq!(acquire(&b, t3).await, LeaseState::Leading);
    assert_eq!(
        acquire(&a, t3).await,
        LeaseState::Following { holder: "b".into() }
    );
    let lease = fake
        .get(
            &coll("coordination.k8s.io/v1", NS, "leases"),
            "content-operator",
        )
        .expect("lease");
    assert_eq!(lease["spec"]["holderIdentity"], "b");
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 15);
}

/// Expiry is judged on the standby's own clock: one running 100 s ahead of the leader's does not
/// take a lease the leader keeps renewing (comparing the leader's renewTime with that clock,
/// it did), and still takes it over once the renewals stop for the lease duration.
#[tokio::test]
async fn a_standby_whose_clock_runs_ahead_does_not_take_a_live_lease() {
    let (_fake, [a, b], t0) = a_leads().await;
    let ahead = SignedDuration::from_secs(100);
    assert_eq!(
        acquire(&b, t0 + ahead).await,
        LeaseState::Following { holder: "a".into() },
        "a renewed at t0 on its clock"
    );
    for i in 1..=5 {
        let t = t0 + SignedDuration::from_secs(i * 10);
        assert_eq!(acquire(&a, t).await, LeaseState::Leading);
        assert_eq!(
            acquire(&b, t + ahead).await,
            LeaseState::Following { holder: "a".into() },
            "a renewed {i} times"
        );
    }
    // a stops renewing: b saw its last renewal at t0 + 150 (b's clock).
    let last = t0 + SignedDuration::from_secs(50) + ahead;
    assert_eq!(
        acquire(&b, last + SignedDuration::from_secs(14)).await,
        LeaseState::Following { holder: "a".into() }
    );
    assert_eq!(
        acquire(&b, last + SignedDuration::from_secs(16)).await,
        LeaseState::Leading
    );
}

/// A standby that starts (or restarts) while the leader is gone sees a record it has no history
/// of: however old its renewTime, it waits the lease duration from its first sight of it (as
/// client-go does), since it cannot tell an old renewal from a clock that disagrees.
#[tokio::test]
async fn a_new_standby_waits_the_lease_duration_from_its_first_sight_of_a_record() {
    let (fake, [_a, _b], t0) = a_leads().await;
    let late = t0 + SignedDuration::from_secs(600);
    let c = elector(&fake, "c");
    assert_eq!(
        acquire(&c, late).await,
        LeaseState::Following { holder: "a".into() }
    );
    assert_eq!(
        acquire(&c, late + SignedDuration::from_secs(14)).await,
        LeaseState::Following { holder: "a".into() }
    );
    assert_eq!(
        acquire(&c, late + SignedDuration::from_secs(16)).await,
        LeaseState::Leading
    );
}

#[tokio::test]
async fn release_hands_over_at_once() {
    let (_fake, [a, b], t0) = a_leads().await;
    a.release().await.expect("release");
    assert_eq!(acquire(&b, t0).await, LeaseState::Leading);
    // Releasing a lease someone else holds does nothing.
    a.release().await.expect("release");
    assert_eq!(
        acquire(&a, t0).await,
        LeaseState::Following { holder: "b".into() }
    );
}

fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_serves_the_contract_names_and_healthz() {
    let m = Metrics::new();
    m.reconciles.with_label_values(&["ok"]).inc();
    m.errors.inc();
    m.duration.observe(0.02);
    m.managed.set(3);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = metrics::router(m);
    tokio::spawn(async move { axum::serve(listener, router).await });
    let body = tokio::task::spawn_blocking(move || {
        (http_get(addr, "/metrics"), http_get(addr, "/healthz"))
    })
    .await
    .expect("join");
    let (metrics_text, health) = body;
    assert!(metrics_text.starts_with("HTTP/1.1 200"), "{metrics_text}");
    for line in [
        "contentoperator_reconciles_total{result=\"ok\"} 1",
        "contentoperator_reconciles_total{result=\"error\"} 0",
        "contentoperator_reconcile_errors_total 1",
        "contentoperator_reconcile_duration_seconds_count 1",
        "contentoperator_managed_contentservers 3",
        "contentoperator_watch_errors_total 0",
    ] {
        assert!(
            metrics_text.contains(line),
            "missing {line:?} in\n{metrics_text}"
        );
    }
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
}

/// A leader whose lease renewal hangs (the API server accepted the PUT and never answers) gives
/// up at the renew deadline (two thirds of the lease duration after its last renewal), before
/// the lease expires for the other replicas; while renewals succeed it keeps leading.
#[tokio::test]
async fn a_leader_whose_renewal_hangs_gives_up_within_the_renew_deadline() {
    let fake = FakeApi::new();
    let lease = Duration::from_secs(3);
    let a = LeaderElector::new(
        Api::<Lease>::namespaced(fake.client(), NS),
        "content-operator",
        "a",
        lease,
    );
    let retry = lease / 3;
    assert_eq!(a.renew_deadline(), Duration::from_secs(2));
    let acquired = a.acquire(retry).await;
    assert!(
        tokio::time::timeout(lease + retry, a.hold(retry, acquired))
            .await
            .is_err(),
        "renewals succeed: still leading"
    );

    fake.hang("PUT", "/leases/");
    let last_renewal = std::time::Instant::now();
    let why = tokio::time::timeout(lease, a.hold(retry, last_renewal))
        .await
        .expect("gives up before the lease expires for the others, while the PUT hangs");
    let after = last_renewal.elapsed();
    assert!(after >= a.renew_deadline(), "{after:?}");
    assert!(after < lease, "{after:?}");
    assert!(why.contains("renew deadline"), "{why}");
}

/// Renewals that are slow but succeed keep the lead: each starts a retry period after the last
/// successful one started (at once when that one took longer) and may run until the renew
/// deadline. Here every lease PUT takes 1.6 s of a 6 s lease (renew deadline 4 s): the leader
/// keeps leading through several renewals, and the lease it holds stays live for the others.
#[tokio::test]
async fn slow_renewals_that_succeed_keep_the_lead() {
    let fake = FakeApi::new();
    let lease = Duration::from_secs(6);
    let a = LeaderElector::new(
        Api::<Lease>::namespaced(fake.client(), NS),
        "content-operator",
        "a",
        lease,
    );
    let retry = a.retry_period();
    assert_eq!(retry, Duration::from_millis(800));
    fake.delay("PUT", "/leases/", Duration::from_millis(1600));
    let acquired = a.acquire(retry).await;
    fake.clear_log();
    let outcome = tokio::time::timeout(Duration::from_secs(9), a.hold(retry, acquired)).await;
    assert!(outcome.is_err(), "lost the lead: {outcome:?}");
    let renewals = fake
        .log()
        .iter()
        .filter(|l| l.method == "PUT" && l.path.contains("/leases/"))
        .count();
    assert!(renewals >= 4, "{renewals} renewals in 9 s");
    let b = elector(&fake, "b");
    assert_eq!(
        acquire(&b, Timestamp::now()).await,
        LeaseState::Following { holder: "a".into() }
    );
}
