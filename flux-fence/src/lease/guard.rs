//! The held Lease: the guard that owns its heartbeat and ends it with one last write
//! (release or park), settling a write whose answer was lost before it says what happened.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::Client;
use kube::api::Api;
use tokio::task::JoinHandle;

use crate::api::{CallFailure, classify, error};
use crate::lease::config::{LeaseConfig, LossReason};
use crate::lease::decide::{
    LeaseReleaseDecision, decide_lease_park, decide_lease_release, release_landed,
};
use crate::lease::handle::{
    LEASE_ATTEMPTS, LeaseHandle, LeaseState, RESOURCE, Renewal, Shared, read_lease,
};
use crate::lease::record::Pending;
use crate::{Clock, Epoch, FenceError, Holder, OwnerValue};

/// The held Lease. `release` consumes it; dropping it stops the heartbeat and logs an error
/// (the Lease then expires by itself but is never taken over without `recover`).
#[derive(Debug)]
pub struct LeaseGuard {
    handle: LeaseHandle,
    heartbeat: JoinHandle<()>,
    released: bool,
}

/// The outcome of [`LeaseGuard::release`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "a Lease not released is a value: report it"]
pub enum LeaseRelease {
    /// The holder was cleared.
    Released,
    /// The Lease is gone.
    Gone,
    /// The Lease is not ours at our epoch; nothing was written.
    NotOurs {
        /// The holder found.
        holder: Option<String>,
    },
    /// Another party moved it on every attempt.
    Contended,
    /// The last attempt's answer was lost (a timeout, a reset, a gateway's 504): the write may
    /// still land, or not. Either is safe after the fences were released (a late release only
    /// clears our holder); until then the Lease looks held, and recovery takes it after the
    /// holder's full duration.
    Unanswered,
}

impl std::fmt::Display for LeaseRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Released => f.write_str("released"),
            Self::Gone => f.write_str("the Lease is gone"),
            Self::NotOurs { holder: Some(h) } => write!(f, "not ours: held by {h}"),
            Self::NotOurs { holder: None } => f.write_str("not ours: free at another epoch"),
            Self::Contended => f.write_str("another party changed it on every attempt"),
            Self::Unanswered => f.write_str(
                "no answer came on the last attempt (the write may still land; until then the \
                 Lease looks held)",
            ),
        }
    }
}

impl LeaseGuard {
    pub(crate) fn start(
        client: Client,
        cfg: LeaseConfig,
        holder: Holder,
        epoch: Epoch,
        clock: Arc<dyn Clock>,
        sent: tokio::time::Instant,
    ) -> Self {
        let api = Api::namespaced(client, &cfg.namespace);
        let every = cfg.renew_every;
        let at = clock.now();
        let shared = Shared {
            api,
            cfg,
            holder,
            epoch,
            clock,
            renewal: tokio::sync::Mutex::new(Renewal { at, known: None }),
            begun: AtomicU64::new(0),
            proven: AtomicU64::new(0),
            lost: Mutex::new(None),
            lost_tx: tokio::sync::watch::Sender::new(LeaseState::Held),
            renewed: tokio::sync::watch::Sender::new(sent),
            kill_grace: Mutex::new(std::time::Duration::ZERO),
            record: Pending::default(),
        };
        let handle = LeaseHandle(Arc::new(shared));
        let beat = handle.clone();
        let heartbeat = tokio::spawn(async move {
            let renew = async {
                loop {
                    tokio::time::sleep(every).await;
                    match beat.assert().await {
                        Ok(()) => tracing::debug!(holder = %beat.holder(), "lease renewed"),
                        Err(FenceError::LeaseLost { .. }) => break,
                        Err(e) => tracing::warn!(error = %e, "lease renewal failed; retrying"),
                    }
                }
            };
            // Beside the renewals (which may hang in a request): the deadline passing is a
            // loss the moment it passes, for `state` receivers too.
            tokio::select! {
                () = renew => {}
                () = beat.expire_at_deadline() => {}
            }
        });
        Self {
            handle,
            heartbeat,
            released: false,
        }
    }

    /// Stops the heartbeat of a guard that never became the caller's (an adoption whose first
    /// renewal failed): no I/O, no log.
    pub(crate) fn discard(mut self) {
        self.heartbeat.abort();
        self.released = true;
    }

    /// Remembers `lease` as the server's last answer, so the first renewal needs no read.
    pub(crate) fn knowing(self, lease: Option<KubeLease>) -> Self {
        if let Ok(mut r) = self.handle.0.renewal.try_lock() {
            r.known = lease;
        }
        self
    }

    /// See [`LeaseHandle::assert`].
    ///
    /// # Errors
    /// As [`LeaseHandle::assert`].
    pub async fn assert(&self) -> Result<(), FenceError> {
        self.handle.assert().await
    }

    /// The epoch (fencing token) of this holder.
    #[must_use]
    pub fn epoch(&self) -> Epoch {
        self.handle.epoch()
    }

    /// `holder;epoch`.
    #[must_use]
    pub fn owner(&self) -> OwnerValue {
        self.handle.owner()
    }

    /// A clonable handle for asserting from elsewhere (e.g. [`crate::Fencer::with_lease`]).
    #[must_use]
    pub fn handle(&self) -> LeaseHandle {
        self.handle.clone()
    }

