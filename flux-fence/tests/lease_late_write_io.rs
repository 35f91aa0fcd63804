//! Tier 2 (issue 35, item 3): a Lease write answered 504 by a gateway while the server still
//! works on it may commit after any read. Before concluding "not acquired", the acquire makes
//! it unable to land (creates the Lease free, or moves it on with a CAS of its own); so when the
//! lost writes arrive later, nothing is held on the server.

use std::sync::Arc;
use std::time::Duration;

use fault_proxy::Proxy;
use flux_fence::lease::LeaseRelease;
use flux_fence::{Holder, Lease, LeaseAcquire, LeaseConfig, SystemClock};
use k8s_openapi::api::coordination::v1::{Lease as KubeLease, LeaseSpec};
use kube::api::{Api, PostParams};
use testkit::TestNs;

/// Rounds of an acquire (`flux_fence::lease::LEASE_ATTEMPTS`): every one of them is lost.
const ROUNDS: u64 = flux_fence::lease::LEASE_ATTEMPTS as u64;

fn cfg(ns: &TestNs) -> LeaseConfig {
    LeaseConfig::new(ns.name.clone(), "flux-handoff")
        .with_duration(Duration::from_secs(30))
        .with_renew_every(Duration::from_hours(1))
}

/// Acquires through a proxy that answers the first [`ROUNDS`] requests of kind `key` with 504
/// and holds them; then sends them on, and returns the acquire's outcome, the server's
/// answers to the held writes and the Lease as the server has it afterwards.
async fn acquire_with_every_answer_lost(
    ns: &TestNs,
    key: &str,
) -> (String, Vec<u16>, Option<KubeLease>) {
    let proxy = Proxy::start().await.unwrap();
    let held: Vec<_> = (1..=ROUNDS)
        .map(|n| proxy.hold_answering(key, n, 504))
        .collect();
    let holder = Holder::local("lost", std::process::id());
    let outcome = Lease::acquire(
        proxy.client_without_retry().unwrap(),
        cfg(ns),
        holder,
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    assert!(held.iter().all(fault_proxy::Held::has_arrived));
    let said = format!("{outcome:?}");
    if let LeaseAcquire::Acquired(guard) = outcome {
        // Ours for good: released like any held Lease (not this test's case).
        let _ = guard.release().await;
    }
    let mut answers = Vec::new();
    for h in &held {
        h.forward();
        answers.push(h.answered().await);
    }
    let api: Api<KubeLease> = ns.api();
    (said, answers, api.get_opt("flux-handoff").await.unwrap())
}

fn holder_of(lease: Option<&KubeLease>) -> Option<String> {
    lease?.spec.as_ref()?.holder_identity.clone()
}

#[tokio::test]
async fn unknown_outcome_every_lease_create_answered_504_and_applied_later_holds_nothing() {
    let ns = TestNs::new("unknown-lease-create").await.unwrap();
    let (said, answers, lease) = acquire_with_every_answer_lost(&ns, "create leases").await;
    assert_eq!(
        holder_of(lease.as_ref()),
        None,
        "a create answered 504 committed after the acquire said {said}; answers {answers:?}"
    );
    assert!(said.starts_with("Contended"), "{said}");
    assert!(answers.iter().all(|&a| a == 409), "{answers:?}");
}

#[tokio::test]
async fn unknown_outcome_every_lease_take_answered_504_and_applied_later_holds_nothing() {
    let ns = TestNs::new("unknown-lease-take").await.unwrap();
    let api: Api<KubeLease> = ns.api();
    let free = KubeLease {
        metadata: kube::api::ObjectMeta {
            name: Some("flux-handoff".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            lease_transitions: Some(2),
            ..Default::default()
        }),
    };
    let before = api.create(&PostParams::default(), &free).await.unwrap();
    let (said, answers, lease) = acquire_with_every_answer_lost(&ns, "update leases").await;
    assert_eq!(
        holder_of(lease.as_ref()),
        None,
        "a take answered 504 committed after the acquire said {said}; answers {answers:?}"
    );
    assert!(said.starts_with("Contended"), "{said}");
    assert!(answers.iter().all(|&a| a == 409), "{answers:?}");
    let spec = lease.unwrap().spec.unwrap();
    assert_eq!(
        spec.lease_transitions,
        before.spec.unwrap().lease_transitions
    );
}

/// `fences recover`'s take-over of a gone holder's Lease, every answer lost: a late one must
/// not make the recovering process the holder after it said it took nothing.
#[tokio::test]
async fn unknown_outcome_every_lease_recover_answered_504_and_applied_later_holds_nothing() {
    let ns = TestNs::new("unknown-lease-recover").await.unwrap();
    let api: Api<KubeLease> = ns.api();
    let gone = "gone-holder-1";
    let held_by_gone = KubeLease {
        metadata: kube::api::ObjectMeta {
            name: Some("flux-handoff".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(gone.into()),
            lease_duration_seconds: Some(30),
            lease_transitions: Some(5),
            ..Default::default()
        }),
    };
    let before = api
        .create(&PostParams::default(), &held_by_gone)
        .await
        .unwrap();
    let rv = before.metadata.resource_version.clone().unwrap();
    let proxy = Proxy::start().await.unwrap();
    let held: Vec<_> = (1..=ROUNDS)
        .map(|n| proxy.hold_answering("update leases", n, 504))
        .collect();
    let outcome = Lease::recover(
        proxy.client_without_retry().unwrap(),
        cfg(&ns),
        Holder::local("recoverer", std::process::id()),
        Arc::new(SystemClock),
        flux_fence::lease::GoneHolder::new(gone, rv, "watched in a test"),
    )
    .await;
    assert!(held.iter().all(fault_proxy::Held::has_arrived));
    let said = format!("{outcome:?}");
    if let Ok(flux_fence::lease::LeaseRecover::Recovered(guard)) = outcome {
        let _ = guard.release().await;
    }
    let mut answers = Vec::new();
    for h in &held {
        h.forward();
        answers.push(h.answered().await);
    }
    let lease = api.get_opt("flux-handoff").await.unwrap();
    assert_eq!(
        holder_of(lease.as_ref()).as_deref(),
        Some(gone),
        "a take-over answered 504 committed after recover said {said}; answers {answers:?}"
    );
    assert!(said.starts_with("Ok(Refused(Moved"), "{said}");
    assert!(answers.iter().all(|&a| a == 409), "{answers:?}");
    assert_eq!(lease.unwrap().spec.unwrap().lease_transitions, Some(5));
}

#[tokio::test]
async fn unknown_outcome_every_lease_release_answered_504_says_so_and_lands_harmlessly() {
    let ns = TestNs::new("unknown-lease-release").await.unwrap();
    let proxy = Proxy::start().await.unwrap();
    let holder = Holder::local("lost-release", std::process::id());
    let got = Lease::acquire(
        proxy.client_without_retry().unwrap(),
        cfg(&ns),
        holder,
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let LeaseAcquire::Acquired(guard) = got else {
        panic!("not acquired: {got:?}")
    };
    let held: Vec<_> = (1..=ROUNDS)
        .map(|n| proxy.hold_answering("update leases", n, 504))
        .collect();
    let said = guard.release().await.unwrap();
    assert!(held.iter().all(fault_proxy::Held::has_arrived));
    // Before: "Contended" ("another party changed it on every attempt"), though nobody else
    // wrote it: every answer was lost.
    assert_ne!(said, LeaseRelease::Contended, "{said}");
    assert!(said.to_string().starts_with("no answer came"), "{said}");
    let mut answers = Vec::new();
    for h in &held {
        h.forward();
        answers.push(h.answered().await);
    }
    // The writes land late: the first clears our holder, the rest fail their CAS.
    let api: Api<KubeLease> = ns.api();
    let lease = api.get_opt("flux-handoff").await.unwrap();
    assert_eq!(holder_of(lease.as_ref()), None, "answers {answers:?}");
    assert_eq!(
        answers.iter().filter(|&&a| a == 200).count(),
        1,
        "{answers:?}"
    );
}
