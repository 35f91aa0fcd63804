//! The bodies of the `fact_` tests (docs/design/flux-model.md facts 1–5, 8–10), written once
//! against a [`Backend`]: `model_facts.rs` runs them against the model, `real_flux.rs` against
//! the real kustomize-controller, under the same names. Every test asserts what the server
//! holds; waits follow the backend's observations (the model's event log, or the real
//! controller's status writes and log), never a sleep.

mod backend;
mod policy;
mod real;
mod terms;

use crate::model::status::{READY, RECONCILING, condition};
use crate::model::{BUMP_ANNOTATION, COMPETING_WRITER, Outcome, Phase};
use serde_json::{Value, json};

pub use backend::{Backend, Mark, Setup, Workload};
use kube::api::{DynamicObject, Patch, PatchParams};
pub use policy::fact_3_nonce_is_recorded_even_when_the_conditions_patch_fails;

/// One test per fact, each running its body on `$backend` under the fact's own name, with the
/// test attribute given: `flux_model::fact_tests!(#[tokio::test] Backend::Model);`. Both
/// backends' suites call it, so they run exactly the same facts under the same names.
#[macro_export]
macro_rules! fact_tests {
    (#[$test:meta] $backend:expr) => {
        $crate::fact_tests!(@each #[$test] $backend;
            fact_1_competing_writer_annotation_and_resource_version_bump_queue_nothing,
            fact_1_generation_and_requested_at_queue_but_other_annotations_and_status_do_not,
            fact_1_interval_timer_requeues_without_any_event,
            fact_1_source_revision_bump_queues_and_is_applied,
            fact_2_two_events_during_one_reconcile_cause_exactly_one_more,
            fact_3_failed_reconcile_keeps_reconciling_with_retry_reason,
            fact_3_finalisation_writes_nothing_when_nothing_changed,
            fact_3_nonce_is_recorded_even_when_the_conditions_patch_fails,
            fact_3_suspended_path_records_nonce,
            fact_3_suspended_ready_object_loses_reconciling_at_next_finalisation,
            fact_4_suspended_object_gets_finalisation_only,
            fact_5_no_health_phase_without_wait_or_health_checks,
            fact_5_working_path_writes_each_phase_and_ends_ready,
            fact_8_in_flight_reconcile_is_not_stopped_by_suspend_and_the_ack_follows_it,
            fact_9_restart_mid_reconcile_leaves_reconciling_frozen_while_suspended,
            fact_10_observed_generation_lags_while_unhealthy_and_suspended,
        );
    };
    (@each #[$test:meta] $backend:expr; $($fact:ident,)*) => {
        $(
            #[$test]
            async fn $fact() {
                $crate::facts::$fact($backend).await;
            }
        )*
    };
}

pub(crate) fn status(obj: &DynamicObject) -> Value {
    obj.data.get("status").cloned().unwrap_or_else(|| json!({}))
}

pub(crate) fn cond(obj: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
    let st = status(obj);
    condition(&st, type_).map(|c| {
        let f = |k: &str| c[k].as_str().unwrap_or_default().to_string();
        (f("status"), f("reason"), f("message"))
    })
}

/// The message of the phase [`Setup::hang`] parks a run in.
const HANG_MESSAGE: &str = "Running health checks";

pub async fn fact_1_generation_and_requested_at_queue_but_other_annotations_and_status_do_not(
    b: Backend,
) {
    let s = Setup::new(b, "f1").await;
    s.create(&s.ks("apps", Workload::Plain, false, None)).await;
    assert_eq!(
        s.wait_settled("apps", Mark::default()).await,
        Outcome::Succeeded
    );

    let m = s.mark();
    s.patch(
        "apps",
        json!({ "metadata": { "annotations": { "example.com/other": "x" } } }),
    )
    .await;
    // A condition of another writer (a type Flux does not own).
    let held = s.api.get("apps").await.unwrap();
    let mut conditions = status(&held)["conditions"].as_array().unwrap().clone();
    conditions.push(
        json!({ "type": "Foreign", "status": "True", "reason": "Other",
        "message": "another writer", "lastTransitionTime": "2026-01-01T00:00:00Z" }),
    );
    s.api
        .patch_status(
            "apps",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "conditions": conditions } })),
        )
        .await
        .unwrap();
    s.request("apps", "marker").await;
    assert_eq!(s.wait_settled("apps", m).await, Outcome::Succeeded);
    // Only the requestedAt change queued a reconcile: exactly one start, and it saw the marker.
    let gen1 = s
        .api
        .get("apps")
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap();
    assert_eq!(s.starts("apps", m), vec![(gen1, Some("marker".into()))]);

    let m = s.mark();
    let after = s.patch("apps", s.spec_change("apps-v2")).await;
    assert_eq!(s.wait_settled("apps", m).await, Outcome::Succeeded);
    let gen2 = after.metadata.generation.unwrap();
    assert_eq!(gen2, gen1 + 1);
    assert_eq!(s.starts("apps", m), vec![(gen2, Some("marker".into()))]);
    let held = s.api.get("apps").await.unwrap();
    assert_eq!(status(&held)["observedGeneration"], json!(gen2));
    assert_eq!(
        cond(&held, "Foreign").map(|c| c.2),
        Some("another writer".to_string()),
        "a condition of another writer stays"
    );
}

