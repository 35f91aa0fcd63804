//! `flux-handoff resume --holder H`: release what H holds, targets before parents, then the
//! Lease; optionally wait until each released object is Ready for its generation.

use std::str::FromStr;
use std::sync::Arc;

use flux_fence::discover::FoundState;
use flux_fence::lease_decide::{ResumeDecision, decide_resume};
use flux_fence::{Fencer, Holder, Lease, LeaseAcquire, LeaseRelease, discover};
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
    let client = client::client(global).await?;

    refuse_live_holder(&client, &settings, &holder).await?;

    // Re-take the Lease as the same holder (it is adopted at its epoch), so no other handoff
    // starts while we release.
    let lease = match Lease::acquire(
        client.clone(),
        settings.lease.clone(),
        holder.clone(),
        Arc::new(flux_fence::SystemClock),
    )
    .await?
    {
        LeaseAcquire::Acquired(g) => g,
        LeaseAcquire::Held { holder: other, .. } => {
            return Err(Failure::new(
                exit::REFUSED,
                format!(
                    "lease {}/{} is held by {other}, not {holder}",
                    settings.lease.namespace, settings.lease.name
                ),
            ));
        }
        // Contended (another party moved it on every attempt), or a later variant.
        _ => {
            return Err(Failure::new(
                exit::REFUSED,
                format!(
                    "lease {}/{} not acquired: another party changed it on every attempt; try again",
                    settings.lease.namespace, settings.lease.name
                ),
            ));
        }
    };
    let report = discover::discover(
        &client,
        &settings.keys,
        &[kustomization_resource(), helmrelease_resource()],
        &discover::Scope::All,
        None,
        &flux_fence::SystemClock,
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

/// Never adopt a live holder: its run is still working under these fences (the Lease is
/// adopted at the same epoch, so nothing would stop that run). `decide_resume` decides.
async fn refuse_live_holder(
    client: &kube::Client,
    settings: &settings::Settings,
    holder: &Holder,
) -> Result<(), Failure> {
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), &settings.lease.namespace);
    let read = leases.get_opt(&settings.lease.name).await.map_err(|e| {
        Failure::new(
            exit::KUBE_API,
            format!(
                "lease {}/{}: cannot read it: {e}",
                settings.lease.namespace, settings.lease.name
            ),
        )
    })?;
    if let ResumeDecision::Refuse(live) = decide_resume(
        read.as_ref(),
        holder,
        &settings.keys.parked,
        flux_fence::Clock::now(&flux_fence::SystemClock),
    ) {
        return Err(Failure::new(
            exit::REFUSED,
            format!(
                "{} is live: it holds lease {}/{}, has not parked it and renews it; resume \
                 releases only a parked or ended holder's fences (wait for the run to end, or \
                 stop it and use `flux-handoff fences recover`)",
                live.holder, settings.lease.namespace, settings.lease.name
            ),
        ));
    }
    Ok(())
}
