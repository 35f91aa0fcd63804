//! Tier 2: what a Lease assertion costs in requests, counted by testkit's proxy in front of the
//! real kube-apiserver, and that the cheaper path still notices another writer.

use std::sync::Arc;
use std::time::Duration;

use fault_proxy::Proxy;
use flux_fence::{FenceError, Holder, Lease, LeaseAcquire, LeaseConfig, LeaseGuard, SystemClock};
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use testkit::TestNs;

fn cfg(ns: &TestNs) -> LeaseConfig {
    LeaseConfig::new(ns.name.clone(), "flux-handoff")
        .with_duration(Duration::from_mins(1))
        .with_renew_every(Duration::from_hours(1))
}

async fn acquire(client: kube::Client, ns: &TestNs) -> LeaseGuard {
    let holder = Holder::local("cost", std::process::id());
    match Lease::acquire(client, cfg(ns), holder, Arc::new(SystemClock))
        .await
        .unwrap()
    {
        LeaseAcquire::Acquired(g) => g,
        other => panic!("{other:?}"),
    }
}

/// Requests sent since `before` (a `Proxy::total`).
fn since(proxy: &Proxy, before: u64) -> u64 {
    proxy.total() - before
}

#[tokio::test]
async fn an_assertion_is_one_update_on_the_version_we_last_wrote() {
    let ns = TestNs::new("lease-cost").await.unwrap();
    let proxy = Proxy::start().await.unwrap();
    let guard = acquire(proxy.client().unwrap(), &ns).await;
    for _ in 0..3 {
        let before = proxy.total();
        guard.assert().await.unwrap();
        assert_eq!(since(&proxy, before), 1, "{:?}", proxy.counts());
    }
    let before = proxy.total();
    let _ = guard.release().await.unwrap();
    assert_eq!(since(&proxy, before), 1, "release: {:?}", proxy.counts());
    let lease = Api::<KubeLease>::namespaced(ns.client.clone(), &ns.name)
        .get("flux-handoff")
        .await
        .unwrap();
    assert_eq!(
        lease
            .spec
            .unwrap()
            .holder_identity
            .filter(|h| !h.is_empty()),
        None,
        "the release landed"
    );
}

#[tokio::test]
async fn asserts_waiting_at_once_share_one_renewal() {
    let ns = TestNs::new("lease-share").await.unwrap();
    let proxy = Proxy::start().await.unwrap();
    let guard = acquire(proxy.client().unwrap(), &ns).await;
    let handle = guard.handle();
    let before = proxy.total();
    let asserts = (0..20).map(|_| {
        let h = handle.clone();
        async move { h.assert().await }
    });
    for r in futures::future::join_all(asserts).await {
        r.unwrap();
    }
    // The first renews alone; every one waiting behind it began before the next renewal was
    // sent, so that next one serves them all.
    assert!(
        since(&proxy, before) <= 2,
        "20 concurrent asserts sent {} requests",
        since(&proxy, before)
    );
    let _ = guard.release().await.unwrap();
}

#[tokio::test]
async fn another_writer_since_our_last_renewal_is_read_and_judged() {
    let ns = TestNs::new("lease-moved").await.unwrap();
    let proxy = Proxy::start().await.unwrap();
    let guard = acquire(proxy.client().unwrap(), &ns).await;
    guard.assert().await.unwrap();
    // Someone else takes the Lease behind our back (admin client, not through the proxy).
    Api::<KubeLease>::namespaced(ns.client.clone(), &ns.name)
        .patch(
            "flux-handoff",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "holderIdentity": "someone-else" } })),
        )
        .await
        .unwrap();
    let err = guard.assert().await.unwrap_err();
    assert!(matches!(err, FenceError::LeaseLost { .. }), "{err:?}");
    let lease = Api::<KubeLease>::namespaced(ns.client.clone(), &ns.name)
        .get("flux-handoff")
        .await
        .unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("someone-else"),
        "never overwritten"
    );
    let _ = guard.release().await;
}
