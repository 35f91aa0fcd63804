//! The real controllers of one case, as processes of the bench's own, and — for `--retire
//! restart` — a stand-in for what a cluster does on a rollout restart.
//!
//! Each case runs its own kustomize-controller (and, for the `HelmRelease` story, its own
//! helm-controller): the binary `cargo xtask cluster up --flux real` built (`<state>/<name>.bin`),
//! with `--watch-label-selector=sharding.fluxcd.io/key=<case namespace>` (Flux's sharding: the
//! plane's controllers skip objects carrying that key) and the case's extra arguments, e.g.
//! `--feature-gates=CancelHealthCheckOnNewRevision=true`. A feature gate is read once at start,
//! so a gate on and a gate off are two processes.
//!
//! **The rollout stand-in.** On this plane the controllers are local processes: there is no
//! Deployment, no Pod, no kubelet and no kube-controller-manager. `--retire restart` patches the
//! controller Deployment's pod template and waits until every Pod that existed before is gone
//! and the replacements are Ready. So the bench creates a Deployment `<controller>` in the case
//! namespace (its container args are the process's args) and one Pod per process, bound to a
//! node that does not exist (so a graceful delete leaves it Terminating until confirmed, as a
//! kubelet would), and plays a `RollingUpdate` with `maxSurge: 1, maxUnavailable: 0` (the default
//! strategy of Flux's manifests): on a new `restartedAt`, it starts a new process and Pod, marks
//! the Pod Ready when the process's `/readyz` answers 200 (Flux's readiness probe), then deletes
//! the old Pod gracefully, sends SIGTERM to the old process, and confirms the deletion when the
//! process has exited. What it leaves out: scheduling, image pull, container start and the
//! kubelet's probe period; leader election (a process outside a cluster cannot elect: the
//! controllers find no namespace for the lock), so the new process reconciles before the old
//! one has stopped. A real rollout is slower by those; the measured restart is a floor.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

/// The label kustomize- and helm-controller shard on.
pub const SHARD_KEY: &str = testkit::real_flux::SHARD_KEY;
/// Node the stand-in's Pods are bound to (no Node object exists).
const NODE: &str = "flux-bench-node";
/// Field manager of the stand-in's writes.
const MANAGER: &str = "flux-bench-kubelet";
/// How long a controller may take to answer `/readyz`.
const READY_WITHIN: Duration = Duration::from_secs(90);
/// Flux's manifests give the controllers `terminationGracePeriodSeconds: 60`
/// (kc `config/manager/deployment.yaml`); after it, SIGKILL.
const GRACE: Duration = Duration::from_mins(1);
/// How often the stand-in reads the Deployment.
const WATCH_EVERY: Duration = Duration::from_millis(50);

/// One running controller process.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    /// Its `/readyz` URL.
    ready_url: String,
    /// Directory of its log and `TMPDIR`.
    pub dir: PathBuf,
}

impl Proc {
    /// Starts controller `name` (`kustomize-controller`, `helm-controller`) of the real-Flux
    /// plane in `state`, for the objects labelled `SHARD_KEY=key`, with `extra` args; waits
    /// (bounded) until `/readyz` answers.
    pub async fn start(
        state: &Path,
        name: &str,
        key: &str,
        extra: &[String],
    ) -> anyhow::Result<Self> {
        let bin =
            std::fs::read_to_string(state.join(format!("{name}.bin"))).with_context(|| {
                format!(
                    "the real-Flux plane in {} records no {name}",
                    state.display()
                )
            })?;
        let dir = std::env::temp_dir().join(format!(
            "flux-bench-{name}-{key}-{}",
            testkit::random_suffix(4)
        ));
        std::fs::create_dir_all(&dir)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = std::fs::File::create(dir.join("log"))?;
        let child = Command::new(bin.trim())
            .args(["--metrics-addr=0", "--log-level=info"])
            .arg(format!("--health-addr=127.0.0.1:{port}"))
            .arg(format!("--watch-label-selector={SHARD_KEY}={key}"))
            .args(extra)
            .env("KUBECONFIG", state.join("envtest").join("kubeconfig"))
            .env("TMPDIR", &dir)
            .env("RUNTIME_NAMESPACE", testkit::real_flux::FLUX_NS)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let mut proc = Self {
            child,
            ready_url: format!("http://127.0.0.1:{port}/readyz"),
            dir,
        };
        proc.await_ready()
            .await
            .with_context(|| format!("{name} did not start: {}", proc.log_tail()))?;
        Ok(proc)
    }

