//! The recover plan: which fences may be released (children before parents), which are kept
//! and why, and whether the Lease must be taken over first. Pure.

use std::time::Duration;

use super::assess::{Action, LeaseView, Liveness, Orphan, Row, Withhold};
use crate::ObjectRef;
use crate::discover::{FenceReport, FoundState};
use crate::lease::ChainRecord;
use crate::lease::GoneHolder;
use crate::lease::RecordedMember;

/// What is known about the Lease holder beyond the Lease as read: the caller fills it, from
/// `Recovery::watch` or from a source outside the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HolderEvidence {
    /// Nothing (no watch was needed or made). A Lease holder is then never judged gone.
    None,
    /// The Lease kept `resource_version` for `watched` (at least its duration), measured on
    /// our own monotonic clock: its holder did not renew.
    Unchanged {
        /// The Lease holder watched.
        holder: String,
        /// The version that did not change.
        resource_version: String,
        /// How long it was watched.
        watched: Duration,
    },
    /// The Lease changed `after` into the watch: its holder renews (or someone wrote it).
    Changed {
        /// The Lease holder watched.
        holder: String,
        /// When the change was seen.
        after: Duration,
    },
    /// A source outside the cluster (for example a CI system reporting that the holder's run
    /// has finished) proves the holder gone, judged on the Lease at `resource_version`.
    Reported {
        /// The holder the report is about.
        holder: String,
        /// The Lease version the report was judged on.
        resource_version: String,
        /// The report, in words (no secrets).
        evidence: String,
    },
    /// A source outside the cluster was asked and did not prove the holder gone (it is
    /// still running, or the answer proves nothing): the holder is kept.
    NotProved {
        /// The holder asked about.
        holder: String,
        /// Why, and what a person can do, in one line.
        why: String,
    },
}

/// Options of `plan_recover`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) struct PlanOptions {
    /// Also release deliberate pauses (a parked Lease), once proved unrenewed.
    pub include_paused: bool,
}

impl PlanOptions {
    /// Sets [`PlanOptions::include_paused`].
    #[must_use]
    pub fn include_paused(mut self, on: bool) -> Self {
        self.include_paused = on;
        self
    }
}

/// What a kept entry is.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Subject {
    /// A fenced object.
    Fence(ObjectRef),
    /// The Lease.
    Lease,
}

/// Why something is kept.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum KeepReason {
    /// Its holder is not proved gone.
    Live {
        /// The holder.
        holder: String,
        /// The evidence.
        liveness: Liveness,
    },
    /// A deliberate pause (parked Lease), kept unless `include_paused`.
    Paused {
        /// The holder.
        holder: String,
    },
    /// Its release cannot be justified.
    Withheld(Withhold),
    /// A parent whose child (same holder) is kept.
    ChildKept {
        /// The holder.
        holder: String,
    },
    /// The owner annotation names no holder.
    UnknownHolder,
    /// The Lease holder's CI run was asked about and not proved finished.
    NotProved {
        /// The holder.
        holder: String,
        /// Why, and what a person can do, in one line.
        why: String,
    },
}

/// One fence to release.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PlannedRelease {
    /// The object.
    pub object: ObjectRef,
    /// Its holder.
    pub holder: String,
    /// The epoch of the fence judged (`None` when the owner annotation carried none): the
    /// release takes only this very fence, never a later one of the same holder.
    pub epoch: Option<u64>,
    /// A child (released before every parent).
    pub child: bool,
    /// Why its holder counts as gone.
    pub(crate) why: Orphan,
}

/// What a recovery does, in order: take the Lease (when its holder is proved gone), release
/// the fences (children before parents), release the Lease.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct RecoverPlan {
    /// The Lease to take over first, with the evidence it is taken on (a CAS on that version).
    pub take_lease: Option<GoneHolder>,
    /// Fences to release, in order (children before parents).
    pub release: Vec<PlannedRelease>,
    /// What is kept, and why.
    pub keep: Vec<(Subject, KeepReason)>,
    /// The chain record on the Lease and which of its members still carry its owner's
    /// fence: a Lease taken over is released (and its record cleared) only once every one of
    /// them was released.
    pub(crate) record: Option<RecordHold>,
}

