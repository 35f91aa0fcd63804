//! A model of Flux's kustomize-controller (and its Deployment) that runs against a real
//! kube-apiserver, following docs/design/flux-model.md fact by fact.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> anyhow::Result<()> {
//! use flux_model::model::{FluxModel, ModelConfig, Phase};
//!
//! let model = FluxModel::start(client, ModelConfig::namespaced("team-a"));
//! model.hang_at("apps", Phase::Build);
//! // ... patch `apps` (suspend + requestedAt) ...
//! model.wait_hanging("apps").await?;
//! model.release("apps");
//! model.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Flow of one reconcile (one object, never two at once)
//! 1. A list+watch of Kustomizations queues an object when it is new, when
//!    `metadata.generation` or the `reconcile.fluxcd.io/requestedAt` annotation changed, when
//!    its `spec.interval` timer fires, or when a test bumps its source revision. Nothing else
//!    queues it (fact 1). An event during a reconcile marks the key dirty: exactly one more run
//!    follows (fact 2).
//! 2. The reconcile GETs the object. That read is the base of every status write and the source
//!    of the `requestedAt` value the finalisation records.
//! 3. Deletion: the finalizer `finalizers.fluxcd.io` is removed. First sight: the finalizer is
//!    added and the run requeues (as the real controller does).
//! 4. `spec.suspend: true`: finalisation only (fact 4).
//! 5. Working path (fact 5): phases fetch, build, apply, health. Each phase writes a new
//!    `Reconciling` message (the first also `Ready=Unknown`), does its opening work (apply
//!    reads the children from the parent's Git manifests), emits [`ModelEvent::Phase`], fires
//!    armed touches, restarts if armed, hangs if armed, waits its duration, fails if armed, and
//!    does its closing work (apply: server-side apply of the children it read, skipping
//!    `reconcile: disabled` ones — facts 6 and 7). The end is `Ready=True` with
//!    `lastAppliedRevision`, or `Ready=False`.
//! 6. The deferred finalisation runs on every path (fact 3): `status.lastHandledReconcileAt`,
//!    `Ready=True` removes `Reconciling` and sets `observedGeneration`; `Ready=False` keeps
//!    `Reconciling` with reason `ProgressingWithRetry`; nothing changed, nothing written.
//!
//! Status writes follow fluxcd/pkg `runtime/patch` (`SerialPatcher`): each write is relative
//! to the previous write of the same run (the first to the object as read); changed conditions
//! are merged into a fresh GET and patched with a resourceVersion lock (retried on 409, as the
//! helper does), every other status field is a JSON merge patch with no precondition.
//!
//! [`Controller::Helm`] plays helm-controller on `HelmRelease`s with the same queue, phases and
//! finalisation (docs/design/flux-model.md "helm-controller"); no children, and it does not model a
//! release left `pending-upgrade`.
//!
//! # Caveats
//! - Reconciles read the API server directly, never a stale informer cache.
//! - Requeue timers keep the latest deadline per key (client-go keeps the earliest).
//! - `ModelHandle::restart` is "kill -9": in-flight reconciles are aborted wherever they are;
//!   a request already on the wire may still land.

mod apply;
mod controller;
pub mod deployment;
mod events;
mod handle;
mod knobs;
mod patcher;
mod reconcile;
pub mod seed;
pub mod status;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use deployment::DeploymentConfig;
pub use events::{ModelEvent, Outcome};
pub use handle::ModelHandle;
pub use knobs::{BUMP_ANNOTATION, COMPETING_WRITER, Touch};
pub use seed::{SeededTree, seed_tree, start_seeded};

use events::EventLog;
use knobs::Knobs;
use testkit::fixtures::kustomization_resource;

/// Field manager of the model's server-side apply of children (kustomize-controller's apply).
pub const FIELD_MANAGER: &str = "kustomize-controller";
/// Field manager of the model's status and finalizer writes: the real controller patches them
/// as `gotk-kustomize-controller` (kustomize-controller main.go, `StatusManager:
/// fmt.Sprintf("gotk-%s", controllerName)`), which its own apply does not take over.
pub const STATUS_MANAGER: &str = "gotk-kustomize-controller";
/// Finalizer kustomize-controller puts on Kustomizations.
pub const FINALIZER: &str = "finalizers.fluxcd.io";
/// Finalizer Flux Operator puts on its objects (flux-operator `api/v1/common_types.go`).
pub const OPERATOR_FINALIZER: &str = "fluxcd.controlplane.io/finalizer";
/// Flux Operator's pause: its controllers return early while this reads `disabled` (any case).
pub const OPERATOR_RECONCILE_ANNOTATION: &str = "fluxcd.controlplane.io/reconcile";
/// Annotation that excludes an object from a parent's apply and prune (fact 6).
pub const RECONCILE_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/reconcile";
/// Label naming the parent Kustomization of an applied object.
pub const PARENT_NAME_LABEL: &str = "kustomize.toolkit.fluxcd.io/name";
/// Label naming the parent Kustomization's namespace.
pub const PARENT_NAMESPACE_LABEL: &str = "kustomize.toolkit.fluxcd.io/namespace";

