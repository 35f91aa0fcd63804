//! Shared helpers of the tier-2 tests.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::future::Future;
use std::time::Duration;

use flux_fence::mark::Restore;
use flux_fence::{AnnotationKeys, Epoch, Fencer, Holder, Mark, ObjectRef, OwnerValue};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::TestNs;
use testkit::fixtures::{kustomization, kustomization_resource};

pub const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";
pub const RECONCILE: &str = "kustomize.toolkit.fluxcd.io/reconcile";

/// A fresh owner value for one test transaction.
pub fn owner(epoch: u64) -> OwnerValue {
    OwnerValue::new(Holder::local("tier2", std::process::id()), Epoch(epoch))
}

pub fn fencer(ns: &TestNs, owner: &OwnerValue) -> Fencer {
    Fencer::new(ns.client.clone(), AnnotationKeys::default(), owner.clone())
}

/// The marks flux-suspend uses on a target.
pub fn flux_marks(nonce: &str) -> Vec<Mark> {
    vec![
        Mark::field("/spec/suspend", json!(true)).exclusive(),
        Mark::annotation(RECONCILE, "disabled"),
        Mark::annotation(REQUESTED_AT, nonce).restore(Restore::IfUnchanged),
    ]
}

pub fn ks_api(ns: &TestNs) -> Api<DynamicObject> {
    Api::namespaced_with(ns.client.clone(), &ns.name, &kustomization_resource())
}

pub fn ks_ref(ns: &TestNs, name: &str) -> ObjectRef {
    ObjectRef::new(kustomization_resource(), &ns.name, name)
}

/// Creates Kustomization `name` with annotation `keep: me` and returns it as JSON.
pub async fn create_ks(ns: &TestNs, name: &str) -> Value {
    let obj = kustomization(name).annotated("keep", "me").build(&ns.name);
    let created = ks_api(ns)
        .create(&PostParams::default(), &obj)
        .await
        .expect("create Kustomization");
    serde_json::to_value(created).unwrap()
}

pub async fn get_json(api: &Api<DynamicObject>, name: &str) -> Value {
    serde_json::to_value(api.get(name).await.expect("get")).unwrap()
}

pub fn annotations(obj: &Value) -> Value {
    obj["metadata"]
        .get("annotations")
        .cloned()
        .unwrap_or(Value::Null)
}

pub fn rv(obj: &Value) -> String {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A merge patch by "another writer".
pub async fn merge(api: &Api<DynamicObject>, name: &str, patch: Value) -> Value {
    let out = api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("merge patch");
    serde_json::to_value(out).unwrap()
}

/// Polls `check` until it returns true, failing after `limit` (a bound, not a timing claim).
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
