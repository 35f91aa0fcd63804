//! restart: stop and start the API server mid-run, on the same etcd data, at three points of a
//! `run`: during the proof (the fences are written), during the command, and while the release
//! (resume) begins. The run must complete (exit 0, cluster as before) or fail closed (a
//! documented exit code, one `error:` line, every fence and a held Lease listed by `fences`,
//! and `fences recover` restoring the pre-run state). The in-process controller model must
//! reconnect: after each point it must reconcile an object changed through the restarted server.
//!
//! This scenario runs a control plane of its own (`Settings.launcher`, the envtest binary) with
//! fixed ports, so a restart serves the same CA, token, data and address; the shared chaos plane
//! other scenarios use is never stopped.
//!
//! Windows: "proof" stops the server as soon as the target's fence is seen on the server (the
//! `proof_window_missed=` counts points where the command had already started when the server
//! stopped); "command"
//! stops it while the command (gated on a file) runs; "resume" SIGSTOPs the CLI while its command
//! runs, lets the command exit, stops the server, then SIGCONTs the CLI, so the release starts
//! against a server that is down (deterministic, not timing-based).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::model::{FluxModel, ModelHandle, seed_tree};
use tokio::process::Command;

use super::cell::{LEASE, Obj, PARENT, State, TARGET, listed};
use super::discover::Baseline;
use super::{Finding, Kind, Settings, Tally, finish, outputs};

/// How long the server stays down between stop and start (on top of the stop and start).
/// How long the server stays down between stop and start (on top of the stop and the start,
/// ~1-3 s each), per round: the full run's later rounds outlast the 4 s Lease.
const DOWNTIME_MS: [u64; 3] = [0, 1_000, 2_500];
/// Exit codes a run may fail closed with here (timeout, Kubernetes API error, cleanup failed).
const CLOSED_CODES: [i32; 3] = [4, 6, 7];

/// Where in the run the server restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    Proof,
    Command,
    Resume,
    /// As `Resume`, down longer than the release's read budget: the run must fail closed.
    ResumeBeyondBudget,
}

impl Point {
    fn name(self) -> &'static str {
        match self {
            Point::Proof => "proof",
            Point::Command => "command",
            Point::Resume => "resume",
            Point::ResumeBeyondBudget => "resume-beyond-budget",
        }
    }
}

/// Restarts at every point, once (`--quick`) or three times.
pub async fn run(s: &Settings, base: &Baseline) -> anyhow::Result<Tally> {
    let (Some(launcher), Some(crds)) = (&s.launcher, &s.crds) else {
        return Ok(Tally {
            scenario: "restart",
            count: 0,
            line: "chaos: restart restarts=0 (no --launcher)".into(),
            findings: vec![Finding::new(
                Kind::Other,
                "restart needs --launcher and --crds to run a control plane of its own",
            )],
        });
    };
    let mut plane = Plane::start(launcher, crds, &s.scratch.join("restart-plane")).await?;
    super::secret(plane.token()?.trim());
    let client = plane.client().await?;
    let rounds = if s.quick { 1 } else { 3 };
    let (mut restarts, mut completed, mut closed, mut bad, mut missed) = (0, 0, 0, 0, 0);
    let mut findings = Vec::new();
    let mut plan = Vec::new();
    for round in 1..=rounds {
        let downtime = Duration::from_millis(DOWNTIME_MS[(round - 1) % DOWNTIME_MS.len()]);
        for point in [Point::Proof, Point::Command, Point::Resume] {
            plan.push((
                point,
                downtime,
                format!("restart {} #{round}", point.name()),
            ));
        }
    }
    // Once per run: down longer than the read budget, so the release cannot wait it out.
    let long = flux_fence::READ_RETRY_BUDGET + Duration::from_secs(5);
    let point = Point::ResumeBeyondBudget;
    plan.push((point, long, format!("restart {}", point.name())));
    for (point, downtime, label) in plan {
        let (code, problems, miss) = one(s, base, &mut plane, &client, point, downtime).await?;
        restarts += 1;
        missed += usize::from(miss);
        if !problems.is_empty() {
            bad += 1;
            findings.extend(problems.into_iter().map(|f| Finding {
                text: format!("{label}: {} (exit {code})", f.text),
                ..f
            }));
        } else if code == 0 {
            completed += 1;
        } else {
            closed += 1;
        }
        eprintln!("flux-chaos: {label} done (exit {code})");
    }
    plane.stop().await?;
    Ok(Tally {
        scenario: "restart",
        count: restarts,
        line: format!(
            "chaos: restart restarts={restarts} completed={completed} failed_closed={closed} violations={bad} proof_window_missed={missed}"
        ),
        findings,
    })
}

