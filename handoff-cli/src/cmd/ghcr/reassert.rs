//! `ghcr reassert`: prove the credential first (no cluster call before it), then — paused under
//! the Lease when targets are given — run ghcr-auth's one route ([`FanoutRun`]: the plain
//! route's Secrets, or staged keys and External Secrets too) and resume on every exit path.

use std::cell::RefCell;

use clap::Args;
use flux_suspend::Cancel;
use flux_suspend::STOP_GRACE;
use ghcr_auth::FlowError;
use ghcr_auth::reassert::Reasserter;
use ghcr_auth::route::FanoutRun;
use serde_json::json;

use super::input::{self, CredentialArgs, FanoutArgs, SecretArgs};
use crate::args::{Global, HolderArg, Positional, TargetArgs};
use crate::failure::Failure;
use crate::output::Output;
use crate::{client, exit, session, settings};
use handoff_app::config;
use handoff_app::settings::GhcrPlan;

/// `flux-handoff ghcr reassert`.
#[derive(Debug, Args)]
#[command(after_help = LAYOUT)]
pub struct ReassertArgs {
    /// Prove the credential (a registry read), then send every write the handoff would make
    /// first (the Lease, each fence, each pull Secret, consumers then the root) with the
    /// server's dryRun=All: RBAC and admission answer, nothing is changed, no source is
    /// proven. Exit 0 when every write would pass, 6 when one would not. The plain route only
    /// (not with staged keys, External Secrets or --allow-incomplete-fanout).
    #[arg(long, value_enum, require_equals = true, value_name = "MODE")]
    pub dry_run: Option<crate::args::DryRunMode>,
    #[command(flatten)]
    pub credential: CredentialArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
    #[command(flatten)]
    pub fanout: FanoutArgs,
    #[command(flatten)]
    pub positional: Positional,
    /// Pause these Flux objects while reasserting (as `pause`); without any target (here or in
    /// the config) the Secrets are reasserted without a pause or Lease.
    #[command(flatten)]
    pub targets: TargetArgs,
    #[command(flatten)]
    pub holder: HolderArg,
    #[command(flatten)]
    pub events: crate::notify::EventsArg,
}

/// The original tool's layout, shown by `--help` (docs/fanout.md has it as a config file).
const LAYOUT: &str = "\
First, a dry run: every write answered by the server (RBAC, admission), nothing changed:

  flux-handoff ghcr reassert --dry-run=server ks/flux-system/apps --credential-env GHCR_TOKEN \\
    --username flux --image ghcr.io/org/app:1.2.3 --root-secret flux-system/ghcr-auth

Example, the External Secrets layout: stage the credential in a GitOps variables Secret, let a \
PushSecret carry it to the store and an ExternalSecret pull it into every consumer namespace, \
then write Flux's own Secret last:

  flux-handoff ghcr reassert --credential-env GHCR_TOKEN --username flux \\
    --image ghcr.io/org/app:1.2.3 \\
    --secret-key flux-system/variables-base:ghcr_dockerconfigjson \\
    --push-secret flux-system/seed-ghcr --external-secret ghcr-auth \\
    --namespace-list apps,web --root-secret flux-system/ghcr-auth \\
    --target flux-system/apps

Order: staged key (CAS on that key alone), PushSecret force-synced and synced, each \
ExternalSecret force-synced until synced and its Secret holds the proven Docker config, then the \
root Secret. A missing CRD, PushSecret, ExternalSecret or staging Secret refuses before any \
write (exit 3) unless --allow-incomplete-fanout (bootstrap: root, staging, root, no Flux \
pause); a consumer that does not converge within --timeout is exit 4, naming its namespace and \
ESO's reason, with the root unchanged.";

