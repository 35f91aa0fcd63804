//! Tier 1: decision tables of the pure fence core over (owner absent / ours / foreign /
//! malformed) x (uid same / changed) x (suspend state), and properties of the patches it
//! produces, applied with the `json-patch` crate.

use crate::decide::AcquireDecision;
use crate::decide::AcquirePlan;
use crate::decide::Held;
use crate::decide::LostWrite;
use crate::decide::Refusal;
use crate::decide::ReleaseDecision;
use crate::decide::Unclear;
use crate::decide::decide_acquire;
use crate::decide::held_from_annotations;
use crate::decide::lost_write;
use crate::mark::MarkAt;
use crate::mark::Restore;
use crate::release::decide_release;
use crate::{AnnotationKeys, Epoch, Mark, OwnerValue};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use serde_json::{Value, json};

const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

fn keys() -> AnnotationKeys {
    AnnotationKeys::default()
}

fn ours() -> OwnerValue {
    OwnerValue::new("gh1.1-aaaaaa".parse().unwrap(), Epoch(3))
}

fn now() -> Timestamp {
    "2026-11-30T12:00:00Z".parse().unwrap()
}

fn object(suspend: bool, annotations: Option<Value>) -> Value {
    let mut metadata =
        json!({ "name": "apps", "namespace": "ns", "uid": "uid-1", "resourceVersion": "10" });
    if let Some(a) = annotations {
        metadata["annotations"] = a;
    }
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": metadata,
        "spec": { "interval": "10m", "suspend": suspend },
    })
}

fn flux_marks() -> Vec<Mark> {
    vec![
        Mark::field("/spec/suspend", json!(true)).exclusive(),
        Mark::annotation(REQUESTED_AT, "nonce-1").restore(Restore::IfUnchanged),
    ]
}

fn plan(obj: &Value, marks: &[Mark]) -> AcquirePlan {
    match decide_acquire(Some(obj), &keys(), &ours(), marks, Some("rotation"), now()).unwrap() {
        AcquireDecision::Patch(p) => p,
        other => panic!("expected a patch, got {other:?}"),
    }
}

/// Applies `plan` like the server would (and moves resourceVersion on).
fn applied(obj: &Value, plan: &AcquirePlan) -> Value {
    let mut out = obj.clone();
    json_patch::patch(&mut out, &plan.patch).unwrap();
    out["metadata"]["resourceVersion"] = json!("11");
    out
}

fn release_patch(obj: &Value, held: &Held) -> json_patch::Patch {
    match decide_release(Some(obj), &keys(), held).unwrap() {
        ReleaseDecision::Patch(p) => p,
        other => panic!("expected a patch, got {other:?}"),
    }
}

#[test]
fn acquire_on_unowned_object_tests_uid_and_version_first_and_records_priors() {
    let obj = object(false, Some(json!({ "keep": "me" })));
    let plan = plan(&obj, &flux_marks());
    let ops = serde_json::to_value(&plan.patch).unwrap();
    assert_eq!(
        ops[0],
        json!({ "op": "test", "path": "/metadata/uid", "value": "uid-1" })
    );
    assert_eq!(
        ops[1],
        json!({ "op": "test", "path": "/metadata/resourceVersion", "value": "10" })
    );
    assert!(
        ops.as_array()
            .unwrap()
            .iter()
            .all(|op| op["path"] != "/metadata/annotations")
    );

    let after = applied(&obj, &plan);
    let a = &after["metadata"]["annotations"];
    assert_eq!(a["flux-handoff.io/owner"], "gh1.1-aaaaaa;3");
    assert_eq!(a["flux-handoff.io/reason"], "rotation");
    assert_eq!(a[REQUESTED_AT], "nonce-1");
    assert_eq!(a["keep"], "me");
    assert_eq!(after["spec"]["suspend"], json!(true));
    let (held, since) = held_from_annotations(&after, &keys()).unwrap();
    assert_eq!(since, now());
    assert_eq!(held, plan.held);
    assert_eq!(held.marks[0].prior, Some(json!(false)));
    assert_eq!(held.marks[1].prior, None);
}

