//! Tier 2: the model's `kustomize-controller` Deployment and Pods, and a rollout restart that
//! kills in-flight reconciles (docs/design/flux-model.md "The controller Deployment" and fact 9).

use std::collections::BTreeSet;
use std::time::Duration;

use flux_model::model::deployment::{DEPLOYMENT_NAME, RESTARTED_AT};
use flux_model::model::status::condition_status;
use flux_model::model::{
    DeploymentConfig, FluxModel, ModelConfig, ModelEvent, ModelHandle, Outcome, Phase,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testkit::TestNs;
use testkit::fixtures::{kustomization, kustomization_resource};

const DEADLINE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(100);

fn start(ns: &TestNs, replicas: i32) -> ModelHandle {
    let dep = DeploymentConfig {
        replicas,
        termination_grace: Duration::from_secs(1),
        ..DeploymentConfig::in_namespace(&ns.name)
    };
    FluxModel::start(
        ns.client.clone(),
        ModelConfig::namespaced(&ns.name).with_deployment(dep),
    )
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn pods(ns: &TestNs) -> Vec<Pod> {
    let lp = ListParams::default().labels(&format!("app={DEPLOYMENT_NAME}"));
    ns.api::<Pod>().list(&lp).await.unwrap().items
}

fn uids(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter().filter_map(|p| p.metadata.uid.clone()).collect()
}

/// Polls until `n` live (not terminating) Pods are all Ready and none of them has a UID in
/// `not`; returns them.
async fn live_ready_pods(ns: &TestNs, n: usize, not: &BTreeSet<String>) -> Vec<Pod> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let live: Vec<Pod> = pods(ns)
            .await
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        if live.len() == n && live.iter().all(ready) && uids(&live).is_disjoint(not) {
            return live;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pods never settled: {}",
            live.len()
        );
        tokio::time::sleep(POLL).await;
    }
}

async fn rollout_restart(ns: &TestNs, at: &str) {
    let body =
        json!({ "spec": { "template": { "metadata": { "annotations": { RESTARTED_AT: at } } } } });
    let pp = PatchParams {
        field_manager: Some("kubectl-rollout".into()),
        ..PatchParams::default()
    };
    ns.api::<Deployment>()
        .patch(DEPLOYMENT_NAME, &pp, &Patch::Merge(body))
        .await
        .unwrap();
}

#[tokio::test]
async fn deployment_restart_replaces_every_pod_uid_and_the_replacements_turn_ready() {
    let ns = TestNs::new("model-dep").await.unwrap();
    let model = start(&ns, 2);
    let first = live_ready_pods(&ns, 2, &BTreeSet::new()).await;
    let old = uids(&first);
    for p in &first {
        assert_eq!(
            p.spec.as_ref().unwrap().node_name.as_deref(),
            Some("flux-model-node")
        );
    }

    let m = model.mark();
    rollout_restart(&ns, "2026-11-30T12:00:00Z").await;
    model
        .wait_for(m, |e| matches!(e, ModelEvent::RolledOut { .. }))
        .await
        .unwrap();
    model
        .wait_for(m, |e| matches!(e, ModelEvent::Restarted { .. }))
        .await
        .unwrap();
    // Old Pods are terminating (deletionTimestamp set) or already gone, never live.
    for p in pods(&ns).await {
        if old.contains(p.metadata.uid.as_deref().unwrap_or_default()) {
            assert!(
                p.metadata.deletion_timestamp.is_some(),
                "old pod still live"
            );
        }
    }
    let new = live_ready_pods(&ns, 2, &old).await;
    assert_eq!(new.len(), 2);
    for p in &new {
        let restarted = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RESTARTED_AT));
        assert_eq!(restarted.map(String::as_str), Some("2026-11-30T12:00:00Z"));
    }
    // After their grace period the old Pods are gone for good.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !uids(&pods(&ns).await).is_disjoint(&old) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "old pods never went away"
        );
        tokio::time::sleep(POLL).await;
    }
    let dep = ns.api::<Deployment>().get(DEPLOYMENT_NAME).await.unwrap();
    let status = dep.status.unwrap();
    assert_eq!(status.observed_generation, dep.metadata.generation);
    assert_eq!(status.updated_replicas, Some(2));
    assert_eq!(status.ready_replicas, Some(2));
    model.shutdown().await;
}

#[tokio::test]
async fn fact_9_rollout_restart_kills_in_flight_reconcile_and_leaves_reconciling_frozen() {
    let ns = TestNs::new("model-dep9").await.unwrap();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &kustomization_resource());
    let model = start(&ns, 1);
    live_ready_pods(&ns, 1, &BTreeSet::new()).await;
    api.create(
        &PostParams::default(),
        &kustomization("apps").build(&ns.name),
    )
    .await
    .unwrap();
    assert_eq!(
        model.wait_settled("apps", 0).await.unwrap(),
        Outcome::Succeeded
    );

    model.hang_at("apps", Phase::Health);
    let pp = PatchParams {
        field_manager: Some("test-writer".into()),
        ..PatchParams::default()
    };
    let nonce = |n: &str| json!({ "metadata": { "annotations": { "reconcile.fluxcd.io/requestedAt": n } } });
    api.patch("apps", &pp, &Patch::Merge(nonce("go")))
        .await
        .unwrap();
    model.wait_hanging("apps").await.unwrap();
    let mut pause = nonce("pause");
    pause["spec"] = json!({ "suspend": true });
    api.patch("apps", &pp, &Patch::Merge(pause)).await.unwrap();

    let m = model.mark();
    rollout_restart(&ns, "2026-11-30T13:00:00Z").await;
    model
        .wait_for(m, |e| matches!(e, ModelEvent::RolledOut { .. }))
        .await
        .unwrap();
    assert_eq!(
        model.wait_run_seeing("apps", "pause", m).await.unwrap(),
        Outcome::Suspended
    );
    model.release("apps");

    let held = api.get("apps").await.unwrap();
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
    // The killed run never finished: its only trace is the frozen status.
    let key = format!("{}/apps", ns.name);
    let hung_runs: Vec<u64> = model
        .events()
        .iter()
        .filter_map(|e| match e {
            ModelEvent::Hanging { key: k, run, .. } if *k == key => Some(*run),
            _ => None,
        })
        .collect();
    assert_eq!(hung_runs.len(), 1);
    assert!(
        !model
            .events()
            .iter()
            .any(|e| matches!(e, ModelEvent::Finished { run, .. } if *run == hung_runs[0])),
        "the in-flight reconcile was killed, not finished"
    );
    model.shutdown().await;
}
