//! While the work runs, the session watches every member of the chain it fenced: the first
//! change that breaks the pause (the fence removed, its owner changed, the object deleted,
//! being deleted or recreated, `spec.suspend` no longer true, `reconcile: disabled` gone) ends
//! the work, so a broken pause is never reported as success. A replicas gate is watched the
//! same way, held by its count instead of `spec.suspend`: a scale of its Deployment (`kubectl
//! scale`, KEDA, an HPA) is [`Change::Rescaled`].
//!
//! The decision is [`what_broke`], a pure function of what was fenced ([`Member`]) and the
//! object as read now. The I/O is one bounded watch per member (re-established from the last
//! version seen), a check read every [`WATCH_CHECK`] beside it (a watch whose events never
//! arrive costs that long, as in the acknowledgement wait), and a read every
//! [`POLL_WITHOUT_WATCH`] when the watch cannot be used. A read that fails is not a broken
//! pause: the Lease's own deadline covers an API server that cannot be reached.
//!
//! Who changed it: the field manager that `managedFields` names for the changed field, when
//! the server recorded one. A removal (of the owner annotation, of `spec.suspend`) and a
//! deletion are recorded under nobody's name (the server only tracks fields that are set), so
//! then the line says so instead of guessing.

use std::time::Duration;

use flux_fence::ObjectRef;
use futures::StreamExt;
use kube::Client;
use kube::api::{WatchEvent, WatchParams};
use serde_json::Value;

use crate::flux;
use crate::io::{PauseCheck, ProofTarget, WATCH_CHECK};
use crate::judge::Member;
use crate::object::{api, get_json};

/// The longest single watch request; the server closes it then and it is watched again from
/// the last version seen. Short enough that no watch outlives a Lease by much.
const WATCH_SLICE_SECS: u32 = 10;

/// How often a member is read when it cannot be watched (no `watch` right, a broken stream).
pub const POLL_WITHOUT_WATCH: Duration = Duration::from_secs(1);

/// What changed on a fenced object while the work ran.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// Our owner annotation is gone.
    FenceRemoved,
    /// The owner annotation holds another value (`holder;epoch`).
    OwnerChanged {
        /// The value found.
        to: String,
    },
    /// The object is gone.
    Deleted,
    /// The object is being deleted (`deletionTimestamp`): the controller finalizes it even
    /// while it is suspended.
    Deleting,
    /// Another object of the same name (another uid): deleted and recreated.
    Recreated,
    /// `spec.suspend` is not `true` any more.
    Unsuspended,
    /// `kustomize.toolkit.fluxcd.io/reconcile: disabled` is gone.
    ReconcileEnabled,
    /// A Flux Operator object's `fluxcd.controlplane.io/reconcile` is not `disabled` any more
    /// (removed, or `enabled` as `flux-operator resume` writes): its pause.
    OperatorEnabled,
    /// A replicas gate's Deployment does not hold the gate's count `from` any more: someone
    /// scaled it (`kubectl scale`, an autoscaler such as KEDA or an HPA) to `to` (`None`:
    /// `spec.replicas` is absent).
    Rescaled {
        /// The gate's count.
        from: i32,
        /// The count found.
        to: Option<i64>,
    },
}

