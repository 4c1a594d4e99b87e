//! One reconcile of one ContentServer, in the order it happens: nothing while it is being
//! deleted, the gate (paused or invalid -> status only), apply every child under one field manager, remove the workload of the other
//! kind once the new one is ready, write status. Also the error policy (per-object backoff).
//!
//! Safety rules this module must keep: a ContentServer being deleted (deletionTimestamp set,
//! e.g. foreground deletion waiting for its children) gets no writes at all; an invalid spec
//! never touches a child; `paused` never touches a child; a StatefulSet whose immutable fields (claim templates, pod management policy,
//! service name) changed is deleted with `propagationPolicy: Orphan` — its pods keep serving and
//! are adopted by the replacement — never with cascading deletion; a workload of the previous
//! kind (Deployment <-> StatefulSet) is removed only after the new one has all pods ready (at once
//! when the pods share a cache directory: the new pods could not start beside the old).
//! Building objects is `builders/`' job, computing conditions is `status.rs`'.

mod api;
mod applied;
mod children;
mod configs;
mod gate;
mod replace;

use crate::builders;
use crate::crd::{ContentServer, ContentServerStatus};
use crate::metrics::Metrics;
use crate::status::{self, WorkloadState};
use crate::validation::Policy;
use applied::Applied;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use kube::{Client, Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Requeue interval once everything is rolled out.
pub const STEADY_REQUEUE: Duration = Duration::from_secs(300);
/// Requeue interval while a rollout or replacement is in progress.
pub const PROGRESS_REQUEUE: Duration = Duration::from_secs(10);

/// Why a reconcile failed (the controller retries with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call on one object failed: `Kind name: 422 Invalid: <the API's message>`.
    #[error("{what}: {}", api::plain(.source))]
    Call { what: String, source: kube::Error },
    /// A wanted child's name is held by an object this ContentServer does not own.
    #[error("{what} exists and does not belong to this ContentServer (no owner reference to it): left as it is; delete or rename it, or rename the ContentServer")]
    NameTaken { what: String },
    /// A wanted child's name is held by a child of an earlier ContentServer of the same name (a
    /// deleted and recreated one) that the garbage collector has not removed yet.
    #[error("{what} is still owned by an earlier ContentServer of this name (uid {uid}) and awaits garbage collection; retrying")]
    AwaitingGc { what: String, uid: String },
    #[error("kubernetes API: {}", api::plain(.0))]
    Kube(#[from] kube::Error),
    #[error("rendering the server config: {0}")]
    Render(#[from] content_server::config::ConfigError),
    #[error("ContentServer has no {0}")]
    Missing(&'static str),
    /// Several children past the workload were refused (each one was attempted).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Several(Vec<Error>),
}

impl Error {
    /// Only waiting for the garbage collector (one child, or every one refused), no failure.
    pub fn awaiting_gc_only(&self) -> bool {
        match self {
            Error::AwaitingGc { .. } => true,
            Error::Several(all) => !all.is_empty() && all.iter().all(Error::awaiting_gc_only),
            _ => false,
        }
    }
}

/// Shared state of every reconcile.
pub struct Context {
    pub client: Client,
    /// Who publishes the Events (`api::publish`).
    pub reporter: Reporter,
    pub metrics: Metrics,
    /// Consecutive failures per object, for the error policy's backoff.
    pub failures: Mutex<HashMap<String, u32>>,
    /// What the operator allows whatever a spec asks (its flags).
    pub policy: Policy,
}

impl Context {
    pub fn new(client: Client, reporter: Reporter, metrics: Metrics, policy: Policy) -> Context {
        Context {
            client,
            reporter,
            metrics,
            failures: Mutex::new(HashMap::new()),
            policy,
        }
    }
}

/// What one reconcile works on: the object, its namespace, the clock reading and the status it
/// started from.
pub(crate) struct Scope<'a> {
    pub cs: &'a ContentServer,
    pub ctx: &'a Context,
    pub ns: String,
    pub now: Timestamp,
    pub previous: ContentServerStatus,
}

impl<'a> Scope<'a> {
    fn new(cs: &'a ContentServer, ctx: &'a Context) -> Result<Scope<'a>, Error> {
        Ok(Scope {
            cs,
            ctx,
            ns: cs.namespace().ok_or(Error::Missing("namespace"))?,
            now: Timestamp::now(),
            previous: cs.status.clone().unwrap_or_default(),
        })
    }

    /// The API of a namespaced kind in the ContentServer's namespace.
    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    fn generation(&self) -> Option<i64> {
        self.cs.metadata.generation
    }
}

fn key(cs: &ContentServer) -> String {
    format!("{}/{}", cs.namespace().unwrap_or_default(), cs.name_any())
}

/// The controller's reconcile function. One guard measures it: its duration, its result label,
/// and the error counter when it fails.
pub async fn reconcile(cs: Arc<ContentServer>, ctx: Arc<Context>) -> Result<Action, Error> {
    let mut measure = ctx.metrics.measure_reconcile();
    match reconcile_steps(&cs, &ctx).await {
        Ok((action, result)) => {
            measure.set_result(result);
            if let Ok(mut f) = ctx.failures.lock() {
                f.remove(&key(&cs));
            }
            Ok(action)
        }
        Err(Failed {
            error,
            status_written,
        }) => {
            tracing::warn!(contentserver = %key(&cs), error = %error, "reconcile failed");
            if !status_written {
                record_failure(&cs, &ctx, &error).await;
            }
            Err(error)
        }
    }
}

/// A failed reconcile: the error, and whether the status already says so (a child past the
/// workload refused: the rest of the status was written with it).
struct Failed {
    error: Error,
    status_written: bool,
}

impl From<Error> for Failed {
    fn from(error: Error) -> Failed {
        Failed {
            error,
            status_written: false,
        }
    }
}

async fn reconcile_steps(
    cs: &ContentServer,
    ctx: &Context,
) -> Result<(Action, &'static str), Failed> {
    if cs.metadata.deletion_timestamp.is_some() {
        // Being deleted (foreground deletion waits for the children to go): re-applying them
        // would recreate what the garbage collector removes. Nothing to write.
        return Ok((Action::await_change(), crate::metrics::result::OK));
    }
    let scope = Scope::new(cs, ctx)?;
    if let Some(stopped) = gate::stop_before_children(&scope).await? {
        return Ok(stopped);
    }
    let mut applied = children::apply_all(&scope).await?;
    replace::remove_other_kind(&scope, &mut applied).await?;
    configs::prune_old(&scope, &applied).await?;
    // A child past the workload refused: the status is written all the same (counts, config
    // hash, availability), with Reconciled False naming the refusal, and the reconcile fails
    // (retried with backoff).
    let failed = applied.optional_failed.take();
    let action = write_applied_status(&scope, applied, failed.as_ref()).await?;
    if let Some(error) = failed {
        return Err(Failed {
            error,
            status_written: true,
        });
    }
    Ok((action, crate::metrics::result::OK))
}

/// The status after the children were applied (`failed`: one past the workload was refused);
/// the requeue follows the rollout.
async fn write_applied_status(
    scope: &Scope<'_>,
    applied: Applied,
    failed: Option<&Error>,
) -> Result<Action, Error> {
    let cs = scope.cs;
    let replacing = applied.replacing();
    // While the workload is unobserved (the StatefulSet being replaced, its orphaned pods
    // serving; a workload its controller has not reported on yet) the pods serve as last seen:
    // the counts last written, which already include any workload of the other kind. Once
    // observed, the ready pods of a workload of the other kind that still runs are added.
    let w = match applied.state {
        Some(mut w) => {
            w.ready += applied.serving_elsewhere;
            w.serving_elsewhere = applied.serving_elsewhere;
            w
        }
        None => WorkloadState {
            desired: cs.spec.replicas,
            replicas: scope.previous.replicas,
            ready: scope.previous.ready_replicas,
            ..WorkloadState::default()
        },
    };
    let note = (!applied.notes.is_empty()).then(|| applied.notes.join("; "));
    let mut conditions = status::workload_conditions(
        &scope.previous.conditions,
        &w,
        note.as_deref(),
        scope.generation(),
        scope.now,
    );
    if !applied.missing_crds.is_empty() {
        let missing = status::crd_missing(
            &scope.previous.conditions,
            &applied.missing_crds,
            note.as_deref(),
            scope.generation(),
            scope.now,
        );
        conditions = status::merge_conditions(&conditions, vec![missing]);
    }
    if let Some(e) = failed {
        let refused = status::condition(
            &scope.previous.conditions,
            status::RECONCILED,
            false,
            failure_reason(e),
            e.to_string(),
            scope.generation(),
            scope.now,
        );
        conditions = status::merge_conditions(&conditions, vec![refused]);
    }
    let mut st = status::with_conditions(Some(&scope.previous), conditions);
    st.observed_generation = scope.generation();
    st.replicas = w.replicas;
    st.ready_replicas = w.ready;
    st.selector = Some(builders::selector_string(cs));
    st.config_hash = Some(applied.config_hash);
    st.volumes = i32::try_from(cs.spec.volumes.len()).unwrap_or(i32::MAX);
    st.url = Some(builders::service_url(cs));
    st.hostnames = builders::expose::hostnames(cs);
    api::write_status(scope.ctx, cs, st).await?;

    Ok(if replacing || !w.rolled_out() {
        Action::requeue(PROGRESS_REQUEUE)
    } else {
        Action::requeue(STEADY_REQUEUE)
    })
}

/// Best effort: show a failed reconcile as `Reconciled=False/ApplyFailed` (`NameTaken` when a
/// wanted child's name is held by someone else's object, `AwaitingGarbageCollection` when by a
/// child of an earlier ContentServer of the same name), with an Event on the transition, the
/// error's plain message and observedGeneration; nothing else of the status is written (see
/// `api::write_conditions`). A failure to write the status is only logged; the error policy
/// retries anyway.
async fn record_failure(cs: &ContentServer, ctx: &Context, err: &Error) {
    let previous = cs.status.clone().unwrap_or_default();
    let mut st = status::not_reconciled(
        &previous,
        failure_reason(err),
        err.to_string(),
        cs.metadata.generation,
        Timestamp::now(),
    );
    st.observed_generation = cs.metadata.generation;
    if let Err(e) = api::write_conditions(ctx, cs, st).await {
        tracing::warn!(contentserver = %key(cs), error = %e, "cannot record the failure in status");
    }
}

/// The Reconciled reason for a failed reconcile.
fn failure_reason(err: &Error) -> &'static str {
    match err {
        Error::NameTaken { .. } => "NameTaken",
        Error::AwaitingGc { .. } => status::AWAITING_GC,
        // Waiting for the garbage collector only when every refusal is that wait: a real
        // refusal beside it must show (a Warning, phase Error).
        Error::Several(all) => all
            .iter()
            .find(|e| !e.awaiting_gc_only())
            .or(all.first())
            .map_or("ApplyFailed", failure_reason),
        _ => "ApplyFailed",
    }
}

/// The error policy: exponential backoff per object, 5 s doubling up to 5 min; a child awaiting
/// garbage collection is looked at again every [`PROGRESS_REQUEUE`] (no backoff: the wait is
/// expected to be short and is not a failure).
pub fn error_policy(cs: Arc<ContentServer>, err: &Error, ctx: Arc<Context>) -> Action {
    if err.awaiting_gc_only() {
        return Action::requeue(PROGRESS_REQUEUE);
    }
    let n = ctx
        .failures
        .lock()
        .map(|mut f| {
            let n = f.entry(key(&cs)).or_insert(0);
            *n = n.saturating_add(1);
            *n
        })
        .unwrap_or(1);
    Action::requeue(backoff(n))
}

/// Backoff after `n` consecutive failures.
pub fn backoff(n: u32) -> Duration {
    let secs = 5u64.saturating_mul(1u64 << n.saturating_sub(1).min(16));
    Duration::from_secs(secs.min(300))
}