    /// Stops the heartbeat and leaves the Lease held by our holder without any mark (e.g. a run
    /// whose cleanup could not release its fences: the held Lease keeps other handoffs out,
    /// and once it expires fence recovery treats the run as gone). No I/O.
    pub fn leave_held(mut self) {
        self.heartbeat.abort();
        self.released = true;
        let reason = self
            .handle
            .0
            .lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(LossReason::Released)
            .clone();
        self.handle.0.lost_tx.send_replace(LeaseState::Lost(reason));
    }

    /// Stops the heartbeat and deliberately leaves the Lease held by our holder, marked with
    /// annotation `parked_key` = holder (CAS on the read resourceVersion), e.g. for
    /// `flux-handoff pause`. It is not renewed any more, so it soon looks expired; the mark
    /// tells fence discovery and recovery that this is a deliberate pause, not a crashed run.
    /// [`crate::Lease::acquire`] with the same holder adopts it again (a later `resume --holder`).
    ///
    /// # Errors
    /// An API failure (a Lease that kept moving is [`LeaseRelease::Contended`]).
    pub async fn park(self, parked_key: &str) -> Result<LeaseRelease, FenceError> {
        // A park whose answer was lost is written again after the re-read (still ours at our
        // epoch): the same annotation, a CAS on the new resourceVersion.
        self.finish(
            "parked",
            |read, holder, epoch| decide_lease_park(read, holder, epoch, parked_key),
            |_, _| false,
        )
        .await
    }

    /// Stops the heartbeat and clears the holder and the parked mark
    /// ([`LeaseConfig::parked_key`]), only if the Lease is still ours at our epoch (update
    /// carrying the read resourceVersion).
    ///
    /// # Guarantees
    /// After this call every [`LeaseHandle::assert`] fails with [`LossReason::Released`].
    ///
    /// # Errors
    /// An API failure.
    ///
    /// # Caveats
    /// Release fences before the Lease: fences carry the epoch, not a liveness check.
    pub async fn release(self) -> Result<LeaseRelease, FenceError> {
        let parked_key = self.handle.0.cfg.parked_key.clone();
        let handle = self.handle.clone();
        self.finish(
            "released",
            |read, holder, epoch| {
                // The chain record goes with the release only when settled (`super::record`).
                let decided = decide_lease_release(read, holder, epoch, &parked_key);
                handle.pending().on_release(decided, &handle.owner())
            },
            release_landed,
        )
        .await
    }

    /// The last write of this guard: stops the heartbeat, makes every later assert fail, then
    /// re-reads and writes what `decide` says (an update carrying the read resourceVersion)
    /// while the Lease is still ours at our epoch. After a write whose answer was lost, a
    /// re-read that `landed` says shows our write is taken as done.
    async fn finish(
        mut self,
        done: &'static str,
        decide: impl Fn(Option<&KubeLease>, &Holder, Epoch) -> LeaseReleaseDecision,
        landed: impl Fn(Option<&KubeLease>, Epoch) -> bool,
    ) -> Result<LeaseRelease, FenceError> {
        self.heartbeat.abort();
        self.released = true;
        let s = &self.handle.0;
        let mut renewal = s.renewal.lock().await;
        // From here on no handle asserts successfully, whatever the outcome.
        let reason = s
            .lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(LossReason::Released)
            .clone();
        s.lost_tx.send_replace(LeaseState::Lost(reason));
        let target = format!("{}/{}", s.cfg.namespace, s.cfg.name);
        let mut ambiguous = false;
        for _ in 0..LEASE_ATTEMPTS {
            // The first round decides on the server's last answer to us and writes a CAS on its
            // resourceVersion: a 409 sends the next round to read.
            let read = match renewal.known.take() {
                Some(known) => Some(known),
                None => {
                    read_lease(&s.api, &s.cfg.name, &target, crate::api::READ_RETRY_BUDGET).await?
                }
            };
            if ambiguous && landed(read.as_ref(), s.epoch) {
                tracing::info!(lease = %target, holder = %s.holder, "lease {done} (the answer was lost; the re-read shows it)");
                return Ok(LeaseRelease::Released);
            }
            let lease = match decide(read.as_ref(), &s.holder, s.epoch) {
                LeaseReleaseDecision::Gone => return Ok(LeaseRelease::Gone),
                LeaseReleaseDecision::NotOurs { holder } => {
                    return Ok(LeaseRelease::NotOurs { holder });
                }
                LeaseReleaseDecision::Update(lease) => lease,
            };
            match s
                .api
                .replace(&s.cfg.name, &crate::api::post_params(), &lease)
                .await
            {
                Ok(_) => {
                    tracing::info!(lease = %target, holder = %s.holder, "lease {done}");
                    return Ok(LeaseRelease::Released);
                }
                Err(e) => match classify(&e) {
                    CallFailure::Conflict => ambiguous = false,
                    CallFailure::Unknown => ambiguous = true,
                    _ => return Err(error("update", RESOURCE.into(), target, e)),
                },
            }
        }
        Ok(if ambiguous {
            LeaseRelease::Unanswered
        } else {
            LeaseRelease::Contended
        })
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.heartbeat.abort();
        if !self.released {
            tracing::error!(holder = %self.handle.holder(), epoch = %self.handle.epoch(), "lease guard dropped without release");
        }
    }
}