#[test]
fn acquire_creates_the_annotations_map_when_absent() {
    let obj = object(false, None);
    let plan = plan(&obj, &flux_marks());
    let ops = serde_json::to_value(&plan.patch).unwrap();
    assert_eq!(
        ops[2],
        json!({ "op": "add", "path": "/metadata/annotations", "value": {} })
    );
    let after = applied(&obj, &plan);
    assert_eq!(
        after["metadata"]["annotations"]["flux-handoff.io/owner"],
        "gh1.1-aaaaaa;3"
    );
}

#[test]
fn acquire_refuses_foreign_owner_naming_it() {
    let obj = object(
        true,
        Some(json!({ "flux-handoff.io/owner": "gh9.1-zzzzzz;8" })),
    );
    let d = decide_acquire(Some(&obj), &keys(), &ours(), &flux_marks(), None, now()).unwrap();
    assert_eq!(
        d,
        AcquireDecision::Refuse(Refusal::Owned {
            holder: "gh9.1-zzzzzz;8".into()
        })
    );
}

#[test]
fn acquire_refuses_malformed_owner_as_foreign_without_panicking() {
    let obj = object(
        false,
        Some(json!({ "flux-handoff.io/owner": ";;garbage\u{1}" })),
    );
    let d = decide_acquire(Some(&obj), &keys(), &ours(), &flux_marks(), None, now()).unwrap();
    assert_eq!(
        d,
        AcquireDecision::Refuse(Refusal::Owned {
            holder: ";;garbage\u{1}".into()
        })
    );
}

#[test]
fn acquire_refuses_our_own_holder_at_an_older_epoch() {
    let obj = object(
        false,
        Some(json!({ "flux-handoff.io/owner": "gh1.1-aaaaaa;2" })),
    );
    let d = decide_acquire(Some(&obj), &keys(), &ours(), &flux_marks(), None, now()).unwrap();
    assert!(
        matches!(d, AcquireDecision::Refuse(Refusal::Owned { .. })),
        "{d:?}"
    );
}

#[test]
fn acquire_refuses_exclusive_mark_already_set_by_someone_else() {
    let obj = object(true, None);
    let d = decide_acquire(Some(&obj), &keys(), &ours(), &flux_marks(), None, now()).unwrap();
    assert_eq!(
        d,
        AcquireDecision::Refuse(Refusal::AlreadyMarked {
            at: MarkAt::Field("/spec/suspend".into())
        })
    );
}

#[test]
fn acquire_of_non_exclusive_mark_already_set_records_it_as_prior() {
    let obj = object(true, None);
    let marks = [Mark::field("/spec/suspend", json!(true))];
    let plan = plan(&obj, &marks);
    assert_eq!(plan.held.marks[0].prior, Some(json!(true)));
}

#[test]
fn acquire_adopts_our_own_complete_fence_without_writing() {
    let obj = object(false, None);
    let after = applied(&obj, &plan(&obj, &flux_marks()));
    let d = decide_acquire(Some(&after), &keys(), &ours(), &flux_marks(), None, now()).unwrap();
    assert!(
        matches!(d, AcquireDecision::AlreadyOurs { ref resource_version, .. } if resource_version == "11"),
        "{d:?}"
    );
    // Same owner but other marks: refused, never silently re-fenced.
    let other = [Mark::field("/spec/suspend", json!(true))];
    let d = decide_acquire(Some(&after), &keys(), &ours(), &other, None, now()).unwrap();
    assert_eq!(d, AcquireDecision::Refuse(Refusal::OursDiffers));
}

#[test]
fn acquire_of_missing_object_is_not_found_and_bad_input_is_an_error() {
    let d = decide_acquire(None, &keys(), &ours(), &flux_marks(), None, now()).unwrap();
    assert_eq!(d, AcquireDecision::NotFound);
    let obj = object(false, None);
    let deep = [Mark::field("/spec/missing/deep", json!(1))];
    assert!(decide_acquire(Some(&obj), &keys(), &ours(), &deep, None, now()).is_err());
    let bad = Some("line\nbreak");
    assert!(decide_acquire(Some(&obj), &keys(), &ours(), &[], bad, now()).is_err());
}

