use futures::StreamExt;
use kube::Client;
use kube::api::{WatchEvent, WatchParams};
use serde_json::Value;

use super::{Timing, poll_soon};
use crate::error::SuspendError;
use crate::object::{api, get_json};
use crate::retire::acknowledged;
use flux_fence::ObjectRef;

#[allow(clippy::cast_possible_truncation)] // a few seconds
const WATCH_SLICE_SECS: u32 = super::WATCH_SLICE.as_secs() as u32;

/// While an acknowledgement is watched, the object is also read this long after the watch
/// started and then as often again: a watch whose events never arrive (a proxy that buffers
/// streamed responses, a connection stalled before its headers) costs this long, not the whole
/// budget. An acknowledgement normally arrives well within it, so it costs no request then.
pub const WATCH_CHECK: std::time::Duration = std::time::Duration::from_secs(5);

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
    wait_acknowledged_since(client, object, nonce, None, timing).await
}

/// [`wait_acknowledged`] that, given `since` (the resourceVersion of the write that carried
/// `nonce`), sends no read first: it watches the one object from that version, so the
/// acknowledgement is seen the moment the controller writes it, in one request.
///
/// Without `since` it reads once, then watches from the version read. When the watch cannot
/// be used (no `watch` right, the version is too old, the stream breaks) it polls as
/// [`wait_acknowledged`] always did, until the same deadline. While it watches, it also reads
/// the object every [`WATCH_CHECK`], so a watch that never delivers cannot hold it for the
/// whole budget.
///
/// # Guarantees
/// As [`wait_acknowledged`]: only the object's own `lastHandledReconcileAt` is judged, from
/// the object as the server sent it (a watch event carries the whole object).
///
/// # Errors
/// As [`wait_acknowledged`].
pub async fn wait_acknowledged_since(
    client: &Client,
    object: &ObjectRef,
    nonce: &str,
    since: Option<&str>,
    timing: Timing,
) -> Result<Value, SuspendError> {
    let deadline = tokio::time::Instant::now() + timing.timeout;
    let from = match since {
        Some(rv) => Some(rv.to_string()),
        None => match get_json(client, object).await {
            Ok(v) if acknowledged(&v, nonce) => return Ok(v),
            Ok(v) => v
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string),
            Err(e) => {
                tracing::debug!(object = %object, error = %e, "acknowledgement read failed");
                None
            }
        },
    };
    if let Some(from) = from {
        // Boxed: the watch's stream state would otherwise sit inline in every caller's future.
        let watched = Box::pin(watch_ack(client, object, nonce, from, deadline));
        let seen = tokio::select! {
            v = watched => v,
            v = check_reads(client, object, nonce, deadline) => v,
        };
        if let Some(v) = seen {
            return Ok(v);
        }
    }
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    poll_soon(Timing::new(timing.interval, left), || async {
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
        object: Box::new(object.clone()),
        waited: timing.timeout,
    })
}

/// Reads `object` every [`WATCH_CHECK`] (the first after one period) until it shows `nonce`
/// acknowledged, or `None` at the deadline. Runs beside [`watch_ack`].
async fn check_reads(
    client: &Client,
    object: &ObjectRef,
    nonce: &str,
    deadline: tokio::time::Instant,
) -> Option<Value> {
    loop {
        let next = tokio::time::Instant::now() + WATCH_CHECK;
        if next >= deadline {
            tokio::time::sleep_until(deadline).await;
            return None;
        }
        tokio::time::sleep_until(next).await;
        match get_json(client, object).await {
            Ok(v) if acknowledged(&v, nonce) => {
                tracing::debug!(object = %object, "acknowledgement seen by a check read, not the watch");
                return Some(v);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(object = %object, error = %e, "acknowledgement check read failed");
            }
        }
    }
}

/// Watches `object` from resourceVersion `from` until an event shows `nonce` acknowledged
/// (`Some`), or `None` when the watch cannot go on (refused, too old a version, broken,
/// deleted object) or the deadline passed: the caller then polls for what is left.
async fn watch_ack(
    client: &Client,
    object: &ObjectRef,
    nonce: &str,
    mut from: String,
    deadline: tokio::time::Instant,
) -> Option<Value> {
    let api = api(client, object);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let secs = u32::try_from(left.as_secs()).unwrap_or(u32::MAX);
        if secs == 0 {
            return None;
        }
        let params = WatchParams::default()
            .fields(&format!("metadata.name={}", object.name))
            .timeout(secs.min(WATCH_SLICE_SECS));
        let stream = match api.watch(&params, &from).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(object = %object, error = %e, "acknowledgement watch refused; polling");
                return None;
            }
        };
        let mut stream = std::pin::pin!(stream);
        let ended = tokio::time::timeout_at(deadline, async {
            while let Some(event) = stream.next().await {
                match event {
                    Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => {
                        let v = serde_json::to_value(&o).ok()?;
                        if acknowledged(&v, nonce) {
                            return Some(Some(v));
                        }
                        if let Some(rv) = o.metadata.resource_version {
                            from = rv;
                        }
                    }
                    Ok(WatchEvent::Bookmark(b)) => from = b.metadata.resource_version,
                    Ok(WatchEvent::Deleted(_) | WatchEvent::Error(_)) | Err(_) => {
                        return None;
                    }
                }
            }
            // The server closed the watch at its timeout: watch again from `from`.
            Some(None)
        })
        .await;
        match ended {
            Ok(Some(Some(v))) => {
                tracing::debug!(object = %object, "acknowledgement seen on the watch");
                return Some(v);
            }
            Ok(Some(None)) => {}
            Ok(None) | Err(_) => return None,
        }
    }
}
