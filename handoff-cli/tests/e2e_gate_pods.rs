//! End to end: a replicas gate is proven by the Pods that matter (issue 49, deliverable 2).
//! Only Pods controlled by a `ReplicaSet` the gated Deployment controls count, and ended ones
//! (`Failed`, `Succeeded`) do not: an evicted Pod of the Deployment's own `ReplicaSet` (phase
//! `Failed`, reason `Evicted`, left by node pressure until the terminated-Pod GC threshold)
//! and another workload's Pod with the same labels change nothing. The model plays the
//! Deployment as kube-controller-manager does: a `ReplicaSet` per template, its Pods owned by it.

mod common;

use common::gate::GATED;
use common::{OWNER_KEY, TARGET, annotation, code, stderr, suspended};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Waits (a minute at most) until `n` Pods carry the Deployment's labels.
async fn wait_pods(pods: &Api<Pod>, n: usize) {
    let lp = ListParams::default().labels(&format!("app={GATED}"));
    let give_up = tokio::time::Instant::now() + std::time::Duration::from_mins(1);
    loop {
        let have = pods.list_metadata(&lp).await.unwrap().items.len();
        if have == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "{have} Pods, not {n}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Creates Pod `name` with the Deployment's labels (and `owner`'s controller reference when
/// given), then sets its status through the status subresource as a kubelet would.
async fn pod(pods: &Api<Pod>, name: &str, owner: Option<&ReplicaSet>, status: Value) {
    let mut labels = json!({ "app": GATED });
    let mut meta = json!({ "name": name });
    if let Some(rs) = owner {
        let hash = rs.metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();
        labels["pod-template-hash"] = json!(hash);
        meta["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": rs.metadata.name, "uid": rs.metadata.uid,
            "controller": true, "blockOwnerDeletion": true,
        }]);
    }
    meta["labels"] = labels;
    let p: Pod = serde_json::from_value(json!({
        "metadata": meta,
        "spec": { "nodeName": "flux-model-node",
                  "containers": [{ "name": "ca", "image": "registry.k8s.io/ca:v1" }] },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
    let pp = PatchParams {
        field_manager: Some("e2e-kubelet".into()),
        ..PatchParams::default()
    };
    pods.patch_status(name, &pp, &Patch::Merge(json!({ "status": status })))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_pods_an_evicted_pod_and_a_neighbour_with_the_same_labels_change_nothing() {
    let c = common::gate::cluster("gate-pods").await;
    let ns = c.ns.name.clone();
    let pods: Api<Pod> = Api::namespaced(c.ns.client.clone(), &ns);
    let deps: Api<Deployment> = Api::namespaced(c.ns.client.clone(), &ns);
    let sets: Api<ReplicaSet> = Api::namespaced(c.ns.client.clone(), &ns);
    wait_pods(&pods, 2).await;
    // The Deployment's own `ReplicaSet`, as the model (kube-controller-manager) made it.
    let lp = ListParams::default().labels(&format!("app={GATED}"));
    let rs = sets.list(&lp).await.unwrap().items;
    assert_eq!(rs.len(), 1, "one ReplicaSet for one template");
    let rs = &rs[0];
    let evicted = json!({ "phase": "Failed", "reason": "Evicted",
        "message": "The node was low on resource: memory." });
    pod(&pods, "ca-evicted", Some(rs), evicted).await;
    pod(&pods, "ca-neighbour", None, json!({ "phase": "Running" })).await;
    wait_pods(&pods, 4).await;

    let target = format!("deploy/{ns}/{GATED}=0");
    let mut args = vec!["run", "--target", &target, "--timeout", "20s"];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    args.extend(["--", "true"]);
    let out = c.run(&args).await;
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");

    // Both stay as they were: nothing deleted them, and they were not what was waited for.
    for name in ["ca-evicted", "ca-neighbour"] {
        let p = pods.get_opt(name).await.unwrap();
        assert!(
            p.is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
            "{name}: {err}"
        );
    }
    // The count is back, the fence and the parent's pause released.
    let dep = serde_json::to_value(deps.get(GATED).await.unwrap()).unwrap();
    assert_eq!(dep["spec"]["replicas"], json!(2), "{err}");
    assert!(annotation(&dep, OWNER_KEY).is_none(), "{err}");
    let parent = c.get(TARGET).await;
    assert!(!suspended(&parent), "{err}");
}
