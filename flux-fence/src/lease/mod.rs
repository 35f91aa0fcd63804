//! The coordination Lease: one holder at a time, whose epoch (`leaseTransitions`) is the
//! fencing token every fence carries.
//!
//! Acquired only when free ([`crate::Lease::acquire`]), taken over only with evidence that the
//! holder is gone ([`crate::Lease::recover`]), renewed by a heartbeat and before each protected
//! mutation ([`crate::LeaseHandle::assert`]), ended by one last write
//! ([`crate::LeaseGuard::release`], [`crate::LeaseGuard::park`]). Every write is a CAS on the
//! Lease as read; a write whose answer was lost is settled before anything is concluded.
//!
//! The files, each depending only on those listed before it:
//!
//! - `config`: [`crate::LeaseConfig`] and [`crate::LossReason`], plain values.
//! - `deadline`: the holder's own deadline, pure offsets from a renewal's send instant.
//! - `decide`: the pure decisions ([`decide_lease_acquire`], [`decide_renew`],
//!   [`decide_recover`], [`decide_lease_release`], ...), with their tables.
//! - `write`: one create or CAS update as a decision gives it, sent for real or dry.
//! - `record`: the chain record a holder keeps on its Lease ([`ChainRecord`]).
//! - `handle`: [`crate::LeaseHandle`], renewal and sticky loss.
//! - `guard`: [`crate::LeaseGuard`], the heartbeat and the last write.
//! - `settle`: settling a write whose answer was lost.
//! - `acquire`, `recover`: [`crate::Lease`]'s two ways in.

pub(crate) mod acquire;
pub(crate) mod config;
mod deadline;
pub(crate) mod decide;
pub(crate) mod guard;
pub(crate) mod handle;
pub(crate) mod record;
mod recover;
mod settle;
pub(crate) mod write;

pub use decide::{
    GoneHolder, LeaseDecision, LeaseReleaseDecision, RecoverDecision, RecoverRefusal,
    RenewDecision, decide_lease_acquire, decide_lease_park, decide_lease_release, decide_recover,
    decide_renew, holder_duration, is_expired, is_stale,
};
pub use guard::LeaseRelease;
pub use handle::{Deadline, LEASE_ATTEMPTS};
pub use record::{
    ChainRecord, RecordedFences, RecordedMember, merge_found, read_members, read_record,
};
pub use recover::LeaseRecover;
