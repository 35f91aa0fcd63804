//! After a release with `--wait-ready`: request a reconcile of the released object, as a CAS
//! on the object as read, and wait until it is Ready for its generation with that request
//! handled.

use flux_fence::ObjectRef;
use kube::Client;
use kube::api::Patch;
use serde_json::json;

use super::{new_nonce, resource_version};
use crate::error::SuspendError;
use crate::flux::REQUESTED_AT_ANNOTATION;
use crate::io::{self, Timing};
use crate::object;
use crate::readiness::{Readiness, readiness};

/// How often a reconcile request after resume is sent again when the object moved.
const REQUEST_ATTEMPTS: usize = 5;

/// Whether to request a reconcile of a released object as read now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReconcileRequest {
    /// Send it, on this resourceVersion.
    Send { resource_version: String },
    /// Do not: the object is gone, was recreated, or another run fenced it since.
    Skip(&'static str),
}

/// Decides the reconcile request after our release of the object of `uid`, on the object as
/// read now (`None`: gone). Any owner annotation is another run's: ours was just removed.
pub(crate) fn decide_reconcile_request(
    read: Option<&serde_json::Value>,
    uid: &str,
    owner_key: &str,
) -> ReconcileRequest {
    let Some(v) = read else {
        return ReconcileRequest::Skip("gone");
    };
    if v.pointer("/metadata/uid")
        .and_then(serde_json::Value::as_str)
        != Some(uid)
    {
        return ReconcileRequest::Skip("recreated");
    }
    let fenced = v
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(owner_key))
        .is_some();
    if fenced {
        return ReconcileRequest::Skip("fenced by another run since the release");
    }
    match resource_version(v) {
        Some(resource_version) => ReconcileRequest::Send { resource_version },
        None => ReconcileRequest::Skip("no resourceVersion"),
    }
}

/// Requests a reconcile of a released object and waits until it is Ready for its current
/// generation with that request handled. The request is a CAS on the object as read just
/// before it ([`decide_reconcile_request`]): an object another run fenced since our release
/// keeps its own `requestedAt` (that run's mark), and is not waited for.
pub(super) async fn wait_ready_after_resume(
    client: &Client,
    obj: &ObjectRef,
    uid: &str,
    owner_key: &str,
    timing: Timing,
) -> Result<(), SuspendError> {
    let nonce = new_nonce();
    let api = object::api(client, obj);
    let mut sent = false;
    for _ in 0..REQUEST_ATTEMPTS {
        let read = api
            .get_opt(&obj.name)
            .await
            .and_then(|o| {
                o.map(serde_json::to_value)
                    .transpose()
                    .map_err(kube::Error::SerdeError)
            })
            .map_err(SuspendError::kube("reading before a reconcile request"))?;
        let version = match decide_reconcile_request(read.as_ref(), uid, owner_key) {
            ReconcileRequest::Send { resource_version } => resource_version,
            ReconcileRequest::Skip(why) => {
                tracing::info!(object = %obj, why, "no reconcile requested after resume");
                return Ok(());
            }
        };
        let patch = json!({ "metadata": {
            "uid": uid,
            "resourceVersion": version,
            "annotations": { REQUESTED_AT_ANNOTATION: nonce },
        } });
        match api
            .patch(
                &obj.name,
                &flux_fence::api::patch_params(),
                &Patch::Merge(patch),
            )
            .await
        {
            Ok(_) => {
                sent = true;
                break;
            }
            // Moved since the read (the controller's status, or another writer): decide again.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(SuspendError::kube("requesting a reconcile after resume")(e)),
        }
    }
    if !sent {
        return Err(SuspendError::Invalid {
            step: "requesting a reconcile after resume",
            detail: format!("{obj} moved on each of {REQUEST_ATTEMPTS} attempts"),
        });
    }
    let last = std::sync::Mutex::new(Readiness::Pending);
    let ready = io::poll_soon(timing, || async {
        let v = object::get_json(client, obj).await.ok()?;
        let r = readiness(&v, Some(&nonce));
        let done = r == Readiness::Ready;
        *last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = r;
        done.then_some(())
    })
    .await;
    match ready {
        Some(()) => Ok(()),
        None => Err(SuspendError::Invalid {
            step: "waiting for Ready after resume",
            detail: format!(
                "{obj} not Ready within {}s ({:?})",
                timing.timeout.as_secs(),
                last.into_inner()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const OWNER: &str = "flux-handoff.io/owner";

    fn obj(uid: &str, rv: Option<&str>, owner: Option<&str>) -> Value {
        let mut v = json!({ "metadata": { "uid": uid, "annotations": {} } });
        if let Some(rv) = rv {
            v["metadata"]["resourceVersion"] = json!(rv);
        }
        if let Some(o) = owner {
            v["metadata"]["annotations"][OWNER] = json!(o);
        }
        v
    }

    #[test]
    fn a_reconcile_request_is_sent_only_on_the_released_object_as_read() {
        let send = |rv: &str| ReconcileRequest::Send {
            resource_version: rv.into(),
        };
        let table: Vec<(Option<Value>, ReconcileRequest)> = vec![
            (Some(obj("u1", Some("7"), None)), send("7")),
            (None, ReconcileRequest::Skip("gone")),
            (
                Some(obj("u2", Some("7"), None)),
                ReconcileRequest::Skip("recreated"),
            ),
            // Another run fenced it since our release: its requestedAt is its mark.
            (
                Some(obj("u1", Some("8"), Some("gh2.1-b;1"))),
                ReconcileRequest::Skip("fenced by another run since the release"),
            ),
            (
                Some(obj("u1", None, None)),
                ReconcileRequest::Skip("no resourceVersion"),
            ),
        ];
        for (i, (read, want)) in table.into_iter().enumerate() {
            assert_eq!(
                decide_reconcile_request(read.as_ref(), "u1", OWNER),
                want,
                "row {i}"
            );
        }
    }
}
