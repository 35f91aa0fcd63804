//! [`Lease::recover`]: taking a Lease over from a holder the caller proved gone, with ONE CAS
//! on the Lease version the evidence was judged on.

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::Client;
use kube::api::Api;

use crate::api::{CallFailure, classify, error};
use crate::lease::acquire::Lease;
use crate::lease::config::LeaseConfig;
use crate::lease::decide::{
    GoneHolder, LeaseSettle, RecoverDecision, RecoverRefusal, decide_recover,
    decide_recover_settle, transitions,
};
use crate::lease::guard::LeaseGuard;
use crate::lease::handle::{LEASE_ATTEMPTS, RESOURCE, read_lease};
use crate::lease::settle::adopt;
use crate::lease::write::Write;
use crate::{Clock, Epoch, FenceError, Holder};

/// The outcome of [`Lease::recover`].
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "a refused recovery is a value: check it"]
pub enum LeaseRecover {
    /// Taken over from the gone holder, at a new epoch.
    Recovered(LeaseGuard),
    /// Not taken.
    Refused(RecoverRefusal),
    /// Another party moved it on every attempt.
    Contended,
}

impl Lease {
    /// Takes over a Lease whose holder the caller proved gone.
    ///
    /// # Guarantees
    /// Writes only if the Lease names exactly `gone.holder` and is still at
    /// `gone.resource_version` (the version the evidence was judged on), as ONE update carrying
    /// that resourceVersion: a renewal or any other write since makes it
    /// [`RecoverRefusal::Moved`], never a second try on a newer version. The epoch grows by
    /// one, so every fence of the gone holder carries an older epoch and the gone holder's next
    /// renewal finds the Lease lost. `clock` only stamps our `acquireTime`/`renewTime`; it is
    /// never compared with the holder's `renewTime`.
    ///
    /// # Errors
    /// As [`Lease::acquire`].
    pub async fn recover(
        client: Client,
        cfg: LeaseConfig,
        holder: Holder,
        clock: Arc<dyn Clock>,
        gone: GoneHolder,
    ) -> Result<LeaseRecover, FenceError> {
        let api: Api<KubeLease> = Api::namespaced(client.clone(), &cfg.namespace);
        let target = format!("{}/{}", cfg.namespace, cfg.name);
        // A take-over whose answer was lost may still land (lease/settle.rs).
        let mut pending = false;
        for _ in 0..LEASE_ATTEMPTS {
            let read = read_lease(&api, &cfg.name, &target, crate::api::READ_RETRY_BUDGET).await?;
            // A write whose answer was lost may have landed: then the Lease names us. When it
            // was applied is unknown, so the clock starts at a renewal of our own (a CAS on
            // this read), as any adoption does.
            if let Some(epoch) = read.as_ref().and_then(|l| held_by(l, &holder)) {
                tracing::warn!(lease = %target, gone = %gone.holder, evidence = %gone.evidence, %holder, %epoch, "lease recovered (the answer was lost; the re-read shows it)");
                let guard = LeaseGuard::start(
                    client.clone(),
                    cfg.clone(),
                    holder.clone(),
                    epoch,
                    clock.clone(),
                    tokio::time::Instant::now(),
                )
                .knowing(read);
                if let Err(e) = guard.assert().await {
                    guard.discard();
                    return Err(e);
                }
                return Ok(LeaseRecover::Recovered(guard));
            }
            let now = clock.now();
            let sent = tokio::time::Instant::now();
            let write = match decide_recover(read.as_ref(), &cfg, &holder, &gone, now)? {
                RecoverDecision::Refuse(r) => return Ok(LeaseRecover::Refused(r)),
                RecoverDecision::Take(lease) => Write::Update(lease),
            };
            match write
                .send(&api, &cfg.name, &crate::api::post_params())
                .await
            {
                Ok(lease) => {
                    let epoch = Epoch(transitions(&lease.spec.unwrap_or_default())?);
                    tracing::warn!(lease = %target, gone = %gone.holder, evidence = %gone.evidence, %holder, %epoch, "lease recovered");
                    return Ok(LeaseRecover::Recovered(LeaseGuard::start(
                        client, cfg, holder, epoch, clock, sent,
                    )));
                }
                Err(e) => match classify(&e) {
                    // The Lease moved since the evidence: the evidence is void.
                    CallFailure::Conflict => {
                        let found =
                            read_lease(&api, &cfg.name, &target, crate::api::READ_RETRY_BUDGET)
                                .await?
                                .and_then(|l| l.spec?.holder_identity)
                                .unwrap_or_default();
                        return Ok(LeaseRecover::Refused(RecoverRefusal::Moved {
                            holder: found,
                        }));
                    }
                    // The answer was lost: the re-read above tells whether it landed, or
                    // the next take-over (a CAS on the same version) settles it.
                    CallFailure::Unknown => pending = true,
                    _ => return Err(error(write.verb(), RESOURCE.into(), target, e)),
                },
            }
        }
        if !pending {
            return Ok(LeaseRecover::Contended);
        }
        // Every take-over's answer was lost: make them unable to land before concluding.
        settle_lost_take(&client, &cfg, &holder, &clock, &gone).await
    }
}

