//! Scenario `real` (`flux-bench --real --real-state DIR`, run by `cargo xtask bench --real`):
//! time to a proven pause against the real controllers while an in-flight reconcile is stuck
//! in a 35 s health-check wait ([`story`]), per retirement and feature gate, and the `flux`
//! CLI's suspend + resume of the same chain for comparison.
//!
//! Cases, each on a fresh story with controllers of its own ([`procs`]):
//!
//! | case | story | `--retire` | controllers' args |
//! | --- | --- | --- | --- |
//! | `ks_ack` | Kustomization | ack | — |
//! | `ks_ack_gate` | Kustomization | ack | `--feature-gates=CancelHealthCheckOnNewRevision=true` |
//! | `ks_restart` | Kustomization | restart (kustomize-controller) | — |
//! | `ks_flux_cli` | Kustomization | `flux suspend` + `flux resume` | — |
//! | `hr_*` | `HelmRelease` | the same; restart restarts helm-controller | |
//!
//! Time to proven pause is `Handoff::pause` from its first request to `Proven`, as the CLI
//! runs it (Lease already held, `--interval 1s`); requests are the pause's, counted by a fresh
//! [`fault_proxy::Proxy`]. Each step's duration is kept (the acknowledgement waits show where
//! the time goes).

pub mod procs;
pub mod story;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flux_fence::{AnnotationKeys, Fencer};
use flux_suspend::handoff::Chain;
use flux_suspend::handoff::Handoff;
use flux_suspend::handoff::PauseOptions;
use flux_suspend::handoff::PauseOutcome;
use flux_suspend::io::{ControllerRef, Timing};
use flux_suspend::object::kustomization;
use flux_suspend::retire::Strategy;
use flux_suspend::steps::{Step, describe};
use serde::Serialize;
use serde_json::{Value, json};

use super::{ms, setup};
use fault_proxy::Proxy;
use procs::Controllers;
use story::{ChartRegistry, PARENT, Story};

/// The feature gate that cancels an in-flight health check on a new event.
pub const GATE_ARG: &str = "--feature-gates=CancelHealthCheckOnNewRevision=true";
/// The proof's interval in this scenario (the replay's; the CLI's default is 2 s).
pub const INTERVAL: Duration = Duration::from_secs(1);
/// The pause's budget (the CLI's default `--timeout`).
const BUDGET: Duration = Duration::from_mins(5);

/// How a case retires the in-flight reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// The handoff with this strategy, the gate on or off.
    Handoff { strategy: Strategy, gate: bool },
    /// `flux suspend` + `flux resume` (proves nothing).
    FluxCli,
}

/// One case.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub name: &'static str,
    pub story: Story,
    pub way: Way,
}

const fn case(name: &'static str, story: Story, way: Way) -> Case {
    Case { name, story, way }
}

const ACK: Way = Way::Handoff {
    strategy: Strategy::Ack,
    gate: false,
};
const ACK_GATE: Way = Way::Handoff {
    strategy: Strategy::Ack,
    gate: true,
};
const RESTART: Way = Way::Handoff {
    strategy: Strategy::Restart,
    gate: false,
};

/// Every case, in report order.
pub const CASES: [Case; 8] = [
    case("ks_ack", Story::Kustomization, ACK),
    case("ks_ack_gate", Story::Kustomization, ACK_GATE),
    case("ks_restart", Story::Kustomization, RESTART),
    case("ks_flux_cli", Story::Kustomization, Way::FluxCli),
    case("hr_ack", Story::HelmRelease, ACK),
    case("hr_ack_gate", Story::HelmRelease, ACK_GATE),
    case("hr_restart", Story::HelmRelease, RESTART),
    case("hr_flux_cli", Story::HelmRelease, Way::FluxCli),
];

/// One measured case.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub case: String,
    /// Milliseconds to the proven pause (or, for the flux CLI, of `flux suspend`).
    pub pause_ms: f64,
    pub requests: u64,
    /// Each step of the pause and its milliseconds (flux CLI: its commands).
    pub steps: Vec<(String, f64)>,
    /// `--retire restart`: ms from the stand-in seeing the restart to the old Pod gone, and of
    /// that, the old process's exit after SIGTERM.
    pub rollout_ms: Option<(f64, f64)>,
    /// Flux CLI only: `flux resume` ms.
    pub resume_ms: Option<f64>,
}

