//! Tier 2: the Flux controller model against docs/design/flux-model.md facts 1–5, 8–10, on the
//! real kube-apiserver. The fact bodies live in `flux_model::facts` and run here against the model and in
//! `real_flux.rs` against the real kustomize-controller, under the same names; the two tests at
//! the end drive knobs real Flux lacks (docs/real-flux.md says why). Every test asserts what the
//! server holds, and awaits the model's own events instead of sleeping.

use flux_model::facts::Backend;

flux_model::fact_tests!(
    #[tokio::test]
    Backend::Model
);

// Model-only fact: a restart at a chosen phase after a competing write.

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