/// One run with one restart at `point`; (exit code, what was wrong, the proof window was
/// missed).
async fn one(
    s: &Settings,
    base: &Baseline,
    plane: &mut Plane,
    client: &Client,
    point: Point,
    downtime: Duration,
) -> anyhow::Result<(i32, Vec<Finding>, bool)> {
    let cell = Mini::new(s, plane, client).await?;
    let before = cell.state().await?;
    let gate = |f: &str| cell.dir.join(f);
    let script = format!(
        "touch {s}; while [ ! -e {g} ]; do sleep 0.1; done; touch {d}",
        s = gate("started").display(),
        g = gate("go").display(),
        d = gate("done").display()
    );
    if point == Point::Proof {
        std::fs::write(gate("go"), "")?;
    }
    let mut cmd = cell.cli(&plane.kubeconfig);
    cmd.args(["run", "--target", TARGET, "--", "sh", "-c", &script]);
    let mut child = cmd.spawn()?;
    let (mut problems, missed) = restart_at(s, plane, &cell, &mut child, point, downtime).await?;
    let (code, _, err) = match finish(child, s.run_bound).await {
        Ok(r) => r,
        Err(e) => {
            problems.push(Finding::new(Kind::Other, format!("{e:#}")));
            (-1, String::new(), String::new())
        }
    };
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    if code == 0 {
        let after = cell.state().await?;
        for d in after.diff(&before, &base.allowed) {
            problems.push(Finding::new(
                Kind::UnexpectedChange,
                format!("exit 0 but {d}"),
            ));
        }
    } else {
        if !CLOSED_CODES.contains(&code) {
            problems.push(Finding::new(
                Kind::Other,
                format!("exit code {code} is not a fail-closed code 4, 6 or 7"),
            ));
        }
        if errors.len() != 1 {
            problems.push(Finding::new(
                Kind::Other,
                format!("{} error lines, not one: {errors:?}", errors.len()),
            ));
        }
        eprintln!(
            "flux-chaos: restart {}: failed with {code}: {}",
            point.name(),
            errors.last().unwrap_or(&"")
        );
        problems.extend(cell.check_and_recover(&before, base).await?);
    }
    problems.extend(cell.model_alive().await);
    cell.model.shutdown().await;
    Ok((code, problems, missed))
}