/// A working-path phase (docs/design/flux-model.md fact 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    Fetch,
    Build,
    Apply,
    Health,
}

impl Phase {
    /// The phases in the order a reconcile runs them.
    pub const ALL: [Phase; 4] = [Phase::Fetch, Phase::Build, Phase::Apply, Phase::Health];
}

/// Which Flux controller the model plays. One model plays one controller; run two models for
/// `Kustomization`s and `HelmRelease`s side by side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Controller {
    /// kustomize-controller reconciling `Kustomization`s (facts 1–10, parents apply children).
    #[default]
    Kustomize,
    /// helm-controller reconciling `HelmRelease`s: the same queue, phases (fetch chart, render,
    /// upgrade, health) and deferred finalisation with `lastHandledReconcileAt`; no children.
    Helm,
    /// Flux Operator reconciling `ResourceSet`s (docs/design/flux-model.md "Flux Operator"):
    /// queued on a new generation or *any* annotation change; paused by
    /// [`OPERATOR_RECONCILE_ANNOTATION`] `disabled`, and the deferred finalisation still records
    /// `lastHandledReconcileAt` then; no `spec.suspend`, no top-level `observedGeneration`.
    ResourceSet,
    /// Flux Operator reconciling `FluxInstance`s, as [`Controller::ResourceSet`].
    FluxInstance,
}

impl Controller {
    /// Whether this is one of Flux Operator's controllers.
    #[must_use]
    pub fn is_operator(self) -> bool {
        matches!(self, Self::ResourceSet | Self::FluxInstance)
    }

    /// The finalizer this controller adds on first sight.
    #[must_use]
    pub fn finalizer(self) -> &'static str {
        if self.is_operator() {
            OPERATOR_FINALIZER
        } else {
            FINALIZER
        }
    }
}

/// How the model runs.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// The controller played (default kustomize-controller).
    pub controller: Controller,
    /// Namespace whose Kustomizations the model reconciles; `None` watches all namespaces.
    pub namespace: Option<String>,
    /// Default duration of each phase (per-phase overrides: [`ModelHandle::set_phase_duration`]).
    pub phase_duration: Duration,
    /// Source revision every object applies until a test bumps it.
    pub default_revision: String,
    /// Add the `finalizers.fluxcd.io` finalizer on first sight, as Flux does.
    pub add_finalizer: bool,
    /// Parent key (`namespace/name` or a bare name in the configured namespace) -> the child
    /// Kustomization manifests of its Git path.
    pub git: Vec<(String, Vec<Value>)>,
    /// Play the controller Deployment too.
    pub deployment: Option<DeploymentConfig>,
    /// Other Deployments whose Pods and status are played ([`DeploymentConfig::workload`]).
    pub workloads: Vec<DeploymentConfig>,
    /// Bound of every `wait_*` hook.
    pub wait_timeout: Duration,
}

impl ModelConfig {
    /// Reconcile Kustomizations in `namespace`, with short phases and no Deployment.
    #[must_use]
    pub fn namespaced(namespace: &str) -> Self {
        Self {
            namespace: Some(namespace.to_string()),
            ..Self::all_namespaces()
        }
    }

    /// Reconcile Kustomizations in every namespace.
    #[must_use]
    pub fn all_namespaces() -> Self {
        Self {
            controller: Controller::Kustomize,
            namespace: None,
            phase_duration: Duration::from_millis(20),
            default_revision: "main@sha1:0000000000000000000000000000000000000001".into(),
            add_finalizer: true,
            git: Vec::new(),
            deployment: None,
            workloads: Vec::new(),
            wait_timeout: Duration::from_mins(1),
        }
    }

    /// Declares the child manifests of `parent`'s Git path.
    #[must_use]
    pub fn with_git(mut self, parent: &str, children: Vec<Value>) -> Self {
        self.git.push((parent.to_string(), children));
        self
    }

    /// Plays another controller than kustomize-controller.
    #[must_use]
    pub fn playing(mut self, controller: Controller) -> Self {
        self.controller = controller;
        self
    }

    /// Plays helm-controller (`HelmRelease`s) instead of kustomize-controller.
    #[must_use]
    pub fn helm(mut self) -> Self {
        self.controller = Controller::Helm;
        self
    }

    /// Plays the controller Deployment as configured.
    #[must_use]
    pub fn with_deployment(mut self, deployment: DeploymentConfig) -> Self {
        self.deployment = Some(deployment);
        self
    }

    /// Plays Deployment `namespace/name` (which must exist) as a workload: Pods and status
    /// follow its replica count and template ([`DeploymentConfig::workload`]).
    #[must_use]
    pub fn with_workload(mut self, namespace: &str, name: &str) -> Self {
        self.workloads
            .push(DeploymentConfig::workload(namespace, name));
        self
    }
}

/// Entry point: [`FluxModel::start`].
#[derive(Debug)]
pub struct FluxModel;

