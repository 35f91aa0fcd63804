//! restart: stop and start the API server mid-run, on the same etcd data, at four points of a
//! `run`: between the parent's fence and the target's (parent acknowledgement), during the proof
//! (both fences written), during the command, and while the release (resume) begins. The run
//! must complete (exit 0, cluster as before) or fail closed (a documented exit code, one
//! `error:` line, every fence and a held Lease listed by `fences`, and `fences recover`
//! restoring the pre-run state). The in-process controller model must reconnect: after each
//! point it must reconcile an object changed through the restarted server.
//!
//! This scenario runs a control plane of its own (`Settings.launcher`, the envtest binary) with
//! fixed ports, so a restart serves the same CA, token, data and address; the shared chaos plane
//! other scenarios use is never stopped.
//!
//! Windows: "ack" stops the server as soon as the parent's fence is seen on the server, "proof"
//! as soon as the target's is (`window_missed=` counts points where the target was already
//! fenced, or the command had already started, when the server stopped); "command" stops it
//! while the command (gated on a file) runs; "resume" SIGSTOPs the CLI while its command
//! runs, lets the command exit, stops the server, then SIGCONTs the CLI, so the release starts
//! against a server that is down (deterministic, not timing-based).

pub(crate) mod mini;
pub(crate) mod plane;

use std::time::Duration;

use anyhow::Context;
use kube::Client;

use super::cell::{PARENT, TARGET};
use super::crash::{check_and_recover, unchanged_after_success};
use super::discover::Baseline;
use super::{Finding, Kind, Settings, Tally, error_line_problem, finish, last_line};
use mini::Mini;
use plane::{Plane, signal};

/// How long the server stays down between stop and start (on top of the stop and the start,
/// ~1-3 s each), per round: the full run's later rounds outlast the 4 s Lease.
const DOWNTIME_MS: [u64; 3] = [0, 1_000, 2_500];
/// Exit codes a run may fail closed with here: refused (exit 3 promises nothing was changed,
/// checked below), timeout, Kubernetes API error (also a Lease not renewed within its duration
/// while the server was down), cleanup failed.
const CLOSED_CODES: [i32; 4] = [3, 4, 6, 7];

/// Where in the run the server restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    Ack,
    Proof,
    Command,
    Resume,
    /// As `Resume`, down longer than the release's read budget: the run must fail closed.
    ResumeBeyondBudget,
}

impl Point {
    fn name(self) -> &'static str {
        match self {
            Point::Ack => "ack",
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
        for point in [Point::Ack, Point::Proof, Point::Command, Point::Resume] {
            plan.push((
                point,
                downtime,
                format!("restart {} #{round}", point.name()),
            ));
        }
    }
    // Once per run: down longer than the read budget, so the release cannot wait it out.
    let long = flux_fence::api::READ_RETRY_BUDGET + Duration::from_secs(5);
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
            "chaos: restart restarts={restarts} completed={completed} failed_closed={closed} violations={bad} window_missed={missed}"
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
    let since = cell.version().await?;
    let gate = |f: &str| cell.dir.join(f);
    let script = format!(
        "touch {s}; while [ ! -e {g} ]; do sleep 0.1; done; touch {d}",
        s = gate("started").display(),
        g = gate("go").display(),
        d = gate("done").display()
    );
    if matches!(point, Point::Ack | Point::Proof) {
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
    if code == 0 {
        problems.extend(unchanged_after_success(&cell, &before, base).await?);
    } else {
        if !CLOSED_CODES.contains(&code) {
            problems.push(Finding::new(
                Kind::Other,
                format!("exit code {code} is not a fail-closed code 3, 4, 6 or 7"),
            ));
        }
        if let Some(p) = error_line_problem(&err) {
            problems.push(Finding::new(Kind::Other, p));
        }
        eprintln!(
            "flux-chaos: restart {}: failed with {code}: {}",
            point.name(),
            last_line(&err)
        );
        if code == 3 {
            // "refused: nothing was changed": no fence may be left and spec and annotations
            // must be as before (a lost Lease the CLI could not clear is checked as listed).
            let left = cell.state().await?;
            for d in left.diff(&before, &base.allowed) {
                if !d.starts_with("lease held by") {
                    problems.push(Finding::new(
                        Kind::UnexpectedChange,
                        format!("exit 3 (nothing changed) but {d}"),
                    ));
                }
            }
        }
        problems.extend(check_and_recover(&cell, &before, base).await?);
    }
    problems.extend(cell.model_alive().await);
    problems.extend(cell.watch_resumes(&since).await);
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
        Point::Ack | Point::Proof => loop {
            let watched = if point == Point::Ack { PARENT } else { TARGET };
            if cell.fenced(watched).await? {
                missed = point == Point::Ack && cell.fenced(TARGET).await?;
                let down_at = tokio::time::Instant::now();
                plane.stop().await?;
                missed |= gate("started").exists();
                tokio::time::sleep(downtime).await;
                plane.spawn().await?;
                outage(point, down_at);
                break;
            }
            if exited(child)? || tokio::time::Instant::now() > deadline {
                problems.push(Finding::new(
                    Kind::Other,
                    format!("the run ended before the fence on {watched} was seen; no restart"),
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
