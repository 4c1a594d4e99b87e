//! The few API calls every reconcile step uses: server-side apply under the operator's field
//! manager, delete-if-present, "apply when wanted, else delete", the status patch and Events.
//! Must not decide what a child looks like (see `builders/`) nor when it is wanted.

use crate::builders::FIELD_MANAGER;
use crate::crd::{ContentServer, ContentServerStatus};
use crate::reconcile::{key, Context, Error};
use crate::status;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;

/// Forced server-side apply of `obj` under [`FIELD_MANAGER`].
pub async fn apply<K>(api: &Api<K>, obj: &K) -> Result<K, kube::Error>
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
}

/// Delete `name`; Ok(false) when it does not exist (404, which also covers a kind whose CRD is
/// not installed).
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
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Apply the child when the spec wants it, else delete the one named `name` (a child removed
/// from the spec is pruned).
pub async fn apply_or_delete<K>(
    api: &Api<K>,
    name: &str,
    desired: Option<K>,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    match desired {
        Some(obj) => apply(api, &obj).await.map(Some),
        None => delete_if_exists(api, name, &DeleteParams::default())
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

/// Publish an Event on the ContentServer (failures are logged, never fatal).
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
    if let Err(e) = ctx.recorder.publish(&ev, &cs.object_ref(&())).await {
        tracing::warn!(contentserver = %key(cs), error = %e, "cannot publish event");
    }
}

/// Emit Events for the condition transitions, then patch the status when it changed.
pub async fn write_status(
    ctx: &Context,
    cs: &ContentServer,
    st: ContentServerStatus,
) -> Result<(), Error> {
    let ns = cs.namespace().ok_or(Error::Missing("namespace"))?;
    let api: Api<ContentServer> = Api::namespaced(ctx.client.clone(), &ns);
    let old = cs.status.clone().unwrap_or_default();
    for t in status::transitions(&old.conditions, &st.conditions) {
        publish(ctx, cs, t.warning, &t.reason, t.message, "Reconcile").await;
    }
    if cs.status.as_ref() == Some(&st) {
        return Ok(());
    }
    let patch = serde_json::json!({ "status": st });
    api.patch_status(
        &cs.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}
