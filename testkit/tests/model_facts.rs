//! Tier 2: the Flux controller model against docs/design/flux-model.md facts 1–5, 8–10, on the
//! real kube-apiserver. The fact bodies live in `facts/` and run here against the model and in
//! `real_flux.rs` against the real kustomize-controller, under the same names; the two tests at
//! the end drive knobs real Flux lacks (docs/real-flux.md says why). Every test asserts what the
//! server holds, and awaits the model's own events instead of sleeping.

mod facts;

use facts::Backend;

#[tokio::test]
async fn fact_1_generation_and_requested_at_queue_but_other_annotations_and_status_do_not() {
    facts::fact_1_generation_and_requested_at_queue_but_other_annotations_and_status_do_not(
        Backend::Model,
    )
    .await;
}

#[tokio::test]
async fn fact_1_interval_timer_requeues_without_any_event() {
    facts::fact_1_interval_timer_requeues_without_any_event(Backend::Model).await;
}

#[tokio::test]
async fn fact_1_competing_writer_annotation_and_resource_version_bump_queue_nothing() {
    facts::fact_1_competing_writer_annotation_and_resource_version_bump_queue_nothing(
        Backend::Model,
    )
    .await;
}

#[tokio::test]
async fn fact_2_two_events_during_one_reconcile_cause_exactly_one_more() {
    facts::fact_2_two_events_during_one_reconcile_cause_exactly_one_more(Backend::Model).await;
}

#[tokio::test]
async fn fact_3_suspended_path_records_nonce() {
    facts::fact_3_suspended_path_records_nonce(Backend::Model).await;
}

#[tokio::test]
async fn fact_3_finalisation_writes_nothing_when_nothing_changed() {
    facts::fact_3_finalisation_writes_nothing_when_nothing_changed(Backend::Model).await;
}

#[tokio::test]
async fn fact_3_suspended_ready_object_loses_reconciling_at_next_finalisation() {
    facts::fact_3_suspended_ready_object_loses_reconciling_at_next_finalisation(Backend::Model)
        .await;
}

#[tokio::test]
async fn fact_3_failed_reconcile_keeps_reconciling_with_retry_reason() {
    facts::fact_3_failed_reconcile_keeps_reconciling_with_retry_reason(Backend::Model).await;
}

#[tokio::test]
async fn fact_4_suspended_object_gets_finalisation_only() {
    facts::fact_4_suspended_object_gets_finalisation_only(Backend::Model).await;
}

#[tokio::test]
async fn fact_5_working_path_writes_each_phase_and_ends_ready() {
    facts::fact_5_working_path_writes_each_phase_and_ends_ready(Backend::Model).await;
}

#[tokio::test]
async fn fact_5_no_health_phase_without_wait_or_health_checks() {
    facts::fact_5_no_health_phase_without_wait_or_health_checks(Backend::Model).await;
}

#[tokio::test]
async fn fact_8_in_flight_reconcile_is_not_stopped_by_suspend_and_the_ack_follows_it() {
    facts::fact_8_in_flight_reconcile_is_not_stopped_by_suspend_and_the_ack_follows_it(
        Backend::Model,
    )
    .await;
}

#[tokio::test]
async fn fact_9_restart_mid_reconcile_leaves_reconciling_frozen_while_suspended() {
    facts::fact_9_restart_mid_reconcile_leaves_reconciling_frozen_while_suspended(Backend::Model)
        .await;
}

#[tokio::test]
async fn fact_10_observed_generation_lags_while_unhealthy_and_suspended() {
    facts::fact_10_observed_generation_lags_while_unhealthy_and_suspended(Backend::Model).await;
}

// Model-only facts: a test's own source revision bump, and a restart at a chosen phase after a
// competing write.

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::TestNs;
use testkit::fixtures::{kustomization, kustomization_resource};
use testkit::model::status::{READY, RECONCILING, condition};
use testkit::model::{FluxModel, ModelConfig, ModelEvent, ModelHandle, Outcome, Phase, Touch};

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

fn status(obj: &DynamicObject) -> Value {
    obj.data.get("status").cloned().unwrap_or_else(|| json!({}))
}

