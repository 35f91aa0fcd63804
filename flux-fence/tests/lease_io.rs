//! Tier 2: the coordination Lease against the real kube-apiserver.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use flux_fence::lease::GoneHolder;
use flux_fence::lease::LeaseRecover;
use flux_fence::lease::LeaseRelease;
use flux_fence::lease::RecoverRefusal;
use flux_fence::outcome::AcquireOutcome;
use flux_fence::{
    Clock, FenceError, Holder, Lease, LeaseAcquire, LeaseConfig, LeaseGuard, LossReason,
    ManualClock, SystemClock,
};
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams};
use testkit::TestNs;

fn cfg(ns: &TestNs, name: &str, duration: Duration, renew_every: Duration) -> LeaseConfig {
    LeaseConfig::new(ns.name.clone(), name)
        .with_duration(duration)
        .with_renew_every(renew_every)
}

/// No heartbeat within a test's lifetime.
const NEVER: Duration = Duration::from_hours(1);

fn holder(tag: &str) -> Holder {
    Holder::local(tag, std::process::id())
}

fn acquired(outcome: LeaseAcquire) -> LeaseGuard {
    match outcome {
        LeaseAcquire::Acquired(g) => g,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

async fn server_holder(api: &Api<KubeLease>, name: &str) -> Option<String> {
    api.get(name)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity)
}

#[tokio::test]
async fn two_transactions_racing_for_the_lease_fifty_times_have_exactly_one_winner_each_round() {
    let ns = TestNs::new("lease-race").await.unwrap();
    let api: Api<KubeLease> = ns.api();
    let c = cfg(&ns, "flux-handoff", Duration::from_secs(30), NEVER);
    for round in 1..=50u64 {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let (first, second) = tokio::join!(
            Lease::acquire(ns.client.clone(), c.clone(), holder("a"), clock.clone()),
            Lease::acquire(ns.client.clone(), c.clone(), holder("b"), clock.clone()),
        );
        let (winner, loser_saw) = match (first.unwrap(), second.unwrap()) {
            (LeaseAcquire::Acquired(g), LeaseAcquire::Held { holder, .. })
            | (LeaseAcquire::Held { holder, .. }, LeaseAcquire::Acquired(g)) => (g, holder),
            (x, y) => panic!("round {round}: expected exactly one winner, got {x:?} and {y:?}"),
        };
        assert_eq!(loser_saw, winner.owner().holder.to_string());
        assert_eq!(
            server_holder(&api, "flux-handoff").await,
            Some(winner.owner().holder.to_string())
        );
        assert_eq!(
            winner.epoch().0,
            round,
            "the epoch grows by one per change of hands"
        );
        assert_eq!(winner.release().await.unwrap(), LeaseRelease::Released);
        assert_eq!(server_holder(&api, "flux-handoff").await, None);
    }
}

#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "one scenario told start to end reads best in one piece"
)]
async fn held_expired_lease_is_not_taken_over_and_only_recover_with_evidence_takes_it() {
    let ns = TestNs::new("lease-expired").await.unwrap();
    let api: Api<KubeLease> = ns.api();
    let c = cfg(&ns, "flux-handoff", Duration::from_secs(5), NEVER);
    let first = holder("first");
    let a = acquired(
        Lease::acquire(
            ns.client.clone(),
            c.clone(),
            first.clone(),
            Arc::new(SystemClock),
        )
        .await
        .unwrap(),
    );
    let before = api.get("flux-handoff").await.unwrap();

    // Far in the future by the second transaction's clock: expired, still never taken.
    let later = Timestamp::now()
        .checked_add(SignedDuration::from_hours(24))
        .unwrap();
    let clock = ManualClock::new(later);
    let second = holder("second");
    let outcome = Lease::acquire(
        ns.client.clone(),
        c.clone(),
        second.clone(),
        Arc::new(clock.clone()),
    )
    .await
    .unwrap();
    assert!(
        matches!(outcome, LeaseAcquire::Held { ref holder, expired: true } if *holder == first.to_string()),
        "{outcome:?}"
    );
    let after = api.get("flux-handoff").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );

    // Recovery with evidence about the wrong holder is refused.
    let rv = after.metadata.resource_version.clone().unwrap();
    let wrong = GoneHolder::new("gh1.1-nobody", rv.clone(), "test");
    let r = Lease::recover(
        ns.client.clone(),
        c.clone(),
        second.clone(),
        Arc::new(clock.clone()),
        wrong,
    )
    .await
    .unwrap();
    assert!(
        matches!(r, LeaseRecover::Refused(RecoverRefusal::OtherHolder { .. })),
        "{r:?}"
    );
    // Evidence judged on a version the holder has renewed since: refused, however far ahead
    // the recovering clock runs.
    a.assert().await.unwrap();
    let stale = GoneHolder::new(first.to_string(), rv, "run finished");
    let r = Lease::recover(
        ns.client.clone(),
        c.clone(),
        second.clone(),
        Arc::new(clock.clone()),
        stale,
    )
    .await
    .unwrap();
    assert!(
        matches!(r, LeaseRecover::Refused(RecoverRefusal::Moved { .. })),
        "{r:?}"
    );
    assert_eq!(
        server_holder(&api, "flux-handoff").await,
        Some(first.to_string())
    );

    // Named holder at the version read: taken over as a CAS at the next epoch.
    let now_rv = api
        .get("flux-handoff")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let gone = GoneHolder::new(first.to_string(), now_rv, "run finished");
    let r = Lease::recover(
        ns.client.clone(),
        c.clone(),
        second.clone(),
        Arc::new(SystemClock),
        gone,
    )
    .await
    .unwrap();
    let LeaseRecover::Recovered(b) = r else {
        panic!("expected Recovered, got {r:?}")
    };
    assert_eq!(b.epoch().0, a.epoch().0 + 1);
    assert_eq!(
        server_holder(&api, "flux-handoff").await,
        Some(second.to_string())
    );

    // The first holder sees the loss, and it is sticky.
    let err = a.assert().await.unwrap_err();
    assert!(
        matches!(
            err,
            FenceError::LeaseLost {
                reason: LossReason::HolderChanged { .. }
            }
        ),
        "{err:?}"
    );
    assert!(matches!(
        a.assert().await,
        Err(FenceError::LeaseLost { .. })
    ));
    assert!(matches!(
        a.release().await.unwrap(),
        LeaseRelease::NotOurs { .. }
    ));
    assert_eq!(
        server_holder(&api, "flux-handoff").await,
        Some(second.to_string())
    );
    assert_eq!(b.release().await.unwrap(), LeaseRelease::Released);
}

