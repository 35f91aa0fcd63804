//! Flags over config over defaults ([`handoff_app::settings`]): what a handoff command will
//! do, resolved before any cluster call, so bad input fails with exit code 2 and nothing
//! touched. Targets chosen by -l/--all ([`handoff_app::select`]) are checked here too, then
//! listed once (reads only) and resolved into the same options before any write.

use flux_fence::ObjectRef;
use flux_fence::discover::Scope;
use flux_fence::recovery::short_ref;
use flux_suspend::LeaseWait;
use flux_suspend::SessionOptions;
use handoff_app::select::{LabelSelector, SelectError, Selection};
use handoff_app::settings::Flags;
use kube::api::ApiResource;
use serde_json::json;

use crate::args::{Global, HolderArg, SelectArgs, TargetArgs};
use crate::config::FileConfig;
use crate::failure::Failure;
use crate::output::Output;

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
    let selection = selection(global, select, named).map_err(Failure::usage)?;
    let targets = match &selection {
        Some(s) => stand_in(named, s),
        None => named.clone(),
    };
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

/// Parses `[kind/][namespace/]name` (`fences release`).
pub fn parse_target(text: &str, default_ns: &str) -> Result<ObjectRef, String> {
    handoff_app::names::parse_object(text, default_ns).map_err(|e| e.to_string())
}

/// What -l/--all select, checked before any request (exit 2 with one line): `None` when
/// targets are named (or come from the config file). Names and a selector together are
/// refused, as `kubectl` refuses names with -l: one or the other says what to pause.
pub fn selection(
    global: &Global,
    select: &SelectArgs,
    named: &TargetArgs,
) -> Result<Option<Selection>, String> {
    if !select.selects() {
        if !select.kind.is_empty() || !select.namespaces.is_empty() || select.all_namespaces {
            return Err(
                "--kind, --in and -A say what -l or --all select: give -l SELECTOR or --all".into(),
            );
        }
        return Ok(None);
    }
    let how = select.selector.as_deref().map_or("--all", |_| "-l");
    if let Some(t) = named.target.first() {
        return Err(format!(
            "{how} selects the targets: name targets ({t:?}) or select them, not both"
        ));
    }
    let selector = match &select.selector {
        Some(text) => Some(text.parse::<LabelSelector>().map_err(|e| e.to_string())?),
        None => None,
    };
    let kinds = kinds(&select.kind)?;
    let scope = if select.all_namespaces {
        Scope::All
    } else {
        let base = [global.namespace.clone()];
        Scope::namespaces(base.iter().chain(&select.namespaces))
            .map_err(|ns| format!("--in {ns:?}: not a namespace name"))?
    };
    Ok(Some(Selection {
        kinds,
        scope,
        selector,
    }))
}

/// `--kind`: each kind once, in the order given; none is Kustomizations (as `flux suspend
/// kustomization`).
pub fn kinds(given: &[String]) -> Result<Vec<ApiResource>, String> {
    let mut kinds = Vec::new();
    for k in given {
        let ar = handoff_app::names::kind_resource(k)
            .filter(|ar| !flux_suspend::object::is_operator_kind(ar))
            .ok_or_else(|| {
                format!("--kind {k:?}: not a kind a selector takes (ks, hr; name rset and fi)")
            })?;
        if !kinds.contains(&ar) {
            kinds.push(ar);
        }
    }
    if kinds.is_empty() {
        kinds.push(flux_suspend::object::kustomization_resource());
    }
    Ok(kinds)
}

/// The target flags with one stand-in target per selected kind, so that every other flag is
/// resolved and checked (exit 2) before the selection is listed; [`resolve_selected`] puts
/// the real targets in their place.
pub fn stand_in(named: &TargetArgs, selection: &Selection) -> TargetArgs {
    let mut t = named.clone();
    let ns = match &selection.scope {
        Scope::Namespaces(nss) => nss.first().cloned().unwrap_or_default(),
        _ => "default".into(),
    };
    t.target = selection
        .kinds
        .iter()
        .map(|k| format!("{}/{ns}/selected", k.kind))
        .collect();
    t
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
    opts.validate().map_err(|e| Failure::usage(e.to_string()))
}

/// Exit 2 for what the caller gave (nothing matched, a selection of three levels), the API's
/// code for a list that failed.
pub fn select_failure(e: &SelectError) -> Failure {
    match e {
        SelectError::List(f) => Failure::from_fence(f),
        e => Failure::usage(e.to_string()),
    }
}
