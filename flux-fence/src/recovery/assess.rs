//! Judging each fence found by discovery: whose is it, does its holder look live, is it a
//! child (released first) or a parent, and can a release be justified. Pure.

use std::fmt;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use crate::discover::{
    FenceReport, FoundFence, FoundLease, FoundState, ReleasePlan, inspect_lease,
};
use crate::lease::decide::holder_duration;
use crate::mark::MarkAt;
use crate::mark::RecordedMark;
use crate::{AnnotationKeys, FenceError, ObjectRef};

/// How a child (a handoff target, released before its parents) is recognised among the marks
/// a fence recorded. The caller says: flux-fence knows nothing of Flux. `flux-handoff` passes
/// `kustomize.toolkit.fluxcd.io/reconcile: disabled`.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildMark {
    at: MarkAt,
    value: Value,
}

impl ChildMark {
    /// A fence is a child when it marked annotation `key` with `value`.
    #[must_use]
    pub fn annotation(key: &str, value: &str) -> Self {
        Self {
            at: MarkAt::Annotation(key.to_string()),
            value: Value::String(value.to_string()),
        }
    }

    /// A fence is a child when it marked the field at JSON pointer `path` with `value`.
    #[must_use]
    pub fn field(path: &str, value: Value) -> Self {
        Self {
            at: MarkAt::Field(path.to_string()),
            value,
        }
    }

    /// Whether a fence with these recorded marks is a child.
    #[must_use]
    pub(crate) fn is_child(&self, marks: &[RecordedMark]) -> bool {
        marks
            .iter()
            .any(|m| m.at == self.at && m.value == self.value)
    }
}

/// The Lease as read: discovery's view, its duration and the exact version read.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LeaseView {
    /// As discovered (`expired` there is judged by the reader's wall clock: a hint for
    /// listing, never recovery evidence).
    pub found: FoundLease,
    /// The holder's duration ([`holder_duration`]: the longer of `leaseDurationSeconds` and
    /// the holder's own record), `None` when neither is set.
    pub duration: Option<Duration>,
    /// `metadata.resourceVersion` of the read.
    pub resource_version: Option<String>,
    /// The holder's max-hold ([`AnnotationKeys::max_hold`]), when it wrote one.
    pub max_hold: Option<Duration>,
}

impl LeaseView {
    /// Describes a Lease as read; `now` only feeds the listing hint `found.expired`.
    ///
    /// # Errors
    /// [`FenceError::Malformed`] for a negative `leaseTransitions`.
    pub(crate) fn from_lease(
        lease: &KubeLease,
        keys: &AnnotationKeys,
        now: Timestamp,
    ) -> Result<Self, FenceError> {
        Ok(Self {
            found: inspect_lease(lease, keys, now)?,
            duration: Some(holder_duration(lease, keys)).filter(|d| !d.is_zero()),
            resource_version: lease.metadata.resource_version.clone(),
            max_hold: lease
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(&keys.max_hold))
                .and_then(|v| crate::lease::decide::parse_max_hold(v)),
        })
    }

    /// When the Lease looks expired (last renewal + duration), when both are known. A hint
    /// for people: it compares the holder's clock with ours.
    #[must_use]
    pub(crate) fn expires_at(&self) -> Option<Timestamp> {
        let last = self.found.renewed.or(self.found.acquired)?;
        let d = SignedDuration::try_from(self.duration?).ok()?;
        last.checked_add(d).ok()
    }
}

/// Whether a fence's holder looks alive, with the evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Liveness {
    /// The holder holds the Lease and does not look gone.
    Live {
        /// The Lease's last renewal, as the holder recorded it.
        renewed: Option<Timestamp>,
        /// Set when we watched the Lease change: how long into the watch.
        renewed_while_watched: Option<Duration>,
    },
    /// The holder parked the Lease on purpose (`flux-handoff pause`): it stopped renewing, but
    /// a later `resume --holder` is expected. Not evidence of a crashed run.
    Paused,
    /// Nothing shows the holder alive.
    Orphaned(Orphan),
    /// The fence was taken under another Lease (`namespace/name`): only that Lease says
    /// whether its holder lives, so it is not judged here.
    OtherLease(String),
}

