//! A replicas gate's stage: the seeded tree and Deployment `cluster-autoscaler` (2 replicas,
//! selector `app=cluster-autoscaler`) applied by Kustomization `infrastructure`, the model
//! playing its Pods and status.

use flux_model::model::start_seeded;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};
use serde_json::json;
use testkit::TestNs;

use super::{Cluster, TARGET};

/// The gated Deployment.
pub const GATED: &str = "cluster-autoscaler";

/// A fresh namespace with the seeded tree and the gated Deployment (its Pods are on their way:
/// the model creates them).
pub async fn cluster(prefix: &str) -> Cluster {
    let ns = TestNs::new(prefix).await.unwrap();
    create(
        &ns,
        json!({
            "kustomize.toolkit.fluxcd.io/name": TARGET,
            "kustomize.toolkit.fluxcd.io/namespace": ns.name,
        }),
    )
    .await;
    let name = ns.name.clone();
    let model = start_seeded(&ns.client, &ns.name, |c| c.with_workload(&name, GATED))
        .await
        .unwrap();
    Cluster {
        kubeconfig: testkit::plane::kubeconfig().unwrap(),
        ns,
        model,
    }
}

/// Creates the gated Deployment in `ns`: 2 replicas, selector `app=cluster-autoscaler`,
/// labelled `labels` (who applies it).
pub async fn create(ns: &TestNs, labels: serde_json::Value) {
    let deps: Api<Deployment> = Api::namespaced(ns.client.clone(), &ns.name);
    let dep: Deployment = serde_json::from_value(json!({
        "metadata": { "name": GATED, "labels": labels },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": GATED } },
            "template": {
                "metadata": { "labels": { "app": GATED } },
                "spec": { "containers": [{ "name": "ca", "image": "registry.k8s.io/ca:v1" }] },
            },
        },
    }))
    .unwrap();
    deps.create(&PostParams::default(), &dep).await.unwrap();
}