/// What a chain record still holds, as read.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub(crate) struct RecordHold {
    /// The record's owner (`holder;epoch`).
    pub owner: String,
    /// Recorded members that carry a fence of the record's holder.
    pub fenced: Vec<ObjectRef>,
    /// Recorded members of a kind the reader does not know (may be fenced; never touched).
    pub unknown: Vec<String>,
}

impl RecordHold {
    /// What may still be fenced once `released` were released, in words; `None` when
    /// nothing: the record is settled.
    #[must_use]
    pub fn unsettled(&self, released: &[ObjectRef]) -> Option<String> {
        let mut left: Vec<String> = self
            .fenced
            .iter()
            .filter(|o| !released.contains(o))
            .map(super::short_ref)
            .collect();
        left.extend(self.unknown.iter().cloned());
        (!left.is_empty()).then(|| left.join(", "))
    }
}

/// Which members of `record` the snapshot shows fenced by the record's holder (any epoch: a
/// fence of that holder is never anybody else's to keep). Pure.
#[must_use]
pub(crate) fn recorded_hold(
    record: &ChainRecord,
    report: &FenceReport,
    unknown: &[RecordedMember],
) -> RecordHold {
    let holder = record.owner_value().ok().map(|o| o.holder);
    let fenced = report
        .fences
        .iter()
        .filter(|f| record.members.iter().any(|m| m.is(&f.object)))
        .filter(|f| match &f.state {
            FoundState::Fence { owner, .. } => Some(&owner.holder) == holder.as_ref(),
            // A malformed fence on a recorded member may be the holder's: it stays.
            _ => true,
        })
        .map(|f| f.object.clone())
        .collect();
    RecordHold {
        owner: record.owner.clone(),
        fenced,
        unknown: unknown.iter().map(ToString::to_string).collect(),
    }
}

impl RecoverPlan {
    /// Whether the plan changes nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.take_lease.is_none() && self.release.is_empty()
    }

    /// Sets the chain record as read and keeps, fail-closed, every parent of the record's
    /// holder while the record names a member of a kind this reader does not know: that member
    /// may be one of their children still fenced, and no parent is released while a child of
    /// its holder is held. Its children are released as planned. Pure.
    #[must_use]
    pub(crate) fn with_record(mut self, record: Option<RecordHold>) -> Self {
        if let Some(r) = record.as_ref().filter(|r| !r.unknown.is_empty()) {
            let holder = r.owner.split(';').next().unwrap_or_default();
            let (kept, release): (Vec<_>, Vec<_>) = std::mem::take(&mut self.release)
                .into_iter()
                .partition(|p| !p.child && p.holder == holder);
            self.release = release;
            for p in kept {
                let holder = p.holder.clone();
                self.keep
                    .push((Subject::Fence(p.object), KeepReason::ChildKept { holder }));
            }
        }
        self.record = record;
        self
    }
}

/// The Lease holder and version a recovery must watch before it may judge that holder gone:
/// `None` when the Lease is absent or free, or parked and `include_paused` is off (then nothing
/// of its holder is released, so no evidence is needed).
#[must_use]
pub(crate) fn needs_watch(
    lease: Option<&LeaseView>,
    opts: &PlanOptions,
) -> Option<(String, String)> {
    let l = lease?;
    let holder = l.found.holder.clone()?;
    if l.found.parked && !opts.include_paused {
        return None;
    }
    Some((holder, l.resource_version.clone()?))
}

