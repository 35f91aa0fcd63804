//! Tier 2: the Flux controller model against docs/design/flux-model.md facts 1–5, 8–10, on the
//! real kube-apiserver. Every test asserts what the server holds, and awaits the model's own
//! events instead of sleeping.

use flux_model::model::status::{READY, RECONCILING, condition};
use flux_model::model::{FluxModel, ModelConfig, ModelEvent, ModelHandle, Outcome, Phase, Touch};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::TestNs;
use testkit::fixtures::{kustomization, kustomization_resource};

const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

struct Setup {
    _ns: TestNs,
    api: Api<DynamicObject>,
    model: ModelHandle,
}

async fn setup(prefix: &str) -> Setup {
    let ns = TestNs::new(prefix).await.unwrap();
    let api = Api::namespaced_with(ns.client.clone(), &ns.name, &kustomization_resource());
    let model = FluxModel::start(ns.client.clone(), ModelConfig::namespaced(&ns.name));
    Setup {
        _ns: ns,
        api,
        model,
    }
}

async fn create(s: &Setup, obj: &DynamicObject) -> DynamicObject {
    s.api.create(&PostParams::default(), obj).await.unwrap()
}

/// A merge patch by a writer that is neither Flux nor kubectl.
async fn patch(s: &Setup, name: &str, body: Value) -> DynamicObject {
    let pp = PatchParams {
        field_manager: Some("test-writer".into()),
        ..PatchParams::default()
    };
    s.api.patch(name, &pp, &Patch::Merge(body)).await.unwrap()
}

async fn request(s: &Setup, name: &str, nonce: &str) -> DynamicObject {
    patch(
        s,
        name,
        json!({ "metadata": { "annotations": { REQUESTED_AT: nonce } } }),
    )
    .await
}

fn status(obj: &DynamicObject) -> Value {
    obj.data.get("status").cloned().unwrap_or_else(|| json!({}))
}

fn cond(obj: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
    let st = status(obj);
    condition(&st, type_).map(|c| {
        let f = |k: &str| c[k].as_str().unwrap_or_default().to_string();
        (f("status"), f("reason"), f("message"))
    })
}

/// Started events of `name` since `mark`: (generation, requestedAt).
fn starts(model: &ModelHandle, ns: &str, name: &str, mark: usize) -> Vec<(i64, Option<String>)> {
    let key = format!("{ns}/{name}");
    model.events()[mark..]
        .iter()
        .filter_map(|e| match e {
            ModelEvent::Started {
                key: k,
                generation,
                requested_at,
                ..
            } if *k == key => Some((*generation, requested_at.clone())),
            _ => None,
        })
        .collect()
}

/// Checks that no two reconciles of `key` ever overlapped in the event log.
fn assert_serial(model: &ModelHandle, key: &str) {
    let mut running = false;
    for e in model.events() {
        match e {
            ModelEvent::Started { key: k, .. } if k == key => {
                assert!(!running, "two reconciles of {key} at once");
                running = true;
            }
            ModelEvent::Finished { key: k, .. } if k == key => running = false,
            _ => {}
        }
    }
}

#[tokio::test]
async fn fact_1_generation_and_requested_at_queue_but_other_annotations_and_status_do_not() {
    let s = setup("model-f1").await;
    let ns = s.api.namespace().unwrap().to_string();
    create(&s, &kustomization("apps").build(&ns)).await;
    assert_eq!(
        s.model.wait_settled("apps", 0).await.unwrap(),
        Outcome::Succeeded
    );

    let m = s.model.mark();
    patch(
        &s,
        "apps",
        json!({ "metadata": { "annotations": { "example.com/other": "x" } } }),
    )
    .await;
    s.api
        .patch_status(
            "apps",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "foreign": "value" } })),
        )
        .await
        .unwrap();
    request(&s, "apps", "marker").await;
    assert_eq!(
        s.model.wait_settled("apps", m).await.unwrap(),
        Outcome::Succeeded
    );
    // Only the requestedAt change queued a reconcile: exactly one start, and it saw the marker.
    let gen1 = s
        .api
        .get("apps")
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap();
    assert_eq!(
        starts(&s.model, &ns, "apps", m),
        vec![(gen1, Some("marker".into()))]
    );

    let m = s.model.mark();
    let after = patch(&s, "apps", json!({ "spec": { "path": "./apps-v2" } })).await;
    assert_eq!(
        s.model.wait_settled("apps", m).await.unwrap(),
        Outcome::Succeeded
    );
    let gen2 = after.metadata.generation.unwrap();
    assert_eq!(gen2, gen1 + 1);
    assert_eq!(
        starts(&s.model, &ns, "apps", m),
        vec![(gen2, Some("marker".into()))]
    );
    let held = s.api.get("apps").await.unwrap();
    assert_eq!(status(&held)["observedGeneration"], json!(gen2));
    assert_eq!(
        status(&held)["foreign"],
        json!("value"),
        "a status field of another writer stays"
    );
}

