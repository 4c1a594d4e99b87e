//! The few API calls every reconcile step uses: server-side apply under the operator's field
//! manager, "apply when wanted, else delete", the ownership check every write of a child goes
//! through, the status patch and Events. Must not decide what a child looks like (see
//! `builders/`) nor when it is wanted.
//!
//! Ownership: the operator changes or deletes only its own children. A same-named object is
//! *ours* when an owner reference carries this ContentServer's uid ([`owned_by`]); an orphan
//! carrying this ContentServer's labels (`app.kubernetes.io/managed-by: content-operator` and its
//! instance label) and no controller reference (left by `kubectl delete --cascade=orphan`) is
//! adopted by the next apply, or deleted when it is no longer wanted ([`ours_or_orphan`]). Any other object holding a child's name is left exactly as it is:
//! a forced server-side apply would otherwise take over its fields and add our controller
//! reference (the garbage collector would then delete it with the ContentServer), so a wanted
//! child whose name is taken fails the reconcile with [`Error::NameTaken`] (shown as
//! `Reconciled=False/NameTaken` with a Warning Event) — or, when the holder is a child of an
//! earlier ContentServer of the same name (deleted and recreated) that the garbage collector
//! has not removed yet, with [`Error::AwaitingGc`] (`Reconciled=False/AwaitingGarbageCollection`,
//! a Normal Event, retried every 10 s) — and an unwanted one is skipped (logged at
//! debug). Each check is one GET before the write; an unwanted child that is absent costs that
//! GET only, no DELETE.

use crate::builders::{FIELD_MANAGER, INSTANCE_LABEL, MANAGED_BY_LABEL};
use crate::crd::{ContentServer, ContentServerStatus};
use crate::reconcile::{key, Context, Error};
use crate::status;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;

/// The longest answer [`plain`] quotes from a body that is not a Kubernetes Status (a proxy's
/// HTML error page) or from a transport error.
pub const PLAIN_MAX: usize = 300;

/// kube's reason for an error body that is not a Kubernetes Status (its text is the message).
const NOT_A_STATUS: &str = "Failed to parse error data";

/// The API's answer in plain words: `422 Invalid: spec.rules[0]...` for a refused call (code,
/// reason, message), kube's own text for anything else (connection, decoding). An error body
/// that is not a Kubernetes Status (a 502 page from a proxy) and kube's own text are shortened:
/// whitespace collapsed, at most [`PLAIN_MAX`] characters.
pub fn plain(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.reason == NOT_A_STATUS => {
            let code = if s.code == 0 {
                String::new()
            } else {
                format!("{} ", s.code)
            };
            format!("{code}(not a Kubernetes Status): {}", shorten(&s.message))
        }
        kube::Error::Api(s) => {
            let head = [s.code.to_string(), s.reason.clone()]
                .into_iter()
                .filter(|p| !p.is_empty() && p != "0")
                .collect::<Vec<_>>()
                .join(" ");
            match (head.is_empty(), s.message.is_empty()) {
                (true, _) => s.message.clone(),
                (false, true) => head,
                (false, false) => format!("{head}: {}", s.message),
            }
        }
        other => shorten(&other.to_string()),
    }
}

/// `text` with whitespace runs collapsed to one space, cut to [`PLAIN_MAX`] characters (an
/// ellipsis marks the cut).
fn shorten(text: &str) -> String {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() <= PLAIN_MAX {
        return collapsed;
    }
    let mut cut: String = collapsed.chars().take(PLAIN_MAX - 1).collect();
    cut.push('…');
    cut
}

/// `Kind name` of an object about to be written, for error messages (the kind from the object's
/// own type information, as every built child carries it).
fn describe<K: Resource + Serialize>(obj: &K) -> String {
    let kind = serde_json::to_value(obj)
        .ok()
        .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_string))
        .unwrap_or_else(|| "object".into());
    format!("{kind} {}", obj.meta().name.as_deref().unwrap_or_default())
}

