//! The gate before any child is touched: a paused or invalid ContentServer gets a status (and,
//! for a new invalid message, a Warning Event) and nothing else. Must not write a child.

use crate::metrics::result;
use crate::reconcile::api::{publish, write_conditions};
use crate::reconcile::{Error, Scope};
use crate::status::{self, RECONCILED};
use crate::validation;
use kube::runtime::controller::Action;
use kube::ResourceExt;

/// `Some((action, result))` when the reconcile stops here (paused, invalid spec).
pub async fn stop_before_children(
    scope: &Scope<'_>,
) -> Result<Option<(Action, &'static str)>, Error> {
    let cs = scope.cs;
    let (reason, message, result) = if cs.spec.paused {
        (
            "Paused",
            "spec.paused is true: children are left as they are".to_string(),
            result::PAUSED,
        )
    } else {
        let mut errors = validation::validate_name(&cs.name_any());
        errors.extend(validation::validate(&cs.spec));
        errors.extend(validation::validate_policy(&cs.spec, scope.ctx.policy));
        if errors.is_empty() {
            return Ok(None);
        }
        let message = errors
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("; ");
        warn_on_new_invalid_message(scope, &message).await;
        ("InvalidSpec", message, result::INVALID)
    };
    let mut st = status::not_reconciled(
        &scope.previous,
        reason,
        message,
        scope.generation(),
        scope.now,
    );
    st.observed_generation = scope.generation();
    write_conditions(scope.ctx, cs, st).await?;
    Ok(Some((Action::await_change(), result)))
}

/// A repeated invalid edit with a new message is worth a new Event too (the condition's reason
/// did not change, so the transition Events do not cover it).
async fn warn_on_new_invalid_message(scope: &Scope<'_>, message: &str) {
    let Some(rec) = scope
        .previous
        .conditions
        .iter()
        .find(|c| c.type_ == RECONCILED)
    else {
        return;
    };
    if rec.reason == "InvalidSpec" && rec.message != message {
        publish(
            scope.ctx,
            scope.cs,
            true,
            "InvalidSpec",
            format!("Reconciled is False: {message}"),
            "Validate",
        )
        .await;
    }
}