impl Change {
    /// Whether the object is still fenced by us, so the cleanup still owns its release (it
    /// then keeps the fence because a mark moved, and lists it); otherwise the cleanup does
    /// not touch it.
    #[must_use]
    pub fn still_ours(&self) -> bool {
        matches!(
            self,
            Self::Unsuspended
                | Self::ReconcileEnabled
                | Self::OperatorEnabled
                | Self::Rescaled { .. }
        )
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::FenceRemoved => f.write_str("its fence (the owner annotation) was removed"),
            Self::OwnerChanged { to } => write!(f, "its owner annotation was changed to {to:?}"),
            Self::Deleted => f.write_str("it was deleted"),
            Self::Deleting => f.write_str("it is being deleted"),
            Self::Recreated => f.write_str("it was deleted and recreated (another uid)"),
            Self::Unsuspended => f.write_str("spec.suspend was set to false"),
            Self::ReconcileEnabled => {
                f.write_str("its kustomize.toolkit.fluxcd.io/reconcile: disabled was removed")
            }
            Self::OperatorEnabled => {
                f.write_str("its fluxcd.controlplane.io/reconcile: disabled was removed or changed")
            }
            Self::Rescaled { from, to: Some(to) } => {
                write!(
                    f,
                    "spec.replicas was set to {to} (the gate holds it at {from})"
                )
            }
            Self::Rescaled { from, to: None } => {
                write!(f, "spec.replicas was removed (the gate holds it at {from})")
            }
        }
    }
}

/// The pause broke while the work ran: the object, what changed, and who changed it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "the pause was broken while the work ran: {object}: {change} {}; {}",
    by.as_ref().map_or_else(
        || "(the server recorded no field manager for it)".to_string(),
        |m| format!("by field manager {m:?}"),
    ),
    if change.still_ours() {
        "the work was stopped; its fence is kept and listed"
    } else {
        "the work was stopped; it is not ours any more and is left untouched"
    }
)]
#[non_exhaustive]
pub struct BrokenPause {
    /// The object, e.g. `Kustomization flux-system/apps`.
    pub object: Box<ObjectRef>,
    /// What changed.
    pub change: Change,
    /// The field manager `managedFields` names for the change, when the server recorded one.
    pub by: Option<String>,
}

impl BrokenPause {
    /// `object` changed by `change`, by the field
    /// manager `by` when the server recorded one.
    #[must_use]
    pub fn new(object: ObjectRef, change: Change, by: Option<String>) -> Self {
        Self {
            object: Box::new(object),
            change,
            by,
        }
    }
}

/// Whether `now` (the object as read now; `None` when it is gone) still holds the pause
/// `member` describes; if not, what changed and which field manager changed it.
#[must_use]
pub fn what_broke(
    member: &Member,
    owner_key: &str,
    now: Option<&Value>,
) -> Option<(Change, Option<String>)> {
    let Some(obj) = now else {
        return Some((Change::Deleted, None));
    };
    let text = |p: &str| obj.pointer(p).and_then(Value::as_str);
    if text("/metadata/uid") != Some(member.uid.as_str()) {
        return Some((Change::Recreated, creator(obj)));
    }
    if text("/metadata/deletionTimestamp").is_some() {
        return Some((Change::Deleting, None));
    }
    let owner_field = ["f:metadata", "f:annotations", &format!("f:{owner_key}")];
    match flux::annotation(obj, owner_key) {
        None => return Some((Change::FenceRemoved, manager_of(obj, &owner_field))),
        Some(v) if v != member.owner => {
            let to = v.to_string();
            return Some((Change::OwnerChanged { to }, manager_of(obj, &owner_field)));
        }
        Some(_) => {}
    }
    let paused = match member.replicas {
        Some(from) => rescaled(obj, from),
        None => unpaused(obj),
    };
    if paused.is_some() {
        return paused;
    }
    if member.needs_reconcile_disabled
        && flux::annotation(obj, flux::RECONCILE_ANNOTATION) != Some(flux::RECONCILE_DISABLED)
    {
        let field = [
            "f:metadata",
            "f:annotations",
            &format!("f:{}", flux::RECONCILE_ANNOTATION),
        ];
        return Some((Change::ReconcileEnabled, manager_of(obj, &field)));
    }
    None
}

