//! Lease-based leader election (coordination.k8s.io/v1 Lease), so two operator replicas never
//! reconcile at once.
//!
//! A small loop: acquire the Lease when it is free or expired (optimistic concurrency through
//! resourceVersion: a conflicting writer gets 409 and loses), renew it `retry` after the last
//! successful renewal *started* (at once if it took longer), and report loss when no renewal
//! succeeded within the renew deadline, two thirds of the lease duration (client-go's
//! renewDeadline), counted from the start of the last successful attempt (the renewTime it
//! wrote, from which other replicas count the lease's expiry). A renewal may take the whole
//! remaining deadline, so slow renewals that succeed keep the lead; sustained renewals must each
//! take at most half the renew deadline (the next one starts when the last returned and must
//! succeed within the deadline of the last one's start: beyond that the lease really looks
//! expired to the others for a while, which no leader may tolerate). Every lease
//! attempt is bounded by a timeout ending at that deadline, so a call that hangs (an API server
//! that accepted the connection and never answers) cannot keep a leader leading after another
//! replica may have taken over: loss is reported at the deadline, a third of the lease duration
//! before the lease expires for the others. The caller stops reconciling (the binary exits) on
//! loss. Must not reconcile anything itself.
//!
//! Expiry is judged on this replica's own clock, as client-go does: a lease is expired when its
//! record (holder, renewTime) has not changed for the lease duration since this replica first
//! saw it so (the time taken after the read answered, on a clock that only moves forward),
//! whatever the renewTime says. Comparing the leader's renewTime with our clock would let a
//! standby whose clock runs ahead take a live lease; a wall clock stepped forward would too.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One candidate for the lease.
#[derive(Clone)]
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    lease_duration: Duration,
    /// The lease record last seen (holder, renewTime) and when, on this replica's clock, it was
    /// first seen.
    observed: Arc<Mutex<Option<(Record, Timestamp)>>>,
    /// This replica's clock for [`Self::observed`]: the wall clock when the elector was made,
    /// advanced by a monotonic clock (wall clock steps do not move it).
    started: (Timestamp, Instant),
}

/// What identifies one renewal of a lease.
type Record = (String, Option<Timestamp>);

/// Outcome of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseState {
    /// We hold the lease (acquired or renewed).
    Leading,
    /// Someone else holds a live lease.
    Following { holder: String },
}

