//! Tier 2: recovery on evidence from GitHub Actions, against the real kube-apiserver and a
//! local stub of the GitHub REST API. A CI holder is gone only when its exact run attempt is
//! `completed` and the Lease is unchanged since it was read; every other answer keeps it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use flux_fence::liveness::{GithubConfig, GithubRuns, LivenessSource};
use flux_fence::outcome::AcquireOutcome;
use flux_fence::recovery::{
    ChildMark, HolderEvidence, KeepReason, Planned, RecoverOutcome, Recovery, Subject,
    WatchProgress,
};
use flux_fence::{
    AnnotationKeys, FenceGuard, Holder, Lease, LeaseAcquire, LeaseConfig, LeaseGuard, Mark,
    SystemClock,
};
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use testkit::TestNs;
use testkit::fixtures::kustomization_resource;
use testkit::github_stub::{Answer, GithubStub};

const REPO: &str = "acme/deploy";
const TOKEN: &str = "ghs_stubTokenNeverPrinted0123456789";

fn lease_cfg(ns: &TestNs, renew_every: Duration) -> LeaseConfig {
    let mut cfg = LeaseConfig::new(ns.name.clone(), "flux-handoff");
    cfg.duration = Duration::from_secs(3);
    cfg.renew_every = renew_every;
    cfg
}

fn source(stub: &GithubStub, timeout: Duration) -> Arc<dyn LivenessSource> {
    testkit::install_crypto();
    let cfg = GithubConfig::new(&stub.url, REPO, TOKEN.to_string().into())
        .unwrap()
        .timeout(timeout);
    Arc::new(GithubRuns::new(cfg).unwrap())
}

fn recovery(
    ns: &TestNs,
    cfg: &LeaseConfig,
    src: Arc<dyn LivenessSource>,
    wait: Duration,
) -> Recovery {
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
    .watch_timing(Duration::from_millis(100), Duration::from_secs(10))
    .ci_evidence(src, Some(wait))
}

