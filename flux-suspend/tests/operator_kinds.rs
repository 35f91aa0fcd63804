//! Tier 1: Flux Operator kinds (`ResourceSet`, `FluxInstance`) as targets — what pauses them,
//! how a read of one is judged, and what a person's resume of one breaks. Pure.

use flux_suspend::flux::{is_operator_object, suspended};
use flux_suspend::judge::{Broken, Member, Read, Role};
use flux_suspend::object::{is_operator_kind, resource_set, seen};
use flux_suspend::{Change, what_broke};
use serde_json::{Value, json};

const OWNER_KEY: &str = "flux-handoff.io/owner";
const OWNER: &str = "gh1.1-abcdef;7";
const OPERATOR: &str = "fluxcd.controlplane.io/reconcile";

/// A `ResourceSet` as read, fenced by us, with the operator annotation `op` (`None`: absent)
/// and `spec` as given.
fn rset(op: Option<&str>, spec: &Value) -> Value {
    let mut annotations = json!({
        OWNER_KEY: OWNER,
        "kustomize.toolkit.fluxcd.io/reconcile": "disabled",
    });
    if let Some(v) = op {
        annotations[OPERATOR] = json!(v);
    }
    json!({
        "apiVersion": "fluxcd.controlplane.io/v1",
        "kind": "ResourceSet",
        "metadata": {
            "uid": "u1",
            "resourceVersion": "5",
            "annotations": annotations,
            "managedFields": [{
                "manager": "flux-operator-cli",
                "operation": "Update",
                "time": "2026-12-03T10:00:02Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:annotations": {"f:fluxcd.controlplane.io/reconcile": {}}}}
            }]
        },
        "spec": spec
    })
}

#[test]
fn operator_kinds_are_paused_by_their_reconcile_annotation_never_by_spec_suspend() {
    // (case, operator annotation, spec, paused)
    let table = [
        ("disabled", Some("disabled"), json!({}), true),
        (
            "any case, as the operator compares",
            Some("Disabled"),
            json!({}),
            true,
        ),
        (
            "enabled (flux-operator resume)",
            Some("enabled"),
            json!({}),
            false,
        ),
        ("absent", None, json!({}), false),
        (
            "spec.suspend means nothing to it",
            None,
            json!({"suspend": true}),
            false,
        ),
    ];
    for (case, op, spec, paused) in table {
        let obj = rset(op, &spec);
        assert!(is_operator_object(&obj), "{case}");
        assert_eq!(suspended(&obj), paused, "{case}");
        assert_eq!(seen(&obj, OWNER_KEY).suspended, paused, "{case}");
    }
    // Flux's own kinds keep spec.suspend and ignore the operator's annotation.
    let ks = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "metadata": {"annotations": {OPERATOR: "disabled"}},
        "spec": {"suspend": false}
    });
    assert!(!is_operator_object(&ks));
    assert!(!suspended(&ks));
    assert!(is_operator_kind(&resource_set("apps", "tenants").resource));
}

#[test]
fn operator_kinds_a_resumed_operator_object_is_a_broken_pause_named_as_such() {
    let member = Member::new(Role::Target, "u1", OWNER, true);
    let judge =
        |op: Option<&str>| member.broken(&Read::Seen(seen(&rset(op, &json!({})), OWNER_KEY)));
    assert_eq!(judge(Some("disabled")), None);
    assert_eq!(judge(Some("enabled")), Some(Broken::OperatorEnabled));
    assert_eq!(judge(None), Some(Broken::OperatorEnabled));
    assert!(Broken::OperatorEnabled.to_string().contains(OPERATOR));

    // While the work runs: the change and who made it, by field manager.
    assert_eq!(
        what_broke(
            &member,
            OWNER_KEY,
            Some(&rset(Some("disabled"), &json!({})))
        ),
        None
    );
    let (change, by) = what_broke(&member, OWNER_KEY, Some(&rset(Some("enabled"), &json!({}))))
        .expect("a resume breaks the pause");
    assert_eq!(change, Change::OperatorEnabled);
    assert_eq!(by.as_deref(), Some("flux-operator-cli"));
    assert!(
        change.still_ours(),
        "still fenced by us: the cleanup releases it"
    );
    assert!(change.to_string().contains(OPERATOR), "{change}");
}