/// A Flux object no longer paused: its operator annotation or `spec.suspend`, and who did it.
fn unpaused(obj: &Value) -> Option<(Change, Option<String>)> {
    if !flux::suspended(obj) && flux::is_operator_object(obj) {
        let field = [
            "f:metadata",
            "f:annotations",
            &format!("f:{}", flux::OPERATOR_RECONCILE_ANNOTATION),
        ];
        return Some((Change::OperatorEnabled, manager_of(obj, &field)));
    }
    if !flux::suspended(obj) {
        return Some((
            Change::Unsuspended,
            manager_of(obj, &["f:spec", "f:suspend"]),
        ));
    }
    None
}

/// A replicas gate's Deployment no longer at the gate's count `from`, and who scaled it. A
/// scale through the `scale` subresource (`kubectl scale`, an HPA, KEDA) is recorded on
/// `f:spec.f:replicas` of the Deployment too, in an entry with `subresource: scale`.
fn rescaled(obj: &Value, from: i32) -> Option<(Change, Option<String>)> {
    let to = obj.pointer("/spec/replicas").and_then(Value::as_i64);
    (to != Some(i64::from(from))).then(|| {
        (
            Change::Rescaled { from, to },
            manager_of(obj, &["f:spec", "f:replicas"]),
        )
    })
}

fn managed_fields(obj: &Value) -> impl Iterator<Item = &Value> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn entry_time(e: &Value) -> &str {
    e.get("time").and_then(Value::as_str).unwrap_or_default()
}

fn entry_manager(e: &Value) -> Option<String> {
    e.get("manager").and_then(Value::as_str).map(str::to_string)
}

/// The field manager that owns `field` (a path in `fieldsV1`), the latest when several share
/// it; `None` when nobody does (the field is absent: a removal is recorded under no name).
fn manager_of(obj: &Value, field: &[&str]) -> Option<String> {
    managed_fields(obj)
        .filter(|e| {
            field
                .iter()
                .try_fold(e.get("fieldsV1"), |at, key| Some(at?.get(*key)))
                .flatten()
                .is_some()
        })
        .max_by(|a, b| entry_time(a).cmp(entry_time(b)))
        .and_then(entry_manager)
}

/// The field manager that wrote the object first (the earliest entry of the main resource,
/// not a subresource such as `status`): who created a recreated object.
fn creator(obj: &Value) -> Option<String> {
    managed_fields(obj)
        .filter(|e| {
            e.get("subresource")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
        })
        .min_by(|a, b| entry_time(a).cmp(entry_time(b)))
        .and_then(entry_manager)
}

/// Resolves when a member of `check`'s chain no longer holds the pause, naming it. Never
/// resolves while the pause holds.
pub(crate) async fn until_broken(check: &PauseCheck) -> BrokenPause {
    let (client, owner_key, chain) = check.parts();
    if chain.is_empty() {
        return std::future::pending().await;
    }
    let watches = chain
        .iter()
        .map(|t| Box::pin(watch_member(client, owner_key, t)));
    futures::future::select_all(watches).await.0
}

/// One read of every member after the work ended: a change the watch had not delivered yet
/// when the work returned is still found before anything is released. A read that fails is
/// not a broken pause (as in the watch).
pub(crate) async fn recheck(check: &PauseCheck) -> Option<BrokenPause> {
    let (client, owner_key, chain) = check.parts();
    let reads = futures::future::join_all(chain.iter().map(|t| read(client, owner_key, t))).await;
    reads.into_iter().find_map(Result::err)
}

fn broken(t: &ProofTarget, (change, by): (Change, Option<String>)) -> BrokenPause {
    BrokenPause {
        object: Box::new(t.object.clone()),
        change,
        by,
    }
}

/// One read of `t`: `Ok(Some(version))` while it holds, `Err` once broken, `Ok(None)` when
/// the read failed (try again).
async fn read(
    client: &Client,
    owner_key: &str,
    t: &ProofTarget,
) -> Result<Option<String>, BrokenPause> {
    let read = tokio::time::timeout(WATCH_CHECK, get_json(client, &t.object)).await;
    match read {
        Ok(Ok(v)) => match what_broke(&t.member, owner_key, Some(&v)) {
            Some(b) => Err(broken(t, b)),
            None => Ok(v
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string)),
        },
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => Err(broken(t, (Change::Deleted, None))),
        Ok(Err(e)) => {
            tracing::debug!(object = %t.object, error = %e, "pause watch: read failed");
            Ok(None)
        }
        Err(_) => {
            tracing::debug!(object = %t.object, "pause watch: read timed out");
            Ok(None)
        }
    }
}

