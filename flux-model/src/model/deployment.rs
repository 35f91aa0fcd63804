//! The `kustomize-controller` Deployment and its Pods, played without kube-controller-manager,
//! scheduler or kubelet.
//!
//! 1. The model watches Deployment `kustomize-controller` in its namespace (creating it when
//!    configured to).
//! 2. For the current pod template it keeps `replicas` Pods labelled with the template hash.
//!    Pods are created by the model with `spec.nodeName` set, and turned Ready through the
//!    `pods/status` subresource. As kube-controller-manager does, each template has its
//!    `ReplicaSet` controlled by the Deployment, and its Pods are controlled by that `ReplicaSet`;
//!    Pods of no such `ReplicaSet`, and ended ones (`Failed`, `Succeeded`), are not its replicas
//!    (`replicaset`).
//! 3. A changed template (a rollout restart writes `kubectl.kubernetes.io/restartedAt`) gets new
//!    Pods, made Ready; then the old Pods are deleted with their grace period, the controller
//!    loop restarts (the old process is killed, fact 9) and [`super::ModelEvent::RolledOut`] is
//!    recorded. After the grace period the model deletes them with `gracePeriodSeconds=0`, as a
//!    kubelet confirms termination.
//! 4. A lower replica count deletes the newest Pods of the current template with their grace
//!    period (a scale down; terminating Pods are confirmed after it, as in 3).
//! 5. Deployment status (`observedGeneration`, `replicas`, `updatedReplicas`, `readyReplicas`,
//!    `availableReplicas`) follows.
//!
//! Any other Deployment named by [`DeploymentConfig::workload`] (e.g. a cluster autoscaler a
//! replicas gate scales to 0) is played the same way, without touching the controller loop.
//!
//! # Caveats
//! Found on kube-apiserver v1.36.3: a graceful DELETE of a Pod **without** `spec.nodeName` removes
//! it at once (nothing could confirm termination); a Pod **with** `spec.nodeName` only gets
//! `deletionTimestamp` (now + grace) and `deletionGracePeriodSeconds` and stays `Terminating`
//! until a DELETE with `gracePeriodSeconds=0`. That is why model Pods name a node (which need
//! not exist) and why no finalizer is needed to model "terminating for a while".

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use super::Inner;
use super::events::ModelEvent;
use super::status::now_rfc3339;

mod replicaset;

/// Name of the controller Deployment.
pub const DEPLOYMENT_NAME: &str = "kustomize-controller";
/// Pod template annotation a rollout restart sets.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
/// Node name model Pods are bound to (no Node object exists).
pub const MODEL_NODE: &str = "flux-model-node";
/// Label carrying the pod template hash.
pub const TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
const FIELD_MANAGER: &str = "flux-model-kubelet";
const RETRY: Duration = Duration::from_secs(1);

/// How the model plays the Deployment.
#[derive(Debug, Clone)]
pub struct DeploymentConfig {
    /// Namespace of the Deployment (Flux's is `flux-system`).
    pub namespace: String,
    /// Name of the Deployment ([`DEPLOYMENT_NAME`] for the controller's).
    pub name: String,
    /// Create the Deployment when it does not exist.
    pub create: bool,
    /// Replicas of a created Deployment.
    pub replicas: i32,
    /// How long old Pods stay `Terminating` after a rollout.
    pub termination_grace: Duration,
}

impl Default for DeploymentConfig {
    fn default() -> Self {
        Self {
            namespace: "flux-system".into(),
            name: DEPLOYMENT_NAME.into(),
            create: true,
            replicas: 1,
            termination_grace: Duration::from_secs(1),
        }
    }
}

impl DeploymentConfig {
    /// The default configuration in `namespace`.
    #[must_use]
    pub fn in_namespace(namespace: &str) -> Self {
        Self {
            namespace: namespace.into(),
            ..Self::default()
        }
    }

    /// Another Deployment, `namespace/name`, that must exist: its Pods and status are played
    /// (scale up and down, rollouts) but the controller loop is not its process.
    #[must_use]
    pub fn workload(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            create: false,
            ..Self::default()
        }
    }

    /// Whether this is the controller's own Deployment (its rollout kills the controller loop).
    fn is_controller(&self) -> bool {
        self.name == DEPLOYMENT_NAME
    }
}

/// Creates Deployment `kustomize-controller` (selector `app=kustomize-controller`) in `namespace`
/// unless it exists; returns what the server holds.
pub async fn ensure_deployment(
    client: &Client,
    namespace: &str,
    replicas: i32,
) -> anyhow::Result<Deployment> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    if let Some(d) = api.get_opt(DEPLOYMENT_NAME).await? {
        return Ok(d);
    }
    let dep: Deployment = serde_json::from_value(json!({
        "metadata": { "name": DEPLOYMENT_NAME, "namespace": namespace,
                      "labels": { "app": DEPLOYMENT_NAME } },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": DEPLOYMENT_NAME } },
            "template": {
                "metadata": { "labels": { "app": DEPLOYMENT_NAME } },
                "spec": { "containers": [{ "name": "manager",
                    "image": "ghcr.io/fluxcd/kustomize-controller:v1.7.0" }] },
            },
        },
    }))?;
    match api.create(&PostParams::default(), &dep).await {
        Ok(d) => Ok(d),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(api.get(DEPLOYMENT_NAME).await?),
        Err(e) => Err(e.into()),
    }
}

