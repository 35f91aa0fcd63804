//! One seed played: a fresh stage on the campaign's restartable control plane, its history
//! recorded, the plan's actors started and its faults injected at their offsets, then what is
//! left recovered.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use super::checker::{Event, Outcome};
use super::deploys::{self, Deploy, Ended};
use super::history::{Recorder, WORK};
use super::poll::poll;
use super::schedule::{Actor, Fault, Plan, Role};
use super::work;
use crate::chaos::cell::{PARENT, Site, TARGET};
use crate::chaos::restart::mini::Mini;
use crate::chaos::restart::plane::{Plane, signal};
use crate::chaos::soak::job;
use crate::chaos::soak::schedule::Job;
use crate::chaos::{Settings, finish, last_line};

/// Debian's libfaketime (`cargo xtask ci` installs it).
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
/// Bound on one CLI process.
const BOUND: Duration = Duration::from_secs(150);
/// How long a queued run waits for the Lease.
const WAIT_LEASE: &str = "30s";

/// What every seed shares: the campaign's control plane (restartable: same address, CA and
/// data) and the repository's `action/` directory.
pub struct Env {
    pub plane: Arc<tokio::sync::Mutex<Plane>>,
    pub client: kube::Client,
    pub action: PathBuf,
}

/// One seed's stage: a fresh seeded namespace with its controller model and [`Site`] (through
/// `Deref`), a fault proxy of its own, and the campaign's plane.
struct Stage {
    mini: Mini,
    proxy: fault_proxy::Proxy,
    plane: Arc<tokio::sync::Mutex<Plane>>,
    action: PathBuf,
    handoff_bin: PathBuf,
    seed: u64,
    /// The stand-in GitHub API the seed's Action jobs ask (`recover-finished-runs`): a
    /// preempted job's run is `completed`, so the next jobs may recover what it left.
    github: Arc<testkit::github_stub::GithubStub>,
}

impl std::ops::Deref for Stage {
    type Target = Site;

    fn deref(&self) -> &Site {
        &self.mini
    }
}

/// What one seed left to judge.
#[derive(Debug)]
pub struct Played {
    pub history: Vec<Event>,
    pub outcomes: Vec<Outcome>,
    /// The kinds of the faults that were injected (a fault whose moment never came is not).
    pub fired: Vec<&'static str>,
    /// `flux-handoff` processes started.
    pub processes: usize,
    /// What the recovery at the end could not restore.
    pub unrecovered: Vec<String>,
    /// Each deploy that did not deploy, by holder, as the liveness checker judged it.
    pub liveness: Vec<(String, Result<crate::chaos::liveness::Warranted, String>)>,
}

/// The processes of live holders, and which holders were killed with SIGKILL.
#[derive(Debug, Default)]
struct Live {
    running: Mutex<Vec<(String, u32)>>,
    killed: Mutex<BTreeSet<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The holder name of actor `i` of `seed`.
#[must_use]
pub fn holder(seed: u64, i: usize) -> String {
    format!("nem{seed}-a{i}")
}

/// Plays `plan` on a fresh stage.
pub async fn play(s: &Settings, env: &Env, plan: &Plan) -> anyhow::Result<Played> {
    let mini = {
        let plane = env.plane.lock().await;
        Mini::named(s, &plane, &env.client, "nem").await?
    };
    let cell = Arc::new(Stage {
        mini,
        proxy: fault_proxy::Proxy::start().await?,
        plane: env.plane.clone(),
        action: env.action.clone(),
        handoff_bin: s.bin.clone(),
        seed: plan.seed,
        github: Arc::new(testkit::github_stub::GithubStub::start().await?),
    });
    let before = cell.state().await?;
    let cm: ConfigMap =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": WORK } }))?;
    Api::<ConfigMap>::namespaced(cell.client.clone(), &cell.namespace)
        .create(&PostParams::default(), &cm)
        .await?;
    let recorder = Recorder::start(&cell.client, &cell.namespace, &[PARENT, TARGET]).await?;
    let origin = Instant::now();
    let kubeconfig = cell.dir.join("kubeconfig-nemesis");
    cell.proxy.write_kubeconfig(&kubeconfig)?;
    let live = Arc::new(Live::default());
    let mut outcomes: Vec<Outcome> = rogue(&cell, plan).await?.into_iter().collect();
    let mut processes = 0;
    let (done_tx, done) = watch::channel(false);
    let mut faults = Vec::new();
    let recorder = Arc::new(recorder);
    for t in plan.faults.clone() {
        let (cell, live, done, recorder) =
            (cell.clone(), live.clone(), done.clone(), recorder.clone());
        faults.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(t.at_ms)).await;
            inject(&cell, &live, &recorder, &t.fault, done)
                .await
                .then(|| t.fault.kind())
        }));
    }
    let mut actors = Vec::new();
    for (i, a) in plan.actors.iter().enumerate() {
        if a.role == Role::Rogue {
            continue;
        }
        let (cell, live, a) = (cell.clone(), live.clone(), a.clone());
        let h = holder(plan.seed, i);
        actors.push(tokio::spawn(
            async move { act(&cell, &live, &a, i, &h).await },
        ));
    }
    let mut deploys = Vec::new();
    for a in actors {
        let (out, n, deploy) = a.await??;
        outcomes.extend(out);
        deploys.extend(deploy);
        processes += n;
    }
    done_tx.send_replace(true);
    let mut fired = Vec::new();
    for f in faults {
        fired.extend(f.await?);
    }
    if plan.actors.iter().any(|a| a.skewed) {
        fired.push("clock_skew");
    }
    recorder
        .catch_up(&cell.client, &cell.namespace, &[PARENT, TARGET])
        .await?;
    let (history, lease) = (recorder.events(), recorder.leases(origin));
    drop(recorder);
    let budget = crate::chaos::liveness::budget_ms(WAIT_LEASE);
    let liveness = deploys::judge(&deploys, &history, &lease, origin, budget, &fired);
    let (unrecovered, recovered) = cell.recover_rest(Some(&before)).await?;
    if let Ok(cell) = Arc::try_unwrap(cell) {
        cell.mini.model.shutdown().await;
    }
    Ok(Played {
        history,
        outcomes,
        fired,
        processes: processes + usize::from(recovered),
        unrecovered,
        liveness,
    })
}