fn cond(obj: &DynamicObject, type_: &str) -> Option<(String, String)> {
    let st = status(obj);
    condition(&st, type_).map(|c| {
        let f = |k: &str| c[k].as_str().unwrap_or_default().to_string();
        (f("status"), f("message"))
    })
}

#[tokio::test]
async fn fact_1_source_revision_bump_queues_and_is_applied() {
    let s = setup("model-f1r").await;
    let ns = s.api.namespace().unwrap().to_string();
    s.api
        .create(&PostParams::default(), &kustomization("apps").build(&ns))
        .await
        .unwrap();
    s.model.wait_settled("apps", 0).await.unwrap();
    let m = s.model.mark();
    let revision = s.model.bump_source_revision("apps");
    assert_eq!(
        s.model.wait_settled("apps", m).await.unwrap(),
        Outcome::Succeeded
    );
    let held = s.api.get("apps").await.unwrap();
    assert_eq!(status(&held)["lastAppliedRevision"], json!(revision));
    let key = format!("{ns}/apps");
    let starts = s.model.events()[m..]
        .iter()
        .filter(|e| matches!(e, ModelEvent::Started { key: k, .. } if *k == key))
        .count();
    assert_eq!(starts, 1);
}

#[tokio::test]
async fn fact_9_restart_at_phase_after_a_competing_suspend_freezes_reconciling() {
    let s = setup("model-f9k").await;
    let ns = s.api.namespace().unwrap().to_string();
    s.api
        .create(&PostParams::default(), &kustomization("apps").build(&ns))
        .await
        .unwrap();
    s.model.wait_settled("apps", 0).await.unwrap();
    s.model
        .touch_at("apps", Phase::Build, "apps", Touch::SetSuspend(true));
    s.model.restart_at("apps", Phase::Apply);
    let m = s.model.mark();
    let pp = PatchParams {
        field_manager: Some("test-writer".into()),
        ..PatchParams::default()
    };
    s.api
        .patch(
            "apps",
            &pp,
            &Patch::Merge(json!({ "metadata": { "annotations": { REQUESTED_AT: "go" } } })),
        )
        .await
        .unwrap();
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
    let (rec, message) = cond(&held, RECONCILING).unwrap();
    assert_eq!(rec, "True");
    assert!(message.starts_with("Detecting drift"), "{message}");
}

/// Fact 3: the deferred patch attempts all three parts and aggregates the errors (runtime
/// `patch/patch.go:223-235`), so a failed conditions part does not stop
/// `lastHandledReconcileAt`. An admission policy of the test's namespace denies every status
/// write that changes conditions.
#[tokio::test]
async fn fact_3_nonce_is_recorded_even_when_the_conditions_patch_fails() {
    let s = setup("model-f3c").await;
    let ns = s.api.namespace().unwrap().to_string();
    s.api
        .create(&PostParams::default(), &kustomization("apps").build(&ns))
        .await
        .unwrap();
    assert_eq!(
        s.model.wait_settled("apps", 0).await.unwrap(),
        Outcome::Succeeded
    );
    // Another writer leaves Reconciling=True beside Ready=True: the next finalisation has a
    // conditions part (it drops Reconciling) and a status part (the nonce).
    let held = s.api.get("apps").await.unwrap();
    let mut conditions = status(&held)["conditions"].as_array().unwrap().clone();
    conditions.push(
        json!({ "type": RECONCILING, "status": "True", "reason": "Progressing",
        "message": "left behind", "lastTransitionTime": "2026-01-01T00:00:00Z" }),
    );
    let drop_reconciling =
        json!({ "status": { "conditions": conditions[..conditions.len() - 1] } });
    s.api
        .patch_status(
            "apps",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "conditions": conditions } })),
        )
        .await
        .unwrap();
    let policy = ConditionsFrozen::install(&s.api, &ns, &drop_reconciling).await;

    let m = s.model.mark();
    let pp = PatchParams {
        field_manager: Some("test-writer".into()),
        ..PatchParams::default()
    };
    let body = json!({ "metadata": { "annotations": { REQUESTED_AT: "n" } }, "spec": { "suspend": true } });
    s.api.patch("apps", &pp, &Patch::Merge(body)).await.unwrap();
    let outcome = s.model.wait_finished("apps", m).await.unwrap();
    assert!(matches!(outcome, Outcome::Error(_)), "{outcome:?}");
    let held = s.api.get("apps").await.unwrap();
    assert_eq!(status(&held)["lastHandledReconcileAt"], json!("n"));
    assert_eq!(
        cond(&held, RECONCILING).unwrap().0,
        "True",
        "the conditions part was denied"
    );
    policy.remove().await;
}

