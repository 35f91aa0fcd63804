//! `flux-handoff fences recover [--yes]`: release only provably orphaned fences, children
//! before parents, then clear a Lease whose holder's renew stopped. Without `--yes` it only
//! prints what it would do and, for each fence it keeps, why.

use clap::Args;
use flux_fence::{Fencer, GoneHolder, Holder, Lease, LeaseRecover, LeaseRelease, ReleaseOutcome};
use serde_json::json;

use super::Context;
use super::assess::{self, plan_recover, short_ref};
use crate::exit;
use crate::failure::Failure;
use crate::output::Output;

/// `fences recover`.
#[derive(Debug, Args)]
#[command(
    after_help = "Evidence used: the Lease. A fence is provably orphaned when its holder is not \
the current Lease holder, or holds the Lease but stopped renewing it (expired) without having \
parked it on purpose (`flux-handoff pause` parks it; see --include-paused). Evidence from CI \
(e.g. whether a GitHub Actions run has finished) is not consulted yet; a later version may add it."
)]
pub struct RecoverArgs {
    /// Release for real. Without it, print what would be released and what is kept, and why
    /// (dry run, the default).
    #[arg(long)]
    pub yes: bool,
    /// Also release deliberate pauses (`flux-handoff pause` parks its Lease): their Lease stops
    /// being renewed on purpose, so expiry alone does not make them orphans.
    #[arg(long)]
    pub include_paused: bool,
}

pub async fn run(ctx: &Context, args: &RecoverArgs, out: &mut Output) -> Result<u8, Failure> {
    let snap = ctx.snapshot(&ctx.scope).await?;
    let rows = assess::assess(&snap.report, snap.lease.as_ref(), &ctx.suffix);
    let plan = plan_recover(&rows, snap.lease.as_ref(), snap.now, args.include_paused);
    report_plan(ctx, &plan, args.yes, out);
    if !args.yes {
        if plan.release.is_empty() && plan.lease.is_none() {
            out.note("nothing is provably orphaned");
        } else {
            out.note("dry run: nothing changed; run again with --yes to release");
        }
        return Ok(exit::SUCCESS);
    }

    let mut failed_holders: Vec<String> = Vec::new();
    let mut problems = Vec::new();
    let mut released = Vec::new();
    for (obj, holder, _) in &plan.release {
        let name = short_ref(obj);
        if failed_holders.contains(holder) && !is_target_row(&rows, obj) {
            problems.push(format!(
                "{name}: kept because a child of {holder} was not released"
            ));
            continue;
        }
        match release_one(ctx, obj, holder).await {
            Ok(()) => {
                out.phase(&format!("released: {name}"));
                released.push(name);
            }
            Err(why) => {
                failed_holders.push(holder.clone());
                problems.push(format!("{name}: {why}"));
            }
        }
    }
    out.fact("released", json!(released));
    if let Some((holder, evidence)) = &plan.lease {
        if failed_holders.contains(holder) {
            problems.push(format!(
                "lease {}: kept because a fence of {holder} was not released",
                ctx.lease_name()
            ));
        } else {
            match clear_lease(ctx, holder, evidence).await {
                Ok(()) => out.phase(&format!("lease cleared: {}", ctx.lease_name())),
                Err(why) => problems.push(format!("lease {}: {why}", ctx.lease_name())),
            }
        }
    }
    if problems.is_empty() {
        Ok(exit::SUCCESS)
    } else {
        Err(Failure::new(
            exit::CLEANUP,
            format!(
                "recovery incomplete ({}); `flux-handoff fences` lists what is still held",
                problems.join("; ")
            ),
        ))
    }
}

fn is_target_row(rows: &[assess::Row], obj: &flux_fence::ObjectRef) -> bool {
    rows.iter().any(|r| r.object == *obj && r.target)
}