/// What the scenario needs beyond the admin client.
#[derive(Debug, Clone)]
pub struct RealSettings {
    /// The real-Flux plane's state directory (`<name>.bin`, `envtest/kubeconfig`).
    pub state: PathBuf,
    /// The `flux` CLI, for its cases (skipped in one line without it).
    pub flux_bin: Option<PathBuf>,
    /// Run only cases whose name contains one of these.
    pub only: Option<Vec<String>>,
}

/// Runs every case once; returns the table rows, the `bench:` lines and the JSON.
pub async fn scenario(
    admin: &kube::Client,
    real: &RealSettings,
    scratch: &Path,
) -> anyhow::Result<(Vec<String>, Vec<String>, Value)> {
    let mut chart = None;
    let mut runs = Vec::new();
    let mut lines = Vec::new();
    let mut table = Vec::new();
    for c in CASES {
        if real
            .only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|x| c.name.contains(x.as_str())))
        {
            continue;
        }
        if c.story == Story::HelmRelease && chart.is_none() {
            chart = Some(ChartRegistry::start().await.context("the chart registry")?);
        }
        eprintln!("flux-bench: real {}", c.name);
        let r = match c.way {
            Way::Handoff { strategy, gate } => {
                Box::pin(handoff_case(admin, real, c, strategy, gate, chart.as_ref())).await
            }
            Way::FluxCli => {
                let Some(bin) = &real.flux_bin else {
                    lines.push(format!("bench: real_{} skipped (no flux binary)", c.name));
                    continue;
                };
                Box::pin(flux_cli_case(admin, real, c, bin, scratch, chart.as_ref())).await
            }
        };
        let r = r.with_context(|| format!("case {}", c.name))?;
        let steps = r
            .steps
            .iter()
            .map(|(s, t)| format!("{s} {:.1}s", t / 1000.0))
            .collect::<Vec<_>>()
            .join("; ");
        table.push(format!(
            "| real {} | ms to proven pause (flux CLI: `flux suspend`) | {:.0} |",
            c.name, r.pause_ms
        ));
        table.push(format!(
            "| real {} | API requests | {} |",
            c.name, r.requests
        ));
        table.push(format!("| real {} | steps | {steps} |", c.name));
        let mut line = format!(
            "bench: real_{} pause_ms={:.0} requests={}",
            c.name, r.pause_ms, r.requests
        );
        if let Some(resume) = r.resume_ms {
            let _ = write!(line, " resume_ms={resume:.0} proves=nothing");
        }
        if let Some((rollout, exit)) = r.rollout_ms {
            let _ = write!(line, " rollout_ms={rollout:.0} old_exit_ms={exit:.0}");
        }
        lines.push(line);
        runs.push(r);
    }
    let v = json!({
        "interval_ms": ms(INTERVAL),
        "health_timeout": story::HEALTH_TIMEOUT,
        "note": "each case once, on a fresh story and controllers of its own (suites/bench/src/bench/real)",
        "runs": runs,
    });
    Ok((table, lines, v))
}

/// The extra args of a case's controllers.
fn args(gate: bool) -> Vec<String> {
    if gate {
        vec![GATE_ARG.to_string()]
    } else {
        Vec::new()
    }
}

/// Starts a case's controllers: with `restart`, the story's stuck controller behind the
/// rollout stand-in (Deployment `<controller>` in `ns`).
async fn controllers(
    admin: &kube::Client,
    real: &RealSettings,
    story: Story,
    ns: &str,
    restart: bool,
    extra: &[String],
) -> anyhow::Result<Controllers> {
    let stuck = story.stuck_controller();
    let plain: Vec<&str> = story
        .controllers()
        .iter()
        .copied()
        .filter(|c| !restart || *c != stuck)
        .collect();
    let mut cs = Controllers::start(&real.state, &plain, ns, extra).await?;
    if restart {
        cs.add_rollout(admin, &real.state, ns, stuck, ns, extra)
            .await?;
    }
    Ok(cs)
}

