//! The proof of a replicas gate: its Deployment reports the gate's count for its current
//! generation, and no Pod of any other count or template is left, terminating ones included.
//!
//! Only the Deployment's own Pods count ([`pods_that_count`]): those controlled by a
//! `ReplicaSet` the Deployment controls (`ownerReferences` with `controller: true`, Pod ->
//! `ReplicaSet` -> the Deployment's uid), listed with the field selector
//! `status.phase!=Failed,status.phase!=Succeeded`. An evicted Pod (`Failed`, reason `Evicted`,
//! kept until the terminated-Pod GC threshold) or another workload's Pod with the same labels
//! changes nothing.

use flux_fence::ObjectRef;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::Value;

use super::{Timing, poll};
use crate::error::SuspendError;
use crate::judge::Broken;

/// What one read of a gated Deployment says, decided by [`judge_scaled`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scaled {
    /// At the count: the work may start.
    Done,
    /// Still on its way (the controller has not caught up, or Pods are still terminating).
    Pending { replicas: i64, pods: usize },
    /// The gate no longer holds: no later read can mend it.
    Broken(Broken),
}

/// Pure: `dep` as read, with `pods` of its own Pods left ([`pods_that_count`]: terminating ones
/// counted),
/// against the gate's count `want` and our owner value under `owner_key`.
pub(crate) fn judge_scaled(
    dep: &Value,
    pods: usize,
    want: i32,
    owner_key: &str,
    owner: &str,
    uid: &str,
) -> Scaled {
    let int = |p: &str| dep.pointer(p).and_then(Value::as_i64);
    if dep.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid) {
        return Scaled::Broken(Broken::Recreated);
    }
    if crate::flux::annotation(dep, owner_key) != Some(owner) {
        return Scaled::Broken(Broken::NotOurs);
    }
    if int("/spec/replicas") != Some(i64::from(want)) {
        return Scaled::Broken(Broken::Rescaled);
    }
    let observed =
        int("/status/observedGeneration").unwrap_or(0) >= int("/metadata/generation").unwrap_or(1);
    // Absent counts are zero: a Deployment at 0 drops them from its status.
    let replicas = int("/status/replicas").unwrap_or(0);
    let updated = int("/status/updatedReplicas").unwrap_or(0);
    let want = i64::from(want);
    let pods_left = i64::try_from(pods).unwrap_or(i64::MAX);
    if observed && replicas == want && updated == want && pods_left == want {
        Scaled::Done
    } else {
        Scaled::Pending { replicas, pods }
    }
}

/// The field selector of the Pods that may still run: ended ones never count.
const NOT_ENDED: &str = "status.phase!=Failed,status.phase!=Succeeded";

/// The uid of the controller `ownerReference` of `obj` (its JSON), if any.
fn controller_uid(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?
        .get("uid")?
        .as_str()
}

/// Pure: how many of `pods` (listed by the Deployment's labels) are Deployment `uid`'s, given
/// the `ReplicaSets` `sets` listed by the same labels: a Pod counts when its controller is a
/// `ReplicaSet` whose controller is the Deployment, and it has not ended (`Failed`,
/// `Succeeded`). Terminating Pods count: they may still run.
pub(crate) fn pods_that_count(uid: &str, sets: &[Value], pods: &[Value]) -> usize {
    let owned: Vec<&str> = sets
        .iter()
        .filter(|rs| controller_uid(rs) == Some(uid))
        .filter_map(|rs| rs.pointer("/metadata/uid").and_then(Value::as_str))
        .collect();
    pods.iter()
        .filter(|p| controller_uid(p).is_some_and(|u| owned.contains(&u)))
        .filter(|p| {
            let phase = p.pointer("/status/phase").and_then(Value::as_str);
            !matches!(phase, Some("Failed" | "Succeeded"))
        })
        .count()
}

