use serde_json::json;

use super::*;
use crate::OwnerValue;

const RECONCILE: &str = "kustomize.toolkit.fluxcd.io/reconcile";
const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

fn rec(at: MarkAt, value: Value, prior: Option<Value>, restore: Restore) -> RecordedMark {
    RecordedMark {
        at,
        value,
        prior,
        restore,
    }
}

/// A target's fence as a run takes it: suspend (exact), the requestedAt nonce
/// (if-unchanged), `reconcile: disabled` (exact).
fn held() -> Held {
    Held {
        uid: "u1".into(),
        owner: "h1;3".parse::<OwnerValue>().unwrap(),
        marks: vec![
            rec(
                MarkAt::Field("/spec/suspend".into()),
                json!(true),
                Some(json!(false)),
                Restore::Exact,
            ),
            rec(
                MarkAt::Annotation(REQUESTED_AT.into()),
                json!("fh-1"),
                None,
                Restore::IfUnchanged,
            ),
            rec(
                MarkAt::Annotation(RECONCILE.into()),
                json!("disabled"),
                None,
                Restore::Exact,
            ),
        ],
    }
}

/// The fenced object as read, with `suspend` and the `reconcile` and `requestedAt` values
/// (`None`: absent) another writer may have set.
fn read(suspend: Value, reconcile: Option<&str>, requested: &str) -> Value {
    let mut annotations = json!({
        "flux-handoff.io/owner": "h1;3",
        "flux-handoff.io/prior": "{}",
        REQUESTED_AT: requested,
    });
    if let Some(r) = reconcile {
        annotations[RECONCILE] = json!(r);
    }
    let mut obj = json!({
        "metadata": {
            "uid": "u1",
            "annotations": annotations,
            "labels": { "flux-handoff.io/fenced": "true" }
        },
        "spec": {}
    });
    if !suspend.is_null() {
        obj["spec"]["suspend"] = suspend;
    }
    obj
}

fn suspend() -> MarkAt {
    MarkAt::Field("/spec/suspend".into())
}

fn reconcile() -> MarkAt {
    MarkAt::Annotation(RECONCILE.into())
}

/// What the decision comes to, in short: `Ok((restored, kept, resumed))` for a patch, else
/// the mark that keeps the fence.
type Short = Result<(Vec<MarkAt>, Vec<MarkAt>, Option<MarkAt>), MarkAt>;

/// A case: its name, the object's `suspend`, `reconcile` and `requestedAt`, the mode, the
/// answer.
type Row = (
    &'static str,
    Value,
    Option<&'static str>,
    &'static str,
    Moved,
    Short,
);

