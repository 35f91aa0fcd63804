//! Tier 2: resume gives back exactly what was paused, bottom-up.

mod common;

use common::*;
use flux_suspend::handoff::PauseOutcome;
use flux_suspend::retire::Strategy;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

fn without_status(mut v: Value) -> Value {
    let o = v.as_object_mut().unwrap();
    o.remove("status");
    let m = o["metadata"].as_object_mut().unwrap();
    // Status, versions and the controller's own finalizer (added by any reconcile that finds
    // it missing, e.g. the one acknowledging our nonce: docs/design/flux-model.md 4) are not ours.
    for k in [
        "resourceVersion",
        "generation",
        "managedFields",
        "finalizers",
    ] {
        m.remove(k);
    }
    v
}

#[tokio::test]
async fn resume_restores_the_exact_pre_pause_state_apart_from_status() {
    let w = World::new("sus-res").await;
    let (p0, t0) = (w.get(PARENT).await, w.get(TARGET).await);
    let mut h = w.handoff();
    assert!(matches!(
        h.pause(&w.chain(), &w.opts(Strategy::Ack), &mut |_| {})
            .await
            .unwrap(),
        PauseOutcome::Proven(_)
    ));
    let report = h.resume(None).await.unwrap();
    assert_eq!(report.released.len(), 2);
    assert!(
        report.released[0].name == TARGET,
        "target first: {report:?}"
    );
    assert!(!h.holds_anything());
    assert_eq!(without_status(w.get(PARENT).await), without_status(p0));
    assert_eq!(without_status(w.get(TARGET).await), without_status(t0));
}

#[tokio::test]
async fn resume_never_releases_the_parent_while_the_child_is_still_ours() {
    let w = World::new("sus-resorder").await;
    let mut h = w.handoff();
    assert!(matches!(
        h.pause(&w.chain(), &w.opts(Strategy::Ack), &mut |_| {})
            .await
            .unwrap(),
        PauseOutcome::Proven(_)
    ));
    // Another writer changes an exact mark of the child: its release is refused ...
    let target_api = flux_suspend::object::api(&w.ns.client, &w.target());
    target_api
        .patch(
            TARGET,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": {
            "kustomize.toolkit.fluxcd.io/reconcile": "enabled" } } })),
        )
        .await
        .unwrap();
    let err = h.resume(None).await.unwrap_err();
    assert!(err.to_string().contains(TARGET), "{err}");
    // ... so the parent stays fenced and suspended, and both are still held by the handoff.
    let parent = w.get(PARENT).await;
    assert_eq!(annotation(&parent, OWNER_KEY), Some(w.owner().as_str()));
    assert!(suspended(&parent));
    assert_eq!(h.held_objects().len(), 2);
    // Once the other writer puts its value back, resume completes.
    target_api
        .patch(
            TARGET,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": {
            "kustomize.toolkit.fluxcd.io/reconcile": "disabled" } } })),
        )
        .await
        .unwrap();
    let _ = h.resume(None).await.unwrap();
    assert_eq!(annotation(&w.get(PARENT).await, OWNER_KEY), None);
}

#[tokio::test]
async fn resume_with_wait_ready_sees_each_object_ready_for_its_generation() {
    let w = World::new("sus-resready").await;
    let mut h = w.handoff();
    assert!(matches!(
        h.pause(&w.chain(), &w.opts(Strategy::Ack), &mut |_| {})
            .await
            .unwrap(),
        PauseOutcome::Proven(_)
    ));
    let _ = h.resume(Some(w.opts(Strategy::Ack).timing)).await.unwrap();
    for name in [PARENT, TARGET] {
        let o = w.get(name).await;
        assert!(!suspended(&o));
        assert_eq!(condition(&o, "Ready").unwrap()["status"], "True");
        assert_eq!(
            o["status"]["observedGeneration"],
            o["metadata"]["generation"]
        );
    }
}

#[tokio::test]
async fn resume_of_adopted_fences_by_holder_releases_children_first() {
    let w = World::new("sus-resadopt").await;
    let mut h = w.handoff();
    assert!(matches!(
        h.pause(&w.chain(), &w.opts(Strategy::Ack), &mut |_| {})
            .await
            .unwrap(),
        PauseOutcome::Proven(_)
    ));
    // The pausing process goes away (its guards forgotten); another one adopts the fences from
    // the cluster, as `flux-handoff resume --holder` does.
    std::mem::forget(h);
    let owner = w.fencer.owner().clone();
    let mut guards = Vec::new();
    for obj in [w.parent(), w.target()] {
        guards.push(
            w.fencer
                .adopt_recorded(&obj, &owner)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    let mut h2 =
        flux_suspend::handoff::Handoff::adopt(w.ns.client.clone(), w.fencer.clone(), guards);
    let report = h2.resume(None).await.unwrap();
    assert_eq!(report.released[0].name, TARGET, "{report:?}");
    assert_eq!(report.released[1].name, PARENT, "{report:?}");
    assert!(!suspended(&w.get(TARGET).await));
}
