//! Tier 2: recovery against the real kube-apiserver. A holder is judged gone only when its
//! Lease stays unchanged for a full duration while watched; the Lease is taken over (a CAS on
//! the watched version) before any fence is released; children go before parents.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use flux_fence::lease::GoneHolder;
use flux_fence::lease::LeaseRecover;
use flux_fence::outcome::AcquireOutcome;
use flux_fence::recovery::{
    ChildMark, HolderEvidence, Planned, RecoverOutcome, Recovery, WatchProgress,
};
use flux_fence::{
    AnnotationKeys, Clock, FenceGuard, Holder, Lease, LeaseAcquire, LeaseConfig, LeaseGuard, Mark,
    SystemClock,
};
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use testkit::TestNs;
use testkit::fixtures::kustomization_resource;

/// A wall clock running `ahead` of the system clock (a recovering machine with a bad clock).
#[derive(Debug)]
struct AheadClock(SignedDuration);

impl Clock for AheadClock {
    fn now(&self) -> Timestamp {
        Timestamp::now().checked_add(self.0).unwrap()
    }
}

fn lease_cfg(ns: &TestNs, duration: Duration, renew_every: Duration) -> LeaseConfig {
    LeaseConfig::new(ns.name.clone(), "flux-handoff")
        .with_duration(duration)
        .with_renew_every(renew_every)
}

fn recovery(ns: &TestNs, cfg: &LeaseConfig, clock: Arc<dyn Clock>) -> Recovery {
    Recovery::new(
        ns.client.clone(),
        AnnotationKeys::default(),
        cfg.clone(),
        vec![kustomization_resource()],
        ChildMark::annotation(RECONCILE, "disabled"),
    )
    .scope(flux_fence::discover::Scope::Namespaces(vec![
        ns.name.clone(),
    ]))
    .clock(clock)
    .watch_timing(Duration::from_millis(200), Duration::from_secs(10))
}

/// Holder `tag` takes the Lease and fences a parent and its child (the child carries the
/// child mark), as a handoff does: parent first.
async fn session(ns: &TestNs, cfg: &LeaseConfig, tag: &str) -> (LeaseGuard, Vec<FenceGuard>) {
    let lease = match Lease::acquire(
        ns.client.clone(),
        cfg.clone(),
        Holder::local(tag, std::process::id()),
        Arc::new(SystemClock),
    )
    .await
    .unwrap()
    {
        LeaseAcquire::Acquired(g) => g,
        other => panic!("lease: {other:?}"),
    };
    let fencer =
        flux_fence::Fencer::new(ns.client.clone(), AnnotationKeys::default(), lease.owner())
            .with_lease(lease.handle());
    let mut guards = Vec::new();
    for (name, marks) in [
        (
            "parent",
            vec![Mark::field("/spec/suspend", json!(true)).exclusive()],
        ),
        ("child", flux_marks("nonce-1")),
    ] {
        create_ks(ns, name).await;
        match fencer
            .acquire(&ks_ref(ns, name), marks, None)
            .await
            .unwrap()
        {
            AcquireOutcome::Acquired(g) => guards.push(g),
            other => panic!("fence {name}: {other:?}"),
        }
    }
    (lease, guards)
}

async fn rvs(ns: &TestNs) -> (String, String) {
    let api = ks_api(ns);
    (
        rv(&get_json(&api, "parent").await),
        rv(&get_json(&api, "child").await),
    )
}

async fn server_lease(ns: &TestNs) -> KubeLease {
    ns.api::<KubeLease>().get("flux-handoff").await.unwrap()
}

fn holder_of(l: &KubeLease) -> Option<String> {
    l.spec.as_ref().and_then(|s| s.holder_identity.clone())
}

async fn plan(r: &Recovery) -> Planned {
    let mut progress = |_: &WatchProgress| {};
    r.plan(&mut progress).await.unwrap()
}

