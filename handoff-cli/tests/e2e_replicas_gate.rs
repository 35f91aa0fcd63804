//! End to end: a replicas gate, `run deploy/NS/NAME=N`, against the API server with the model
//! playing kustomize-controller and the gated Deployment's Pods (no kube-controller-manager
//! runs here: `flux_model::model::DeploymentConfig::workload`). The original repository's
//! controller gate: the cluster autoscaler scaled to 0 while a CNI rolls out, under the pause
//! of the Kustomization that applies it, its count restored exactly afterwards; a count
//! someone else set meanwhile is withheld with the fence, the parent kept paused.

mod common;

use std::path::PathBuf;
use std::process::{Child, Stdio};

use common::{Cluster, OWNER_KEY, TARGET, annotation, code, ended, stderr, suspended};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use common::gate::GATED;
const RECONCILE: &str = "kustomize.toolkit.fluxcd.io/reconcile";

/// The command: announces it runs, then waits for the go file (bounded: 20 s).
const WORKS: &str = "echo $$ > \"$MARKER\"; i=0; while [ ! -e \"$GO\" ] && [ $i -lt 200 ]; \
                     do sleep 0.1; i=$((i+1)); done";

struct Gate {
    c: Cluster,
    deps: Api<Deployment>,
    pods: Api<Pod>,
    marker: PathBuf,
    go: PathBuf,
}

impl Gate {
    /// [`common::gate::cluster`], its Pods up.
    async fn new(prefix: &str) -> Self {
        let c = common::gate::cluster(prefix).await;
        let deps = Api::namespaced(c.ns.client.clone(), &c.ns.name);
        let pods = Api::namespaced(c.ns.client.clone(), &c.ns.name);
        let tmp = std::env::temp_dir();
        let g = Self {
            marker: tmp.join(format!("flux-handoff-{}.gate-runs", c.ns.name)),
            go: tmp.join(format!("flux-handoff-{}.gate-go", c.ns.name)),
            deps,
            pods,
            c,
        };
        g.wait_pods(2).await;
        g
    }