pub async fn fact_1_interval_timer_requeues_without_any_event(b: Backend) {
    let s = Setup::new(b, "f1i").await;
    let mut obj = s.ks("apps", Workload::Plain, false, None);
    obj.data["spec"]["interval"] = json!("2s");
    let created = s.create(&obj).await;
    s.wait_settled("apps", Mark::default()).await;
    let m = s.mark();
    // No write by anyone: the next run can only come from the interval timer.
    assert_eq!(s.wait_settled("apps", m).await, Outcome::Succeeded);
    let gen_ = created.metadata.generation.unwrap();
    let starts = s.starts("apps", m);
    assert!(!starts.is_empty(), "the timer started a run");
    assert!(starts.iter().all(|st| *st == (gen_, None)), "{starts:?}");
}

pub async fn fact_1_source_revision_bump_queues_and_is_applied(b: Backend) {
    let s = Setup::new(b, "f1r").await;
    s.private_source().await;
    s.create(&s.ks("apps", Workload::Plain, false, None)).await;
    s.wait_settled("apps", Mark::default()).await;
    let m = s.mark();
    let revision = s.bump_source_revision("apps").await;
    assert_eq!(s.wait_settled("apps", m).await, Outcome::Succeeded);
    let held = s.api.get("apps").await.unwrap();
    assert_eq!(status(&held)["lastAppliedRevision"], json!(revision));
    assert_eq!(s.starts("apps", m).len(), 1);
}

pub async fn fact_2_two_events_during_one_reconcile_cause_exactly_one_more(b: Backend) {
    let s = Setup::new(b, "f2").await;
    s.create(&s.ks("apps", Workload::Waiting, false, None))
        .await;
    s.wait_settled("apps", Mark::default()).await;

    s.hang("apps").await;
    let m = s.mark();
    s.request("apps", "a").await;
    s.wait_hanging("apps").await;
    s.request("apps", "b").await;
    let after = s.patch("apps", s.spec_change("changed")).await;
    s.release("apps").await;
    assert_eq!(s.wait_run_seeing("apps", "b", m).await, Outcome::Succeeded);
    // A final marker: anything still queued would run before it or as it.
    let before_final = s.mark();
    s.request("apps", "final").await;
    s.wait_run_seeing("apps", "final", before_final).await;

    let gen_b = after.metadata.generation.unwrap();
    assert_eq!(
        s.starts("apps", m),
        vec![
            (gen_b - 1, Some("a".into())),
            (gen_b, Some("b".into())),
            (gen_b, Some("final".into()))
        ],
        "two events during one reconcile make exactly one more run"
    );
    s.assert_serial("apps");
    let held = s.api.get("apps").await.unwrap();
    assert_eq!(status(&held)["lastHandledReconcileAt"], json!("final"));
}

pub async fn fact_3_suspended_path_records_nonce(b: Backend) {
    let s = Setup::new(b, "f3").await;
    s.create(&s.ks("apps", Workload::Plain, true, None)).await;
    assert_eq!(
        s.wait_settled("apps", Mark::default()).await,
        Outcome::Suspended
    );
    let before = s.api.get("apps").await.unwrap();

    let m = s.mark();
    let requested = s.request("apps", "nonce-1").await;
    assert_eq!(s.wait_settled("apps", m).await, Outcome::Suspended);
    let after = s.api.get("apps").await.unwrap();
    assert_eq!(status(&after)["lastHandledReconcileAt"], json!("nonce-1"));
    assert_ne!(
        after.metadata.resource_version,
        requested.metadata.resource_version
    );
    // Nothing else changed: spec, generation, conditions, finalizers.
    let mut st = status(&after);
    st.as_object_mut().unwrap().remove("lastHandledReconcileAt");
    assert_eq!(st, status(&before));
    assert_eq!(after.data["spec"], before.data["spec"]);
    assert_eq!(after.metadata.generation, before.metadata.generation);
    assert_eq!(after.metadata.finalizers, before.metadata.finalizers);
}