/// Restarts the server at `point` of the running `child`; (what prevented it, whether the
/// proof window was missed: the command had started when the server stopped).
async fn restart_at(
    s: &Settings,
    plane: &mut Plane,
    cell: &Mini,
    child: &mut tokio::process::Child,
    point: Point,
    downtime: Duration,
) -> anyhow::Result<(Vec<Finding>, bool)> {
    let gate = |f: &str| cell.dir.join(f);
    let pid = child.id().context("the CLI has no pid")?;
    let mut problems = Vec::new();
    let mut missed = false;
    let deadline = tokio::time::Instant::now() + s.run_bound;
    let exited = |c: &mut tokio::process::Child| c.try_wait().map(|w| w.is_some());
    match point {
        Point::Proof => loop {
            if cell.target_fenced().await? {
                let down_at = tokio::time::Instant::now();
                plane.stop().await?;
                missed = gate("started").exists();
                tokio::time::sleep(downtime).await;
                plane.spawn().await?;
                outage(point, down_at);
                break;
            }
            if exited(child)? || tokio::time::Instant::now() > deadline {
                problems.push(Finding::new(
                    Kind::Other,
                    "the run ended before its target fence was seen; no restart",
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        },
        Point::Command | Point::Resume | Point::ResumeBeyondBudget => {
            while !gate("started").exists() {
                if exited(child)? || tokio::time::Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if !gate("started").exists() {
                problems.push(Finding::new(
                    Kind::Other,
                    "the run ended before its command started; no restart",
                ));
            } else if point == Point::Command {
                let down_at = tokio::time::Instant::now();
                plane.restart(downtime).await?;
                outage(point, down_at);
                std::fs::write(gate("go"), "")?;
            } else {
                signal("STOP", pid)?;
                std::fs::write(gate("go"), "")?;
                while !gate("done").exists() && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                // `touch done` is the command's last step; let the shell exit.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let down_at = tokio::time::Instant::now();
                plane.stop().await?;
                signal("CONT", pid)?;
                tokio::time::sleep(downtime).await;
                plane.spawn().await?;
                outage(point, down_at);
            }
        }
    }
    Ok((problems, missed))
}

/// Says how long the API server was unreachable (SIGTERM to ready again).
fn outage(point: Point, since: tokio::time::Instant) {
    eprintln!(
        "flux-chaos: restart {}: API server down {:.1}s",
        point.name(),
        since.elapsed().as_secs_f64()
    );
}

/// Sends `kill -<sig>` to `pid`.
fn signal(sig: &str, pid: u32) -> anyhow::Result<()> {
    let st = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()?;
    if !st.success() {
        bail!("kill -{sig} {pid} failed: {st}");
    }
    Ok(())
}

/// A control plane of this scenario's own, restartable on the same ports and data.
struct Plane {
    launcher: PathBuf,
    crds: PathBuf,
    state: PathBuf,
    port: u16,
    etcd_port: u16,
    child: Option<std::process::Child>,
    kubeconfig: PathBuf,
    /// The kubeconfig's text after the first start: every restart must serve the same.
    first: String,
}

impl Plane {
    async fn start(launcher: &Path, crds: &Path, state: &Path) -> anyhow::Result<Self> {
        if state.exists() {
            std::fs::remove_dir_all(state)?;
        }
        std::fs::create_dir_all(state)?;
        let mut p = Self {
            launcher: launcher.to_path_buf(),
            crds: crds.to_path_buf(),
            state: state.to_path_buf(),
            port: free_port()?,
            etcd_port: free_port()?,
            child: None,
            kubeconfig: PathBuf::new(),
            first: String::new(),
        };
        p.spawn().await?;
        p.first = std::fs::read_to_string(&p.kubeconfig)?;
        Ok(p)
    }

    fn token(&self) -> anyhow::Result<String> {
        Ok(std::fs::read_to_string(
            self.state.join("envtest/admin.token"),
        )?)
    }

    async fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::try_from(
            testkit::config_from(&self.kubeconfig).await?,
        )?)
    }

    /// Starts the launcher and waits for its ready line.
    async fn spawn(&mut self) -> anyhow::Result<()> {
        let out = self.state.join("stdout");
        let child = std::process::Command::new(&self.launcher)
            .arg("--dir")
            .arg(self.state.join("envtest"))
            .arg("--crds")
            .arg(&self.crds)
            .args(["--port", &self.port.to_string()])
            .args(["--etcd-port", &self.etcd_port.to_string()])
            .arg("--exit-on-stdin-eof")
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(&out)?)
            .stderr(std::fs::File::create(self.state.join("log"))?)
            .spawn()
            .context("cannot start the launcher")?;
        let child = self.child.insert(child);
        let deadline = tokio::time::Instant::now() + Duration::from_mins(2);
        loop {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.starts_with("ready ")) {
                let path = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("kubeconfig="))
                    .context("no kubeconfig= in the ready line")?;
                self.kubeconfig = PathBuf::from(path);
                if !self.first.is_empty() && std::fs::read_to_string(path)? != self.first {
                    bail!("the restarted control plane serves another kubeconfig");
                }
                return Ok(());
            }
            if let Some(st) = child.try_wait()? {
                bail!("the launcher exited ({st}) before it was ready");
            }
            if tokio::time::Instant::now() > deadline {
                bail!("the launcher was not ready within 2 minutes");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, then waits for the exit. The API server drains gracefully but keeps the
    /// process up while watches stay open, so after 1 s a second SIGTERM makes it exit at once
    /// (main.go: "a second one exits the process at once"), as a restart that stops waiting
    /// for its clients does; SIGKILL after 30 s.
    async fn stop(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let start = tokio::time::Instant::now();
        let mut terms = 0;
        while child.try_wait()?.is_none() {
            let waited = start.elapsed();
            if terms == 0 || (terms == 1 && waited > Duration::from_secs(1)) {
                signal("TERM", child.id())?;
                terms += 1;
            }
            if waited > Duration::from_secs(30) {
                child.kill()?;
                child.wait()?;
                bail!("the control plane ignored SIGTERM twice for 30 s; killed");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    async fn restart(&mut self, downtime: Duration) -> anyhow::Result<()> {
        self.stop().await?;
        tokio::time::sleep(downtime).await;
        self.spawn().await
    }
}

impl Drop for Plane {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Closing its stdin makes the launcher shut down; SIGTERM says it at once.
            drop(child.stdin.take());
            let _ = signal("TERM", child.id());
            let _ = child.wait();
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// What `Cell` is, on the restartable plane: a seeded namespace, its model and a config file.
struct Mini {
    client: Client,
    ns: String,
    model: ModelHandle,
    dir: PathBuf,
    config: PathBuf,
    kubeconfig: PathBuf,
    bin: PathBuf,
}

impl Mini {
    async fn new(s: &Settings, plane: &Plane, client: &Client) -> anyhow::Result<Self> {
        let ns = format!("chaos-restart-{}", testkit::random_suffix(6));
        let meta = ObjectMeta {
            name: Some(ns.clone()),
            ..ObjectMeta::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: meta,
                    ..Namespace::default()
                },
            )
            .await?;
        let tree = seed_tree(client, &ns).await?;
        let model = FluxModel::start(client.clone(), tree.model_config());
        for name in [PARENT, TARGET, "apps"] {
            model.wait_settled(name, 0).await?;
        }
        let dir = s.scratch.join(&ns);
        std::fs::create_dir_all(&dir)?;
        let config = dir.join("flux-handoff.toml");
        std::fs::write(
            &config,
            format!(
                "[lease]\nnamespace = \"{ns}\"\nname = \"{LEASE}\"\nduration = \"{d}s\"\n\n\
                 [controller]\nnamespace = \"{ns}\"\nname = \"kustomize-controller\"\n",
                d = s.lease_seconds
            ),
        )?;
        Ok(Self {
            client: client.clone(),
            ns,
            model,
            dir,
            config,
            kubeconfig: plane.kubeconfig.clone(),
            bin: s.bin.clone(),
        })
    }

    fn cli(&self, kubeconfig: &Path) -> Command {
        let mut c = Command::new(&self.bin);
        c.env_remove("GITHUB_ACTIONS")
            .env_remove("FLUX_HANDOFF_CONFIG")
            .env_remove("FLUX_HANDOFF_HOLDER")
            .env_remove("KUBECONFIG")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--config")
            .arg(&self.config)
            .args(["--namespace", &self.ns, "--interval", "200ms"])
            .args(["--timeout", "30s"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }

    async fn direct(&self, args: &[&str]) -> anyhow::Result<(i32, String, String)> {
        let out = self.cli(&self.kubeconfig).args(args).output().await?;
        Ok(outputs(&out))
    }

    async fn fences(&self) -> anyhow::Result<Value> {
        let (code, out, err) = self.direct(&["fences", "--output", "json"]).await?;
        if code != 0 {
            bail!("fences exited {code}: {}", err.trim());
        }
        let doc: Value = serde_json::from_str(out.trim()).context("fences output")?;
        Ok(doc["facts"].clone())
    }

    async fn get(&self, name: &str) -> anyhow::Result<Value> {
        Ok(flux_suspend::object::get_json(
            &self.client,
            &flux_suspend::object::kustomization(&self.ns, name),
        )
        .await?)
    }

    /// The target carries a fence (polled while the server is up).
    async fn target_fenced(&self) -> anyhow::Result<bool> {
        let o = self.get(TARGET).await?;
        Ok(o.pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .is_some_and(|m| m.keys().any(|k| k.ends_with("/owner"))))
    }

    async fn state(&self) -> anyhow::Result<State> {
        let mut objects = BTreeMap::new();
        for name in [PARENT, TARGET] {
            let o = self.get(name).await?;
            let annotations = o
                .pointer("/metadata/annotations")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            let spec = o.get("spec").cloned().unwrap_or(Value::Null);
            objects.insert(name.to_string(), Obj { spec, annotations });
        }
        let lease_holder = Api::<Lease>::namespaced(self.client.clone(), &self.ns)
            .get_opt(LEASE)
            .await?
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty());
        Ok(State {
            objects,
            lease_holder,
        })
    }

    /// `crash::check_and_recover` against this plane: every fence and a held Lease listed;
    /// after the Lease expired, `fences recover` restores the pre-run state.
    async fn check_and_recover(
        &self,
        before: &State,
        base: &Baseline,
    ) -> anyhow::Result<Vec<Finding>> {
        let mut problems = Vec::new();
        let left = self.state().await?;
        let report = self.fences().await?;
        let shown = listed(&report);
        for name in left.fenced() {
            if !shown.contains(&name) {
                problems.push(Finding::new(
                    Kind::LeakedFence,
                    format!("fence on {name} not listed by fences"),
                ));
            }
        }
        if let Some(h) = &left.lease_holder
            && report["lease"]["holder"].as_str() != Some(h)
        {
            problems.push(Finding::new(
                Kind::LeakedFence,
                format!("Lease held by {h} not shown by fences"),
            ));
        }
        let deadline = tokio::time::Instant::now() + Duration::from_mins(1);
        loop {
            let lease = &self.fences().await?["lease"];
            if lease["exists"] == Value::Bool(false)
                || lease["holder"].is_null()
                || lease["expired"] == Value::Bool(true)
            {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                bail!("the Lease did not expire within a minute");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let (code, _, err) = self
            .direct(&["fences", "recover", "--yes", "--include-paused"])
            .await?;
        if code != 0 {
            problems.push(Finding::new(
                Kind::LeakedFence,
                format!("fences recover exited {code}: {}", err.trim()),
            ));
        }
        for d in self.state().await?.diff(before, &base.allowed) {
            problems.push(Finding::new(
                Kind::UnexpectedChange,
                format!("after recovery: {d}"),
            ));
        }
        Ok(problems)
    }

    /// The model still watches after the restart: a `requestedAt` written through the
    /// restarted server is reconciled.
    async fn model_alive(&self) -> Vec<Finding> {
        let mark = self.model.mark();
        let api = flux_suspend::object::api(
            &self.client,
            &flux_suspend::object::kustomization(&self.ns, "apps"),
        );
        let patch = json!({ "metadata": { "annotations": {
            "reconcile.fluxcd.io/requestedAt": format!("restart-check-{mark}") } } });
        let res = match api
            .patch("apps", &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => self.model.wait_finished("apps", mark).await.map(|_| ()),
            Err(e) => Err(e.into()),
        };
        res.err()
            .map(|e| {
                Finding::new(
                    Kind::Other,
                    format!("the controller model did not reconcile after the restart: {e:#}"),
                )
            })
            .into_iter()
            .collect()
    }
}
