//! Tier 2: what guards the `restart` strategy's writes, and what retires the reconciles the
//! restart itself starts — against the model's controller Deployment on the real API server.

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::*;
use flux_fence::FenceError;
use flux_model::model::{ModelEvent, Phase, Touch};
use flux_suspend::handoff::PauseOutcome;
use flux_suspend::handoff::SuspendError;
use flux_suspend::io::Timing;
use flux_suspend::retire::Strategy;
use flux_suspend::steps::Step;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{Value, json};

const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

/// The managers of the `managedFields` entries whose fields mention `fragment`.
fn managers_of(v: &Value, fragment: &str) -> Vec<String> {
    let mut found: Vec<String> = v
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|e| e["fieldsV1"].to_string().contains(fragment))
        .filter_map(|e| e["manager"].as_str().map(str::to_string))
        .collect();
    found.sort();
    found.dedup();
    found
}

fn to_json<T: k8s_openapi::serde::Serialize>(obj: &T) -> Value {
    serde_json::to_value(obj).unwrap()
}

fn requested_at(obj: &kube::api::DynamicObject) -> Option<String> {
    obj.metadata
        .annotations
        .as_ref()?
        .get(REQUESTED_AT)
        .cloned()
}

/// Runs `f` to completion from inside a sync progress callback (multi-thread runtime only).
fn block_on<T>(f: impl Future<Output = T>) -> T {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lost_before_the_restart_patch_no_restart_patch_lands() {
    let w = World::new("sus-llrst").await;
    let deployments: Api<Deployment> = w.ns.api();
    let before = deployments.get("kustomize-controller").await.unwrap();
    let leases: Api<KubeLease> = w.ns.api();
    let mut h = w.handoff();
    let mut progress = |s: Step| {
        if s == Step::FenceTargets {
            // Both fenced; the Lease goes away before the controller restart.
            block_on(leases.delete("flux-handoff", &DeleteParams::default())).unwrap();
        }
    };
    let err = h
        .pause(&w.chain(), &w.opts(Strategy::Restart), &mut progress)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            SuspendError::Fence {
                source: FenceError::LeaseLost { .. },
                ..
            }
        ),
        "typed LeaseLost: {err:?}"
    );
    let after = deployments.get("kustomize-controller").await.unwrap();
    assert_eq!(
        after.spec.unwrap().template,
        before.spec.unwrap().template,
        "the Deployment template is unchanged on the server"
    );
    assert_eq!(after.metadata.generation, before.metadata.generation);
    let _ = h.resume(None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_reack_retires_a_target_reconcile_the_new_controller_started() {
    let w = World::new("sus-reack").await;
    // A parent execution that began before the fence is parked before applying its children.
    w.model.hang_at(PARENT, Phase::Apply);
    w.model
        .touch_now(
            PARENT,
            &Touch::Annotate {
                key: REQUESTED_AT.into(),
                value: "stale".into(),
            },
        )
        .await
        .unwrap();
    w.model.wait_hanging(PARENT).await.unwrap();

    let target_api = flux_suspend::object::api(&w.ns.client, &w.target());
    // The target's requestedAt once the restart is over, and the run the new controller began.
    let after_restart: Mutex<Option<(String, u64)>> = Mutex::new(None);
    let model = &w.model;
    let mut progress = |s: Step| match s {
        Step::FenceTargets => {
            // Every working-path reconcile of the target parks at fetch from now on.
            model.hang_at(TARGET, Phase::Fetch);
            // Let the stale parent execution revert the target (suspend: false) over its fence.
            model.release(PARENT);
            block_on(async {
                for _ in 0..500 {
                    let t = target_api.get(TARGET).await.unwrap();
                    if t.data["spec"]["suspend"] == json!(false) {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                panic!("the stale parent apply never reverted the target");
            });
        }
        Step::RestartController => {
            // Every old Pod is gone: the new controller found the target reverted and began a
            // working-path reconcile of it, parked at fetch — before the re-fence.
            let restarted = model
                .events()
                .iter()
                .rposition(|e| matches!(e, ModelEvent::Restarted { .. }))
                .expect("the model restarted with the rollout");
            let key = format!("{}/{TARGET}", w.ns.name);
            let hanging = block_on(model.wait_for(
                restarted,
                |e| matches!(e, ModelEvent::Hanging { key: k, .. } if *k == key),
            ))
            .unwrap();
            let ModelEvent::Hanging { run, .. } = hanging else {
                unreachable!()
            };
            let t = block_on(target_api.get(TARGET)).unwrap();
            let nonce = requested_at(&t).expect("the fence wrote a nonce");
            *after_restart.lock().unwrap() = Some((nonce, run));
        }
        _ => {}
    };
    // The parked reconcile goes on once a fresh nonce is written after the restart (what a
    // re-ack does); nothing else releases it.
    let release_on_fresh_nonce = async {
        loop {
            let seen = after_restart.lock().unwrap().clone();
            if let Some((nonce, _)) = seen {
                let t = target_api.get(TARGET).await.unwrap();
                if requested_at(&t).as_deref() != Some(nonce.as_str()) {
                    model.release(TARGET);
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        std::future::pending::<()>().await;
    };
    let mut h = w.handoff();
    let (chain, opts) = (w.chain(), w.opts(Strategy::Restart));
    let out = tokio::select! {
        out = h.pause(&chain, &opts, &mut progress) => out.unwrap(),
        () = release_on_fresh_nonce => unreachable!(),
    };
    assert!(matches!(out, PauseOutcome::Proven(_)), "{out:?}");
    let (_, run) = after_restart
        .lock()
        .unwrap()
        .clone()
        .expect("the restart step ran");
    let finished = w
        .model
        .events()
        .iter()
        .any(|e| matches!(e, ModelEvent::Finished { run: r, .. } if *r == run));
    w.model.release(TARGET);
    assert!(
        finished,
        "the reconcile the new controller started on the target was still running at the proof"
    );
    let target = w.get(TARGET).await;
    assert_fenced(&target, &w.owner(), true);
    let _ = h.resume(None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_manager_every_pause_and_resume_write_names_flux_handoff() {
    let w = World::new("sus-fm").await;
    let mut h = w.handoff();
    let out = h
        .pause(&w.chain(), &w.opts(Strategy::Restart), &mut |_| {})
        .await
        .unwrap();
    assert!(matches!(out, PauseOutcome::Proven(_)), "{out:?}");
    let fm = vec!["flux-handoff".to_string()];
    // Fences (and the re-ack nonce) on parent and target.
    for name in [PARENT, TARGET] {
        let obj = w.get(name).await;
        assert_eq!(managers_of(&obj, "flux-handoff.io/owner"), fm, "{name}");
        assert_eq!(managers_of(&obj, REQUESTED_AT), fm, "{name}");
    }
    // The controller restart.
    let deployments: Api<Deployment> = w.ns.api();
    let dep = deployments.get("kustomize-controller").await.unwrap();
    assert_eq!(managers_of(&to_json(&dep), "restartedAt"), fm);
    // The Lease (create and every renewal).
    let leases: Api<KubeLease> = w.ns.api();
    let lease = leases.get("flux-handoff").await.unwrap();
    assert_eq!(managers_of(&to_json(&lease), "f:spec"), fm);

    let timing = Timing::new(Duration::from_millis(100), Duration::from_secs(30));
    let _ = h.resume(Some(timing)).await.unwrap();
    // The releases and the resume's reconcile request.
    let target = w.get(TARGET).await;
    assert!(
        managers_of(&target, REQUESTED_AT).contains(&fm[0]),
        "{:?}",
        managers_of(&target, REQUESTED_AT)
    );
    // The Events of both fences and both releases.
    let events: Api<Event> = w.ns.api();
    let ours: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reporting_component.as_deref() == Some("flux-handoff"))
        .collect();
    assert_eq!(ours.len(), 4, "two fences, two releases");
    for e in &ours {
        assert_eq!(managers_of(&to_json(e), "f:reason"), fm);
    }
}