/// Adopts the recorded fence of `holder` on `obj` and releases it with a CAS.
async fn release_one(
    ctx: &Context,
    obj: &flux_fence::ObjectRef,
    holder: &str,
) -> Result<(), String> {
    // The owner value (holder;epoch) is re-read from the object, never assumed.
    let read = flux_suspend::object::get_json(&ctx.client, obj)
        .await
        .map_err(|e| super::kube_line("get", &obj.resource.plural, &short_ref(obj), &e))?;
    let owner = flux_fence::discover::owner_of(&read, &ctx.keys)
        .and_then(|o| o.parse::<flux_fence::OwnerValue>().ok())
        .filter(|o| o.holder.as_str() == holder)
        .ok_or_else(|| format!("no longer fenced by {holder}; nothing changed"))?;
    let fencer = Fencer::new(ctx.client.clone(), ctx.keys.clone(), owner.clone());
    let guard = fencer
        .adopt_recorded(obj, &owner)
        .await
        .map_err(|e| crate::failure::chain(&e))?
        .ok_or_else(|| format!("no longer fenced by {holder}; nothing changed"))?;
    match fencer
        .release(guard)
        .await
        .map_err(|e| crate::failure::chain(&e))?
    {
        ReleaseOutcome::Released { .. } => Ok(()),
        ReleaseOutcome::Kept { guard, why } => {
            (*guard).leave_in_place();
            Err(format!("kept: {why:?}"))
        }
        other => Err(format!("not released: {other:?}")),
    }
}

/// Takes the expired Lease over from `gone` (CAS on what was read, epoch + 1) and releases it.
async fn clear_lease(ctx: &Context, gone: &str, evidence: &str) -> Result<(), String> {
    let recovered = Lease::recover(
        ctx.client.clone(),
        ctx.lease.clone(),
        Holder::generate(),
        Context::clock(),
        GoneHolder {
            holder: gone.to_string(),
            evidence: evidence.to_string(),
        },
    )
    .await
    .map_err(|e| crate::failure::chain(&e))?;
    let guard = match recovered {
        LeaseRecover::Recovered(g) => g,
        LeaseRecover::Refused(r) => return Err(format!("not recovered: {r:?}")),
        other => return Err(format!("not recovered: {other:?}")),
    };
    match guard
        .release()
        .await
        .map_err(|e| crate::failure::chain(&e))?
    {
        LeaseRelease::Released | LeaseRelease::Gone => Ok(()),
        other => Err(format!("not released: {other}")),
    }
}

/// Prints what will be (or would be) released and cleared, and what is kept and why.
fn report_plan(ctx: &Context, plan: &assess::RecoverPlan, yes: bool, out: &mut Output) {
    let args_yes = yes;
    let verb = if args_yes { "release" } else { "would release" };
    for (obj, holder, evidence) in &plan.release {
        out.note(&format!(
            "{verb}: {} (holder {holder}: {evidence})",
            short_ref(obj)
        ));
    }
    if let Some((holder, evidence)) = &plan.lease {
        let v = if args_yes { "clear" } else { "would clear" };
        out.note(&format!(
            "{v}: lease {} (holder {holder}: {evidence})",
            ctx.lease_name()
        ));
    }
    for (name, why) in &plan.keep {
        out.note(&format!("keep: {name}: {why}"));
    }
    out.fact("dry_run", json!(!args_yes));
    out.fact(
        "release",
        json!(
            plan.release
                .iter()
                .map(|(o, h, e)| json!({"object": short_ref(o), "holder": h, "evidence": e}))
                .collect::<Vec<_>>()
        ),
    );
    out.fact(
        "keep",
        json!(
            plan.keep
                .iter()
                .map(|(n, w)| json!({"object": n, "why": w}))
                .collect::<Vec<_>>()
        ),
    );
    out.fact(
        "lease",
        json!(
            plan.lease
                .as_ref()
                .map(|(h, e)| json!({"holder": h, "evidence": e}))
        ),
    );
}
