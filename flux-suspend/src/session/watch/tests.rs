use serde_json::{Value, json};

use super::{Change, what_broke};
use crate::judge::{Member, Role};

const KEY: &str = "flux-handoff.io/owner";
const OURS: &str = "h-1;3";
const RD: &str = "kustomize.toolkit.fluxcd.io/reconcile";

fn member(needs_rd: bool) -> Member {
    Member {
        role: Role::Target,
        uid: "u1".into(),
        owner: OURS.into(),
        needs_reconcile_disabled: needs_rd,
        replicas: None,
    }
}

#[allow(clippy::needless_pass_by_value)] // built inline at each call
fn entry(manager: &str, time: &str, fields: Value) -> Value {
    json!({"manager": manager, "operation": "Update", "time": time, "fieldsV1": fields})
}

/// A fenced object as the server holds it after our fence: we manage the owner annotation,
/// `reconcile: disabled` and `spec.suspend`.
fn fenced() -> Value {
    json!({
        "metadata": {
            "uid": "u1",
            "resourceVersion": "7",
            "annotations": { KEY: OURS, RD: "disabled" },
            "managedFields": [
                entry("kubectl-client-side-apply", "2026-12-01T10:00:00Z",
                    json!({"f:spec": {"f:interval": {}, "f:path": {}}})),
                entry("flux-handoff", "2026-12-01T11:00:00Z", json!({
                    "f:metadata": {"f:annotations": {(format!("f:{KEY}")): {}, (format!("f:{RD}")): {}}},
                    "f:spec": {"f:suspend": {}},
                })),
            ],
        },
        "spec": { "suspend": true, "interval": "10m" },
    })
}

fn with(mut v: Value, f: impl FnOnce(&mut Value)) -> Value {
    f(&mut v);
    v
}

/// The entry a person's patch leaves (a kubectl-like patch under its own field manager).
fn push_entry(v: &mut Value, e: Value) {
    v.pointer_mut("/metadata/managedFields")
        .and_then(Value::as_array_mut)
        .unwrap()
        .push(e);
}

/// Drops a field from our own entry: the server moves it to the manager that changed it.
fn drop_ours(v: &mut Value, pointer: &str, field: &str) {
    let ours = v
        .pointer_mut("/metadata/managedFields/1/fieldsV1")
        .and_then(|f| f.pointer_mut(pointer))
        .and_then(Value::as_object_mut)
        .unwrap();
    ours.remove(field);
}