async fn watch_member(client: &Client, owner_key: &str, t: &ProofTarget) -> BrokenPause {
    let mut can_watch = true;
    loop {
        let from = match read(client, owner_key, t).await {
            Err(b) => return b,
            Ok(v) => v,
        };
        let Some(from) = from.filter(|_| can_watch) else {
            tokio::time::sleep(POLL_WITHOUT_WATCH).await;
            continue;
        };
        let watched = Box::pin(watch_slice(client, owner_key, t, from));
        let ended = tokio::select! {
            w = watched => w,
            b = check_reads(client, owner_key, t) => return b,
        };
        match ended {
            Slice::Broken(b) => return b,
            Slice::Ended => {}
            Slice::Broke => tokio::time::sleep(POLL_WITHOUT_WATCH).await,
            Slice::Refused => can_watch = false,
        }
    }
}

/// Reads `t` every [`WATCH_CHECK`] beside the watch; resolves only when it is broken.
async fn check_reads(client: &Client, owner_key: &str, t: &ProofTarget) -> BrokenPause {
    loop {
        tokio::time::sleep(WATCH_CHECK).await;
        if let Err(b) = read(client, owner_key, t).await {
            tracing::debug!(object = %t.object, "pause broken: seen by a check read, not the watch");
            return b;
        }
    }
}

enum Slice {
    Broken(BrokenPause),
    /// The server closed the watch (its timeout), or it stalled: read and watch again.
    Ended,
    /// The watch failed or broke: wait a little, read and watch again.
    Broke,
    /// The watch is forbidden: poll instead.
    Refused,
}

/// One watch request on `t` from `from`, bounded by [`WATCH_SLICE_SECS`] on the server and
/// a little more on this side (a stalled stream is abandoned, not waited for).
async fn watch_slice(client: &Client, owner_key: &str, t: &ProofTarget, from: String) -> Slice {
    let params = WatchParams::default()
        .fields(&format!("metadata.name={}", t.object.name))
        .timeout(WATCH_SLICE_SECS);
    let bound = Duration::from_secs(u64::from(WATCH_SLICE_SECS) + 2);
    let api = api(client, &t.object);
    let watched = async {
        let stream = match api.watch(&params, &from).await {
            Ok(s) => s,
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 405 => {
                tracing::debug!(object = %t.object, code = s.code, "pause watch refused; polling");
                return Slice::Refused;
            }
            Err(e) => {
                tracing::debug!(object = %t.object, error = %e, "pause watch failed");
                return Slice::Broke;
            }
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let obj = match event {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => o,
                Ok(WatchEvent::Deleted(_)) => {
                    return Slice::Broken(broken(t, (Change::Deleted, None)));
                }
                Ok(WatchEvent::Bookmark(_)) => continue,
                // Too old a version (410) or a broken stream: read and watch again.
                Ok(WatchEvent::Error(_)) => return Slice::Ended,
                Err(e) => {
                    tracing::debug!(object = %t.object, error = %e, "pause watch broke");
                    return Slice::Broke;
                }
            };
            let Ok(v) = serde_json::to_value(&obj) else {
                continue;
            };
            if let Some(b) = what_broke(&t.member, owner_key, Some(&v)) {
                return Slice::Broken(broken(t, b));
            }
        }
        Slice::Ended
    };
    tokio::time::timeout(bound, watched)
        .await
        .unwrap_or(Slice::Ended)
}

#[cfg(test)]
mod tests;