fn short(d: Decided) -> Short {
    match d.decision {
        ReleaseDecision::Patch(_) => Ok((d.marks.restored, d.marks.kept, d.marks.resumed)),
        ReleaseDecision::MarkMoved { at } => Err(at),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn release_engine_a_persons_flux_resume_alone_is_kept_any_other_moved_mark_withholds() {
    let keys = AnnotationKeys::default();
    let requested = MarkAt::Annotation(REQUESTED_AT.into());
    let all = vec![reconcile(), requested.clone(), suspend()];
    let table: [Row; 9] = [
        (
            "nothing moved: everything restored",
            json!(true),
            Some("disabled"),
            "fh-1",
            Moved::Withhold,
            Ok((all.clone(), vec![], None)),
        ),
        (
            "flux resume: suspend false kept, the rest restored",
            json!(false),
            Some("disabled"),
            "fh-1",
            Moved::Withhold,
            Ok((
                vec![reconcile(), requested.clone()],
                vec![suspend()],
                Some(suspend()),
            )),
        ),
        (
            "flux resume also writes requestedAt: theirs stays, still a resume",
            json!(false),
            Some("disabled"),
            "2026-12-03T06:00:00Z",
            Moved::Withhold,
            Ok((vec![reconcile()], vec![suspend()], Some(suspend()))),
        ),
        (
            "suspend removed (Flux Operator's resume): kept, the rest restored",
            Value::Null,
            Some("disabled"),
            "fh-1",
            Moved::Withhold,
            Ok((
                vec![reconcile(), requested.clone()],
                vec![suspend()],
                Some(suspend()),
            )),
        ),
        (
            "suspend set to something else: withheld",
            json!("no"),
            Some("disabled"),
            "fh-1",
            Moved::Withhold,
            Err(suspend()),
        ),
        (
            "reconcile: disabled removed alone: withheld",
            json!(true),
            None,
            "fh-1",
            Moved::Withhold,
            Err(reconcile()),
        ),
        (
            "resumed and reconcile changed: withheld (not only the pause)",
            json!(false),
            Some("enabled"),
            "fh-1",
            Moved::Withhold,
            Err(reconcile()),
        ),
        (
            "keep-moved keeps both",
            json!(false),
            Some("enabled"),
            "fh-1",
            Moved::KeepAll,
            Ok((vec![requested.clone()], vec![reconcile(), suspend()], None)),
        ),
        (
            "keep-moved with nothing moved restores everything",
            json!(true),
            Some("disabled"),
            "fh-1",
            Moved::KeepAll,
            Ok((all.clone(), vec![], None)),
        ),
    ];
    for (case, s, r, req, moved, want) in table {
        let obj = read(s, r, req);
        let got = decide_release_marks(Some(&obj), &keys, &held(), moved).unwrap();
        assert_eq!(short(got), want, "{case}");
    }
}

#[test]
fn release_engine_the_kept_resume_is_tested_never_written_and_the_fence_goes() {
    let keys = AnnotationKeys::default();
    let mut obj = read(json!(false), Some("disabled"), "fh-1");
    let d = decide_release_marks(Some(&obj), &keys, &held(), Moved::Withhold).unwrap();
    let ReleaseDecision::Patch(patch) = d.decision else {
        panic!("{:?}", d.decision)
    };
    let ops = serde_json::to_value(&patch).unwrap();
    let ops = ops.as_array().unwrap();
    assert!(ops.contains(&json!({ "op": "test", "path": "/spec/suspend", "value": false })));
    assert!(
        !ops.iter()
            .any(|o| o["path"] == "/spec/suspend" && o["op"] != "test")
    );
    json_patch::patch(&mut obj, &patch).unwrap();
    assert_eq!(
        obj,
        json!({
            "metadata": { "uid": "u1", "annotations": {}, "labels": {} },
            "spec": { "suspend": false }
        })
    );
    // Flipped back to true after the read: the patch's test fails, nothing applies.
    let mut again = read(json!(true), Some("disabled"), "fh-1");
    assert!(json_patch::patch(&mut again, &patch).is_err());
}

#[test]
fn release_engine_not_ours_gone_and_recreated_are_decided_before_any_mark() {
    let keys = AnnotationKeys::default();
    let obj = read(json!(false), Some("enabled"), "fh-1");
    let mut other = obj.clone();
    other["metadata"]["annotations"]["flux-handoff.io/owner"] = json!("h2;1");
    let mut recreated = obj.clone();
    recreated["metadata"]["uid"] = json!("u2");
    let table = [
        (None, ReleaseDecision::Gone),
        (Some(recreated), ReleaseDecision::Recreated),
        (
            Some(other),
            ReleaseDecision::NotOurs {
                holder: Some("h2;1".into()),
            },
        ),
    ];
    for (read, want) in table {
        for moved in [Moved::Withhold, Moved::KeepAll] {
            let d = decide_release_marks(read.as_ref(), &keys, &held(), moved).unwrap();
            assert_eq!(d.decision, want);
            assert_eq!(d.marks, ReleaseMarks::default());
        }
    }
}

/// A Flux Operator target's fence: `fluxcd.controlplane.io/reconcile: disabled` is its pause
/// (exact), with the nonce and the parent's `reconcile: disabled` as for Flux's own kinds.
fn operator_held() -> Held {
    let mut h = held();
    h.marks[0] = rec(operator(), json!("disabled"), None, Restore::Exact);
    h
}

fn operator() -> MarkAt {
    MarkAt::Annotation(crate::mark::PAUSE_ANNOTATION.into())
}

#[test]
fn operator_kinds_release_keeps_a_persons_resume_alone_and_withholds_anything_else() {
    let keys = AnnotationKeys::default();
    let requested = MarkAt::Annotation(REQUESTED_AT.into());
    // (case, the operator annotation as found, `kustomize…/reconcile` as found, answer)
    let table: [(&str, Option<&str>, Option<&str>, Short); 6] = [
        (
            "nothing moved: everything restored (the annotation removed)",
            Some("disabled"),
            Some("disabled"),
            Ok((
                vec![reconcile(), requested.clone(), operator()],
                vec![],
                None,
            )),
        ),
        (
            "flux-operator resume (enabled): kept, the rest restored",
            Some("enabled"),
            Some("disabled"),
            Ok((
                vec![reconcile(), requested.clone()],
                vec![operator()],
                Some(operator()),
            )),
        ),
        (
            "annotation removed (the web UI's resume): kept, the rest restored",
            None,
            Some("disabled"),
            Ok((
                vec![reconcile(), requested.clone()],
                vec![operator()],
                Some(operator()),
            )),
        ),
        (
            "Disabled in another case still pauses: no resume, withheld",
            Some("Disabled"),
            Some("disabled"),
            Err(operator()),
        ),
        (
            "resumed and the parent's reconcile removed too: withheld",
            Some("enabled"),
            None,
            Err(reconcile()),
        ),
        (
            "the parent's reconcile removed alone: withheld",
            Some("disabled"),
            None,
            Err(reconcile()),
        ),
    ];
    for (case, op, r, want) in table {
        let mut obj = read(Value::Null, r, "fh-1");
        if let Some(v) = op {
            obj["metadata"]["annotations"][crate::mark::PAUSE_ANNOTATION] = json!(v);
        }
        let got = decide_release_marks(Some(&obj), &keys, &operator_held(), Moved::Withhold);
        assert_eq!(short(got.unwrap()), want, "{case}");
    }
}
