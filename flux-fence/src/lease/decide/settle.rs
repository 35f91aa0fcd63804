//! Settling a Lease write whose answer was lost. A create or update answered with a timeout,
//! a reset or a gateway's 504 may still be applied later, after any read. So before the writer
//! concludes "not mine", it makes the lost write unable to land: a lost create can only land
//! while the Lease does not exist, so the settler creates it (free); a lost update carries the
//! resourceVersion it was decided on, so the settler moves the Lease on with a CAS of its own.
//! Only then is what it reads final.

use k8s_openapi::api::coordination::v1::{Lease as KubeLease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;

use super::{is_expired, transitions};
use crate::lease::config::LeaseConfig;
use crate::{Epoch, FenceError, Holder};

/// The answer of [`decide_lease_settle`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub(crate) enum LeaseSettle {
    /// The Lease does not exist: a lost create of ours could still land. Create this free
    /// Lease, so it cannot.
    CreateFree(Box<KubeLease>),
    /// The Lease is free and no CAS of ours moved it since the lost write: a lost update of
    /// ours could still land. Update to this (the same free Lease, `renewTime` now; carries the
    /// read resourceVersion), so its precondition fails whenever it arrives.
    MoveOn(Box<KubeLease>),
    /// It names our holder: a lost write of ours landed. Ours at `epoch` (adopt it with a
    /// renewal, a CAS that also moves it on).
    Ours {
        /// The epoch read.
        epoch: Epoch,
    },
    /// Someone else holds it: it moved past any lost write of ours. Final.
    Held {
        /// The holder found.
        holder: String,
        /// Whether it looks expired by our clock (informational).
        expired: bool,
    },
    /// Free, and a CAS or create of ours was applied after the lost write was sent: the lost
    /// write can no longer land. Final.
    Free,
}

/// Decides the next step of settling a lost acquire of the Lease (a create, or a take-over of
/// a free Lease) on the Lease as read (`None`: not found). Such a write lands only on an absent
/// Lease or a free one at the version it names, so a Lease held by another is final. `moved`
/// says whether a write of ours (a [`LeaseSettle::CreateFree`] or
/// [`LeaseSettle::MoveOn`]) was answered as applied since the lost write was sent.
///
/// # Errors
/// [`FenceError::Malformed`] for a negative `leaseTransitions`.
pub(crate) fn decide_lease_settle(
    read: Option<&KubeLease>,
    cfg: &LeaseConfig,
    holder: &Holder,
    moved: bool,
    now: Timestamp,
) -> Result<LeaseSettle, FenceError> {
    let Some(lease) = read else {
        let free = KubeLease {
            metadata: ObjectMeta {
                name: Some(cfg.name.clone()),
                namespace: Some(cfg.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(now)),
                ..LeaseSpec::default()
            }),
        };
        return Ok(LeaseSettle::CreateFree(Box::new(free)));
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let epoch = transitions(&spec)?;
    Ok(
        match spec.holder_identity.as_deref().filter(|h| !h.is_empty()) {
            Some(h) if h == holder.as_str() => LeaseSettle::Ours {
                epoch: Epoch(epoch),
            },
            Some(h) => LeaseSettle::Held {
                holder: h.to_string(),
                expired: is_expired(&spec, now),
            },
            None if moved => LeaseSettle::Free,
            None => {
                // Nothing but `renewTime` changes: an update that changes nothing would not
                // move the resourceVersion on.
                let mut next = lease.clone();
                next.spec.get_or_insert_with(LeaseSpec::default).renew_time = Some(MicroTime(now));
                LeaseSettle::MoveOn(Box::new(next))
            }
        },
    )
}

