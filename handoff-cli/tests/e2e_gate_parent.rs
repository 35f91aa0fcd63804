//! End to end: the Flux object that really owns a replicas gate. A Deployment installed by a
//! `HelmRelease` (the cluster-autoscaler chart, the usual case) carries
//! `helm.toolkit.fluxcd.io/name|namespace`, not the kustomize labels: `run deploy/NS/NAME=0`
//! pauses that `HelmRelease` as its parent (fenced, `spec.suspend`, its nonce acknowledged by
//! the model playing helm-controller) and restores it exactly. A Deployment no Flux object
//! applies is refused before any write (exit 2, one line naming `--parent none`), and
//! accepted with `--parent none`.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::{OWNER_KEY, annotation, ended, suspended};
use flux_model::model::{FluxModel, ModelConfig, ModelHandle};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use testkit::TestNs;
use testkit::fixtures::helmrelease_resource;

use common::gate::GATED;
const RELEASE: &str = "autoscaler";
const RECONCILE: &str = "kustomize.toolkit.fluxcd.io/reconcile";

/// The command: announces it runs, then waits for the go file (bounded: 20 s).
const WORKS: &str = "echo $$ > \"$MARKER\"; i=0; while [ ! -e \"$GO\" ] && [ $i -lt 200 ]; \
                     do sleep 0.1; i=$((i+1)); done";

struct Stage {
    ns: TestNs,
    model: ModelHandle,
    deps: Api<Deployment>,
    releases: Api<DynamicObject>,
    marker: PathBuf,
    go: PathBuf,
}

