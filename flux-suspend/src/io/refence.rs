//! After a controller restart: put back marks a pre-restart parent execution reverted.
//!
//! The write is a JSON Patch that `test`s the uid, the resourceVersion just read and our owner
//! annotation, sent only after the Lease was asserted; a lost race re-reads and decides again.
//! (The fresh nonce that follows it is [`flux_fence::Fencer::remark`].)

use flux_fence::mark::Restore;
use flux_fence::{FenceGuard, LeaseHandle};
use kube::Client;
use kube::api::Patch;
use serde_json::{Value, json};

use crate::error::SuspendError;
use crate::flux::annotation;
use crate::object;

/// Read-decide-write rounds of one re-fence before it reports contention (a
/// controller writing status moves the resourceVersion between our read and our patch).
const ROUNDS: usize = 8;

/// Puts back every exact mark of `guard` that the object no longer holds (a pre-restart parent
/// execution re-applied the target's Git state), with a CAS on the read object that also tests
/// it is still ours. Does nothing when nothing was reverted or the object is not ours any more
/// (the proof then says so).
///
/// # Errors
/// [`SuspendError::Fence`] with [`flux_fence::FenceError::LeaseLost`] when `lease` is lost (nothing is
/// written); API failures; [`SuspendError::Invalid`] after 8 lost races.
pub async fn refence(
    client: &Client,
    guard: &FenceGuard,
    owner_key: &str,
    lease: Option<&LeaseHandle>,
) -> Result<(), SuspendError> {
    cas_loop(client, guard, owner_key, lease, "re-fencing a reverted object", |obj| {
        let reverted: Vec<Value> = guard
            .held()
            .marks
            .iter()
            .filter(|m| {
                m.restore == Restore::Exact && obj.pointer(&m.at.pointer()) != Some(&m.value)
            })
            .map(|m| json!({ "op": "add", "path": m.at.pointer(), "value": m.value }))
            .collect();
        if !reverted.is_empty() {
            tracing::warn!(object = %guard.object(), "a mark was reverted before the restart; re-fencing");
        }
        reverted
    })
    .await
}

/// Reads the object; when it is still ours, sends `ops(read)` (if any) behind `test`s of uid,
/// resourceVersion and owner, asserting the Lease first. 409/422 re-read and try again.
async fn cas_loop(
    client: &Client,
    guard: &FenceGuard,
    owner_key: &str,
    lease: Option<&LeaseHandle>,
    step: &'static str,
    ops: impl Fn(&Value) -> Vec<Value>,
) -> Result<(), SuspendError> {
    let owner = guard.owner().to_string();
    for _ in 0..ROUNDS {
        let obj = object::get_json(client, guard.object())
            .await
            .map_err(SuspendError::kube(step))?;
        let Some(patch) = guarded_patch(&obj, guard.uid(), owner_key, &owner, ops(&obj)) else {
            return Ok(());
        };
        if let Some(lease) = lease {
            lease
                .assert()
                .await
                .map_err(|source| SuspendError::Fence { step, source })?;
        }
        let sent = object::api(client, guard.object())
            .patch(
                &guard.object().name,
                &flux_fence::api::patch_params(),
                &Patch::Json::<()>(patch),
            )
            .await;
        match sent {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
                tracing::debug!(object = %guard.object(), step, "object moved; re-reading");
            }
            Err(source) => return Err(SuspendError::Kube { step, source }),
        }
    }
    Err(SuspendError::Invalid {
        step,
        detail: format!("{} changed on every attempt", guard.object()),
    })
}

/// The JSON Patch applying `ops` to `obj` only while it is exactly what was read and ours:
/// `None` when there is nothing to write or the object is not ours (another uid or owner).
fn guarded_patch(
    obj: &Value,
    uid: &str,
    owner_key: &str,
    owner: &str,
    ops: Vec<Value>,
) -> Option<json_patch::Patch> {
    if ops.is_empty()
        || obj.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid)
        || annotation(obj, owner_key) != Some(owner)
    {
        return None;
    }
    let mut all = vec![
        json!({ "op": "test", "path": "/metadata/uid", "value": uid }),
        json!({ "op": "test", "path": "/metadata/resourceVersion",
                "value": obj.pointer("/metadata/resourceVersion") }),
        json!({ "op": "test", "path": flux_fence::pointer::annotation(owner_key), "value": owner }),
    ];
    all.extend(ops);
    serde_json::from_value(Value::Array(all)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(uid: &str, owner: Option<&str>) -> Value {
        let mut annotations = serde_json::Map::new();
        if let Some(o) = owner {
            annotations.insert("flux-handoff.io/owner".into(), json!(o));
        }
        json!({ "metadata": { "uid": uid, "resourceVersion": "7", "annotations": annotations } })
    }

    #[test]
    fn guarded_patch_tests_uid_version_and_owner_before_the_ops() {
        let p = guarded_patch(
            &obj("u1", Some("h;1")),
            "u1",
            "flux-handoff.io/owner",
            "h;1",
            vec![json!({ "op": "add", "path": "/metadata/annotations/reconcile.fluxcd.io~1requestedAt", "value": "n1" })],
        )
        .unwrap();
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v[0],
            json!({ "op": "test", "path": "/metadata/uid", "value": "u1" })
        );
        assert_eq!(v[1]["value"], json!("7"));
        assert_eq!(
            v[2],
            json!({ "op": "test", "path": "/metadata/annotations/flux-handoff.io~1owner",
                    "value": "h;1" })
        );
        assert_eq!(
            v[3],
            json!({ "op": "add",
                    "path": "/metadata/annotations/reconcile.fluxcd.io~1requestedAt",
                    "value": "n1" })
        );
    }

    #[test]
    fn nothing_is_written_to_an_object_that_is_not_ours_or_when_there_is_nothing_to_do() {
        let key = "flux-handoff.io/owner";
        let cases = [
            (
                obj("u2", Some("h;1")),
                vec![json!({ "op": "add", "path": "/x", "value": 1 })],
                "recreated",
            ),
            (
                obj("u1", Some("other;2")),
                vec![json!({ "op": "add", "path": "/x", "value": 1 })],
                "another owner",
            ),
            (
                obj("u1", None),
                vec![json!({ "op": "add", "path": "/x", "value": 1 })],
                "released",
            ),
            (obj("u1", Some("h;1")), vec![], "no op"),
        ];
        for (o, ops, why) in cases {
            assert!(guarded_patch(&o, "u1", key, "h;1", ops).is_none(), "{why}");
        }
    }
}
