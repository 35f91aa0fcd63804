//! The held Lease's handle: renew and read back before a protected mutation (`assert`),
//! with the read resourceVersion; the holder's deadline; sticky loss; the chain record a held
//! Lease stamps on every renewal ([`super::record`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;

use crate::api::{CallFailure, classify, error, get_retrying};
use crate::lease::config::{LeaseConfig, LossReason};
use crate::lease::deadline::{SelfFence, self_fence};
use crate::lease::decide::{RenewDecision, decide_renew, is_stale, with_holder_duration};
use crate::lease::record::{Pending, RecordedMember};
use crate::{Clock, Epoch, FenceError, Holder, ObjectRef, OwnerValue};

/// How many read-decide-write rounds a Lease call makes before it reports contention.
pub const LEASE_ATTEMPTS: usize = 4;

pub(crate) use crate::api::LEASE_RESOURCE as RESOURCE;

/// The Lease's state as this holder knows it, for [`LeaseHandle::state`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseState {
    /// Held: the last renewal (or the acquire) is within the holder's deadline.
    Held,
    /// Lost, for good (loss is sticky): taken over, deleted, released or parked by this
    /// holder, or the holder's deadline passed without a successful renewal.
    Lost(LossReason),
}

/// A cheap, clonable handle to a held Lease: `assert` it before a protected mutation.
#[derive(Debug, Clone)]
pub struct LeaseHandle(pub(super) Arc<Shared>);

/// What the last successful renewal left behind.
#[derive(Debug)]
pub(super) struct Renewal {
    /// The `renewTime` it wrote, by our wall clock (a clock stepped forward makes the Lease
    /// stale sooner, never later: the deadline on the monotonic clock is what bounds it).
    pub(super) at: Timestamp,
    /// The Lease as the server last answered us (our last write, or the read we adopted it
    /// from): the next renewal is a CAS on its resourceVersion, without reading first. `None`
    /// after a failed write: the next renewal reads.
    pub(super) known: Option<KubeLease>,
}

/// What every clone of a [`LeaseHandle`] shares (the guard builds it, `super::guard`).
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) api: Api<KubeLease>,
    pub(super) cfg: LeaseConfig,
    pub(super) holder: Holder,
    pub(super) epoch: Epoch,
    pub(super) clock: Arc<dyn Clock>,
    /// Serialises renewals (heartbeat and assert), holding the last successful renewal.
    pub(super) renewal: tokio::sync::Mutex<Renewal>,
    /// How many renewals have begun (each takes the next number).
    pub(super) begun: AtomicU64,
    /// The number of the latest renewal that succeeded (0: none yet).
    pub(super) proven: AtomicU64,
    pub(super) lost: Mutex<Option<LossReason>>,
    /// Tells [`LeaseHandle::wait_lost`] and [`LeaseHandle::state`]'s receivers the moment
    /// `lost` is set.
    pub(super) lost_tx: tokio::sync::watch::Sender<LeaseState>,
    /// The instant (monotonic) the last successful renewal was *sent*: the holder's
    /// deadline counts from it (`super::deadline`).
    pub(super) renewed: tokio::sync::watch::Sender<tokio::time::Instant>,
    /// The work's SIGTERM-to-SIGKILL grace ([`LeaseHandle::set_kill_grace`]).
    pub(super) kill_grace: Mutex<std::time::Duration>,
    /// The chain record stamped on every renewal (`super::record`).
    pub(super) record: Pending,
}

/// The holder's stop times as instants of the monotonic clock (`SelfFence` from the send
/// instant of the last successful renewal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Deadline {
    /// The work is stopped (SIGTERM).
    pub stop_work: tokio::time::Instant,
    /// The work is hurried (SIGKILL).
    pub kill_work: tokio::time::Instant,
    /// The holder's Lease ends: every later assert fails, no request is waited for past it.
    pub ends: tokio::time::Instant,
}

