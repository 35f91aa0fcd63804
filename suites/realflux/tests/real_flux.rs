//! Tier 3: the handoff against the real kustomize-controller and source-controller (v1.9.6) and
//! helm-controller (v1.6.4), built from Go modules, on the control plane of `cargo xtask cluster up --flux real`
//! (started on first use, or `$FLUX_HANDOFF_REAL_KUBECONFIG`).
//!
//! Each test builds its own tree in a fresh namespace from the fixtures of the artifact in the
//! local registry (`testkit::real_flux::tree_files`): a parent `flux-system` whose path holds
//! one child Kustomization `child` (path, `wait` and namespace by post-build substitution).
//! Tests that kill a controller run their own kustomize-controller *shard*
//! (`--watch-label-selector=sharding.fluxcd.io/key=<ns>`, the parent labels everything it
//! applies through `commonMetadata`), so the shared controllers are never disturbed.

mod real;

use flux_model::facts::Backend;
use flux_suspend::handoff::PauseOutcome;
use flux_suspend::retire::Strategy;
use real::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_seeded_tree_is_ready_and_managed_by_gotk_kustomize_controller() {
    let client = real_client().await;
    for name in ["flux-system", "infrastructure", "apps"] {
        let ks = get_ks(&client, "flux-system", name).await;
        assert_eq!(ready(&ks).as_deref(), Some("True"), "{name}: {ks}");
        assert!(
            managers(&ks).iter().any(|m| m == KUSTOMIZE_MANAGER),
            "{name} managers: {:?}",
            managers(&ks)
        );
    }
    // The children were applied by the parent: the applying manager is kustomize-controller,
    // the status writer gotk-kustomize-controller (fact: not the same name).
    let child = get_ks(&client, "flux-system", "apps").await;
    assert!(
        managers(&child).iter().any(|m| m == "kustomize-controller"),
        "{:?}",
        managers(&child)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_retire_ack_pause_is_proven_and_resume_reconciles_again() {
    let w = RealWorld::new("rf-ack", Tree::default()).await;
    w.wait_ready(PARENT).await;
    w.wait_ready(TARGET).await;
    let mut h = w.handoff();
    let out = h
        .pause(&w.chain(), &opts(Strategy::Ack), &mut |_| {})
        .await
        .unwrap();
    assert!(matches!(out, PauseOutcome::Proven(_)), "{out:?}");
    // The real controller acknowledged each nonce although the objects are suspended.
    assert_fenced(&w.get(PARENT).await, &w.owner(), false);
    assert_fenced(&w.get(TARGET).await, &w.owner(), true);
    let _ = h.resume(Some(timing())).await.unwrap();
    let child = w.get(TARGET).await;
    assert!(!suspended(&child));
    assert!(annotation(&child, OWNER_KEY).is_none());
    // Handed back: the controller reconciles on request again.
    w.request_and_wait(TARGET, "after-resume").await;
    assert_eq!(ready(&w.get(TARGET).await).as_deref(), Some("True"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_pause_while_both_wait_on_a_deployment_that_never_becomes_healthy() {
    let tree = Tree {
        child_path: "./fixtures/deployment",
        child_wait: true,
        parent_wait: true,
        shard: false,
    };
    let w = RealWorld::new("rf-wait", tree).await;
    // Both are mid-reconcile: the child waits for the Deployment (no kubelet here), the parent
    // waits for the child.
    w.wait_until(TARGET, |o| {
        status_of(o, "Reconciling").as_deref() == Some("True")
    })
    .await;
    w.wait_until(PARENT, |o| {
        status_of(o, "Reconciling").as_deref() == Some("True")
    })
    .await;
    let mut h = w.handoff();
    let out = h
        .pause(&w.chain(), &opts(Strategy::Ack), &mut |_| {})
        .await
        .unwrap();
    assert!(matches!(out, PauseOutcome::Proven(_)), "{out:?}");
    assert_fenced(&w.get(PARENT).await, &w.owner(), false);
    assert_fenced(&w.get(TARGET).await, &w.owner(), true);
    // Handed back without waiting for Ready: the child can never become Ready here.
    let _ = h.resume(None).await.unwrap();
    assert!(!suspended(&w.get(TARGET).await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_frozen_reconciling_after_killing_the_controller_does_not_block_the_proof() {
    let tree = Tree {
        child_path: "./fixtures/deployment",
        child_wait: true,
        parent_wait: false,
        shard: true,
    };
    let w = RealWorld::new("rf-kill", tree).await;
    let shard = Shard::start(w.name()).await;
    w.wait_until(TARGET, |o| {
        status_of(o, "Reconciling").as_deref() == Some("True")
    })
    .await;
    // Killed mid-reconcile (SIGKILL): nothing finishes the status, Reconciling=True stays.
    let shard = shard.kill();
    let frozen = w.get(TARGET).await;
    assert_eq!(status_of(&frozen, "Reconciling").as_deref(), Some("True"));
    // The controller comes back (as after a Pod restart) while the handoff runs.
    let restarted = Shard::start_again(shard).await;
    let mut h = w.handoff();
    let out = h
        .pause(&w.chain(), &opts(Strategy::Ack), &mut |_| {})
        .await
        .unwrap();
    assert!(matches!(out, PauseOutcome::Proven(_)), "{out:?}");
    let child = w.get(TARGET).await;
    assert_fenced(&child, &w.owner(), true);
    // Handed back without waiting for Ready: the child can never become Ready here.
    let _ = h.resume(None).await.unwrap();
    drop(restarted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_parent_apply_skips_a_target_fenced_with_reconcile_disabled() {
    let w = RealWorld::new("rf-race", Tree::default()).await;
    w.wait_ready(PARENT).await;
    w.wait_ready(TARGET).await;
    // Only the target is fenced: the parent stays free to apply, as an in-flight parent
    // reconcile that lost the race with the handoff would.
    let mut h = w.handoff();
    let chain = vec![flux_suspend::handoff::Chain::new(None, w.target())];
    let out = h
        .pause(&chain, &opts(Strategy::Ack), &mut |_| {})
        .await
        .unwrap();
    assert!(matches!(out, PauseOutcome::Proven(_)), "{out:?}");
    w.request_and_wait(PARENT, "parent-applies").await;
    // The parent's apply ran and skipped the target: the fence and the suspend hold.
    let child = w.get(TARGET).await;
    assert_fenced(&child, &w.owner(), true);
    let _ = h.resume(Some(timing())).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_parent_apply_takes_over_a_kubectl_patched_suspend() {
    let w = RealWorld::new("rf-kubectl", Tree::default()).await;
    w.wait_ready(PARENT).await;
    w.wait_ready(TARGET).await;
    // `kubectl patch` writes as field manager `kubectl-patch`.
    w.merge_patch_as(
        TARGET,
        "kubectl-patch",
        &json!({ "spec": { "suspend": true } }),
    )
    .await;
    assert!(suspended(&w.get(TARGET).await));
    w.request_and_wait(PARENT, "parent-takes-over").await;
    // Flux's apply takes over fields of managers matched by prefix `kubectl`: the suspend the
    // parent's manifest does not set is removed.
    let child = w.wait_until(TARGET, |o| !suspended(o)).await;
    assert!(
        !managers(&child).iter().any(|m| m.starts_with("kubectl")),
        "{:?}",
        managers(&child)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_parent_apply_keeps_a_suspend_set_by_another_manager() {
    let w = RealWorld::new("rf-other", Tree::default()).await;
    w.wait_ready(PARENT).await;
    w.wait_ready(TARGET).await;
    // A manager that is not kubectl-prefixed (as the handoff's fence writes are) keeps its
    // field across the parent's apply.
    w.merge_patch_as(
        TARGET,
        "flux-handoff-test",
        &json!({ "spec": { "suspend": true } }),
    )
    .await;
    w.request_and_wait(PARENT, "parent-applies").await;
    assert!(suspended(&w.get(TARGET).await));
    w.merge_patch_as(
        TARGET,
        "flux-handoff-test",
        &json!({ "spec": { "suspend": false } }),
    )
    .await;
}

/// helm-controller v1.6.4 acknowledges the nonce of a suspended `HelmRelease` and, unlike
/// kustomize-controller, observes its generation on that suspended return (hc
/// `helmrelease_controller.go:143-155`, `:198-201`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_helm_suspended_release_acknowledges_and_observes_its_generation() {
    let (api, _ns) = helm_namespace("rf-helm").await;
    let hr = helmrelease(&json!({ "annotations": { REQUESTED_AT: "n1" } }), true);
    api.create(&post(), &hr).await.unwrap();
    // The finalizer-adding first run already records `n1` (its return requeues, so it does not
    // observe the generation); the requeued suspended run observes generation 1.
    wait_helm(&api, |o| {
        o.pointer("/status/lastHandledReconcileAt") == Some(&json!("n1"))
            && o.pointer("/status/observedGeneration") == Some(&json!(1))
    })
    .await;
    let pp = kube::api::PatchParams {
        field_manager: Some("flux-handoff-test".into()),
        ..Default::default()
    };
    let body = json!({ "metadata": { "annotations": { REQUESTED_AT: "n2" } }, "spec": { "interval": "11m" } });
    api.patch("podinfo", &pp, &kube::api::Patch::Merge(body))
        .await
        .unwrap();
    let held = wait_helm(&api, |o| {
        o.pointer("/status/lastHandledReconcileAt") == Some(&json!("n2"))
    })
    .await;
    assert_eq!(
        held.pointer("/status/observedGeneration"),
        Some(&json!(2)),
        "observed while suspended"
    );
    assert!(held.pointer("/status/conditions").is_none(), "{held}");
}

/// helm-controller returns before its deferred status patch for an invalid chart reference
/// (hc `helmrelease_controller.go:135-137`), but the upstream CRD refuses such an object at
/// admission (`config/crd/bases/helm.toolkit.fluxcd.io_helmreleases.yaml:1168-1171`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_flux_helm_invalid_chart_reference_is_refused_at_admission() {
    let (api, _ns) = helm_namespace("rf-helm-invalid").await;
    let mut hr = helmrelease(&json!({}), true);
    hr.data["spec"].as_object_mut().unwrap().remove("chartRef");
    let err = api.create(&post(), &hr).await.unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("not an API error: {err}")
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status
            .message
            .contains("either chart or chartRef must be set"),
        "{status:?}"
    );
}

const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

async fn helm_namespace(prefix: &str) -> (kube::Api<kube::api::DynamicObject>, String) {
    use k8s_openapi::api::core::v1::Namespace;
    let client = real_client().await;
    let name = format!("{prefix}-{}", testkit::random_suffix(6));
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap();
    kube::Api::<Namespace>::all(client.clone())
        .create(&post(), &ns)
        .await
        .unwrap();
    let api = kube::Api::namespaced_with(client, &name, &testkit::fixtures::helmrelease_resource());
    (api, name)
}

fn post() -> kube::api::PostParams {
    kube::api::PostParams {
        field_manager: Some("flux-handoff-test".into()),
        ..Default::default()
    }
}

/// `HelmRelease` `podinfo` whose chart is the plane's `OCIRepository` (never fetched: suspended).
fn helmrelease(metadata: &serde_json::Value, suspend: bool) -> kube::api::DynamicObject {
    let mut meta = json!({ "name": "podinfo" });
    meta.as_object_mut()
        .unwrap()
        .extend(metadata.as_object().unwrap().clone());
    serde_json::from_value(json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease", "metadata": meta,
        "spec": { "interval": "10m", "suspend": suspend,
                  "chartRef": { "kind": "OCIRepository", "name": "flux-system",
                                "namespace": "flux-system" } },
    }))
    .unwrap()
}

/// Polls `HelmRelease` `podinfo` until `pred` holds (bounded, 90 s).
async fn wait_helm(
    api: &kube::Api<kube::api::DynamicObject>,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = std::time::Instant::now();
    loop {
        let v = serde_json::to_value(api.get("podinfo").await.unwrap()).unwrap();
        if pred(&v) {
            return v;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(90),
            "never reached: {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

// The fact tests (flux_model::facts, the same bodies as model_facts.rs) against the real controller.

flux_model::fact_tests!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    Backend::Real
);