/// The epoch at which `holder` holds `lease`, if it does.
fn held_by(lease: &KubeLease, holder: &Holder) -> Option<Epoch> {
    let spec = lease.spec.as_ref()?;
    (spec.holder_identity.as_deref() == Some(holder.as_str()))
        .then(|| transitions(spec).ok().map(Epoch))
        .flatten()
}

/// Settles after [`Lease::recover`]'s take-overs all had their answers lost: a lost one
/// lands only while the Lease stays at the evidence's version, so it is moved on by a CAS of
/// ours first ([`decide_recover_settle`]); then the recovery is decided on what is read.
///
/// # Errors
/// API failures; [`FenceError::Contended`] when no write of the settlement was answered in
/// [`LEASE_ATTEMPTS`] rounds (the lost take-over may still land: the caller names it).
async fn settle_lost_take(
    client: &Client,
    cfg: &LeaseConfig,
    holder: &Holder,
    clock: &Arc<dyn Clock>,
    gone: &GoneHolder,
) -> Result<LeaseRecover, FenceError> {
    let api: Api<KubeLease> = Api::namespaced(client.clone(), &cfg.namespace);
    let target = format!("{}/{}", cfg.namespace, cfg.name);
    for _ in 0..LEASE_ATTEMPTS {
        let read = read_lease(&api, &cfg.name, &target, crate::api::READ_RETRY_BUDGET).await?;
        match decide_recover_settle(read.as_ref(), holder, gone, clock.now())? {
            Some(LeaseSettle::Ours { epoch }) => {
                if let Some(guard) = adopt(client, cfg, holder, epoch, clock, read).await? {
                    tracing::warn!(lease = %target, gone = %gone.holder, %holder, %epoch, "lease recovered (the answer was lost; the re-read shows it)");
                    return Ok(LeaseRecover::Recovered(guard));
                }
            }
            Some(LeaseSettle::MoveOn(lease)) => {
                let write = Write::Update(lease);
                if let Err(e) = write
                    .send(&api, &cfg.name, &crate::api::post_params())
                    .await
                {
                    match classify(&e) {
                        CallFailure::Conflict | CallFailure::Unknown | CallFailure::NotFound => {}
                        _ => return Err(error(write.verb(), RESOURCE.into(), target, e)),
                    }
                }
            }
            Some(_) | None => {
                // Past the evidence's version: the lost take-over can no longer land.
                return Ok(
                    match decide_recover(read.as_ref(), cfg, holder, gone, clock.now())? {
                        RecoverDecision::Refuse(r) => LeaseRecover::Refused(r),
                        RecoverDecision::Take(_) => LeaseRecover::Contended,
                    },
                );
            }
        }
    }
    Err(FenceError::Contended {
        what: "settling a Lease take-over whose answer was lost",
    })
}