pub async fn fact_3_finalisation_writes_nothing_when_nothing_changed(b: Backend) {
    let s = Setup::new(b, "f3n").await;
    s.create(&s.ks("apps", Workload::Plain, true, Some("n")))
        .await;
    s.wait_settled("apps", Mark::default()).await;
    assert_eq!(
        status(&s.api.get("apps").await.unwrap())["lastHandledReconcileAt"],
        json!("n")
    );

    let m = s.mark();
    let patched = s.patch("apps", s.spec_change("other")).await;
    assert_eq!(s.wait_settled("apps", m).await, Outcome::Suspended);
    let held = s.api.get("apps").await.unwrap();
    assert_eq!(
        held.metadata.resource_version,
        patched.metadata.resource_version
    );
}

pub async fn fact_3_suspended_ready_object_loses_reconciling_at_next_finalisation(b: Backend) {
    let s = Setup::new(b, "f3r").await;
    s.create(&s.ks("apps", Workload::Plain, false, None)).await;
    assert_eq!(
        s.wait_settled("apps", Mark::default()).await,
        Outcome::Succeeded
    );
    // Another writer leaves Reconciling=True next to Ready=True.
    let held = s.api.get("apps").await.unwrap();
    let mut conditions = status(&held)["conditions"].as_array().unwrap().clone();
    conditions.push(
        json!({ "type": RECONCILING, "status": "True", "reason": "Progressing",
        "message": "left behind", "lastTransitionTime": "2026-01-01T00:00:00Z" }),
    );
    s.api
        .patch_status(
            "apps",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "conditions": conditions } })),
        )
        .await
        .unwrap();

    let m = s.mark();
    let suspended = s
        .patch(
            "apps",
            json!({ "metadata": { "annotations": { backend::REQUESTED_AT: "n" } }, "spec": { "suspend": true } }),
        )
        .await;
    assert_eq!(s.wait_settled("apps", m).await, Outcome::Suspended);
    let held = s.api.get("apps").await.unwrap();
    assert_eq!(cond(&held, READY).unwrap().0, "True");
    assert!(
        cond(&held, RECONCILING).is_none(),
        "Ready=True drops Reconciling"
    );
    assert_eq!(
        status(&held)["observedGeneration"],
        json!(suspended.metadata.generation)
    );
    assert_eq!(status(&held)["lastHandledReconcileAt"], json!("n"));
}

pub async fn fact_3_failed_reconcile_keeps_reconciling_with_retry_reason(b: Backend) {
    let s = Setup::new(b, "f3f").await;
    s.create(&s.ks("apps", Workload::Failing, false, None))
        .await;
    assert_eq!(
        s.wait_settled("apps", Mark::default()).await,
        Outcome::Failed
    );
    let held = s.api.get("apps").await.unwrap();
    let (ready, reason, _) = cond(&held, READY).unwrap();
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("False", "HealthCheckFailed")
    );
    let (rec, rec_reason, _) = cond(&held, RECONCILING).unwrap();
    assert_eq!(
        (rec.as_str(), rec_reason.as_str()),
        ("True", "ProgressingWithRetry")
    );
    // Never observed: absent, or the real CRD's default -1 (the model plane's CRD has none).
    let observed = status(&held).get("observedGeneration").cloned();
    assert!(
        matches!(observed, None | Some(Value::Number(_)) if observed.as_ref().is_none_or(|o| *o == json!(-1))),
        "{observed:?}"
    );

    // It keeps failing on each retry until healed.
    let m = s.mark();
    s.request("apps", "retry").await;
    assert_eq!(s.wait_run_seeing("apps", "retry", m).await, Outcome::Failed);
    s.heal("apps").await;
    let m = s.mark();
    s.request("apps", "healed").await;
    assert_eq!(
        s.wait_run_seeing("apps", "healed", m).await,
        Outcome::Succeeded
    );
    let held = s.api.get("apps").await.unwrap();
    assert_eq!(cond(&held, READY).unwrap().0, "True");
    assert!(cond(&held, RECONCILING).is_none());
}