#[tokio::test]
async fn heartbeat_keeps_the_lease_alive_across_several_durations() {
    let ns = TestNs::new("lease-beat").await.unwrap();
    let api: Api<KubeLease> = ns.api();
    let c = cfg(
        &ns,
        "flux-handoff",
        Duration::from_secs(2),
        Duration::from_millis(300),
    );
    let me = holder("beat");
    let guard = acquired(
        Lease::acquire(ns.client.clone(), c, me.clone(), Arc::new(SystemClock))
            .await
            .unwrap(),
    );

    // Await renewals until the renewTime has moved past three whole durations.
    let start = api
        .get("flux-handoff")
        .await
        .unwrap()
        .spec
        .unwrap()
        .renew_time
        .unwrap()
        .0;
    eventually(
        Duration::from_mins(1),
        "renewals across three durations",
        || {
            let api = api.clone();
            async move {
                let renewed = api
                    .get("flux-handoff")
                    .await
                    .unwrap()
                    .spec
                    .unwrap()
                    .renew_time
                    .unwrap()
                    .0;
                renewed.duration_since(start) > SignedDuration::from_secs(6)
            }
        },
    )
    .await;
    assert!(guard.handle().lost().is_none());
    guard.assert().await.unwrap();
    assert_eq!(
        server_holder(&api, "flux-handoff").await,
        Some(me.to_string())
    );
    assert_eq!(guard.release().await.unwrap(), LeaseRelease::Released);
}

#[tokio::test]
async fn deleted_lease_is_lost_for_good_and_stops_fencing() {
    let ns = TestNs::new("lease-lost").await.unwrap();
    let api: Api<KubeLease> = ns.api();
    let before = create_ks(&ns, "apps").await;
    let c = cfg(&ns, "flux-handoff", Duration::from_secs(30), NEVER);
    let guard = acquired(
        Lease::acquire(
            ns.client.clone(),
            c.clone(),
            holder("gone"),
            Arc::new(SystemClock),
        )
        .await
        .unwrap(),
    );
    let fencer = fencer(&ns, &guard.owner()).with_lease(guard.handle());
    guard.assert().await.unwrap();

    api.delete("flux-handoff", &DeleteParams::default())
        .await
        .unwrap();
    let err = fencer
        .acquire(&ks_ref(&ns, "apps"), flux_marks("n"), None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            FenceError::LeaseLost {
                reason: LossReason::Deleted
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        get_json(&ks_api(&ns), "apps").await,
        before,
        "no mutation after the loss"
    );

    // Sticky even when a Lease of that name exists again.
    let other = acquired(
        Lease::acquire(ns.client.clone(), c, holder("next"), Arc::new(SystemClock))
            .await
            .unwrap(),
    );
    assert!(matches!(
        guard.assert().await,
        Err(FenceError::LeaseLost { .. })
    ));
    assert_eq!(
        guard.release().await.unwrap(),
        LeaseRelease::NotOurs {
            holder: Some(other.owner().holder.to_string())
        }
    );
    assert_eq!(other.release().await.unwrap(), LeaseRelease::Released);
}

#[tokio::test]
async fn lease_not_renewed_within_its_duration_by_our_clock_is_lost_and_fencer_asserts_it() {
    let ns = TestNs::new("lease-stale").await.unwrap();
    create_ks(&ns, "apps").await;
    let c = cfg(&ns, "flux-handoff", Duration::from_secs(30), NEVER);
    let clock = ManualClock::new(Timestamp::now());
    let guard = acquired(
        Lease::acquire(
            ns.client.clone(),
            c,
            holder("stale"),
            Arc::new(clock.clone()),
        )
        .await
        .unwrap(),
    );
    let fencer = fencer(&ns, &guard.owner()).with_lease(guard.handle());

    // While fresh, fencing works and the Lease is asserted first.
    let fence = match fencer
        .acquire(&ks_ref(&ns, "apps"), flux_marks("n"), None)
        .await
        .unwrap()
    {
        AcquireOutcome::Acquired(g) => g,
        other => panic!("{other:?}"),
    };
    clock.advance(Duration::from_secs(31));
    let err = guard.assert().await.unwrap_err();
    assert!(
        matches!(
            err,
            FenceError::LeaseLost {
                reason: LossReason::Stale
            }
        ),
        "{err:?}"
    );
    // Release does not need the Lease: what is provably ours is still released.
    assert!(matches!(
        fencer.release(fence).await.unwrap(),
        flux_fence::outcome::ReleaseOutcome::Released { .. }
    ));
    assert_eq!(guard.release().await.unwrap(), LeaseRelease::Released);
}
