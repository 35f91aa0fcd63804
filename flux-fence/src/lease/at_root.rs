//! [`Lease`], [`LeaseAcquire`], [`LeaseHandle`] and [`LeaseState`], defined here so that
//! their one public path is the crate root's re-export; their methods stay in `lease.rs`.

use std::sync::Arc;

use super::{LeaseGuard, Shared};
use crate::LossReason;

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

/// A cheap, clonable handle to a held Lease: `assert` it before a protected mutation.
#[derive(Debug, Clone)]
pub struct LeaseHandle(pub(super) Arc<Shared>);
