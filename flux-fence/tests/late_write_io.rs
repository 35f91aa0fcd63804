//! Tier 2 (issue 25, item 5): a fence write abandoned in flight cannot land after cleanup, and
//! adopting one's own Lease starts the holder's clock at its own renewal.

use std::sync::Arc;
use std::time::Duration;

use fault_proxy::Proxy;
use flux_fence::{
    AnnotationKeys, Epoch, Fencer, Holder, Lease, LeaseAcquire, LeaseConfig, ObjectRef, OwnerValue,
    SystemClock,
};
use k8s_openapi::api::coordination::v1::{Lease as KubeLease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use testkit::TestNs;

/// A parked pause resumed ten minutes later: the server's `renewTime` is ten minutes old. The
/// adopting holder renews first, so it holds the Lease (before: its first assert found it stale
/// by the old `renewTime` and logged "lease lost").
#[tokio::test]
async fn late_write_adopting_our_own_old_lease_starts_the_clock_at_our_renewal() {
    let ns = TestNs::new("late-adopt").await.unwrap();
    let holder = Holder::local("adopt", std::process::id());
    let api: Api<KubeLease> = ns.api();
    let old = Timestamp::now() - SignedDuration::from_mins(10);
    let parked = KubeLease {
        metadata: kube::api::ObjectMeta {
            name: Some("flux-handoff".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_string()),
            lease_duration_seconds: Some(30),
            acquire_time: Some(MicroTime(old)),
            renew_time: Some(MicroTime(old)),
            lease_transitions: Some(4),
            ..Default::default()
        }),
    };
    api.create(&PostParams::default(), &parked).await.unwrap();
    let cfg = LeaseConfig::new(ns.name.clone(), "flux-handoff")
        .with_duration(Duration::from_secs(30))
        .with_renew_every(Duration::from_hours(1));
    let outcome = Lease::acquire(ns.client.clone(), cfg, holder, Arc::new(SystemClock))
        .await
        .unwrap();
    let LeaseAcquire::Acquired(guard) = outcome else {
        panic!("not adopted: {outcome:?}")
    };
    assert_eq!(guard.epoch(), Epoch(4));
    guard
        .assert()
        .await
        .expect("the adopted Lease counted as stale by the server's old renewTime");
    assert_eq!(guard.handle().lost(), None);
    let renewed = api.get("flux-handoff").await.unwrap().spec.unwrap();
    let MicroTime(at) = renewed.renew_time.unwrap();
    assert!(at > old + SignedDuration::from_mins(9), "renewTime {at}");
    let _ = guard.release().await.unwrap();
}

/// A fence write held by the proxy while its client gives up; cleanup settles the object (a CAS
/// of its own moves the resourceVersion on); then the proxy forwards the old write: the server
/// refuses it, and the object carries no fence and no settling mark.
#[tokio::test]
async fn late_write_a_held_fence_patch_forwarded_after_settling_does_not_land() {
    let ns = TestNs::new("late-fence").await.unwrap();
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = ns.api();
    let cm = serde_json::from_value(json!({
        "metadata": { "name": "target", "annotations": { "keep": "me" } },
        "data": { "k": "v" },
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let obj = ObjectRef::new(
        kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        &ns.name,
        "target",
    );
    let owner = OwnerValue::new(Holder::local("late", std::process::id()), Epoch(2));
    let keys = AnnotationKeys::default();
    let proxy = Proxy::start().await.unwrap();
    let held = proxy.hold_on("patch configmaps", 1);
    let through = Fencer::new(proxy.client().unwrap(), keys.clone(), owner.clone());
    let marks = vec![flux_fence::Mark::annotation("fenced-mark", "on")];
    // The acquire's patch is held: the caller gives up on it (a session hurried).
    let abandoned = tokio::time::timeout(Duration::from_mins(1), async {
        tokio::select! {
            r = through.acquire(&obj, marks, None) => panic!("the held write answered: {r:?}"),
            () = held.arrived() => {}
        }
    });
    abandoned.await.unwrap();
    let before = cms.get("target").await.unwrap();

    let direct = Fencer::new(ns.client.clone(), keys.clone(), owner.clone());
    assert!(direct.settle_unheld(&obj).await.unwrap().is_none());
    let settled = cms.get("target").await.unwrap();
    assert_ne!(
        settled.metadata.resource_version, before.metadata.resource_version,
        "settling moved the object on"
    );
    assert_eq!(settled.metadata.annotations, before.metadata.annotations);
    assert_eq!(settled.data, before.data);

    held.forward();
    let status = held.answered().await;
    let after: Value = serde_json::to_value(cms.get("target").await.unwrap()).unwrap();
    assert_eq!(
        after.pointer("/metadata/annotations/flux-handoff.io~1owner"),
        None,
        "the abandoned fence write landed after the settlement: {after}"
    );
    assert_ne!(status, 200, "{after}");
    assert_eq!(after.pointer("/metadata/annotations/fenced-mark"), None);
    // Nothing else of ours is left: the object is as it was.
    let after = cms.get("target").await.unwrap();
    assert_eq!(after.metadata.annotations, before.metadata.annotations);
    assert_eq!(after.data, before.data);
}

/// A fence patch answered 504 by a gateway while the server still works on it: the acquire's
/// one re-read shows the object unchanged. Judged "not applied" from that read alone, the
/// write later commits and leaves a fence nobody holds. The acquire first moves the object on
/// with a CAS of its own, so the late write's precondition fails.
#[tokio::test]
async fn unknown_outcome_a_fence_patch_answered_504_and_applied_later_never_lands() {
    let ns = TestNs::new("unknown-fence").await.unwrap();
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = ns.api();
    let cm = serde_json::from_value(json!({
        "metadata": { "name": "target", "annotations": { "keep": "me" } },
        "data": { "k": "v" },
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let obj = ObjectRef::new(
        kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        &ns.name,
        "target",
    );
    let owner = OwnerValue::new(Holder::local("unknown", std::process::id()), Epoch(3));
    let proxy = Proxy::start().await.unwrap();
    let held = proxy.hold_answering("patch configmaps", 1, 504);
    let through = Fencer::new(
        proxy.client_without_retry().unwrap(),
        AnnotationKeys::default(),
        owner,
    );
    let marks = vec![flux_fence::Mark::annotation("fenced-mark", "on")];
    let flux_fence::decide::AcquireDecision::Patch(plan) =
        through.plan_acquire(&obj, &marks, None).await.unwrap()
    else {
        panic!("an unfenced object is acquirable")
    };
    let applied = through.apply_acquire(&obj, plan, None).await.unwrap();
    assert!(held.has_arrived());
    assert!(
        matches!(applied, flux_fence::outcome::Applied::Moved),
        "the 504'd write is not ours: {applied:?}"
    );
    let before = cms.get("target").await.unwrap();

    held.forward();
    let status = held.answered().await;
    let after: Value = serde_json::to_value(cms.get("target").await.unwrap()).unwrap();
    assert_eq!(
        after.pointer("/metadata/annotations/flux-handoff.io~1owner"),
        None,
        "the 504'd fence write committed after it was judged not applied: {after}"
    );
    assert_ne!(status, 200, "{after}");
    let after = cms.get("target").await.unwrap();
    assert_eq!(after.metadata.annotations, before.metadata.annotations);
    assert_eq!(after.data, before.data);
}
