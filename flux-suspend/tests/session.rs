//! The session API against the real API server with the controller model: `run_paused` releases
//! on error, panic, cancellation and a lost Lease; the deploy example runs end to end.

mod common;

use std::time::Duration;

use common::{OWNER_KEY, PARENT, TARGET, annotation, suspended};
use flux_model::model::{ModelHandle, Phase, Touch, start_seeded};
use flux_suspend::object::{get_json, kustomization};
use flux_suspend::steps::Step;
use flux_suspend::{
    Cancel, Event, ResumeError, ResumeOptions, Session, SessionError, SessionOptions, TargetSpec,
    resume_holder,
};
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::Value;
use testkit::TestNs;

struct Tree {
    ns: TestNs,
    model: ModelHandle,
}

impl Tree {
    async fn new(prefix: &str) -> Self {
        let ns = TestNs::new(prefix).await.unwrap();
        let model = start_seeded(&ns.client, &ns.name, |c| c).await.unwrap();
        Self { ns, model }
    }

    fn opts(&self) -> SessionOptions {
        let mut o =
            SessionOptions::new(vec![TargetSpec::new(kustomization(&self.ns.name, TARGET))]);
        o.lease.namespace.clone_from(&self.ns.name);
        o.interval = Duration::from_millis(100);
        o.timeout = Duration::from_secs(30);
        o
    }

    /// A session over this tree with [`Tree::opts`], started.
    async fn start(&self, cancel: Cancel) -> Session {
        self.start_with(self.opts(), cancel).await
    }

    /// A session over this tree with `opts`, started.
    async fn start_with(&self, opts: SessionOptions, cancel: Cancel) -> Session {
        Session::start(self.ns.client.clone(), opts, cancel)
            .await
            .unwrap()
    }

    async fn get(&self, name: &str) -> Value {
        get_json(&self.ns.client, &kustomization(&self.ns.name, name))
            .await
            .unwrap()
    }

    async fn lease_holder(&self) -> Option<String> {
        self.ns
            .api::<Lease>()
            .get_opt("flux-handoff")
            .await
            .unwrap()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
    }

    /// Leaves the target mid-reconcile (hung in its build phase), so a pause waits for its
    /// acknowledgement after fencing it until `model.release(TARGET)`.
    async fn target_mid_reconcile(&self) {
        self.model.hang_at(TARGET, Phase::Build);
        let busy = Touch::Annotate {
            key: "reconcile.fluxcd.io/requestedAt".into(),
            value: "busy".into(),
        };
        self.model.touch_now(TARGET, &busy).await.unwrap();
        self.model.wait_hanging(TARGET).await.unwrap();
    }

    /// What the server holds afterwards: no fence, no suspend, the Lease free.
    async fn assert_nothing_held(&self) {
        for name in [PARENT, TARGET] {
            let o = self.get(name).await;
            assert_eq!(annotation(&o, OWNER_KEY), None, "{name} still fenced");
            assert!(!suspended(&o), "{name} still suspended");
        }
        assert_eq!(self.lease_holder().await, None, "the Lease is still held");
    }
}

