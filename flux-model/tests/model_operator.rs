//! Tier 2: the model playing Flux Operator on `ResourceSet`s and `FluxInstance`s
//! (docs/design/flux-model.md "Flux Operator"): paused by `fluxcd.controlplane.io/reconcile:
//! disabled`, not `spec.suspend`; any annotation change queues a reconcile; the deferred status
//! patch records `lastHandledReconcileAt` on the disabled path too.

mod common;

use common::patch;
use flux_model::model::status::condition_status;
use flux_model::model::{Controller, FluxModel, ModelConfig, ModelHandle, Outcome, Phase};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::json;
use testkit::TestNs;
use testkit::fixtures::{fluxinstance_resource, operator_object, resourceset_resource};

const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";
const OPERATOR: &str = "fluxcd.controlplane.io/reconcile";

async fn setup(
    prefix: &str,
    controller: Controller,
    resource: &ApiResource,
) -> (TestNs, Api<DynamicObject>, ModelHandle) {
    let ns = TestNs::new(prefix).await.unwrap();
    let api = Api::namespaced_with(ns.client.clone(), &ns.name, resource);
    let config = ModelConfig::namespaced(&ns.name).playing(controller);
    let model = FluxModel::start(ns.client.clone(), config);
    (ns, api, model)
}

#[tokio::test]
async fn operator_kinds_model_acknowledges_while_disabled_and_works_when_enabled() {
    for (controller, resource) in [
        (Controller::ResourceSet, resourceset_resource()),
        (Controller::FluxInstance, fluxinstance_resource()),
    ] {
        let (ns, api, model) = setup("model-op", controller, &resource).await;
        let spec = json!({ "inputs": [{ "tenant": "a" }], "suspend": true });
        api.create(
            &PostParams::default(),
            &operator_object(&resource, &ns.name, "tenants", &spec),
        )
        .await
        .unwrap();
        // spec.suspend means nothing to it: it works, finalizer first.
        assert_eq!(
            model.wait_settled("tenants", 0).await.unwrap(),
            Outcome::Succeeded,
            "{controller:?}"
        );
        let ready = api.get("tenants").await.unwrap();
        assert_eq!(
            condition_status(&ready.data["status"], "Ready"),
            Some("True")
        );
        assert_eq!(
            ready.metadata.finalizers,
            Some(vec!["fluxcd.controlplane.io/finalizer".to_string()])
        );
        assert!(ready.data["status"].get("observedGeneration").is_none());

        // Disabled with a request: the early return still records the request.
        let m = model.mark();
        let body =
            json!({ "metadata": { "annotations": { OPERATOR: "disabled", REQUESTED_AT: "n1" } } });
        patch(&api, "tenants", body).await;
        assert_eq!(
            model.wait_run_seeing("tenants", "n1", m).await.unwrap(),
            Outcome::Suspended,
            "{controller:?}"
        );
        let after = api.get("tenants").await.unwrap();
        assert_eq!(after.data["status"]["lastHandledReconcileAt"], json!("n1"));

        // Any annotation change queues it; still disabled, so nothing but finalisation.
        let m = model.mark();
        patch(
            &api,
            "tenants",
            json!({ "metadata": { "annotations": { "x": "y" } } }),
        )
        .await;
        assert_eq!(
            model.wait_finished("tenants", m).await.unwrap(),
            Outcome::Suspended,
            "{controller:?}: an annotation change queues an operator object"
        );

        // Enabled again (flux-operator resume): it works.
        let m = model.mark();
        let body =
            json!({ "metadata": { "annotations": { OPERATOR: "enabled", REQUESTED_AT: "n2" } } });
        patch(&api, "tenants", body).await;
        assert_eq!(
            model.wait_run_seeing("tenants", "n2", m).await.unwrap(),
            Outcome::Succeeded,
            "{controller:?}"
        );
        model.shutdown().await;
    }
}

#[tokio::test]
async fn operator_kinds_model_in_flight_reconcile_finishes_before_the_disable_is_acknowledged() {
    let resource = resourceset_resource();
    let (ns, api, model) = setup("model-op-fly", Controller::ResourceSet, &resource).await;
    let spec = json!({ "inputs": [] });
    api.create(
        &PostParams::default(),
        &operator_object(&resource, &ns.name, "tenants", &spec),
    )
    .await
    .unwrap();
    model.wait_settled("tenants", 0).await.unwrap();
    model.hang_at("tenants", Phase::Apply);
    let m = model.mark();
    patch(
        &api,
        "tenants",
        json!({ "metadata": { "annotations": { REQUESTED_AT: "n0" } } }),
    )
    .await;
    model.wait_hanging("tenants").await.unwrap();
    let body =
        json!({ "metadata": { "annotations": { OPERATOR: "disabled", REQUESTED_AT: "n1" } } });
    patch(&api, "tenants", body).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let during = api.get("tenants").await.unwrap();
    assert_ne!(
        during.data["status"]["lastHandledReconcileAt"],
        json!("n1"),
        "acknowledged while the earlier reconcile still runs"
    );
    model.release("tenants");
    assert_eq!(
        model.wait_run_seeing("tenants", "n1", m).await.unwrap(),
        Outcome::Suspended
    );
    let after = api.get("tenants").await.unwrap();
    assert_eq!(after.data["status"]["lastHandledReconcileAt"], json!("n1"));
    model.shutdown().await;
}
