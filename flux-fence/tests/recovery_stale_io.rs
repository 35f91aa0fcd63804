//! Tier 2: recovery never acts on a stale view (issue 35). Its plan is made on reads taken one
//! after another, and the cluster moves between them: the next run takes the Lease while the
//! chain record's members are read, or a holder of the same name fences again between the plan
//! and its execution. Either way the live fence must stay where it is.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use fault_proxy::Proxy;
use flux_fence::outcome::AcquireOutcome;
use flux_fence::recovery::{ChildMark, RecoverOutcome, Recovery, WatchProgress};
use flux_fence::{
    AnnotationKeys, Fencer, Holder, Lease, LeaseAcquire, LeaseConfig, LeaseGuard, SystemClock,
};
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::Client;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use testkit::TestNs;
use testkit::fixtures::kustomization_resource;

const NEVER: Duration = Duration::from_hours(1);

fn cfg(ns: &TestNs) -> LeaseConfig {
    LeaseConfig::new(ns.name.clone(), "flux-handoff")
        .with_duration(Duration::from_secs(30))
        .with_renew_every(NEVER)
}

fn recovery(ns: &TestNs, client: Client) -> Recovery {
    Recovery::new(
        client,
        AnnotationKeys::default(),
        cfg(ns),
        vec![kustomization_resource()],
        ChildMark::annotation(RECONCILE, "disabled"),
    )
    .scope(flux_fence::discover::Scope::Namespaces(vec![
        ns.name.clone(),
    ]))
    .watch_timing(Duration::from_millis(200), Duration::from_secs(10))
}

async fn take(ns: &TestNs, holder: &Holder) -> LeaseGuard {
    match Lease::acquire(
        ns.client.clone(),
        cfg(ns),
        holder.clone(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap()
    {
        LeaseAcquire::Acquired(g) => g,
        other => panic!("lease: {other:?}"),
    }
}

/// `lease`'s holder fences `name` (the record on the Lease names it) and leaves it fenced.
async fn fence(ns: &TestNs, lease: &LeaseGuard, name: &str) {
    let fencer = Fencer::new(ns.client.clone(), AnnotationKeys::default(), lease.owner())
        .with_lease(lease.handle())
        .with_events(false);
    match fencer
        .acquire(&ks_ref(ns, name), flux_marks("n"), None)
        .await
        .unwrap()
    {
        AcquireOutcome::Acquired(g) => g.leave_in_place(),
        other => panic!("fence {name}: {other:?}"),
    }
}

/// A person frees the Lease by hand: the holder cleared, the chain record left on it.
async fn free_by_hand(ns: &TestNs) {
    ns.api::<KubeLease>()
        .patch(
            "flux-handoff",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "holderIdentity": null } })),
        )
        .await
        .unwrap();
}

/// The owner annotation `name` carries on the server.
async fn owner_on(ns: &TestNs, name: &str) -> Option<String> {
    let obj = get_json(&ks_api(ns), name).await;
    annotations(&obj)[AnnotationKeys::default().owner.as_str()]
        .as_str()
        .map(ToString::to_string)
}

/// `holder` takes the Lease, fences `apps` and stops; a person frees the Lease by hand: `apps`
/// is an orphan of a free Lease. Returns the orphan's owner value.
async fn orphan_of_a_free_lease(ns: &TestNs, holder: &Holder) -> flux_fence::OwnerValue {
    let first = take(ns, holder).await;
    fence(ns, &first, "apps").await;
    let owner = first.owner();
    first.leave_held();
    free_by_hand(ns).await;
    owner
}

/// `r`'s plan, which must release exactly one fence.
async fn plan_of_one(r: &Recovery) -> flux_fence::recovery::Planned {
    let mut progress = |_: &WatchProgress| {};
    let planned = r.plan(&mut progress).await.unwrap();
    assert_eq!(planned.plan.release.len(), 1, "{:?}", planned.plan);
    planned
}