pub async fn fact_4_suspended_object_gets_finalisation_only(b: Backend) {
    let s = Setup::new(b, "f4").await;
    s.create(&s.parent_ks("parent", true, Some("n"))).await;
    assert_eq!(
        s.wait_settled("parent", Mark::default()).await,
        Outcome::Suspended
    );
    let held = s.api.get("parent").await.unwrap();
    assert!(
        status(&held).get("conditions").is_none(),
        "no condition touched"
    );
    assert!(
        status(&held).get("lastAppliedRevision").is_none(),
        "nothing applied"
    );
    assert_eq!(status(&held)["lastHandledReconcileAt"], json!("n"));
    assert!(
        s.api.get_opt("child").await.unwrap().is_none(),
        "the child was not applied"
    );
    assert!(
        s.phases("parent", Mark::default()).is_empty(),
        "no working-path phase ran"
    );
}

pub async fn fact_5_working_path_writes_each_phase_and_ends_ready(b: Backend) {
    let s = Setup::new(b, "f5").await;
    s.hang("apps").await;
    let created = s
        .create(&s.ks("apps", Workload::Waiting, false, None))
        .await;
    s.wait_hanging("apps").await;
    let mid = s.api.get("apps").await.unwrap();
    assert_eq!(cond(&mid, READY).unwrap().0, "Unknown");
    let (rec, reason, message) = cond(&mid, RECONCILING).unwrap();
    assert_eq!((rec.as_str(), reason.as_str()), ("True", "Progressing"));
    assert!(message.starts_with(HANG_MESSAGE), "{message}");
    s.release("apps").await;
    assert_eq!(
        s.wait_settled("apps", Mark::default()).await,
        Outcome::Succeeded
    );

    let phase_rvs = s.phases("apps", Mark::default());
    assert_eq!(
        phase_rvs.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        Phase::ALL.to_vec()
    );
    let mut rvs: Vec<&String> = phase_rvs.iter().map(|(_, rv)| rv).collect();
    rvs.dedup();
    assert_eq!(
        rvs.len(),
        4,
        "each phase moved resourceVersion: {phase_rvs:?}"
    );

    let held = s.api.get("apps").await.unwrap();
    let (ready, reason, _) = cond(&held, READY).unwrap();
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("True", "ReconciliationSucceeded")
    );
    assert!(cond(&held, RECONCILING).is_none());
    assert_eq!(
        status(&held)["observedGeneration"],
        json!(created.metadata.generation)
    );
    assert!(
        status(&held)["lastAppliedRevision"]
            .as_str()
            .unwrap()
            .starts_with(s.revision_prefix())
    );
    assert_eq!(
        held.metadata.finalizers,
        Some(vec!["finalizers.fluxcd.io".to_string()])
    );
}

/// A working path without `wait` or `healthChecks` has no health phase.
pub async fn fact_5_no_health_phase_without_wait_or_health_checks(b: Backend) {
    let s = Setup::new(b, "f5n").await;
    s.create(&s.ks("apps", Workload::Plain, false, None)).await;
    assert_eq!(
        s.wait_settled("apps", Mark::default()).await,
        Outcome::Succeeded
    );
    let phases: Vec<Phase> = s
        .phases("apps", Mark::default())
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert_eq!(phases, vec![Phase::Fetch, Phase::Build, Phase::Apply]);
    let held = s.api.get("apps").await.unwrap();
    assert!(cond(&held, "Healthy").is_none(), "no Healthy condition");
}

pub async fn fact_8_in_flight_reconcile_is_not_stopped_by_suspend_and_the_ack_follows_it(
    b: Backend,
) {
    let s = Setup::new(b, "f8").await;
    s.create(&s.ks("apps", Workload::Waiting, false, None))
        .await;
    s.wait_settled("apps", Mark::default()).await;
    s.hang("apps").await;
    s.request("apps", "go").await;
    s.wait_hanging("apps").await;

    let m = s.mark();
    s.patch(
        "apps",
        json!({ "metadata": { "annotations": { backend::REQUESTED_AT: "pause-1" } }, "spec": { "suspend": true } }),
    )
    .await;
    // Still in flight: the acknowledgement cannot exist yet.
    let mid = s.api.get("apps").await.unwrap();
    assert_ne!(status(&mid)["lastHandledReconcileAt"], json!("pause-1"));
    assert_eq!(cond(&mid, RECONCILING).unwrap().0, "True");
    s.release("apps").await;

    assert_eq!(s.wait_settled("apps", m).await, Outcome::Succeeded);
    assert_eq!(
        s.wait_run_seeing("apps", "pause-1", m).await,
        Outcome::Suspended
    );
    let held = s.api.get("apps").await.unwrap();
    // The in-flight run finished: Ready=True is its last write, the suspended run adds none.
    assert_eq!(
        cond(&held, READY).unwrap().0,
        "True",
        "the in-flight run finished"
    );
    assert_eq!(cond(&held, "Healthy").unwrap().0, "True");
    assert_eq!(status(&held)["lastHandledReconcileAt"], json!("pause-1"));
    s.assert_serial("apps");
}

