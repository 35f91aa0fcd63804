//! Tier 2: the reconcile request a resume with `wait_ready` sends after each release is a CAS
//! on the object as read. Before, it was a merge patch with only a uid precondition: a run
//! that fenced the object between our release and that request had its own `requestedAt` mark
//! overwritten, so its proof watched for a nonce nobody handled and its release found the mark
//! moved.

mod common;

use std::sync::Arc;

use common::*;
use fault_proxy::Proxy;
use flux_fence::{
    AnnotationKeys, Fencer, Holder, Lease, LeaseAcquire, LeaseConfig, Mark, SystemClock,
};
use flux_suspend::handoff::{Handoff, PauseOutcome};
use flux_suspend::retire::Strategy;
use serde_json::json;

const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

#[tokio::test]
async fn release_engine_a_run_that_fenced_after_our_release_keeps_its_requested_at() {
    let w = World::new("sus-reqcas").await;
    let proxy = Proxy::start().await.unwrap();
    // The handoff's own requests (the reconcile request among them) go through the proxy;
    // the fences are written by the fencer, directly.
    let mut h = Handoff::new(proxy.client().unwrap(), w.fencer.clone());
    assert!(matches!(
        h.pause(&w.chain(), &w.opts(Strategy::Ack), &mut |_| {})
            .await
            .unwrap(),
        PauseOutcome::Proven(_)
    ));
    let before = proxy
        .counts()
        .get("patch kustomizations")
        .copied()
        .unwrap_or(0);
    // The first patch of the resume through the proxy is the target's reconcile request.
    let held = proxy.hold_on("patch kustomizations", before + 1);
    let timing = w.opts(Strategy::Ack).timing;
    let resume = tokio::spawn(async move { h.resume(Some(timing)).await.map(|_| ()) });
    held.arrived().await;

    // Between our release and our request, another run takes the target under its own Lease.
    let other = match Lease::acquire(
        w.ns.client.clone(),
        LeaseConfig::new(w.ns.name.clone(), "other-run"),
        Holder::generate(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap()
    {
        LeaseAcquire::Acquired(g) => g,
        got => panic!("the other run's Lease: {got:?}"),
    };
    let fencer = Fencer::new(
        w.ns.client.clone(),
        AnnotationKeys::default(),
        other.owner(),
    )
    .with_lease(other.handle());
    let marks = vec![
        Mark::field("/spec/suspend", json!(true)).exclusive(),
        Mark::annotation(REQUESTED_AT, "the-other-runs-nonce"),
    ];
    // Our release just changed the target's spec, so the controller model is writing its
    // status: the other run's CAS can lose every one of its rounds to those writes (exit 3,
    // Contended, as a real second run would). It tries again, a bounded number of times.
    let mut taken = fencer
        .acquire(&w.target(), marks.clone(), None)
        .await
        .unwrap();
    for _ in 0..10 {
        if !matches!(taken, flux_fence::outcome::AcquireOutcome::Contended) {
            break;
        }
        taken = fencer
            .acquire(&w.target(), marks.clone(), None)
            .await
            .unwrap();
    }
    assert!(
        matches!(taken, flux_fence::outcome::AcquireOutcome::Acquired(_)),
        "{taken:?}"
    );
    held.forward();
    let resumed = resume.await.unwrap();

    let target = w.get(TARGET).await;
    assert_eq!(
        target["metadata"]["annotations"][REQUESTED_AT], "the-other-runs-nonce",
        "our reconcile request overwrote the other run's mark (resume: {resumed:?})"
    );
    assert!(
        annotation(&target, OWNER_KEY).is_some_and(|o| o == other.owner().to_string()),
        "{target}"
    );
    assert!(resumed.is_ok(), "{resumed:?}");
}
