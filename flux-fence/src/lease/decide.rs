//! The pure decision core of the coordination Lease: acquire only when free, renew only while
//! ours at our epoch, recover only with evidence, release only while ours.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease as KubeLease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::ObjectMeta;

use crate::lease::config::{LeaseConfig, LossReason};
use crate::{Epoch, FenceError, Holder};

mod duration;
mod settle;
pub use duration::holder_duration;
pub(crate) use duration::with_holder_duration;
pub(crate) use duration::{format_max_hold, parse_max_hold};
pub(crate) use settle::{LeaseSettle, decide_lease_settle, decide_recover_settle};

/// The answer of [`decide_lease_acquire`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LeaseDecision {
    /// The Lease does not exist: create this one (epoch 1).
    Create(Box<KubeLease>),
    /// The Lease has no holder: update it to this (carries the read resourceVersion).
    Take(Box<KubeLease>),
    /// It already names our holder (e.g. after a lost response): it is ours at `epoch`.
    Ours {
        /// The epoch read.
        epoch: Epoch,
    },
    /// Someone else holds it. `expired` says whether it looks expired by our clock; that is
    /// never a reason to take it (see [`decide_recover`]).
    Held {
        /// The holder found.
        holder: String,
        /// Whether `renewTime + leaseDurationSeconds` lies in the past.
        expired: bool,
    },
}

/// The answer of [`decide_renew`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RenewDecision {
    /// Update to this (carries the read resourceVersion).
    Renew(Box<KubeLease>),
    /// It is not ours any more.
    Lost(LossReason),
}

/// Evidence, supplied by the caller, that a holder is gone, judged on one read of the Lease.
///
/// The evidence is bound to the Lease's `resourceVersion` it was judged on (for example the
/// one `Recovery::watch` saw unchanged for a full lease duration, or the one
/// read when a CI system reported the holder's run finished): [`Lease::recover`](crate::Lease::recover)
/// writes only while the Lease is still exactly that version, so any renewal since voids it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GoneHolder {
    /// The holder that is gone; must equal the Lease's holder.
    pub holder: String,
    /// The Lease's `resourceVersion` the evidence was judged on.
    pub resource_version: String,
    /// What proves it, for the log (e.g. `unchanged for 60s while watched`).
    pub evidence: String,
}

impl GoneHolder {
    /// Evidence that `holder` is gone, judged on the Lease at `resource_version`.
    #[must_use]
    pub fn new(
        holder: impl Into<String>,
        resource_version: impl Into<String>,
        evidence: impl Into<String>,
    ) -> Self {
        Self {
            holder: holder.into(),
            resource_version: resource_version.into(),
            evidence: evidence.into(),
        }
    }
}

/// The answer of [`decide_recover`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RecoverDecision {
    /// Update to this (our holder, epoch + 1; carries the read resourceVersion).
    Take(Box<KubeLease>),
    /// Do not write.
    Refuse(RecoverRefusal),
}

/// Why a recovery does not write.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecoverRefusal {
    /// There is no Lease.
    Missing,
    /// The Lease has no holder: acquire it normally.
    Free,
    /// The Lease holder is not the one the evidence names.
    OtherHolder {
        /// The holder found.
        holder: String,
    },
    /// The Lease changed since the evidence was judged (another `resourceVersion`): its
    /// holder renewed it, or another party wrote it. The evidence is void.
    Moved {
        /// The holder found.
        holder: String,
    },
}

/// The answer of [`decide_lease_release`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LeaseReleaseDecision {
    /// Update to this (no holder; carries the read resourceVersion).
    Update(Box<KubeLease>),
    /// The Lease is gone.
    Gone,
    /// The Lease is not ours at our epoch.
    NotOurs {
        /// The holder found.
        holder: Option<String>,
    },
}