impl Liveness {
    /// `LIVE`, `PAUSED` or `ORPHANED-LOOKING`.
    #[must_use]
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Self::Live { .. } => "LIVE",
            Self::Paused => "PAUSED",
            Self::Orphaned(_) => "ORPHANED-LOOKING",
            Self::OtherLease(_) => "OTHER-LEASE",
        }
    }
}

/// Why a holder looks (or was proved) gone.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Orphan {
    /// The Lease does not exist.
    NoLease,
    /// The Lease has no holder.
    LeaseFree,
    /// Another holder has the Lease.
    OtherHolder(String),
    /// A deliberate pause that the operator asked to release (`--include-paused`).
    PausedReleased,
    /// Listing hint only: the holder has the Lease but its `renewTime` plus duration lies in
    /// the past by the reader's wall clock. Never used by recovery.
    Expired {
        /// When it expired (renewTime + leaseDurationSeconds), when known.
        at: Option<Timestamp>,
        /// The last renewal.
        renewed: Option<Timestamp>,
    },
    /// Recovery evidence: the Lease kept the same `resourceVersion` for a full lease duration
    /// while we watched it on our own monotonic clock.
    Unrenewed {
        /// How long we watched.
        watched: Duration,
        /// The version that did not change.
        resource_version: String,
    },
    /// Recovery evidence from outside the cluster (e.g. the holder's CI run finished).
    Reported(String),
}

impl fmt::Display for Orphan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoLease => f.write_str("the Lease does not exist"),
            Self::LeaseFree => f.write_str("the Lease has no holder"),
            Self::OtherHolder(h) => write!(f, "the Lease is held by {h}"),
            Self::Expired { at: Some(at), .. } => {
                write!(f, "lease expired at {at}; holder's renew stopped")
            }
            Self::Expired { at: None, .. } => f.write_str("lease expired; holder's renew stopped"),
            Self::PausedReleased => {
                f.write_str("a deliberate pause, released on request (--include-paused)")
            }
            Self::Unrenewed {
                watched,
                resource_version,
            } => write!(
                f,
                "lease unchanged (resourceVersion {resource_version}) for {}s while watched; holder's renew stopped",
                watched.as_secs()
            ),
            Self::Reported(e) => f.write_str(e),
        }
    }
}

/// Judges `holder` against the Lease as read, for listing: expiry here is the reader's
/// wall-clock hint ([`Orphan::Expired`]); recovery judges with `recovery::plan_recover`.
#[must_use]
pub(crate) fn liveness(holder: &str, lease: Option<&LeaseView>) -> Liveness {
    let Some(l) = lease else {
        return Liveness::Orphaned(Orphan::NoLease);
    };
    match l.found.holder.as_deref() {
        None => Liveness::Orphaned(Orphan::LeaseFree),
        Some(h) if h != holder => Liveness::Orphaned(Orphan::OtherHolder(h.to_string())),
        Some(_) if l.found.parked => Liveness::Paused,
        Some(_) if l.found.expired => Liveness::Orphaned(Orphan::Expired {
            at: l.expires_at(),
            renewed: l.found.renewed,
        }),
        Some(_) => Liveness::Live {
            renewed: l.found.renewed,
            renewed_while_watched: None,
        },
    }
}

/// What can be done with one fence.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub(crate) enum Action {
    /// It can be released with this CAS patch on the object as observed (compact JSON).
    Release {
        /// The JSON Patch a release would send.
        patch: String,
    },
    /// No release can be justified now.
    Withheld(Withhold),
}