fn released_in_order(released: &[flux_fence::ObjectRef]) {
    assert_eq!(released.len(), 2, "{released:?}");
    assert_eq!(released[0].name, TARGET, "target first: {released:?}");
    assert_eq!(released[1].name, PARENT, "parent second: {released:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_run_paused_releases_everything_after_the_work_fails() {
    let t = Tree::new("session-err").await;
    let session = t.start(Cancel::new()).await;
    let outcome = session
        .run_paused(
            |_| {},
            |paused| async move {
                assert!(paused.proof.passes() >= 2);
                Err::<(), _>(std::io::Error::other("the deploy failed"))
            },
        )
        .await;
    released_in_order(&outcome.released);
    assert!(outcome.lease_released);
    assert!(outcome.cleanup.is_ok());
    let err = outcome.into_result().unwrap_err();
    assert!(matches!(err, SessionError::Work(_)), "{err:?}");
    assert_eq!(err.to_string(), "the deploy failed");
    t.assert_nothing_held().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_run_paused_releases_everything_after_a_panic_in_the_work() {
    let t = Tree::new("session-panic").await;
    let session = t.start(Cancel::new()).await;
    let outcome = session
        .run_paused(
            |_| {},
            |_paused| async move {
                if TARGET.is_empty() {
                    return Ok::<(), std::io::Error>(());
                }
                panic!("the work broke");
            },
        )
        .await;
    released_in_order(&outcome.released);
    match outcome.result {
        Err(SessionError::WorkPanicked(text)) => assert_eq!(text, "the work broke"),
        other => panic!("expected WorkPanicked, got {other:?}"),
    }
    t.assert_nothing_held().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_cancelled_during_the_work_stops_it_and_releases_in_order() {
    let t = Tree::new("session-cancel-work").await;
    let cancel = Cancel::new();
    let session = t.start(cancel.clone()).await;
    let outcome = session
        .run_paused(
            |_| {},
            |paused| async move {
                // A signal arrives while the work runs; the work sees it through its Cancel.
                cancel.stop();
                paused.cancel.stopped().await;
                Err::<(), _>(std::io::Error::other("stopped"))
            },
        )
        .await;
    released_in_order(&outcome.released);
    assert!(outcome.cleanup.is_ok());
    t.assert_nothing_held().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_cancelled_while_waiting_for_an_ack_releases_what_it_fenced() {
    let t = Tree::new("session-cancel-ack").await;
    t.target_mid_reconcile().await;
    let cancel = Cancel::new();
    let session = t.start(cancel.clone()).await;
    let mut steps = Vec::new();
    let outcome = session
        .run_paused(
            |e| {
                if e == Event::Step(Step::FenceTargets) {
                    cancel.stop();
                }
                steps.push(e);
            },
            |_paused| async {
                panic!("the work must not run after a cancelled pause");
                #[allow(unreachable_code)]
                Ok::<(), std::io::Error>(())
            },
        )
        .await
        .into_result();
    match outcome {
        Err(SessionError::Cancelled {
            changed: true,
            during,
        }) => {
            assert!(during.contains("acknowledge"), "{during}");
        }
        other => panic!("expected Cancelled, got {other:?}"),
    }
    t.model.release(TARGET);
    assert!(steps.contains(&Event::Released(kustomization(&t.ns.name, TARGET))));
    t.assert_nothing_held().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lost_while_the_work_runs_stops_it_and_ends_with_lease_lost() {
    let t = Tree::new("session-lease-lost").await;
    let mut opts = t.opts();
    opts.lease.duration = Duration::from_secs(5);
    opts.lease.renew_every = Duration::from_millis(200);
    let session = t.start_with(opts, Cancel::new()).await;
    let leases = t.ns.api::<Lease>();
    let outcome = session
        .run_paused(
            |_| {},
            |paused| async move {
                // Another actor deletes the Lease while the work runs.
                leases
                    .delete("flux-handoff", &kube::api::DeleteParams::default())
                    .await
                    .unwrap();
                paused.cancel.stopped().await;
                Ok::<_, std::io::Error>("finished after the stop")
            },
        )
        .await;
    match &outcome.result {
        Err(SessionError::LeaseLost(reason)) => {
            assert_eq!(reason.to_string(), "the Lease was deleted", "{reason:?}");
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    // The fences carry our epoch: released by CAS even without the Lease.
    released_in_order(&outcome.released);
    for name in [PARENT, TARGET] {
        assert_eq!(annotation(&t.get(name).await, OWNER_KEY), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_invalid_options_are_refused_before_any_request() {
    // A client for an address where nothing listens: any request would fail as an API error.
    let config = kube::Config::new("https://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let mut opts = SessionOptions::new(vec![TargetSpec::new(kustomization("a", "b"))]);
    opts.interval = opts.timeout;
    match Session::start(client, opts, Cancel::new()).await {
        Err(SessionError::Invalid(line)) => assert!(line.contains("interval"), "{line}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_example_deploy_pauses_applies_and_resumes() {
    let t = Tree::new("session-example").await;
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> → target/<profile>/examples/deploy
    let example = exe
        .parent()
        .and_then(std::path::Path::parent)
        .unwrap()
        .join("examples/deploy");
    assert!(example.exists(), "{} not built", example.display());
    let kubeconfig = testkit::plane::kubeconfig().unwrap();
    let out = tokio::process::Command::new(&example)
        .args([t.ns.name.as_str(), TARGET, "release-info", "v1.2.3"])
        .env("KUBECONFIG", kubeconfig)
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("applied"), "{err}");
    let cm =
        t.ns.api::<k8s_openapi::api::core::v1::ConfigMap>()
            .get("release-info")
            .await
            .unwrap();
    assert_eq!(
        cm.data
            .unwrap_or_default()
            .get("version")
            .map(String::as_str),
        Some("v1.2.3")
    );
    t.assert_nothing_held().await;
}

/// Runs `fut` to its end from inside a synchronous progress callback (multi-thread runtime).
fn block_on<T>(fut: impl Future<Output = T>) -> T {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(fut))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_park_that_cannot_park_the_lease_is_an_error_naming_it() {
    let t = Tree::new("session-park").await;
    let session = t.start(Cancel::new()).await;
    let leases = t.ns.api::<Lease>();
    let outcome = session
        .park(|e| {
            if e == Event::Step(Step::Prove) {
                // Someone deletes the Lease between the proof and the park.
                block_on(leases.delete("flux-handoff", &kube::api::DeleteParams::default()))
                    .unwrap();
            }
        })
        .await;
    match outcome.result {
        Err(SessionError::NotParked { lease, .. }) => {
            assert_eq!(lease, format!("{}/flux-handoff", t.ns.name));
        }
        other => panic!("expected NotParked, got {other:?}"),
    }
    // The pause itself stays in place for `resume --holder`.
    assert!(annotation(&t.get(TARGET).await, OWNER_KEY).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_refusal_found_after_fencing_the_parent_is_not_a_plain_refusal() {
    let t = Tree::new("session-refused-late").await;
    let session = t.start(Cancel::new()).await;
    let target = kustomization(&t.ns.name, TARGET);
    let api = flux_suspend::object::api(&t.ns.client, &target);
    let outcome = session
        .run_paused(
            |e| {
                if e == Event::Step(Step::FenceParents) {
                    // Another holder fences the target after our preflight read it.
                    let patch = serde_json::json!({ "metadata": { "annotations": {
                        OWNER_KEY: "someone-else;7" } } });
                    block_on(api.patch(
                        TARGET,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(patch),
                    ))
                    .unwrap();
                }
            },
            |_paused| async { Ok::<(), std::io::Error>(()) },
        )
        .await;
    match &outcome.result {
        Err(e @ SessionError::RefusedAfterWrites { object, .. }) => {
            assert!(object.to_string().ends_with(TARGET), "{object}");
            assert!(!e.changed_nothing());
        }
        other => panic!("expected RefusedAfterWrites, got {other:?}"),
    }
    // What this run wrote was undone: the parent is released, the Lease is free; the other
    // holder's fence on the target is untouched.
    assert_eq!(outcome.released.len(), 1, "{:?}", outcome.released);
    assert_eq!(outcome.released[0].name, PARENT);
    let p = t.get(PARENT).await;
    assert_eq!(annotation(&p, OWNER_KEY), None);
    assert!(!suspended(&p));
    assert_eq!(
        annotation(&t.get(TARGET).await, OWNER_KEY),
        Some("someone-else;7")
    );
    assert_eq!(t.lease_holder().await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_reports_a_wait_that_goes_on_with_what_it_waits_for() {
    let t = Tree::new("session-waiting").await;
    t.target_mid_reconcile().await;
    let session = t.start(Cancel::new()).await;
    let mut lines = Vec::new();
    let outcome = session
        .run_paused(
            |e| {
                if let Event::Waiting(w) = &e {
                    lines.push(w.to_string());
                    // Told once; then the reconcile that started before the fence ends.
                    t.model.release(TARGET);
                }
            },
            |_paused| async { Ok::<(), std::io::Error>(()) },
        )
        .await;
    outcome.into_result().unwrap();
    let first = lines
        .first()
        .expect("no waiting line in a wait of over 10 s");
    assert!(
        // The wait's budget is what is left of the whole pause's 30 s.
        first.starts_with("still waiting for the targets to acknowledge the suspend (10s of 2"),
        "{first}"
    );
    assert!(
        first.ends_with("a reconcile of the target that started before its fence is still running"),
        "{first}"
    );
    t.assert_nothing_held().await;
}

fn resume_opts(t: &Tree, holder: flux_fence::Holder) -> ResumeOptions {
    let scope = flux_fence::discover::Scope::Namespaces(vec![t.ns.name.clone()]);
    let mut o = ResumeOptions::new(holder, scope);
    o.lease.namespace.clone_from(&t.ns.name);
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_a_parked_pause_is_resumed_by_holder() {
    let t = Tree::new("session-resume").await;
    let session = t.start(Cancel::new()).await;
    let parked = session.park(|_| {}).await.into_result().unwrap();
    assert!(annotation(&t.get(TARGET).await, OWNER_KEY).is_some());
    let mut events = Vec::new();
    let resumed = resume_holder(&t.ns.client, &resume_opts(&t, parked.holder), |e| {
        events.push(e);
    })
    .await
    .unwrap();
    assert_eq!(resumed.released.len(), 2, "{resumed:?}");
    assert_eq!(events.last(), Some(&Event::LeaseReleased), "{events:?}");
    t.assert_nothing_held().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_resume_by_holder_of_a_running_session_is_refused_and_changes_nothing() {
    let t = Tree::new("session-resume-live").await;
    let session = t.start(Cancel::new()).await;
    let outcome = session
        .run_paused(
            |_| {},
            |paused| {
                let (client, opts) = (t.ns.client.clone(), resume_opts(&t, paused.holder));
                async move {
                    let refused = resume_holder(&client, &opts, |_| {}).await;
                    Ok::<_, std::convert::Infallible>(refused)
                }
            },
        )
        .await;
    // Still fenced when the refusal came back: the session released afterwards.
    let refused = outcome.result.unwrap();
    assert!(
        matches!(&refused, Err(ResumeError::LooksLive { .. })),
        "{refused:?}"
    );
    assert!(refused.unwrap_err().nothing_changed());
    assert_eq!(
        outcome.released.len(),
        2,
        "the session released its own fences"
    );
    t.assert_nothing_held().await;
}

/// A library caller with its own annotation prefix and the default `LeaseConfig`: `park` marks
/// the Lease under the caller's key, so the release by `resume_holder` must clear that key —
/// else the next run of the same holder name looks parked (and a `resume` could take it live).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_a_custom_prefix_parked_mark_ends_with_its_pause() {
    let t = Tree::new("session-prefix").await;
    let keys = flux_fence::AnnotationKeys::with_prefix("team.example.com");
    let mut opts = t.opts();
    opts.keys = keys.clone();
    let session = t.start_with(opts, Cancel::new()).await;
    let parked = session.park(|_| {}).await.into_result().unwrap();
    let marks = |l: Option<Lease>| {
        l.and_then(|l| l.metadata.annotations)
            .unwrap_or_default()
            .into_keys()
            .filter(|k| k.ends_with("/parked"))
            .collect::<Vec<_>>()
    };
    let lease = || async { t.ns.api::<Lease>().get_opt("flux-handoff").await.unwrap() };
    assert_eq!(marks(lease().await), vec![keys.parked.clone()]);
    let mut ropts = resume_opts(&t, parked.holder);
    ropts.keys = keys;
    resume_holder(&t.ns.client, &ropts, |_| {}).await.unwrap();
    assert_eq!(t.lease_holder().await, None);
    assert_eq!(
        marks(lease().await),
        Vec::<String>::new(),
        "the mark outlived its pause"
    );
}