/// What [`what_broke`] must answer: the change and the field manager named.
type Want = Option<(Change, Option<&'static str>)>;

#[test]
#[allow(clippy::too_many_lines)] // a table of cases
fn pause_broken_what_broke_it_and_who_did() {
    let owner_field = format!("f:{KEY}");
    let cases: Vec<(&str, Member, Option<Value>, Want)> = vec![
        ("still ours", member(true), Some(fenced()), None),
        (
            "a status write does not break it",
            member(true),
            Some(with(fenced(), |v| {
                v["metadata"]["resourceVersion"] = json!("9");
                v["status"] = json!({"conditions": []});
                push_entry(
                    v,
                    json!({"manager": "kustomize-controller", "operation": "Update",
                    "subresource": "status", "time": "2026-12-01T12:00:00Z",
                    "fieldsV1": {"f:status": {}}}),
                );
            })),
            None,
        ),
        ("gone", member(true), None, Some((Change::Deleted, None))),
        (
            // A removal is recorded under nobody's name: the server tracks set fields only.
            "fence removed",
            member(true),
            Some(with(fenced(), |v| {
                v["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove(KEY);
                drop_ours(v, "/f:metadata/f:annotations", &owner_field);
            })),
            Some((Change::FenceRemoved, None)),
        ),
        (
            "owner changed by another manager",
            member(true),
            Some(with(fenced(), |v| {
                v["metadata"]["annotations"][KEY] = json!("other;1");
                drop_ours(v, "/f:metadata/f:annotations", &owner_field);
                push_entry(
                    v,
                    entry(
                        "kubectl-annotate",
                        "2026-12-01T12:00:00Z",
                        json!({"f:metadata": {"f:annotations": {(owner_field.clone()): {}}}}),
                    ),
                );
            })),
            Some((
                Change::OwnerChanged {
                    to: "other;1".into(),
                },
                Some("kubectl-annotate"),
            )),
        ),
        (
            "suspend flipped by a person",
            member(true),
            Some(with(fenced(), |v| {
                v["spec"]["suspend"] = json!(false);
                drop_ours(v, "/f:spec", "f:suspend");
                push_entry(
                    v,
                    entry(
                        "kubectl-patch",
                        "2026-12-01T12:00:00Z",
                        json!({"f:spec": {"f:suspend": {}}}),
                    ),
                );
            })),
            Some((Change::Unsuspended, Some("kubectl-patch"))),
        ),
        (
            "suspend removed: nobody recorded",
            member(true),
            Some(with(fenced(), |v| {
                v["spec"].as_object_mut().unwrap().remove("suspend");
                drop_ours(v, "/f:spec", "f:suspend");
            })),
            Some((Change::Unsuspended, None)),
        ),
        (
            "shared ownership names the latest manager",
            member(true),
            Some(with(fenced(), |v| {
                v["spec"]["suspend"] = json!(false);
                push_entry(
                    v,
                    entry(
                        "early",
                        "2026-12-01T11:30:00Z",
                        json!({"f:spec": {"f:suspend": {}}}),
                    ),
                );
                push_entry(
                    v,
                    entry(
                        "late",
                        "2026-12-01T12:30:00Z",
                        json!({"f:spec": {"f:suspend": {}}}),
                    ),
                );
            })),
            Some((Change::Unsuspended, Some("late"))),
        ),
        (
            "recreated: its creator is named",
            member(true),
            Some(json!({
                "metadata": {"uid": "u2", "managedFields": [
                    entry("kustomize-controller", "2026-12-01T12:00:05Z", json!({"f:metadata": {"f:finalizers": {}}})),
                    entry("kubectl-create", "2026-12-01T12:00:00Z", json!({"f:spec": {}})),
                ]},
                "spec": {"suspend": false},
            })),
            Some((Change::Recreated, Some("kubectl-create"))),
        ),
        (
            "being deleted",
            member(true),
            Some(with(fenced(), |v| {
                v["metadata"]["deletionTimestamp"] = json!("2026-12-01T12:00:00Z");
            })),
            Some((Change::Deleting, None)),
        ),
        (
            "reconcile: disabled removed from a target",
            member(true),
            Some(with(fenced(), |v| {
                v["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove(RD);
                drop_ours(v, "/f:metadata/f:annotations", &format!("f:{RD}"));
            })),
            Some((Change::ReconcileEnabled, None)),
        ),
        (
            "a parent needs no reconcile: disabled",
            member(false),
            Some(with(fenced(), |v| {
                v["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove(RD);
            })),
            None,
        ),
        (
            // The uid is judged first: another object of the name is never "ours".
            "recreated with our annotations copied",
            member(true),
            Some(with(fenced(), |v| v["metadata"]["uid"] = json!("u3"))),
            Some((Change::Recreated, Some("kubectl-client-side-apply"))),
        ),
    ];
    for (name, m, now, want) in cases {
        let got = what_broke(&m, KEY, now.as_ref());
        let want = want.map(|(c, by)| (c, by.map(str::to_string)));
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn pause_broken_the_line_names_the_object_the_change_and_the_manager() {
    let b = super::BrokenPause {
        object: Box::new(crate::object::kustomization("flux-system", "apps")),
        change: Change::Unsuspended,
        by: Some("kubectl-patch".into()),
    };
    assert_eq!(
        b.to_string(),
        "the pause was broken while the work ran: Kustomization flux-system/apps: spec.suspend \
         was set to false by field manager \"kubectl-patch\"; the work was stopped; its fence is \
         kept and listed"
    );
    let b = super::BrokenPause {
        change: Change::FenceRemoved,
        by: None,
        ..b
    };
    assert!(
        b.to_string().ends_with(
            "its fence (the owner annotation) was removed (the server recorded no field manager \
             for it); the work was stopped; it is not ours any more and is left untouched"
        ),
        "{b}"
    );
}

/// A replicas gate at 0 as the server holds it after our fence: we manage the owner
/// annotation, `reconcile: disabled` and `spec.replicas`; it has no `spec.suspend`.
fn gated() -> Value {
    json!({
        "metadata": {
            "uid": "u1",
            "resourceVersion": "7",
            "annotations": { KEY: OURS, RD: "disabled" },
            "managedFields": [
                entry("kustomize-controller", "2026-12-01T10:00:00Z",
                    json!({"f:spec": {"f:replicas": {}, "f:template": {}}})),
                entry("flux-handoff", "2026-12-01T11:00:00Z", json!({
                    "f:metadata": {"f:annotations": {(format!("f:{KEY}")): {}, (format!("f:{RD}")): {}}},
                    "f:spec": {"f:replicas": {}},
                })),
            ],
        },
        "spec": { "replicas": 0, "template": {} },
    })
}

/// The entry a write through the Deployment's `scale` subresource leaves: the server records
/// it on the Deployment's own `f:spec.f:replicas`, under `subresource: scale`.
fn scaled_by(v: &mut Value, manager: &str, to: i64) {
    v["spec"]["replicas"] = json!(to);
    drop_ours(v, "/f:spec", "f:replicas");
    push_entry(
        v,
        json!({"manager": manager, "operation": "Update", "subresource": "scale",
               "time": "2026-12-01T12:00:00Z", "fieldsV1": {"f:spec": {"f:replicas": {}}}}),
    );
}

#[test]
fn gate_watch_a_replicas_gate_is_held_by_its_count_and_the_scaler_is_named() {
    let gate = |needs_rd: bool| member(needs_rd).with_replicas(Some(0));
    let rescaled = |to| Change::Rescaled { from: 0, to };
    let cases: Vec<(&str, Member, Option<Value>, Want)> = vec![
        // A Deployment has no spec.suspend: a gate is not "unsuspended" for lacking one.
        ("at its count", gate(true), Some(gated()), None),
        (
            "a status write (the last Pod gone) does not break it",
            gate(true),
            Some(with(gated(), |v| {
                v["metadata"]["resourceVersion"] = json!("9");
                v["status"] = json!({"observedGeneration": 2});
            })),
            None,
        ),
        (
            "kubectl scale through the scale subresource",
            gate(true),
            Some(with(gated(), |v| scaled_by(v, "kubectl-scale", 2))),
            Some((rescaled(Some(2)), Some("kubectl-scale"))),
        ),
        (
            "KEDA activating from 0",
            gate(true),
            Some(with(gated(), |v| scaled_by(v, "keda-operator", 1))),
            Some((rescaled(Some(1)), Some("keda-operator"))),
        ),
        (
            "an HPA",
            gate(false),
            Some(with(gated(), |v| {
                scaled_by(v, "horizontal-pod-autoscaler", 3);
            })),
            Some((rescaled(Some(3)), Some("horizontal-pod-autoscaler"))),
        ),
        (
            "spec.replicas removed: nobody recorded",
            gate(true),
            Some(with(gated(), |v| {
                v["spec"].as_object_mut().unwrap().remove("replicas");
                drop_ours(v, "/f:spec", "f:replicas");
                v["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]
                    .as_object_mut()
                    .unwrap()
                    .remove("f:replicas");
            })),
            Some((rescaled(None), None)),
        ),
        (
            "its reconcile: disabled removed",
            gate(true),
            Some(with(gated(), |v| {
                v["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove(RD);
                drop_ours(v, "/f:metadata/f:annotations", &format!("f:{RD}"));
            })),
            Some((Change::ReconcileEnabled, None)),
        ),
        (
            "a gate fenced without reconcile: disabled needs none",
            gate(false),
            Some(with(gated(), |v| {
                v["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove(RD);
            })),
            None,
        ),
        (
            "its fence removed",
            gate(true),
            Some(with(gated(), |v| {
                v["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove(KEY);
                drop_ours(v, "/f:metadata/f:annotations", &format!("f:{KEY}"));
            })),
            Some((Change::FenceRemoved, None)),
        ),
        (
            "recreated at the same count",
            gate(true),
            Some(with(gated(), |v| v["metadata"]["uid"] = json!("u9"))),
            Some((Change::Recreated, Some("kustomize-controller"))),
        ),
        ("deleted", gate(true), None, Some((Change::Deleted, None))),
        // The same Deployment judged as a Flux object would read unsuspended: the count is
        // what holds a gate.
        (
            "not a gate: no spec.suspend is unsuspended",
            member(true),
            Some(gated()),
            Some((Change::Unsuspended, None)),
        ),
    ];
    for (name, m, now, want) in cases {
        let got = what_broke(&m, KEY, now.as_ref());
        let want = want.map(|(c, by)| (c, by.map(str::to_string)));
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn gate_watch_the_line_names_the_count_and_the_scaler_and_keeps_the_fence() {
    let b = super::BrokenPause::new(
        crate::object::deployment("kube-system", "cluster-autoscaler"),
        Change::Rescaled {
            from: 0,
            to: Some(2),
        },
        Some("kubectl-scale".into()),
    );
    assert!(b.change.still_ours(), "the release must withhold it");
    assert_eq!(
        b.to_string(),
        "the pause was broken while the work ran: Deployment kube-system/cluster-autoscaler: \
         spec.replicas was set to 2 (the gate holds it at 0) by field manager \
         \"kubectl-scale\"; the work was stopped; its fence is kept and listed"
    );
}