pub(crate) async fn run(inner: Arc<Inner>, cfg: DeploymentConfig) {
    let mut finishers: JoinSet<()> = JoinSet::new();
    loop {
        if let Err(e) = Box::pin(watch_and_play(&inner, &cfg, &mut finishers)).await {
            tracing::warn!(error = %format!("{e:#}"), "deployment model");
        }
        tokio::time::sleep(RETRY).await;
    }
}

async fn watch_and_play(
    inner: &Arc<Inner>,
    cfg: &DeploymentConfig,
    finishers: &mut JoinSet<()>,
) -> anyhow::Result<()> {
    let deps: Api<Deployment> = Api::namespaced(inner.client.clone(), &cfg.namespace);
    if cfg.create {
        ensure_deployment(&inner.client, &cfg.namespace, cfg.replicas).await?;
    }
    let fields = format!("metadata.name={}", cfg.name);
    let list = deps.list(&ListParams::default().fields(&fields)).await?;
    let mut rv = list.metadata.resource_version.unwrap_or_default();
    if let Some(d) = list.items.into_iter().next() {
        play(inner, cfg, &d, finishers).await?;
    }
    loop {
        let wp = WatchParams::default().fields(&fields).timeout(290);
        let mut stream = deps.watch(&wp, &rv).await?.boxed();
        while let Some(ev) = stream.next().await {
            match ev? {
                WatchEvent::Added(d) | WatchEvent::Modified(d) => {
                    rv = d.metadata.resource_version.clone().unwrap_or(rv);
                    play(inner, cfg, &d, finishers).await?;
                }
                WatchEvent::Deleted(d) => rv = d.metadata.resource_version.clone().unwrap_or(rv),
                WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                WatchEvent::Error(s) => anyhow::bail!("deployment watch: {}", s.message),
            }
        }
    }
}

/// Brings Pods and status in line with one version of the Deployment.
async fn play(
    inner: &Arc<Inner>,
    cfg: &DeploymentConfig,
    dep: &Deployment,
    finishers: &mut JoinSet<()>,
) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(inner.client.clone(), &cfg.namespace);
    let spec = dep.spec.clone().unwrap_or_default();
    let template = serde_json::to_value(&spec.template)?;
    let hash = template_hash(&template);
    let replicas = spec.replicas.unwrap_or(1);
    let selector = selector_of(&spec, &cfg.name);
    let all = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    // Its replicas only: Pods of its `ReplicaSets` that have not ended.
    let mine = replicaset::replicas_of(&inner.client, dep, &selector, &all).await?;
    let live: Vec<&Pod> = mine
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let hash_of = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(TEMPLATE_HASH_LABEL))
            .cloned()
    };
    let current_pods: Vec<&&Pod> = live
        .iter()
        .filter(|p| hash_of(p).as_deref() == Some(hash.as_str()))
        .collect();
    let current = current_pods.len();
    for p in current_pods.iter().filter(|p| !pod_ready(p)) {
        // A Pod whose Ready write was lost (model killed in between) is made Ready now.
        mark_ready(&pods, p).await?;
    }
    let old: Vec<String> = live
        .iter()
        .filter(|p| hash_of(p).as_deref() != Some(hash.as_str()))
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let want = usize::try_from(replicas).unwrap_or(0);
    let missing = want.saturating_sub(current);
    if missing > 0 {
        let selector = serde_json::to_value(&spec.selector)?;
        let owner =
            replicaset::ensure(&inner.client, dep, &template, &selector, &hash, replicas).await?;
        for _ in 0..missing {
            create_ready_pod(&pods, &template, (&hash, &owner), cfg).await?;
        }
    }
    if !old.is_empty() {
        terminate_old(inner, cfg, &pods, &template, old, finishers).await;
    }
    // A scale down: the newest Pods of the current template go first.
    let mut extra: Vec<&&Pod> = current_pods.clone();
    extra.sort_by_key(|p| std::cmp::Reverse(p.metadata.creation_timestamp.clone()));
    let extra: Vec<String> = extra
        .into_iter()
        .take(current.saturating_sub(want))
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    if !extra.is_empty() {
        terminate(cfg, &pods, extra, finishers).await;
    }
    let ready = i32::try_from(current.min(want) + missing).unwrap_or(i32::MAX);
    write_status(inner, cfg, dep, ready).await
}

