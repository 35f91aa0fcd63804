//! The two stories of the real-Flux scenario, each in a namespace of its own whose objects
//! carry the case's shard key (so only the case's own controllers reconcile them), built
//! through the admin client (untimed, not counted).
//!
//! - **Kustomization** (the incident's replay): a parent `flux-system` with `wait: true` and
//!   `timeout: 35s` applies the plane artifact's `fixtures/parent`, one child Kustomization
//!   `child` (the target) with `wait: true` applying `fixtures/deployment`, a Deployment that
//!   never becomes ready (no kubelet). The pause starts once both report "Running health
//!   checks": the parent's reconcile is stuck in its 35 s health-check wait.
//! - **`HelmRelease`**: a parent `flux-system` (no wait) applies `HelmRelease` `never-ready` (the
//!   target; `timeout: 35s`) whose chart, served by a registry of the scenario's own through an
//!   `OCIRepository` with `layerSelector` `operation: copy`, is one Deployment that never becomes
//!   ready. The pause starts once helm-controller reports "Running 'install' action with
//!   timeout of 35s": its reconcile is stuck in Helm's wait for that Deployment.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flux_fence::ObjectRef;
use flux_suspend::object::{helm_release, kustomization};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, DynamicObject, ObjectMeta, PostParams};
use serde_json::{Value, json};
use testkit::fixtures::{helmrelease_resource, kustomization_resource, ocirepository_resource};
use testkit::real_flux::{FLUX_NS, SOURCE};
use testkit::registry::LocalRegistry;

use super::procs::SHARD_KEY;

/// The parent of both stories.
pub const PARENT: &str = "flux-system";
/// The Kustomization story's target (`fixtures/parent`'s child).
pub const KS_TARGET: &str = "child";
/// The `HelmRelease` story's target.
pub const HR_TARGET: &str = "never-ready";
/// The health-check timeout of the stuck reconcile.
pub const HEALTH_TIMEOUT: &str = "35s";
/// How long a story may take to reach its stuck health check.
const SETUP_WAIT: Duration = Duration::from_mins(2);
const POLL: Duration = Duration::from_millis(100);

/// Which story.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Story {
    Kustomization,
    HelmRelease,
}

impl Story {
    /// `ks` or `hr`, for case names.
    #[must_use]
    pub fn tag(self) -> &'static str {
        match self {
            Self::Kustomization => "ks",
            Self::HelmRelease => "hr",
        }
    }

    /// The controller whose in-flight reconcile is stuck (the one `--retire restart` restarts).
    #[must_use]
    pub fn stuck_controller(self) -> &'static str {
        match self {
            Self::Kustomization => "kustomize-controller",
            Self::HelmRelease => "helm-controller",
        }
    }

    /// The controllers a case of this story runs.
    #[must_use]
    pub fn controllers(self) -> &'static [&'static str] {
        match self {
            Self::Kustomization => &["kustomize-controller"],
            Self::HelmRelease => &["kustomize-controller", "helm-controller"],
        }
    }

    /// The chain's target in `ns`.
    #[must_use]
    pub fn target(self, ns: &str) -> ObjectRef {
        match self {
            Self::Kustomization => kustomization(ns, KS_TARGET),
            Self::HelmRelease => helm_release(ns, HR_TARGET),
        }
    }
}

/// The registry of the `HelmRelease` story: the chart and the parent's manifests.
#[derive(Debug)]
pub struct ChartRegistry {
    registry: LocalRegistry,
    password: String,
}

const USER: &str = "bench-pull";
const CHART_REPO: &str = "bench/never-ready-chart";
const CHART_TAG: &str = "1.0.0";
const MANIFESTS_REPO: &str = "bench/manifests";
const MANIFESTS_TAG: &str = "latest";
const PULL_SECRET: &str = "bench-registry";

impl ChartRegistry {
    /// Starts the registry and pushes both artifacts.
    pub async fn start() -> anyhow::Result<Self> {
        let password = testkit::random_suffix(24);
        let registry = LocalRegistry::start(&[(USER, &password)]).await?;
        let chart = testkit::real_flux::tarball(&chart_files())?;
        registry
            .push_artifact(USER, &password, CHART_REPO, CHART_TAG, &chart)
            .await
            .context("pushing the chart")?;
        let manifests = testkit::real_flux::tarball(&[("hr/release.yaml".into(), release_yaml())])?;
        registry
            .push_artifact(USER, &password, MANIFESTS_REPO, MANIFESTS_TAG, &manifests)
            .await
            .context("pushing the manifests")?;
        Ok(Self { registry, password })
    }
}

/// A chart whose one Deployment never becomes ready.
fn chart_files() -> Vec<(String, String)> {
    vec![
        (
            "never-ready/Chart.yaml".into(),
            "apiVersion: v2\nname: never-ready\nversion: 1.0.0\n".into(),
        ),
        (
            "never-ready/templates/deployment.yaml".into(),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: never-ready-hr\nspec:\n  \
             replicas: 1\n  selector:\n    matchLabels:\n      app: never-ready-hr\n  template:\n    \
             metadata:\n      labels:\n        app: never-ready-hr\n    spec:\n      containers:\n        \
             - name: app\n          image: registry.invalid/never:1\n"
                .into(),
        ),
    ]
}