/// Wrap a failed call on `what` (`Kind name`) with that context.
pub fn call(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Call { what, source }
}

/// Forced server-side apply of `obj` under [`FIELD_MANAGER`]. Callers check ownership first
/// ([`apply_owned`]) unless they already read the object.
pub async fn apply<K>(api: &Api<K>, obj: &K) -> Result<K, Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .map_err(call(describe(obj)))
}

/// Apply `obj` when its name is free or the object holding it is ours ([`ours_or_orphan`]);
/// [`Error::NameTaken`] otherwise, without writing anything.
pub async fn apply_owned<K>(api: &Api<K>, cs: &ContentServer, obj: &K) -> Result<K, Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let existing = api.get_opt(&name).await.map_err(call(describe(obj)))?;
    if let Some(e) = existing {
        if !ours_or_orphan(&e, cs) {
            return Err(name_taken(&e, cs, describe(obj)));
        }
    }
    apply(api, obj).await
}

/// Why `existing` (`what`), which holds a wanted child's name and may not be applied to, stops
/// the reconcile: [`Error::AwaitingGc`] when its controller is an earlier ContentServer of this
/// name (same kind and name, another uid: deleted and recreated, the garbage collector has not
/// removed its children yet), [`Error::NameTaken`] otherwise.
pub fn name_taken<K: Resource>(existing: &K, cs: &ContentServer, what: String) -> Error {
    let group = format!("{}/", ContentServer::group(&()));
    let earlier = existing.meta().owner_references.iter().flatten().find(|o| {
        o.controller == Some(true)
            && o.kind == ContentServer::kind(&())
            && o.api_version.starts_with(&group)
            && o.name == cs.name_any()
            && Some(o.uid.as_str()) != cs.meta().uid.as_deref()
    });
    match earlier {
        Some(o) => Error::AwaitingGc {
            what,
            uid: o.uid.clone(),
        },
        None => Error::NameTaken { what },
    }
}

/// Delete `name` (a `kind`) only when it is this ContentServer's ([`ours_or_orphan`]); Ok(false) when
/// it is absent (also a 404 for a kind whose CRD is not installed) or someone else's, which is
/// left alone. The delete is conditional on the uid just read, so an object recreated in
/// between by someone else is not deleted either.
pub async fn delete_owned<K>(
    api: &Api<K>,
    cs: &ContentServer,
    kind: &str,
    name: &str,
    dp: &DeleteParams,
) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let what = format!("{kind} {name}");
    let Some(existing) = api.get_opt(name).await.map_err(call(what.clone()))? else {
        return Ok(false);
    };
    if !ours_or_orphan(&existing, cs) {
        tracing::debug!(contentserver = %key(cs), object = %what,
            "not deleting an object this ContentServer does not own");
        return Ok(false);
    }
    delete_if_exists(api, name, &same_object(dp, &existing))
        .await
        .map_err(call(what))
}

/// `dp` conditional on `existing`'s uid: an object of the same name made in between by someone
/// else (after the read that found `existing` ours) is not deleted (409, [`delete_if_exists`]).
pub fn same_object<K: Resource>(dp: &DeleteParams, existing: &K) -> DeleteParams {
    DeleteParams {
        preconditions: existing.meta().uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..dp.clone()
    }
}

/// Delete `name`; Ok(false) when it does not exist (404) or no longer matches the delete's
/// preconditions (409). Only for objects known to be ours ([`delete_owned`] checks).
pub async fn delete_if_exists<K>(
    api: &Api<K>,
    name: &str,
    dp: &DeleteParams,
) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, dp).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Apply the child when the spec wants it ([`apply_owned`]), else delete the one of `kind`
/// named `name` when it is ours ([`delete_owned`]: a child removed from the spec is pruned,
/// someone else's same-named object is not touched).
pub async fn apply_or_delete<K>(
    api: &Api<K>,
    cs: &ContentServer,
    kind: &str,
    name: &str,
    desired: Option<K>,
) -> Result<Option<K>, Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    match desired {
        Some(obj) => apply_owned(api, cs, &obj).await.map(Some),
        None => delete_owned(api, cs, kind, name, &DeleteParams::default())
            .await
            .map(|_| None),
    }
}