pub async fn fact_9_restart_mid_reconcile_leaves_reconciling_frozen_while_suspended(b: Backend) {
    let s = Setup::new(b, "f9").await;
    s.create(&s.ks("apps", Workload::Waiting, false, None))
        .await;
    s.wait_settled("apps", Mark::default()).await;
    s.hang("apps").await;
    s.request("apps", "go").await;
    s.wait_hanging("apps").await;
    s.patch(
        "apps",
        json!({ "metadata": { "annotations": { backend::REQUESTED_AT: "pause" } }, "spec": { "suspend": true } }),
    )
    .await;
    let m = s.mark();
    s.restart().await;
    assert_eq!(s.wait_settled("apps", m).await, Outcome::Suspended);
    s.release("apps").await;

    let held = s.api.get("apps").await.unwrap();
    assert_eq!(
        cond(&held, READY).unwrap().0,
        "Unknown",
        "Ready=Unknown frozen"
    );
    let (rec, _, message) = cond(&held, RECONCILING).unwrap();
    assert_eq!(rec, "True", "Reconciling=True frozen");
    assert!(message.starts_with(HANG_MESSAGE), "{message}");
    assert_eq!(status(&held)["lastHandledReconcileAt"], json!("pause"));
}

pub async fn fact_10_observed_generation_lags_while_unhealthy_and_suspended(b: Backend) {
    let s = Setup::new(b, "f10").await;
    let created = s.create(&s.ks("apps", Workload::Plain, false, None)).await;
    s.wait_settled("apps", Mark::default()).await;
    let good_gen = created.metadata.generation.unwrap();

    let m = s.mark();
    s.patch("apps", s.broken_spec("apps")).await;
    assert_eq!(s.wait_settled("apps", m).await, Outcome::Failed);
    let m = s.mark();
    let suspended = s
        .patch("apps", json!({ "spec": { "suspend": true } }))
        .await;
    assert_eq!(s.wait_settled("apps", m).await, Outcome::Suspended);

    let held = s.api.get("apps").await.unwrap();
    assert_eq!(held.metadata.generation, Some(good_gen + 2));
    assert_eq!(suspended.metadata.generation, Some(good_gen + 2));
    assert_eq!(
        status(&held)["observedGeneration"],
        json!(good_gen),
        "observedGeneration lags"
    );
    assert_eq!(cond(&held, READY).unwrap().0, "False");
    let (rec, reason, _) = cond(&held, RECONCILING).unwrap();
    assert_eq!(
        (rec.as_str(), reason.as_str()),
        ("True", "ProgressingWithRetry")
    );
}

pub async fn fact_1_competing_writer_annotation_and_resource_version_bump_queue_nothing(
    b: Backend,
) {
    let s = Setup::new(b, "f1w").await;
    s.create(&s.ks("apps", Workload::Waiting, false, None))
        .await;
    s.wait_settled("apps", Mark::default()).await;
    let before = s.api.get("apps").await.unwrap();

    // The competing writer writes while a run is in flight.
    s.hang("apps").await;
    let m = s.mark();
    s.request("apps", "one").await;
    s.wait_hanging("apps").await;
    s.compete_annotate("apps", "example.com/note", "x").await;
    s.compete_bump("apps").await;
    s.release("apps").await;
    assert_eq!(
        s.wait_run_seeing("apps", "one", m).await,
        Outcome::Succeeded
    );
    let before_final = s.mark();
    s.request("apps", "final").await;
    s.wait_run_seeing("apps", "final", before_final).await;

    let held = s.api.get("apps").await.unwrap();
    let annotations = held.metadata.annotations.clone().unwrap();
    assert_eq!(annotations["example.com/note"], "x");
    assert!(annotations.contains_key(BUMP_ANNOTATION));
    assert_eq!(held.metadata.generation, before.metadata.generation);
    let runs: Vec<Option<String>> = s.starts("apps", m).into_iter().map(|(_, r)| r).collect();
    assert_eq!(
        runs,
        vec![Some("one".to_string()), Some("final".to_string())]
    );
    // The writes were the competing writer's: its field manager owns the annotations.
    let managers: Vec<String> = held
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| e.manager)
        .collect();
    assert!(
        managers.iter().any(|m| m == COMPETING_WRITER),
        "{managers:?}"
    );
}
