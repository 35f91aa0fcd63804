//! The real backend of the fact tests: a kustomize-controller shard of the test's own (so its
//! JSON log is the test's, and it can be killed), a watch that keeps every version of the
//! namespace's Kustomizations, and a stand-in kubelet that reports each Deployment of the
//! namespace healthy unless the test holds it.
//!
//! Observations come from the API server and the controller's own log only:
//! - a working-path run *starts* with the write of `Reconciling` "Fetching manifests…" (kc
//!   `internal/controller/kustomization_controller.go:329-335`), and each phase writes a new
//!   `Reconciling` message (`:391`, `:482`, `:1093`);
//! - a run *ends* with one of three log lines: "Reconciliation finished" (after the deferred
//!   status patch, `:152-160`), "Reconciliation failed" (`:304`) or "Reconciliation is
//!   suspended" (`:191`), both of those before it; the wait then also awaits that patch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::model::{Outcome, Phase};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{
    Api, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use serde_json::{Value, json};
use testkit::fixtures::{kustomization_resource, ocirepository_resource};
use testkit::real_flux::{FLUX_NS, SHARD_KEY, SOURCE, Shard};

use super::terms::{Mark, REQUESTED_AT, Workload};

/// Bound of every wait (a shard's first reconcile included).
const WAIT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(100);
const KUBELET: &str = "facts-kubelet";

pub struct RealFlux {
    pub ns: String,
    client: Client,
    shard: tokio::sync::Mutex<Option<Shard>>,
    /// Log lines of killed shard processes.
    old_log: Mutex<Vec<String>>,
    /// Every version of every Kustomization of the namespace, in watch order.
    versions: Arc<Mutex<Vec<Value>>>,
    /// Deployments the stand-in kubelet reports not healthy, and how.
    held: Arc<Mutex<HashMap<String, Health>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The `OCIRepository` (in `flux-system`) the Kustomizations of this test pull from.
    source: Mutex<String>,
}

impl Drop for RealFlux {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl RealFlux {
    pub async fn start(prefix: &str) -> Self {
        let path = testkit::real_flux::kubeconfig().expect("the real-Flux control plane");
        let config = testkit::config_from(&path).await.unwrap();
        let client = Client::try_from(config).unwrap();
        let ns = format!("{prefix}-{}", testkit::random_suffix(6));
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
        let versions = Arc::new(Mutex::new(Vec::new()));
        let held = Arc::new(Mutex::new(HashMap::new()));
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &kustomization_resource());
        let rv = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap_or_default();
        let tasks = vec![
            tokio::spawn(watch(api, rv, versions.clone())),
            tokio::spawn(kubelet(Api::namespaced(client.clone(), &ns), held.clone())),
        ];
        let shard = Shard::start(&ns).await;
        Self {
            ns,
            client,
            shard: tokio::sync::Mutex::new(Some(shard)),
            old_log: Mutex::new(Vec::new()),
            versions,
            held,
            tasks,
            source: Mutex::new(SOURCE.to_string()),
        }
    }

    /// An `OCIRepository` of this test's own (named after the namespace, in `flux-system` beside
    /// the pull Secret) for the Kustomizations created after this call; waits until it is Ready.
    pub async fn private_source(&self) {
        let api = self.sources();
        let mut source = api.get(SOURCE).await.unwrap();
        source.metadata = ObjectMeta {
            name: Some(self.ns.clone()),
            namespace: Some(FLUX_NS.into()),
            ..ObjectMeta::default()
        };
        source.data.as_object_mut().unwrap().remove("status");
        api.create(&PostParams::default(), &source).await.unwrap();
        self.source.lock().unwrap().clone_from(&self.ns);
        self.wait_source(|r| r.contains('@')).await;
    }