impl Stage {
    /// A fresh namespace with Deployment `cluster-autoscaler` (2 replicas) labelled with
    /// `labels(namespace)`, and the model playing its Pods and, when `helm`, helm-controller on
    /// `HelmRelease` `autoscaler` (created first and settled).
    async fn new(prefix: &str, labels: impl Fn(&str) -> Value, helm: bool) -> Self {
        let ns = TestNs::new(prefix).await.unwrap();
        let releases = Api::namespaced_with(ns.client.clone(), &ns.name, &helmrelease_resource());
        if helm {
            let hr: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "helm.toolkit.fluxcd.io/v2",
                "kind": "HelmRelease",
                "metadata": { "name": RELEASE, "namespace": ns.name },
                "spec": { "interval": "10m", "suspend": false,
                          "chart": { "spec": { "chart": "cluster-autoscaler", "sourceRef": {
                              "kind": "HelmRepository", "name": "autoscaler" } } } },
            }))
            .unwrap();
            releases.create(&PostParams::default(), &hr).await.unwrap();
        }
        let deps: Api<Deployment> = Api::namespaced(ns.client.clone(), &ns.name);
        common::gate::create(&ns, labels(&ns.name)).await;
        let config = ModelConfig::namespaced(&ns.name).with_workload(&ns.name, GATED);
        let config = if helm { config.helm() } else { config };
        let model = FluxModel::start(ns.client.clone(), config);
        if helm {
            model.wait_settled(RELEASE, 0).await.unwrap();
        }
        let tmp = std::env::temp_dir();
        Self {
            marker: tmp.join(format!("flux-handoff-{}.gp-runs", ns.name)),
            go: tmp.join(format!("flux-handoff-{}.gp-go", ns.name)),
            ns,
            model,
            deps,
            releases,
        }
    }

    /// `flux-handoff` against this namespace: `run --target deploy/NS/NAME=0 EXTRA... -- sh
    /// -c WORKS`.
    fn run(&self, extra: &[&str]) -> Command {
        let kubeconfig = testkit::plane::kubeconfig().unwrap();
        let mut cmd = common::cli_in(&self.ns.name, &kubeconfig, "30s");
        cmd.args(["run", "--target"])
            .arg(format!("deploy/{}/{GATED}=0", self.ns.name))
            .args(["--lease", &format!("{}/flux-handoff", self.ns.name)])
            .args(extra)
            .args(["--", "sh", "-c", WORKS])
            .env("MARKER", &self.marker)
            .env("GO", &self.go)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    }

    async fn dep(&self) -> Value {
        serde_json::to_value(self.deps.get(GATED).await.unwrap()).unwrap()
    }

    async fn release(&self) -> Value {
        serde_json::to_value(self.releases.get(RELEASE).await.unwrap()).unwrap()
    }

    async fn lease(&self) -> Option<Lease> {
        self.ns
            .api::<Lease>()
            .get_opt("flux-handoff")
            .await
            .unwrap()
    }

    fn cleanup(&self) {
        let _ = std::fs::remove_file(&self.marker);
        let _ = std::fs::remove_file(&self.go);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_parent_a_helmrelease_installed_deployment_pauses_its_helmrelease_and_restores_it() {
    let helm = |ns: &str| json!({ "helm.toolkit.fluxcd.io/name": RELEASE, "helm.toolkit.fluxcd.io/namespace": ns });
    let s = Stage::new("gp-helm", helm, true).await;
    let before = s.release().await;
    let dep_before = s.dep().await;
    let child = s.run(&[]).spawn().unwrap();
    common::wait_for_file(&s.marker, "the command to start (the gate proven)").await;

    // While the work runs: the HelmRelease fenced and suspended above the gate, its nonce
    // acknowledged; the Deployment fenced at 0.
    let during = s.release().await;
    let during_dep = s.dep().await;
    std::fs::write(&s.go, "").unwrap();
    let (code, err) = ended(child).await;
    s.cleanup();
    assert!(
        annotation(&during, OWNER_KEY).is_some(),
        "the HelmRelease is not fenced: {during}\n{err}"
    );
    assert!(
        suspended(&during),
        "the HelmRelease is not suspended\n{err}"
    );
    let nonce = annotation(&during, "reconcile.fluxcd.io/requestedAt").expect("a nonce");
    assert_eq!(
        during.pointer("/status/lastHandledReconcileAt"),
        Some(&json!(nonce)),
        "the work ran before helm-controller acknowledged the parent's fence"
    );
    assert_eq!(annotation(&during, RECONCILE), None, "a parent's mark only");
    assert!(
        annotation(&during_dep, OWNER_KEY).is_some(),
        "the gate is not fenced"
    );
    assert_eq!(during_dep["spec"]["replicas"], json!(0));
    assert_eq!(code, 0, "{err}");

    // Restored exactly: the HelmRelease's annotations and spec as before, the count back.
    let after = s.release().await;
    assert_eq!(
        after["metadata"]["annotations"], before["metadata"]["annotations"],
        "{err}"
    );
    assert_eq!(after["spec"], before["spec"], "{err}");
    let dep_after = s.dep().await;
    assert_eq!(dep_after["spec"]["replicas"], json!(2), "{err}");
    assert_eq!(
        dep_after["metadata"]["annotations"], dep_before["metadata"]["annotations"],
        "{err}"
    );
    s.model.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_parent_a_deployment_no_flux_object_applies_is_refused_unless_parent_none() {
    let s = Stage::new("gp-none", |_| json!({ "app": GATED }), false).await;
    let before = s.dep().await;
    let cmd = s.run(&[]);
    let (code, err) = ended(cmd_spawn(cmd)).await;
    s.cleanup();
    assert_eq!(code, 2, "{err}");
    let lines: Vec<&str> = err.trim().lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("has no Flux owner"), "{err}");
    assert!(lines[0].contains("--parent none"), "{err}");
    // Nothing written: no Lease, no fence, the count and annotations as they were.
    assert!(s.lease().await.is_none(), "a Lease was taken: {err}");
    let after = s.dep().await;
    assert_eq!(after["spec"]["replicas"], json!(2));
    assert_eq!(
        after["metadata"]["annotations"],
        before["metadata"]["annotations"]
    );
    assert!(!s.marker.exists(), "the command ran");

    // Accepted knowingly: gated and given back exactly.
    let child = cmd_spawn(s.run(&["--parent", "none"]));
    common::wait_for_file(&s.marker, "the command to start (the gate proven)").await;
    let during = s.dep().await;
    std::fs::write(&s.go, "").unwrap();
    let (code, err) = ended(child).await;
    s.cleanup();
    assert_eq!(code, 0, "{err}");
    assert_eq!(during["spec"]["replicas"], json!(0), "{err}");
    let after = s.dep().await;
    assert_eq!(after["spec"]["replicas"], json!(2), "{err}");
    assert_eq!(
        after["metadata"]["annotations"], before["metadata"]["annotations"],
        "{err}"
    );
    s.model.shutdown().await;
}

fn cmd_spawn(mut cmd: Command) -> std::process::Child {
    cmd.spawn().unwrap()
}