/// Decides an acquire on the Lease as read (`None`: not found).
///
/// # Errors
/// [`FenceError::Malformed`] for a negative `leaseTransitions`.
pub fn decide_lease_acquire(
    read: Option<&KubeLease>,
    cfg: &LeaseConfig,
    holder: &Holder,
    now: Timestamp,
) -> Result<LeaseDecision, FenceError> {
    let Some(lease) = read else {
        let lease = KubeLease {
            metadata: ObjectMeta {
                name: Some(cfg.name.clone()),
                namespace: Some(cfg.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(held_spec(&LeaseSpec::default(), cfg, holder, 1, now)),
        };
        return Ok(LeaseDecision::Create(Box::new(with_holder_duration(
            lease, cfg,
        ))));
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let epoch = transitions(&spec)?;
    match spec.holder_identity.as_deref().filter(|h| !h.is_empty()) {
        Some(h) if h == holder.as_str() => Ok(LeaseDecision::Ours {
            epoch: Epoch(epoch),
        }),
        Some(h) => Ok(LeaseDecision::Held {
            holder: h.to_string(),
            expired: is_expired(&spec, now),
        }),
        None => {
            // A free Lease is never parked: a mark left by an older release is dropped, so
            // the new holder (even one of the parked holder's name) does not look parked.
            let mut next = without_parked_mark(lease, &cfg.parked_key);
            next.spec = Some(held_spec(&spec, cfg, holder, epoch + 1, now));
            Ok(LeaseDecision::Take(Box::new(with_holder_duration(
                next, cfg,
            ))))
        }
    }
}

/// Decides a renewal of our Lease at `epoch`: the same Lease with our `renewTime`. The holder
/// also restores its own duration on it (`with_holder_duration`) before writing, so an
/// edited `leaseDurationSeconds` lasts until the next renewal at most.
#[must_use]
pub fn decide_renew(
    read: Option<&KubeLease>,
    holder: &Holder,
    epoch: Epoch,
    now: Timestamp,
) -> RenewDecision {
    match ours(read, holder, epoch) {
        Err(reason) => RenewDecision::Lost(reason),
        Ok(lease) => {
            let mut next = lease.clone();
            let spec = next.spec.get_or_insert_with(LeaseSpec::default);
            spec.renew_time = Some(MicroTime(now));
            RenewDecision::Renew(Box::new(next))
        }
    }
}

/// Whether a holder that last renewed at `last_renewed` must count its Lease as lost.
#[must_use]
pub fn is_stale(last_renewed: Timestamp, now: Timestamp, duration: Duration) -> bool {
    let d = SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX);
    now.duration_since(last_renewed) >= d
}

/// Whether the Lease looks expired: `renewTime` (or `acquireTime`) plus the duration lies at or
/// before `now`. A Lease without either time counts as expired.
#[must_use]
pub fn is_expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    let Some(MicroTime(last)) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return true;
    };
    let secs = u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0);
    is_stale(*last, now, Duration::from_secs(secs))
}