impl LeaseHandle {
    /// Renews the Lease and reads back our holder at our epoch.
    ///
    /// # Guarantees
    /// `Ok` means the server recorded us as holder at our epoch at some moment after this call
    /// began: either this call's own renewal, or a concurrent one that was sent after this
    /// call began (callers asserting at once share one renewal). Loss is sticky: once lost
    /// (another holder, another epoch, deleted, or not renewed within the duration by our
    /// clock), every later call returns [`FenceError::LeaseLost`].
    ///
    /// A renewal is ONE update carrying the resourceVersion of the Lease as the server last
    /// answered us: if anyone wrote the Lease since, the server refuses it (409) and the next
    /// round reads and decides afresh ([`decide_renew`]), so nothing is taken on a stale view.
    ///
    /// # Errors
    /// [`FenceError::LeaseLost`]; an API failure (the Lease is not marked lost for it, but a
    /// renewal failing for longer than the duration is).
    pub async fn assert(&self) -> Result<(), FenceError> {
        let s = &self.0;
        self.check_lost()?;
        let asked = s.begun.load(Ordering::SeqCst);
        let mut last = s.renewal.lock().await;
        self.check_lost()?;
        // A renewal numbered above `asked` began after this call did; if it succeeded, the
        // server named us holder after this call began.
        if s.proven.load(Ordering::SeqCst) > asked {
            return Ok(());
        }
        let number = s.begun.fetch_add(1, Ordering::SeqCst) + 1;
        let target = format!("{}/{}", s.cfg.namespace, s.cfg.name);
        // No request of this renewal is waited for past the holder's deadline: a hung API
        // server ends it there, and the Lease counts as lost by our own clock.
        let ends = self.deadline().ends;
        let past_deadline = || self.mark_lost(LossReason::SelfFenced);
        for _ in 0..LEASE_ATTEMPTS {
            let now = s.clock.now();
            if tokio::time::Instant::now() >= ends {
                return Err(past_deadline());
            }
            if is_stale(last.at, now, s.cfg.duration) {
                return Err(self.mark_lost(LossReason::Stale));
            }
            let read = if let Some(known) = last.known.take() {
                Some(known)
            } else {
                let left = ends.saturating_duration_since(tokio::time::Instant::now());
                let read = read_lease(&s.api, &s.cfg.name, &target, left);
                tokio::time::timeout_at(ends, read)
                    .await
                    .map_err(|_| past_deadline())??
            };
            let mut lease = match decide_renew(read.as_ref(), &s.holder, s.epoch, now) {
                RenewDecision::Lost(reason) => return Err(self.mark_lost(reason)),
                // Our own duration, over any edit of `leaseDurationSeconds` since.
                RenewDecision::Renew(lease) => Box::new(with_holder_duration(*lease, &s.cfg)),
            };
            s.record.stamp(&mut lease, &self.owner(), &target)?;
            let params = crate::api::post_params();
            let sent = tokio::time::Instant::now();
            let write = s.api.replace(&s.cfg.name, &params, &lease);
            let written = tokio::time::timeout_at(ends, write)
                .await
                .map_err(|_| past_deadline())?;
            match written {
                Ok(written) => {
                    // Read back: the server's answer must name us at our epoch.
                    if let RenewDecision::Lost(reason) =
                        decide_renew(Some(&written), &s.holder, s.epoch, now)
                    {
                        return Err(self.mark_lost(reason));
                    }
                    last.at = now;
                    last.known = Some(written);
                    s.renewed.send_if_modified(|at| {
                        let later = sent > *at;
                        if later {
                            *at = sent;
                        }
                        later
                    });
                    s.proven.store(number, Ordering::SeqCst);
                    return Ok(());
                }
                Err(e) => match classify(&e) {
                    CallFailure::Conflict | CallFailure::Unknown => {}
                    CallFailure::NotFound => return Err(self.mark_lost(LossReason::Deleted)),
                    _ => return Err(error("update", RESOURCE.into(), target, e)),
                },
            }
        }
        Err(FenceError::Contended {
            what: "lease renewal",
        })
    }

    /// The epoch this holder holds.
    #[must_use]
    pub fn epoch(&self) -> Epoch {
        self.0.epoch
    }

    /// The holder.
    #[must_use]
    pub fn holder(&self) -> &Holder {
        &self.0.holder
    }

