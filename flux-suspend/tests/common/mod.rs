//! Shared setup of the tier-2 tests: a seeded Flux tree in a fresh namespace, the controller
//! model playing kustomize-controller, a Lease and a fencer.

#![allow(dead_code)] // each test binary uses a different part

use std::sync::Arc;
use std::time::Duration;

use flux_fence::{
    AnnotationKeys, Fencer, Holder, Lease, LeaseAcquire, LeaseConfig, LeaseGuard, ObjectRef,
    SystemClock,
};
use flux_model::model::{ModelConfig, ModelHandle, start_seeded};
use flux_suspend::handoff::Chain;
use flux_suspend::handoff::Handoff;
use flux_suspend::handoff::PauseOptions;
use flux_suspend::io::{ControllerRef, Timing};
use flux_suspend::object::{get_json, kustomization};
use flux_suspend::retire::Strategy;
use serde_json::Value;
use testkit::TestNs;
// Not every test binary uses each of them.
#[allow(unused_imports)]
pub use testkit::fenced::{OWNER_KEY, annotation, assert_fenced, suspended};

pub const PARENT: &str = "flux-system";
pub const TARGET: &str = "infrastructure";

pub struct World {
    pub ns: TestNs,
    pub model: ModelHandle,
    pub lease: LeaseGuard,
    pub fencer: Fencer,
}

impl World {
    pub async fn new(prefix: &str) -> Self {
        Self::with_config(prefix, |c| c).await
    }

    /// A seeded tree with every Kustomization settled, and our Lease held.
    pub async fn with_config(prefix: &str, tweak: impl FnOnce(ModelConfig) -> ModelConfig) -> Self {
        let ns = TestNs::new(prefix).await.unwrap();
        let model = start_seeded(&ns.client, &ns.name, tweak).await.unwrap();
        let cfg = LeaseConfig::new(ns.name.clone(), "flux-handoff");
        let lease = match Lease::acquire(
            ns.client.clone(),
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
        let fencer = Fencer::new(ns.client.clone(), AnnotationKeys::default(), lease.owner())
            .with_lease(lease.handle());
        Self {
            ns,
            model,
            lease,
            fencer,
        }
    }

    pub fn handoff(&self) -> Handoff {
        Handoff::new(self.ns.client.clone(), self.fencer.clone())
    }

    pub fn parent(&self) -> ObjectRef {
        kustomization(&self.ns.name, PARENT)
    }

    pub fn target(&self) -> ObjectRef {
        kustomization(&self.ns.name, TARGET)
    }

    pub fn chain(&self) -> Vec<Chain> {
        vec![Chain::new(Some(self.parent()), self.target())]
    }

    pub fn opts(&self, strategy: Strategy) -> PauseOptions {
        PauseOptions::new(
            strategy,
            Timing::new(Duration::from_millis(100), Duration::from_secs(30)),
        )
        .with_controller(ControllerRef {
            namespace: self.ns.name.clone(),
            name: "kustomize-controller".into(),
        })
        .with_reason("tier-2 test")
    }

    pub async fn get(&self, name: &str) -> Value {
        get_json(&self.ns.client, &kustomization(&self.ns.name, name))
            .await
            .unwrap()
    }

    pub fn owner(&self) -> String {
        self.fencer.owner().to_string()
    }

    /// Polls until `pred` holds for object `name` (bounded).
    pub async fn wait_until(&self, name: &str, pred: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..300 {
            let v = self.get(name).await;
            if pred(&v) {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{name} never reached the awaited state");
    }
}

pub fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}
