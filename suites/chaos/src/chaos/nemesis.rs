//! The nemesis (issue 36): a randomized fault campaign judged by the API server's own order.
//!
//! The campaign runs on a control plane of its own (the restart scenario's [`Plane`]: fixed
//! ports and data, so a restart serves the same address). Per seed ([`schedule::plan`]): a
//! fresh seeded namespace with the controller model and a fault proxy, 2–4 actors (`run
//! --wait-lease` queued on one Lease, `pause` then `resume`, a deploy job through the GitHub
//! Action's main and post steps with the runner's cancel sequence, a `fences recover --yes`
//! janitor), 1–3 faults at random moments (hung requests, a write answered 504 and applied
//! later, resets, refused connects, API server restarts, SIGKILL, SIGSTOP/SIGCONT of a holder,
//! a person's `flux resume` or Flux Operator's, a shortened Lease) and sometimes a run whose
//! clock is two minutes ahead. Every run's command writes the work `ConfigMap` naming its holder
//! ([`work`]); [`history`] records every write of the chain, the Lease and the work; the pure
//! [`checker`] judges it (I1, I2), and the suite's leak scan looks for secrets (I3).
//!
//! Every deploy (a `run` actor, an Action job) that did not run its command to success is
//! classified from the history by the liveness checker ([`super::liveness`], through
//! [`deploys`]): warranted or unwarranted.
//!
//! The last line is `nemesis: seeds=N operations=N faults=N violations=N unwarranted=N`; each
//! violation and each unwarranted deploy is printed with its seed and the command that replays
//! it, a violation with the history around it.

pub mod checker;
pub mod deploys;
pub mod history;
mod person;
mod poll;
pub mod schedule;
pub mod seed;
pub mod work;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;

use super::Settings;
use super::cell::{PARENT, TARGET};
use super::restart::plane::Plane;

/// Which seeds, whether the rogue mutant plays, and where the campaign's control plane and
/// the Action live.
#[derive(Debug, Clone)]
pub struct Options {
    pub first: u64,
    pub seeds: u64,
    pub rogue: bool,
    /// The repository's `action/` directory (main.js, post.js).
    pub action: PathBuf,
    /// The control plane's state directory; its kubeconfig is `<dir>/envtest/kubeconfig`,
    /// which `FLUX_HANDOFF_KUBECONFIG` must name (the fault proxy and the work read it).
    pub plane_dir: PathBuf,
}

/// Starts the campaign's control plane; what every seed shares.
async fn stage(s: &Settings, o: &Options) -> anyhow::Result<seed::Env> {
    // The admin token every CLI run carries must never be printed either (`Plane::own`).
    let (plane, client) = Plane::own(s, &o.plane_dir, "nemesis").await?;
    Ok(seed::Env {
        plane: Arc::new(tokio::sync::Mutex::new(plane)),
        client,
        action: o.action.clone(),
    })
}