/// Plans a recovery.
///
/// # Guarantees
/// - A fence whose holder holds the Lease is released only when `evidence` proves that holder
///   gone *at the very Lease version read* (`lease.resource_version`), and then the Lease is
///   taken over first ([`RecoverPlan::take_lease`]). The wall clock is never consulted.
/// - A deliberate pause (parked Lease) is kept unless `include_paused`, and even then needs
///   the same evidence.
/// - A fence whose holder does not hold the Lease (absent, free, or held by another) is
///   orphaned: a holder always holds the Lease while it holds fences.
/// - Children are released before parents; a parent stays while a child of its holder stays.
#[must_use]
pub(crate) fn plan_recover(
    rows: &[Row],
    lease: Option<&LeaseView>,
    evidence: &HolderEvidence,
    opts: &PlanOptions,
) -> RecoverPlan {
    let mut plan = RecoverPlan::default();
    let lease_holder = lease.and_then(|l| l.found.holder.clone());
    let judged = lease_holder
        .as_ref()
        .map(|h| judge_lease_holder(h, lease, evidence, opts));
    if let (Some(h), Some(Ok(why)), Some(l)) = (&lease_holder, &judged, lease) {
        plan.take_lease = Some(GoneHolder::new(
            h.clone(),
            l.resource_version.clone().unwrap_or_default(),
            why.to_string(),
        ));
    }
    let mut kept_children_of: Vec<String> = Vec::new();
    let mut parents = Vec::new();
    for row in rows {
        let subject = Subject::Fence(row.object.clone());
        let Some(holder) = &row.holder else {
            let why = match &row.action {
                Action::Withheld(w) => KeepReason::Withheld(w.clone()),
                _ => KeepReason::UnknownHolder,
            };
            plan.keep.push((subject, why));
            continue;
        };
        let gone = match (&lease_holder, &judged) {
            (Some(h), Some(j)) if h == holder => j.clone(),
            (Some(h), _) => Ok(Orphan::OtherHolder(h.clone())),
            (None, _) if lease.is_some() => Ok(Orphan::LeaseFree),
            (None, _) => Ok(Orphan::NoLease),
        };
        let keep = match (gone, &row.action) {
            (Err(why), _) => Err(why),
            // A parent withheld for its children waits for them below: they are judged first.
            (Ok(why), Action::Release { .. } | Action::Withheld(Withhold::ChildrenHeld { .. })) => {
                Ok(why)
            }
            (Ok(_), Action::Withheld(w)) => Err(KeepReason::Withheld(w.clone())),
        };
        match keep {
            Err(why) => {
                if row.child {
                    kept_children_of.push(holder.clone());
                }
                plan.keep.push((subject, why));
            }
            Ok(why) => {
                let planned = PlannedRelease {
                    object: row.object.clone(),
                    holder: holder.clone(),
                    epoch: row.epoch,
                    child: row.child,
                    why,
                };
                if row.child {
                    plan.release.push(planned);
                } else {
                    parents.push(planned);
                }
            }
        }
    }
    for p in parents {
        if kept_children_of.contains(&p.holder) {
            plan.keep.push((
                Subject::Fence(p.object),
                KeepReason::ChildKept { holder: p.holder },
            ));
        } else {
            plan.release.push(p);
        }
    }
    if let (Some(_), Some(Err(why))) = (&lease_holder, judged) {
        plan.keep.push((Subject::Lease, why));
    }
    plan
}

/// Whether the Lease holder `h` is proved gone, and by what; else why it is kept.
fn judge_lease_holder(
    h: &str,
    lease: Option<&LeaseView>,
    evidence: &HolderEvidence,
    opts: &PlanOptions,
) -> Result<Orphan, KeepReason> {
    let Some(l) = lease else {
        return Ok(Orphan::NoLease);
    };
    if l.found.parked && !opts.include_paused {
        return Err(KeepReason::Paused { holder: h.into() });
    }
    let read = l.resource_version.as_deref();
    let live = |renewed_while_watched| KeepReason::Live {
        holder: h.into(),
        liveness: Liveness::Live {
            renewed: l.found.renewed,
            renewed_while_watched,
        },
    };
    let proved = match evidence {
        HolderEvidence::Unchanged {
            holder,
            resource_version,
            watched,
        } if holder == h && Some(resource_version.as_str()) == read => Orphan::Unrenewed {
            watched: *watched,
            resource_version: resource_version.clone(),
        },
        HolderEvidence::Reported {
            holder,
            resource_version,
            evidence,
        } if holder == h && Some(resource_version.as_str()) == read => {
            Orphan::Reported(evidence.clone())
        }
        HolderEvidence::Changed { holder, after } if holder == h => return Err(live(Some(*after))),
        HolderEvidence::NotProved { holder, why } if holder == h => {
            return Err(KeepReason::NotProved {
                holder: h.into(),
                why: why.clone(),
            });
        }
        // Unwatched, or watched at another version (it moved since): not proved gone.
        _ => return Err(live(None)),
    };
    Ok(if l.found.parked {
        Orphan::PausedReleased
    } else {
        proved
    })
}

#[cfg(test)]
mod tests;
