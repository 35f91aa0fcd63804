//! `flux-handoff fences`: list every fence and the Lease with liveness evidence and the exact
//! release command (read-only); `fences release` releases one fence with a CAS; `fences
//! recover` releases only provably orphaned fences (dry run unless `--yes`).
//!
//! The rules and their words live in `flux_fence::recovery` (set up for Flux objects by
//! `handoff_app::fences`); these files parse, print and map exit codes.

pub(crate) mod evidence;
mod recover;
mod release;

use clap::{Args, Subcommand};
use flux_fence::recovery::Recovery;

use crate::args::{FindArgs, Global, TargetArgs};
use crate::failure::Failure;
use crate::output::Output;
use crate::{client, exit, settings};
use handoff_app::config;

/// `flux-handoff fences [release|recover]`.
#[derive(Debug, Args)]
pub struct FencesArgs {
    #[command(subcommand)]
    pub action: Option<FencesAction>,
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// List only the pauses held past their --max-hold (holder, reason, age, limit, objects,
    /// and the resume command of a parked one). Exit 0 when there is none, 9 when there is
    /// one or more. Read-only: nothing is ever resumed because its time ran out.
    #[arg(long)]
    pub overdue: bool,
    /// With --overdue: post one Flux-format event (error, reason `HandoffOverdue`) per overdue
    /// pause, about its first target, to notification-controller's event server at this URL,
    /// so an `Alert` selecting the object forwards it (a scheduled job's alert). One POST per
    /// pause, 2 s bound, no retry. Config: `events_addr`.
    #[arg(long, value_name = "URL")]
    pub events_addr: Option<String>,
}

/// Where to look, and which Lease is the liveness evidence.
#[derive(Debug, Args, Clone)]
pub struct ScopeArgs {
    #[command(flatten)]
    pub find: FindArgs,
    /// The coordination Lease whose holder and renew time are the liveness evidence,
    /// `[namespace/]name` (default: the config file's [lease], else flux-system/flux-handoff).
    #[arg(long, value_name = "LEASE", global = true)]
    pub lease: Option<String>,
}

/// The actions on fences.
#[derive(Debug, Subcommand)]
pub enum FencesAction {
    /// Release one fence with a CAS on what was just observed (restores every prior value).
    Release(release::ReleaseArgs),
    /// Release only provably orphaned fences: watch the Lease for one full lease duration,
    /// take it over if it stayed unchanged, release children before parents, release the
    /// Lease. Dry run unless --yes.
    Recover(recover::RecoverArgs),
}

/// Runs `fences`, `fences release` or `fences recover`.
pub async fn run(global: &Global, args: &FencesArgs, out: &mut Output) -> Result<u8, Failure> {
    if args.overdue {
        let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
        let events = crate::notify::EventsArg {
            events_addr: args.events_addr.clone(),
        };
        crate::notify::configure(out, &events, file.events_addr.as_deref())?;
    } else if args.events_addr.is_some() {
        return Err(Failure::usage(
            "--events-addr: only with --overdue (fences sends an alert per overdue pause)",
        ));
    }
    let ctx = Context::load(global, &args.scope).await?;
    match &args.action {
        None if args.overdue => overdue(&ctx, out).await,
        None => {
            let listing = ctx.recovery.list().await?;
            for (key, value) in listing.facts(&|c| ctx.spell(c)) {
                if key == "fences"
                    && let Some(rows) = value.as_array()
                {
                    let objects = rows.iter().filter_map(|r| r["object"].as_str());
                    out.list_names(&objects.map(str::to_string).collect::<Vec<_>>());
                }
                out.fact(key, value);
            }
            if !out.is_json() {
                print!(
                    "{}",
                    handoff_app::render::plain::plain(&listing.text(&|c| ctx.spell(c)))
                );
            }
            Ok(exit::SUCCESS)
        }
        Some(FencesAction::Release(a)) => {
            let recovery = ctx.recovery.holder_exited(a.holder_exited);
            let ctx = Context { recovery, ..ctx };
            release::run(global, &ctx, a, out).await
        }
        Some(FencesAction::Recover(a)) => recover::run(&ctx, a, out).await,
    }
}

/// `fences --overdue`: the pauses held past their max-hold, an event for each when an events
/// address is set; exit 9 when there is one. Read-only.
async fn overdue(ctx: &Context, out: &mut Output) -> Result<u8, Failure> {
    let listing = ctx.recovery.list().await?;
    for (key, value) in listing.facts(&|c| ctx.spell(c)) {
        if key != "fences" {
            out.fact(key, value);
        }
    }
    let objects: Vec<_> = listing
        .overdue
        .iter()
        .flat_map(|p| p.objects.clone())
        .collect();
    out.list(&objects);
    for pause in &listing.overdue {
        crate::notify::overdue(out, pause);
    }
    if !out.is_json() {
        let text = listing.overdue_text(&|c| ctx.spell(c));
        print!("{}", handoff_app::render::plain::plain(&text));
    }
    Ok(if listing.overdue.is_empty() {
        exit::SUCCESS
    } else {
        exit::OVERDUE
    })
}

/// Everything the fences commands share.
struct Context {
    /// The recovery rules, set up for this scope, Lease and keys.
    recovery: Recovery,
    /// The Lease, `namespace/name`.
    lease: String,
    /// The `--config` file, named again in each printed command.
    config: Option<std::path::PathBuf>,
    /// `[recovery]` of the configuration file.
    recovery_file: config::RecoveryConfig,
}

impl Context {
    async fn load(global: &Global, scope: &ScopeArgs) -> Result<Self, Failure> {
        let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
        // The fence commands name no target: resolve the Lease and keys with a placeholder.
        let targets = TargetArgs {
            target: vec!["unused".into()],
            parent: None,
            retire: None,
            quiesce: false,
            lease: scope.lease.clone(),
            controller: None,
        };
        let s = settings::resolve(global, &targets, &file).map_err(Failure::usage)?;
        let listing = scope.find.listing();
        let scope = (scope.find)
            .scope(std::slice::from_ref(&global.namespace))
            .map_err(Failure::usage)?;
        let client = client::client(global).await?;
        Ok(Self {
            lease: format!("{}/{}", s.lease.namespace, s.lease.name),
            recovery: handoff_app::fences::recovery(client, s.keys, s.lease)
                .scope(scope)
                .listing(listing),
            config: global.config.clone(),
            recovery_file: file.recovery.unwrap_or_default(),
        })
    }
}

impl Context {
    /// A command the libraries name, as a person types it here.
    fn spell(&self, c: &flux_fence::command::Command) -> String {
        handoff_app::next::spell(c, self.config.as_deref())
    }
}
