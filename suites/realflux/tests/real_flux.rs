//! Tier 3: the handoff against the real kustomize-controller and source-controller (v1.9.6,
//! built from Go modules), on the control plane of `cargo xtask cluster up --flux real`
//! (started on first use, or `$FLUX_HANDOFF_REAL_KUBECONFIG`).
//!
//! Each test builds its own tree in a fresh namespace from the fixtures of the artifact in the
//! local registry (`testkit::real_flux::tree_files`): a parent `flux-system` whose path holds
//! one child Kustomization `child` (path, `wait` and namespace by post-build substitution).
//! Tests that kill a controller run their own kustomize-controller *shard*
//! (`--watch-label-selector=sharding.fluxcd.io/key=<ns>`, the parent labels everything it
//! applies through `commonMetadata`), so the shared controllers are never disturbed.

mod real;

use flux_suspend::PauseOutcome;
use flux_suspend::retire::Strategy;
use real::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_seeded_tree_is_ready_and_managed_by_gotk_kustomize_controller() {
    let client = real_client().await;
    for name in ["flux-system", "infrastructure", "apps"] {
        let ks = get_ks(&client, "flux-system", name).await;
        assert_eq!(ready(&ks).as_deref(), Some("True"), "{name}: {ks}");
        assert!(
            managers(&ks).iter().any(|m| m == KUSTOMIZE_MANAGER),
            "{name} managers: {:?}",
            managers(&ks)
        );
    }
    // The children were applied by the parent: the applying manager is kustomize-controller,
    // the status writer gotk-kustomize-controller (fact: not the same name).
    let child = get_ks(&client, "flux-system", "apps").await;
    assert!(
        managers(&child).iter().any(|m| m == "kustomize-controller"),
        "{:?}",
        managers(&child)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_retire_ack_pause_is_proven_and_resume_reconciles_again() {
    let w = RealWorld::new("rf-ack", Tree::default()).await;
    w.wait_ready(PARENT).await;
    w.wait_ready(TARGET).await;
    let mut h = w.handoff();
    let out = h
        .pause(&w.chain(), &opts(Strategy::Ack), &mut |_| {})
        .await
        .unwrap();
    assert!(matches!(out, PauseOutcome::Proven(_)), "{out:?}");
    // The real controller acknowledged each nonce although the objects are suspended.
    assert_fenced(&w.get(PARENT).await, &w.owner(), false);
    assert_fenced(&w.get(TARGET).await, &w.owner(), true);
    h.resume(Some(timing())).await.unwrap();
    let child = w.get(TARGET).await;
    assert!(!suspended(&child));
    assert!(annotation(&child, OWNER_KEY).is_none());
    // Handed back: the controller reconciles on request again.
    w.request_and_wait(TARGET, "after-resume").await;
    assert_eq!(ready(&w.get(TARGET).await).as_deref(), Some("True"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_pause_while_both_wait_on_a_deployment_that_never_becomes_healthy() {
    let tree = Tree {
        child_path: "./fixtures/deployment",
        child_wait: true,
        parent_wait: true,
        shard: false,
    };
    let w = RealWorld::new("rf-wait", tree).await;
    // Both are mid-reconcile: the child waits for the Deployment (no kubelet here), the parent
    // waits for the child.
    w.wait_until(TARGET, |o| {
        status_of(o, "Reconciling").as_deref() == Some("True")
    })
    .await;
    w.wait_until(PARENT, |o| {
        status_of(o, "Reconciling").as_deref() == Some("True")
    })
    .await;
    let mut h = w.handoff();
    let out = h
        .pause(&w.chain(), &opts(Strategy::Ack), &mut |_| {})
        .await
        .unwrap();
    assert!(matches!(out, PauseOutcome::Proven(_)), "{out:?}");
    assert_fenced(&w.get(PARENT).await, &w.owner(), false);
    assert_fenced(&w.get(TARGET).await, &w.owner(), true);
    // Handed back without waiting for Ready: the child can never become Ready here.
    h.resume(None).await.unwrap();
    assert!(!suspended(&w.get(TARGET).await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_frozen_reconciling_after_killing_the_controller_does_not_block_the_proof() {
    let tree = Tree {
        child_path: "./fixtures/deployment",
        child_wait: true,
        parent_wait: false,
        shard: true,
    };
    let w = RealWorld::new("rf-kill", tree).await;
    let shard = Shard::start(w.name()).await;
    w.wait_until(TARGET, |o| {
        status_of(o, "Reconciling").as_deref() == Some("True")
    })
    .await;
    // Killed mid-reconcile (SIGKILL): nothing finishes the status, Reconciling=True stays.
    let shard = shard.kill();
    let frozen = w.get(TARGET).await;
    assert_eq!(status_of(&frozen, "Reconciling").as_deref(), Some("True"));
    // The controller comes back (as after a Pod restart) while the handoff runs.
    let restarted = Shard::start_again(shard).await;
    let mut h = w.handoff();
    let out = h
        .pause(&w.chain(), &opts(Strategy::Ack), &mut |_| {})
        .await
        .unwrap();
    assert!(matches!(out, PauseOutcome::Proven(_)), "{out:?}");
    let child = w.get(TARGET).await;
    assert_fenced(&child, &w.owner(), true);
    // Handed back without waiting for Ready: the child can never become Ready here.
    h.resume(None).await.unwrap();
    drop(restarted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_parent_apply_skips_a_target_fenced_with_reconcile_disabled() {
    let w = RealWorld::new("rf-race", Tree::default()).await;
    w.wait_ready(PARENT).await;
    w.wait_ready(TARGET).await;
    // Only the target is fenced: the parent stays free to apply, as an in-flight parent
    // reconcile that lost the race with the handoff would.
    let mut h = w.handoff();
    let chain = vec![flux_suspend::Chain {
        parent: None,
        target: w.target(),
    }];
    let out = h
        .pause(&chain, &opts(Strategy::Ack), &mut |_| {})
        .await
        .unwrap();
    assert!(matches!(out, PauseOutcome::Proven(_)), "{out:?}");
    w.request_and_wait(PARENT, "parent-applies").await;
    // The parent's apply ran and skipped the target: the fence and the suspend hold.
    let child = w.get(TARGET).await;
    assert_fenced(&child, &w.owner(), true);
    h.resume(Some(timing())).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_parent_apply_takes_over_a_kubectl_patched_suspend() {
    let w = RealWorld::new("rf-kubectl", Tree::default()).await;
    w.wait_ready(PARENT).await;
    w.wait_ready(TARGET).await;
    // `kubectl patch` writes as field manager `kubectl-patch`.
    w.merge_patch_as(
        TARGET,
        "kubectl-patch",
        &json!({ "spec": { "suspend": true } }),
    )
    .await;
    assert!(suspended(&w.get(TARGET).await));
    w.request_and_wait(PARENT, "parent-takes-over").await;
    // Flux's apply takes over fields of managers matched by prefix `kubectl`: the suspend the
    // parent's manifest does not set is removed.
    let child = w.wait_until(TARGET, |o| !suspended(o)).await;
    assert!(
        !managers(&child).iter().any(|m| m.starts_with("kubectl")),
        "{:?}",
        managers(&child)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_parent_apply_keeps_a_suspend_set_by_another_manager() {
    let w = RealWorld::new("rf-other", Tree::default()).await;
    w.wait_ready(PARENT).await;
    w.wait_ready(TARGET).await;
    // A manager that is not kubectl-prefixed (as the handoff's fence writes are) keeps its
    // field across the parent's apply.
    w.merge_patch_as(
        TARGET,
        "flux-handoff-test",
        &json!({ "spec": { "suspend": true } }),
    )
    .await;
    w.request_and_wait(PARENT, "parent-applies").await;
    assert!(suspended(&w.get(TARGET).await));
    w.merge_patch_as(
        TARGET,
        "flux-handoff-test",
        &json!({ "spec": { "suspend": false } }),
    )
    .await;
}