fn nothing_released(outcome: &RecoverOutcome) -> bool {
    match outcome {
        RecoverOutcome::Done(r) => r.released.is_empty(),
        RecoverOutcome::LeaseRaceLost { .. } => true,
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_engine_recovery_looks_again_when_the_lease_moves_while_members_are_read() {
    let ns = TestNs::new("stale-look").await.unwrap();
    create_ks(&ns, "apps").await;
    // A recorded `apps` on a Lease a person freed by hand; `apps` itself is not fenced.
    let gone = take(&ns, &Holder::local("gone", std::process::id())).await;
    fence(&ns, &gone, "apps").await;
    let owner = gone.owner();
    gone.leave_held();
    let f = Fencer::new(ns.client.clone(), AnnotationKeys::default(), owner.clone());
    let g = f
        .adopt_recorded(&ks_ref(&ns, "apps"), &owner)
        .await
        .unwrap()
        .unwrap();
    let _ = f.release(g).await.unwrap();
    free_by_hand(&ns).await;

    // Recovery reads the (free) Lease and then the recorded member; the member read is held
    // while the next run takes the Lease and fences `apps`.
    let proxy = Proxy::start().await.unwrap();
    let r = recovery(&ns, proxy.client().unwrap());
    let held = proxy.hold_on("get kustomizations", 1);
    let planning = tokio::spawn(async move {
        let mut progress = |_: &WatchProgress| {};
        let planned = r.plan(&mut progress).await;
        (r, planned)
    });
    held.arrived().await;
    let next = take(&ns, &Holder::local("next", std::process::id())).await;
    fence(&ns, &next, "apps").await;
    let live = next.owner().to_string();
    held.forward();
    let (r, planned) = planning.await.unwrap();
    let planned = planned.unwrap();
    let releases: Vec<String> = planned
        .plan
        .release
        .iter()
        .map(ToString::to_string)
        .collect();
    let outcome = r.execute(&planned.plan).await.unwrap();
    println!("planned releases: {releases:?}; outcome: {outcome:?}");
    assert_eq!(
        owner_on(&ns, "apps").await.as_deref(),
        Some(live.as_str()),
        "the live run's fence on apps was released by a plan made on a stale look: {releases:?}"
    );
    assert!(releases.is_empty(), "{releases:?}");
    assert!(nothing_released(&outcome), "{outcome:?}");
    next.leave_held();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_engine_recovery_never_releases_a_later_fence_of_the_same_holder() {
    let ns = TestNs::new("stale-epoch").await.unwrap();
    create_ks(&ns, "apps").await;
    // A holder named as every run of a job names itself (`--holder deploy`).
    let holder = Holder::local("deploy", std::process::id());
    let old = orphan_of_a_free_lease(&ns, &holder).await;

    // The plan: `apps` is an orphan of a free Lease.
    let r = recovery(&ns, ns.client.clone());
    let planned = plan_of_one(&r).await;

    // Before it runs, a person releases that fence and the next run of the same name takes
    // the Lease and fences `apps` again.
    let f = Fencer::new(ns.client.clone(), AnnotationKeys::default(), old.clone());
    let g = f
        .adopt_recorded(&ks_ref(&ns, "apps"), &old)
        .await
        .unwrap()
        .unwrap();
    let _ = f.release(g).await.unwrap();
    let second = take(&ns, &holder).await;
    fence(&ns, &second, "apps").await;
    let live = second.owner().to_string();
    assert_ne!(live, old.to_string());

    let outcome = r.execute(&planned.plan).await.unwrap();
    println!("outcome: {outcome:?}");
    assert_eq!(
        owner_on(&ns, "apps").await.as_deref(),
        Some(live.as_str()),
        "a plan made on {old} released the later fence {live}"
    );
    assert!(nothing_released(&outcome), "{outcome:?}");
    second.leave_held();
}

/// The holder of the Lease as the server has it (`None`: free or absent).
async fn lease_holder(ns: &TestNs) -> Option<String> {
    let lease = ns
        .api::<KubeLease>()
        .get_opt("flux-handoff")
        .await
        .unwrap()?;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_engine_recovery_holds_a_free_lease_while_it_releases_orphans() {
    let ns = TestNs::new("hold-free").await.unwrap();
    create_ks(&ns, "apps").await;
    // `apps` is an orphan of a Lease a person freed by hand.
    let gone = Holder::local("gone", std::process::id());
    let old = orphan_of_a_free_lease(&ns, &gone).await;

    let janitor = Holder::local("janitor", std::process::id());
    let proxy = Proxy::start().await.unwrap();
    let r = recovery(&ns, proxy.client().unwrap()).holder(janitor.clone());
    let planned = plan_of_one(&r).await;

    // The release of `apps` is held at the proxy: while it is in flight, the Lease is the
    // janitor's, so the next run cannot take it and start work beside the release.
    let held = proxy.hold_on("patch kustomizations", 1);
    let running = tokio::spawn(async move { r.execute(&planned.plan).await });
    held.arrived().await;
    let during = lease_holder(&ns).await;
    let next = Lease::acquire(
        ns.client.clone(),
        cfg(&ns),
        Holder::local("next", std::process::id()),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    held.forward();
    let outcome = running.await.unwrap().unwrap();
    println!("lease during the release: {during:?}; next run: {next:?}; outcome: {outcome:?}");
    assert_eq!(
        during.as_deref(),
        Some(janitor.as_str()),
        "the orphans of a free Lease were released without holding it"
    );
    assert!(
        matches!(next, LeaseAcquire::Held { .. }),
        "the next run took the Lease while the release ran: {next:?}"
    );
    assert_eq!(owner_on(&ns, "apps").await, None, "{old} still fences apps");
    assert_eq!(lease_holder(&ns).await, None, "the janitor kept the Lease");
    match outcome {
        RecoverOutcome::Done(r) => assert_eq!(r.released.len(), 1, "{r:?}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_engine_recovery_touches_nothing_when_the_orphans_holder_is_back() {
    let ns = TestNs::new("holder-back").await.unwrap();
    create_ks(&ns, "apps").await;
    let holder = Holder::local("deploy", std::process::id());
    let old = orphan_of_a_free_lease(&ns, &holder).await.to_string();

    let r = recovery(&ns, ns.client.clone());
    let planned = plan_of_one(&r).await;

    // Before the plan runs, the holder of the orphan takes the Lease again: it may be about
    // to work with the fence it left; the plan was made on a free Lease.
    let back = take(&ns, &holder).await;
    let outcome = r.execute(&planned.plan).await.unwrap();
    println!("outcome: {outcome:?}");
    assert_eq!(
        owner_on(&ns, "apps").await.as_deref(),
        Some(old.as_str()),
        "the fence of a holder that holds the Lease again was released"
    );
    assert!(nothing_released(&outcome), "{outcome:?}");
    assert_eq!(lease_holder(&ns).await.as_deref(), Some(holder.as_str()));
    back.leave_held();
}
