//! `flux-handoff fences recover [--yes]`: watch the Lease for one full lease duration; if it
//! stayed unchanged, take it over (a CAS on the watched version) before releasing anything,
//! release the orphaned fences children first, then release the Lease. Without `--yes` it only
//! prints what it would do and, for each thing it keeps, why. The rules live in
//! `flux_fence::recovery`. With `--evidence github` the Lease holder's CI run is asked instead
//! of watching the Lease (see docs/recovery.md).

use std::path::PathBuf;

use clap::Args;
use flux_fence::recovery::{HolderEvidence, RecoverOutcome, short_ref};
use serde_json::json;

use super::Context;
use super::evidence::{self, Evidence};
use crate::exit;
use crate::failure::Failure;
use crate::output::Output;

/// `fences recover`.
#[derive(Debug, Args)]
#[command(after_help = "\
Evidence used: the Lease, watched. When the Lease is held (and not a parked pause left out), \
recover reads it and watches it for one full lease duration (leaseDurationSeconds) on its own \
monotonic clock, printing progress about every 10s: a holder that renews shows a new \
resourceVersion and is kept as live; one whose Lease stayed unchanged is gone. The holder's \
renewTime is never compared with this machine's clock, so a clock running ahead cannot release \
a live run. The Lease is then taken over with a compare-and-swap on the watched version before \
any fence is released; if that loses (the holder renewed, or someone else wrote the Lease), \
nothing is released and recover exits 3. Fences of a holder that does not hold the Lease are \
orphaned without a watch. A deliberate pause (`flux-handoff pause` parks its Lease) is kept \
unless --include-paused.

With --evidence github (or `[recovery] evidence = \"github\"`) the Lease is not watched: the \
holder's exact GitHub Actions run attempt (its identity gh<run>.<attempt>-...) is asked of \
GITHUB_API_URL in GITHUB_REPOSITORY with GITHUB_TOKEN (or --github-token-file; it needs \
`actions: read`), again every second while the run is queued or in progress, for at most one \
lease duration. Only status `completed`, with the Lease unchanged since it was read, proves the \
holder gone; every other answer keeps it and recover exits 3 with one line why.

With --yes, before anything is released, what is left on this machine of a gone holder's \
command (its keeper killed with it) is ended through the command's cgroup, as \
`resume --holder-exited` does; if it cannot be emptied, recover exits 3 and changes nothing.")]
pub struct RecoverArgs {
    /// Release for real. Without it, watch and print what would be released and what is kept,
    /// and why (dry run, the default).
    #[arg(long)]
    pub yes: bool,
    /// Also release deliberate pauses (`flux-handoff pause` parks its Lease): their Lease stops
    /// being renewed on purpose, so only this flag lets recover release them (still after a
    /// watch shows the Lease unchanged).
    #[arg(long)]
    pub include_paused: bool,
    /// How a Lease holder is proved gone: `lease` (watch the Lease, the default) or `github`
    /// (ask GitHub whether the holder's run attempt is completed).
    #[arg(long, value_enum, value_name = "SOURCE")]
    pub evidence: Option<Evidence>,
    /// Read the GitHub token from this file instead of `GITHUB_TOKEN`.
    #[arg(long, value_name = "PATH")]
    pub github_token_file: Option<PathBuf>,
}

pub(super) async fn run(
    ctx: &Context,
    args: &RecoverArgs,
    out: &mut Output,
) -> Result<u8, Failure> {
    let mut recovery = ctx.recovery.clone().include_paused(args.include_paused);
    if evidence::asks_github(args.evidence, &ctx.recovery_file)? {
        let token_file = args.github_token_file.as_deref();
        let source = evidence::github("--evidence github", token_file, &ctx.recovery_file)?;
        recovery = recovery.ci_evidence(source, None);
    }
    let lease = ctx.lease.as_str();
    let planned = {
        let shown: &Output = out;
        recovery
            .plan(&mut |p| shown.note(&p.describe(lease)))
            .await?
    };
    let (plan, now) = (&planned.plan, planned.snapshot.now);
    // What will be (or would be) released and cleared, and what is kept and why.
    let show = |yes: bool, out: &mut Output| {
        let spell = |c: &_| ctx.spell(c);
        plan.lines(lease, now, yes, &spell)
            .iter()
            .for_each(|l| out.note(l));
        for (key, value) in plan.facts(lease, now, yes, &spell) {
            out.fact(key, value);
        }
    };
    if let HolderEvidence::NotProved { holder, why } = &planned.evidence {
        show(false, out);
        let line =
            format!("lease {lease}: holder {holder} not proved gone, nothing changed: {why}");
        return Err(Failure::new(exit::REFUSED, line));
    }
    if !args.yes {
        show(false, out);
        out.note(if plan.is_empty() {
            "nothing is provably orphaned"
        } else {
            "dry run: nothing changed; run again with --yes to release"
        });
        return Ok(exit::SUCCESS);
    }
    end_work_here(plan)?;
    let report = match recovery.execute(plan).await? {
        RecoverOutcome::Done(report) => report,
        RecoverOutcome::LeaseRaceLost { gone, why } => {
            return Err(Failure::new(
                exit::REFUSED,
                format!(
                    "lease {lease} not taken over from {gone}: {why}; it may be live, so no fence was touched"
                ),
            ));
        }
        _ => return Err(Failure::new(exit::INTERNAL, "unexpected recovery outcome")),
    };
    show(true, out);
    report.lines(lease).iter().for_each(|l| out.phase(l));
    let released: Vec<String> = report.released.iter().map(short_ref).collect();
    out.fact("released", json!(released));
    match report.problems_line(lease) {
        None => Ok(exit::SUCCESS),
        Some(problems) => Err(Failure::new(
            exit::CLEANUP,
            format!(
                "recovery incomplete ({problems}); `flux-handoff fences` lists what is still held"
            ),
        )),
    }
}

/// The gone holders' work on this machine, if any is left (a keeper killed with its holder
/// leaves the command's background processes in its cgroup): ended before anything is
/// released, or a refusal with nothing changed. Elsewhere the keeper's deadline protects.
#[cfg(target_os = "linux")]
fn end_work_here(plan: &flux_fence::recovery::RecoverPlan) -> Result<(), Failure> {
    let mut holders: Vec<&str> = plan.release.iter().map(|p| p.holder.as_str()).collect();
    holders.extend(plan.take_lease.as_ref().map(|g| g.holder.as_str()));
    holders.sort_unstable();
    holders.dedup();
    let bound = flux_suspend::command::KILL_WAIT + std::time::Duration::from_secs(1);
    for holder in holders {
        let Ok(holder) = holder.parse::<flux_fence::Holder>() else {
            continue;
        };
        if let Err(e) = flux_suspend::command::end_holders_work(&holder, bound) {
            return Err(Failure::new(
                exit::REFUSED,
                format!("{e}; nothing was changed"),
            ));
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn end_work_here(_plan: &flux_fence::recovery::RecoverPlan) -> Result<(), Failure> {
    Ok(())
}
