//! `flux-handoff fences recover [--yes]`: watch the Lease for one full lease duration; if it
//! stayed unchanged, take it over (a CAS on the watched version) before releasing anything,
//! release the orphaned fences children first, then release the Lease. Without `--yes` it only
//! prints what it would do and, for each thing it keeps, why. The rules live in
//! `flux_fence::recovery`. With `--evidence github` the Lease holder's CI run is asked instead
//! of watching the Lease (see docs/recovery.md).

use std::path::PathBuf;

use clap::Args;
use flux_fence::recovery::{
    HolderEvidence, RecoverOutcome, RecoverPlan, RecoverReport, WatchProgress,
};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::Context;
use super::evidence::{self, Evidence};
use super::render::{self, short_ref};
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
holder gone; every other answer keeps it and recover exits 3 with one line why.")]
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

pub async fn run(ctx: &Context, args: &RecoverArgs, out: &mut Output) -> Result<u8, Failure> {
    let mut recovery = ctx.recovery().include_paused(args.include_paused);
    if evidence::resolve(args.evidence, &ctx.recovery_file)? == Evidence::Github {
        let source = evidence::github(
            "--evidence github",
            args.github_token_file.as_deref(),
            &ctx.recovery_file,
        )?;
        recovery = recovery.ci_evidence(source, None);
    }
    let lease = ctx.lease_name();
    let planned = {
        let shown: &Output = out;
        let mut progress = |p: &WatchProgress| {
            shown.note(&format!(
                "watching lease {lease} (holder {}, resourceVersion {}): unchanged for {}s of {}s",
                p.holder,
                p.resource_version,
                p.unchanged_for.as_secs(),
                p.duration.as_secs()
            ));
        };
        recovery.plan(&mut progress).await?
    };
    let now = planned.snapshot.now;
    let plan = &planned.plan;
    if let HolderEvidence::NotProved { holder, why } = &planned.evidence {
        report_plan(ctx, plan, now, false, out);
        return Err(Failure::new(
            exit::REFUSED,
            format!("lease {lease}: holder {holder} not proved gone, nothing changed: {why}"),
        ));
    }
    if !args.yes {
        report_plan(ctx, plan, now, false, out);
        if plan.is_empty() {
            out.note("nothing is provably orphaned");
        } else {
            out.note("dry run: nothing changed; run again with --yes to release");
        }
        return Ok(exit::SUCCESS);
    }
    match recovery.execute(plan).await? {
        RecoverOutcome::LeaseRaceLost { gone, why } => Err(Failure::new(
            exit::REFUSED,
            format!(
                "lease {lease} not taken over from {gone}: {why}; it may be live, so no fence was touched"
            ),
        )),
        RecoverOutcome::Done(report) => {
            report_plan(ctx, plan, now, true, out);
            done(ctx, &report, out)
        }
        _ => Err(Failure::new(exit::INTERNAL, "unexpected recovery outcome")),
    }
}

/// Prints what was released and cleared; exit 7 when something planned stayed held.
fn done(ctx: &Context, report: &RecoverReport, out: &mut Output) -> Result<u8, Failure> {
    let released: Vec<String> = report.released.iter().map(short_ref).collect();
    for name in &released {
        out.phase(&format!("released: {name}"));
    }
    out.fact("released", json!(released));
    if report.lease_released {
        out.phase(&format!("lease cleared: {}", ctx.lease_name()));
    }
    if report.problems.is_empty() {
        return Ok(exit::SUCCESS);
    }
    let problems: Vec<String> = report
        .problems
        .iter()
        .map(|(s, why)| format!("{}: {why}", render::subject(s, &ctx.lease_name())))
        .collect();
    Err(Failure::new(
        exit::CLEANUP,
        format!(
            "recovery incomplete ({}); `flux-handoff fences` lists what is still held",
            problems.join("; ")
        ),
    ))
}

/// Prints what will be (or would be) released and cleared, and what is kept and why.
fn report_plan(ctx: &Context, plan: &RecoverPlan, now: Timestamp, yes: bool, out: &mut Output) {
    let verb = if yes { "release" } else { "would release" };
    for p in &plan.release {
        out.note(&format!(
            "{verb}: {} (holder {}: {})",
            short_ref(&p.object),
            p.holder,
            p.why
        ));
    }
    if let Some(gone) = &plan.take_lease {
        let v = if yes { "clear" } else { "would clear" };
        out.note(&format!(
            "{v}: lease {} (holder {}: {})",
            ctx.lease_name(),
            gone.holder,
            gone.evidence
        ));
    }
    let kept: Vec<(String, String)> = plan
        .keep
        .iter()
        .map(|(s, why)| {
            (
                render::subject(s, &ctx.lease_name()),
                render::keep(why, now),
            )
        })
        .collect();
    for (name, why) in &kept {
        out.note(&format!("keep: {name}: {why}"));
    }
    out.fact("dry_run", json!(!yes));
    out.fact(
        "release",
        json!(
            plan.release
                .iter()
                .map(|p| json!({
                    "object": short_ref(&p.object),
                    "holder": p.holder,
                    "evidence": p.why.to_string(),
                }))
                .collect::<Vec<_>>()
        ),
    );
    out.fact(
        "keep",
        json!(
            kept.iter()
                .map(|(n, w)| json!({"object": n, "why": w}))
                .collect::<Vec<_>>()
        ),
    );
    out.fact(
        "lease",
        json!(
            plan.take_lease
                .as_ref()
                .map(|g| json!({"holder": g.holder, "evidence": g.evidence}))
        ),
    );
}
