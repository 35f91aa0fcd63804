//! How a session ends when it does not succeed, and what its cleanup left.

use flux_fence::{ErrorClass, FenceError, LossReason, ObjectRef};

use crate::error::SuspendError;

/// Why a session did not complete. Each variant says whether anything was changed, so a caller
/// can map it to its own codes (the `flux-handoff` binary: see its exit-code table).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// An option is invalid; no request was sent.
    #[error("{0}")]
    Invalid(String),
    /// Another holder has a member of the chain, the Lease, or set a mark we need; nothing was
    /// changed. `why` says who holds what ([`super::Refusal`]); its text is the `Display`.
    #[error("{object}: {why}")]
    Refused {
        object: Subject,
        why: super::Refusal,
    },
    /// Another holder has the Lease; nothing was changed. `expired`: it looks expired and the
    /// Lease as read shows it not parked — what `fences recover` acts on
    /// ([`flux_fence::recovery::what_ends`]); a parked pause is
    /// [`super::Refusal::LeaseParked`], never this.
    #[error("lease {lease} is held by {holder}{}", held_words(holder, *expired))]
    LeaseHeld {
        lease: String,
        holder: String,
        expired: bool,
    },
    /// Another holder refused us only after this session had written (a fence on a parent);
    /// what it wrote was released again (see the cleanup).
    #[error("{object}: {why} (found after this run had fenced the chain above it)")]
    RefusedAfterWrites {
        object: Subject,
        why: super::Refusal,
    },
    /// A read before anything was taken failed; nothing was changed.
    #[error("reading {object}")]
    Read {
        object: Box<ObjectRef>,
        #[source]
        source: kube::Error,
    },
    /// A target (or its parent) does not exist; nothing was changed.
    #[error("{0} not found (is the Flux CRD installed?)")]
    NotFound(Box<ObjectRef>),
    /// The Lease could not be acquired or written.
    #[error("the lease")]
    Lease(#[source] FenceError),
    /// The Lease was lost while the session held it: the work (if running) was stopped.
    #[error("the lease was lost ({0}): the work was stopped")]
    LeaseLost(LossReason),
    /// The pause failed (a timeout, an API error, a fence failure).
    #[error(transparent)]
    Pause(#[from] SuspendError),
    /// Stopped by [`crate::Cancel`]; `changed` says whether anything had been taken.
    #[error("interrupted {during}")]
    Cancelled { during: String, changed: bool },
    /// Stopped while the Lease create or update was in flight and it did not answer in time:
    /// the Lease may be held by this holder until it expires.
    #[error(
        "interrupted while taking the lease, and the API server did not answer in time: the \
         lease may be held by {holder} until it expires"
    )]
    StartCutShort { holder: String },
    /// The caller's work failed.
    #[error("{0}")]
    Work(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The caller's work panicked (the pause was still released).
    #[error("the work panicked: {0}")]
    WorkPanicked(String),
    /// The Lease could not be parked after a proven pause: the fences stay, and the Lease will
    /// look like a crashed run's once it expires.
    #[error("the pause is in place but the lease {lease} could not be parked: {why}")]
    NotParked { lease: String, why: String },
    /// The pause was broken while the work ran (a fence removed, an owner changed, an object
    /// deleted or recreated, `spec.suspend` set to false): the work was stopped, and the
    /// cleanup released what was still ours.
    #[error(transparent)]
    PauseBroken(super::watch::BrokenPause),
    /// Cleanup could not give back everything; `after` is the error that ended the session
    /// before cleanup, if any.
    #[error("{cleanup}")]
    Cleanup {
        cleanup: CleanupError,
        after: Option<Box<SessionError>>,
    },
}

/// What ends a Lease held by `holder` that did not park it, as `fences recover` judges it.
fn held_words(holder: &str, expired: bool) -> &'static str {
    use flux_fence::recovery::{Ending, Hold, what_ends};
    match what_ends(&Hold::new(holder, Some(holder)).unrenewed(expired)) {
        Ending::Recover { .. } => {
            ", which stopped renewing it and did not park it: `fences recover` releases it once \
             it stays unwritten for its full duration"
        }
        // Renewing (or not known otherwise): `fences` shows its liveness and what ends it.
        _ => "",
    }
}

/// What a refusal names: a member of the chain, or the coordination Lease.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Subject {
    /// A target, a parent or a gate.
    Object(Box<ObjectRef>),
    /// The Lease, `namespace/name`.
    Lease(String),
}

impl Subject {
    /// The Lease `lease` (`namespace/name`, or a [`flux_fence::LeaseConfig`]).
    pub(crate) fn lease(lease: impl std::fmt::Display) -> Self {
        Self::Lease(lease.to_string())
    }

    /// The object, when this names one.
    #[must_use]
    pub fn object(&self) -> Option<&ObjectRef> {
        match self {
            Self::Object(o) => Some(o),
            Self::Lease(_) => None,
        }
    }
}

impl From<&ObjectRef> for Subject {
    fn from(o: &ObjectRef) -> Self {
        Self::Object(Box::new(o.clone()))
    }
}

/// `Kind namespace/name` for an object, `lease namespace/name` for the Lease.
impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Object(o) => write!(f, "{o}"),
            Self::Lease(l) => write!(f, "lease {l}"),
        }
    }
}

/// What a cleanup could not give back.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "cleanup incomplete ({why}); still held or unsettled: {}{}",
    held.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
    lease.as_ref().map(|l| format!(" and the lease {l}")).unwrap_or_default()
)]
#[non_exhaustive]
pub struct CleanupError {
    /// Objects that may still carry our fence, in release order.
    pub held: Vec<ObjectRef>,
    /// The Lease, when it was left held (never released while a fence may be held).
    pub lease: Option<String>,
    /// Why, one line.
    pub why: String,
    /// Each release withheld because another writer changed a mark other than the pause
    /// alone since the fence: the object (its fence stays) and the mark.
    pub withheld: Vec<(ObjectRef, flux_fence::mark::MarkAt)>,
    /// Whether `held` includes an object a fence write of ours was sent to whose answer was
    /// lost and could not be settled (named in `why`): it may still land, so the Lease was
    /// kept. Then the cleanup failure is what the run reports (exit 7), whatever failed
    /// before it.
    pub unsettled: bool,
}

impl SessionError {
    /// The kind of this failure ([`ErrorClass`]): a refusal found only after writes is
    /// [`ErrorClass::KubeApi`] (what was written was undone), a start cut short or a pause that
    /// could not be parked is [`ErrorClass::Cleanup`].
    #[must_use]
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::Invalid(_) => ErrorClass::BadInput,
            Self::Refused { .. } | Self::LeaseHeld { .. } => ErrorClass::Refused,
            Self::PauseBroken(_) => ErrorClass::PauseBroken,
            Self::Lease(f) => f.class(),
            Self::Pause(p) => p.class(),
            Self::Cancelled { .. } => ErrorClass::Cancelled,
            Self::StartCutShort { .. } | Self::NotParked { .. } | Self::Cleanup { .. } => {
                ErrorClass::Cleanup
            }
            Self::Work(_) | Self::WorkPanicked(_) => ErrorClass::Internal,
            _ => ErrorClass::KubeApi,
        }
    }

    /// Whether the session had changed anything on the cluster when it ended this way.
    #[must_use]
    pub fn changed_nothing(&self) -> bool {
        match self {
            Self::Invalid(_) | Self::Refused { .. } | Self::Read { .. } | Self::NotFound(_) => true,
            Self::Cancelled { changed, .. } => !changed,
            _ => false,
        }
    }
}