/// The mutant, when the plan has it: a work write naming the first actor's holder, whose
/// fences are not in place.
async fn rogue(cell: &Stage, plan: &Plan) -> anyhow::Result<Option<Outcome>> {
    if !plan.actors.iter().any(|a| a.role == Role::Rogue) {
        return Ok(None);
    }
    let first = plan
        .actors
        .iter()
        .position(|a| a.role != Role::Rogue)
        .unwrap_or(0);
    let h = holder(plan.seed, first);
    work::write(&cell.client, &cell.namespace, &h, 1).await?;
    Ok(Some(Outcome {
        holder: h,
        verb: "rogue",
        code: Some(0),
        killed: false,
        last: String::new(),
    }))
}

/// Runs actor `index`; its outcomes, how many `flux-handoff` processes it started, and the
/// deploy it made (a `run` or an Action job).
async fn act(
    cell: &Stage,
    live: &Live,
    a: &Actor,
    index: usize,
    h: &str,
) -> anyhow::Result<(Vec<Outcome>, usize, Option<Deploy>)> {
    tokio::time::sleep(Duration::from_millis(a.at_ms)).await;
    let kubeconfig = cell.dir.join("kubeconfig-nemesis");
    let exe = std::env::current_exe()?;
    let writes = a.writes.to_string();
    let base = [
        "--target",
        TARGET,
        "--holder",
        h,
        "--wait-lease",
        WAIT_LEASE,
    ];
    Ok(match &a.role {
        Role::Run => {
            let mut c = cell.cli(&kubeconfig);
            c.arg("run").args(base).args(["--grace", "1s", "--"]);
            c.arg(&exe)
                .args([work::SUBCOMMAND, &cell.namespace, &writes]);
            if a.skewed {
                // Wall clock only: every bound runs on the monotonic clock.
                c.env("LD_PRELOAD", FAKETIME)
                    .env("FAKETIME", "+2m")
                    .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
            }
            let started = Instant::now();
            let out = watched(live, c, h, "run").await?;
            let deploy = Deploy {
                holder: h.to_string(),
                started,
                left: Instant::now(),
                cancelled: false,
                killed: out.killed,
                ended: Ended::Writes(a.writes),
            };
            (vec![out], 1, Some(deploy))
        }
        Role::PauseResume { hold_ms } => {
            let mut c = cell.cli(&kubeconfig);
            c.arg("pause").args(base);
            let paused = watched(live, c, h, "pause").await?;
            if paused.code != Some(0) {
                return Ok((vec![paused], 1, None));
            }
            // The person's deploy between pause and resume.
            let mut w = tokio::process::Command::new(&exe);
            w.args([work::SUBCOMMAND, &cell.namespace, &writes])
                .env("FLUX_HANDOFF_HOLDER", h)
                .kill_on_drop(true);
            let _ = tokio::time::timeout(BOUND, w.output()).await;
            tokio::time::sleep(Duration::from_millis(*hold_ms)).await;
            let mut c = cell.cli(&kubeconfig);
            c.args(["resume", "--holder", h]);
            let resumed = watched(live, c, h, "resume").await?;
            (vec![paused, resumed], 2, None)
        }
        Role::Action { cancel_ms, fails } => {
            // The Action names its own holder (from the run id); the runner's cancel sequence
            // ends it, not the nemesis's signals, so it is no victim.
            let ctx = job::Ctx {
                action: cell.action.clone(),
                handoff_bin: cell.handoff_bin.clone(),
                kubeconfig,
                direct: cell.direct.clone(),
                config: cell.config.clone(),
                namespace: cell.namespace.clone(),
                dir: cell.dir.join("jobs"),
                seed: cell.seed,
                wait_lease: WAIT_LEASE,
                github: Some(cell.github.clone()),
            };
            let j = Job {
                index,
                at_ms: 0,
                writes: a.writes,
                fails: *fails,
                cancel_ms: *cancel_ms,
                preempt_ms: super::schedule::preempt_of(cell.seed, index, *cancel_ms),
                extra: crate::chaos::soak::schedule::Extra::None,
            };
            let ran = job::run(&ctx, &j).await?;
            let steps = crate::chaos::soak::group::outcomes(&ran);
            let deploy = Deploy {
                holder: ran.holder.clone(),
                started: ran.main_span.0,
                left: ran.main_span.1,
                cancelled: ran.cancel.is_some(),
                // A preempted runner: every process of the job killed at once, no post step.
                killed: ran.preempted,
                ended: Ended::Script(ran.command.map(|c| c.0)),
            };
            (steps.into(), 2, Some(deploy))
        }
        Role::Janitor => {
            let mut c = cell.cli(&cell.direct);
            c.args(["fences", "recover", "--yes"]);
            (vec![watched(live, c, "", "recover").await?], 1, None)
        }
        Role::Rogue => (Vec::new(), 0, None),
    })
}