fn conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl LeaderElector {
    pub fn new(api: Api<Lease>, name: &str, identity: &str, lease_duration: Duration) -> Self {
        LeaderElector {
            api,
            name: name.into(),
            identity: identity.into(),
            lease_duration,
            observed: Arc::default(),
            started: (Timestamp::now(), Instant::now()),
        }
    }

    /// Now on this replica's own monotonic clock.
    fn local_now(&self) -> Timestamp {
        let (wall, at) = self.started;
        let elapsed = SignedDuration::try_from(at.elapsed()).unwrap_or(SignedDuration::MAX);
        wall.checked_add(elapsed).unwrap_or(wall)
    }

    /// Has `record` stayed the same for `duration` up to `now` (first seen unchanged at least
    /// that long ago)? A new record is remembered as seen at `now`.
    fn unchanged_for(&self, record: Record, duration: SignedDuration, now: Timestamp) -> bool {
        let mut seen = self.observed.lock().unwrap_or_else(|p| p.into_inner());
        match &*seen {
            Some((r, since)) if *r == record => *since + duration < now,
            _ => {
                *seen = Some((record, now));
                false
            }
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn spec(&self, now: Timestamp, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(acquired.unwrap_or(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Acquire or renew the lease once, at time `now` (written in the lease, and the time this
    /// replica sees it at).
    pub async fn try_acquire_or_renew(&self, now: Timestamp) -> Result<LeaseState, kube::Error> {
        self.try_at(now, || now).await
    }

    /// Acquire or renew the lease once: `now` is written in it (the wall clock, which the other
    /// replicas read), `local` is this replica's own clock, read once the lease was read.
    async fn try_at(
        &self,
        now: Timestamp,
        local: impl Fn() -> Timestamp,
    ) -> Result<LeaseState, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, None, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(LeaseState::Leading),
                Err(e) if conflict(&e) => self.following_from_get().await,
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let duration =
            SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
        let record = (holder.clone(), spec.renew_time.as_ref().map(|t| t.0));
        let expired = self.unchanged_for(record, duration, local());
        let transitions = spec.lease_transitions.unwrap_or(0);
        let new_spec = if holder == self.identity {
            self.spec(now, spec.acquire_time.clone(), transitions)
        } else if holder.is_empty() || expired {
            self.spec(now, None, transitions + 1)
        } else {
            return Ok(LeaseState::Following { holder });
        };
        lease.spec = Some(new_spec);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(LeaseState::Leading),
            Err(e) if conflict(&e) => self.following_from_get().await,
            Err(e) => Err(e),
        }
    }

    async fn following_from_get(&self) -> Result<LeaseState, kube::Error> {
        let holder = self
            .api
            .get_opt(&self.name)
            .await?
            .and_then(|l| l.spec.and_then(|s| s.holder_identity))
            .unwrap_or_default();
        Ok(LeaseState::Following { holder })
    }

    /// Give the lease up (on shutdown) so another replica takes over at once.
    pub async fn release(&self) -> Result<(), kube::Error> {
        if let Some(mut lease) = self.api.get_opt(&self.name).await? {
            let mine = lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref())
                == Some(self.identity.as_str());
            if mine {
                if let Some(s) = lease.spec.as_mut() {
                    s.holder_identity = None;
                    s.renew_time = None;
                }
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await?;
            }
        }
        Ok(())
    }

    /// Two thirds of the lease duration: a leader that has not renewed for this long gives up.
    pub fn renew_deadline(&self) -> Duration {
        self.lease_duration * 2 / 3
    }

    /// How often the leader renews (and a standby retries): a fifth of the renew deadline, 2 s of
    /// the default 15 s lease (client-go's default retryPeriod), so a renewal started one retry
    /// period after the last success may take most of the renew deadline.
    pub fn retry_period(&self) -> Duration {
        self.renew_deadline() / 5
    }

    /// One attempt started now, bounded by `limit`: Ok(Err(())) when it timed out.
    async fn attempt(&self, limit: Duration) -> Result<Result<LeaseState, kube::Error>, ()> {
        tokio::time::timeout(limit, self.try_at(Timestamp::now(), || self.local_now()))
            .await
            .map_err(|_| ())
    }

    /// Block until this candidate leads; returns when the successful attempt started (the
    /// renewTime it wrote), for [`hold`](Self::hold). Each attempt is bounded by the renew
    /// deadline: a late success would start leading with an already aging lease.
    pub async fn acquire(&self, retry: Duration) -> Instant {
        loop {
            let started = Instant::now();
            match self.attempt(self.renew_deadline()).await {
                Ok(Ok(LeaseState::Leading)) => return started,
                Ok(Ok(LeaseState::Following { holder })) => {
                    tracing::info!(holder, "waiting for the leader lease");
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "leader lease"),
                Err(()) => tracing::warn!(
                    timeout = ?self.renew_deadline(),
                    "leader lease: no answer from the API server"
                ),
            }
            tokio::time::sleep(retry).await;
        }
    }

    /// Renew until leadership is lost; returns why. `acquired` is when the attempt that
    /// acquired the lease started. Each renewal starts `retry` after the previous successful one
    /// *started* (at once when that one took longer), and may run until the renew deadline
    /// counted from that start: a slow renewal that succeeds keeps the lead, and so does any
    /// sequence of renewals each taking at most half the renew deadline. Returns at the latest
    /// at the renew deadline after the last successful renewal started, even while a renewal
    /// call hangs.
    pub async fn hold(&self, retry: Duration, acquired: Instant) -> String {
        let mut last_ok = acquired;
        let mut next = acquired + retry;
        let mut failure = String::from("no renewal attempted");
        loop {
            let deadline = last_ok + self.renew_deadline();
            tokio::time::sleep_until(tokio::time::Instant::from_std(next.min(deadline))).await;
            let started = Instant::now();
            let left = deadline.saturating_duration_since(started);
            if !left.is_zero() {
                match self.attempt(left).await {
                    Ok(Ok(LeaseState::Leading)) => {
                        last_ok = started;
                        next = started + retry;
                        continue;
                    }
                    Ok(Ok(LeaseState::Following { holder })) => {
                        return format!("lease taken over by {holder}");
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "renewing the leader lease");
                        failure = e.to_string();
                    }
                    Err(()) => failure = "the API server did not answer in time".to_string(),
                }
            }
            if Instant::now() >= deadline {
                return format!(
                    "lease not renewed within the renew deadline ({:?} of a {:?} lease): {failure}",
                    self.renew_deadline(),
                    self.lease_duration
                );
            }
            // A failed attempt: try again after `retry`, still bounded by the deadline.
            next = Instant::now() + retry;
        }
    }
}