    /// `holder;epoch`, the value fences carry.
    #[must_use]
    pub fn owner(&self) -> OwnerValue {
        OwnerValue::new(self.0.holder.clone(), self.0.epoch)
    }

    /// Why the Lease was lost, once it was (a deadline passed counts, by our clock).
    #[must_use]
    pub fn lost(&self) -> Option<LossReason> {
        let lost = self
            .0
            .lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if lost.is_none() && tokio::time::Instant::now() >= self.deadline().ends {
            self.mark_lost(LossReason::SelfFenced);
            return self.lost();
        }
        lost
    }

    /// Counts the Lease lost by the holder's own deadline ([`LossReason::SelfFenced`]) now,
    /// whatever this process's clock or a renewal answered later says. For a process that
    /// keeps the deadline on a clock of its own and stopped the work at it (the command's
    /// keeper, on `CLOCK_BOOTTIME`): work stopped for the deadline is never reported as work
    /// that ended by itself. A reason noticed earlier stays.
    pub fn fence_self(&self) {
        let _ = self.mark_lost(LossReason::SelfFenced);
    }

    /// The holder's stop times, from the send instant of the last successful renewal
    /// (`super::deadline::self_fence` with the grace of
    /// [`LeaseHandle::set_kill_grace`]). Moves later with each successful renewal.
    #[must_use]
    pub fn deadline(&self) -> Deadline {
        let sent = *self.0.renewed.borrow();
        let grace = *self
            .0
            .kill_grace
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let SelfFence {
            stop_work,
            kill_work,
            ends,
        } = self_fence(self.0.cfg.duration, grace);
        Deadline {
            stop_work: sent + stop_work,
            kill_work: sent + kill_work,
            ends: sent + ends,
        }
    }

    /// The send instant of the last successful renewal, as a [`tokio::sync::watch::Receiver`]:
    /// it changes with each renewal, so [`Self::deadline`] moves then. A process that keeps
    /// the holder's deadline elsewhere (the command's keeper) follows it from here.
    #[must_use]
    pub fn renewals(&self) -> tokio::sync::watch::Receiver<tokio::time::Instant> {
        self.0.renewed.subscribe()
    }

    /// Sets how long the work needs between SIGTERM and SIGKILL, so
    /// [`LeaseHandle::wait_lost`] resolves early enough for the SIGKILL to land before the
    /// holder's deadline (default zero: it resolves at the kill time).
    pub fn set_kill_grace(&self, grace: std::time::Duration) {
        *self
            .0
            .kill_grace
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = grace;
    }

    pub(crate) fn pending(&self) -> &Pending {
        &self.0.record
    }

    /// The Lease, `namespace/name`.
    #[must_use]
    pub fn lease_name(&self) -> String {
        self.0.cfg.to_string()
    }

    /// The holder's max-hold ([`LeaseConfig::max_hold`]): each fence taken under this Lease
    /// records it.
    #[must_use]
    pub fn max_hold(&self) -> Option<std::time::Duration> {
        self.0.cfg.max_hold
    }

    fn check_lost(&self) -> Result<(), FenceError> {
        self.lost()
            .map_or(Ok(()), |reason| Err(FenceError::LeaseLost { reason }))
    }