/// Runs the campaign; whether it found no violation.
pub async fn run(s: &Settings, o: &Options) -> anyhow::Result<bool> {
    let started = Instant::now();
    let env = stage(s, o).await?;
    let admin = env.client.clone();
    let mut faults: BTreeMap<&str, usize> = schedule::KINDS.iter().map(|k| (*k, 0)).collect();
    let mut exits: BTreeMap<String, usize> = BTreeMap::new();
    let (mut operations, mut violations, mut after_break) = (0, 0, 0);
    let mut liveness = super::liveness::Tally::default();
    for seed in o.first..o.first + o.seeds {
        let plan = schedule::plan(seed, o.rogue);
        let roles: Vec<String> = plan
            .actors
            .iter()
            .map(|a| {
                let skew = if a.skewed { " +2m" } else { "" };
                format!("{:?}@{}ms{skew}", a.role, a.at_ms)
            })
            .collect();
        let planned: Vec<String> = plan
            .faults
            .iter()
            .map(|t| format!("{}@{}ms", t.fault, t.at_ms))
            .collect();
        eprintln!("nemesis: seed {seed}: actors {roles:?} faults {planned:?}");
        let t0 = Instant::now();
        let played = seed::play(s, &env, &plan)
            .await
            .with_context(|| format!("nemesis seed {seed}"))?;
        let v = checker::check(&played.history, &[PARENT, TARGET], &played.outcomes);
        operations += played.processes + v.writes;
        after_break += v.after_break;
        for k in &played.fired {
            *faults.entry(k).or_default() += 1;
        }
        for out in &played.outcomes {
            let code = out.code.map_or_else(|| "none".into(), |c| c.to_string());
            *exits.entry(format!("{} {code}", out.verb)).or_default() += 1;
        }
        let exits_here: Vec<String> = played
            .outcomes
            .iter()
            .map(|x| {
                let code = x.code.map_or_else(|| "none".into(), |c| c.to_string());
                let killed = if x.killed { " killed" } else { "" };
                format!("{} {}:{code}{killed}", x.verb, x.holder)
            })
            .collect();
        eprintln!(
            "nemesis: seed {seed}: {:.1}s writes={} fired {:?} exits {exits_here:?} violations={}",
            t0.elapsed().as_secs_f64(),
            v.writes,
            played.fired,
            v.violations.len() + played.unrecovered.len(),
        );
        for x in &v.violations {
            violations += 1;
            eprintln!("nemesis: VIOLATION seed={seed} {}: {}", x.invariant, x.text);
            eprintln!("nemesis:   replay: {}", replay(seed, o.rogue));
            for line in checker::around(&played.history, x.rv, 12, 4) {
                eprintln!("nemesis:   {line}");
            }
        }
        unwarranted(&mut liveness, &played.liveness, seed, o.rogue);
        for u in &played.unrecovered {
            violations += 1;
            eprintln!("nemesis: VIOLATION seed={seed} I2: {u}");
            eprintln!("nemesis:   replay: {}", replay(seed, o.rogue));
        }
    }
    let leaks = super::leaks::scan(&admin).await?;
    for f in &leaks.findings {
        violations += 1;
        eprintln!("nemesis: VIOLATION I3: {}", f.text);
    }
    let by_kind: Vec<String> = faults.iter().map(|(k, n)| format!("{k}={n}")).collect();
    let by_exit: Vec<String> = exits.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    eprintln!("nemesis: faults by kind: {}", by_kind.join(" "));
    eprintln!("nemesis: exits: {}", by_exit.join(", "));
    eprintln!(
        "nemesis: work writes after a person's flux resume, before the release: {after_break}"
    );
    eprintln!(
        "nemesis: deploys that did not deploy: unwarranted={} {}",
        liveness.unwarranted,
        liveness.line()
    );
    eprintln!("nemesis: {}", leaks.line);
    eprintln!("nemesis: wall time {:.0}s", started.elapsed().as_secs_f64());
    println!(
        "nemesis: seeds={} operations={operations} faults={} violations={violations} unwarranted={}",
        o.seeds,
        faults.values().sum::<usize>(),
        liveness.unwarranted
    );
    Ok(violations == 0 && liveness.unwarranted == 0)
}

/// Counts the seed's liveness verdicts; prints each unwarranted one.
fn unwarranted(
    tally: &mut super::liveness::Tally,
    verdicts: &[(String, Result<super::liveness::Warranted, String>)],
    seed: u64,
    rogue: bool,
) {
    for (h, l) in verdicts {
        tally.add(l);
        if let Err(why) = l {
            eprintln!("nemesis: UNWARRANTED seed={seed} holder={h}: {why}");
            eprintln!("nemesis:   replay: {}", replay(seed, rogue));
        }
    }
}

/// The command that replays `seed`.
fn replay(seed: u64, rogue: bool) -> String {
    let mutant = if rogue { " --mutant rogue" } else { "" };
    format!("cargo xtask chaos --nemesis --seed {seed}{mutant} --dev")
}
