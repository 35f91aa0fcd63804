//! `flux-handoff pause`: Lease, fence the chain, retire in-flight reconciles, prove the stable
//! pause, and leave it paused (the Lease parked) for `flux-handoff resume --holder`.

use flux_suspend::Cancel;
use serde_json::json;

use crate::args::{Global, PauseArgs};
use crate::failure::Failure;
use crate::output::Output;
use crate::{exit, session, settings};
use handoff_app::config;
use handoff_app::next::Hints;

pub async fn run(
    global: &Global,
    args: &PauseArgs,
    out: &mut Output,
    cancel: Cancel,
) -> Result<u8, Failure> {
    let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
    crate::notify::configure(out, &args.events, file.events_addr.as_deref())?;
    let named = args.targets.with(&args.positional);
    let (mut plan, client) =
        settings::prepare(global, (&args.select, &named, &args.holder), &file, out).await?;
    plan.options.allow_autoscaler = args.allow_autoscaler;
    let lease = plan.options.lease.clone();
    let hints = Hints::of("pause", &plan.options);
    if args.dry_run.is_some() {
        return super::dry_run::run(client, plan, cancel, out, &hints, None).await;
    }
    let started = session::start(client, plan, cancel, out, &hints).await?;
    let members = started.members();
    let outcome = started.park(|e| session::report(out, &e, &members)).await;
    crate::notify::ended(out, &outcome.result, &outcome.cleanup);
    let parked = session::finish(
        outcome.result.map_err(|e| session::failure(&e, &hints)),
        outcome.cleanup,
        out,
    )?;
    // Parked: the pause holds its fences and the Lease on purpose.
    out.cleanup_complete(false);
    let holder = parked.holder.to_string();
    out.fact(
        "proof",
        json!({ "passes": parked.proof.passes(), "counters": parked.proof.counters().to_string() }),
    );
    out.fact("holder", json!(holder));
    let held: Vec<String> = parked.held.iter().map(ToString::to_string).collect();
    out.fact("fences_held", json!(held));
    out.note(&format!("paused by {holder}; fenced: {}", held.join(", ")));
    out.note(&format!(
        "resume with: {}",
        resume_line(&holder, &lease, global)
    ));
    // In text mode, stdout carries only the holder (so scripts can capture it).
    if !out.is_json() {
        println!("{holder}");
    }
    Ok(exit::SUCCESS)
}

/// The command that resumes this pause, as printed. It finds every fence from the chain
/// record on the Lease, whatever namespace a target lives in, so it names only the Lease
/// (when not the default), the configuration file (the Lease and the annotation prefix may
/// come from it) and the kubeconfig and context used.
fn resume_line(holder: &str, lease: &flux_fence::LeaseConfig, global: &Global) -> String {
    let mut words = vec![format!("flux-handoff resume --holder {holder}")];
    if global.config.is_some() || lease.namespace != "flux-system" || lease.name != "flux-handoff" {
        words.push(format!("--lease {lease}"));
    }
    if let Some(c) = &global.config {
        words.push(format!("--config {}", c.display()));
    }
    if let Some(k) = &global.kubeconfig {
        words.push(format!("--kubeconfig {}", k.display()));
    }
    if let Some(c) = &global.context {
        words.push(format!("--context {c}"));
    }
    words.join(" ")
}
