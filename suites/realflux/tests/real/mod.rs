//! Shared setup of the `real_flux_` tests: a tree in a fresh namespace reconciled by the real
//! controllers, our Lease and a fencer, and (for tests that kill a controller) a
//! kustomize-controller shard of the test's own.

#![allow(dead_code)] // not every test uses every helper

use std::sync::Arc;
use std::time::{Duration, Instant};

use flux_fence::{
    AnnotationKeys, Fencer, Holder, Lease, LeaseAcquire, LeaseConfig, LeaseGuard, ObjectRef,
    SystemClock,
};
use flux_suspend::handoff::Chain;
use flux_suspend::handoff::Handoff;
use flux_suspend::handoff::PauseOptions;
use flux_suspend::io::{ControllerRef, Timing};
use flux_suspend::object::{get_json, kustomization};
use flux_suspend::retire::Strategy;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::fixtures::kustomization_resource;
#[allow(unused_imports)] // not every test binary uses it
pub use testkit::real_flux::KUSTOMIZE_MANAGER;
use testkit::real_flux::{FLUX_NS, SOURCE};

pub const PARENT: &str = "flux-system";
pub const TARGET: &str = "child";
// Not every test binary uses each of them.
#[allow(unused_imports)]
pub use testkit::fenced::{OWNER_KEY, REQUESTED_AT, annotation, assert_fenced, suspended};
use testkit::real_flux::SHARD_KEY;
/// Bound of every wait of these tests (the real controllers' first reconcile included).
const WAIT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(200);

/// The admin client of the real-Flux control plane.
pub async fn real_client() -> Client {
    let path = testkit::real_flux::kubeconfig().expect("the real-Flux control plane");
    let config = testkit::config_from(&path).await.unwrap();
    Client::try_from(config).unwrap()
}

pub async fn get_ks(client: &Client, ns: &str, name: &str) -> Value {
    get_json(client, &kustomization(ns, name)).await.unwrap()
}

/// The shape of one test's tree.
#[derive(Debug, Clone, Copy)]
pub struct Tree {
    /// The child's path in the artifact.
    pub child_path: &'static str,
    /// `spec.wait` of the child (health-check what it applies).
    pub child_wait: bool,
    /// `spec.wait` of the parent (wait until the child is Ready).
    pub parent_wait: bool,
    /// Label everything with this namespace's shard key (reconciled by a [`Shard`] only).
    pub shard: bool,
}

impl Default for Tree {
    fn default() -> Self {
        Self {
            child_path: "./fixtures/configmap",
            child_wait: false,
            parent_wait: false,
            shard: false,
        }
    }
}

pub struct RealWorld {
    pub client: Client,
    pub ns: Namespace,
    pub lease: LeaseGuard,
    pub fencer: Fencer,
}