    /// Resolves once the Lease is lost (taken over, deleted, released by this holder), with
    /// the reason, at once if it already is — or, by our own monotonic clock, at
    /// [`Deadline::stop_work`] when no renewal succeeded in time, whatever requests are still
    /// pending: then the Lease is marked lost with [`LossReason::SelfFenced`]. No request is
    /// sent: loss is noticed by the heartbeat, by every [`LeaseHandle::assert`] and by this
    /// timer.
    pub async fn wait_lost(&self) -> LossReason {
        let mut rx = self.0.lost_tx.subscribe();
        let mut renewed = self.0.renewed.subscribe();
        loop {
            if let Some(reason) = self.lost() {
                return reason;
            }
            let stop = self.deadline().stop_work;
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The sender lives in `Shared`, which `self` keeps alive: not reached.
                        std::future::pending::<()>().await;
                    }
                }
                _ = renewed.changed() => {}
                () = tokio::time::sleep_until(stop) => {
                    if tokio::time::Instant::now() >= self.deadline().stop_work {
                        let _ = self.mark_lost(LossReason::SelfFenced);
                    }
                }
            }
        }
    }

    /// The Lease's state as a [`tokio::sync::watch::Receiver`], beside [`Self::wait_lost`]:
    /// [`LeaseState::Held`] until the Lease is lost, then [`LeaseState::Lost`] with the reason,
    /// for good. The change is sent the moment the loss is noticed: by the heartbeat, any
    /// [`Self::assert`], or the holder's deadline ([`Deadline::ends`], the moment
    /// [`Self::lost`] counts it) passing while the guard's heartbeat runs, whatever requests
    /// are pending. [`Self::wait_lost`] resolves earlier, at [`Deadline::stop_work`], to stop
    /// the work in time; use it to bound work, the receiver to observe.
    #[must_use]
    pub fn state(&self) -> tokio::sync::watch::Receiver<LeaseState> {
        // A deadline already past is counted before the receiver is handed out.
        let _ = self.lost();
        self.0.lost_tx.subscribe()
    }

    /// Marks the Lease lost ([`LossReason::SelfFenced`]) when [`Deadline::ends`] passes with
    /// no renewal moving it, exactly when [`Self::lost`] would count it; returns once lost.
    pub(super) async fn expire_at_deadline(&self) {
        let mut lost = self.0.lost_tx.subscribe();
        let mut renewed = self.0.renewed.subscribe();
        while self.lost().is_none() {
            let ends = self.deadline().ends;
            tokio::select! {
                _ = lost.changed() => {}
                _ = renewed.changed() => {}
                () = tokio::time::sleep_until(ends) => {}
            }
        }
    }

    fn mark_lost(&self, reason: LossReason) -> FenceError {
        let mut lost = self.0.lost.lock().unwrap_or_else(PoisonError::into_inner);
        let reason = lost.get_or_insert(reason).clone();
        self.0
            .lost_tx
            .send_replace(LeaseState::Lost(reason.clone()));
        if reason != LossReason::Released {
            tracing::error!(lease = %self.0.cfg.name, holder = %self.0.holder, %reason, "lease lost");
        }
        FenceError::LeaseLost { reason }
    }

    /// Records `obj` on the Lease under `key` and asserts the Lease: `Ok` means the server
    /// recorded us as holder at our epoch, with `obj` in the record, at a moment after this
    /// call began. Call it before every fence write ([`crate::Fencer`] does).
    ///
    /// # Errors
    /// As [`LeaseHandle::assert`], and [`FenceError::ChainRecorded`] when the Lease carries a
    /// record this holder may not replace.
    pub async fn record(&self, key: &str, obj: &ObjectRef) -> Result<(), FenceError> {
        let m = RecordedMember::of(obj);
        let added = self.pending().add(key, &m);
        let asserted = self.assert().await;
        if added && matches!(asserted, Err(FenceError::ChainRecorded { .. })) {
            // Never recorded, so never fenced: later renewals must not keep failing on it.
            self.pending().forget(&m);
        }
        asserted
    }

    /// Says that every member recorded under `owner` (a record this holder took over, e.g. in
    /// a recovery, or its own) is released or provably not fenced: the release of the Lease
    /// may then clear that record. No I/O.
    pub fn settle_record(&self, key: &str, owner: &str) {
        self.pending().settle(key, owner);
    }

    /// The members this holder recorded, in order.
    #[must_use]
    pub fn recorded(&self) -> Vec<RecordedMember> {
        self.pending().members()
    }
}

/// Reads the Lease (`None` on 404), sending the read again with backoff while it fails
/// transiently (refused or broken connection, 429, 5xx) and `budget` lasts, as
/// [`crate::Fencer::read`] does: acquire, assert, release and park all read through here, so
/// one refused connection neither fails a run's start nor leaves the Lease held at its end.
pub(crate) async fn read_lease(
    api: &Api<KubeLease>,
    name: &str,
    target: &str,
    budget: std::time::Duration,
) -> Result<Option<KubeLease>, FenceError> {
    get_retrying(api, name, &target, budget)
        .await
        .map_err(|e| error("get", RESOURCE.into(), target.to_string(), e))
}
