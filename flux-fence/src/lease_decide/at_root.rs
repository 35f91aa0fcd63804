//! [`LeaseConfig`] and [`LossReason`], defined here so that their one public path is the
//! crate root's re-export; their methods stay in `lease_decide.rs`.

use std::time::Duration;

/// Where the Lease lives and how long it lasts. Build it with [`LeaseConfig::new`] (or
/// [`Default`]) and the `with_` methods, or set the public fields; it may grow fields.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseConfig {
    /// Namespace (default `flux-system`).
    pub namespace: String,
    /// Name (default `flux-handoff`).
    pub name: String,
    /// `leaseDurationSeconds` (whole seconds, at least 1; default 60 s).
    pub duration: Duration,
    /// Heartbeat interval; keep it well below `duration` (default 15 s).
    pub renew_every: Duration,
    /// The Lease annotation that marks a parked pause (default
    /// `flux-handoff.io/parked`). Taking a free Lease, recovering one and releasing one remove
    /// it, so a parked mark never outlives the pause it marks (a later holder of the same name
    /// must not look parked). It must equal [`crate::AnnotationKeys::parked`]: whatever takes
    /// both ([`crate::recovery::adopt_holder`], [`crate::recovery::Recovery::new`], and
    /// flux-suspend's session) sets it from the keys, so a custom prefix cannot split them.
    pub parked_key: String,
    /// The Lease annotation recording the holder's own duration (default
    /// `flux-handoff.io/duration`), written with `leaseDurationSeconds` on every acquire,
    /// take-over, recovery and renewal (`with_holder_duration`). It must equal
    /// [`crate::AnnotationKeys::duration`]: set both keys with [`LeaseConfig::with_keys`].
    pub(crate) duration_key: String,
    /// How long the holder means to hold the Lease and its fences (`--max-hold`): written as
    /// annotation [`Self::max_hold_key`] with every write of the holder and as a mark of each
    /// fence taken under it, so listings can name a pause held longer as overdue
    /// ([`crate::recovery::overdue`]). `None` (the default) writes none and removes one a
    /// previous holder left. Nothing is ever released because time ran out.
    pub max_hold: Option<Duration>,
    /// The annotation of [`Self::max_hold`] (default `flux-handoff.io/max-hold`). It must equal
    /// [`crate::AnnotationKeys::max_hold`]: set both keys with [`LeaseConfig::with_keys`].
    pub max_hold_key: String,
}

/// Why a Lease counts as lost. Sticky once seen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The Lease was deleted.
    Deleted,
    /// Another holder (or none) is recorded.
    HolderChanged {
        /// The holder found.
        holder: Option<String>,
    },
    /// Our holder at another epoch (the Lease changed hands in between).
    EpochChanged,
    /// We did not renew within the lease duration, so another party may have recovered it.
    Stale,
    /// No renewal succeeded in time by our own monotonic clock: the holder's deadline
    /// (`lease_deadline`) came, whatever requests were still pending, and the holder
    /// stopped its work before recovery could take the Lease over.
    SelfFenced,
    /// We released it.
    Released,
}