    async fn await_ready(&mut self) -> anyhow::Result<()> {
        let http = reqwest::Client::new();
        let start = Instant::now();
        while start.elapsed() < READY_WITHIN {
            if let Some(status) = self.child.try_wait()? {
                bail!("it exited ({status})");
            }
            if let Ok(r) = http.get(&self.ready_url).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("no /readyz within {READY_WITHIN:?}")
    }

    /// The last lines of its log.
    #[must_use]
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }

    /// SIGTERM, then waits for the exit (SIGKILL after [`GRACE`]); how long it took to exit.
    pub async fn terminate(mut self) -> Duration {
        let start = Instant::now();
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        if tokio::time::timeout(GRACE, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
        let took = start.elapsed();
        let _ = std::fs::remove_dir_all(&self.dir);
        took
    }
}

/// A controller of a case: one process, or, with [`Rollout`], a Deployment whose restarts
/// replace it.
#[derive(Debug)]
pub struct Controllers {
    procs: Vec<Proc>,
    rollouts: Vec<Rollout>,
}

impl Controllers {
    /// The controllers `names` of a case, plain processes.
    pub async fn start(
        state: &Path,
        names: &[&str],
        key: &str,
        extra: &[String],
    ) -> anyhow::Result<Self> {
        let mut procs = Vec::new();
        for name in names {
            procs.push(Proc::start(state, name, key, extra).await?);
        }
        Ok(Self {
            procs,
            rollouts: Vec::new(),
        })
    }

    /// Adds controller `name` behind a Deployment `name` in `ns` (see the module docs).
    pub async fn add_rollout(
        &mut self,
        admin: &Client,
        state: &Path,
        ns: &str,
        name: &str,
        key: &str,
        extra: &[String],
    ) -> anyhow::Result<()> {
        self.rollouts
            .push(Rollout::start(admin, state, ns, name, key, extra).await?);
        Ok(())
    }

    /// Rollouts played, with the old process's time to exit after SIGTERM, per restart.
    pub async fn restarts(&self) -> Vec<(Duration, Duration)> {
        let mut all = Vec::new();
        for r in &self.rollouts {
            all.extend(r.done.lock().await.iter().copied());
        }
        all
    }

    /// Stops every process (SIGTERM, bounded).
    pub async fn stop(self) {
        for p in self.procs {
            let _ = p.terminate().await;
        }
        for r in self.rollouts {
            r.stop().await;
        }
    }
}

/// The rollout stand-in of one controller (see the module docs).
#[derive(Debug)]
struct Rollout {
    current: Arc<Mutex<Option<(String, Proc)>>>,
    /// Per rollout played: (restartedAt seen -> old Pod gone, old process's exit after SIGTERM).
    done: Arc<Mutex<Vec<(Duration, Duration)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Rollout {
    async fn start(
        admin: &Client,
        state: &Path,
        ns: &str,
        name: &str,
        key: &str,
        extra: &[String],
    ) -> anyhow::Result<Self> {
        let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
        let mut args = vec![
            "--watch-all-namespaces".to_string(),
            format!("--watch-label-selector={SHARD_KEY}={key}"),
        ];
        args.extend(extra.iter().cloned());
        let d: Deployment = serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": ns },
            "spec": {
                "replicas": 1,
                "selector": { "matchLabels": { "app": name } },
                "template": {
                    "metadata": { "labels": { "app": name } },
                    "spec": {
                        "terminationGracePeriodSeconds": GRACE.as_secs(),
                        "containers": [{ "name": "manager", "image": format!("fluxcd/{name}"), "args": args }],
                    },
                },
            },
        }))?;
        deployments
            .create(&post(), &d)
            .await
            .context("creating the stand-in Deployment")?;
        let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
        let proc = Proc::start(state, name, key, extra).await?;
        let pod = create_ready_pod(&pods, name).await?;
        let current = Arc::new(Mutex::new(Some((pod, proc))));
        let done = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(play(
            deployments,
            pods,
            state.to_path_buf(),
            name.to_string(),
            key.to_string(),
            extra.to_vec(),
            current.clone(),
            done.clone(),
        ));
        Ok(Self {
            current,
            done,
            task,
        })
    }

    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
        if let Some((_, p)) = self.current.lock().await.take() {
            let _ = p.terminate().await;
        }
    }
}