/// Why a release is withheld.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Withhold {
    /// A parent whose children the same holder still holds.
    ChildrenHeld {
        /// The holder.
        holder: String,
        /// The children still held.
        children: Vec<ObjectRef>,
    },
    /// An exact mark moved since the fence.
    MarkMoved(MarkAt),
    /// Taken under another Lease (`namespace/name`): judged only with that Lease.
    OtherLease(String),
    /// The owner or prior annotation does not parse.
    Malformed {
        /// The owner annotation as found.
        owner: String,
        /// What is wrong.
        problem: String,
    },
}

/// One fence, judged.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub(crate) struct Row {
    /// The object.
    pub object: ObjectRef,
    /// The holder (`None` for a malformed owner annotation).
    pub holder: Option<String>,
    /// The epoch of the fence.
    pub epoch: Option<u64>,
    /// How long it has been held.
    pub age: Option<Duration>,
    /// A child (released first) or a parent.
    pub child: bool,
    /// Liveness of its holder, for listing (`None` for a malformed owner annotation).
    pub liveness: Option<Liveness>,
    /// Whether a release can be justified, and its patch.
    pub action: Action,
}

/// Judges every fence of `report` against the Lease `ours` (`namespace/name`) as read
/// (`lease`). A fence that names another Lease it was taken under is judged by that Lease
/// only: here it is withheld ([`Withhold::OtherLease`]), whatever `lease` says.
#[must_use]
pub(crate) fn assess(
    report: &FenceReport,
    ours: &str,
    lease: Option<&LeaseView>,
    child: &ChildMark,
) -> Vec<Row> {
    report
        .fences
        .iter()
        .map(|f| assess_one(f, &report.fences, ours, lease, child))
        .collect()
}

fn assess_one(
    found: &FoundFence,
    all: &[FoundFence],
    ours: &str,
    lease: Option<&LeaseView>,
    child_mark: &ChildMark,
) -> Row {
    let unknown = |action| Row {
        object: found.object.clone(),
        holder: None,
        epoch: None,
        age: None,
        child: false,
        liveness: None,
        action,
    };
    match &found.state {
        FoundState::Fence {
            owner,
            age,
            marks,
            release,
            lease: taken_under,
            ..
        } => {
            let holder = owner.holder.to_string();
            let child = child_mark.is_child(marks);
            if let Some(other) = taken_under.as_deref().filter(|l| *l != ours) {
                return Row {
                    object: found.object.clone(),
                    liveness: Some(Liveness::OtherLease(other.to_string())),
                    holder: Some(holder),
                    epoch: Some(owner.epoch.0),
                    age: Some(*age),
                    child,
                    action: Action::Withheld(Withhold::OtherLease(other.to_string())),
                };
            }
            let action = match release {
                ReleasePlan::Withheld { at } => Action::Withheld(Withhold::MarkMoved(at.clone())),
                ReleasePlan::Patch(patch) => {
                    let children = held_children(&holder, found, all, child_mark);
                    if !child && !children.is_empty() {
                        Action::Withheld(Withhold::ChildrenHeld {
                            holder: holder.clone(),
                            children,
                        })
                    } else {
                        Action::Release {
                            patch: patch.clone(),
                        }
                    }
                }
            };
            Row {
                object: found.object.clone(),
                liveness: Some(liveness(&holder, lease)),
                holder: Some(holder),
                epoch: Some(owner.epoch.0),
                age: Some(*age),
                child,
                action,
            }
        }
        FoundState::Malformed {
            owner_annotation,
            problem,
        } => unknown(Action::Withheld(Withhold::Malformed {
            owner: owner_annotation.clone(),
            problem: problem.clone(),
        })),
    }
}

/// The children `holder` still holds among `all`, other than `this`: a parent waits for them.
#[must_use]
pub(crate) fn held_children(
    holder: &str,
    this: &FoundFence,
    all: &[FoundFence],
    child: &ChildMark,
) -> Vec<ObjectRef> {
    all.iter()
        .filter(|f| f.object != this.object)
        .filter_map(|f| match &f.state {
            FoundState::Fence { owner, marks, .. }
                if owner.holder.as_str() == holder && child.is_child(marks) =>
            {
                Some(f.object.clone())
            }
            _ => None,
        })
        .collect()
}