/// Runs `ghcr reassert`.
// The output is borrowed across the Secret writes: the session reports no progress while the
// work runs, so nothing else borrows it then.
#[allow(clippy::await_holding_refcell_ref)]
pub async fn run(
    global: &Global,
    args: &ReassertArgs,
    out: &mut Output,
    cancel: Cancel,
) -> Result<u8, Failure> {
    // 1. Every input, before any I/O.
    let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
    crate::notify::configure(out, &args.events, file.events_addr.as_deref())?;
    let targets = args.targets.with(&args.positional);
    let ghcr = input::layer(Some(&args.credential), Some((&args.secrets, &args.fanout)));
    let GhcrPlan {
        credential: input,
        route,
        sources,
        pause: plan,
        ..
    } = settings::ghcr_plan(global, (&targets, &args.holder), ghcr, &file)?;
    let bootstrap = route.allow_incomplete;
    if args.dry_run.is_some() && !route.is_plain() {
        return Err(Failure::usage(
            "--dry-run=server: only the plain route (not with staged keys, External Secrets or \
             --allow-incomplete-fanout)",
        ));
    }

    // 2. The registry proof, before any cluster call.
    let config = super::check(&input, out).await?;

    // 3. The handoff.
    let client = client::client(global).await?;
    if args.dry_run.is_some() {
        let pause = plan.map(|p| {
            let hints = handoff_app::next::Hints::of("ghcr reassert", &p.options);
            (p.options, hints)
        });
        return super::dry_run::run(client, &config, &route.direct, pause, cancel, out).await;
    }
    let work = FanoutRun::new(config, route, sources, global.timeout, global.interval);
    // The route's observation and decision, before the pause: an incomplete fan-out refuses
    // before any write, a fence included.
    let planned = work
        .preflight(&Reasserter::new(client.clone()), out)
        .await
        .map_err(|e| super::failure(&e))?;
    let Some(plan) = plan else {
        out.phase(if bootstrap {
            "bootstrap (--allow-incomplete-fanout): reasserting without a Flux pause or Lease"
        } else {
            "no targets: reasserting without a pause or Lease"
        });
        let reasserter = Reasserter::new(client.clone());
        let run = work.run_planned(&planned, &reasserter, &client, out);
        return settle(&cancel, run).await.map(|()| exit::SUCCESS);
    };
    let hints = handoff_app::next::Hints::of("ghcr reassert", &plan.options);
    let started = session::start(client.clone(), plan, cancel, out, &hints).await?;
    let members = started.members();
    let out = RefCell::new(out);
    let (out_ref, work_ref, client_ref, planned_ref) = (&out, &work, &client, &planned);
    // Boxed: the session and the fan-out together make a large future.
    let outcome = Box::pin(started.run_paused(
        |e| session::report(&mut out.borrow_mut(), &e, &members),
        |paused| async move {
            let proof = &paused.proof;
            out_ref.borrow_mut().fact(
                "proof",
                json!({ "passes": proof.passes(), "counters": proof.counters().to_string() }),
            );
            // Right before the root Secret (the write consumers follow) the pause is read
            // again: a person's `spec.suspend=false` after the proof stops it there.
            let reasserter = Reasserter::new(client_ref.clone())
                .with_lease(paused.lease.clone())
                .with_root_check(paused.check.hook());
            // The Secrets are written while the RefCell is borrowed; the session reports no
            // progress while the work runs.
            let mut out = out_ref.borrow_mut();
            out.stage("work");
            let run = work_ref.run_planned(planned_ref, &reasserter, client_ref, &mut **out);
            Ok::<_, std::convert::Infallible>(settle(&paused.cancel, run).await)
        },
    ))
    .await;
    let out = out.into_inner();
    crate::notify::ended(out, &outcome.result, &outcome.cleanup);
    session::finish(
        session::result(outcome.result, &hints),
        outcome.cleanup,
        out,
    )
    .map(|()| exit::SUCCESS)
}

/// Runs the work to its end, or once cancelled for [`STOP_GRACE`] more.
async fn settle(
    cancel: &Cancel,
    run: impl Future<Output = Result<(), FlowError>>,
) -> Result<(), Failure> {
    match cancel.settle(STOP_GRACE, run).await {
        Some(r) => r.map_err(|e| super::failure(&e)),
        None => Err(Failure::new(
            exit::INTERRUPTED,
            "interrupted while reasserting",
        )),
    }
}
