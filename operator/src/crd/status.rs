//! The observed state written by the operator (`status`). API shape only; computing it is
//! `crate::status`'s job.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Observed state.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
#[schemars(transform = super::bounds::integer_bounds)]
pub struct ContentServerStatus {
    /// The generation last acted on.
    pub observed_generation: Option<i64>,
    /// Pods of the workload (scale subresource status.replicas).
    pub replicas: i32,
    /// Ready pods.
    pub ready_replicas: i32,
    /// Label selector of the pods (scale subresource, for HPAs).
    pub selector: Option<String>,
    /// Hash of the rendered server config (the pod template's config-hash annotation).
    pub config_hash: Option<String>,
    /// Number of volumes.
    pub volumes: i32,
    /// In-cluster URL of the Service, `http://NAME.NAMESPACE.svc:PORT`.
    pub url: Option<String>,
    /// External host names from spec.expose (HTTPRoute hostnames and Ingress hosts). Always
    /// written (an empty list clears the old names in the status merge patch).
    pub hostnames: Vec<String>,
    /// Ready, Progressing, Degraded, Unavailable (no pod ready), Invalid, Paused or Error (the
    /// children cannot be written, e.g. a name taken: see the Reconciled condition); the Status
    /// printer column.
    pub phase: Option<String>,
    /// Available, Progressing, Degraded and Reconciled.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
