//! Tier 2 (issue 25): the holder fences itself on its own monotonic clock. Through a proxy that
//! freezes (requests get no answer and no error, connections stay open), the heartbeat's
//! renewal hangs; the holder still counts its Lease as lost at its own deadline, whatever is
//! pending, and every later assert fails without waiting for the hung request.

use std::sync::Arc;
use std::time::Duration;

use fault_proxy::Proxy;
use flux_fence::{FenceError, Holder, Lease, LeaseAcquire, LeaseConfig, LossReason, SystemClock};
use testkit::TestNs;

#[tokio::test]
async fn lease_deadline_a_hung_renewal_does_not_keep_the_holder_alive() {
    let ns = TestNs::new("lease-dl").await.unwrap();
    let proxy = Proxy::start().await.unwrap();
    let duration = Duration::from_secs(3);
    let cfg = LeaseConfig::new(ns.name.clone(), "flux-handoff")
        .with_duration(duration)
        .with_renew_every(Duration::from_millis(750));
    let holder = Holder::local("dl", std::process::id());
    let outcome = Lease::acquire(proxy.client().unwrap(), cfg, holder, Arc::new(SystemClock))
        .await
        .unwrap();
    let LeaseAcquire::Acquired(guard) = outcome else {
        panic!("not acquired: {outcome:?}")
    };
    let handle = guard.handle();
    handle.set_kill_grace(Duration::from_secs(5));
    proxy.freeze();
    let frozen_at = proxy.total();

    // Bounded only so the old code fails instead of hanging: there, loss was noticed only when
    // a request returned, and none ever does.
    let reason = tokio::time::timeout(duration * 10, handle.wait_lost())
        .await
        .expect("the holder never noticed its Lease ending while its requests hung");
    assert_eq!(reason, LossReason::SelfFenced);
    // By ordering, not timing: the stop came while the renewal was still unanswered (the
    // proxy answered nothing since it froze), and before the holder's deadline.
    let log = proxy.log();
    assert!(
        log[usize::try_from(frozen_at).unwrap()..]
            .iter()
            .all(|r| r.took.is_none()),
        "{log:?}"
    );
    let d = handle.deadline();
    assert!(d.stop_work <= d.kill_work && d.kill_work < d.ends, "{d:?}");

    // Every later assert fails at once: no request is waited for past the deadline.
    let err = tokio::time::timeout(duration, handle.assert())
        .await
        .expect("an assert after the self-fence waited for the hung API server")
        .unwrap_err();
    assert!(
        matches!(
            err,
            FenceError::LeaseLost {
                reason: LossReason::SelfFenced
            }
        ),
        "{err:?}"
    );
    guard.leave_held();
}