#[tokio::test]
async fn fact_1_source_revision_bump_queues_and_is_applied() {
    let s = setup("model-f1r").await;
    let ns = s.api.namespace().unwrap().to_string();
    create(&s, &kustomization("apps").build(&ns)).await;
    s.model.wait_settled("apps", 0).await.unwrap();
    let m = s.model.mark();
    let revision = s.model.bump_source_revision("apps");
    assert_eq!(
        s.model.wait_settled("apps", m).await.unwrap(),
        Outcome::Succeeded
    );
    let held = s.api.get("apps").await.unwrap();
    assert_eq!(status(&held)["lastAppliedRevision"], json!(revision));
    assert_eq!(starts(&s.model, &ns, "apps", m).len(), 1);
}

#[tokio::test]
async fn fact_1_interval_timer_requeues_without_any_event() {
    let s = setup("model-f1i").await;
    let ns = s.api.namespace().unwrap().to_string();
    let mut obj = kustomization("apps").build(&ns);
    obj.data["spec"]["interval"] = json!("1s");
    let created = create(&s, &obj).await;
    s.model.wait_settled("apps", 0).await.unwrap();
    let m = s.model.mark();
    // No write by anyone: the next run can only come from the interval timer.
    assert_eq!(
        s.model.wait_settled("apps", m).await.unwrap(),
        Outcome::Succeeded
    );
    let gen_ = created.metadata.generation.unwrap();
    assert_eq!(starts(&s.model, &ns, "apps", m), vec![(gen_, None)]);
}

#[tokio::test]
async fn fact_2_two_events_during_one_reconcile_cause_exactly_one_more() {
    let s = setup("model-f2").await;
    let ns = s.api.namespace().unwrap().to_string();
    create(&s, &kustomization("apps").build(&ns)).await;
    s.model.wait_settled("apps", 0).await.unwrap();

    s.model.hang_at("apps", Phase::Build);
    let m = s.model.mark();
    request(&s, "apps", "a").await;
    s.model.wait_hanging("apps").await.unwrap();
    request(&s, "apps", "b").await;
    let after = patch(&s, "apps", json!({ "spec": { "path": "./changed" } })).await;
    s.model.release("apps");
    assert_eq!(
        s.model.wait_run_seeing("apps", "b", m).await.unwrap(),
        Outcome::Succeeded
    );
    // A final marker: anything still queued would run before it or as it.
    let before_final = s.model.mark();
    request(&s, "apps", "final").await;
    s.model
        .wait_run_seeing("apps", "final", before_final)
        .await
        .unwrap();

    let gen_b = after.metadata.generation.unwrap();
    let runs = starts(&s.model, &ns, "apps", m);
    assert_eq!(
        runs,
        vec![
            (gen_b - 1, Some("a".into())),
            (gen_b, Some("b".into())),
            (gen_b, Some("final".into()))
        ],
        "two events during one reconcile make exactly one more run"
    );
    assert_serial(&s.model, &format!("{ns}/apps"));
    let held = s.api.get("apps").await.unwrap();
    assert_eq!(status(&held)["lastHandledReconcileAt"], json!("final"));
}

