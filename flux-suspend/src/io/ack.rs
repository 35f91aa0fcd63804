use kube::Client;
use serde_json::Value;

use super::{Timing, poll_soon};
use crate::error::SuspendError;
use crate::object::get_json;
use crate::retire::acknowledged;
use flux_fence::ObjectRef;

/// Waits until `object` acknowledges `nonce` (`status.lastHandledReconcileAt == nonce`) and
/// returns the object as read then.
///
/// # Guarantees
/// When this returns, no reconcile of `object` that began before the patch carrying `nonce`
/// is still running (docs/design/flux-model.md, facts 2 and 3).
///
/// # Errors
/// [`SuspendError::AckTimeout`] when the deadline passes; read errors are retried until then.
pub async fn wait_acknowledged(
    client: &Client,
    object: &ObjectRef,
    nonce: &str,
    timing: Timing,
) -> Result<Value, SuspendError> {
    poll_soon(timing, || async {
        match get_json(client, object).await {
            Ok(v) if acknowledged(&v, nonce) => Some(v),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(object = %object, error = %e, "acknowledgement read failed");
                None
            }
        }
    })
    .await
    .ok_or_else(|| SuspendError::AckTimeout {
        object: object.to_string(),
        waited: timing.timeout,
    })
}