    /// Waits (a minute at most) until `n` Pods of the gated Deployment exist, terminating ones
    /// included.
    async fn wait_pods(&self, n: usize) {
        let give_up = tokio::time::Instant::now() + std::time::Duration::from_mins(1);
        loop {
            let have = self.pod_count().await;
            if have == n {
                return;
            }
            assert!(
                tokio::time::Instant::now() < give_up,
                "{have} Pods, not {n}, after a minute"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    async fn pod_count(&self) -> usize {
        let lp = ListParams::default().labels(&format!("app={GATED}"));
        self.pods.list_metadata(&lp).await.unwrap().items.len()
    }

    async fn dep(&self) -> Value {
        serde_json::to_value(self.deps.get(GATED).await.unwrap()).unwrap()
    }

    fn target(&self) -> String {
        format!("deploy/{}/{GATED}=0", self.c.ns.name)
    }

    fn run(&self) -> Child {
        let mut cmd = self.c.cli();
        cmd.args(["run", "--target", &self.target()])
            .args(self.c.handoff_flags())
            .args(["--", "sh", "-c", WORKS])
            .env("MARKER", &self.marker)
            .env("GO", &self.go)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd.spawn().unwrap()
    }

    fn cleanup(&self) {
        let _ = std::fs::remove_file(&self.marker);
        let _ = std::fs::remove_file(&self.go);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_gate_scales_to_zero_under_the_pause_and_restores_the_count_exactly() {
    let g = Gate::new("gate-run").await;
    let before = g.dep().await;
    let child = g.run();
    common::wait_for_file(&g.marker, "the command to start (the gate proven)").await;

    // While the work runs: the parent paused, the Deployment fenced at 0, no Pod left.
    let parent = g.c.get(TARGET).await;
    assert!(suspended(&parent), "the parent is not suspended");
    assert!(
        annotation(&parent, OWNER_KEY).is_some(),
        "the parent is not fenced"
    );
    let during = g.dep().await;
    assert!(annotation(&during, OWNER_KEY).is_some(), "not fenced");
    assert_eq!(during["spec"]["replicas"], json!(0));
    assert_eq!(annotation(&during, RECONCILE), Some("disabled"));
    assert_eq!(
        g.pod_count().await,
        0,
        "the work started with Pods of the old count left"
    );

    std::fs::write(&g.go, "").unwrap();
    let (code, err) = ended(child).await;
    g.cleanup();
    assert_eq!(code, 0, "{err}");
    // Given back exactly: the count, the annotations; the parent resumed and unfenced.
    let after = g.dep().await;
    assert_eq!(after["spec"]["replicas"], json!(2), "{err}");
    assert_eq!(
        after["metadata"]["annotations"], before["metadata"]["annotations"],
        "{err}"
    );
    let parent = g.c.get(TARGET).await;
    assert!(!suspended(&parent), "the parent is still suspended");
    assert!(
        annotation(&parent, OWNER_KEY).is_none(),
        "the parent is still fenced"
    );
    g.wait_pods(2).await;
    g.c.model.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_gate_a_count_someone_set_during_the_work_is_withheld_with_the_parent() {
    let g = Gate::new("gate-moved").await;
    let child = g.run();
    common::wait_for_file(&g.marker, "the command to start (the gate proven)").await;

    // A person scales it during the work (`kubectl scale`).
    let pp = PatchParams {
        field_manager: Some("kubectl-scale".into()),
        ..PatchParams::default()
    };
    g.deps
        .patch(
            GATED,
            &pp,
            &Patch::Merge(json!({ "spec": { "replicas": 5 } })),
        )
        .await
        .unwrap();

    std::fs::write(&g.go, "").unwrap();
    let (exit, err) = ended(child).await;
    g.cleanup();
    assert_ne!(exit, 0, "a moved count was released: {err}");
    assert!(err.contains("withheld"), "{err}");
    eprintln!("STDERR {err}");
    // Their count stays, the gate's fence stays, and so does the parent's pause.
    let after = g.dep().await;
    assert_eq!(after["spec"]["replicas"], json!(5), "{err}");
    assert!(
        annotation(&after, OWNER_KEY).is_some(),
        "the gate's fence was removed"
    );
    let parent = g.c.get(TARGET).await;
    assert!(
        suspended(&parent),
        "the parent was resumed over a held gate"
    );
    assert!(annotation(&parent, OWNER_KEY).is_some());

    // The next step the run printed settles it as the person left it, then frees the parent.
    let holder = err
        .split("--holder ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the next step names the holder")
        .to_string();
    let gate = format!("deployment/{}/{GATED}", g.c.ns.name);
    let steps = [
        vec!["fences", "release", gate.as_str(), "--keep-moved"],
        vec!["resume"],
    ];
    for step in steps {
        let mut args: Vec<String> = step.iter().map(|s| (*s).to_string()).collect();
        args.extend(["--holder".into(), holder.clone(), "--holder-exited".into()]);
        args.extend(["--lease".into(), format!("{}/flux-handoff", g.c.ns.name)]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = g.c.run(&args).await;
        assert_eq!(code(&out), 0, "{step:?}: {}", stderr(&out));
    }
    let settled = g.dep().await;
    assert_eq!(
        settled["spec"]["replicas"],
        json!(5),
        "the person's count was not kept"
    );
    assert!(annotation(&settled, OWNER_KEY).is_none());
    assert_eq!(annotation(&settled, RECONCILE), None);
    let parent = g.c.get(TARGET).await;
    assert!(!suspended(&parent) && annotation(&parent, OWNER_KEY).is_none());
    g.c.model.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_gate_a_count_on_anything_but_a_deployment_is_a_usage_error() {
    let g = Gate::new("gate-usage").await;
    let ns = g.c.ns.name.clone();
    for bad in [
        format!("ks/{ns}/{TARGET}=0"),
        format!("deploy/{ns}/{GATED}"),
        format!("deploy/{ns}/{GATED}=-1"),
    ] {
        let mut args = vec!["run".to_string(), "--target".into(), bad.clone()];
        args.extend(g.c.handoff_flags());
        args.extend(["--".into(), "true".into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = g.c.run(&args).await;
        assert_eq!(code(&out), 2, "{bad}: {}", stderr(&out));
        assert_eq!(
            stderr(&out).trim().lines().count(),
            1,
            "{bad}: {}",
            stderr(&out)
        );
    }
    // Nothing was written: no fence, the count as it was.
    let dep = g.dep().await;
    assert!(annotation(&dep, OWNER_KEY).is_none());
    assert_eq!(dep["spec"]["replicas"], json!(2));
    g.c.model.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_gate_a_parked_gate_is_recovered_through_the_chain_record() {
    let g = Gate::new("gate-park").await;
    let dir = std::env::temp_dir().join(format!("fh-gate-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("flux-handoff.toml");
    std::fs::write(&cfg, "[lease]\nduration = \"2s\"\n").unwrap();
    let cfg = cfg.to_str().unwrap().to_string();
    let lease = format!("{}/flux-handoff", g.c.ns.name);
    let target = g.target();

    // A pause left parked: the Deployment at 0 under its parent's pause, nobody to resume it.
    let mut args = vec!["--config", &cfg, "pause", "--target", &target];
    let flags = g.c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = g.c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(g.dep().await["spec"]["replicas"], json!(0));

    // Recovery finds the gate on the Lease's chain record (Deployments are never listed) and
    // gives the count back before the parent's pause.
    let args = [
        "--config",
        &cfg,
        "fences",
        "--lease",
        &lease,
        "recover",
        "--yes",
        "--include-paused",
    ];
    let out = g.c.run(&args).await;
    let err = stderr(&out);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code(&out), 0, "{err}");
    let (at_gate, at_parent) = (
        err.find(&format!("released: deployment/{}/{GATED}", g.c.ns.name)),
        err.find(&format!("released: ks/{}/{TARGET}", g.c.ns.name)),
    );
    assert!(
        at_gate.is_some() && at_parent.is_some() && at_gate < at_parent,
        "{err}"
    );
    let after = g.dep().await;
    assert_eq!(after["spec"]["replicas"], json!(2), "{err}");
    assert!(annotation(&after, OWNER_KEY).is_none(), "{err}");
    let parent = g.c.get(TARGET).await;
    assert!(!suspended(&parent) && annotation(&parent, OWNER_KEY).is_none());
    g.wait_pods(2).await;
    g.c.model.shutdown().await;
}