#[tokio::test]
async fn fact_3_suspended_path_records_nonce() {
    let s = setup("model-f3").await;
    let ns = s.api.namespace().unwrap().to_string();
    create(&s, &kustomization("apps").suspended().build(&ns)).await;
    assert_eq!(
        s.model.wait_settled("apps", 0).await.unwrap(),
        Outcome::Suspended
    );
    let before = s.api.get("apps").await.unwrap();

    let m = s.model.mark();
    let requested = request(&s, "apps", "nonce-1").await;
    assert_eq!(
        s.model.wait_settled("apps", m).await.unwrap(),
        Outcome::Suspended
    );
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

#[tokio::test]
async fn fact_3_finalisation_writes_nothing_when_nothing_changed() {
    let s = setup("model-f3n").await;
    let ns = s.api.namespace().unwrap().to_string();
    create(
        &s,
        &kustomization("apps")
            .suspended()
            .annotated(REQUESTED_AT, "n")
            .build(&ns),
    )
    .await;
    s.model.wait_settled("apps", 0).await.unwrap();
    assert_eq!(
        status(&s.api.get("apps").await.unwrap())["lastHandledReconcileAt"],
        json!("n")
    );

    let m = s.model.mark();
    let patched = patch(&s, "apps", json!({ "spec": { "path": "./other" } })).await;
    assert_eq!(
        s.model.wait_settled("apps", m).await.unwrap(),
        Outcome::Suspended
    );
    let held = s.api.get("apps").await.unwrap();
    assert_eq!(
        held.metadata.resource_version,
        patched.metadata.resource_version
    );
}

#[tokio::test]
async fn fact_3_suspended_ready_object_loses_reconciling_at_next_finalisation() {
    let s = setup("model-f3r").await;
    let ns = s.api.namespace().unwrap().to_string();
    create(&s, &kustomization("apps").build(&ns)).await;
    assert_eq!(
        s.model.wait_settled("apps", 0).await.unwrap(),
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

    let m = s.model.mark();
    let suspended = patch(
        &s,
        "apps",
        json!({ "metadata": { "annotations": { REQUESTED_AT: "n" } }, "spec": { "suspend": true } }),
    )
    .await;
    assert_eq!(
        s.model.wait_settled("apps", m).await.unwrap(),
        Outcome::Suspended
    );
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

#[tokio::test]
async fn fact_3_failed_reconcile_keeps_reconciling_with_retry_reason() {
    let s = setup("model-f3f").await;
    let ns = s.api.namespace().unwrap().to_string();
    s.model.fail_at("apps", Phase::Health);
    create(&s, &kustomization("apps").build(&ns)).await;
    assert_eq!(
        s.model.wait_settled("apps", 0).await.unwrap(),
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
    assert!(status(&held).get("observedGeneration").is_none());

    // It keeps failing on each retry until healed.
    let m = s.model.mark();
    request(&s, "apps", "retry").await;
    assert_eq!(
        s.model.wait_settled("apps", m).await.unwrap(),
        Outcome::Failed
    );
    s.model.heal("apps");
    let m = s.model.mark();
    request(&s, "apps", "healed").await;
    assert_eq!(
        s.model.wait_settled("apps", m).await.unwrap(),
        Outcome::Succeeded
    );
    let held = s.api.get("apps").await.unwrap();
    assert_eq!(cond(&held, READY).unwrap().0, "True");
    assert!(cond(&held, RECONCILING).is_none());
}

#[tokio::test]
async fn fact_4_suspended_object_gets_finalisation_only() {
    let s = setup("model-f4").await;
    let ns = s.api.namespace().unwrap().to_string();
    let child = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": { "name": "child" },
        "spec": { "interval": "10m", "path": "./child", "prune": true, "suspend": false,
                  "sourceRef": { "kind": "GitRepository", "name": "flux-system" } },
    });
    s.model.set_git("parent", vec![child]);
    create(
        &s,
        &kustomization("parent")
            .suspended()
            .annotated(REQUESTED_AT, "n")
            .build(&ns),
    )
    .await;
    assert_eq!(
        s.model.wait_settled("parent", 0).await.unwrap(),
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
        !s.model
            .events()
            .iter()
            .any(|e| matches!(e, ModelEvent::Phase { .. })),
        "no working-path phase ran"
    );
}

#[tokio::test]
async fn fact_5_working_path_writes_each_phase_and_ends_ready() {
    let s = setup("model-f5").await;
    let ns = s.api.namespace().unwrap().to_string();
    s.model.hang_at("apps", Phase::Build);
    let created = create(&s, &kustomization("apps").build(&ns)).await;
    s.model.wait_hanging("apps").await.unwrap();
    let mid = s.api.get("apps").await.unwrap();
    assert_eq!(cond(&mid, READY).unwrap().0, "Unknown");
    let (rec, reason, message) = cond(&mid, RECONCILING).unwrap();
    assert_eq!((rec.as_str(), reason.as_str()), ("True", "Progressing"));
    assert!(message.starts_with("Building manifests"), "{message}");
    s.model.release("apps");
    assert_eq!(
        s.model.wait_settled("apps", 0).await.unwrap(),
        Outcome::Succeeded
    );

    let key = format!("{ns}/apps");
    let phase_rvs: Vec<(Phase, String)> = s
        .model
        .events()
        .into_iter()
        .filter_map(|e| match e {
            ModelEvent::Phase {
                key: k,
                phase,
                resource_version,
                ..
            } if k == key => Some((phase, resource_version)),
            _ => None,
        })
        .collect();
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
            .starts_with("main@sha1:")
    );
    assert_eq!(
        held.metadata.finalizers,
        Some(vec!["finalizers.fluxcd.io".to_string()])
    );
}

#[tokio::test]
async fn fact_8_in_flight_reconcile_is_not_stopped_by_suspend_and_the_ack_follows_it() {
    let s = setup("model-f8").await;
    let ns = s.api.namespace().unwrap().to_string();
    create(&s, &kustomization("apps").build(&ns)).await;
    s.model.wait_settled("apps", 0).await.unwrap();
    let revision = s.model.bump_source_revision("apps");
    s.model.hang_at("apps", Phase::Apply);
    s.model.wait_hanging("apps").await.unwrap();

    let m = s.model.mark();
    patch(
        &s,
        "apps",
        json!({ "metadata": { "annotations": { REQUESTED_AT: "pause-1" } }, "spec": { "suspend": true } }),
    )
    .await;
    // Still in flight: the acknowledgement cannot exist yet.
    let mid = s.api.get("apps").await.unwrap();
    assert_ne!(status(&mid)["lastHandledReconcileAt"], json!("pause-1"));
    assert_eq!(cond(&mid, RECONCILING).unwrap().0, "True");
    s.model.release("apps");

    assert_eq!(
        s.model.wait_finished("apps", m).await.unwrap(),
        Outcome::Succeeded
    );
    assert_eq!(
        s.model.wait_run_seeing("apps", "pause-1", m).await.unwrap(),
        Outcome::Suspended
    );
    let held = s.api.get("apps").await.unwrap();
    assert_eq!(
        status(&held)["lastAppliedRevision"],
        json!(revision),
        "the in-flight run finished"
    );
    assert_eq!(status(&held)["lastHandledReconcileAt"], json!("pause-1"));
    assert_serial(&s.model, &format!("{ns}/apps"));
}

#[tokio::test]
async fn fact_9_restart_mid_reconcile_leaves_reconciling_frozen_while_suspended() {
    let s = setup("model-f9").await;
    let ns = s.api.namespace().unwrap().to_string();
    create(&s, &kustomization("apps").build(&ns)).await;
    s.model.wait_settled("apps", 0).await.unwrap();
    s.model.hang_at("apps", Phase::Build);
    request(&s, "apps", "go").await;
    s.model.wait_hanging("apps").await.unwrap();
    patch(
        &s,
        "apps",
        json!({ "metadata": { "annotations": { REQUESTED_AT: "pause" } }, "spec": { "suspend": true } }),
    )
    .await;
    let m = s.model.mark();
    s.model.restart().await;
    assert_eq!(
        s.model.wait_settled("apps", m).await.unwrap(),
        Outcome::Suspended
    );
    s.model.release("apps");

    let held = s.api.get("apps").await.unwrap();
    assert_eq!(
        cond(&held, READY).unwrap().0,
        "Unknown",
        "Ready=Unknown frozen"
    );
    let (rec, _, message) = cond(&held, RECONCILING).unwrap();
    assert_eq!(rec, "True", "Reconciling=True frozen");
    assert!(message.starts_with("Building manifests"), "{message}");
    assert_eq!(status(&held)["lastHandledReconcileAt"], json!("pause"));
    assert!(
        s.model
            .events()
            .iter()
            .any(|e| matches!(e, ModelEvent::Restarted { count: 1 })),
        "the restart is recorded"
    );
}

#[tokio::test]
async fn fact_9_restart_at_phase_after_a_competing_suspend_freezes_reconciling() {
    let s = setup("model-f9k").await;
    let ns = s.api.namespace().unwrap().to_string();
    create(&s, &kustomization("apps").build(&ns)).await;
    s.model.wait_settled("apps", 0).await.unwrap();
    s.model
        .touch_at("apps", Phase::Build, "apps", Touch::SetSuspend(true));
    s.model.restart_at("apps", Phase::Apply);
    let m = s.model.mark();
    request(&s, "apps", "go").await;
    s.model
        .wait_for(m, |e| matches!(e, ModelEvent::Restarted { .. }))
        .await
        .unwrap();
    assert_eq!(
        s.model.wait_settled("apps", m).await.unwrap(),
        Outcome::Suspended
    );

    let held = s.api.get("apps").await.unwrap();
    assert_eq!(held.data["spec"]["suspend"], json!(true));
    assert_eq!(cond(&held, READY).unwrap().0, "Unknown");
    let (rec, _, message) = cond(&held, RECONCILING).unwrap();
    assert_eq!(rec, "True");
    assert!(message.starts_with("Applying manifests"), "{message}");
}

#[tokio::test]
async fn fact_10_observed_generation_lags_while_unhealthy_and_suspended() {
    let s = setup("model-f10").await;
    let ns = s.api.namespace().unwrap().to_string();
    let created = create(&s, &kustomization("apps").build(&ns)).await;
    s.model.wait_settled("apps", 0).await.unwrap();
    let good_gen = created.metadata.generation.unwrap();

    s.model.fail_at("apps", Phase::Build);
    let m = s.model.mark();
    patch(&s, "apps", json!({ "spec": { "path": "./broken" } })).await;
    assert_eq!(
        s.model.wait_settled("apps", m).await.unwrap(),
        Outcome::Failed
    );
    let m = s.model.mark();
    let suspended = patch(&s, "apps", json!({ "spec": { "suspend": true } })).await;
    assert_eq!(
        s.model.wait_settled("apps", m).await.unwrap(),
        Outcome::Suspended
    );

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

#[tokio::test]
async fn fact_1_competing_writer_annotation_and_resource_version_bump_queue_nothing() {
    let s = setup("model-f1w").await;
    let ns = s.api.namespace().unwrap().to_string();
    create(&s, &kustomization("apps").build(&ns)).await;
    s.model.wait_settled("apps", 0).await.unwrap();
    let before = s.api.get("apps").await.unwrap();

    let note = Touch::Annotate {
        key: "example.com/note".into(),
        value: "x".into(),
    };
    s.model.touch_at("apps", Phase::Fetch, "apps", note);
    s.model
        .touch_at("apps", Phase::Health, "apps", Touch::BumpResourceVersion);
    let m = s.model.mark();
    request(&s, "apps", "one").await;
    assert_eq!(
        s.model.wait_run_seeing("apps", "one", m).await.unwrap(),
        Outcome::Succeeded
    );
    let touched = s.model.events()[m..]
        .iter()
        .filter(|e| matches!(e, ModelEvent::Touched { .. }))
        .count();
    assert_eq!(touched, 2);
    let before_final = s.model.mark();
    request(&s, "apps", "final").await;
    s.model
        .wait_run_seeing("apps", "final", before_final)
        .await
        .unwrap();

    let held = s.api.get("apps").await.unwrap();
    let annotations = held.metadata.annotations.clone().unwrap();
    assert_eq!(annotations["example.com/note"], "x");
    assert!(annotations.contains_key(flux_model::model::BUMP_ANNOTATION));
    assert_eq!(held.metadata.generation, before.metadata.generation);
    let runs: Vec<Option<String>> = starts(&s.model, &ns, "apps", m)
        .into_iter()
        .map(|(_, r)| r)
        .collect();
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
        managers
            .iter()
            .any(|m| m == flux_model::model::COMPETING_WRITER),
        "{managers:?}"
    );
}
