use serde_json::{Value, json};

use super::*;

const OWNER: &str = "flux-handoff.io/owner";

/// A released gate's Deployment: `spec` replicas at `generation`, its status for `observed`.
fn dep(spec: i64, generation: i64, observed: i64, updated: i64, available: i64) -> Value {
    json!({
        "metadata": { "uid": "u1", "generation": generation },
        "spec": { "replicas": spec },
        "status": { "observedGeneration": observed, "replicas": updated,
                    "updatedReplicas": updated, "availableReplicas": available },
    })
}

#[test]
fn gate_watch_a_released_gate_is_ready_when_available_again_at_its_count() {
    let not = |w: &str| Available::Not(w.to_string());
    let table: Vec<(&str, Option<Value>, Available)> = vec![
        (
            "back at 2, all available",
            Some(dep(2, 4, 4, 2, 2)),
            Available::Yes,
        ),
        (
            "the controller has not seen the restored count",
            Some(dep(2, 4, 3, 0, 0)),
            not("0 of 2 replica(s) available, 0 updated; its status is for generation 3, not 4"),
        ),
        (
            "Pods created, not available yet",
            Some(dep(2, 4, 4, 2, 1)),
            not("1 of 2 replica(s) available, 2 updated"),
        ),
        (
            "available, but old Pods (not updated) count",
            Some(dep(2, 4, 4, 1, 2)),
            not("2 of 2 replica(s) available, 1 updated"),
        ),
        (
            "a status without counts (a fresh scale up) reads as zero",
            Some(json!({ "metadata": { "uid": "u1", "generation": 4 },
                         "spec": { "replicas": 2 }, "status": { "observedGeneration": 4 } })),
            not("0 of 2 replica(s) available, 0 updated"),
        ),
        (
            "given back at 0: nothing to wait for",
            Some(dep(0, 4, 4, 0, 0)),
            Available::Yes,
        ),
        ("gone", None, Available::Skip("gone")),
        (
            "recreated",
            Some(json!({ "metadata": { "uid": "u2" } })),
            Available::Skip("recreated"),
        ),
        (
            "fenced by another run since",
            Some({
                let mut d = dep(0, 5, 5, 0, 0);
                d["metadata"]["annotations"] = json!({ OWNER: "other;1" });
                d
            }),
            Available::Skip("fenced by another run since the release"),
        ),
    ];
    for (name, read, want) in table {
        assert_eq!(gate_available(read.as_ref(), "u1", OWNER), want, "{name}");
    }
}

#[test]
fn gate_watch_both_waits_end_as_the_worse_of_the_two() {
    let d = |n: &str| crate::object::deployment("ns", n);
    let k = |n: &str| crate::object::kustomization("ns", n);
    let nr = |o| NotReady {
        object: o,
        last: "x".into(),
    };
    assert_eq!(both(ReadyWait::Ready, ReadyWait::Ready), ReadyWait::Ready);
    assert_eq!(
        both(ReadyWait::Ready, ReadyWait::NotReady(vec![nr(d("ca"))])),
        ReadyWait::NotReady(vec![nr(d("ca"))])
    );
    assert_eq!(
        both(
            ReadyWait::NotReady(vec![nr(k("apps"))]),
            ReadyWait::NotReady(vec![nr(d("ca"))])
        ),
        ReadyWait::NotReady(vec![nr(k("apps")), nr(d("ca"))])
    );
    assert_eq!(
        both(ReadyWait::NotReady(vec![nr(k("apps"))]), ReadyWait::Ready),
        ReadyWait::NotReady(vec![nr(k("apps"))])
    );
    assert_eq!(
        both(
            ReadyWait::Stopped(vec![k("apps")]),
            ReadyWait::NotReady(vec![nr(d("ca"))])
        ),
        ReadyWait::Stopped(vec![k("apps"), d("ca")])
    );
}
