//! Tier 2: what the `ack` pause reads, counted by testkit's proxy in front of the real
//! kube-apiserver (the fence writes go around it): each acknowledgement is one watch from the
//! fence write's version, and the proof starts from the versions seen at the
//! acknowledgements, so a quiet chain is proven in two passes of reads.

mod common;

use common::*;
use fault_proxy::Proxy;
use flux_suspend::handoff::Handoff;
use flux_suspend::handoff::PauseOutcome;
use flux_suspend::judge::REQUIRED_PASSES;
use flux_suspend::retire::Strategy;

#[tokio::test]
async fn each_acknowledgement_is_one_watch_and_the_proof_needs_two_passes() {
    let w = World::new("sus-watch").await;
    let proxy = Proxy::start().await.unwrap();
    let mut h = Handoff::new(proxy.client().unwrap(), w.fencer.clone());
    let out = h
        .pause(&w.chain(), &w.opts(Strategy::Ack), &mut |_| {})
        .await
        .unwrap();
    let PauseOutcome::Proven(proof) = out else {
        panic!("{out:?}")
    };
    let counts = proxy.counts();
    assert_eq!(
        counts.get("watch kustomizations"),
        Some(&2),
        "one watch per acknowledgement: {counts:?}"
    );
    // Two members, read once per pass.
    let proof_reads = u64::from(REQUIRED_PASSES) * 2;
    assert!(
        counts.get("get kustomizations").copied().unwrap_or(0) <= proof_reads,
        "only the proof reads: {counts:?}"
    );
    assert_eq!(proof.passes(), REQUIRED_PASSES);
    assert_fenced(&w.get(PARENT).await, &w.owner(), false);
    assert_fenced(&w.get(TARGET).await, &w.owner(), true);
    let _ = h.resume(None).await.unwrap();
}

/// A watch whose answer never comes (the proxy holds it back for ten minutes, as a proxy that
/// buffers streamed responses would): the acknowledgement is still seen, by the check read
/// beside the watch, and the pause is proven within its 30 s budget.
#[tokio::test]
async fn an_acknowledgement_whose_watch_never_answers_is_seen_by_a_check_read() {
    let w = World::new("sus-stall").await;
    let proxy = Proxy::start().await.unwrap();
    proxy.arm_on(
        "watch kustomizations",
        1,
        fault_proxy::Fault::Delay(std::time::Duration::from_mins(10)),
    );
    let mut h = Handoff::new(proxy.client().unwrap(), w.fencer.clone());
    let out = h
        .pause(&w.chain(), &w.opts(Strategy::Ack), &mut |_| {})
        .await
        .unwrap();
    assert!(matches!(out, PauseOutcome::Proven(_)), "{out:?}");
    let counts = proxy.counts();
    assert_eq!(counts.get("watch kustomizations"), Some(&2), "{counts:?}");
    assert_fenced(&w.get(PARENT).await, &w.owner(), false);
    assert_fenced(&w.get(TARGET).await, &w.owner(), true);
    let _ = h.resume(None).await.unwrap();
}