/// Is `obj` controlled by this ContentServer (owner reference with its uid)?
pub fn owned_by<K: Resource>(obj: &K, cs: &ContentServer) -> bool {
    let uid = cs.meta().uid.as_deref();
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .any(|o| Some(o.uid.as_str()) == uid)
}

/// Is `obj` (which holds a child's name) this ContentServer's to write or delete? When it is
/// ours ([`owned_by`]), or an orphan of ours (left by an orphaning delete of the ContentServer):
/// no controller reference, and this ContentServer's managed-by and instance labels. An apply
/// adopts it (adding the owner reference); a delete removes it, as it would an owned one.
pub fn ours_or_orphan<K: Resource>(obj: &K, cs: &ContentServer) -> bool {
    if owned_by(obj, cs) {
        return true;
    }
    let meta = obj.meta();
    let controlled = meta
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true));
    let label = |k: &str| meta.labels.as_ref().and_then(|l| l.get(k)).cloned();
    !controlled
        && label(MANAGED_BY_LABEL).as_deref() == Some(FIELD_MANAGER)
        && label(INSTANCE_LABEL) == Some(cs.name_any())
}

/// Publish an Event on the ContentServer (failures are logged, never fatal). Every call is a
/// new Event: they are published on transitions and new messages only, and kube's recorder
/// would fold one into an earlier Event of the same reason and keep that one's note (an
/// `InvalidSpec` naming a field fixed since, instead of the one wrong now).
pub async fn publish(
    ctx: &Context,
    cs: &ContentServer,
    warning: bool,
    reason: &str,
    note: String,
    action: &str,
) {
    let ev = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: action.into(),
        secondary: None,
    };
    let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
    if let Err(e) = recorder.publish(&ev, &cs.object_ref(&())).await {
        tracing::warn!(contentserver = %key(cs), error = %e, "cannot publish event");
    }
}

/// Emit Events for the condition transitions, then patch the status when it changed.
pub async fn write_status(
    ctx: &Context,
    cs: &ContentServer,
    st: ContentServerStatus,
) -> Result<(), Error> {
    let patch = serde_json::json!({ "status": st });
    write(ctx, cs, &st, &patch).await
}

/// [`write_status`] for a reconcile that did not get to observe the children (paused, invalid
/// spec, failed apply): only the conditions, the phase and observedGeneration are written; the
/// counts, selector, URL, volumes and host names keep their last written values, and a new
/// ContentServer gets none rather than zeros and empty lists it never observed.
pub async fn write_conditions(
    ctx: &Context,
    cs: &ContentServer,
    st: ContentServerStatus,
) -> Result<(), Error> {
    let patch = serde_json::json!({ "status": {
        "observedGeneration": st.observed_generation,
        "phase": st.phase,
        "conditions": st.conditions,
    }});
    write(ctx, cs, &st, &patch).await
}

async fn write(
    ctx: &Context,
    cs: &ContentServer,
    st: &ContentServerStatus,
    patch: &serde_json::Value,
) -> Result<(), Error> {
    let ns = cs.namespace().ok_or(Error::Missing("namespace"))?;
    let api: Api<ContentServer> = Api::namespaced(ctx.client.clone(), &ns);
    let old = cs.status.clone().unwrap_or_default();
    for t in status::transitions(&old.conditions, &st.conditions) {
        publish(ctx, cs, t.warning, &t.reason, t.message, "Reconcile").await;
    }
    if cs.status.as_ref() == Some(st) {
        return Ok(());
    }
    api.patch_status(
        &cs.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .map_err(call(format!("ContentServer {} status", cs.name_any())))?;
    Ok(())
}
