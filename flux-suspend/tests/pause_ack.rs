//! Tier 2: the default `ack` strategy against the controller model.

mod common;

use common::*;
use flux_model::model::{ModelEvent, Phase};
use flux_suspend::handoff::PauseOutcome;
use flux_suspend::retire::Strategy;
use flux_suspend::steps::Step;

#[tokio::test]
async fn ack_pause_of_seeded_tree_is_proven_and_the_server_holds_both_fences() {
    let w = World::new("sus-ack").await;
    let mut h = w.handoff();
    let mut steps = Vec::new();
    let out = h
        .pause(&w.chain(), &w.opts(Strategy::Ack), &mut |s| steps.push(s))
        .await
        .unwrap();
    let PauseOutcome::Proven(proof) = out else {
        panic!("{out:?}")
    };
    assert_eq!(proof.passes(), 2);
    assert_eq!(
        steps,
        [
            Step::FenceParents,
            Step::AwaitParentAcks,
            Step::FenceTargets,
            Step::AwaitTargetAcks,
            Step::Prove
        ]
    );
    assert_fenced(&w.get(PARENT).await, &w.owner(), false);
    assert_fenced(&w.get(TARGET).await, &w.owner(), true);
    // The untouched sibling is not fenced.
    assert_eq!(annotation(&w.get("apps").await, OWNER_KEY), None);
    let _ = h.resume(None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_waits_for_the_parents_nonce_while_it_is_mid_reconcile() {
    let w = World::new("sus-ackmid").await;
    // The parent is mid-reconcile (parked in Apply) when the suspend lands.
    w.model.hang_at(PARENT, Phase::Apply);
    let since = w.model.mark();
    w.model
        .touch_now(
            PARENT,
            &flux_model::model::Touch::Annotate {
                key: "reconcile.fluxcd.io/requestedAt".into(),
                value: "before-the-fence".into(),
            },
        )
        .await
        .unwrap();
    w.model.wait_hanging(PARENT).await.unwrap();

    let mut h = w.handoff();
    let chain = w.chain();
    let opts = w.opts(Strategy::Ack);
    let owner = w.owner();
    let pause = tokio::spawn(async move {
        let out = h.pause(&chain, &opts, &mut |_| {}).await;
        (h, out)
    });
    // The parent fence lands while the old execution is still running ...
    w.wait_until(PARENT, |p| annotation(p, OWNER_KEY) == Some(owner.as_str()))
        .await;
    // ... and the target stays unfenced: the parent has not acknowledged yet (one reconcile
    // per object at a time, so the acknowledging run cannot start while this one hangs).
    assert_eq!(annotation(&w.get(TARGET).await, OWNER_KEY), None);
    assert!(!pause.is_finished());
    w.model.release(PARENT);

    let (mut h, out) = pause.await.unwrap();
    assert!(matches!(out.unwrap(), PauseOutcome::Proven(_)));
    // The pre-fence execution finished before the acknowledging one started.
    let events = w.model.events();
    let hung_finished = events
        .iter()
        .skip(since)
        .position(|e| {
            matches!(e,
        ModelEvent::Finished { key, .. } if key.ends_with(PARENT))
        })
        .unwrap();
    let nonce = annotation(&w.get(PARENT).await, "reconcile.fluxcd.io/requestedAt")
        .unwrap()
        .to_string();
    let ack_started = events
        .iter()
        .skip(since)
        .position(|e| {
            matches!(e,
        ModelEvent::Started { requested_at: Some(r), .. } if *r == nonce)
        })
        .unwrap();
    assert!(hung_finished < ack_started);
    assert_fenced(&w.get(TARGET).await, &w.owner(), true);
    let _ = h.resume(None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_apply_race_ack_waits_out_the_pre_fence_parent_execution() {
    let w = World::new("sus-race").await;
    // The parent has read its children (start of Apply) and is parked before applying them:
    // it holds the target's Git state, `suspend: false`.
    w.model.hang_at(PARENT, Phase::Apply);
    w.model
        .touch_now(
            PARENT,
            &flux_model::model::Touch::Annotate {
                key: "reconcile.fluxcd.io/requestedAt".into(),
                value: "stale-read".into(),
            },
        )
        .await
        .unwrap();
    w.model.wait_hanging(PARENT).await.unwrap();

    let mut h = w.handoff();
    let (chain, opts, owner) = (w.chain(), w.opts(Strategy::Ack), w.owner());
    let pause = tokio::spawn(async move {
        let out = h.pause(&chain, &opts, &mut |_| {}).await;
        (h, out)
    });
    w.wait_until(PARENT, |p| annotation(p, OWNER_KEY) == Some(owner.as_str()))
        .await;
    let m = w.model.mark();
    w.model.release(PARENT); // it now applies the stale child state
    w.model.wait_finished(PARENT, m).await.unwrap();

    let (mut h, out) = pause.await.unwrap();
    assert!(matches!(out.unwrap(), PauseOutcome::Proven(_)));
    // The target fence was taken after the stale apply, so nothing reverted it.
    assert_fenced(&w.get(TARGET).await, &w.owner(), true);
    let _ = h.resume(None).await.unwrap();
}

#[tokio::test]
async fn ack_refused_when_another_holder_fenced_the_parent_and_target_untouched() {
    let w = World::new("sus-refuse").await;
    let before = w.get(TARGET).await;
    let other = flux_fence::Fencer::new(
        w.ns.client.clone(),
        flux_fence::AnnotationKeys::default(),
        flux_fence::OwnerValue::new(flux_fence::Holder::generate(), flux_fence::Epoch(1)),
    );
    let flux_fence::outcome::AcquireOutcome::Acquired(theirs) =
        other.acquire(&w.parent(), vec![], None).await.unwrap()
    else {
        panic!("setup fence not acquired")
    };
    let mut h = w.handoff();
    let out = h
        .pause(&w.chain(), &w.opts(Strategy::Ack), &mut |_| {})
        .await
        .unwrap();
    let PauseOutcome::Refused { why, .. } = out else {
        panic!("{out:?}")
    };
    // Typed: another holder's fence, named by its owner value (not a foreign suspend).
    let flux_suspend::Refusal::FencedBy { holder } = &why else {
        panic!("{why:?}")
    };
    assert!(holder.contains(&other.owner().to_string()), "{why}");
    assert!(!h.holds_anything());
    let after = w.get(TARGET).await;
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    let _ = other.release(theirs).await.unwrap();
}

#[tokio::test]
async fn ack_refused_when_target_already_suspended_by_someone_else_and_parent_released() {
    let w = World::new("sus-presusp").await;
    let m = w.model.mark();
    w.model
        .touch_now(TARGET, &flux_model::model::Touch::SetSuspend(true))
        .await
        .unwrap();
    w.model.wait_settled(TARGET, m).await.unwrap();
    let parent_before = w.get(PARENT).await;

    let mut h = w.handoff();
    let out = h
        .pause(&w.chain(), &w.opts(Strategy::Ack), &mut |_| {})
        .await
        .unwrap();
    let PauseOutcome::Refused { object, why } = out else {
        panic!("{out:?}")
    };
    // Typed: a mark someone else set, not a holder's fence, naming who set it.
    assert!(
        object.name == TARGET
            && matches!(
                &why,
                flux_suspend::Refusal::MarkTaken { at, field_manager }
                    if *at == flux_fence::mark::MarkAt::Field("/spec/suspend".into())
                        && field_manager.as_deref() == Some(flux_model::model::COMPETING_WRITER)
            ),
        "{object}: {why:?}"
    );
    // The parent was fenced before the refusal; cleanup gives it back exactly.
    assert!(h.holds_anything());
    let _ = h.resume(None).await.unwrap();
    let parent_after = w.get(PARENT).await;
    assert_eq!(parent_after["spec"], parent_before["spec"]);
    assert_eq!(
        parent_after["metadata"]["annotations"],
        parent_before["metadata"]["annotations"]
    );
    assert!(
        suspended(&w.get(TARGET).await),
        "the other hand's suspend stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_fence_wins_its_cas_against_a_busy_status_writer() {
    let w = World::new("sus-busy").await;
    // A controller-like writer moves the target's resourceVersion every few milliseconds (status
    // writes) until the target carries our fence.
    let api = flux_suspend::object::api(&w.ns.client, &w.target());
    let owner = w.owner();
    let status_writes = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let count = status_writes.clone();
    let writer = tokio::spawn(async move {
        for i in 0..20_000u32 {
            let t = api.get(TARGET).await.unwrap();
            if t.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(OWNER_KEY))
                == Some(&owner)
            {
                break;
            }
            let patch =
                serde_json::json!({ "status": { "lastAttemptedRevision": format!("r{i}") } });
            let _ = api
                .patch_status(
                    TARGET,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(patch),
                )
                .await;
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let mut h = w.handoff();
    let out = h
        .pause(&w.chain(), &w.opts(Strategy::Ack), &mut |_| {})
        .await
        .unwrap();
    writer.await.unwrap();
    assert!(matches!(out, PauseOutcome::Proven(_)), "{out:?}");
    assert!(status_writes.load(std::sync::atomic::Ordering::SeqCst) > 0);
    assert_fenced(&w.get(TARGET).await, &w.owner(), true);
    let _ = h.resume(None).await.unwrap();
}
