//! Tier 2: a fence decided on a read the caller already holds (the preflight's), counted by
//! testkit's proxy in front of the real kube-apiserver: no second read when the object is
//! still that version; a refused CAS and a fresh read when it moved, never an overwrite.

mod common;

use common::*;
use fault_proxy::Proxy;
use flux_fence::outcome::AcquireOutcome;
use flux_fence::{AnnotationKeys, Fencer};
use serde_json::json;
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
async fn a_fence_on_a_current_read_sends_only_its_patch() {
    let ns = TestNs::new("known-ok").await.unwrap();
    let read = create_ks(&ns, "apps").await;
    let proxy = Proxy::start().await.unwrap();
    let me = owner(1);
    let out = through(&proxy, &me)
        .acquire_on(&ks_ref(&ns, "apps"), Some(read), flux_marks("n-1"), None)
        .await
        .unwrap();
    assert!(matches!(out, AcquireOutcome::Acquired(_)), "{out:?}");
    let counts = proxy.counts();
    assert_eq!(counts.get("patch kustomizations"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("get kustomizations"), None, "{counts:?}");
    let now = get_json(&ks_api(&ns), "apps").await;
    assert_eq!(
        annotations(&now)["flux-handoff.io/owner"],
        json!(me.to_string())
    );
}

#[tokio::test]
async fn a_fence_on_a_stale_read_is_refused_then_decided_on_a_fresh_one() {
    let ns = TestNs::new("known-stale").await.unwrap();
    let read = create_ks(&ns, "apps").await;
    // Another writer changes it after our read.
    merge(
        &ks_api(&ns),
        "apps",
        json!({ "metadata": { "annotations": { "other": "writer" } } }),
    )
    .await;
    let proxy = Proxy::start().await.unwrap();
    let me = owner(1);
    let out = through(&proxy, &me)
        .acquire_on(&ks_ref(&ns, "apps"), Some(read), flux_marks("n-1"), None)
        .await
        .unwrap();
    assert!(matches!(out, AcquireOutcome::Acquired(_)), "{out:?}");
    let counts = proxy.counts();
    assert_eq!(counts.get("patch kustomizations"), Some(&2), "{counts:?}");
    assert!(counts.contains_key("get kustomizations"), "{counts:?}");
    let now = get_json(&ks_api(&ns), "apps").await;
    assert_eq!(annotations(&now)["other"], json!("writer"), "kept");
    assert_eq!(
        annotations(&now)["flux-handoff.io/owner"],
        json!(me.to_string())
    );
}
