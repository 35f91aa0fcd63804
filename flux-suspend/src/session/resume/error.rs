//! Why a resume by holder did not finish ([`ResumeError`]), and the kind of each failure.

use flux_fence::{ErrorClass, FenceError, Holder, ObjectRef};

use crate::error::SuspendError;

/// Why a resume by holder did not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    /// The holder holds the Lease without having parked it and its exit is not attested: it
    /// looks live (a run whose work is still going on). Nothing was written.
    #[error(
        "lease {lease} is held by {holder}, not parked: {holder} looks live; nothing was changed"
    )]
    LooksLive {
        /// The Lease.
        lease: String,
        /// The holder.
        holder: Holder,
    },
    /// Another holder has the Lease. Nothing was written.
    #[error("lease {lease} is held by {other}, not {holder}")]
    OtherHolder {
        /// The Lease.
        lease: String,
        /// The holder asked for.
        holder: Holder,
        /// The holder found.
        other: String,
    },
    /// Another party moved the Lease on every attempt. Nothing was written.
    #[error("lease {lease} not acquired: another party changed it on every attempt; try again")]
    Contended {
        /// The Lease.
        lease: String,
    },
    /// Reading or adopting failed before anything was released.
    #[error(transparent)]
    Fence(#[from] FenceError),
    /// Something could not be released: it stays fenced, and the Lease stays held with it.
    #[error("{0}")]
    Release(#[source] SuspendError),
    /// Everything was released but the Lease.
    #[error("lease not released: {0}")]
    LeaseNotReleased(String),
    /// Stopped (a signal) before anything was written. Nothing was written.
    #[error("interrupted before anything was written; nothing was changed")]
    Cancelled,
    /// Resume by object: no object was named. Nothing was written.
    #[error("no object named")]
    NoObject,
    /// Resume by object: a named object is missing, unfenced or carries a malformed fence.
    /// Nothing was written.
    #[error("{object}: {found}; nothing was changed")]
    NotFenced {
        /// The object.
        object: Box<ObjectRef>,
        /// What its read showed instead of a holder's fence.
        found: crate::session::ObjectFence,
    },
    /// Resume by object: the named objects are fenced by different holders (each listed
    /// with its objects). Nothing was written.
    #[error(
        "fenced by different holders: {}; resume each holder by itself (`resume --holder H`); \
         nothing was changed",
        by_holder(holders)
    )]
    Holders {
        /// Each holder, with the named objects it fences.
        holders: Vec<(Holder, Vec<ObjectRef>)>,
    },
    /// With [`ResumeOptions::if_held`](super::ResumeOptions::if_held): the holder does not hold the Lease but still fences
    /// these objects. Nothing was written.
    #[error(
        "{holder} still fences {} but does not hold lease {lease}; nothing was changed",
        listed(fences)
    )]
    FencedWithoutLease {
        /// The Lease.
        lease: String,
        /// The holder.
        holder: Holder,
        /// The objects it fences.
        fences: Vec<ObjectRef>,
    },
    /// The holder's fences name different Leases (or a Lease that is no `namespace/name`):
    /// none can be adopted for all of them. Nothing was written.
    #[error(
        "{holder}'s fences were taken under different leases ({}): resume each lease's fences with --lease; nothing was changed",
        leases.join(", ")
    )]
    Leases {
        /// The holder.
        holder: Holder,
        /// The Leases its fences name.
        leases: Vec<String>,
    },
    /// With [`ResumeOptions::holder_exited`](super::ResumeOptions::holder_exited): a keeper of the holder's on this machine still
    /// had its command's processes after the bound (the holder's process may have exited, its
    /// work has not). Nothing was written.
    #[cfg(target_os = "linux")]
    #[error("{0}; nothing was changed")]
    WorkStillRunning(#[from] crate::command::WorkStillRunning),
}

impl ResumeError {
    /// Whether nothing was changed (a refusal, or a failure before any write).
    #[must_use]
    pub fn nothing_changed(&self) -> bool {
        !matches!(self, Self::Release(_) | Self::LeaseNotReleased(_))
    }

    /// The kind of this failure ([`ErrorClass`]): a refusal changed nothing; a release that
    /// failed left something held.
    #[must_use]
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::Fence(f) => f.class(),
            Self::Cancelled => ErrorClass::Cancelled,
            e if e.nothing_changed() => ErrorClass::Refused,
            _ => ErrorClass::Cleanup,
        }
    }
}

/// `Kind ns/a, Kind ns/b`.
fn listed(objects: &[ObjectRef]) -> String {
    objects
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `h1 (Kind ns/a, Kind ns/b), h2 (Kind ns/c)`.
fn by_holder(holders: &[(Holder, Vec<ObjectRef>)]) -> String {
    holders
        .iter()
        .map(|(h, objects)| format!("{h} ({})", listed(objects)))
        .collect::<Vec<_>>()
        .join(", ")
}