    fn sources(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), FLUX_NS, &ocirepository_resource())
    }

    /// Waits until the private source's artifact revision satisfies `pred`; returns it.
    async fn wait_source(&self, pred: impl Fn(&str) -> bool) -> String {
        let name = self.source.lock().unwrap().clone();
        let start = Instant::now();
        loop {
            let obj = self.sources().get(&name).await.unwrap();
            let revision = obj
                .data
                .pointer("/status/artifact/revision")
                .and_then(Value::as_str);
            if let Some(r) = revision.filter(|r| pred(r)) {
                return r.to_string();
            }
            assert!(
                start.elapsed() < WAIT,
                "source {name} never reached the revision: {obj:?}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// A new artifact revision of the private source with the same content: its `spec.ref`
    /// moves from tag `latest` to that tag's digest, and source-controller reports revision
    /// `sha256:<digest>` instead of `latest@sha256:<digest>` (sc
    /// `internal/controller/ocirepository_controller.go:633-658`). Returns the new revision.
    pub async fn bump_source_revision(&self) -> String {
        let current = self.wait_source(|r| r.contains('@')).await;
        let digest = current.rsplit('@').next().unwrap().to_string();
        let name = self.source.lock().unwrap().clone();
        let pp = PatchParams {
            field_manager: Some("flux-handoff-test".into()),
            ..PatchParams::default()
        };
        let body = json!({ "spec": { "ref": { "tag": null, "digest": digest } } });
        self.sources()
            .patch(&name, &pp, &Patch::Merge(body))
            .await
            .unwrap();
        self.wait_source(|r| r == digest).await
    }

    pub fn api(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &kustomization_resource())
    }

    /// Kustomization `name` of this shard, built from the artifact of the plane's source.
    pub fn ks(&self, name: &str, workload: Workload) -> DynamicObject {
        let (path, wait, timeout) = match workload {
            Workload::Plain => ("./fixtures/configmap", false, "60s"),
            Workload::Waiting | Workload::Failing => ("./fixtures/deployment", true, "60s"),
        };
        if workload == Workload::Failing {
            // Failed (not merely progressing): kc's fail-fast ends the health phase at once,
            // where a timeout could not be shorter than 30 s (kc-api `GetTimeout`).
            self.held
                .lock()
                .unwrap()
                .insert(deployment(name), Health::Failed);
        }
        serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": { "name": name, "namespace": self.ns, "labels": { SHARD_KEY: self.ns } },
            "spec": {
                "interval": "10m",
                "timeout": timeout,
                "path": path,
                "prune": true,
                "wait": wait,
                "targetNamespace": self.ns,
                "namePrefix": format!("{name}-"),
                "sourceRef": { "kind": "OCIRepository", "name": *self.source.lock().unwrap(), "namespace": FLUX_NS },
            },
        }))
        .unwrap()
    }

    /// Turns `obj` into a parent applying `fixtures/parent` (one child `child`).
    pub fn make_parent(&self, obj: &mut DynamicObject) {
        let spec = &mut obj.data["spec"];
        spec["path"] = json!("./fixtures/parent");
        spec.as_object_mut().unwrap().remove("targetNamespace");
        spec.as_object_mut().unwrap().remove("namePrefix");
        spec["postBuild"] = json!({ "substitute": { "NS": self.ns } });
        spec["commonMetadata"] = json!({ "labels": { SHARD_KEY: self.ns } });
    }

    fn log_lines(&self, shard: Option<&Shard>) -> Vec<String> {
        let mut lines = self.old_log.lock().unwrap().clone();
        if let Some(s) = shard {
            lines.extend(s.log().lines().map(str::to_string));
        }
        lines
    }

    async fn log(&self) -> Vec<String> {
        let shard = self.shard.lock().await;
        self.log_lines(shard.as_ref())
    }

    pub fn mark(&self) -> Mark {
        let log = self
            .shard
            .try_lock()
            .map(|s| self.log_lines(s.as_ref()).len())
            .unwrap_or_default();
        Mark {
            events: self.versions.lock().unwrap().len(),
            log,
        }
    }

    /// The versions of `name` seen by the watch, with their index.
    fn versions_of(&self, name: &str) -> Vec<(usize, Value)> {
        self.versions
            .lock()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, v)| v.pointer("/metadata/name") == Some(&json!(name)))
            .map(|(i, v)| (i, v.clone()))
            .collect()
    }

    /// Outcomes of `name`'s runs logged after `m`.
    async fn outcomes(&self, name: &str, m: Mark) -> Vec<Outcome> {
        self.log()
            .await
            .iter()
            .skip(m.log)
            .filter_map(|l| outcome_of(l, &self.ns, name))
            .collect()
    }

    pub async fn wait_settled(&self, name: &str, m: Mark) -> Outcome {
        let start = Instant::now();
        loop {
            if let Some(outcome) = self.outcomes(name, m).await.into_iter().next() {
                self.wait_patched(name, &outcome).await;
                return outcome;
            }
            assert!(start.elapsed() < WAIT, "no run of {name} ended after {m:?}");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Awaits the deferred status patch that follows a run's log line.
    async fn wait_patched(&self, name: &str, outcome: &Outcome) {
        let start = Instant::now();
        loop {
            let obj = serde_json::to_value(self.api().get(name).await.unwrap()).unwrap();
            let handled = obj
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(REQUESTED_AT))
                == obj.pointer("/status/lastHandledReconcileAt");
            let done = handled
                && match outcome {
                    Outcome::Failed => {
                        reason_of(&obj, "Reconciling") == Some("ProgressingWithRetry")
                    }
                    _ => true,
                };
            let rv = obj.pointer("/metadata/resourceVersion");
            let seen = self
                .versions_of(name)
                .last()
                .map(|(_, v)| v["metadata"]["resourceVersion"].clone());
            // Done, and the watch caught up with it (later marks see only later versions).
            if done && seen.as_ref() == rv {
                return;
            }
            assert!(
                start.elapsed() < WAIT,
                "the status patch of {name} never came: {obj}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    pub async fn wait_run_seeing(&self, name: &str, nonce: &str, m: Mark) -> Outcome {
        let start = Instant::now();
        loop {
            // The first version after `m` with the nonce handled is that run's final patch.
            let done = self.versions_of(name).into_iter().find(|(i, v)| {
                *i >= m.events && v.pointer("/status/lastHandledReconcileAt") == Some(&json!(nonce))
            });
            if let Some((_, v)) = done {
                if v.pointer("/spec/suspend") == Some(&json!(true)) {
                    return Outcome::Suspended;
                }
                return if status_of(&v, "Ready") == Some("True") {
                    Outcome::Succeeded
                } else {
                    Outcome::Failed
                };
            }
            assert!(start.elapsed() < WAIT, "no run of {name} handled {nonce}");
            tokio::time::sleep(POLL).await;
        }
    }

    pub fn starts(&self, name: &str, m: Mark) -> Vec<(i64, Option<String>)> {
        let mut out = Vec::new();
        let mut prev: Option<String> = None;
        for (i, v) in self.versions_of(name) {
            let msg = reconciling_message(&v);
            let fetching = |s: &Option<String>| {
                s.as_deref()
                    .is_some_and(|s| s.starts_with("Fetching manifests"))
            };
            if fetching(&msg) && !fetching(&prev) && i >= m.events {
                let generation = v.pointer("/metadata/generation").and_then(Value::as_i64);
                let nonce = v
                    .pointer("/metadata/annotations")
                    .and_then(|a| a.get(REQUESTED_AT))
                    .and_then(Value::as_str)
                    .map(str::to_string);
                out.push((generation.unwrap_or_default(), nonce));
            }
            prev = msg;
        }
        out
    }

    pub fn phases(&self, name: &str, m: Mark) -> Vec<(Phase, String)> {
        let mut out = Vec::new();
        let mut prev: Option<String> = None;
        for (i, v) in self.versions_of(name) {
            let msg = reconciling_message(&v);
            if msg != prev && i >= m.events {
                let phase = msg.as_deref().and_then(|s| {
                    [
                        ("Fetching manifests", Phase::Fetch),
                        ("Building manifests", Phase::Build),
                        ("Detecting drift", Phase::Apply),
                        ("Running health checks", Phase::Health),
                    ]
                    .into_iter()
                    .find(|(p, _)| s.starts_with(p))
                    .map(|(_, ph)| ph)
                });
                if let Some(phase) = phase {
                    let rv = v
                        .pointer("/metadata/resourceVersion")
                        .and_then(Value::as_str);
                    out.push((phase, rv.unwrap_or_default().to_string()));
                }
            }
            prev = msg;
        }
        out
    }

    /// A run starts with `Reconciling` Progressing "Fetching…" and ends when the deferred patch
    /// removes it or marks it `ProgressingWithRetry`: no start may come while one runs.
    pub fn assert_serial(&self, name: &str) {
        let fetching = |m: &Option<String>| {
            m.as_deref()
                .is_some_and(|s| s.starts_with("Fetching manifests"))
        };
        let mut running = false;
        let mut prev: Option<String> = None;
        for (_, v) in self.versions_of(name) {
            let msg = reconciling_message(&v);
            if reason_of(&v, "Reconciling") != Some("Progressing") {
                running = false;
            } else if fetching(&msg) && !fetching(&prev) {
                assert!(!running, "two reconciles of {name} at once: {v}");
                running = true;
            }
            prev = msg;
        }
    }

    /// Holds the Deployment of `name` unhealthy: every later health phase waits.
    pub async fn hang(&self, name: &str) {
        let d = deployment(name);
        self.held
            .lock()
            .unwrap()
            .insert(d.clone(), Health::Progressing);
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &self.ns);
        write_health(&api, &d, Health::Progressing).await;
    }

    pub async fn wait_hanging(&self, name: &str) {
        let from = self.versions.lock().unwrap().len();
        let start = Instant::now();
        // Hanging: the current run is in its health phase while the Deployment is held.
        loop {
            let obj = serde_json::to_value(self.api().get(name).await.unwrap()).unwrap();
            if reconciling_message(&obj).is_some_and(|s| s.starts_with("Running health checks"))
                && status_of(&obj, "Ready") == Some("Unknown")
            {
                return;
            }
            assert!(
                start.elapsed() < WAIT,
                "{name} never reached its health phase ({from})"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Lets the stand-in kubelet report the Deployment of `name` healthy again.
    pub async fn release(&self, name: &str) {
        let d = deployment(name);
        self.held.lock().unwrap().remove(&d);
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &self.ns);
        write_health(&api, &d, Health::Healthy).await;
    }

    /// SIGKILLs the shard and starts a new process for it.
    pub async fn restart(&self) {
        let mut guard = self.shard.lock().await;
        let shard = guard.take().expect("the shard runs");
        let lines: Vec<String> = shard.log().lines().map(str::to_string).collect();
        let key = shard.kill();
        self.old_log.lock().unwrap().extend(lines);
        *guard = Some(Shard::start_again(key).await);
    }
}

/// The Deployment `name`'s Kustomization deploys (`namePrefix`).
fn deployment(name: &str) -> String {
    format!("{name}-never-ready")
}

fn reconciling_message(obj: &Value) -> Option<String> {
    condition(obj, "Reconciling").and_then(|c| c["message"].as_str().map(str::to_string))
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn status_of<'a>(obj: &'a Value, type_: &str) -> Option<&'a str> {
    condition(obj, type_)?["status"].as_str()
}

fn reason_of<'a>(obj: &'a Value, type_: &str) -> Option<&'a str> {
    condition(obj, type_)?["reason"].as_str()
}

