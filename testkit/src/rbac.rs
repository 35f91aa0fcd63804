//! The shipped RBAC (`deploy/rbac.yaml`) on the local control plane, and what a
//! `ServiceAccount` may do: for the tests and the chaos suite that run the CLI with least
//! privilege.
//!
//! 1. [`documents`] adapts the manifest to a test namespace: `flux-system` becomes it, and
//!    cluster-scoped names get it as a suffix (so parallel tests never share them).
//! 2. [`apply`] creates them with an admin client; [`remove_cluster_scoped`] deletes what the
//!    namespace's deletion does not take.
//! 3. [`await_may`] waits until the authorizer's answer is the expected one (RBAC changes reach
//!    its cache asynchronously).

use std::time::Duration;

use anyhow::bail;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Client;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use serde_json::Value;

/// `deploy/rbac.yaml`, as shipped.
pub const YAML: &str = include_str!("../../deploy/rbac.yaml");

/// The documents of deploy/rbac.yaml with `flux-system` renamed to `ns` and cluster-scoped
/// names suffixed with `ns`.
///
/// # Errors
/// The manifest does not parse.
pub fn documents(ns: &str) -> anyhow::Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(YAML)?;
    let mut out = Vec::new();
    for mut d in docs.into_iter().filter(|d| !d.is_null()) {
        let kind = d["kind"].as_str().unwrap_or_default().to_string();
        if d["metadata"]["namespace"] == "flux-system" {
            d["metadata"]["namespace"] = ns.into();
        }
        if kind.starts_with("Cluster") {
            let name = format!(
                "{}-{ns}",
                d["metadata"]["name"].as_str().unwrap_or_default()
            );
            d["metadata"]["name"] = name.into();
        }
        if d["roleRef"]["kind"] == "ClusterRole" {
            let name = format!("{}-{ns}", d["roleRef"]["name"].as_str().unwrap_or_default());
            d["roleRef"]["name"] = name.into();
        }
        for sub in d["subjects"].as_array_mut().into_iter().flatten() {
            if sub["namespace"] == "flux-system" {
                sub["namespace"] = ns.into();
            }
        }
        out.push(d);
    }
    Ok(out)
}

/// Creates every document with the admin `client`.
///
/// # Errors
/// A create failed, or a document of another kind.
pub async fn apply(client: &Client, ns: &str, docs: &[Value]) -> anyhow::Result<()> {
    let pp = PostParams::default();
    for d in docs {
        let v = d.clone();
        match d["kind"].as_str().unwrap_or_default() {
            "ServiceAccount" => {
                let o: ServiceAccount = serde_json::from_value(v)?;
                Api::namespaced(client.clone(), ns).create(&pp, &o).await?;
            }
            "Role" => {
                let o: Role = serde_json::from_value(v)?;
                Api::namespaced(client.clone(), ns).create(&pp, &o).await?;
            }
            "RoleBinding" => {
                let o: RoleBinding = serde_json::from_value(v)?;
                Api::namespaced(client.clone(), ns).create(&pp, &o).await?;
            }
            "ClusterRole" => {
                let o: ClusterRole = serde_json::from_value(v)?;
                Api::all(client.clone()).create(&pp, &o).await?;
            }
            "ClusterRoleBinding" => {
                let o: ClusterRoleBinding = serde_json::from_value(v)?;
                Api::all(client.clone()).create(&pp, &o).await?;
            }
            other => bail!("unexpected kind {other} in deploy/rbac.yaml"),
        }
    }
    Ok(())
}

/// Deletes the cluster-scoped documents (best effort; the namespace takes the rest).
pub async fn remove_cluster_scoped(client: &Client, docs: &[Value]) {
    let dp = DeleteParams::default();
    for d in docs {
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        match d["kind"].as_str().unwrap_or_default() {
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
///
/// # Errors
/// The review failed.
pub async fn may(
    client: &Client,
    verb: &str,
    group: &str,
    resource: &str,
    ns: &str,
) -> anyhow::Result<bool> {
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
    Ok(Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?
        .status
        .is_some_and(|s| s.allowed))
}

/// Polls (bounded) until the authorizer answers `want` for `client`: RBAC changes reach its
/// cache asynchronously.
///
/// # Errors
/// A review failed, or the answer did not come within 30 s.
pub async fn await_may(
    client: &Client,
    verb: &str,
    group: &str,
    resource: &str,
    ns: &str,
    want: bool,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while may(client, verb, group, resource, ns).await? != want {
        if tokio::time::Instant::now() > deadline {
            bail!("the authorizer never said {want} for {verb} {resource} in {ns}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