#[allow(clippy::too_many_arguments)] // the task's whole state, moved in once
async fn play(
    deployments: Api<Deployment>,
    pods: Api<Pod>,
    state: PathBuf,
    name: String,
    key: String,
    extra: Vec<String>,
    current: Arc<Mutex<Option<(String, Proc)>>>,
    done: Arc<Mutex<Vec<(Duration, Duration)>>>,
) {
    let mut seen: Option<String> = None;
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let Ok(d) = deployments.get(&name).await else {
            continue;
        };
        let restarted = d
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(flux_suspend::io::RESTARTED_AT))
            .cloned();
        if restarted.is_none() || restarted == seen {
            continue;
        }
        seen = restarted;
        let start = Instant::now();
        // maxSurge 1, maxUnavailable 0: the new Pod first, Ready, then the old one goes.
        let new_pod = match create_pod(&pods, &name).await {
            Ok(p) => p,
            Err(e) => {
                eprintln!("flux-bench: stand-in: creating the new Pod: {e:#}");
                continue;
            }
        };
        let proc = match Proc::start(&state, &name, &key, &extra).await {
            Ok(p) => p,
            Err(e) => {
                eprintln!("flux-bench: stand-in: starting the new {name}: {e:#}");
                continue;
            }
        };
        if let Err(e) = mark_ready(&pods, &new_pod).await {
            eprintln!("flux-bench: stand-in: marking {new_pod} Ready: {e:#}");
        }
        let old = current.lock().await.replace((new_pod, proc));
        if let Some((old_pod, old_proc)) = old {
            let _ = pods.delete(&old_pod, &DeleteParams::default()).await;
            let exit = old_proc.terminate().await;
            let _ = pods
                .delete(&old_pod, &DeleteParams::default().grace_period(0))
                .await;
            done.lock().await.push((start.elapsed(), exit));
        }
    }
}

fn post() -> PostParams {
    PostParams {
        field_manager: Some(MANAGER.into()),
        ..PostParams::default()
    }
}

/// Creates a Pod of the stand-in's Deployment `name` (not Ready); returns its name.
async fn create_pod(pods: &Api<Pod>, name: &str) -> anyhow::Result<String> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": format!("{name}-{}", testkit::random_suffix(5)), "labels": { "app": name } },
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": GRACE.as_secs(),
            "containers": [{ "name": "manager", "image": format!("fluxcd/{name}") }],
        },
    }))?;
    let created = pods.create(&post(), &pod).await?;
    Ok(created.metadata.name.unwrap_or_default())
}

async fn create_ready_pod(pods: &Api<Pod>, name: &str) -> anyhow::Result<String> {
    let pod = create_pod(pods, name).await?;
    mark_ready(pods, &pod).await?;
    Ok(pod)
}

/// What a kubelet reports once the readiness probe passed.
async fn mark_ready(pods: &Api<Pod>, pod: &str) -> anyhow::Result<()> {
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let cond = |t: &str| json!({ "type": t, "status": "True", "lastTransitionTime": now });
    let status = json!({ "status": {
        "phase": "Running",
        "conditions": [cond("PodScheduled"), cond("Initialized"), cond("ContainersReady"), cond("Ready")],
    }});
    let pp = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    pods.patch_status(pod, &pp, &Patch::Merge(status)).await?;
    Ok(())
}
