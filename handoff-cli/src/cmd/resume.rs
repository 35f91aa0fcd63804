//! `flux-handoff resume --holder H`: release what H holds (found by the fenced label in -n,
//! the configured targets' namespaces and each --in; -A everywhere), targets before parents,
//! then the Lease; optionally wait until each released object is Ready for its generation. H's Lease is
//! adopted only when parked or when `--holder-exited` attests its process is gone.

use std::str::FromStr;
use std::sync::Arc;

use flux_fence::discover::FoundState;
use flux_fence::recovery::{Adoption, HolderProcess, adopt_holder};
use flux_fence::{Fencer, Holder, LeaseGuard, LeaseRelease, discover};
use flux_suspend::Handoff;
use flux_suspend::io::Timing;
use flux_suspend::object::{helmrelease_resource, kustomization_resource};
use serde_json::json;

use crate::cli::{Global, ResumeArgs};
use crate::failure::Failure;
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
        if let settings::ParentSpec::Explicit(p) = &t.parent {
            base.push(p.namespace.clone());
        }
    }
    let scope = args.find.scope(&base).map_err(Failure::usage)?;
    let client = client::client(global).await?;

    let lease = adopt(&client, &settings, &holder, args.holder_exited).await?;
    let report = discover::discover_listed(
        &client,
        &settings.keys,
        &[kustomization_resource(), helmrelease_resource()],
        &scope,
        None,
        &flux_fence::SystemClock,
        args.find.listing(),
    )
    .await?;
    let fencer = Fencer::new(client.clone(), settings.keys.clone(), lease.owner());
    let mut guards = Vec::new();
    for found in &report.fences {
        if let FoundState::Fence { owner, .. } = &found.state
            && owner.holder == holder
            && let Some(g) = fencer.adopt_recorded(&found.object, owner).await?
        {
            guards.push(g);
        }
    }
    if guards.is_empty() {
        out.note(&format!("{holder} holds no fence"));
    }
    let mut handoff = Handoff::adopt(client.clone(), fencer.clone(), guards);
    let wait = args
        .wait_ready
        .then(|| Timing::new(settings.interval, settings.timeout));
    let released = match handoff.resume(wait).await {
        Ok(r) => r,
        Err(e) => {
            // Keep what is still held listed, and the Lease with it.
            let _ = handoff.leave_paused();
            lease.leave_held();
            return Err(Failure::new(exit::CLEANUP, crate::failure::chain(&e)));
        }
    };
    for o in &released.released {
        out.phase(&format!("released: {o}"));
    }
    out.fact("released", json!(released.released));
    match lease.release().await? {
        LeaseRelease::Released | LeaseRelease::Gone => out.phase("lease released"),
        other => {
            return Err(Failure::new(
                exit::CLEANUP,
                format!("lease not released: {other}"),
            ));
        }
    }
    if args.wait_ready && !released.released.is_empty() {
        out.phase("every released object is Ready");
    }
    Ok(exit::SUCCESS)
}

/// Takes the Lease as `holder` (a parked pause, or one whose exit is attested, is adopted at
/// its epoch; a free one is taken), so no other handoff starts while we release. A Lease the
/// holder holds without having parked it looks live: refused, nothing written.
async fn adopt(
    client: &kube::Client,
    settings: &settings::Settings,
    holder: &Holder,
    holder_exited: bool,
) -> Result<LeaseGuard, Failure> {
    let process = if holder_exited {
        HolderProcess::Exited
    } else {
        HolderProcess::Unknown
    };
    let lease_name = settings.lease.to_string();
    let adopted = adopt_holder(
        client.clone(),
        settings.lease.clone(),
        &settings.keys,
        holder.clone(),
        Arc::new(flux_fence::SystemClock),
        process,
    )
    .await?;
    let refused = |line: String| Err(Failure::new(exit::REFUSED, line));
    match adopted {
        Adoption::Adopted(g) => Ok(g),
        Adoption::LooksLive => refused(format!(
            "lease {lease_name} is held by {holder}, not parked: {holder} looks live (e.g. a run \
             whose command is still running); nothing changed. Run `flux-handoff fences recover` \
             to prove it gone by watching the Lease, or, if you know its process has exited, \
             `flux-handoff resume --holder {holder} --holder-exited`"
        )),
        Adoption::OtherHolder { holder: other } => refused(format!(
            "lease {lease_name} is held by {other}, not {holder}"
        )),
        // Contended (another party moved it on every attempt), or a later variant.
        _ => refused(format!(
            "lease {lease_name} not acquired: another party changed it on every attempt; try again"
        )),
    }
}