/// The end of a run of `ns/name` a controller log line reports.
fn outcome_of(line: &str, ns: &str, name: &str) -> Option<Outcome> {
    let v: Value = serde_json::from_str(line).ok()?;
    if v["name"] != name || v["namespace"] != ns {
        return None;
    }
    let msg = v["msg"].as_str()?;
    if msg.starts_with("Reconciliation finished") {
        Some(Outcome::Succeeded)
    } else if msg.starts_with("Reconciliation failed") {
        Some(Outcome::Failed)
    } else if msg.starts_with("Reconciliation is suspended") {
        Some(Outcome::Suspended)
    } else {
        None
    }
}

/// Keeps every version of the Kustomizations `api` lists, from `rv` on.
async fn watch(api: Api<DynamicObject>, mut rv: String, versions: Arc<Mutex<Vec<Value>>>) {
    loop {
        let Ok(stream) = api.watch(&WatchParams::default().timeout(290), &rv).await else {
            tokio::time::sleep(POLL).await;
            continue;
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(event)) = stream.next().await {
            let obj = match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => o,
                WatchEvent::Bookmark(b) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                WatchEvent::Error(e) => panic!("the Kustomization watch failed: {e:?}"),
            };
            rv = obj.metadata.resource_version.clone().unwrap_or_default();
            versions
                .lock()
                .unwrap()
                .push(serde_json::to_value(&obj).unwrap());
        }
    }
}

