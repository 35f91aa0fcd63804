//! Tier 2: the chain on record (issue 25) against the real kube-apiserver. Each fence is on
//! the Lease's record before it is written, the fence names its Lease, a record this holder
//! may not replace refuses the fence with nothing written, and the record goes only with a
//! release that may clear it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use flux_fence::lease::ChainRecord;
use flux_fence::lease::LeaseRelease;
use flux_fence::lease::RecordedMember;
use flux_fence::lease::read_record;
use flux_fence::outcome::AcquireOutcome;
use flux_fence::{
    AnnotationKeys, FenceError, Fencer, Holder, Lease, LeaseAcquire, LeaseConfig, LeaseGuard,
    SystemClock,
};
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use testkit::TestNs;

const NEVER: Duration = Duration::from_hours(1);

fn cfg(ns: &TestNs) -> LeaseConfig {
    LeaseConfig::new(ns.name.clone(), "flux-handoff")
        .with_duration(Duration::from_secs(30))
        .with_renew_every(NEVER)
}

async fn take(ns: &TestNs, tag: &str) -> LeaseGuard {
    let got = Lease::acquire(
        ns.client.clone(),
        cfg(ns),
        Holder::local(tag, std::process::id()),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    match got {
        LeaseAcquire::Acquired(g) => g,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

fn fencer_under(ns: &TestNs, lease: &LeaseGuard) -> Fencer {
    Fencer::new(ns.client.clone(), AnnotationKeys::default(), lease.owner())
        .with_lease(lease.handle())
        .with_events(false)
}

async fn record(ns: &TestNs) -> Option<ChainRecord> {
    read_record(&ns.client, &AnnotationKeys::default(), &cfg(ns))
        .await
        .unwrap()
}

#[tokio::test]
async fn chain_record_each_member_is_on_the_lease_with_its_fence_naming_the_lease() {
    let ns = TestNs::new("chainrec").await.unwrap();
    for name in ["parent", "child"] {
        create_ks(&ns, name).await;
    }
    let lease = take(&ns, "rec").await;
    let fencer = fencer_under(&ns, &lease);
    let mut guards = Vec::new();
    for name in ["parent", "child"] {
        match fencer
            .acquire(&ks_ref(&ns, name), flux_marks("n"), None)
            .await
            .unwrap()
        {
            AcquireOutcome::Acquired(g) => guards.push(g),
            other => panic!("{other:?}"),
        }
    }
    let rec = record(&ns).await.expect("a record on the Lease");
    assert_eq!(rec.owner, lease.owner().to_string());
    assert_eq!(
        rec.members,
        vec![
            RecordedMember::of(&ks_ref(&ns, "parent")),
            RecordedMember::of(&ks_ref(&ns, "child"))
        ]
    );
    let held = get_json(&ks_api(&ns), "child").await;
    assert_eq!(
        annotations(&held)["flux-handoff.io/lease"],
        json!(format!("{}/flux-handoff", ns.name))
    );
    for g in guards.into_iter().rev() {
        let _ = fencer.release(g).await.unwrap();
    }
    let after = get_json(&ks_api(&ns), "child").await;
    assert_eq!(annotations(&after)["flux-handoff.io/lease"], json!(null));
    assert_eq!(lease.release().await.unwrap(), LeaseRelease::Released);
    assert_eq!(record(&ns).await, None, "the release clears our own record");
}

#[tokio::test]
async fn chain_record_a_park_keeps_the_record_and_a_foreign_one_refuses_the_fence() {
    let ns = TestNs::new("chainpark").await.unwrap();
    create_ks(&ns, "apps").await;
    create_ks(&ns, "other").await;
    let lease = take(&ns, "park").await;
    let fencer = fencer_under(&ns, &lease);
    let AcquireOutcome::Acquired(g) = fencer
        .acquire(&ks_ref(&ns, "apps"), flux_marks("n"), None)
        .await
        .unwrap()
    else {
        panic!("not acquired")
    };
    g.leave_in_place();
    let owner = lease.owner().to_string();
    let keys = AnnotationKeys::default();
    assert_eq!(
        lease.park(&keys.parked).await.unwrap(),
        LeaseRelease::Released
    );
    assert_eq!(record(&ns).await.map(|r| r.owner), Some(owner.clone()));

    // A person frees the Lease by hand (holder cleared, the record left) and writes a record
    // of another holder at the epoch the next holder will take: not ours to replace.
    let api: Api<KubeLease> = ns.api();
    let l = api.get("flux-handoff").await.unwrap();
    let next = l.spec.unwrap().lease_transitions.unwrap() + 1;
    let foreign = format!(r#"{{"owner":"someone-else;{next}","members":[]}}"#);
    api.patch(
        "flux-handoff",
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": { "annotations": { keys.chain.clone(): foreign } },
            "spec": { "holderIdentity": null },
        })),
    )
    .await
    .unwrap();
    let second = take(&ns, "second").await;
    let before = get_json(&ks_api(&ns), "other").await;
    let err = fencer_under(&ns, &second)
        .acquire(&ks_ref(&ns, "other"), flux_marks("m"), None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FenceError::ChainRecorded { owner, .. } if owner == &format!("someone-else;{next}")),
        "{err:?}"
    );
    let after = get_json(&ks_api(&ns), "other").await;
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    // Not ours, not settled: the release of the Lease leaves the record.
    assert_eq!(second.release().await.unwrap(), LeaseRelease::Released);
    assert_eq!(
        record(&ns).await.map(|r| r.owner),
        Some(format!("someone-else;{next}"))
    );
}