/// Starts `c`, lists it as a live holder while it runs (a janitor is never a victim), and
/// waits for it.
async fn watched(
    live: &Live,
    mut c: tokio::process::Command,
    h: &str,
    verb: &'static str,
) -> anyhow::Result<Outcome> {
    // A run still going at the bound (a holder stopped and never continued) is killed with
    // the wait that gave up on it, never left to outlive its seed.
    let child = c.kill_on_drop(true).spawn()?;
    let pid = child.id().unwrap_or_default();
    if !h.is_empty() {
        lock(&live.running).push((h.to_string(), pid));
    }
    let r = finish(child, BOUND).await;
    lock(&live.running).retain(|(_, p)| *p != pid);
    let (code, last) = match r {
        Ok((code, _, err)) => (Some(code), last_line(&err).to_string()),
        Err(e) => (None, e.to_string()),
    };
    Ok(Outcome {
        holder: h.to_string(),
        verb,
        code,
        killed: lock(&live.killed).contains(h),
        last,
    })
}

/// Injects `fault` now (or when its moment comes, until `done`); whether it was injected.
async fn inject(
    cell: &Stage,
    live: &Live,
    recorder: &Recorder,
    fault: &Fault,
    mut done: watch::Receiver<bool>,
) -> bool {
    let count = |request: &str| cell.proxy.counts().get(request).copied().unwrap_or(0);
    let finished = *done.borrow();
    let until_done = async move {
        let _ = done.wait_for(|d| *d).await;
    };
    match fault {
        Fault::Hang { request, nth } | Fault::Reset { request, nth } => {
            let at = count(request) + nth;
            let f = if fault.kind() == "hang" {
                fault_proxy::Fault::Hang
            } else {
                fault_proxy::Fault::Reset
            };
            cell.proxy.arm_on(request, at, f);
            until_done.await;
            count(request) >= at
        }
        Fault::Late {
            request,
            nth,
            after_ms,
        } => {
            let held = cell
                .proxy
                .hold_answering(request, count(request) + nth, 504);
            tokio::select! {
                () = held.arrived() => {}
                () = until_done => {}
            }
            if !held.has_arrived() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(*after_ms)).await;
            held.forward();
            true
        }
        Fault::Refuse { ms } => cell
            .proxy
            .refuse_for(Duration::from_millis(*ms))
            .await
            .is_ok(),
        Fault::Kill { victim } | Fault::Stop { victim, .. } => {
            let Some((h, pid)) = poll(until_done, || {
                let running = lock(&live.running);
                (!running.is_empty()).then(|| running[victim % running.len()].clone())
            })
            .await
            else {
                return false;
            };
            if let Fault::Stop { ms, .. } = fault {
                if signal("STOP", pid).is_err() {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                let _ = signal("CONT", pid);
                true
            } else {
                lock(&live.killed).insert(h.clone());
                let sent = signal("KILL", pid).is_ok();
                if !sent {
                    lock(&live.killed).remove(&h);
                }
                sent
            }
        }
        Fault::FluxResume { .. } | Fault::OperatorResume { .. } | Fault::LeaseEdit { .. } => {
            super::person::edit(cell, fault, until_done).await
        }
        Fault::Restart { down_ms } => {
            if finished {
                return false;
            }
            let mut plane = cell.plane.lock().await;
            // Everything so far is in the history before the server goes down (a restarted
            // server's watch cache starts at its current revision; the recorder lists again).
            let _ = recorder
                .catch_up(&cell.client, &cell.namespace, &[PARENT, TARGET])
                .await;
            if plane.stop().await.is_err() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(*down_ms)).await;
            // A server that does not come back ends the campaign at the next request; the
            // restart still happened.
            if let Err(e) = plane.spawn().await {
                eprintln!("nemesis: the API server did not come back: {e:#}");
            }
            true
        }
    }
}
