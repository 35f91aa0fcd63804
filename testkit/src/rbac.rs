//! The shipped RBAC (`deploy/rbac.yaml`) on the local control plane, and what a
//! `ServiceAccount` may do: for the tests and the chaos suite that run the CLI with least
//! privilege.
//!
//! 1. [`documents`] adapts the manifest to a test namespace: `flux-system` becomes it, and
//!    cluster-scoped names get it as a suffix (so parallel tests never share them); [`parse`]
//!    reads what `flux-handoff rbac` printed for a test namespace as is.
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

/// The documents of a manifest as printed (`flux-handoff rbac` output), unchanged.
///
/// # Errors
/// The manifest does not parse.
pub fn parse(yaml: &str) -> anyhow::Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml)?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Creates every document with the admin `client`, each in its own namespace (`ns` when it
/// names none).
///
/// # Errors
/// A create failed, or a document of another kind.
pub async fn apply(client: &Client, ns: &str, docs: &[Value]) -> anyhow::Result<()> {
    let pp = PostParams::default();
    for d in docs {
        let v = d.clone();
        let ns = d["metadata"]["namespace"].as_str().unwrap_or(ns);
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
    may_on(client, &Access::new(verb, group, resource).namespace(ns)).await
}

/// One access to ask the API server about (a `SelfSubjectAccessReview`'s attributes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// Verb.
    pub verb: String,
    /// API group.
    pub group: String,
    /// Resource (plural).
    pub resource: String,
    /// Subresource, e.g. `exec`.
    pub subresource: Option<String>,
    /// Namespace; `None` for all namespaces.
    pub namespace: Option<String>,
    /// Object name.
    pub name: Option<String>,
}

impl Access {
    /// `verb` on `group/resource` in every namespace.
    #[must_use]
    pub fn new(verb: &str, group: &str, resource: &str) -> Self {
        Self {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            ..Self::default()
        }
    }

    /// In namespace `ns`.
    #[must_use]
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = Some(ns.into());
        self
    }

    /// On object `name`.
    #[must_use]
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }

    /// On subresource `sub`.
    #[must_use]
    pub fn subresource(mut self, sub: &str) -> Self {
        self.subresource = Some(sub.into());
        self
    }
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if let Some(s) = &self.subresource {
            write!(f, "/{s}")?;
        }
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(n) = &self.name {
            write!(f, " {n}")?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in {ns}"),
            None => write!(f, " in all namespaces"),
        }
    }
}

/// Whether `client` may make `access`, per the API server.
///
/// # Errors
/// The review failed.
pub async fn may_on(client: &Client, access: &Access) -> anyhow::Result<bool> {
    let review = SelfSubjectAccessReview {
        metadata: ObjectMeta::default(),
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(access.group.clone()),
                resource: Some(access.resource.clone()),
                subresource: access.subresource.clone(),
                verb: Some(access.verb.clone()),
                namespace: access.namespace.clone(),
                name: access.name.clone(),
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
