//! Applies `deploy/rbac.yaml` — exactly its rules — adapted to a test namespace (see
//! `testkit::rbac`): thin wrappers that fail the test on error.

#![allow(dead_code)] // each test binary uses a different part

use kube::Client;
use serde_json::Value;

pub const YAML: &str = testkit::rbac::YAML;

/// The documents of deploy/rbac.yaml, adapted to `ns`.
pub fn documents(ns: &str) -> Vec<Value> {
    testkit::rbac::documents(ns).unwrap()
}

/// The documents of `flux-handoff rbac` output, as printed.
pub fn parse(yaml: &str) -> Vec<Value> {
    testkit::rbac::parse(yaml).unwrap()
}

/// Whether `client` may make `access`, per the API server.
pub async fn may_on(client: &Client, access: &testkit::rbac::Access) -> bool {
    testkit::rbac::may_on(client, access).await.unwrap()
}

/// Creates every document with the admin client.
pub async fn apply(client: &Client, ns: &str, docs: &[Value]) {
    testkit::rbac::apply(client, ns, docs).await.unwrap();
}

/// Deletes the cluster-scoped documents (best effort; the namespace takes the rest).
pub async fn remove_cluster_scoped(client: &Client, docs: &[Value]) {
    testkit::rbac::remove_cluster_scoped(client, docs).await;
}

/// Whether `client` may `verb` `group/resource` in `ns`, per the API server.
pub async fn may(client: &Client, verb: &str, group: &str, resource: &str, ns: &str) -> bool {
    testkit::rbac::may(client, verb, group, resource, ns)
        .await
        .unwrap()
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
    testkit::rbac::await_may(client, verb, group, resource, ns, want)
        .await
        .unwrap();
}