/// Decides an explicit recovery of a Lease held by a holder the caller proved gone.
///
/// # Guarantees
/// Takes the Lease only if its holder is exactly `gone.holder` *and* its `resourceVersion` is
/// exactly the one the evidence was judged on, with an update carrying that resourceVersion.
/// The local wall clock is never compared with the holder's `renewTime` (a clock running ahead
/// would take a live Lease); `now` only stamps `acquireTime` and `renewTime` of our hold.
///
/// # Errors
/// [`FenceError::Malformed`] for a negative `leaseTransitions`.
pub fn decide_recover(
    read: Option<&KubeLease>,
    cfg: &LeaseConfig,
    holder: &Holder,
    gone: &GoneHolder,
    now: Timestamp,
) -> Result<RecoverDecision, FenceError> {
    let Some(lease) = read else {
        return Ok(RecoverDecision::Refuse(RecoverRefusal::Missing));
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let epoch = transitions(&spec)?;
    let refuse = |r| Ok(RecoverDecision::Refuse(r));
    let rv = lease.metadata.resource_version.as_deref();
    match spec.holder_identity.as_deref().filter(|h| !h.is_empty()) {
        None => refuse(RecoverRefusal::Free),
        Some(h) if h != gone.holder => refuse(RecoverRefusal::OtherHolder { holder: h.into() }),
        Some(h) if rv != Some(gone.resource_version.as_str()) => {
            refuse(RecoverRefusal::Moved { holder: h.into() })
        }
        Some(_) => {
            // The recovering holder did not park it: the gone holder's mark goes.
            let mut next = without_parked_mark(lease, &cfg.parked_key);
            next.spec = Some(held_spec(&spec, cfg, holder, epoch + 1, now));
            Ok(RecoverDecision::Take(Box::new(with_holder_duration(
                next, cfg,
            ))))
        }
    }
}

/// Whether a release of our Lease at `epoch` whose answer was lost has landed: the Lease
/// names no holder and its `leaseTransitions` is still our epoch. Any later acquire raises
/// `leaseTransitions`, so an empty holder at our epoch was cleared by our release (or by a
/// recovery of our own run, which ends in the same state).
#[must_use]
pub(crate) fn release_landed(read: Option<&KubeLease>, epoch: Epoch) -> bool {
    let Some(spec) = read.and_then(|l| l.spec.as_ref()) else {
        return false;
    };
    spec.holder_identity.as_deref().is_none_or(str::is_empty)
        && transitions(spec).ok() == Some(epoch.0)
}

/// Decides a release of our Lease at `epoch`: no holder, and no parked mark under
/// `parked_key` (a released pause is no longer parked; a later holder of the same name must
/// not look parked to `resume --holder` or recovery).
#[must_use]
pub fn decide_lease_release(
    read: Option<&KubeLease>,
    holder: &Holder,
    epoch: Epoch,
    parked_key: &str,
) -> LeaseReleaseDecision {
    match ours(read, holder, epoch) {
        Err(LossReason::Deleted) => LeaseReleaseDecision::Gone,
        Err(LossReason::HolderChanged { holder }) => LeaseReleaseDecision::NotOurs { holder },
        Err(_) => LeaseReleaseDecision::NotOurs {
            holder: read.and_then(|l| l.spec.as_ref()?.holder_identity.clone()),
        },
        Ok(lease) => {
            let mut next = without_parked_mark(lease, parked_key);
            let spec = next.spec.get_or_insert_with(LeaseSpec::default);
            spec.holder_identity = None;
            LeaseReleaseDecision::Update(Box::new(next))
        }
    }
}

/// `lease` without annotation `parked_key` (an emptied annotation map is dropped).
fn without_parked_mark(lease: &KubeLease, parked_key: &str) -> KubeLease {
    let mut next = lease.clone();
    if let Some(a) = next.metadata.annotations.as_mut() {
        a.remove(parked_key);
        if a.is_empty() {
            next.metadata.annotations = None;
        }
    }
    next
}

/// Decides parking the Lease: still ours at our epoch, it gets annotation `key` = our holder
/// (an update carrying the read resourceVersion); anything else is not ours to mark.
pub fn decide_lease_park(
    read: Option<&KubeLease>,
    holder: &Holder,
    epoch: Epoch,
    key: &str,
) -> LeaseReleaseDecision {
    match decide_lease_release(read, holder, epoch, key) {
        LeaseReleaseDecision::Update(_) => {
            let Some(lease) = read else {
                return LeaseReleaseDecision::Gone;
            };
            let mut next = lease.clone();
            next.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(key.to_string(), holder.to_string());
            LeaseReleaseDecision::Update(Box::new(next))
        }
        other => other,
    }
}

/// The epoch recorded in a Lease (`leaseTransitions`, absent = 0).
///
/// # Errors
/// [`FenceError::Malformed`] for a negative value.
pub(crate) fn transitions(spec: &LeaseSpec) -> Result<u64, FenceError> {
    let t = spec.lease_transitions.unwrap_or(0);
    u64::try_from(t).map_err(|_| FenceError::malformed("leaseTransitions", &t.to_string()))
}

fn ours<'a>(
    read: Option<&'a KubeLease>,
    holder: &Holder,
    epoch: Epoch,
) -> Result<&'a KubeLease, LossReason> {
    let lease = read.ok_or(LossReason::Deleted)?;
    let spec = lease.spec.as_ref();
    let found = spec
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty());
    if found.as_deref() != Some(holder.as_str()) {
        return Err(LossReason::HolderChanged { holder: found });
    }
    let t = spec
        .map(transitions)
        .transpose()
        .ok()
        .flatten()
        .unwrap_or(0);
    if t != epoch.0 {
        return Err(LossReason::EpochChanged);
    }
    Ok(lease)
}

fn held_spec(
    old: &LeaseSpec,
    cfg: &LeaseConfig,
    holder: &Holder,
    epoch: u64,
    now: Timestamp,
) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(holder.to_string()),
        lease_duration_seconds: Some(cfg.duration_seconds()),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(i32::try_from(epoch).unwrap_or(i32::MAX)),
        ..old.clone()
    }
}

#[cfg(test)]
mod tests;
