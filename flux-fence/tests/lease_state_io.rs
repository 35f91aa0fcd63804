//! Issue 26: the Lease's state as a `watch::Receiver` beside `wait_lost`. A receiver sees
//! `Held`, then `Lost` with the reason the moment the loss happens: on release, and — through a
//! proxy that freezes, so every renewal hangs — when the holder's deadline passes, without
//! anyone calling `lost()`, `assert()` or `wait_lost()`.

use std::sync::Arc;
use std::time::Duration;

use fault_proxy::Proxy;
use flux_fence::lease::LeaseRelease;
use flux_fence::{
    Holder, Lease, LeaseAcquire, LeaseConfig, LeaseGuard, LeaseState, LossReason, SystemClock,
};
use testkit::TestNs;

fn config(ns: &TestNs) -> LeaseConfig {
    LeaseConfig::new(ns.name.clone(), "flux-handoff")
        .with_duration(Duration::from_secs(3))
        .with_renew_every(Duration::from_millis(750))
}

async fn acquire(client: kube::Client, cfg: LeaseConfig) -> LeaseGuard {
    let holder = Holder::local("state", std::process::id());
    match Lease::acquire(client, cfg, holder, Arc::new(SystemClock))
        .await
        .unwrap()
    {
        LeaseAcquire::Acquired(guard) => guard,
        other => panic!("not acquired: {other:?}"),
    }
}

#[tokio::test]
async fn lease_state_release_is_seen_by_a_receiver() {
    let ns = TestNs::new("lease-state").await.unwrap();
    let guard = acquire(ns.client.clone(), config(&ns)).await;
    let handle = guard.handle();
    let mut state = handle.state();
    assert_eq!(*state.borrow_and_update(), LeaseState::Held);
    assert_eq!(guard.release().await.unwrap(), LeaseRelease::Released);
    // The release sent the change: it is pending for the receiver (the handle keeps the
    // sender alive), no waiting involved.
    assert!(state.has_changed().unwrap());
    assert_eq!(
        *state.borrow_and_update(),
        LeaseState::Lost(LossReason::Released)
    );
    // Once every handle is gone the channel closes, keeping the last state.
    drop(handle);
    assert!(state.changed().await.is_err());
    assert_eq!(*state.borrow(), LeaseState::Lost(LossReason::Released));
}

#[tokio::test]
async fn lease_state_a_passed_deadline_is_sent_while_requests_hang() {
    let ns = TestNs::new("lease-state-dl").await.unwrap();
    let proxy = Proxy::start().await.unwrap();
    let cfg = config(&ns);
    let duration = cfg.duration;
    let guard = acquire(proxy.client().unwrap(), cfg).await;
    let handle = guard.handle();
    let mut state = handle.state();
    proxy.freeze();
    // Bounded only so the old behaviour fails instead of hanging: nothing but the heartbeat
    // looks at the Lease here, and its renewal never returns.
    tokio::time::timeout(duration * 10, state.changed())
        .await
        .expect("the receiver never saw the deadline pass while the renewal hung")
        .unwrap();
    assert_eq!(*state.borrow(), LeaseState::Lost(LossReason::SelfFenced));
    // By the holder's own clock: sent once the deadline had passed, not before.
    assert!(tokio::time::Instant::now() >= handle.deadline().ends);
    guard.leave_held();
}