/// Decides the next step of settling a lost take-over by [`crate::Lease::recover`], on the
/// Lease as read. Such a write lands only while the Lease is still at the version the evidence
/// was judged on (`gone.resource_version`): at that version, move it on with a CAS of ours
/// that writes only `renewTime` ([`LeaseSettle::MoveOn`]; the gone holder keeps its name and
/// epoch, and only looks renewed, which can only lengthen another recovery's wait). At any
/// other version, the lost write can no longer land: [`LeaseSettle::Ours`] if it landed,
/// otherwise `None` (decide the recovery again on the read).
///
/// # Errors
/// [`FenceError::Malformed`] for a negative `leaseTransitions`.
pub(crate) fn decide_recover_settle(
    read: Option<&KubeLease>,
    holder: &Holder,
    gone: &super::GoneHolder,
    now: Timestamp,
) -> Result<Option<LeaseSettle>, FenceError> {
    let Some(lease) = read else {
        return Ok(None);
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let epoch = transitions(&spec)?;
    if spec.holder_identity.as_deref() == Some(holder.as_str()) {
        return Ok(Some(LeaseSettle::Ours {
            epoch: Epoch(epoch),
        }));
    }
    if lease.metadata.resource_version.as_deref() != Some(gone.resource_version.as_str()) {
        return Ok(None);
    }
    let mut next = lease.clone();
    next.spec.get_or_insert_with(LeaseSpec::default).renew_time = Some(MicroTime(now));
    Ok(Some(LeaseSettle::MoveOn(Box::new(next))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, rv: &str) -> KubeLease {
        KubeLease {
            metadata: ObjectMeta {
                name: Some("flux-handoff".into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(Into::into),
                lease_transitions: Some(3),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_lost_lease_write_is_made_unable_to_land_before_anything_is_concluded() {
        let cfg = LeaseConfig::new("ns", "flux-handoff");
        let me = Holder::local("me", 1);
        let now = Timestamp::now();
        let decide = |read: Option<&KubeLease>, moved| {
            decide_lease_settle(read, &cfg, &me, moved, now).unwrap()
        };
        // Absent: a lost create could land; make the Lease exist, free.
        let LeaseSettle::CreateFree(free) = decide(None, false) else {
            panic!("absent")
        };
        assert_eq!(free.metadata.name.as_deref(), Some("flux-handoff"));
        assert_eq!(free.spec.as_ref().unwrap().holder_identity, None);
        assert!(matches!(decide(None, true), LeaseSettle::CreateFree(_)));
        // Free and not moved by us: a lost update could land; a CAS of ours on this read.
        let read = lease(None, "7");
        let LeaseSettle::MoveOn(next) = decide(Some(&read), false) else {
            panic!("free")
        };
        assert_eq!(next.metadata.resource_version.as_deref(), Some("7"));
        let spec = next.spec.as_ref().unwrap();
        assert_eq!(spec.holder_identity, None);
        assert_eq!(spec.renew_time, Some(MicroTime(now)));
        assert_ne!(
            next.spec, read.spec,
            "an unchanged update would not move it on"
        );
        // Free after a write of ours was applied: final.
        assert_eq!(decide(Some(&read), true), LeaseSettle::Free);
        // Ours: a lost write landed.
        let mine = lease(Some(me.as_str()), "8");
        for moved in [false, true] {
            assert_eq!(
                decide(Some(&mine), moved),
                LeaseSettle::Ours { epoch: Epoch(3) }
            );
        }
        // Another holder: it moved past anything of ours.
        let theirs = lease(Some("other"), "9");
        assert!(matches!(
            decide(Some(&theirs), false),
            LeaseSettle::Held { holder, .. } if holder == "other"
        ));
    }

    #[test]
    fn a_lost_take_over_is_settled_only_while_the_evidence_version_stands() {
        let me = Holder::local("me", 1);
        let now = Timestamp::now();
        let gone = super::super::GoneHolder::new("gone", "7", "watched");
        let decide =
            |read: Option<&KubeLease>| decide_recover_settle(read, &me, &gone, now).unwrap();
        let LeaseSettle::MoveOn(next) = decide(Some(&lease(Some("gone"), "7"))).unwrap() else {
            panic!("at the evidence version")
        };
        let spec = next.spec.as_ref().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("gone"));
        assert_eq!(spec.lease_transitions, Some(3));
        assert_eq!(spec.renew_time, Some(MicroTime(now)));
        assert_eq!(next.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(
            decide(Some(&lease(Some(me.as_str()), "8"))),
            Some(LeaseSettle::Ours { epoch: Epoch(3) })
        );
        assert_eq!(decide(Some(&lease(Some("gone"), "8"))), None);
        assert_eq!(decide(Some(&lease(None, "8"))), None);
        assert_eq!(decide(None), None);
    }
}