/// Lists the `ReplicaSets` and the not-ended Pods matching `sel` and counts the Deployment
/// `uid`'s Pods ([`pods_that_count`]).
async fn count_pods(client: &Client, ns: &str, sel: &str, uid: &str) -> kube::Result<usize> {
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    // Independent reads: both at once.
    let (by_labels, not_ended) = (
        ListParams::default().labels(sel),
        ListParams::default().labels(sel).fields(NOT_ENDED),
    );
    // Boxed: two list futures inline would grow every pause future past clippy's bound.
    let (sets, pods) = Box::pin(futures::future::try_join(
        sets.list_metadata(&by_labels),
        pods.list_metadata(&not_ended),
    ))
    .await?;
    let sets: Vec<Value> = sets.items.into_iter().map(to_json).collect();
    let pods: Vec<Value> = pods.items.into_iter().map(to_json).collect();
    Ok(pods_that_count(uid, &sets, &pods))
}

fn to_json<T: serde::Serialize>(v: T) -> Value {
    serde_json::to_value(v).unwrap_or_default()
}

/// `matchLabels` of the Deployment's selector as a label selector; `None` when it has none
/// (a selector of expressions only is not listed: every Pod of the namespace is not an
/// answer).
fn selector(dep: &Value) -> Option<String> {
    let labels = dep.pointer("/spec/selector/matchLabels")?.as_object()?;
    let text: Vec<String> = labels
        .iter()
        .filter_map(|(k, v)| Some(format!("{k}={}", v.as_str()?)))
        .collect();
    (!text.is_empty()).then(|| text.join(","))
}

