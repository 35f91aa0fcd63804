//! Tier 2: a target that fails on every retry — e.g. because the very credential being rotated
//! has expired — can still be paused and repaired with `ack` and `restart`; with `none` the
//! quiesce names its failing condition.

mod common;

use std::time::Duration;

use common::*;
use flux_model::model::{ModelConfig, Outcome, Phase, Touch};
use flux_suspend::handoff::PauseOutcome;
use flux_suspend::handoff::SuspendError;
use flux_suspend::io::Timing;
use flux_suspend::retire::Strategy;

async fn failing_world(prefix: &str) -> World {
    let w = World::new(prefix).await;
    w.model.fail_at(TARGET, Phase::Health);
    let m = w.model.mark();
    w.model
        .touch_now(
            TARGET,
            &Touch::Annotate {
                key: "reconcile.fluxcd.io/requestedAt".into(),
                value: "fail".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        w.model.wait_settled(TARGET, m).await.unwrap(),
        Outcome::Failed
    );
    let t = w.get(TARGET).await;
    assert_eq!(condition(&t, "Reconciling").unwrap()["status"], "True");
    w
}

async fn pause_and_resume(w: &World, strategy: Strategy) {
    let before = w.get(TARGET).await;
    let mut h = w.handoff();
    let out = h
        .pause(&w.chain(), &w.opts(strategy), &mut |_| {})
        .await
        .unwrap();
    assert!(matches!(out, PauseOutcome::Proven(_)), "{out:?}");
    let t = w.get(TARGET).await;
    assert_eq!(annotation(&t, OWNER_KEY), Some(w.owner().as_str()));
    assert!(suspended(&t));
    let _ = h.resume(None).await.unwrap();
    let after = w.get(TARGET).await;
    assert_eq!(after["spec"], before["spec"]);
    assert_eq!(
        after["metadata"]["annotations"],
        before["metadata"]["annotations"]
    );
}

#[tokio::test]
async fn failing_target_is_paused_with_ack_and_resume_restores_it() {
    let w = failing_world("sus-failack").await;
    pause_and_resume(&w, Strategy::Ack).await;
}

#[tokio::test]
async fn failing_target_is_paused_with_restart_and_resume_restores_it() {
    let w = failing_world("sus-failrst").await;
    pause_and_resume(&w, Strategy::Restart).await;
}

#[tokio::test]
async fn failing_target_with_none_quiesce_names_the_failing_condition() {
    let w = failing_world("sus-failnone").await;
    let mut opts = w.opts(Strategy::QuietWindow);
    opts.timing = Timing::new(Duration::from_millis(100), Duration::from_secs(2));
    let mut h = w.handoff();
    let err = h.pause(&w.chain(), &opts, &mut |_| {}).await.unwrap_err();
    let SuspendError::QuiesceTimeout { ref blockers, .. } = err else {
        panic!("{err}")
    };
    assert_eq!(blockers.len(), 1);
    let line = err.to_string();
    assert!(
        line.contains("Reconciling=True (ProgressingWithRetry"),
        "{line}"
    );
    assert!(line.contains("Ready=False (HealthCheckFailed"), "{line}");
    // The parent was fenced before the target's quiesce; cleanup releases it.
    let _ = h.resume(None).await.unwrap();
    assert_eq!(annotation(&w.get(PARENT).await, OWNER_KEY), None);
    assert_eq!(annotation(&w.get(TARGET).await, OWNER_KEY), None);
}

#[tokio::test]
async fn none_strategy_pauses_a_quiet_tree() {
    let w = World::with_config("sus-none", |c: ModelConfig| c).await;
    let before = w.get(TARGET).await;
    let mut h = w.handoff();
    let out = h
        .pause(&w.chain(), &w.opts(Strategy::QuietWindow), &mut |_| {})
        .await
        .unwrap();
    assert!(matches!(out, PauseOutcome::Proven(_)));
    // The server holds both fences (none waits for no acknowledgement, so the nonce is not
    // checked here).
    for (name, target) in [(PARENT, false), (TARGET, true)] {
        let o = w.get(name).await;
        assert_eq!(
            annotation(&o, OWNER_KEY),
            Some(w.owner().as_str()),
            "{name}"
        );
        assert!(suspended(&o), "{name}");
        if target {
            assert_eq!(
                annotation(&o, "kustomize.toolkit.fluxcd.io/reconcile"),
                Some("disabled")
            );
        }
    }
    let _ = h.resume(None).await.unwrap();
    let after = w.get(TARGET).await;
    assert_eq!(after["spec"], before["spec"]);
    assert_eq!(
        after["metadata"]["annotations"],
        before["metadata"]["annotations"]
    );
}
