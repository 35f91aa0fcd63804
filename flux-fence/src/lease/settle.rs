//! The thin I/O of settling a Lease write whose answer was lost
//! ([`super::decide::decide_lease_settle`]): read, make the lost write unable to land
//! (create the Lease free, or move it on with a CAS of ours), and only then conclude.

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::Client;
use kube::api::Api;

use crate::api::{CallFailure, classify, error};
use crate::lease::config::LeaseConfig;
use crate::lease::decide::{LeaseSettle, decide_lease_settle};
use crate::lease::guard::LeaseGuard;
use crate::lease::handle::{LEASE_ATTEMPTS, RESOURCE, read_lease};
use crate::lease::write::Write;
use crate::{Clock, Epoch, FenceError, Holder};

/// What a settled Lease is.
#[derive(Debug)]
pub(crate) enum Settled {
    /// A lost write of ours landed: ours, adopted (its first renewal succeeded).
    Ours(LeaseGuard),
    /// Another holder has it.
    Held { holder: String, expired: bool },
    /// Free, and no lost write of ours can land any more.
    Free,
}

/// Adopts the Lease `read` shows held by `holder` at `epoch`: renews it first (a CAS on the
/// read), so the holder's clock starts at the send instant of its own renewal. `None` when it
/// was taken or moved meanwhile (read and decide again).
pub(crate) async fn adopt(
    client: &Client,
    cfg: &LeaseConfig,
    holder: &Holder,
    epoch: Epoch,
    clock: &Arc<dyn Clock>,
    read: Option<KubeLease>,
) -> Result<Option<LeaseGuard>, FenceError> {
    let sent = tokio::time::Instant::now();
    let guard = LeaseGuard::start(
        client.clone(),
        cfg.clone(),
        holder.clone(),
        epoch,
        clock.clone(),
        sent,
    )
    .knowing(read);
    match guard.assert().await {
        Ok(()) => Ok(Some(guard)),
        Err(FenceError::LeaseLost { .. }) => {
            guard.discard();
            Ok(None)
        }
        Err(e) => {
            guard.discard();
            Err(e)
        }
    }
}

/// Settles after a write of ours on the Lease whose answer was lost and no later write was
/// answered: once it returns `Ok`, that write can no longer land.
///
/// # Errors
/// API failures; [`FenceError::Contended`] when no write of the settlement was answered in
/// [`LEASE_ATTEMPTS`] rounds (the lost write may still land: the caller names it).
pub(crate) async fn settle_lost_write(
    client: &Client,
    cfg: &LeaseConfig,
    holder: &Holder,
    clock: &Arc<dyn Clock>,
) -> Result<Settled, FenceError> {
    let api: Api<KubeLease> = Api::namespaced(client.clone(), &cfg.namespace);
    let target = format!("{}/{}", cfg.namespace, cfg.name);
    let mut moved = false;
    for _ in 0..LEASE_ATTEMPTS {
        let read = read_lease(&api, &cfg.name, &target, crate::api::READ_RETRY_BUDGET).await?;
        let write = match decide_lease_settle(read.as_ref(), cfg, holder, moved, clock.now())? {
            LeaseSettle::Ours { epoch } => {
                match adopt(client, cfg, holder, epoch, clock, read).await? {
                    Some(guard) => {
                        tracing::info!(lease = %target, %holder, %epoch, "lease acquired (the answer was lost; the re-read shows it)");
                        return Ok(Settled::Ours(guard));
                    }
                    None => continue,
                }
            }
            LeaseSettle::Held { holder, expired } => {
                return Ok(Settled::Held { holder, expired });
            }
            LeaseSettle::Free => return Ok(Settled::Free),
            LeaseSettle::CreateFree(lease) => Write::Create(lease),
            LeaseSettle::MoveOn(lease) => Write::Update(lease),
        };
        match write
            .send(&api, &cfg.name, &crate::api::post_params())
            .await
        {
            Ok(_) => moved = true,
            Err(e) => match classify(&e) {
                // Moved or created by someone else (or by our lost write): read and decide.
                CallFailure::Conflict | CallFailure::Unknown | CallFailure::NotFound => {}
                _ => return Err(error(write.verb(), RESOURCE.into(), target, e)),
            },
        }
    }
    Err(FenceError::Contended {
        what: "settling a Lease write whose answer was lost",
    })
}
