use serde_json::{Value, json};

use super::*;

const OWNER: &str = "flux-handoff.io/owner";
const REQUESTED: &str = "reconcile.fluxcd.io/requestedAt";

fn obj(uid: &str, rv: &str, annotations: Option<Value>) -> Value {
    let mut v = json!({ "metadata": { "uid": uid, "resourceVersion": rv } });
    if let Some(a) = annotations {
        v["metadata"]["annotations"] = a;
    }
    v
}

fn apply(patch: &Value, to: &Value) -> Result<Value, String> {
    let p: json_patch::Patch = serde_json::from_value(patch.clone()).map_err(|e| e.to_string())?;
    let mut out = to.clone();
    json_patch::patch(&mut out, &p).map_err(|e| e.to_string())?;
    Ok(out)
}

#[test]
fn a_reconcile_request_tests_only_the_uid_and_that_no_other_run_fenced_it() {
    let with = json!({ "team": "web", REQUESTED: "old" });
    let send_with = json!([
        { "op": "test", "path": "/metadata/uid", "value": "u1" },
        { "op": "test", "path": "/metadata/annotations/flux-handoff.io~1owner", "value": null },
        { "op": "add", "path": "/metadata/annotations/reconcile.fluxcd.io~1requestedAt",
          "value": "n1" },
    ]);
    let send_without = json!([
        { "op": "test", "path": "/metadata/uid", "value": "u1" },
        { "op": "test", "path": "/metadata/annotations", "value": null },
        { "op": "add", "path": "/metadata/annotations", "value": { REQUESTED: "n1" } },
    ]);
    let table: Vec<(&str, Option<Value>, ReconcileRequest)> = vec![
        (
            "annotations there",
            Some(obj("u1", "7", Some(with.clone()))),
            ReconcileRequest::Send(send_with.clone()),
        ),
        (
            "no annotation at all",
            Some(obj("u1", "7", None)),
            ReconcileRequest::Send(send_without.clone()),
        ),
        ("gone", None, ReconcileRequest::Skip("gone")),
        (
            "recreated",
            Some(obj("u2", "7", None)),
            ReconcileRequest::Skip("recreated"),
        ),
        // Another run fenced it since our release: its requestedAt is its mark.
        (
            "fenced since",
            Some(obj("u1", "8", Some(json!({ OWNER: "gh2.1-b;1" })))),
            ReconcileRequest::Skip("fenced by another run since the release"),
        ),
    ];
    for (case, read, want) in table {
        assert_eq!(
            decide_reconcile_request(read.as_ref(), "u1", OWNER, "n1"),
            want,
            "{case}"
        );
    }
    // No resourceVersion is tested: the controller's status writes move it, nothing else.
    for patch in [&send_with, &send_without] {
        assert!(!patch.to_string().contains("resourceVersion"), "{patch}");
    }
    // What it tests fails safe: another run's fence taken in between fails it (its
    // requestedAt stays), and so does a recreated object or annotations that appeared. (That a
    // missing owner key passes its `null` test is the API server's JSON patch, shown by the
    // e2e tests `resume_report_*`; this crate's strict patch would refuse it, which is safe.)
    let fenced = obj(
        "u1",
        "9",
        Some(json!({ "team": "web", OWNER: "h2;1", REQUESTED: "m" })),
    );
    assert!(apply(&send_with, &fenced).is_err());
    assert!(apply(&send_without, &fenced).is_err());
    assert!(apply(&send_with, &obj("u2", "9", Some(with))).is_err());
}

#[test]
fn a_failed_reconcile_request_is_sent_again_with_a_bounded_doubling_pause() {
    let ms = Duration::from_millis;
    let table: Vec<(Option<u16>, u32, AfterRequest)> = vec![
        // A failed test (fenced, recreated, annotations appeared): read again and decide.
        (Some(422), 1, AfterRequest::Again(ms(100))),
        (Some(409), 2, AfterRequest::Again(ms(200))),
        (Some(429), 3, AfterRequest::Again(ms(400))),
        (Some(503), 4, AfterRequest::Again(ms(800))),
        (None, 5, AfterRequest::Again(ms(1600))),
        (Some(500), REQUEST_ATTEMPTS, AfterRequest::GiveUp),
        (Some(404), 1, AfterRequest::Gone),
        (Some(403), 1, AfterRequest::GiveUp),
        (Some(400), 1, AfterRequest::GiveUp),
    ];
    for (status, attempt, want) in table {
        assert_eq!(
            after_request(status, attempt),
            want,
            "{status:?} #{attempt}"
        );
    }
    for attempt in 1..REQUEST_ATTEMPTS {
        let AfterRequest::Again(p) = after_request(Some(503), attempt) else {
            panic!("attempt {attempt}")
        };
        assert!(p <= REQUEST_BACKOFF_MAX, "{p:?}");
    }
}

#[test]
fn a_not_ready_object_is_reported_with_its_last_condition() {
    let o = |suspend: bool, ready: Option<(&str, &str)>, handled: &str| {
        let mut v = json!({ "spec": { "suspend": suspend },
                            "status": { "lastHandledReconcileAt": handled, "conditions": [] } });
        if let Some((status, reason)) = ready {
            v["status"]["conditions"] =
                json!([{ "type": "Ready", "status": status, "reason": reason, "message": "m" }]);
        }
        v
    };
    let table = [
        (o(true, None, "n1"), "still suspended"),
        (o(false, None, "n1"), "no Ready condition"),
        (
            o(false, Some(("False", "HealthCheckFailed")), "n1"),
            "Ready=False (HealthCheckFailed)",
        ),
        (
            o(false, Some(("Unknown", "Progressing")), "old"),
            "Ready=Unknown (Progressing); the reconcile request not handled yet",
        ),
        (o(false, Some(("True", "")), "n1"), "Ready=True"),
    ];
    for (v, want) in table {
        assert_eq!(last_condition(&v, "n1"), want, "{v}");
    }
    let wait = ReadyWait::NotReady(vec![]);
    assert_eq!(wait.class(), Some(ErrorClass::NotReady));
    assert_eq!(
        ReadyWait::Stopped(vec![]).class(),
        Some(ErrorClass::Cancelled)
    );
    assert_eq!(ReadyWait::Ready.class(), None);
}