/// `holder` takes the Lease and fences a parent and its child, as a handoff does.
async fn session(ns: &TestNs, cfg: &LeaseConfig, holder: Holder) -> (LeaseGuard, Vec<FenceGuard>) {
    let LeaseAcquire::Acquired(lease) = Lease::acquire(
        ns.client.clone(),
        cfg.clone(),
        holder,
        Arc::new(SystemClock),
    )
    .await
    .unwrap() else {
        panic!("lease")
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

/// A CI session killed without cleanup: Lease and fences left in place.
async fn killed(ns: &TestNs, cfg: &LeaseConfig, run: u64, attempt: u64) -> String {
    let holder = Holder::for_ci_run(&run.to_string(), &attempt.to_string()).unwrap();
    let (lease, guards) = session(ns, cfg, holder.clone()).await;
    lease.leave_held();
    for g in guards {
        g.leave_in_place();
    }
    holder.to_string()
}

async fn rvs(ns: &TestNs) -> (String, String, Option<String>) {
    let api = ks_api(ns);
    let lease = ns.api::<KubeLease>().get_opt("flux-handoff").await.unwrap();
    (
        rv(&get_json(&api, "parent").await),
        rv(&get_json(&api, "child").await),
        lease.and_then(|l| l.metadata.resource_version),
    )
}

async fn lease_holder(ns: &TestNs) -> Option<String> {
    ns.api::<KubeLease>()
        .get("flux-handoff")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity)
}

async fn plan(r: &Recovery) -> Planned {
    let mut progress = |_: &WatchProgress| {};
    r.plan(&mut progress).await.unwrap()
}

fn path(run: u64, attempt: u64) -> String {
    format!("/repos/{REPO}/actions/runs/{run}/attempts/{attempt}")
}

/// The Lease holder is kept with a `NotProved` line containing `want`; nothing changes.
async fn assert_kept(ns: &TestNs, r: &Recovery, holder: &str, want: &str) {
    let before = rvs(ns).await;
    let planned = plan(r).await;
    let HolderEvidence::NotProved { holder: h, why } = &planned.evidence else {
        panic!("{:?}", planned.evidence)
    };
    assert_eq!(h, holder);
    assert!(why.contains(want), "{why}");
    assert!(!why.contains('\n') && !why.contains(TOKEN), "{why}");
    assert!(planned.plan.is_empty(), "{:?}", planned.plan);
    assert!(
        planned.plan.keep.iter().any(|(s, k)| *s == Subject::Lease
            && matches!(k, KeepReason::NotProved { why: w, .. } if w == why)),
        "{:?}",
        planned.plan.keep
    );
    let outcome = r.execute(&planned.plan).await.unwrap();
    assert!(
        matches!(&outcome, RecoverOutcome::Done(d) if d.released.is_empty()),
        "{outcome:?}"
    );
    assert_eq!(rvs(ns).await, before, "the server holds what it held");
    assert_eq!(lease_holder(ns).await.as_deref(), Some(holder));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_liveness_completed_attempt_releases_children_then_parents_then_the_lease() {
    let ns = TestNs::new("ci-done").await.unwrap();
    let cfg = lease_cfg(&ns, Duration::from_hours(1));
    let holder = killed(&ns, &cfg, 4242, 2).await;
    let stub = GithubStub::start().await.unwrap();
    stub.script(
        REPO,
        4242,
        2,
        vec![Answer::run(REPO, 4242, 2, Some("completed"))],
    );
    let r = recovery(
        &ns,
        &cfg,
        source(&stub, Duration::from_secs(5)),
        Duration::from_secs(30),
    );
    let planned = plan(&r).await;
    let HolderEvidence::Reported {
        holder: h,
        evidence,
        ..
    } = &planned.evidence
    else {
        panic!("{:?}", planned.evidence)
    };
    assert_eq!(*h, holder);
    assert!(
        evidence.contains("GitHub run 4242 attempt 2 in acme/deploy is completed"),
        "{evidence}"
    );
    let outcome = r.execute(&planned.plan).await.unwrap();
    let RecoverOutcome::Done(report) = &outcome else {
        panic!("{outcome:?}")
    };
    let names: Vec<_> = report.released.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["child", "parent"]);
    assert!(
        report.lease_released && report.problems.is_empty(),
        "{report:?}"
    );

    // On the server: both restored, the Lease free. GitHub was asked the exact attempt only,
    // with the token in the Authorization header.
    let api = ks_api(&ns);
    for name in ["parent", "child"] {
        let obj = get_json(&api, name).await;
        assert_eq!(annotations(&obj), json!({ "keep": "me" }), "{obj}");
    }
    assert_eq!(lease_holder(&ns).await, None);
    let seen = stub.seen();
    assert!(!seen.is_empty());
    for s in &seen {
        assert_eq!(s.path, path(4242, 2));
        assert_eq!(
            s.authorization.as_deref(),
            Some(format!("Bearer {TOKEN}").as_str())
        );
        assert_eq!(s.accept.as_deref(), Some("application/vnd.github+json"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_liveness_in_progress_queued_and_waiting_runs_are_kept() {
    let ns = TestNs::new("ci-live").await.unwrap();
    let cfg = lease_cfg(&ns, Duration::from_hours(1));
    let holder = killed(&ns, &cfg, 77, 1).await;
    let stub = GithubStub::start().await.unwrap();
    for status in ["in_progress", "queued", "waiting"] {
        stub.script(REPO, 77, 1, vec![Answer::run(REPO, 77, 1, Some(status))]);
        let r = recovery(
            &ns,
            &cfg,
            source(&stub, Duration::from_secs(5)),
            Duration::from_millis(300),
        );
        assert_kept(&ns, &r, &holder, &format!("is {status}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_liveness_a_run_that_finishes_while_recovery_waits_is_recovered() {
    let ns = TestNs::new("ci-finish").await.unwrap();
    let cfg = lease_cfg(&ns, Duration::from_hours(1));
    let holder = killed(&ns, &cfg, 900, 3).await;
    let stub = GithubStub::start().await.unwrap();
    stub.script(
        REPO,
        900,
        3,
        vec![
            Answer::run(REPO, 900, 3, Some("in_progress")),
            Answer::run(REPO, 900, 3, Some("in_progress")),
            Answer::run(REPO, 900, 3, Some("completed")),
        ],
    );
    let r = recovery(
        &ns,
        &cfg,
        source(&stub, Duration::from_secs(5)),
        Duration::from_mins(1),
    );
    let mut waited = 0;
    let mut progress = |p: &WatchProgress| {
        assert_eq!(p.holder, holder);
        waited += 1;
    };
    let planned = r.plan(&mut progress).await.unwrap();
    assert_eq!(waited, 2, "asked again while in progress");
    assert!(
        matches!(&planned.evidence, HolderEvidence::Reported { .. }),
        "{:?}",
        planned.evidence
    );
    let outcome = r.execute(&planned.plan).await.unwrap();
    assert!(
        matches!(&outcome, RecoverOutcome::Done(d) if d.released.len() == 2),
        "{outcome:?}"
    );
    assert_eq!(lease_holder(&ns).await, None);
    assert_eq!(stub.seen().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_liveness_failing_slow_and_silent_answers_are_kept_with_one_line() {
    let ns = TestNs::new("ci-fail").await.unwrap();
    let cfg = lease_cfg(&ns, Duration::from_hours(1));
    let holder = killed(&ns, &cfg, 55, 1).await;
    let stub = GithubStub::start().await.unwrap();
    let cases = [
        (Answer::error(404), "was not found (404"),
        (Answer::error(502), "GitHub answered 502"),
        (Answer::error(403), "needs `actions: read`"),
        (Answer::run(REPO, 55, 1, None), "has no status"),
        (
            Answer::run(REPO, 55, 1, Some("completed")).slow(Duration::from_secs(3)),
            "no answer within",
        ),
    ];
    for (answer, want) in cases {
        stub.script(REPO, 55, 1, vec![answer]);
        let r = recovery(
            &ns,
            &cfg,
            source(&stub, Duration::from_millis(500)),
            Duration::from_secs(30),
        );
        assert_kept(&ns, &r, &holder, want).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_liveness_a_run_of_another_repository_is_kept() {
    let ns = TestNs::new("ci-repo").await.unwrap();
    let cfg = lease_cfg(&ns, Duration::from_hours(1));
    let holder = killed(&ns, &cfg, 31, 1).await;
    let stub = GithubStub::start().await.unwrap();
    stub.script(
        REPO,
        31,
        1,
        vec![Answer::run("evil/fork", 31, 1, Some("completed"))],
    );
    let r = recovery(
        &ns,
        &cfg,
        source(&stub, Duration::from_secs(5)),
        Duration::from_secs(30),
    );
    assert_kept(&ns, &r, &holder, "belongs to repository evil/fork").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_liveness_the_attempt_is_pinned_never_the_latest() {
    let ns = TestNs::new("ci-pin").await.unwrap();
    let cfg = lease_cfg(&ns, Duration::from_hours(1));
    let holder = killed(&ns, &cfg, 64, 1).await;
    let stub = GithubStub::start().await.unwrap();
    // Attempt 1 (the holder) still runs; the re-run, attempt 2, completed.
    stub.script(
        REPO,
        64,
        1,
        vec![Answer::run(REPO, 64, 1, Some("in_progress"))],
    );
    stub.script(
        REPO,
        64,
        2,
        vec![Answer::run(REPO, 64, 2, Some("completed"))],
    );
    // An answer about another attempt at the holder's path is not evidence either.
    let r = recovery(
        &ns,
        &cfg,
        source(&stub, Duration::from_secs(5)),
        Duration::from_millis(300),
    );
    assert_kept(&ns, &r, &holder, "attempt 1 in acme/deploy is in_progress").await;
    stub.script(
        REPO,
        64,
        1,
        vec![Answer::run(REPO, 64, 2, Some("completed"))],
    );
    assert_kept(&ns, &r, &holder, "names another run or attempt").await;
    assert!(stub.seen().iter().all(|s| s.path == path(64, 1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_liveness_a_holder_without_a_run_reference_is_kept_and_github_not_asked() {
    let ns = TestNs::new("ci-local").await.unwrap();
    let cfg = lease_cfg(&ns, Duration::from_hours(1));
    let holder = Holder::local("laptop", 4242);
    let (lease, guards) = session(&ns, &cfg, holder.clone()).await;
    lease.leave_held();
    for g in guards {
        g.leave_in_place();
    }
    let stub = GithubStub::start().await.unwrap();
    let r = recovery(
        &ns,
        &cfg,
        source(&stub, Duration::from_secs(5)),
        Duration::from_secs(30),
    );
    assert_kept(&ns, &r, holder.as_str(), "carries no GitHub run reference").await;
    assert!(stub.seen().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_liveness_a_lease_renewed_since_it_was_read_is_kept() {
    let ns = TestNs::new("ci-renew").await.unwrap();
    // A live heartbeat every 200 ms; GitHub answers "completed" after 1 s (a stale answer,
    // or a holder on another machine): the Lease moved meanwhile, so the holder is live.
    let cfg = lease_cfg(&ns, Duration::from_millis(200));
    let holder = Holder::for_ci_run("12", "1").unwrap();
    let (lease, guards) = session(&ns, &cfg, holder.clone()).await;
    let stub = GithubStub::start().await.unwrap();
    stub.script(
        REPO,
        12,
        1,
        vec![Answer::run(REPO, 12, 1, Some("completed")).slow(Duration::from_secs(1))],
    );
    let r = recovery(
        &ns,
        &cfg,
        source(&stub, Duration::from_secs(5)),
        Duration::from_secs(30),
    );
    let planned = plan(&r).await;
    assert!(
        matches!(&planned.evidence, HolderEvidence::Changed { holder: h, .. } if h == holder.as_str()),
        "{:?}",
        planned.evidence
    );
    assert!(planned.plan.is_empty(), "{:?}", planned.plan);
    lease
        .assert()
        .await
        .expect("the live holder keeps its Lease");
    let fencer =
        flux_fence::Fencer::new(ns.client.clone(), AnnotationKeys::default(), lease.owner());
    for g in guards.into_iter().rev() {
        let _ = fencer.release(g).await.unwrap();
    }
    let _ = lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_liveness_a_lost_lease_cas_after_the_answer_touches_no_fence() {
    let ns = TestNs::new("ci-race").await.unwrap();
    let cfg = lease_cfg(&ns, Duration::from_hours(1));
    let holder = killed(&ns, &cfg, 808, 1).await;
    let stub = GithubStub::start().await.unwrap();
    stub.script(
        REPO,
        808,
        1,
        vec![Answer::run(REPO, 808, 1, Some("completed"))],
    );
    let r = recovery(
        &ns,
        &cfg,
        source(&stub, Duration::from_secs(5)),
        Duration::from_secs(30),
    );
    let planned = plan(&r).await;
    assert!(planned.plan.take_lease.is_some(), "{:?}", planned.plan);
    // Someone writes the Lease between the answer and the takeover.
    let renewed = json!({ "spec": { "renewTime": MicroTime(Timestamp::now()) } });
    ns.api::<KubeLease>()
        .patch(
            "flux-handoff",
            &PatchParams::default(),
            &Patch::Merge(&renewed),
        )
        .await
        .unwrap();
    let before = rvs(&ns).await;
    let outcome = r.execute(&planned.plan).await.unwrap();
    assert!(
        matches!(&outcome, RecoverOutcome::LeaseRaceLost { gone, .. } if *gone == holder),
        "{outcome:?}"
    );
    assert_eq!(rvs(&ns).await, before, "no fence and no Lease touched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_liveness_no_lease_held_is_nothing_to_do_and_github_not_asked() {
    let ns = TestNs::new("ci-none").await.unwrap();
    let cfg = lease_cfg(&ns, Duration::from_hours(1));
    let stub = GithubStub::start().await.unwrap();
    let r = recovery(
        &ns,
        &cfg,
        source(&stub, Duration::from_secs(5)),
        Duration::from_secs(30),
    );
    let planned = plan(&r).await;
    assert_eq!(planned.evidence, HolderEvidence::None);
    assert!(
        planned.plan.is_empty() && planned.plan.keep.is_empty(),
        "{:?}",
        planned.plan
    );
    assert!(stub.seen().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_liveness_a_finished_run_whose_child_cannot_be_released_keeps_the_parent() {
    let ns = TestNs::new("ci-child").await.unwrap();
    let cfg = lease_cfg(&ns, Duration::from_hours(1));
    let holder = killed(&ns, &cfg, 91, 1).await;
    // Another writer changed a mark on the child since the fence: it cannot be restored safely.
    merge(
        &ks_api(&ns),
        "child",
        json!({"metadata": {"annotations": {RECONCILE: "enabled"}}}),
    )
    .await;
    let api = ks_api(&ns);
    let before = (
        rv(&get_json(&api, "parent").await),
        rv(&get_json(&api, "child").await),
    );
    let stub = GithubStub::start().await.unwrap();
    stub.script(
        REPO,
        91,
        1,
        vec![Answer::run(REPO, 91, 1, Some("completed"))],
    );
    let r = recovery(
        &ns,
        &cfg,
        source(&stub, Duration::from_secs(5)),
        Duration::from_secs(30),
    );
    let planned = plan(&r).await;
    assert!(planned.plan.release.is_empty(), "{:?}", planned.plan);
    let kept = |name: &str| {
        planned.plan.keep.iter().find_map(|(s, k)| match s {
            Subject::Fence(o) if o.name == name => Some(k.clone()),
            _ => None,
        })
    };
    assert!(
        matches!(kept("child"), Some(KeepReason::Withheld(_))),
        "{:?}",
        planned.plan
    );
    assert!(
        matches!(kept("parent"), Some(KeepReason::ChildKept { holder: h }) if h == holder),
        "{:?}",
        planned.plan
    );
    let outcome = r.execute(&planned.plan).await.unwrap();
    assert!(
        matches!(&outcome, RecoverOutcome::Done(d) if d.released.is_empty()),
        "{outcome:?}"
    );
    let after = (
        rv(&get_json(&api, "parent").await),
        rv(&get_json(&api, "child").await),
    );
    assert_eq!(after, before, "no fence touched");
}
