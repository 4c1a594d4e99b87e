//! Config versions: every rendered config has its own immutable ConfigMap, named by its hash
//! (`builders::configmap_name`), so a pod that restarts in the middle of a rollout (or of a
//! Deployment <-> StatefulSet switch) reads the config its own template was made for, never the
//! next one (which may name a volume the pod does not mount). This step removes the ConfigMaps
//! of earlier configs once no pod can need them: the rollout is complete and the workload of the
//! other kind is gone. Only ConfigMaps of this ContentServer (owned, or orphans of it left by an
//! orphaning delete) are touched (`api::delete_owned`).

use crate::builders::{self, configmap_name, configmap_prefix, INSTANCE_LABEL, MANAGED_BY_LABEL};
use crate::crd::ContentServer;
use crate::reconcile::api::{call, delete_owned, ours_or_orphan};
use crate::reconcile::applied::Applied;
use crate::reconcile::{Error, Scope};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams};
use kube::ResourceExt;

/// Delete the ConfigMaps of earlier configs when the rollout of the current one is complete.
pub async fn prune_old(scope: &Scope<'_>, applied: &Applied) -> Result<(), Error> {
    let rolled_out = applied.state.is_some_and(|s| s.rolled_out());
    if !rolled_out || applied.previous_workload_remains {
        return Ok(());
    }
    let cs = scope.cs;
    let cms: Api<ConfigMap> = scope.api();
    let selector = format!(
        "{INSTANCE_LABEL}={},{MANAGED_BY_LABEL}={}",
        cs.name_any(),
        builders::FIELD_MANAGER
    );
    let list = cms
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(call("ConfigMaps of this ContentServer"))?;
    let current = configmap_name(cs, &applied.config_hash);
    for name in stale(
        cs,
        &current,
        list.items
            .iter()
            .map(|m| (m.name_any(), ours_or_orphan(m, cs))),
    ) {
        delete_owned(&cms, cs, "ConfigMap", &name, &DeleteParams::default()).await?;
    }
    Ok(())
}

/// Of `(name, owned)` pairs, the names of this ContentServer's config ConfigMaps other than
/// `current`: by name (its prefix, or the single `NAME-config` of operators before per-hash
/// names) and owned.
fn stale(
    cs: &ContentServer,
    current: &str,
    found: impl Iterator<Item = (String, bool)>,
) -> Vec<String> {
    let prefix = configmap_prefix(cs);
    let legacy = prefix.trim_end_matches('-');
    found
        .filter(|(name, owned)| {
            *owned && name != current && (name.starts_with(&prefix) || name == legacy)
        })
        .map(|(name, _)| name)
        .collect()
}
