//! Settling a fence write that was abandoned in flight (a session stopped while its patch hung).
//!
//! One re-read cannot tell "not applied" from "not applied *yet*": the abandoned request may
//! still reach the server after the read, and its own `test` of the resourceVersion would then
//! pass. So before concluding it did not apply, the object is moved on with a write of our own
//! (a CAS adding a transient annotation, then a CAS removing it): from then on the abandoned
//! request's precondition fails whenever it arrives, and what the object shows is final.
//!
//! [`decide_settle`] is the pure decision; [`Fencer::settle_unheld`] the thin I/O loop.

use kube::api::Patch;
use serde_json::{Value, json};

use crate::api::MAX_ATTEMPTS;
use crate::api::{CallFailure, classify, error};
use crate::decide::annotation;
use crate::{AnnotationKeys, FenceError, FenceGuard, Fencer, ObjectRef, OwnerValue};

/// The annotation a settlement writes and removes again: `<prefix>/settling`, value our
/// owner. It lives between two writes of the same cleanup; one left behind (a cleanup cut
/// short) is ours to remove and means nothing else.
#[must_use]
pub fn settling_key(keys: &AnnotationKeys) -> String {
    let prefix = keys.owner.rsplit_once('/').map_or("", |(p, _)| p);
    format!("{prefix}/settling")
}

/// The answer of [`decide_settle`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SettleDecision {
    /// The object is gone: a write testing its uid can never apply.
    Gone,
    /// Our fence is on it: the write applied; adopt and release it.
    Ours,
    /// Another owner's fence is on it: the object moved since any read our acquire decided
    /// on (it only patches an object without another owner), so our write cannot apply.
    OtherOwner,
    /// Not fenced: move the resourceVersion on with this patch (test uid and
    /// resourceVersion, add our settling annotation), then decide again on the answer.
    Bump(Value),
    /// Our settling annotation is on it: the resourceVersion already moved past any
    /// abandoned write; remove it with this patch (test uid and resourceVersion) and stop.
    Unmark(Value),
}

/// Decides one round of a settlement on the object as read (`None`: not found).
#[must_use]
pub fn decide_settle(
    read: Option<&Value>,
    keys: &AnnotationKeys,
    owner: &OwnerValue,
) -> SettleDecision {
    let Some(obj) = read else {
        return SettleDecision::Gone;
    };
    let ours = owner.to_string();
    let key = settling_key(keys);
    let uid = obj.pointer("/metadata/uid").cloned().unwrap_or(Value::Null);
    let rv = obj
        .pointer("/metadata/resourceVersion")
        .cloned()
        .unwrap_or(Value::Null);
    let tests = [
        json!({ "op": "test", "path": "/metadata/uid", "value": uid }),
        json!({ "op": "test", "path": "/metadata/resourceVersion", "value": rv }),
    ];
    match annotation(obj, &keys.owner) {
        Some(o) if o == ours => return SettleDecision::Ours,
        Some(_) => return SettleDecision::OtherOwner,
        None => {}
    }
    let path = crate::pointer::annotation(&key);
    if annotation(obj, &key) == Some(ours.as_str()) {
        let mut ops = tests.to_vec();
        ops.push(json!({ "op": "remove", "path": path }));
        return SettleDecision::Unmark(Value::Array(ops));
    }
    let mut ops = tests.to_vec();
    if obj
        .pointer(crate::pointer::ANNOTATIONS)
        .is_none_or(Value::is_null)
    {
        ops.push(json!({ "op": "add", "path": crate::pointer::ANNOTATIONS, "value": {} }));
    }
    ops.push(json!({ "op": "add", "path": path, "value": ours }));
    SettleDecision::Bump(Value::Array(ops))
}