/// Deletes the old Pods with their grace period, restarts the controller loop (the old process
/// dies with its Pod), and confirms termination after the grace period.
async fn terminate_old(
    inner: &Arc<Inner>,
    cfg: &DeploymentConfig,
    pods: &Api<Pod>,
    template: &Value,
    old: Vec<String>,
    finishers: &mut JoinSet<()>,
) {
    let controller = cfg.is_controller();
    terminate(cfg, pods, old, finishers).await;
    if controller {
        // The old process dies with its Pod: every in-flight reconcile is killed.
        inner.clone().restart().await;
        let restarted_at = template["metadata"]["annotations"][RESTARTED_AT]
            .as_str()
            .unwrap_or_default();
        inner.events.push(ModelEvent::RolledOut {
            restarted_at: restarted_at.to_string(),
        });
    }
}

/// Deletes `names` with their grace period and confirms termination after it, as a kubelet.
async fn terminate(
    cfg: &DeploymentConfig,
    pods: &Api<Pod>,
    names: Vec<String>,
    finishers: &mut JoinSet<()>,
) {
    let grace = u32::try_from(cfg.termination_grace.as_secs())
        .unwrap_or(u32::MAX)
        .max(1);
    for name in &names {
        let dp = DeleteParams {
            grace_period_seconds: Some(grace),
            ..DeleteParams::default()
        };
        let _ = pods.delete(name, &dp).await;
    }
    let (pods2, wait, old) = (pods.clone(), cfg.termination_grace, names);
    finishers.spawn(async move {
        tokio::time::sleep(wait).await;
        for name in old {
            let _ = pods2
                .delete(
                    &name,
                    &DeleteParams {
                        grace_period_seconds: Some(0),
                        ..DeleteParams::default()
                    },
                )
                .await;
        }
    });
}

/// Writes the Deployment status when it differs from what the server holds.
async fn write_status(
    inner: &Arc<Inner>,
    cfg: &DeploymentConfig,
    dep: &Deployment,
    ready: i32,
) -> anyhow::Result<()> {
    let status = json!({
        "observedGeneration": dep.metadata.generation,
        "replicas": ready,
        "updatedReplicas": ready,
        "readyReplicas": ready,
        "availableReplicas": ready,
    });
    let held = serde_json::to_value(dep.status.clone().unwrap_or_default())?;
    let changed = [
        "observedGeneration",
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
    ]
    .iter()
    .any(|k| held.get(*k) != status.get(*k));
    if changed {
        let deps: Api<Deployment> = Api::namespaced(inner.client.clone(), &cfg.namespace);
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        deps.patch_status(&cfg.name, &pp, &Patch::Merge(json!({ "status": status })))
            .await?;
    }
    Ok(())
}

async fn create_ready_pod(
    pods: &Api<Pod>,
    template: &Value,
    (hash, owner): (&str, &Value),
    cfg: &DeploymentConfig,
) -> anyhow::Result<()> {
    let mut labels: BTreeMap<String, String> =
        serde_json::from_value(template["metadata"]["labels"].clone()).unwrap_or_default();
    labels.insert(TEMPLATE_HASH_LABEL.into(), hash.into());
    let mut spec = template["spec"].clone();
    spec["nodeName"] = json!(MODEL_NODE);
    spec["terminationGracePeriodSeconds"] = json!(cfg.termination_grace.as_secs().max(1));
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": format!("{}-{hash}-{}", cfg.name, testkit::random_suffix(5)),
            "labels": labels,
            "annotations": template["metadata"]["annotations"],
            "ownerReferences": [owner],
        },
        "spec": spec,
    }))?;
    let created = pods.create(&PostParams::default(), &pod).await?;
    mark_ready(pods, &created).await
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What a kubelet reports once the container runs: Running and Ready.
async fn mark_ready(pods: &Api<Pod>, pod: &Pod) -> anyhow::Result<()> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let now = now_rfc3339();
    let cond = |t: &str| json!({ "type": t, "status": "True", "lastTransitionTime": now });
    let containers: Vec<Value> = pod
        .spec
        .as_ref()
        .map(|s| {
            s.containers.iter().map(|c| json!({
            "name": c.name, "image": c.image, "imageID": "", "ready": true, "started": true,
            "restartCount": 0, "state": { "running": { "startedAt": now } },
        })).collect()
        })
        .unwrap_or_default();
    let status = json!({ "status": {
        "phase": "Running",
        "startTime": now,
        "conditions": [cond("PodScheduled"), cond("Initialized"), cond("ContainersReady"), cond("Ready")],
        "containerStatuses": containers,
    }});
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    pods.patch_status(name, &pp, &Patch::Merge(status)).await?;
    Ok(())
}

/// The Deployment's `spec.selector.matchLabels` as a label selector.
fn selector_of(spec: &k8s_openapi::api::apps::v1::DeploymentSpec, name: &str) -> String {
    let labels = spec
        .selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    // Never an empty selector (every Pod of the namespace): the model's own default.
    if labels.is_empty() {
        format!("app={name}")
    } else {
        labels
    }
}

/// A short, label-safe hash of the pod template.
fn template_hash(template: &Value) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    template.to_string().hash(&mut h);
    format!("{:010x}", h.finish() & 0xff_ffff_ffff)
}