/// A `ValidatingAdmissionPolicy` (and binding) denying status writes that change conditions of
/// Kustomizations in one namespace.
struct ConditionsFrozen {
    client: kube::Client,
    name: String,
}

impl ConditionsFrozen {
    async fn install(api: &Api<DynamicObject>, ns: &str, probe: &Value) -> Self {
        use k8s_openapi::api::admissionregistration::v1::{
            ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
        };
        let client = kube::Client::try_from(testkit::admin_config().await.unwrap()).unwrap();
        let name = format!("frozen-conditions-{ns}");
        let conds = |o: &str| {
            format!("(has({o}.status) && has({o}.status.conditions) ? {o}.status.conditions : [])")
        };
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": ns } },
                    "resourceRules": [{
                        "apiGroups": ["kustomize.toolkit.fluxcd.io"], "apiVersions": ["*"],
                        "operations": ["UPDATE"], "resources": ["kustomizations/status"],
                    }],
                },
                "validations": [{
                    "expression": format!("{} == {}", conds("object"), conds("oldObject")),
                    "message": "conditions are frozen by the test",
                }],
            },
        }))
        .unwrap();
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "policyName": name, "validationActions": ["Deny"] },
        }))
        .unwrap();
        Api::<ValidatingAdmissionPolicy>::all(client.clone())
            .create(&PostParams::default(), &policy)
            .await
            .unwrap();
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
        // In force once a dry-run conditions change is denied (bounded).
        let dry = PatchParams {
            dry_run: true,
            ..PatchParams::default()
        };
        let start = std::time::Instant::now();
        while api
            .patch_status("apps", &dry, &Patch::Merge(probe))
            .await
            .is_ok()
        {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "the admission policy never came into force"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Self { client, name }
    }

    /// Deletes the binding and the policy.
    async fn remove(self) {
        use k8s_openapi::api::admissionregistration::v1::{
            ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
        };
        let dp = kube::api::DeleteParams::default();
        Api::<ValidatingAdmissionPolicyBinding>::all(self.client.clone())
            .delete(&self.name, &dp)
            .await
            .unwrap();
        Api::<ValidatingAdmissionPolicy>::all(self.client)
            .delete(&self.name, &dp)
            .await
            .unwrap();
    }
}

/// helm-controller observes the generation on every clean return, the suspended one included
/// (hc `internal/controller/helmrelease_controller.go:153-155`; seen with helm-controller
/// v1.6.4 on the real-Flux plane: a spec change while suspended gave `observedGeneration: 2`).
#[tokio::test]
async fn helm_suspended_release_observes_its_generation() {
    use testkit::fixtures::helmrelease_resource;
    let ns = TestNs::new("model-hrg").await.unwrap();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &helmrelease_resource());
    let model = FluxModel::start(ns.client.clone(), ModelConfig::namespaced(&ns.name).helm());
    let hr: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": { "name": "podinfo", "namespace": ns.name },
        "spec": { "interval": "10m", "suspend": true,
                  "chartRef": { "kind": "OCIRepository", "name": "podinfo" } },
    }))
    .unwrap();
    api.create(&PostParams::default(), &hr).await.unwrap();
    assert_eq!(
        model.wait_settled("podinfo", 0).await.unwrap(),
        Outcome::Suspended
    );
    let m = model.mark();
    let pp = PatchParams {
        field_manager: Some("test-writer".into()),
        ..PatchParams::default()
    };
    let changed = api
        .patch(
            "podinfo",
            &pp,
            &Patch::Merge(json!({ "spec": { "interval": "11m" } })),
        )
        .await
        .unwrap();
    assert_eq!(
        model.wait_settled("podinfo", m).await.unwrap(),
        Outcome::Suspended
    );
    let held = api.get("podinfo").await.unwrap();
    assert_eq!(
        status(&held)["observedGeneration"],
        json!(changed.metadata.generation)
    );
}
