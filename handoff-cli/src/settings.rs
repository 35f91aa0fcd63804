//! Flags over config over defaults ([`handoff_app::settings`]): what a handoff command will
//! do, resolved before any cluster call, so bad input fails with exit code 2 and nothing
//! touched. Targets chosen by -l/--all ([`handoff_app::select`]) are checked here too, then
//! listed once (reads only) and resolved into the same options before any write.

use flux_fence::ObjectRef;
use flux_fence::recovery::short_ref;
use flux_suspend::LeaseWait;
use flux_suspend::SessionOptions;
use handoff_app::select::{SelectError, Selection};
use handoff_app::settings::Flags;
use serde_json::json;

use crate::args::{Global, HolderArg, SelectArgs, TargetArgs};
use crate::failure::Failure;
use crate::output::Output;
use handoff_app::config::FileConfig;

/// What `run` and `pause` start from, resolved once: the options of their session (flags
/// over the config file; targets named, or listed by `-l/--all` — reads only — before any
/// write), how long to wait for a busy Lease, and the client. Bad input is exit 2 before the
/// client exists.
pub async fn prepare(
    global: &Global,
    (select, named, holder): (&SelectArgs, &TargetArgs, &HolderArg),
    file: &FileConfig,
    out: &mut Output,
) -> Result<(SessionOptions, LeaseWait, kube::Client), Failure> {
    // -l/--all: checked here, listed once the client exists, before any write.
    let first = named.target.first().map(String::as_str);
    let selection = (select.flags().selection(&global.namespace, first)).map_err(Failure::usage)?;
    let mut targets = named.clone();
    if let Some(s) = &selection {
        targets.target = s.stand_ins();
    }
    let settings = resolve(global, &targets, file).map_err(Failure::usage)?;
    let mut opts = crate::session::options(settings, holder, file)?;
    let wait = crate::session::lease_wait(holder, file)?;
    let client = crate::client::client(global).await?;
    if let Some(s) = &selection {
        resolve_selected(&client, s, (global, named, file), &mut opts, out).await?;
    }
    Ok((opts, wait, client))
}

/// Resolves flags over the config file. Errors are one line, for exit code 2.
pub fn resolve(
    global: &Global,
    args: &TargetArgs,
    file: &FileConfig,
) -> Result<SessionOptions, String> {
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
    handoff_app::settings::resolve(&f, &file.tables())
}

/// Lists what `selection` selects (reads only), prints it, and makes it `opts`'s targets in
/// dependency order (flags and the config file resolved as for named targets). Nothing
/// selected is exit 2 with one line, before any write.
pub async fn resolve_selected(
    client: &kube::Client,
    selection: &Selection,
    (global, named, file): (&Global, &TargetArgs, &FileConfig),
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
    let mut targets = named.clone();
    targets.target = short(&plan.targets);
    let resolved = resolve(global, &targets, file).map_err(Failure::usage)?;
    opts.targets = resolved.targets;
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
