//! Tier 2: a read that fails transiently (the API server restarting: refused connections, 503)
//! is read again within the budget, so a release after a command still releases; found by the
//! chaos restart scenario (the release's first read was refused and the run left its fences).

mod common;

use std::time::Duration;

use common::*;
use fault_proxy::{Fault, Proxy};
use flux_fence::outcome::AcquireOutcome;
use flux_fence::outcome::ReleaseOutcome;
use flux_fence::{AnnotationKeys, Fencer};
use testkit::TestNs;

fn through(proxy: &Proxy, owner: &flux_fence::OwnerValue) -> Fencer {
    Fencer::new(
        proxy.client().unwrap(),
        AnnotationKeys::default(),
        owner.clone(),
    )
    .with_events(false)
}

#[tokio::test]
async fn release_reads_again_after_503s_and_releases_the_fence_on_the_server() {
    let ns = TestNs::new("rr-503").await.unwrap();
    let before = create_ks(&ns, "apps").await;
    let proxy = Proxy::start().await.unwrap();
    let fencer = through(&proxy, &owner(1));
    let AcquireOutcome::Acquired(guard) = fencer
        .acquire(&ks_ref(&ns, "apps"), flux_marks("n-1"), None)
        .await
        .unwrap()
    else {
        panic!("not acquired")
    };
    let gets = proxy
        .counts()
        .get("get kustomizations")
        .copied()
        .unwrap_or(0);
    for n in 1..=2 {
        proxy.arm_on(
            "get kustomizations",
            gets + n,
            Fault::Status {
                code: 503,
                retry_after: None,
            },
        );
    }
    let outcome = fencer.release(guard).await.unwrap();
    assert!(
        matches!(outcome, ReleaseOutcome::Released { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        proxy.counts().get("get kustomizations").copied(),
        Some(gets + 3),
        "two refused reads, then the one that answered"
    );
    assert_eq!(
        proxy.counts().get("patch kustomizations").copied(),
        Some(2),
        "one acquire write and one release write: nothing written twice"
    );
    let after = get_json(&ks_api(&ns), "apps").await;
    assert_eq!(annotations(&after), annotations(&before));
    assert_eq!(after["spec"], before["spec"]);
}

#[tokio::test]
async fn release_reads_again_while_connections_are_refused_and_releases_the_fence() {
    let ns = TestNs::new("rr-refused").await.unwrap();
    let before = create_ks(&ns, "apps").await;
    let proxy = Proxy::start().await.unwrap();
    let fencer = through(&proxy, &owner(1));
    let AcquireOutcome::Acquired(guard) = fencer
        .acquire(&ks_ref(&ns, "apps"), flux_marks("n-1"), None)
        .await
        .unwrap()
    else {
        panic!("not acquired")
    };
    proxy.refuse_for(Duration::from_secs(2)).await.unwrap();
    let outcome = fencer.release(guard).await.unwrap();
    assert!(
        matches!(outcome, ReleaseOutcome::Released { .. }),
        "{outcome:?}"
    );
    let after = get_json(&ks_api(&ns), "apps").await;
    assert_eq!(annotations(&after), annotations(&before));
    assert_eq!(after["spec"], before["spec"]);
}
