//! Tier 2: lost responses for real. testkit's proxy forwards the write to the API server,
//! which applies it, and then drops the response — the client cannot know the outcome. The
//! fencer must resolve it by re-reading: adopt exactly its own post-state, never write twice.

mod common;

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
async fn lost_acquire_response_through_the_proxy_is_adopted_without_a_second_write() {
    let ns = TestNs::new("lost-acq").await.unwrap();
    create_ks(&ns, "apps").await;
    let proxy = Proxy::start().await.unwrap();
    let me = owner(1);
    let fencer = through(&proxy, &me);
    proxy.arm(1, Fault::DropResponse);
    let outcome = fencer
        .acquire(&ks_ref(&ns, "apps"), flux_marks("n-1"), None)
        .await
        .unwrap();
    let AcquireOutcome::Acquired(guard) = outcome else {
        panic!("{outcome:?}")
    };
    assert!(guard.is_confirmed(), "adopted from the re-read");
    assert_eq!(
        proxy.counts().get("patch kustomizations"),
        Some(&1),
        "written exactly once"
    );
    let held = get_json(&ks_api(&ns), "apps").await;
    assert_eq!(annotations(&held)["flux-handoff.io/owner"], me.to_string());
    assert_eq!(held["spec"]["suspend"], true);
    let _ = fencer.release(guard).await.unwrap();
}

#[tokio::test]
async fn lost_release_response_through_the_proxy_counts_as_released() {
    let ns = TestNs::new("lost-rel").await.unwrap();
    let before = create_ks(&ns, "apps").await;
    let proxy = Proxy::start().await.unwrap();
    let me = owner(1);
    let fencer = through(&proxy, &me);
    let AcquireOutcome::Acquired(guard) = fencer
        .acquire(&ks_ref(&ns, "apps"), flux_marks("n-1"), None)
        .await
        .unwrap()
    else {
        panic!("not acquired")
    };
    proxy.arm(proxy.mutations() + 1, Fault::DropResponse);
    let outcome = fencer.release(guard).await.unwrap();
    assert!(
        matches!(outcome, ReleaseOutcome::Released { .. }),
        "{outcome:?}"
    );
    let after = get_json(&ks_api(&ns), "apps").await;
    assert_eq!(annotations(&after), annotations(&before));
    assert_eq!(after["spec"], before["spec"]);
}

#[tokio::test]
async fn server_error_on_acquire_is_resolved_by_a_reread_and_one_fresh_cas() {
    let ns = TestNs::new("lost-500").await.unwrap();
    create_ks(&ns, "apps").await;
    let proxy = Proxy::start().await.unwrap();
    let me = owner(1);
    let fencer = through(&proxy, &me);
    // The first patch never reaches the server; its outcome is unknown to the client.
    proxy.arm(
        1,
        Fault::Status {
            code: 500,
            retry_after: None,
        },
    );
    let outcome = fencer
        .acquire(&ks_ref(&ns, "apps"), flux_marks("n-1"), None)
        .await
        .unwrap();
    let AcquireOutcome::Acquired(guard) = outcome else {
        panic!("{outcome:?}")
    };
    // The re-read showed the object unchanged; the lost patch might still commit, so the object
    // was first moved on (a settling annotation added, then removed: two CAS of ours), then the
    // fence's fresh CAS was sent and landed.
    assert_eq!(proxy.counts().get("patch kustomizations"), Some(&4));
    let held = get_json(&ks_api(&ns), "apps").await;
    assert_eq!(annotations(&held)["flux-handoff.io/owner"], me.to_string());
    let _ = fencer.release(guard).await.unwrap();
}