async fn handoff_case(
    admin: &kube::Client,
    real: &RealSettings,
    c: Case,
    strategy: Strategy,
    gate: bool,
    chart: Option<&ChartRegistry>,
) -> anyhow::Result<Run> {
    let ns = story::build(
        admin,
        c.story,
        &format!("rb-{}", c.name.replace('_', "-")),
        chart,
    )
    .await?;
    let restart = strategy == Strategy::Restart;
    let cs = controllers(admin, real, c.story, &ns, restart, &args(gate)).await?;
    let measured = async {
        story::await_stuck(admin, c.story, &ns).await?;
        let proxy = Proxy::start().await?;
        let client = proxy.client()?;
        let lease = setup::lease(&client, &ns).await?;
        let fencer = Fencer::new(client.clone(), AnnotationKeys::default(), lease.owner())
            .with_lease(lease.handle());
        let mut handoff = Handoff::new(client.clone(), fencer);
        let chains = [Chain::new(
            Some(kustomization(&ns, PARENT)),
            c.story.target(&ns),
        )];
        let opts = PauseOptions::new(strategy, Timing::new(INTERVAL, BUDGET))
            .with_controller(ControllerRef {
                namespace: ns.clone(),
                name: c.story.stuck_controller().into(),
            })
            .with_reason("flux-bench real");
        let mut marks: Vec<(Step, Instant)> = Vec::new();
        let before = proxy.total();
        let start = Instant::now();
        // Boxed: the pause's future is larger than clippy's large_futures bound.
        let outcome = Box::pin(handoff.pause(&chains, &opts, &mut |s| {
            marks.push((s, Instant::now()));
        }))
        .await;
        let end = Instant::now();
        let requests = proxy.total() - before;
        let resumed = Box::pin(handoff.resume(None)).await;
        let released = lease.release().await;
        match outcome.context("pausing")? {
            PauseOutcome::Proven(_) => {}
            PauseOutcome::Refused { object, why } => bail!("refused: {object}: {why}"),
            other => bail!("the pause was not proven: {other:?}"),
        }
        let _ = resumed.context("resuming")?;
        let _ = released.context("releasing the Lease")?;
        Ok::<_, anyhow::Error>(Run {
            case: c.name.into(),
            pause_ms: ms(end.duration_since(start)),
            requests,
            steps: step_times(&marks, start),
            rollout_ms: None,
            resume_ms: None,
        })
    }
    .await;
    let rollouts = cs.restarts().await;
    cs.stop().await;
    let mut run = measured?;
    run.rollout_ms = rollouts.first().map(|(a, b)| (ms(*a), ms(*b)));
    Ok(run)
}

/// Each step's duration: `Handoff::pause` reports a step when it is done, so from the previous
/// mark (the start for the first) to its own.
fn step_times(marks: &[(Step, Instant)], start: Instant) -> Vec<(String, f64)> {
    let mut prev = start;
    marks
        .iter()
        .map(|(s, at)| {
            let took = ms(at.duration_since(prev));
            prev = *at;
            (describe(*s).to_string(), took)
        })
        .collect()
}

async fn flux_cli_case(
    admin: &kube::Client,
    real: &RealSettings,
    c: Case,
    flux: &Path,
    scratch: &Path,
    chart: Option<&ChartRegistry>,
) -> anyhow::Result<Run> {
    let ns = story::build(
        admin,
        c.story,
        &format!("rb-{}", c.name.replace('_', "-")),
        chart,
    )
    .await?;
    let cs = controllers(admin, real, c.story, &ns, false, &[]).await?;
    let measured = async {
        story::await_stuck(admin, c.story, &ns).await?;
        let proxy = Proxy::start().await?;
        let dir = scratch.join(format!("flux-{ns}"));
        let cli = super::fluxcli::ProxiedCli::through(&proxy, flux, &dir, &ns).await?;
        let (kind, target) = match c.story {
            Story::Kustomization => ("kustomization", story::KS_TARGET),
            Story::HelmRelease => ("helmrelease", story::HR_TARGET),
        };
        let mut steps = Vec::new();
        let mut suspend = 0.0;
        for (k, n) in [("kustomization", PARENT), (kind, target)] {
            let t = cli.run(&["suspend", k, n]).await?;
            steps.push((format!("flux suspend {k} {n}"), t));
            suspend += t;
        }
        let mut resume = 0.0;
        // `--wait=false`: the story never becomes Ready, so a waiting resume would only time out.
        for (k, n) in [(kind, target), ("kustomization", PARENT)] {
            let t = cli.run(&["resume", k, n, "--wait=false"]).await?;
            steps.push((format!("flux resume {k} {n}"), t));
            resume += t;
        }
        cli.close();
        Ok::<_, anyhow::Error>(Run {
            case: c.name.into(),
            pause_ms: suspend,
            requests: proxy.total(),
            steps,
            rollout_ms: None,
            resume_ms: Some(resume),
        })
    }
    .await;
    cs.stop().await;
    measured
}
