//! [`LeaseConfig`] (where the Lease lives and how long it lasts) and [`LossReason`] (why a
//! held Lease counts as lost): plain values, public at the crate root.

use std::fmt;
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
    /// (`super::deadline`) came, whatever requests were still pending, and the holder
    /// stopped its work before recovery could take the Lease over.
    SelfFenced,
    /// We released it.
    Released,
}

/// `namespace/name`.
impl std::fmt::Display for LeaseConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            namespace: "flux-system".into(),
            name: "flux-handoff".into(),
            duration: Duration::from_mins(1),
            renew_every: Duration::from_secs(15),
            parked_key: crate::AnnotationKeys::default().parked,
            duration_key: crate::AnnotationKeys::default().duration,
            max_hold: None,
            max_hold_key: crate::AnnotationKeys::default().max_hold,
        }
    }
}

impl LeaseConfig {
    /// The Lease `namespace/name`, with the default duration, heartbeat and parked key.
    #[must_use]
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            ..Self::default()
        }
    }

    /// The Lease's `leaseDurationSeconds` (whole seconds, at least 1).
    #[must_use]
    pub fn with_duration(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }

    /// The heartbeat interval; keep it well below the duration.
    #[must_use]
    pub fn with_renew_every(mut self, renew_every: Duration) -> Self {
        self.renew_every = renew_every;
        self
    }

    /// The Lease annotation keys ([`Self::parked_key`], `duration_key`,
    /// [`Self::max_hold_key`]) from `keys`.
    #[must_use]
    pub fn with_keys(mut self, keys: &crate::AnnotationKeys) -> Self {
        self.parked_key.clone_from(&keys.parked);
        self.duration_key.clone_from(&keys.duration);
        self.max_hold_key.clone_from(&keys.max_hold);
        self
    }

    /// How long the holder means to hold ([`Self::max_hold`]); `None` for no limit.
    #[must_use]
    pub fn with_max_hold(mut self, max_hold: Option<Duration>) -> Self {
        self.max_hold = max_hold;
        self
    }

    /// `leaseDurationSeconds` as the API wants it (rounded up, at least 1).
    #[must_use]
    pub fn duration_seconds(&self) -> i32 {
        let secs = self.duration.as_secs() + u64::from(self.duration.subsec_nanos() > 0);
        i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Deleted => f.write_str("the Lease was deleted"),
            Self::HolderChanged { holder: Some(h) } => write!(f, "the Lease is held by {h}"),
            Self::HolderChanged { holder: None } => f.write_str("the Lease has no holder"),
            Self::EpochChanged => f.write_str("the Lease changed hands"),
            Self::Stale => f.write_str("not renewed within the lease duration"),
            Self::SelfFenced => f.write_str(
                "not renewed before the holder's own deadline (the API server did not answer \
                 in time); the holder fenced itself",
            ),
            Self::Released => f.write_str("the Lease was released"),
        }
    }
}
