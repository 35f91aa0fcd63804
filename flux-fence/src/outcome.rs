//! The outcomes of [`crate::Fencer`] calls: expected results are values, not errors.

use crate::FenceGuard;
use crate::decide::Unclear;
use crate::mark::MarkAt;

/// The outcome of [`crate::Fencer::acquire`].
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "a refused or unconfirmed acquire is a value: check it before writing"]
pub enum AcquireOutcome {
    /// Fenced (or our identical fence was already there).
    Acquired(FenceGuard),
    /// Another owner is present; `holder` is its owner annotation value as read.
    Refused {
        /// The owner annotation value found.
        holder: String,
    },
    /// Our owner value is present with other marks; nothing was written.
    OursDiffers,
    /// An exclusive mark was already set by someone else; nothing was written.
    AlreadyMarked {
        /// The mark.
        at: MarkAt,
    },
    /// The object does not exist.
    NotFound,
    /// Another writer moved the object on every attempt (`api::MAX_ATTEMPTS`).
    Contended,
    /// A response was lost and the re-read could not confirm the outcome. The guard is kept
    /// (unconfirmed) so cleanup can release with a CAS.
    Ambiguous {
        /// The guard-equivalent of the unconfirmed fence.
        guard: FenceGuard,
        /// What the re-read showed.
        why: Unclear,
    },
}

/// The outcome of one acquire write ([`crate::Fencer::apply_acquire`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum Applied {
    /// The patch applied (or a lost response was adopted).
    Acquired(FenceGuard),
    /// A `test` failed (422) or a precondition conflicted (409): re-read and decide again.
    Moved,
    /// 404 on write.
    Gone,
    /// Lost response, unresolved (see [`AcquireOutcome::Ambiguous`]).
    Ambiguous {
        /// The guard-equivalent.
        guard: FenceGuard,
        /// What the re-read showed.
        why: Unclear,
    },
}

/// The outcome of [`crate::Fencer::resolve_lost_acquire`].
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "an unresolved write keeps the fence unconfirmed: check it"]
pub enum LostAcquire {
    /// The object shows exactly our post-state: the write landed.
    Landed(FenceGuard),
    /// The object is unchanged since the plan's read: the write did not land.
    NotApplied,
    /// Anything else; fails closed, keeping the guard-equivalent.
    Unresolved {
        /// The guard-equivalent (unconfirmed).
        guard: FenceGuard,
        /// What the re-read showed.
        why: Unclear,
    },
}

/// The outcome of [`crate::Fencer::release`].
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "a release that kept the fence is a value: report it"]
pub enum ReleaseOutcome {
    /// Released; marks restored.
    Released {
        /// The resourceVersion after the release (`None` if adopted after a lost response).
        resource_version: Option<String>,
        /// `Some(pause)`: another writer had set the pause back to `false` (a person's `flux
        /// resume`), the only exact mark that moved; the release kept their value, restored
        /// the other marks and removed the fence ([`crate::release::ReleaseMarks::resumed`]).
        kept_resume: Option<MarkAt>,
    },
    /// The object is gone.
    Gone,
    /// The object was deleted and recreated: the new object was not touched.
    Recreated,
    /// The owner annotation is not ours (any more); nothing was written.
    NotOurs {
        /// The owner annotation value found.
        holder: Option<String>,
    },
    /// Not released; the guard comes back so the caller can report or retry.
    Kept {
        /// The guard, still armed.
        guard: Box<FenceGuard>,
        /// Why.
        why: Kept,
    },
}

/// Why a release kept the fence.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kept {
    /// Another writer changed a [`crate::mark::Restore::Exact`] mark.
    MarkMoved {
        /// The mark.
        at: MarkAt,
    },
    /// The object moved on every attempt.
    Contended,
    /// The response was lost and the re-read still shows our fence.
    Unknown,
}
