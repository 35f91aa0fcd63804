//! Flags over config over defaults ([`handoff_app::settings`]): what a handoff command will
//! do, resolved before any cluster call, so bad input fails with exit code 2 and nothing
//! touched. Targets chosen by -l/--all ([`handoff_app::select`]) are checked here too, then
//! listed once (reads only) and resolved into the same options before any write.

use flux_fence::ObjectRef;
use flux_fence::recovery::short_ref;
use flux_suspend::SessionOptions;
use ghcr_auth::GhcrSettings;
use handoff_app::select::{SelectError, Selection};
use handoff_app::settings::{Flags, GhcrPlan, Plan};
use serde_json::json;

use crate::args::{Global, HolderArg, SelectArgs, TargetArgs};
use crate::failure::Failure;
use crate::output::Output;
use handoff_app::config::FileConfig;

/// What `run` and `pause` start from, resolved once: their [`Plan`] (flags over the config
/// file; targets named, or listed by `-l/--all` — reads only — before any write) and the
/// client. Bad input is exit 2 before the client exists.
pub async fn prepare(
    global: &Global,
    (select, named, holder): (&SelectArgs, &TargetArgs, &HolderArg),
    file: &FileConfig,
    out: &mut Output,
) -> Result<(Plan, kube::Client), Failure> {
    // -l/--all: checked here, listed once the client exists, before any write.
    let first = named.target.first().map(String::as_str);
    let selection = (select.flags().selection(&global.namespace, first)).map_err(Failure::usage)?;
    let mut targets = named.clone();
    if let Some(s) = &selection {
        targets.target = s.stand_ins();
    }
    let mut plan = plan(global, (&targets, holder), file)?;
    let client = crate::client::client(global).await?;
    if let Some(s) = &selection {
        resolve_selected(&client, s, named, &mut plan.options, out).await?;
    }
    Ok((plan, client))
}

/// The [`Plan`] of a command that starts a session ([`handoff_app::settings::plan`]); the
/// GitHub evidence source of `--recover-finished-runs` is built from the environment here, at
/// the edge. Exit 2 with one line for bad input.
pub fn plan(
    global: &Global,
    (args, holder): (&TargetArgs, &HolderArg),
    file: &FileConfig,
) -> Result<Plan, Failure> {
    let f = holder_flags(global, args, holder);
    handoff_app::settings::plan(&f, &file.tables(), |token, table| table.github(token))
        .map_err(Failure::usage)
}

/// The [`GhcrPlan`] of `ghcr reassert` ([`handoff_app::settings::ghcr_plan`]): the GHCR
/// flags' `ghcr` layer over `[ghcr]`, and the pause's [`Plan`] as [`plan`] makes it. Exit 2
/// with one line for bad input.
pub fn ghcr_plan(
    global: &Global,
    (args, holder): (&TargetArgs, &HolderArg),
    ghcr: GhcrSettings,
    file: &FileConfig,
) -> Result<GhcrPlan, Failure> {
    let mut f = holder_flags(global, args, holder);
    f.ghcr = ghcr;
    handoff_app::settings::ghcr_plan(&f, &file.tables(), |token, table| table.github(token))
        .map_err(Failure::usage)
}

/// The GHCR flags' `ghcr` layer alone over `[ghcr]`, for the commands that take no pause
/// (`ghcr check`, `doctor`, `rbac`).
pub fn ghcr_flags(global: &Global, ghcr: GhcrSettings) -> Flags {
    let mut f = Flags::new(&global.namespace);
    f.ghcr = ghcr;
    f
}

fn holder_flags(global: &Global, args: &TargetArgs, holder: &HolderArg) -> Flags {
    let mut f = flags(global, args);
    f.holder.clone_from(&holder.holder);
    f.max_hold.clone_from(&holder.max_hold);
    f.wait_lease = holder.wait_lease;
    f.recover_finished_runs = holder.recover_finished_runs;
    f.github_token_file.clone_from(&holder.github_token_file);
    f
}

/// Resolves the target flags over the config file (the part of the plan that needs no holder
/// and no environment). Errors are one line, for exit code 2.
pub fn resolve(
    global: &Global,
    args: &TargetArgs,
    file: &FileConfig,
) -> Result<SessionOptions, String> {
    handoff_app::settings::resolve(&flags(global, args), &file.tables())
}

fn flags(global: &Global, args: &TargetArgs) -> Flags {
    let mut f = Flags::new(&global.namespace);
    f.targets.clone_from(&args.target);
    f.parent.clone_from(&args.parent);
    f.retire.clone_from(&args.retire);
    f.quiesce = args.quiesce;
    f.lease.clone_from(&args.lease);
    f.controller.clone_from(&args.controller);
    f.reason.clone_from(&global.reason);
    f.timeout = global.timeout;
    f.wait_timeout = global.wait_timeout;
    f.interval = global.interval;
    f
}

/// Lists what `selection` selects (reads only), prints it, and makes it `opts`'s targets in
/// dependency order, each with the `--parent` of `named` as for named targets. Nothing
/// selected is exit 2 with one line, before any write.
pub async fn resolve_selected(
    client: &kube::Client,
    selection: &Selection,
    named: &TargetArgs,
    opts: &mut SessionOptions,
    out: &mut Output,
) -> Result<(), Failure> {
    let found = handoff_app::select::select(client, selection)
        .await
        .map_err(|e| select_failure(&e))?;
    let plan = handoff_app::select::plan(selection, &found, named.parent.as_deref())
        .map_err(|e| select_failure(&e))?;
    let short = |o: &[ObjectRef]| o.iter().map(short_ref).collect::<Vec<_>>();
    // Printed in release order: dependencies first.
    let mut release = short(&plan.targets);
    release.reverse();
    out.note(&format!(
        "{} selected {} target(s), released in this order: {}",
        selection.how(),
        release.len(),
        release.join(", ")
    ));
    if !plan.as_parents.is_empty() {
        out.note(&format!(
            "paused as the parent of selected targets: {}",
            short(&plan.as_parents).join(", ")
        ));
    }
    if !plan.broken_at.is_empty() {
        out.note(&format!(
            "spec.dependsOn has a cycle (Flux reconciles none of its members until it is \
             broken); ordered as if {} came first",
            short(&plan.broken_at).join(", ")
        ));
    }
    out.fact("selected", json!(release));
    // The listed objects take the stand-ins' place as they are: no text round trip.
    opts.targets = handoff_app::settings::targets_of(&plan.targets, named.parent.as_deref())
        .map_err(Failure::usage)?;
    opts.validate().map_err(Failure::usage)
}

/// Exit 2 for what the caller gave (nothing matched, a selection of three levels), the API's
/// code for a list that failed.
pub fn select_failure(e: &SelectError) -> Failure {
    match e {
        SelectError::List(f) => Failure::from_fence(f),
        e => Failure::usage(e.to_string()),
    }
}