/// The stand-in kubelet: reports every new Deployment generation of the namespace healthy,
/// or as held.
async fn kubelet(api: Api<Deployment>, held: Arc<Mutex<HashMap<String, Health>>>) {
    loop {
        if let Ok(list) = api.list(&ListParams::default()).await {
            for d in list {
                let name = d.metadata.name.clone().unwrap_or_default();
                let observed = d.status.as_ref().and_then(|s| s.observed_generation);
                if observed != d.metadata.generation {
                    let health = held.lock().unwrap().get(&name).copied();
                    write_health(&api, &name, health.unwrap_or(Health::Healthy)).await;
                }
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What the stand-in kubelet reports for a Deployment (kstatus `Current`, `InProgress`, `Failed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Healthy,
    Progressing,
    Failed,
}

/// Writes Deployment `name`'s status as kube-controller-manager would: all replicas available,
/// none yet (progressing), or none and the progress deadline exceeded.
async fn write_health(api: &Api<Deployment>, name: &str, health: Health) {
    let Ok(Some(d)) = api.get_opt(name).await else {
        return;
    };
    let healthy = health == Health::Healthy;
    let n = i32::from(healthy);
    let (status, reason) = match health {
        Health::Healthy => ("True", "NewReplicaSetAvailable"),
        Health::Progressing => ("True", "ReplicaSetUpdated"),
        Health::Failed => ("False", "ProgressDeadlineExceeded"),
    };
    let body = json!({ "status": {
        "observedGeneration": d.metadata.generation,
        "replicas": 1, "updatedReplicas": n, "readyReplicas": n, "availableReplicas": n,
        "conditions": [
            { "type": "Available", "status": if healthy { "True" } else { "False" },
              "reason": "MinimumReplicasAvailable", "message": "stand-in kubelet" },
            { "type": "Progressing", "status": status, "reason": reason,
              "message": "stand-in kubelet" },
        ],
    } });
    let pp = PatchParams {
        field_manager: Some(KUBELET.into()),
        ..PatchParams::default()
    };
    let _ = api.patch_status(name, &pp, &Patch::Merge(body)).await;
}
