//! [`Lease::acquire`]: the coordination Lease taken only when free (create, or update a Lease
//! without holder carrying the read resourceVersion); a write whose answer was lost is settled
//! before it says what happened.

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::Client;
use kube::api::Api;

use crate::api::{CallFailure, classify, error};
use crate::lease::config::LeaseConfig;
use crate::lease::decide::{LeaseDecision, decide_lease_acquire, transitions};
use crate::lease::guard::LeaseGuard;
use crate::lease::handle::{LEASE_ATTEMPTS, RESOURCE, read_lease};
use crate::lease::settle::{Settled, adopt, settle_lost_write};
use crate::lease::write::Write;
use crate::{Clock, Epoch, FenceError, Holder};

/// Entry points for the coordination Lease.
#[derive(Debug, Clone, Copy)]
pub struct Lease;

/// The outcome of [`Lease::acquire`].
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "a held Lease is a value: check it before going on"]
pub enum LeaseAcquire {
    /// Ours; a heartbeat task renews it.
    Acquired(LeaseGuard),
    /// Someone else holds it. `expired` is informational only: it is never taken over here.
    Held {
        /// The holder found.
        holder: String,
        /// Whether it looks expired by our clock.
        expired: bool,
    },
    /// Another party moved it on every attempt, or every answer was lost; in both cases no
    /// write of ours can land any more (a lost one was settled first).
    Contended,
}

impl Lease {
    /// Acquires the Lease only if it is free: creates it if absent (epoch 1), or updates a
    /// Lease without holder carrying the read resourceVersion (epoch = `leaseTransitions` + 1).
    ///
    /// # Guarantees
    /// Never takes over a held Lease, however expired it looks ([`Lease::recover`] does that,
    /// with evidence). A heartbeat task renews every `cfg.renew_every` until release or drop.
    ///
    /// # Errors
    /// [`FenceError::Forbidden`] naming the verb on 403; other API failures.
    ///
    /// Adopting a Lease that already names `holder` (a parked pause resumed, a `--holder`
    /// reused, a create whose answer was lost) renews it first (a CAS on the read): the
    /// holder's deadline ([`crate::LeaseHandle::deadline`]) counts from that renewal's send instant.
    ///
    /// # Caveats
    /// `expired` is judged by the caller's clock against the server-recorded `renewTime`; clock
    /// skew between holders only matters for [`Lease::recover`], which also needs evidence.
    pub async fn acquire(
        client: Client,
        cfg: LeaseConfig,
        holder: Holder,
        clock: Arc<dyn Clock>,
    ) -> Result<LeaseAcquire, FenceError> {
        let api: Api<KubeLease> = Api::namespaced(client.clone(), &cfg.namespace);
        let target = format!("{}/{}", cfg.namespace, cfg.name);
        // A write of ours whose answer was lost, and no write answered since: it may still
        // be applied, after any read (lease/settle.rs).
        let mut pending = false;
        for _ in 0..LEASE_ATTEMPTS {
            let read = read_lease(&api, &cfg.name, &target, crate::api::READ_RETRY_BUDGET).await?;
            let now = clock.now();
            let sent = tokio::time::Instant::now();
            let written = match decide_lease_acquire(read.as_ref(), &cfg, &holder, now)? {
                LeaseDecision::Held { holder, expired } => {
                    // Held by another: it moved past any lost write of ours.
                    return Ok(LeaseAcquire::Held { holder, expired });
                }
                LeaseDecision::Ours { epoch } => {
                    // Adopting our own Lease (a parked pause resumed, a `--holder` reused, a
                    // create whose answer was lost): the server's `renewTime` may be minutes
                    // old, and nothing proves when it was sent. Renew first (a CAS on the
                    // read), so our clock starts at the send instant of our own renewal.
                    match adopt(&client, &cfg, &holder, epoch, &clock, read).await? {
                        Some(guard) => return Ok(LeaseAcquire::Acquired(guard)),
                        // Taken or moved meanwhile: read and decide again.
                        None => continue,
                    }
                }
                LeaseDecision::Create(lease) => Write::Create(lease),
                LeaseDecision::Take(lease) => Write::Update(lease),
            };
            match written
                .send(&api, &cfg.name, &crate::api::post_params())
                .await
            {
                Ok(lease) => {
                    let epoch = Epoch(transitions(&lease.spec.clone().unwrap_or_default())?);
                    tracing::info!(lease = %target, %holder, %epoch, "lease acquired");
                    return Ok(LeaseAcquire::Acquired(
                        LeaseGuard::start(client, cfg, holder, epoch, clock, sent)
                            .knowing(Some(lease)),
                    ));
                }
                Err(e) => match classify(&e) {
                    // Lost the race: re-read and decide again (a lost write of ours before
                    // it would have been refused too, or it landed and the read shows it).
                    CallFailure::Conflict => pending = false,
                    CallFailure::NotFound => {}
                    // The answer was lost: the write may still be applied, after any read.
                    CallFailure::Unknown => pending = true,
                    _ => return Err(error(written.verb(), RESOURCE.into(), target, e)),
                },
            }
        }
        if !pending {
            return Ok(LeaseAcquire::Contended);
        }
        // Every round ended in a lost answer: settle before concluding, so a lost write of
        // ours cannot land after we said "not acquired" and leave the Lease held by nobody
        // alive.
        Ok(
            match settle_lost_write(&client, &cfg, &holder, &clock).await? {
                Settled::Ours(guard) => LeaseAcquire::Acquired(guard),
                Settled::Held { holder, expired } => LeaseAcquire::Held { holder, expired },
                Settled::Free => LeaseAcquire::Contended,
            },
        )
    }
}
