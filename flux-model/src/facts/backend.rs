//! The two backends of the fact tests behind one [`Setup`]: the model (`crate::model`, its
//! knobs) or the real kustomize-controller (a shard of the test's own on the real-Flux control
//! plane, driven by real means: a Deployment whose health a stand-in kubelet decides, a path
//! missing from the artifact, SIGKILL).

use crate::model::{
    BUMP_ANNOTATION, COMPETING_WRITER, FluxModel, ModelConfig, ModelEvent, ModelHandle, Outcome,
    Phase,
};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::TestNs;
use testkit::fixtures::{kustomization, kustomization_resource};

use super::real::RealFlux;
pub use super::terms::{Mark, REQUESTED_AT, Workload};

/// Which Flux the facts run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The controller model on the shared control plane.
    Model,
    /// The real kustomize-controller v1.9.6 on the real-Flux control plane.
    Real,
}

#[allow(clippy::large_enum_variant)] // one value per test
enum Flux {
    Model {
        _ns: Box<TestNs>,
        model: ModelHandle,
    },
    Real(RealFlux),
}

/// One fact test's namespace, its Kustomization API and the Flux reconciling it.
#[allow(missing_debug_implementations)] // holds a running controller
pub struct Setup {
    pub api: Api<DynamicObject>,
    pub ns: String,
    pub backend: Backend,
    flux: Flux,
}

impl Setup {
    pub async fn new(backend: Backend, prefix: &str) -> Self {
        match backend {
            Backend::Model => {
                let ns = TestNs::new(prefix).await.unwrap();
                let api =
                    Api::namespaced_with(ns.client.clone(), &ns.name, &kustomization_resource());
                let model = FluxModel::start(ns.client.clone(), ModelConfig::namespaced(&ns.name));
                Self {
                    api,
                    ns: ns.name.clone(),
                    backend,
                    flux: Flux::Model {
                        _ns: Box::new(ns),
                        model,
                    },
                }
            }
            Backend::Real => {
                let real = RealFlux::start(prefix).await;
                Self {
                    api: real.api(),
                    ns: real.ns.clone(),
                    backend,
                    flux: Flux::Real(real),
                }
            }
        }
    }

    /// The model's handle, for the few model-only observations.
    pub fn model(&self) -> Option<&ModelHandle> {
        match &self.flux {
            Flux::Model { model, .. } => Some(model),
            Flux::Real(_) => None,
        }
    }

    /// Kustomization `name` deploying `workload`; `suspend` and a `requestedAt` as given.
    pub fn ks(
        &self,
        name: &str,
        workload: Workload,
        suspend: bool,
        requested_at: Option<&str>,
    ) -> DynamicObject {
        let mut obj = match &self.flux {
            Flux::Model { model, .. } => {
                if workload == Workload::Failing {
                    model.fail_at(name, Phase::Health);
                }
                let mut o = kustomization(name).build(&self.ns);
                if workload != Workload::Plain {
                    o.data["spec"]["wait"] = json!(true);
                }
                o
            }
            Flux::Real(real) => real.ks(name, workload),
        };
        obj.data["spec"]["suspend"] = json!(suspend);
        if let Some(nonce) = requested_at {
            obj.metadata
                .annotations
                .get_or_insert_default()
                .insert(REQUESTED_AT.into(), nonce.into());
        }
        obj
    }

    /// Parent `name` whose source holds one child Kustomization `child`.
    pub fn parent_ks(
        &self,
        name: &str,
        suspend: bool,
        requested_at: Option<&str>,
    ) -> DynamicObject {
        let mut obj = self.ks(name, Workload::Plain, suspend, requested_at);
        match &self.flux {
            Flux::Model { model, .. } => {
                let child = json!({
                    "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                    "metadata": { "name": "child" },
                    "spec": { "interval": "10m", "path": "./child", "prune": true, "suspend": false,
                              "sourceRef": { "kind": "GitRepository", "name": "flux-system" } },
                });
                model.set_git(name, vec![child]);
            }
            Flux::Real(real) => real.make_parent(&mut obj),
        }
        obj
    }

    pub async fn create(&self, obj: &DynamicObject) -> DynamicObject {
        self.api.create(&PostParams::default(), obj).await.unwrap()
    }

    /// A merge patch by a writer that is neither Flux nor kubectl.
    pub async fn patch(&self, name: &str, body: Value) -> DynamicObject {
        self.patch_as("test-writer", name, body).await
    }

    pub async fn patch_as(&self, manager: &str, name: &str, body: Value) -> DynamicObject {
        let pp = PatchParams {
            field_manager: Some(manager.into()),
            ..PatchParams::default()
        };
        self.api
            .patch(name, &pp, &Patch::Merge(body))
            .await
            .unwrap()
    }

    pub async fn request(&self, name: &str, nonce: &str) -> DynamicObject {
        self.patch(
            name,
            json!({ "metadata": { "annotations": { REQUESTED_AT: nonce } } }),
        )
        .await
    }

    /// A spec change that moves the generation and still builds (`tag` makes it unique).
    pub fn spec_change(&self, tag: &str) -> Value {
        match self.backend {
            Backend::Model => json!({ "spec": { "path": format!("./{tag}") } }),
            Backend::Real => json!({ "spec": { "postBuild": { "substitute": { "TAG": tag } } } }),
        }
    }

    /// A spec change after which every build of `name` fails.
    pub fn broken_spec(&self, name: &str) -> Value {
        if let Some(model) = self.model() {
            model.fail_at(name, Phase::Build);
        }
        json!({ "spec": { "path": "./no-such-path" } })
    }