/// The `HelmRelease` the parent applies (into its `targetNamespace`).
fn release_yaml() -> String {
    format!(
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: {HR_TARGET}\n\
         spec:\n  interval: 10m\n  timeout: {HEALTH_TIMEOUT}\n  chartRef:\n    kind: OCIRepository\n    \
         name: bench-chart\n  install:\n    remediation:\n      retries: 0\n"
    )
}

/// Creates the story in a fresh namespace (`<prefix>-<random>`, also the shard key) and
/// returns the namespace once the stuck reconcile is in its health-check wait.
pub async fn build(
    admin: &Client,
    story: Story,
    prefix: &str,
    chart: Option<&ChartRegistry>,
) -> anyhow::Result<String> {
    let ns = format!("{prefix}-{}", testkit::random_suffix(5));
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let n = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.clone()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    namespaces.create(&PostParams::default(), &n).await?;
    let labels = json!({ SHARD_KEY: ns });
    let mut parent = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": { "name": PARENT, "namespace": ns, "labels": labels },
        "spec": {
            "interval": "10m",
            "timeout": HEALTH_TIMEOUT,
            "prune": true,
            "commonMetadata": { "labels": labels },
        },
    });
    match story {
        Story::Kustomization => {
            parent["spec"]["path"] = json!("./fixtures/parent");
            parent["spec"]["wait"] = json!(true);
            parent["spec"]["sourceRef"] =
                json!({ "kind": "OCIRepository", "name": SOURCE, "namespace": FLUX_NS });
            parent["spec"]["postBuild"] = json!({ "substitute": {
                "NS": ns, "CHILD_PATH": "./fixtures/deployment", "CHILD_WAIT": "true",
            } });
        }
        Story::HelmRelease => {
            let chart = chart.context("the HelmRelease story needs its registry")?;
            sources(admin, &ns, chart).await?;
            parent["spec"]["path"] = json!("./hr");
            parent["spec"]["wait"] = json!(false);
            parent["spec"]["targetNamespace"] = json!(ns);
            parent["spec"]["sourceRef"] =
                json!({ "kind": "OCIRepository", "name": "bench-manifests" });
        }
    }
    let ks: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &ns, &kustomization_resource());
    ks.create(&PostParams::default(), &serde_json::from_value(parent)?)
        .await
        .context("creating the parent")?;
    Ok(ns)
}

/// Waits (bounded) until the story's stuck reconcile is in its health-check wait.
pub async fn await_stuck(admin: &Client, story: Story, ns: &str) -> anyhow::Result<()> {
    let start = Instant::now();
    let ks: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &kustomization_resource());
    let hr: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &helmrelease_resource());
    loop {
        let stuck = match story {
            Story::Kustomization => {
                let p = ks.get_opt(PARENT).await?;
                let c = ks.get_opt(KS_TARGET).await?;
                p.zip(c).is_some_and(|(p, c)| {
                    reconciling(&p.data).starts_with("Running health checks")
                        && reconciling(&c.data).starts_with("Running health checks")
                })
            }
            Story::HelmRelease => hr
                .get_opt(HR_TARGET)
                .await?
                .is_some_and(|h| reconciling(&h.data).starts_with("Running 'install' action")),
        };
        if stuck {
            return Ok(());
        }
        if start.elapsed() > SETUP_WAIT {
            let p = ks.get_opt(PARENT).await?.map(|o| o.data);
            bail!(
                "the {} story did not reach its health-check wait within {SETUP_WAIT:?}; parent: {}",
                story.tag(),
                p.as_ref().map_or("absent".into(), conditions)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The message of the `Reconciling=True` condition, or "".
fn reconciling(obj: &Value) -> String {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Reconciling" && c["status"] == "True")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn conditions(obj: &Value) -> String {
    obj.pointer("/status/conditions")
        .map_or_else(|| "no conditions".into(), Value::to_string)
}

/// The pull Secret and both `OCIRepository`s of the `HelmRelease` story.
async fn sources(admin: &Client, ns: &str, chart: &ChartRegistry) -> anyhow::Result<()> {
    let host = &chart.registry.host;
    let secret: Secret =
        testkit::real_flux::pull_secret(PULL_SECRET, ns, host, USER, &chart.password);
    Api::<Secret>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), ns, &ocirepository_resource());
    for (name, repo, tag, copy) in [
        ("bench-manifests", MANIFESTS_REPO, MANIFESTS_TAG, false),
        ("bench-chart", CHART_REPO, CHART_TAG, true),
    ] {
        let mut o = json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "OCIRepository",
            "metadata": { "name": name, "namespace": ns },
            "spec": {
                "interval": "10m",
                "url": format!("oci://{host}/{repo}"),
                "ref": { "tag": tag },
                "secretRef": { "name": PULL_SECRET },
                "insecure": true,
            },
        });
        if copy {
            // The layer as pushed: a chart archive helm-controller loads as is.
            o["spec"]["layerSelector"] = json!({
                "mediaType": "application/vnd.cncf.flux.content.v1.tar+gzip",
                "operation": "copy",
            });
        }
        api.create(&PostParams::default(), &serde_json::from_value(o)?)
            .await
            .with_context(|| format!("creating OCIRepository {name}"))?;
    }
    Ok(())
}
