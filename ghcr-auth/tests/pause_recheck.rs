//! Tier 2: the root Secret under a pause that a person breaks after the proof. A person sets
//! `spec.suspend=false` on the fenced target after the proof and before the root Secret write
//! (the write gate is the hook: it acts on its call for the root, no sleeps); the recheck right
//! before the root write refuses it — or the session's watch of the pause sees it first and
//! stops the work (`SessionError::PauseBroken`) —, either way class `PauseBroken` (exit 8),
//! nothing more is written, and the session's fence report names the target (issue 18).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flux_fence::{LeaseHandle, ObjectRef};
use flux_model::model::start_seeded;
use flux_suspend::object::{api, get_json, kustomization};
use flux_suspend::{Cancel, Session, SessionOptions, TargetSpec as PauseTarget};
use ghcr_auth::BoxError;
use ghcr_auth::credential::DockerConfig;
use ghcr_auth::fanout::Route;
use ghcr_auth::plan::SecretTarget;
use ghcr_auth::reassert::{Consumers, Reasserter, TargetSpec};
use ghcr_auth::route::FanoutRun;
use ghcr_auth::{ErrorClass, FlowError, GhcrError, Progress};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use secrecy::SecretString;
use serde_json::{Value, json};
use testkit::TestNs;

const TARGET: &str = "infrastructure";
const OWNER_KEY: &str = "flux-handoff.io/owner";

struct Quiet;

impl Progress for Quiet {
    fn phase(&mut self, _: &str) {}
    fn fact(&mut self, _: &str, _: Value) {}
}

/// A session started on the seeded tree's target (not yet paused), and the controller model.
async fn paused_session(ns: &TestNs) -> (Session, flux_model::model::ModelHandle) {
    let model = start_seeded(&ns.client, &ns.name, |c| c).await.unwrap();
    let mut opts = SessionOptions::new(vec![PauseTarget::new(kustomization(&ns.name, TARGET))]);
    opts.lease.namespace.clone_from(&ns.name);
    opts.interval = Duration::from_millis(100);
    opts.timeout = Duration::from_secs(30);
    let session = Session::start(ns.client.clone(), opts, Cancel::new())
        .await
        .unwrap();
    (session, model)
}

/// A write gate that asserts the Lease before every write and, on its `nth` call, has a
/// person set `spec.suspend=false` on `target` by hand.
fn person_unsuspends_at(
    nth: usize,
    lease: LeaseHandle,
    client: kube::Client,
    target: ObjectRef,
) -> impl ghcr_auth::reassert::WriteGate {
    let calls = Arc::new(AtomicUsize::new(0));
    move || {
        let (lease, person, target) = (lease.clone(), client.clone(), target.clone());
        let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            lease.assert().await.map_err(|e| Box::new(e) as BoxError)?;
            if n == nth {
                api(&person, &target)
                    .patch(
                        &target.name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "spec": { "suspend": false } })),
                    )
                    .await
                    .map_err(|e| Box::new(e) as BoxError)?;
            }
            Ok(())
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_recheck_stops_the_root_secret_after_a_person_unsuspends_the_target() {
    let ns = TestNs::new("ghcr-recheck").await.unwrap();
    let (session, model) = paused_session(&ns).await;

    let config = DockerConfig::from_token("ghcr.io", "robot", SecretString::from("t0k3n")).unwrap();
    let spec = TargetSpec::new("pull", Consumers::Namespaces(vec![ns.name.clone()]))
        .with_root(SecretTarget::new(&ns.name, "root-pull"));
    let work = FanoutRun::new(
        config,
        Route::new(spec),
        Vec::new(),
        Duration::from_secs(5),
        Duration::from_millis(100),
    );
    let client = ns.client.clone();
    let target = kustomization(&ns.name, TARGET);
    let outcome = session
        .run_paused(
            |_| {},
            |paused| async move {
                // The gate runs before every write: the consumer's (call 1), then the root's
                // (call 2), where a person unsuspends the fenced target by hand.
                let hook = person_unsuspends_at(2, paused.lease.clone(), client.clone(), target);
                let reasserter = Reasserter::new(client.clone())
                    .with_lease(paused.lease.clone())
                    .with_gate(hook)
                    .with_root_check(paused.check.hook());
                Ok::<_, std::convert::Infallible>(work.run(&reasserter, &client, &mut Quiet).await)
            },
        )
        .await;

    // Whichever sees the person's change first stops the work: the recheck right before the
    // root write (the work's own error), or the session's watch of the pause (the session's).
    let line = match outcome.result.as_ref() {
        Ok(r) => {
            let flow = r.as_ref().unwrap_err();
            assert!(
                matches!(flow, FlowError::Reassert(GhcrError::PauseBroken { .. })),
                "{flow:?}"
            );
            assert_eq!(flow.class(), ErrorClass::PauseBroken);
            let chain = format!(
                "{flow}: {}",
                std::error::Error::source(flow)
                    .map(ToString::to_string)
                    .unwrap_or_default()
            );
            assert!(chain.contains("spec.suspend is not true"), "{chain}");
            chain
        }
        Err(e @ flux_suspend::SessionError::PauseBroken(_)) => {
            assert_eq!(e.class(), ErrorClass::PauseBroken);
            let line = e.to_string();
            assert!(line.contains("spec.suspend was set to false"), "{line}");
            line
        }
        Err(e) => panic!("{e:?}"),
    };
    assert!(
        line.contains(&format!("Kustomization {}/{TARGET}", ns.name)),
        "{line}"
    );
    let secrets: Api<Secret> = ns.api();
    assert!(
        secrets.get_opt("pull").await.unwrap().is_some(),
        "the consumer was written first"
    );
    assert!(
        secrets.get_opt("root-pull").await.unwrap().is_none(),
        "the root Secret is not written once the pause is broken"
    );
    // The release finds the person's resume, the only moved mark: it keeps their value and
    // removes the fence (issue 35), and the cleanup releases the rest.
    assert!(outcome.cleanup.is_ok(), "{:?}", outcome.cleanup);
    let t = get_json(&ns.client, &kustomization(&ns.name, TARGET))
        .await
        .unwrap();
    assert!(t["metadata"]["annotations"][OWNER_KEY].is_null(), "{t}");
    assert_eq!(t["spec"]["suspend"], json!(false), "{t}");
    drop(model);
}
