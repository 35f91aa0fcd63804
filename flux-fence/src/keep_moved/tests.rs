use std::str::FromStr;

use serde_json::json;

use super::*;
use crate::mark::MarkAt;

/// A target fenced by `h1` (suspend and reconcile: disabled), then `spec.suspend` set to
/// `suspend` and the `reconcile` annotation to `reconcile` by someone else.
fn fenced(suspend: bool, reconcile: &str) -> Value {
    let prior = json!({
        "since": "2026-12-01T00:00:00Z",
        "marks": [
            { "at": { "field": "/spec/suspend" }, "value": true, "prior": false, "restore": "exact" },
            { "at": { "annotation": "kustomize.toolkit.fluxcd.io/reconcile" }, "value": "disabled", "restore": "exact" }
        ]
    });
    json!({
        "metadata": {
            "uid": "u1",
            "resourceVersion": "7",
            "annotations": {
                "flux-handoff.io/owner": "h1;3",
                "flux-handoff.io/prior": prior.to_string(),
                "kustomize.toolkit.fluxcd.io/reconcile": reconcile
            },
            "labels": { "flux-handoff.io/fenced": "true" }
        },
        "spec": { "suspend": suspend }
    })
}

fn h(name: &str) -> Holder {
    Holder::from_str(name).unwrap()
}

/// `Ok((kept, restored))`, or the refusal.
type Want = Result<(Vec<MarkAt>, Vec<MarkAt>), KeepMovedRefusal>;

#[test]
fn next_step_keep_moved_keeps_what_moved_restores_the_rest_or_refuses_typed() {
    let keys = AnnotationKeys::default();
    let suspend = MarkAt::Field("/spec/suspend".into());
    let reconcile = MarkAt::Annotation("kustomize.toolkit.fluxcd.io/reconcile".into());
    let mut unfenced = fenced(true, "disabled");
    unfenced["metadata"]["annotations"] = json!({});
    let mut malformed = fenced(true, "disabled");
    malformed["metadata"]["annotations"]["flux-handoff.io/prior"] = json!("{");
    let table: [(&str, Option<Value>, Holder, Want); 7] = [
        (
            "flux resume: suspend kept, reconcile restored",
            Some(fenced(false, "disabled")),
            h("h1"),
            Ok((vec![suspend.clone()], vec![reconcile.clone()])),
        ),
        (
            "both moved: both kept",
            Some(fenced(false, "enabled")),
            h("h1"),
            Ok((vec![reconcile.clone(), suspend.clone()], vec![])),
        ),
        (
            "nothing moved",
            Some(fenced(true, "disabled")),
            h("h1"),
            Err(KeepMovedRefusal::NothingMoved),
        ),
        (
            "another holder",
            Some(fenced(false, "disabled")),
            h("h2"),
            Err(KeepMovedRefusal::OtherHolder { found: h("h1") }),
        ),
        ("not found", None, h("h1"), Err(KeepMovedRefusal::NotFound)),
        (
            "not fenced",
            Some(unfenced),
            h("h1"),
            Err(KeepMovedRefusal::NotFenced),
        ),
        (
            "malformed",
            Some(malformed),
            h("h1"),
            Err(KeepMovedRefusal::Malformed(
                "malformed prior annotation: \"{\"".into(),
            )),
        ),
    ];
    for (case, read, holder, want) in table {
        let got = decide_keep_moved(read.as_ref(), &keys, &holder)
            .unwrap()
            .map(|k| (k.marks.kept, k.marks.restored));
        match (&got, &want) {
            (Err(KeepMovedRefusal::Malformed(_)), Err(KeepMovedRefusal::Malformed(_))) => {}
            _ => assert_eq!(got, want, "{case}"),
        }
    }
}

#[test]
fn next_step_keep_moved_patch_tests_the_kept_value_and_removes_the_fence() {
    let keys = AnnotationKeys::default();
    let mut obj = fenced(false, "disabled");
    let plan = decide_keep_moved(Some(&obj), &keys, &h("h1"))
        .unwrap()
        .unwrap();
    assert_eq!(plan.resource_version, "7");
    let ops = serde_json::to_value(&plan.patch).unwrap();
    let ops = ops.as_array().unwrap();
    assert!(ops.contains(&json!({ "op": "test", "path": "/spec/suspend", "value": false })));
    assert!(
        !ops.iter()
            .any(|o| o["path"] == "/spec/suspend" && o["op"] != "test")
    );
    json_patch::patch(&mut obj, &plan.patch).unwrap();
    assert_eq!(obj["metadata"]["annotations"], json!({}));
    assert_eq!(obj["metadata"]["labels"], json!({}));
    assert_eq!(obj["spec"]["suspend"], json!(false));
}