impl FluxModel {
    /// Starts the model's controller loop (and the Deployment model when configured) on the
    /// current tokio runtime.
    ///
    /// # Guarantees
    /// Facts 1–10 of docs/design/flux-model.md hold for the objects it watches; nothing outside the
    /// watched namespace is written except children a parent's Git manifests name and the
    /// configured Deployment and its Pods.
    ///
    /// # Caveats
    /// The loop keeps running until [`ModelHandle::shutdown`] or the handle is dropped. API
    /// errors are reported as [`Outcome::Error`] events, never panics.
    #[must_use]
    pub fn start(client: Client, config: ModelConfig) -> ModelHandle {
        let mut knobs = Knobs::default();
        let (tx, _rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            client,
            config,
            knobs: Mutex::new(Knobs::default()),
            events: EventLog::new(),
            runs: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            process: Mutex::new(Process { task: None, tx }),
            restart_lock: tokio::sync::Mutex::new(()),
            deployment_tasks: Mutex::new(Vec::new()),
        });
        for (parent, children) in &inner.config.git {
            knobs.git.insert(inner.key(parent), children.clone());
        }
        *inner.knobs.lock().expect("knobs lock") = knobs;
        inner.spawn_process();
        let played = inner
            .config
            .deployment
            .iter()
            .chain(&inner.config.workloads);
        let tasks = played
            .map(|dep| tokio::spawn(deployment::run(inner.clone(), dep.clone())))
            .collect();
        *inner.deployment_tasks.lock().expect("deployment lock") = tasks;
        ModelHandle { inner }
    }
}

#[derive(Debug)]
struct Process {
    task: Option<JoinHandle<()>>,
    tx: mpsc::UnboundedSender<String>,
}

pub(crate) struct Inner {
    client: Client,
    config: ModelConfig,
    knobs: Mutex<Knobs>,
    events: EventLog,
    runs: AtomicU64,
    restarts: AtomicU64,
    /// Set by shutdown/drop: a restart still in flight must not start a new process.
    stopped: AtomicBool,
    process: Mutex<Process>,
    restart_lock: tokio::sync::Mutex<()>,
    deployment_tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn knobs(&self) -> std::sync::MutexGuard<'_, Knobs> {
        self.knobs.lock().expect("knobs lock")
    }

    /// `namespace/name` for a bare name in the configured namespace; keys pass through.
    fn key(&self, name: &str) -> String {
        if name.contains('/') {
            name.to_string()
        } else {
            format!(
                "{}/{name}",
                self.config.namespace.as_deref().unwrap_or("default")
            )
        }
    }

    fn kustomizations(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &kustomization_resource())
    }

    /// The API of the kind this model reconciles.
    fn resource(&self) -> kube::api::ApiResource {
        match self.config.controller {
            Controller::Kustomize => kustomization_resource(),
            Controller::Helm => testkit::fixtures::helmrelease_resource(),
            Controller::ResourceSet => testkit::fixtures::resourceset_resource(),
            Controller::FluxInstance => testkit::fixtures::fluxinstance_resource(),
        }
    }

    fn objects(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &self.resource())
    }

    fn enqueue(&self, key: String) {
        let _ = self.process.lock().expect("process lock").tx.send(key);
    }

    fn spawn_process(self: &Arc<Self>) {
        // `stopped` is checked and set under the process lock, so no process outlives a stop.
        let mut process = self.process.lock().expect("process lock");
        if self.stopped.load(Ordering::SeqCst) {
            return;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        process.task = Some(tokio::spawn(controller::run(self.clone(), rx)));
        process.tx = tx;
    }

    /// Marks the model stopped and takes its process task (under the process lock).
    fn stop(&self) -> Option<JoinHandle<()>> {
        let mut process = self.process.lock().expect("process lock");
        self.stopped.store(true, Ordering::SeqCst);
        process.task.take()
    }

    async fn restart(self: Arc<Self>) {
        let _serial = self.restart_lock.lock().await;
        let old = self.process.lock().expect("process lock").task.take();
        if let Some(t) = old {
            t.abort();
            let _ = t.await;
        }
        if self.stopped.load(Ordering::SeqCst) {
            return;
        }
        let count = self.restarts.fetch_add(1, Ordering::SeqCst) + 1;
        self.events.push(ModelEvent::Restarted { count });
        self.spawn_process();
    }

    async fn touch(&self, key: &str, touch: &Touch) -> anyhow::Result<()> {
        let (ns, name) = split_key(key);
        let body = match touch {
            Touch::Annotate { key, value } => {
                json!({ "metadata": { "annotations": { key: value } } })
            }
            Touch::SetSuspend(s) => json!({ "spec": { "suspend": s } }),
            Touch::BumpResourceVersion => json!({ "metadata": { "annotations": {
                BUMP_ANNOTATION: testkit::random_suffix(8) } } }),
        };
        let pp = PatchParams {
            field_manager: Some(COMPETING_WRITER.into()),
            ..PatchParams::default()
        };
        self.objects(ns)
            .patch(name, &pp, &Patch::Merge(body))
            .await?;
        self.events.push(ModelEvent::Touched {
            target: key.to_string(),
        });
        Ok(())
    }
}

/// Splits `namespace/name`.
pub(crate) fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("default", key))
}
