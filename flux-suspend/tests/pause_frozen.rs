//! Tier 2: the incident. A controller restart kills a reconcile that is in flight when the
//! suspend lands; the suspended object keeps `Reconciling=True` (docs/design/flux-model.md fact 9).
//! The proof must still succeed — and the shell tool's status-based rule must not.

mod common;

use common::*;
use flux_model::model::{Phase, Touch};
use flux_suspend::handoff::PauseOutcome;
use flux_suspend::retire::Strategy;
use serde_json::Value;

/// The shell tool's rule (written here only): owned, no `Reconciling=True` on the parent, and
/// an unchanged resourceVersion across two consecutive reads.
fn old_rule_proves(reads: &[Value], owner: &str) -> bool {
    reads.windows(2).any(|w| {
        let quiet = |o: &Value| condition(o, "Reconciling").is_none_or(|c| c["status"] != "True");
        annotation(&w[1], OWNER_KEY) == Some(owner)
            && suspended(&w[1])
            && quiet(&w[0])
            && quiet(&w[1])
            && w[0]["metadata"]["resourceVersion"] == w[1]["metadata"]["resourceVersion"]
    })
}

/// Parks `name` mid-reconcile, starts the pause, kills the in-flight reconcile with a model
/// restart once `name` is fenced, and returns the proven pause.
async fn pause_across_a_restart(w: &World, name: &str) -> flux_suspend::handoff::Handoff {
    w.model.hang_at(name, Phase::Build);
    w.model
        .touch_now(
            name,
            &Touch::Annotate {
                key: "reconcile.fluxcd.io/requestedAt".into(),
                value: "in-flight".into(),
            },
        )
        .await
        .unwrap();
    w.model.wait_hanging(name).await.unwrap();

    let mut h = w.handoff();
    let (chain, opts, owner) = (w.chain(), w.opts(Strategy::Ack), w.owner());
    let pause = tokio::spawn(async move {
        let out = h.pause(&chain, &opts, &mut |_| {}).await;
        (h, out)
    });
    w.wait_until(name, |o| annotation(o, OWNER_KEY) == Some(owner.as_str()))
        .await;
    // The controller restarts mid-reconcile: the run parked in Build dies, leaving
    // Reconciling=True / Ready=Unknown on an object that is now suspended.
    w.model.restart().await;
    let (h, out) = pause.await.unwrap();
    assert!(matches!(out.unwrap(), PauseOutcome::Proven(_)));
    // Disarm the hang so the object reconciles normally once resumed.
    w.model.release(name);
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_reconciling_on_suspended_parent_does_not_block_the_proof() {
    let w = World::new("sus-frzp").await;
    let mut h = pause_across_a_restart(&w, PARENT).await;
    let parent = w.get(PARENT).await;
    assert_eq!(
        condition(&parent, "Reconciling").unwrap()["status"],
        "True",
        "frozen"
    );
    assert_eq!(condition(&parent, "Ready").unwrap()["status"], "Unknown");
    assert_fenced(&parent, &w.owner(), false);
    // The failing baseline: the same parent, read twice, never satisfies the old rule.
    let reads = [w.get(PARENT).await, w.get(PARENT).await];
    assert!(!old_rule_proves(&reads, &w.owner()));
    let _ = h.resume(None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_reconciling_on_suspended_child_does_not_block_the_proof() {
    let w = World::new("sus-frzc").await;
    let mut h = pause_across_a_restart(&w, TARGET).await;
    let target = w.get(TARGET).await;
    assert_eq!(
        condition(&target, "Reconciling").unwrap()["status"],
        "True",
        "frozen"
    );
    assert_fenced(&target, &w.owner(), true);
    let _ = h.resume(None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_reconciling_stays_frozen_until_resume_then_clears() {
    let w = World::new("sus-frzr").await;
    let mut h = pause_across_a_restart(&w, PARENT).await;
    let report = h.resume(Some(w.opts(Strategy::Ack).timing)).await.unwrap();
    assert_eq!(report.released.len(), 2);
    // Resumed, the parent reconciles again and the frozen condition is finally cleared.
    let parent = w.get(PARENT).await;
    assert!(!suspended(&parent));
    assert!(condition(&parent, "Reconciling").is_none());
    assert_eq!(condition(&parent, "Ready").unwrap()["status"], "True");
}