/// Waits until gated Deployment `obj` is scaled to `want` (its status for the current
/// generation at `want`, and `want` of its own Pods left: `pods_that_count`), reading it
/// and listing its `ReplicaSets` and Pods once per interval.
///
/// # Errors
/// [`SuspendError::ScaleTimeout`] with the last counts; [`SuspendError::BrokenDuringProof`] as
/// soon as a read shows the gate broken; [`SuspendError::Invalid`] for a Deployment whose
/// selector has no `matchLabels`.
pub async fn wait_scaled(
    client: &Client,
    obj: &ObjectRef,
    want: i32,
    owner_key: &str,
    owner: &str,
    uid: &str,
    timing: Timing,
) -> Result<(), SuspendError> {
    let last = std::sync::Mutex::new((0, 0));
    let done = poll(timing, || async {
        let dep = match crate::object::get_json(client, obj).await {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(object = %obj, error = %e, "gate read failed");
                return None;
            }
        };
        let Some(sel) = selector(&dep) else {
            return Some(Err(SuspendError::Invalid {
                step: "scaling the gate",
                detail: format!("{obj}: its selector has no matchLabels to find its Pods by"),
            }));
        };
        let count = match count_pods(client, &obj.namespace, &sel, uid).await {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(object = %obj, error = %e, "gate Pod list failed");
                return None;
            }
        };
        match judge_scaled(&dep, count, want, owner_key, owner, uid) {
            Scaled::Done => Some(Ok(())),
            Scaled::Broken(why) => Some(Err(SuspendError::BrokenDuringProof {
                object: Box::new(obj.clone()),
                why,
            })),
            Scaled::Pending { replicas, pods } => {
                *super::lock(&last) = (replicas, pods);
                None
            }
        }
    })
    .await;
    let (replicas, pods) = *super::lock(&last);
    done.unwrap_or(Err(SuspendError::ScaleTimeout {
        object: Box::new(obj.clone()),
        waited: timing.timeout,
        want,
        replicas,
        pods,
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn dep(spec: i64, generation: i64, observed: i64, replicas: i64, updated: i64) -> Value {
        json!({
            "metadata": { "uid": "u1", "generation": generation,
                          "annotations": { "k/owner": "me" } },
            "spec": { "replicas": spec },
            "status": { "observedGeneration": observed, "replicas": replicas,
                        "updatedReplicas": updated },
        })
    }

    #[test]
    fn replicas_gate_is_scaled_only_at_the_count_with_no_other_pod_left() {
        let judge = |d: &Value, pods| judge_scaled(d, pods, 0, "k/owner", "me", "u1");
        // Scaled to 0, observed, and the last Pod gone.
        assert_eq!(judge(&dep(0, 2, 2, 0, 0), 0), Scaled::Done);
        // A Pod still terminating is not gone.
        assert_eq!(
            judge(&dep(0, 2, 2, 0, 0), 1),
            Scaled::Pending {
                replicas: 0,
                pods: 1
            }
        );
        // The controller has not seen the new generation yet.
        assert_eq!(
            judge(&dep(0, 2, 1, 0, 0), 0),
            Scaled::Pending {
                replicas: 0,
                pods: 0
            }
        );
        // Status still reports the old count.
        assert_eq!(
            judge(&dep(0, 2, 2, 3, 0), 0),
            Scaled::Pending {
                replicas: 3,
                pods: 0
            }
        );
        // A status without counts (a Deployment at 0) reads as zero.
        let mut bare = dep(0, 2, 2, 0, 0);
        bare["status"] = json!({ "observedGeneration": 2 });
        assert_eq!(judge(&bare, 0), Scaled::Done);
        // Someone scaled it: broken, not pending.
        assert_eq!(
            judge(&dep(2, 3, 3, 2, 2), 2),
            Scaled::Broken(Broken::Rescaled)
        );
        // Not ours any more, or recreated.
        let mut other = dep(0, 2, 2, 0, 0);
        other["metadata"]["annotations"]["k/owner"] = json!("someone");
        assert_eq!(judge(&other, 0), Scaled::Broken(Broken::NotOurs));
        let mut recreated = dep(0, 2, 2, 0, 0);
        recreated["metadata"]["uid"] = json!("u2");
        assert_eq!(judge(&recreated, 0), Scaled::Broken(Broken::Recreated));
        // A count above zero: every Pod of the current template, and no other.
        let up = |pods| judge_scaled(&dep(2, 4, 4, 2, 2), pods, 2, "k/owner", "me", "u1");
        assert_eq!(up(2), Scaled::Done);
        assert_eq!(
            up(3),
            Scaled::Pending {
                replicas: 2,
                pods: 3
            }
        );
        let rolling = judge_scaled(&dep(2, 4, 4, 2, 1), 2, 2, "k/owner", "me", "u1");
        assert_eq!(
            rolling,
            Scaled::Pending {
                replicas: 2,
                pods: 2
            }
        );
    }

    fn owned(uid: &str, owner: &str) -> Value {
        json!({ "metadata": { "uid": uid, "ownerReferences": [
            { "apiVersion": "apps/v1", "kind": "X", "name": "x", "uid": owner, "controller": true },
        ] } })
    }

    #[test]
    fn gate_pods_only_the_deployments_replicasets_pods_that_have_not_ended_count() {
        let sets = [
            owned("rs1", "dep"),
            owned("rs2", "dep"),
            owned("rs3", "other"),
        ];
        let pod = |owner: &str| owned("p", owner);
        let with_phase = |owner: &str, phase: &str| {
            let mut p = pod(owner);
            p["status"] = json!({ "phase": phase, "reason": "Evicted" });
            p
        };
        let not_controller = json!({ "metadata": { "ownerReferences": [
            { "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "rs1" },
        ] } });
        let table: Vec<(Vec<Value>, usize)> = vec![
            (vec![], 0),
            (vec![pod("rs1"), pod("rs2")], 2),
            // A neighbour with the same labels: no owner, or another Deployment's `ReplicaSet`.
            (vec![json!({ "metadata": {} }), pod("rs3")], 0),
            // An owner that is a `ReplicaSet` not listed, or not the controller.
            (vec![pod("rs9"), not_controller], 0),
            // Ended Pods, e.g. evicted: never counted.
            (
                vec![with_phase("rs1", "Failed"), with_phase("rs1", "Succeeded")],
                0,
            ),
            // Terminating or running Pods of its own count.
            (vec![with_phase("rs1", "Running"), pod("rs1")], 2),
        ];
        for (pods, want) in table {
            assert_eq!(pods_that_count("dep", &sets, &pods), want, "{pods:?}");
        }
        // A `ReplicaSet` that is not the Deployment's makes its Pods none of the Deployment's.
        assert_eq!(pods_that_count("dep", &[], &[pod("rs1")]), 0);
    }

    #[test]
    fn replicas_gate_pods_are_found_by_match_labels_only() {
        let d = json!({ "spec": { "selector": { "matchLabels": { "app": "ca", "tier": "x" } } } });
        assert_eq!(selector(&d).as_deref(), Some("app=ca,tier=x"));
        let exprs = json!({ "spec": { "selector": { "matchExpressions": [] } } });
        assert_eq!(selector(&exprs), None);
        assert_eq!(
            selector(&json!({ "spec": { "selector": { "matchLabels": {} } } })),
            None
        );
    }
}