impl RealWorld {
    /// A fresh namespace with the parent of `tree` created (not yet awaited), and our Lease.
    pub async fn new(prefix: &str, tree: Tree) -> Self {
        let client = real_client().await;
        let name = format!("{prefix}-{}", testkit::random_suffix(6));
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let ns = Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let mut parent = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": { "name": PARENT, "namespace": name },
            "spec": {
                "interval": "10m",
                "timeout": "40s",
                "path": "./fixtures/parent",
                "prune": true,
                "wait": tree.parent_wait,
                "sourceRef": { "kind": "OCIRepository", "name": SOURCE, "namespace": FLUX_NS },
                "postBuild": { "substitute": {
                    "NS": name,
                    "CHILD_PATH": tree.child_path,
                    "CHILD_WAIT": tree.child_wait.to_string(),
                } },
            },
        });
        if tree.shard {
            parent["metadata"]["labels"] = json!({ SHARD_KEY: name });
            parent["spec"]["commonMetadata"] = json!({ "labels": { SHARD_KEY: name } });
        }
        let parent: DynamicObject = serde_json::from_value(parent).unwrap();
        Api::<DynamicObject>::namespaced_with(client.clone(), &name, &kustomization_resource())
            .create(&PostParams::default(), &parent)
            .await
            .unwrap();
        let cfg = LeaseConfig::new(name.clone(), LeaseConfig::default().name);
        let lease = match Lease::acquire(
            client.clone(),
            cfg,
            Holder::generate(),
            Arc::new(SystemClock),
        )
        .await
        .unwrap()
        {
            LeaseAcquire::Acquired(g) => g,
            other => panic!("lease not acquired: {other:?}"),
        };
        let fencer = Fencer::new(client.clone(), AnnotationKeys::default(), lease.owner())
            .with_lease(lease.handle());
        Self {
            client,
            ns,
            lease,
            fencer,
        }
    }

    pub fn name(&self) -> &str {
        self.ns.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn handoff(&self) -> Handoff {
        Handoff::new(self.client.clone(), self.fencer.clone())
    }

    pub fn parent(&self) -> ObjectRef {
        kustomization(self.name(), PARENT)
    }

    pub fn target(&self) -> ObjectRef {
        kustomization(self.name(), TARGET)
    }

    pub fn chain(&self) -> Vec<Chain> {
        vec![Chain::new(Some(self.parent()), self.target())]
    }

    pub async fn get(&self, name: &str) -> Value {
        get_ks(&self.client, self.name(), name).await
    }

    fn api(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), self.name(), &kustomization_resource())
    }

    /// Polls until `pred` holds for Kustomization `name` (bounded; panics with its last state).
    pub async fn wait_until(&self, name: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let v = get_json(&self.client, &kustomization(self.name(), name)).await;
            if let Ok(v) = &v
                && pred(v)
            {
                return v.clone();
            }
            assert!(
                start.elapsed() < WAIT,
                "{name} never reached the awaited state within {WAIT:?}: {v:?}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    pub async fn wait_ready(&self, name: &str) -> Value {
        self.wait_until(name, |o| ready(o).as_deref() == Some("True"))
            .await
    }

    /// Annotates `name` with a fresh `requestedAt` and waits until the controller handled it.
    pub async fn request_and_wait(&self, name: &str, tag: &str) -> Value {
        let nonce = format!("{tag}-{}", testkit::random_suffix(6));
        self.merge_patch_as(
            name,
            "flux-handoff-test",
            &json!({ "metadata": { "annotations": { REQUESTED_AT: nonce } } }),
        )
        .await;
        self.wait_until(name, |o| {
            o.pointer("/status/lastHandledReconcileAt")
                .and_then(Value::as_str)
                == Some(nonce.as_str())
        })
        .await
    }

    /// A merge patch of `name` written as field manager `manager` (as `kubectl patch` does).
    pub async fn merge_patch_as(&self, name: &str, manager: &str, patch: &Value) {
        let pp = PatchParams {
            field_manager: Some(manager.into()),
            ..PatchParams::default()
        };
        self.api()
            .patch(name, &pp, &Patch::Merge(patch))
            .await
            .unwrap();
    }

    pub fn owner(&self) -> String {
        self.fencer.owner().to_string()
    }
}

/// Pause options of these tests: `strategy`, the bounds of [`timing`].
pub fn opts(strategy: Strategy) -> PauseOptions {
    PauseOptions::new(strategy, timing())
        .with_controller(ControllerRef {
            namespace: FLUX_NS.into(),
            name: "kustomize-controller".into(),
        })
        .with_reason("real_flux test")
}

/// The bounds of the handoff's waits in these tests.
pub fn timing() -> Timing {
    Timing::new(Duration::from_millis(250), Duration::from_secs(90))
}

#[allow(unused_imports)] // not every test binary uses it
pub use testkit::real_flux::Shard;

/// The status of condition `type_`.
pub fn status_of(obj: &Value, type_: &str) -> Option<String> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .get("status")?
        .as_str()
        .map(str::to_string)
}

pub fn ready(obj: &Value) -> Option<String> {
    status_of(obj, "Ready")
}

/// The field managers in `metadata.managedFields`.
pub fn managers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str().map(str::to_string))
        .collect()
}