impl Fencer {
    /// Settles a member whose fence write may have been abandoned in flight: `Some(guard)`
    /// when our fence is on it (release it), `None` when our write provably never applies.
    ///
    /// # Guarantees
    /// `None` is returned only after the object was seen gone, fenced by another owner, or
    /// moved on by a CAS write of ours (so an abandoned request testing an older
    /// resourceVersion fails whenever it arrives); the settling annotation that write added is
    /// removed again (a CAS), leaving the object's content as it was. Does not assert the
    /// Lease: cleanup after a lost Lease settles too.
    ///
    /// # Errors
    /// A failed read or write; [`FenceError::Contended`] when the object moved on every round.
    pub async fn settle_unheld(&self, obj: &ObjectRef) -> Result<Option<FenceGuard>, FenceError> {
        let mut known: Option<Option<Value>> = None;
        for _ in 0..MAX_ATTEMPTS * 2 {
            let read = match known.take() {
                Some(k) => k,
                None => self.read(obj).await?,
            };
            let (patch, removing) = match decide_settle(read.as_ref(), self.keys(), self.owner()) {
                SettleDecision::Gone | SettleDecision::OtherOwner => return Ok(None),
                SettleDecision::Ours => return self.adopt_recorded(obj, self.owner()).await,
                SettleDecision::Bump(p) => (p, false),
                SettleDecision::Unmark(p) => (p, true),
            };
            let patch: json_patch::Patch =
                serde_json::from_value(patch).map_err(|source| FenceError::Json {
                    what: "settle patch",
                    source,
                })?;
            let sent = self
                .api(obj)
                .patch(
                    &obj.name,
                    &crate::api::patch_params(),
                    &Patch::Json::<()>(patch),
                )
                .await;
            match sent {
                Ok(_) if removing => {
                    tracing::info!(object = %obj, owner = %self.owner(), "abandoned write settled: it cannot apply");
                    return Ok(None);
                }
                Ok(written) => {
                    let v = serde_json::to_value(written).map_err(|source| FenceError::Json {
                        what: "object",
                        source,
                    })?;
                    known = Some(Some(v));
                }
                Err(e) => match classify(&e) {
                    // Moved (perhaps by the abandoned write itself), or the answer was lost:
                    // read and decide again.
                    CallFailure::Conflict | CallFailure::Invalid | CallFailure::Unknown => {}
                    CallFailure::NotFound => return Ok(None),
                    _ => return Err(error("patch", obj.resource_name(), obj.target(), e)),
                },
            }
        }
        Err(FenceError::Contended {
            what: "settling an abandoned fence write",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(annotations: Option<Value>) -> Value {
        let mut o = json!({ "metadata": { "uid": "u1", "resourceVersion": "7" } });
        if let Some(a) = annotations {
            o["metadata"]["annotations"] = a;
        }
        o
    }

    #[test]
    fn late_write_settlement_moves_an_unfenced_object_on_before_concluding() {
        let keys = AnnotationKeys::default();
        let owner: OwnerValue = "h-1;3".parse().unwrap();
        assert_eq!(settling_key(&keys), "flux-handoff.io/settling");
        let tests = |rv: &str| {
            vec![
                json!({ "op": "test", "path": "/metadata/uid", "value": "u1" }),
                json!({ "op": "test", "path": "/metadata/resourceVersion", "value": rv }),
            ]
        };
        let mark = "/metadata/annotations/flux-handoff.io~1settling";
        let mut bump_empty = tests("7");
        bump_empty.push(json!({ "op": "add", "path": "/metadata/annotations", "value": {} }));
        bump_empty.push(json!({ "op": "add", "path": mark, "value": "h-1;3" }));
        let mut bump = tests("7");
        bump.push(json!({ "op": "add", "path": mark, "value": "h-1;3" }));
        let mut unmark = tests("7");
        unmark.push(json!({ "op": "remove", "path": mark }));
        let table = [
            (None, SettleDecision::Gone),
            (
                Some(obj(None)),
                SettleDecision::Bump(Value::Array(bump_empty)),
            ),
            (
                Some(obj(Some(json!({ "a": "b" })))),
                SettleDecision::Bump(Value::Array(bump)),
            ),
            (
                Some(obj(Some(json!({ "flux-handoff.io/owner": "h-1;3" })))),
                SettleDecision::Ours,
            ),
            (
                Some(obj(Some(json!({ "flux-handoff.io/owner": "other;9" })))),
                SettleDecision::OtherOwner,
            ),
            (
                Some(obj(Some(json!({ "flux-handoff.io/settling": "h-1;3" })))),
                SettleDecision::Unmark(Value::Array(unmark)),
            ),
        ];
        for (read, want) in table {
            assert_eq!(
                decide_settle(read.as_ref(), &keys, &owner),
                want,
                "{read:?}"
            );
        }
    }
}
