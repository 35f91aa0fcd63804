//! Tier 2: the `restart` strategy against the model's controller Deployment.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use flux_model::model::{ModelConfig, Phase};
use flux_suspend::handoff::PauseOutcome;
use flux_suspend::handoff::SuspendError;
use flux_suspend::io::{
    ControllerRef, Timing, execute_restart, restart_controller, snapshot_controller,
};
use flux_suspend::retire::Strategy;
use flux_suspend::steps::Step;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

async fn pod_uids(w: &World) -> BTreeSet<String> {
    let pods: Api<Pod> = w.ns.api();
    pods.list(&ListParams::default().labels("app=kustomize-controller"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.uid)
        .collect()
}

fn controller(w: &World) -> ControllerRef {
    ControllerRef {
        namespace: w.ns.name.clone(),
        name: "kustomize-controller".into(),
    }
}

fn slow_grace(grace: Duration) -> impl FnOnce(ModelConfig) -> ModelConfig {
    move |mut c| {
        if let Some(d) = c.deployment.as_mut() {
            d.termination_grace = grace;
        }
        c
    }
}

#[tokio::test]
async fn restart_strategy_pauses_and_replaces_every_controller_pod() {
    let w = World::new("sus-rst").await;
    let before = pod_uids(&w).await;
    assert!(!before.is_empty());
    let mut h = w.handoff();
    let mut steps = Vec::new();
    let out = h
        .pause(&w.chain(), &w.opts(Strategy::Restart), &mut |s| {
            steps.push(s);
        })
        .await
        .unwrap();
    assert!(matches!(out, PauseOutcome::Proven(_)));
    assert!(steps.contains(&Step::RestartController));
    let after = pod_uids(&w).await;
    assert!(before.is_disjoint(&after), "every pre-restart Pod is gone");
    assert_eq!(
        annotation(&w.get(TARGET).await, OWNER_KEY),
        Some(w.owner().as_str())
    );
    let report = h.resume(None).await.unwrap();
    assert!(report.not_ours.is_empty(), "{report:?}");
}

#[tokio::test]
async fn restart_old_pods_terminating_slowly_keep_the_proof_pending() {
    let w = World::with_config("sus-rstslow", slow_grace(Duration::from_secs(30))).await;
    let before = pod_uids(&w).await;
    let short = Timing::new(Duration::from_millis(100), Duration::from_secs(2));
    let err = restart_controller(&w.ns.client, &controller(&w), "token-1", None, short)
        .await
        .unwrap_err();
    let SuspendError::RestartTimeout { old, .. } = err else {
        panic!("{err}")
    };
    assert_eq!(old, before.len(), "old Pods are still terminating");
    // The old Pods still exist on the server, marked for deletion.
    let pods: Api<Pod> = w.ns.api();
    for uid in &before {
        let found = pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|p| p.metadata.uid.as_deref() == Some(uid.as_str()))
            .unwrap();
        assert!(found.metadata.deletion_timestamp.is_some());
    }
}

#[tokio::test]
async fn restart_ambiguous_patch_is_adopted_by_its_token() {
    let w = World::new("sus-rstadopt").await;
    let deployments: Api<Deployment> = w.ns.api();
    let snapshot = snapshot_controller(&w.ns.client, &controller(&w))
        .await
        .unwrap();
    // Our restart patch landed but its response was lost: the token is on the server, and
    // the snapshot we act on still shows the Deployment as it was before.
    deployments
        .patch(
            "kustomize-controller",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "spec": { "template": { "metadata": { "annotations": {
                "kubectl.kubernetes.io/restartedAt": "lost-token" } } } } }),
            ),
        )
        .await
        .unwrap();
    let generation = deployments
        .get("kustomize-controller")
        .await
        .unwrap()
        .metadata
        .generation;
    let timing = Timing::new(Duration::from_millis(100), Duration::from_mins(1));
    execute_restart(
        &w.ns.client,
        &controller(&w),
        snapshot.clone(),
        "lost-token",
        None,
        timing,
    )
    .await
    .unwrap();
    let after = deployments.get("kustomize-controller").await.unwrap();
    assert_eq!(
        after.metadata.generation, generation,
        "adopted without a second write"
    );
    assert!(snapshot.pods_before().is_disjoint(&pod_uids(&w).await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_apply_race_restart_refences_a_child_reverted_before_the_restart() {
    let w = World::new("sus-rstrace").await;
    // The parent has read its children and is parked before applying them.
    w.model.hang_at(PARENT, Phase::Apply);
    w.model
        .touch_now(
            PARENT,
            &flux_model::model::Touch::Annotate {
                key: "reconcile.fluxcd.io/requestedAt".into(),
                value: "stale".into(),
            },
        )
        .await
        .unwrap();
    w.model.wait_hanging(PARENT).await.unwrap();

    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = std::sync::Mutex::new(rx);
    let target_api = flux_suspend::object::api(&w.ns.client, &w.target());
    let model_events = std::sync::Arc::new(std::sync::Mutex::new(None));
    let mut h = w.handoff();
    let model = &w.model;
    let mut progress = |s: Step| {
        if s == Step::FenceTargets {
            // Both fenced: let the stale parent execution apply the target's Git state
            // (suspend: false) over the fresh fence, and wait until it did.
            let m = model.mark();
            model.release(PARENT);
            let waiter = tokio::runtime::Handle::current();
            let api = target_api.clone();
            let done = tx.clone();
            let seen = model_events.clone();
            waiter.spawn(async move {
                for _ in 0..300 {
                    let t = api.get(TARGET).await.unwrap();
                    if t.data["spec"]["suspend"] == json!(false) {
                        *seen.lock().unwrap() = Some(m);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let _ = done.send(());
            });
            tokio::task::block_in_place(|| rx.lock().unwrap().recv().unwrap());
        }
    };
    let out = h
        .pause(&w.chain(), &w.opts(Strategy::Restart), &mut progress)
        .await
        .unwrap();
    assert!(
        model_events.lock().unwrap().is_some(),
        "the stale apply reverted the target"
    );
    assert!(matches!(out, PauseOutcome::Proven(_)), "{out:?}");
    let target = w.get(TARGET).await;
    assert!(suspended(&target), "re-fenced after the restart");
    assert_eq!(annotation(&target, OWNER_KEY), Some(w.owner().as_str()));
    let report = h.resume(None).await.unwrap();
    assert!(report.not_ours.is_empty(), "{report:?}");
}
