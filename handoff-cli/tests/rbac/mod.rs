//! Applies `deploy/rbac.yaml` — exactly its rules — adapted to a test namespace: every
//! `flux-system` namespace becomes the test namespace and cluster-scoped names get the test
//! namespace as a suffix (so parallel tests do not share them).

#![allow(dead_code)] // each test binary uses a different part

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Client;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use serde_json::Value;

pub const YAML: &str = include_str!("../../../deploy/rbac.yaml");

/// The documents of deploy/rbac.yaml, adapted to `ns`.
pub fn documents(ns: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(YAML).unwrap();
    docs.into_iter()
        .filter(|d| !d.is_null())
        .map(|mut d| {
            adapt(&mut d, ns);
            d
        })
        .collect()
}

fn adapt(d: &mut Value, ns: &str) {
    let kind = d["kind"].as_str().unwrap().to_string();
    if d["metadata"]["namespace"] == "flux-system" {
        d["metadata"]["namespace"] = ns.into();
    }
    if kind.starts_with("Cluster") {
        let name = format!("{}-{ns}", d["metadata"]["name"].as_str().unwrap());
        d["metadata"]["name"] = name.into();
    }
    if d["roleRef"]["kind"] == "ClusterRole" {
        let name = format!("{}-{ns}", d["roleRef"]["name"].as_str().unwrap());
        d["roleRef"]["name"] = name.into();
    }
    if let Some(subjects) = d["subjects"].as_array_mut() {
        for s in subjects {
            if s["namespace"] == "flux-system" {
                s["namespace"] = ns.into();
            }
        }
    }
}

/// Creates every document with the admin client.
pub async fn apply(client: &Client, ns: &str, docs: &[Value]) {
    for d in docs {
        let kind = d["kind"].as_str().unwrap();
        let pp = PostParams::default();
        match kind {
            "ServiceAccount" => {
                let o: ServiceAccount = serde_json::from_value(d.clone()).unwrap();
                Api::<ServiceAccount>::namespaced(client.clone(), ns)
                    .create(&pp, &o)
                    .await
                    .unwrap();
            }
            "Role" => {
                let o: Role = serde_json::from_value(d.clone()).unwrap();
                Api::<Role>::namespaced(client.clone(), ns)
                    .create(&pp, &o)
                    .await
                    .unwrap();
            }
            "RoleBinding" => {
                let o: RoleBinding = serde_json::from_value(d.clone()).unwrap();
                Api::<RoleBinding>::namespaced(client.clone(), ns)
                    .create(&pp, &o)
                    .await
                    .unwrap();
            }
            "ClusterRole" => {
                let o: ClusterRole = serde_json::from_value(d.clone()).unwrap();
                Api::<ClusterRole>::all(client.clone())
                    .create(&pp, &o)
                    .await
                    .unwrap();
            }
            "ClusterRoleBinding" => {
                let o: ClusterRoleBinding = serde_json::from_value(d.clone()).unwrap();
                Api::<ClusterRoleBinding>::all(client.clone())
                    .create(&pp, &o)
                    .await
                    .unwrap();
            }
            other => panic!("unexpected kind {other} in deploy/rbac.yaml"),
        }
    }
}

/// Deletes the cluster-scoped documents (best effort; the namespace takes the rest).
pub async fn remove_cluster_scoped(client: &Client, docs: &[Value]) {
    for d in docs {
        let name = d["metadata"]["name"].as_str().unwrap();
        let dp = DeleteParams::default();
        match d["kind"].as_str().unwrap() {
            "ClusterRole" => {
                let _ = Api::<ClusterRole>::all(client.clone())
                    .delete(name, &dp)
                    .await;
            }
            "ClusterRoleBinding" => {
                let _ = Api::<ClusterRoleBinding>::all(client.clone())
                    .delete(name, &dp)
                    .await;
            }
            _ => {}
        }
    }
}

/// Whether `client` may `verb` `group/resource` in `ns`, per the API server.
pub async fn may(client: &Client, verb: &str, group: &str, resource: &str, ns: &str) -> bool {
    let review = SelfSubjectAccessReview {
        metadata: ObjectMeta::default(),
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.into()),
                resource: Some(resource.into()),
                verb: Some(verb.into()),
                namespace: Some(ns.into()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        status: None,
    };
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// Polls (bounded) until the authorizer's answer for the `ServiceAccount` is `want` — RBAC
/// changes reach the authorizer's cache asynchronously.
pub async fn await_may(
    client: &Client,
    verb: &str,
    group: &str,
    resource: &str,
    ns: &str,
    want: bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while may(client, verb, group, resource, ns).await != want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "authorizer never said {want} for {verb} {resource}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