#[test]
fn release_restores_the_exact_pre_fence_object() {
    for (suspend, annotations) in [
        (false, None),
        (false, Some(json!({ "keep": "me", REQUESTED_AT: "old" }))),
    ] {
        let before = object(suspend, annotations);
        let plan = plan(&before, &flux_marks());
        let mut after = applied(&before, &plan);
        let release = release_patch(&after, &plan.held);
        json_patch::patch(&mut after, &release).unwrap();
        after["metadata"]["resourceVersion"] = json!("10");
        if before["metadata"].get("annotations").is_none() {
            assert_eq!(after["metadata"]["annotations"], json!({}));
            after["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("annotations");
        }
        // The fenced label is gone; the API server drops the then empty map.
        assert_eq!(after["metadata"]["labels"], json!({}));
        after["metadata"].as_object_mut().unwrap().remove("labels");
        assert_eq!(after, before);
    }
}

#[test]
fn the_fenced_label_is_written_with_the_owner_and_kept_beside_other_labels() {
    let k = keys();
    // (labels before, ops creating the map)
    for (labels, creates_map) in [(None, true), (Some(json!({ "app": "x" })), false)] {
        let mut before = object(false, None);
        if let Some(l) = labels.clone() {
            before["metadata"]["labels"] = l;
        }
        let plan = plan(&before, &flux_marks());
        let ops = serde_json::to_value(&plan.patch).unwrap();
        let adds_map = ops
            .as_array()
            .unwrap()
            .iter()
            .any(|op| op["path"] == "/metadata/labels" && op["value"] == json!({}));
        assert_eq!(adds_map, creates_map, "{ops}");
        let after = applied(&before, &plan);
        assert_eq!(
            after["metadata"]["labels"]["flux-handoff.io/fenced"],
            "true"
        );
        if labels.is_some() {
            assert_eq!(after["metadata"]["labels"]["app"], "x");
        }
        // The release removes it in the same patch as the owner, and keeps other labels.
        let mut released = after.clone();
        json_patch::patch(&mut released, &release_patch(&after, &plan.held)).unwrap();
        assert_eq!(
            released["metadata"]["labels"].get("flux-handoff.io/fenced"),
            None
        );
        assert_eq!(
            released["metadata"]["labels"].get("app").is_some(),
            labels.is_some()
        );
        assert_eq!(k.fenced_selector(), "flux-handoff.io/fenced=true");
    }
}

#[test]
fn a_fence_without_the_label_releases_without_touching_labels() {
    // Written by an older version: owner annotation, no label.
    let before = object(false, None);
    let plan = plan(&before, &flux_marks());
    let mut after = applied(&before, &plan);
    after["metadata"].as_object_mut().unwrap().remove("labels");
    let patch = serde_json::to_value(release_patch(&after, &plan.held)).unwrap();
    assert!(
        patch
            .as_array()
            .unwrap()
            .iter()
            .all(|op| !op["path"].as_str().unwrap().starts_with("/metadata/labels")),
        "{patch}"
    );
}

#[test]
fn release_of_recreated_gone_or_foreign_object_writes_nothing() {
    let before = object(false, None);
    let plan = plan(&before, &flux_marks());
    let mut after = applied(&before, &plan);
    let k = keys();
    assert_eq!(
        decide_release(None, &k, &plan.held).unwrap(),
        ReleaseDecision::Gone
    );
    let mut recreated = after.clone();
    recreated["metadata"]["uid"] = json!("uid-2");
    assert_eq!(
        decide_release(Some(&recreated), &k, &plan.held).unwrap(),
        ReleaseDecision::Recreated
    );
    after["metadata"]["annotations"]["flux-handoff.io/owner"] = json!("gh9.1-zzzzzz;8");
    assert_eq!(
        decide_release(Some(&after), &k, &plan.held).unwrap(),
        ReleaseDecision::NotOurs {
            holder: Some("gh9.1-zzzzzz;8".into())
        }
    );
}

#[test]
fn release_refuses_when_an_exact_mark_was_changed_by_another_writer() {
    let before = object(false, None);
    let plan = plan(&before, &flux_marks());
    let mut after = applied(&before, &plan);
    // Neither `flux resume`'s `false` nor Flux Operator's removal: withheld.
    after["spec"]["suspend"] = json!("no");
    assert_eq!(
        decide_release(Some(&after), &keys(), &plan.held).unwrap(),
        ReleaseDecision::MarkMoved {
            at: MarkAt::Field("/spec/suspend".into())
        }
    );
    // Removed (Flux Operator's resume) is a resume the release keeps.
    after["spec"].as_object_mut().unwrap().remove("suspend");
    assert!(matches!(
        decide_release(Some(&after), &keys(), &plan.held).unwrap(),
        ReleaseDecision::Patch(_)
    ));
}

#[test]
fn release_engine_keeps_a_persons_flux_resume_when_it_is_the_only_moved_mark() {
    let before = object(false, None);
    let plan = plan(&before, &flux_marks());
    let mut after = applied(&before, &plan);
    after["spec"]["suspend"] = json!(false);
    let patch = release_patch(&after, &plan.held);
    json_patch::patch(&mut after, &patch).unwrap();
    assert_eq!(after["spec"]["suspend"], json!(false));
    // The fence and the nonce are gone: nothing of ours is left.
    assert_eq!(after["metadata"]["annotations"], json!({}), "{after}");
}

#[test]
fn release_leaves_another_writers_value_of_an_if_unchanged_mark() {
    let before = object(false, None);
    let plan = plan(&before, &flux_marks());
    let mut after = applied(&before, &plan);
    after["metadata"]["annotations"][REQUESTED_AT] = json!("someone-else");
    let patch = release_patch(&after, &plan.held);
    json_patch::patch(&mut after, &patch).unwrap();
    assert_eq!(
        after["metadata"]["annotations"],
        json!({ REQUESTED_AT: "someone-else" })
    );
    assert_eq!(after["spec"]["suspend"], json!(false));
}

#[test]
fn adoption_requires_exactly_the_post_state() {
    let before = object(false, None);
    let plan = plan(&before, &flux_marks());
    let k = keys();
    let after = applied(&before, &plan);
    assert_eq!(
        lost_write(Some(&after), &k, &plan),
        LostWrite::Landed {
            resource_version: "11".into()
        }
    );
    assert_eq!(lost_write(Some(&before), &k, &plan), LostWrite::NotApplied);
    assert_eq!(
        lost_write(None, &k, &plan),
        LostWrite::Unclear(Unclear::Gone)
    );
    let mut recreated = after.clone();
    recreated["metadata"]["uid"] = json!("uid-2");
    assert_eq!(
        lost_write(Some(&recreated), &k, &plan),
        LostWrite::Unclear(Unclear::Recreated)
    );
    let mut unsuspended = after.clone();
    unsuspended["spec"]["suspend"] = json!(false);
    assert_eq!(
        lost_write(Some(&unsuspended), &k, &plan),
        LostWrite::Unclear(Unclear::Differs)
    );
    let mut moved = before.clone();
    moved["metadata"]["resourceVersion"] = json!("12");
    assert_eq!(
        lost_write(Some(&moved), &k, &plan),
        LostWrite::Unclear(Unclear::Differs)
    );
}

fn annotations_strategy()
-> impl Strategy<Value = Option<std::collections::BTreeMap<String, String>>> {
    proptest::option::of(proptest::collection::btree_map(
        "[a-z./~-]{1,12}",
        ".{0,8}",
        0..4,
    ))
}

proptest! {
    #[test]
    fn release_patch_never_applies_to_an_object_not_ours(
        foreign in proptest::option::of("[a-z0-9;.-]{0,20}"),
        suspend in any::<bool>(),
        extra in annotations_strategy(),
    ) {
        let before = object(false, None);
        let plan = plan(&before, &flux_marks());
        let after = applied(&before, &plan);
        let patch = release_patch(&after, &plan.held);

        let present = extra.is_some() || foreign.is_some();
        let mut annotations = serde_json::to_value(extra.unwrap_or_default()).unwrap();
        annotations.as_object_mut().unwrap().remove("flux-handoff.io/owner");
        if let Some(f) = &foreign {
            prop_assume!(f != "gh1.1-aaaaaa;3");
            annotations["flux-handoff.io/owner"] = json!(f);
        }
        let mut other = object(suspend, present.then_some(annotations));
        let untouched = other.clone();
        prop_assert!(json_patch::patch(&mut other, &patch).is_err());
        prop_assert_eq!(other, untouched);
    }

    #[test]
    fn acquire_then_release_round_trips_any_prior_state(
        suspend in any::<bool>(),
        extra in annotations_strategy(),
        value in ".{0,10}",
    ) {
        let annotations = extra.map(|m| {
            let mut v = serde_json::to_value(m).unwrap();
            v.as_object_mut().unwrap().retain(|k, _| !k.starts_with("flux-handoff.io/"));
            v
        });
        let before = object(suspend, annotations);
        let marks = [
            Mark::field("/spec/suspend", json!(true)),
            Mark::annotation("kustomize.toolkit.fluxcd.io/reconcile", "disabled"),
            Mark::annotation("x/y~z", value).restore(Restore::IfUnchanged),
            Mark::field("/spec/new~1field", json!({ "n": 1 })),
        ];
        let plan = plan(&before, &marks);
        let mut after = applied(&before, &plan);
        let patch = release_patch(&after, &plan.held);
        json_patch::patch(&mut after, &patch).unwrap();
        after["metadata"]["resourceVersion"] = json!("10");
        if before["metadata"].get("annotations").is_none() {
            after["metadata"].as_object_mut().unwrap().remove("annotations");
        }
        prop_assert_eq!(&after["metadata"]["labels"], &json!({}));
        after["metadata"].as_object_mut().unwrap().remove("labels");
        prop_assert_eq!(after, before);
    }
}

/// `fluxcd.controlplane.io/suspendedBy` as the handoff writes it: only where absent.
#[test]
fn suspended_by_an_if_absent_mark_is_written_only_where_no_one_else_set_a_value() {
    const BY: &str = "fluxcd.controlplane.io/suspendedBy";
    let mut marks = flux_marks();
    marks.push(
        Mark::annotation(BY, "app gh1.1-aaaaaa")
            .restore(Restore::IfUnchanged)
            .if_absent(),
    );
    // Absent: written, recorded with no prior, and the release removes it.
    let free = object(false, None);
    let p = plan(&free, &marks);
    let fenced = applied(&free, &p);
    assert_eq!(fenced["metadata"]["annotations"][BY], "app gh1.1-aaaaaa");
    assert!(
        p.held
            .marks
            .iter()
            .any(|m| m.at == MarkAt::Annotation(BY.into()) && m.prior.is_none())
    );
    let mut released = fenced.clone();
    json_patch::patch(&mut released, &release_patch(&fenced, &p.held)).unwrap();
    assert!(
        released["metadata"]["annotations"].get(BY).is_none(),
        "{released}"
    );
    // Idempotent: the same acquire on what it wrote is ours.
    let again = decide_acquire(
        Some(&fenced),
        &keys(),
        &ours(),
        &marks,
        Some("rotation"),
        now(),
    );
    assert!(matches!(
        again.unwrap(),
        AcquireDecision::AlreadyOurs { .. }
    ));

    // Someone else's value: not written, not recorded, and the release leaves it.
    let foreign = object(false, Some(json!({ BY: "alice: incident 42" })));
    let p = plan(&foreign, &marks);
    assert!(
        !p.held
            .marks
            .iter()
            .any(|m| m.at == MarkAt::Annotation(BY.into()))
    );
    let fenced = applied(&foreign, &p);
    assert_eq!(fenced["metadata"]["annotations"][BY], "alice: incident 42");
    let again = decide_acquire(
        Some(&fenced),
        &keys(),
        &ours(),
        &marks,
        Some("rotation"),
        now(),
    );
    assert!(matches!(
        again.unwrap(),
        AcquireDecision::AlreadyOurs { .. }
    ));
    let mut released = fenced.clone();
    json_patch::patch(&mut released, &release_patch(&fenced, &p.held)).unwrap();
    assert_eq!(
        released["metadata"]["annotations"][BY],
        "alice: incident 42"
    );
}