    /// Kustomizations created after this pull from a source of this test's own (the model's
    /// sources are per object already).
    pub async fn private_source(&self) {
        if let Flux::Real(real) = &self.flux {
            real.private_source().await;
        }
    }

    /// A new artifact revision of `name`'s source (real: of the private source); returns it.
    pub async fn bump_source_revision(&self, name: &str) -> String {
        match &self.flux {
            Flux::Model { model, .. } => model.bump_source_revision(name),
            Flux::Real(real) => real.bump_source_revision().await,
        }
    }

    /// The competing writer (field manager `competing-writer`): an annotation.
    pub async fn compete_annotate(&self, name: &str, key: &str, value: &str) {
        self.patch_as(
            COMPETING_WRITER,
            name,
            json!({ "metadata": { "annotations": { key: value } } }),
        )
        .await;
    }

    /// The competing writer moves `resourceVersion` only.
    pub async fn compete_bump(&self, name: &str) {
        let value = testkit::random_suffix(8);
        self.compete_annotate(name, BUMP_ANNOTATION, &value).await;
    }

    pub fn mark(&self) -> Mark {
        match &self.flux {
            Flux::Model { model, .. } => Mark {
                events: model.mark(),
                log: 0,
            },
            Flux::Real(real) => real.mark(),
        }
    }

    /// The outcome of the first settled reconcile of `name` after `m` (the finalizer-adding
    /// first run does not count).
    pub async fn wait_settled(&self, name: &str, m: Mark) -> Outcome {
        match &self.flux {
            Flux::Model { model, .. } => model.wait_settled(name, m.events).await.unwrap(),
            Flux::Real(real) => real.wait_settled(name, m).await,
        }
    }

    /// The outcome of the first reconcile of `name` after `m` that read `requestedAt == nonce`.
    pub async fn wait_run_seeing(&self, name: &str, nonce: &str, m: Mark) -> Outcome {
        match &self.flux {
            Flux::Model { model, .. } => {
                model.wait_run_seeing(name, nonce, m.events).await.unwrap()
            }
            Flux::Real(real) => real.wait_run_seeing(name, nonce, m).await,
        }
    }

    /// Working-path runs of `name` that started after `m`: (generation, requestedAt) read.
    pub fn starts(&self, name: &str, m: Mark) -> Vec<(i64, Option<String>)> {
        match &self.flux {
            Flux::Model { model, .. } => {
                let key = format!("{}/{name}", self.ns);
                model.events()[m.events..]
                    .iter()
                    .filter_map(|e| match e {
                        ModelEvent::Started {
                            key: k,
                            generation,
                            requested_at,
                            ..
                        } if *k == key => Some((*generation, requested_at.clone())),
                        _ => None,
                    })
                    .collect()
            }
            Flux::Real(real) => real.starts(name, m),
        }
    }

    /// The phases of `name`'s working-path runs after `m`, each with the resourceVersion its
    /// status write made.
    pub fn phases(&self, name: &str, m: Mark) -> Vec<(Phase, String)> {
        match &self.flux {
            Flux::Model { model, .. } => {
                let key = format!("{}/{name}", self.ns);
                model.events()[m.events..]
                    .iter()
                    .filter_map(|e| match e {
                        ModelEvent::Phase {
                            key: k,
                            phase,
                            resource_version,
                            ..
                        } if *k == key => Some((*phase, resource_version.clone())),
                        _ => None,
                    })
                    .collect()
            }
            Flux::Real(real) => real.phases(name, m),
        }
    }

    /// Panics when two reconciles of `name` ever overlapped.
    pub fn assert_serial(&self, name: &str) {
        match &self.flux {
            Flux::Model { model, .. } => {
                let key = format!("{}/{name}", self.ns);
                let mut running = false;
                for e in model.events() {
                    match e {
                        ModelEvent::Started { key: k, .. } if k == key => {
                            assert!(!running, "two reconciles of {key} at once");
                            running = true;
                        }
                        ModelEvent::Finished { key: k, .. } if k == key => running = false,
                        _ => {}
                    }
                }
            }
            Flux::Real(real) => real.assert_serial(name),
        }
    }

    /// Every later reconcile of `name` (a `Waiting` one) parks in its health phase.
    pub async fn hang(&self, name: &str) {
        match &self.flux {
            Flux::Model { model, .. } => model.hang_at(name, Phase::Health),
            Flux::Real(real) => real.hang(name).await,
        }
    }

    /// Waits until a reconcile of `name` is parked by [`Self::hang`].
    pub async fn wait_hanging(&self, name: &str) {
        match &self.flux {
            Flux::Model { model, .. } => {
                model.wait_hanging(name).await.unwrap();
            }
            Flux::Real(real) => real.wait_hanging(name).await,
        }
    }

    /// Lets the parked reconciles of `name` finish (healthy) and disarms the hang.
    pub async fn release(&self, name: &str) {
        match &self.flux {
            Flux::Model { model, .. } => model.release(name),
            Flux::Real(real) => real.release(name).await,
        }
    }

    /// Makes the health check of a `Failing` workload pass from now on.
    pub async fn heal(&self, name: &str) {
        match &self.flux {
            Flux::Model { model, .. } => model.heal(name),
            Flux::Real(real) => real.release(name).await,
        }
    }

    /// Kills the controller (SIGKILL, in-flight reconciles stop wherever they are) and starts
    /// it again.
    pub async fn restart(&self) {
        match &self.flux {
            Flux::Model { model, .. } => model.restart().await,
            Flux::Real(real) => real.restart().await,
        }
    }

    /// The prefix of `lastAppliedRevision` (the source's revision format).
    pub fn revision_prefix(&self) -> &'static str {
        match self.backend {
            Backend::Model => "main@sha1:",
            Backend::Real => "latest@sha256:",
        }
    }
}