fn released_names(outcome: &RecoverOutcome) -> Vec<String> {
    match outcome {
        RecoverOutcome::Done(r) => r.released.iter().map(|o| o.name.clone()).collect(),
        other => panic!("expected Done, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_a_live_session_with_the_recovering_clock_50s_ahead_releases_nothing() {
    let ns = TestNs::new("recover-live").await.unwrap();
    // A live session: the heartbeat renews every 500 ms, well within the 3 s duration.
    let cfg = lease_cfg(&ns, Duration::from_secs(3), Duration::from_millis(500));
    let (lease, guards) = session(&ns, &cfg, "live").await;
    let before = rvs(&ns).await;
    let holder = lease.owner().holder.to_string();

    let ahead = Arc::new(AheadClock(SignedDuration::from_secs(50)));
    let r = recovery(&ns, &cfg, ahead).include_paused(true);
    let planned = plan(&r).await;
    assert!(
        matches!(&planned.evidence, HolderEvidence::Changed { holder: h, .. } if *h == holder),
        "{:?}",
        planned.evidence
    );
    assert!(planned.plan.is_empty(), "{:?}", planned.plan);
    let outcome = r.execute(&planned.plan).await.unwrap();
    assert!(released_names(&outcome).is_empty());

    // The server holds exactly what it held: both fences, the same holder at the same epoch.
    assert_eq!(rvs(&ns).await, before);
    let l = server_lease(&ns).await;
    assert_eq!(holder_of(&l), Some(holder));
    assert_eq!(
        l.spec.unwrap().lease_transitions,
        Some(i32::try_from(lease.epoch().0).unwrap())
    );
    lease
        .assert()
        .await
        .expect("the live session still holds its Lease");
    let fencer =
        flux_fence::Fencer::new(ns.client.clone(), AnnotationKeys::default(), lease.owner());
    for g in guards.into_iter().rev() {
        let _ = fencer.release(g).await.unwrap();
    }
    let _ = lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_that_loses_the_lease_race_after_the_watch_touches_no_fence() {
    let ns = TestNs::new("recover-race").await.unwrap();
    let cfg = lease_cfg(&ns, Duration::from_secs(2), Duration::from_hours(1));
    let (lease, guards) = session(&ns, &cfg, "crashed").await;
    let gone = lease.owner().holder.to_string();
    // The holder stops renewing, as a killed run does.
    lease.leave_held();
    for g in guards {
        g.leave_in_place();
    }
    let before = rvs(&ns).await;
    let r = recovery(&ns, &cfg, Arc::new(SystemClock));
    let api = ns.api::<KubeLease>();

    // 1. The holder renews after the watch (its process was only stalled).
    let planned = plan(&r).await;
    assert!(planned.plan.take_lease.is_some(), "{:?}", planned.plan);
    assert_eq!(planned.plan.release.len(), 2);
    let now = MicroTime(Timestamp::now());
    let renewed = json!({ "spec": { "renewTime": now } });
    api.patch(
        "flux-handoff",
        &PatchParams::default(),
        &Patch::Merge(&renewed),
    )
    .await
    .unwrap();
    let outcome = r.execute(&planned.plan).await.unwrap();
    assert!(
        matches!(&outcome, RecoverOutcome::LeaseRaceLost { gone: g, .. } if *g == gone),
        "{outcome:?}"
    );
    assert_eq!(rvs(&ns).await, before, "no fence touched");
    assert_eq!(holder_of(&server_lease(&ns).await), Some(gone.clone()));

    // 2. Another recoverer takes the Lease after our watch, on the same evidence.
    let planned = plan(&r).await;
    let take = planned
        .plan
        .take_lease
        .clone()
        .expect("a second watch proves it gone");
    let other = Holder::local("other-recoverer", std::process::id());
    let LeaseRecover::Recovered(theirs) = Lease::recover(
        ns.client.clone(),
        cfg.clone(),
        other.clone(),
        Arc::new(SystemClock),
        GoneHolder::new(take.holder, take.resource_version, "test"),
    )
    .await
    .unwrap() else {
        panic!("the other recoverer takes it")
    };
    let outcome = r.execute(&planned.plan).await.unwrap();
    assert!(
        matches!(outcome, RecoverOutcome::LeaseRaceLost { .. }),
        "{outcome:?}"
    );
    assert_eq!(rvs(&ns).await, before, "no fence touched");
    assert_eq!(holder_of(&server_lease(&ns).await), Some(other.to_string()));
    let _ = theirs.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_a_crashed_holder_releases_children_before_parents_then_the_lease() {
    let ns = TestNs::new("recover-crash").await.unwrap();
    let cfg = lease_cfg(&ns, Duration::from_secs(2), Duration::from_hours(1));
    let (lease, guards) = session(&ns, &cfg, "crashed").await;
    let epoch = lease.epoch().0;
    lease.leave_held();
    for g in guards {
        g.leave_in_place();
    }
    let r = recovery(&ns, &cfg, Arc::new(SystemClock));
    let planned = plan(&r).await;
    let HolderEvidence::Unchanged { watched, .. } = &planned.evidence else {
        panic!("{:?}", planned.evidence)
    };
    assert!(
        *watched >= Duration::from_secs(2),
        "a full lease duration: {watched:?}"
    );
    let outcome = r.execute(&planned.plan).await.unwrap();
    assert_eq!(released_names(&outcome), ["child", "parent"]);
    let RecoverOutcome::Done(report) = &outcome else {
        unreachable!()
    };
    assert!(
        report.lease_released && report.problems.is_empty(),
        "{report:?}"
    );
    assert_eq!(report.lease_taken.map(|e| e.0), Some(epoch + 1));

    // On the server: both restored, the child released before the parent, the Lease free at
    // the next epoch.
    let api = ks_api(&ns);
    let (parent, child) = (
        get_json(&api, "parent").await,
        get_json(&api, "child").await,
    );
    for obj in [&parent, &child] {
        assert_eq!(annotations(obj), json!({ "keep": "me" }), "{obj}");
        assert_ne!(obj.pointer("/spec/suspend"), Some(&Value::Bool(true)));
    }
    let rv_num = |o: &Value| rv(o).parse::<u64>().unwrap();
    assert!(
        rv_num(&child) < rv_num(&parent),
        "etcd revisions: the child was written before the parent"
    );
    let l = server_lease(&ns).await.spec.unwrap();
    assert_eq!(l.holder_identity, None);
    assert_eq!(l.lease_transitions, Some(i32::try_from(epoch + 1).unwrap()));
}
