//! One seed played: a fresh cell, its history recorded, the plan's actors started and its
//! faults injected at their offsets, then what is left recovered.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::Value;
use tokio::sync::watch;

use super::checker::{Event, Outcome};
use super::history::{Recorder, WORK};
use super::poll::poll;
use super::schedule::{Actor, Fault, Plan, Role};
use super::work;
use crate::chaos::cell::{Cell, PARENT, TARGET};
use crate::chaos::{Settings, finish, last_line};

/// Debian's libfaketime (`cargo xtask ci` installs it).
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
/// Bound on one CLI process.
const BOUND: Duration = Duration::from_secs(150);
/// How long a queued run waits for the Lease.
const WAIT_LEASE: &str = "30s";

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

/// Plays `plan` in a fresh cell.
pub async fn play(s: &Settings, plan: &Plan) -> anyhow::Result<Played> {
    let cell = Arc::new(Cell::new(s, "nem").await?);
    let before = cell.state().await?;
    let cm: ConfigMap =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": WORK } }))?;
    Api::<ConfigMap>::namespaced(cell.client.clone(), &cell.namespace)
        .create(&PostParams::default(), &cm)
        .await?;
    let recorder = Recorder::start(&cell.client, &cell.namespace, &[PARENT, TARGET]).await?;
    let kubeconfig = cell.dir.join("kubeconfig-nemesis");
    cell.proxy.write_kubeconfig(&kubeconfig)?;
    let live = Arc::new(Live::default());
    let mut outcomes = Vec::new();
    let mut processes = 0;
    let first = plan
        .actors
        .iter()
        .position(|a| a.role != Role::Rogue)
        .unwrap_or(0);
    if plan.actors.iter().any(|a| a.role == Role::Rogue) {
        // The mutant: a work write naming a holder whose fences are not in place.
        let h = holder(plan.seed, first);
        work::write(&cell.client, &cell.namespace, &h, 1).await?;
        outcomes.push(Outcome {
            holder: h,
            verb: "rogue",
            code: Some(0),
            killed: false,
            last: String::new(),
        });
    }
    let (done_tx, done) = watch::channel(false);
    let mut faults = Vec::new();
    for t in plan.faults.clone() {
        let (cell, live, done) = (cell.clone(), live.clone(), done.clone());
        faults.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(t.at_ms)).await;
            inject(&cell, &live, &t.fault, done)
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
        actors.push(tokio::spawn(async move { act(&cell, &live, &a, &h).await }));
    }
    for a in actors {
        let (o, n) = a.await??;
        outcomes.extend(o);
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
    let history = recorder.events();
    drop(recorder);
    let (unrecovered, recovered) = recover(&cell, &before).await?;
    if let Ok(cell) = Arc::try_unwrap(cell) {
        cell.shutdown().await;
    }
    Ok(Played {
        history,
        outcomes,
        fired,
        processes: processes + usize::from(recovered),
        unrecovered,
    })
}

/// Runs one actor; its outcomes and how many `flux-handoff` processes it started.
async fn act(
    cell: &Cell,
    live: &Live,
    a: &Actor,
    h: &str,
) -> anyhow::Result<(Vec<Outcome>, usize)> {
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
            (vec![watched(live, c, h, "run").await?], 1)
        }
        Role::PauseResume { hold_ms } => {
            let mut c = cell.cli(&kubeconfig);
            c.arg("pause").args(base);
            let paused = watched(live, c, h, "pause").await?;
            if paused.code != Some(0) {
                return Ok((vec![paused], 1));
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
            (vec![paused, resumed], 2)
        }
        Role::Janitor => {
            let mut c = cell.cli(&cell.direct);
            c.args(["fences", "recover", "--yes"]);
            (vec![watched(live, c, "", "recover").await?], 1)
        }
        Role::Rogue => (Vec::new(), 0),
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
async fn inject(cell: &Cell, live: &Live, fault: &Fault, mut done: watch::Receiver<bool>) -> bool {
    let count = |request: &str| cell.proxy.counts().get(request).copied().unwrap_or(0);
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
                if !signal("STOP", pid) {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                signal("CONT", pid);
                true
            } else {
                lock(&live.killed).insert(h.clone());
                let sent = signal("KILL", pid);
                if !sent {
                    lock(&live.killed).remove(&h);
                }
                sent
            }
        }
        Fault::FluxResume { .. } | Fault::OperatorResume { .. } | Fault::LeaseEdit { .. } => {
            super::person::edit(cell, fault, until_done).await
        }
    }
}

/// `spec` with `suspend: false` dropped: a removed pause (Flux Operator's resume, kept by the
/// release) is the same spec as one set back to false.
fn unpaused(spec: &Value) -> Value {
    let mut s = spec.clone();
    if s.get("suspend") == Some(&Value::Bool(false))
        && let Some(m) = s.as_object_mut()
    {
        m.remove("suspend");
    }
    s
}

/// Sends signal `name` to `pid`; whether it was delivered (the process may just have exited).
fn signal(name: &str, pid: u32) -> bool {
    std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// After the seed: what is left is recovered (`fences recover --yes --include-paused`);
/// anything still fenced or held, or a spec not as before, is returned, and whether the
/// recovery had to run.
async fn recover(
    cell: &Cell,
    before: &crate::chaos::cell::State,
) -> anyhow::Result<(Vec<String>, bool)> {
    let mut after = cell.state().await?;
    let mut recovery = None;
    if !after.fenced().is_empty() || after.lease_holder.is_some() {
        // No wait for `fences` to call the Lease expired: that reads the holder's renewTime,
        // two minutes ahead after a skewed run. Recovery watches the Lease for a duration on its
        // own monotonic clock.
        let (code, _, err) = cell
            .direct(&["fences", "recover", "--yes", "--include-paused"])
            .await?;
        recovery = Some((code, err));
        after = cell.state().await?;
    }
    let mut left: Vec<String> = after
        .fenced()
        .into_iter()
        .map(|n| format!("{n} still fenced"))
        .collect();
    left.extend(
        after
            .lease_holder
            .map(|h| format!("Lease still held by {h}")),
    );
    left.extend(
        after
            .objects
            .iter()
            .filter(|(n, o)| {
                before
                    .objects
                    .get(*n)
                    .is_some_and(|b| unpaused(&b.spec) != unpaused(&o.spec))
            })
            .map(|(n, _)| format!("{n}: spec not as before")),
    );
    let ran = recovery.is_some();
    if let Some((code, err)) = recovery
        && code != 0
        && !left.is_empty()
    {
        left.push(format!("fences recover exited {code}: {}", last_line(&err)));
    }
    Ok((left, ran))
}
