//! Tier 2: the model playing helm-controller (docs/design/flux-model.md "helm-controller": the same
//! trigger predicates and the same deferred status patch on the suspended path).

mod common;

use common::patch;
use flux_model::model::status::condition_status;
use flux_model::model::{FluxModel, ModelConfig, ModelHandle, Outcome, Phase};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;
use testkit::TestNs;
use testkit::fixtures::helmrelease_resource;

const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

async fn setup(prefix: &str) -> (TestNs, Api<DynamicObject>, ModelHandle) {
    let ns = TestNs::new(prefix).await.unwrap();
    let api = Api::namespaced_with(ns.client.clone(), &ns.name, &helmrelease_resource());
    let model = FluxModel::start(ns.client.clone(), ModelConfig::namespaced(&ns.name).helm());
    (ns, api, model)
}

fn helmrelease(ns: &str, name: &str, suspend: bool) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "interval": "10m", "suspend": suspend,
                  "chart": { "spec": { "chart": "podinfo", "sourceRef": {
                      "kind": "HelmRepository", "name": "podinfo" } } } },
    }))
    .unwrap()
}

#[tokio::test]
async fn helm_suspended_path_records_nonce_and_changes_nothing_else() {
    let (ns, api, model) = setup("model-hr3").await;
    api.create(
        &PostParams::default(),
        &helmrelease(&ns.name, "podinfo", true),
    )
    .await
    .unwrap();
    assert_eq!(
        model.wait_settled("podinfo", 0).await.unwrap(),
        Outcome::Suspended
    );
    let before = api.get("podinfo").await.unwrap();
    let m = model.mark();
    patch(
        &api,
        "podinfo",
        json!({ "metadata": { "annotations": { REQUESTED_AT: "n1" } } }),
    )
    .await;
    assert_eq!(
        model.wait_run_seeing("podinfo", "n1", m).await.unwrap(),
        Outcome::Suspended
    );
    let after = api.get("podinfo").await.unwrap();
    assert_eq!(after.data["status"]["lastHandledReconcileAt"], json!("n1"));
    assert!(after.data["status"].get("conditions").is_none());
    assert_eq!(after.data["spec"], before.data["spec"]);
}

#[tokio::test]
async fn helm_in_flight_upgrade_finishes_before_the_suspension_is_acknowledged() {
    let (ns, api, model) = setup("model-hr8").await;
    let created = api
        .create(
            &PostParams::default(),
            &helmrelease(&ns.name, "podinfo", false),
        )
        .await
        .unwrap();
    assert_eq!(
        model.wait_settled("podinfo", 0).await.unwrap(),
        Outcome::Succeeded
    );
    let held = api.get("podinfo").await.unwrap();
    assert_eq!(
        condition_status(&held.data["status"], "Ready"),
        Some("True")
    );
    assert_eq!(
        held.data["status"]["observedGeneration"],
        json!(created.metadata.generation)
    );

    model.hang_at("podinfo", Phase::Apply);
    patch(
        &api,
        "podinfo",
        json!({ "metadata": { "annotations": { REQUESTED_AT: "go" } } }),
    )
    .await;
    model.wait_hanging("podinfo").await.unwrap();
    let mid = api.get("podinfo").await.unwrap();
    let message = mid.data["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Reconciling")
        .unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.starts_with("Running 'upgrade' action"), "{message}");
    let m = model.mark();
    let body = json!({ "metadata": { "annotations": { REQUESTED_AT: "pause" } },
                       "spec": { "suspend": true } });
    patch(&api, "podinfo", body).await;
    assert_ne!(
        api.get("podinfo").await.unwrap().data["status"]["lastHandledReconcileAt"],
        json!("pause")
    );
    model.release("podinfo");
    assert_eq!(
        model.wait_finished("podinfo", m).await.unwrap(),
        Outcome::Succeeded
    );
    assert_eq!(
        model.wait_run_seeing("podinfo", "pause", m).await.unwrap(),
        Outcome::Suspended
    );
    let held = api.get("podinfo").await.unwrap();
    assert_eq!(
        held.data["status"]["lastHandledReconcileAt"],
        json!("pause")
    );
    assert_eq!(
        condition_status(&held.data["status"], "Ready"),
        Some("True")
    );
    assert_eq!(condition_status(&held.data["status"], "Reconciling"), None);
}

#[tokio::test]
async fn helm_restart_mid_upgrade_leaves_reconciling_frozen_while_suspended() {
    let (ns, api, model) = setup("model-hr9").await;
    api.create(
        &PostParams::default(),
        &helmrelease(&ns.name, "podinfo", false),
    )
    .await
    .unwrap();
    model.wait_settled("podinfo", 0).await.unwrap();
    model.hang_at("podinfo", Phase::Apply);
    patch(
        &api,
        "podinfo",
        json!({ "metadata": { "annotations": { REQUESTED_AT: "go" } } }),
    )
    .await;
    model.wait_hanging("podinfo").await.unwrap();
    let body = json!({ "metadata": { "annotations": { REQUESTED_AT: "pause" } },
                       "spec": { "suspend": true } });
    patch(&api, "podinfo", body).await;
    let m = model.mark();
    model.restart().await;
    assert_eq!(
        model.wait_run_seeing("podinfo", "pause", m).await.unwrap(),
        Outcome::Suspended
    );
    model.release("podinfo");
    let held = api.get("podinfo").await.unwrap();
    assert_eq!(
        condition_status(&held.data["status"], "Ready"),
        Some("Unknown")
    );
    assert_eq!(
        condition_status(&held.data["status"], "Reconciling"),
        Some("True")
    );
    assert_eq!(
        held.data["status"]["lastHandledReconcileAt"],
        json!("pause")
    );
}
