//! `flux-handoff resume --holder H`: release what H holds (every object of H's chain record on
//! the Lease, wherever it lives, and whatever the fenced label finds in -n, the configured
//! targets' namespaces and each --in; -A everywhere), targets before parents,
//! then the Lease; optionally wait until each released object is Ready for its generation. H's Lease is
//! adopted only when parked or when `--holder-exited` attests its process is gone.

use std::str::FromStr;

use flux_fence::Holder;
use flux_suspend::io::Timing;
use flux_suspend::{Members, ParentSpec, ResumeError, ResumeOptions, resume_holder};
use serde_json::json;

use crate::cli::{Global, ResumeArgs};
use crate::failure::{Failure, chain};
use crate::output::Output;
use crate::{client, config, exit, settings};

pub async fn run(global: &Global, args: &ResumeArgs, out: &mut Output) -> Result<u8, Failure> {
    let holder =
        Holder::from_str(&args.holder).map_err(|e| Failure::usage(format!("--holder: {e}")))?;
    let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
    let mut targets = args.targets.clone();
    if targets.target.is_empty() && file.targets.is_empty() {
        // resume needs no target: it finds the holder's fences. Resolve the rest of the settings.
        targets.target.push("unused".into());
    }
    let settings = settings::resolve(global, &targets, &file).map_err(Failure::usage)?;
    // Where the holder's fences are looked for: -n, the configured targets and parents, --in.
    let mut base = vec![global.namespace.clone()];
    for t in &settings.targets {
        base.push(t.object.namespace.clone());
        if let ParentSpec::Explicit(p) = &t.parent {
            base.push(p.namespace.clone());
        }
    }
    let mut opts = ResumeOptions::new(
        holder.clone(),
        args.find.scope(&base).map_err(Failure::usage)?,
    );
    opts.lease = settings.lease.clone();
    opts.keys = settings.keys.clone();
    opts.listing = args.find.listing();
    opts.holder_exited = args.holder_exited;
    opts.if_held = args.if_held;
    opts.wait_ready = args
        .wait_ready
        .then(|| Timing::new(settings.interval, settings.timeout));
    let client = client::client(global).await?;
    out.cleanup_complete(false);
    let resumed = resume_holder(&client, &opts, |e| out.phase(&e.line(&Members::default())))
        .await
        .map_err(|e| failure(&e, &holder))?;
    if !resumed.lease_released {
        out.note(&format!(
            "{holder} holds neither the Lease {} nor a fence: nothing to do, nothing written",
            opts.lease
        ));
    } else if resumed.released.is_empty() {
        out.note(&format!("{holder} holds no fence"));
    }
    out.fact("released", json!(resumed.released));
    out.cleanup_complete(true);
    if args.wait_ready && !resumed.released.is_empty() {
        out.phase("every released object is Ready");
    }
    Ok(exit::SUCCESS)
}

/// A refusal changed nothing (exit 3; a live holder gets the commands that prove it gone); a
/// release that failed leaves the rest held (exit 7).
fn failure(e: &ResumeError, holder: &Holder) -> Failure {
    match e {
        ResumeError::LooksLive { .. } => Failure::new(
            exit::REFUSED,
            format!(
                "{e} (e.g. a run whose command is still running). Run `flux-handoff fences \
                 recover` to prove it gone by watching the Lease, or, if you know its process \
                 has exited, `flux-handoff resume --holder {holder} --holder-exited`"
            ),
        ),
        ResumeError::FencedWithoutLease { .. } => Failure::new(
            exit::REFUSED,
            format!(
                "{e}. `flux-handoff fences` lists them with the command that releases them \
                 (for {holder})"
            ),
        ),
        e => Failure::new(exit::code(e.class()), chain(e)),
    }
}
