//! The release engine: the one loop through which every path gives fences back.
//!
//! A session's cleanup and `resume` (by holder or by object, and so the Action's post step)
//! release guards they hold or adopted; `fences release` and `fences recover` release fences
//! a plan judged from a read. All of them hand their members to [`release_members`], which
//! applies the same rules to each (docs/design/protocol.md, "Giving fences back"):
//!
//! - **Order.** Children (targets) before parents, in the order given within each group; a
//!   parent is never released while a child of its holder was kept (`decide_next`).
//! - **Exactly that fence.** A member judged from a read is adopted only on exactly the owner
//!   value it was judged on (holder and epoch, re-read from the object); a later fence of a
//!   holder with the same name is never touched (`same_fence`).
//! - **Under the Lease.** When the caller holds a Lease for the release, it is asserted before
//!   each member; a lost Lease stops the release and keeps the rest.
//! - **One CAS each, bounded.** Each release is [`Fencer::release`] (a CAS on what was read,
//!   restoring every mark exactly or keeping the fence); a release that lost to other writers
//!   or whose answer was lost is tried again from a fresh read, with backoff, until the
//!   engine's deadline, never past it. A `--keep-moved` member sends the patch decided on the
//!   operator's read once ([`Source::KeepingMoved`]).
//!
//! The engine decides nothing about *whether* a holder may be released: that is the caller's
//! evidence (its own session, a parked pause, an attested exit, a Lease silent for a full
//! duration), judged before the engine is called.

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::events::EventKind;
use crate::keep_moved::{KeepMoved, KeepMovedOutcome};
use crate::mark::MarkAt;
use crate::outcome::{Kept, ReleaseOutcome};
use crate::{FenceError, FenceGuard, Fencer, LeaseGuard, ObjectRef, OwnerValue};

/// How long a release keeps trying against other writers or lost answers, by default.
pub(crate) const CONTENTION_BUDGET: Duration = Duration::from_secs(30);

/// The first pause between two tries of a contended release (doubling, at most one second).
const BACKOFF_START: Duration = Duration::from_millis(10);

/// Where a member's fence comes from.
#[derive(Debug)]
#[non_exhaustive]
pub enum Source {
    /// A fence this process holds: its own, or one it adopted.
    Held(FenceGuard),
    /// A fence judged from a read: adopted only when the object still carries exactly this
    /// holder's fence (and this epoch, when known), then released.
    Judged {
        /// The fenced object.
        object: ObjectRef,
        /// The holder the fence was judged to belong to.
        holder: String,
        /// The epoch it was judged at (`None`: any epoch of the holder).
        epoch: Option<u64>,
        /// A `HandoffRecovered` Event message recorded on the object once released.
        recovered: Option<String>,
    },
    /// A fence settled as an operator decided with `fences release --keep-moved`: the patch
    /// `keep_moved::decide_keep_moved` built on the read it judged (every value
    /// other writers moved kept, every other mark restored), sent once as decided.
    KeepingMoved {
        /// The fenced object.
        object: ObjectRef,
        /// The decided patch and what it was decided on.
        plan: Box<KeepMoved>,
    },
}

impl Source {
    /// The object this member fences.
    #[must_use]
    pub fn object(&self) -> &ObjectRef {
        match self {
            Self::Held(g) => g.object(),
            Self::Judged { object, .. } | Self::KeepingMoved { object, .. } => object,
        }
    }

    /// The holder this member's fence belongs to.
    #[must_use]
    pub fn holder(&self) -> String {
        match self {
            Self::Held(g) => g.owner().holder.to_string(),
            Self::Judged { holder, .. } => holder.clone(),
            Self::KeepingMoved { plan, .. } => plan.held.owner.holder.to_string(),
        }
    }
}

/// One fence to give back, and whether it is a child (a target) or a parent.
#[derive(Debug)]
pub struct Member {
    /// Where its fence comes from.
    pub source: Source,
    /// A target: released before every parent.
    pub child: bool,
}

impl Member {
    /// A member held by this process.
    #[must_use]
    pub fn held(guard: FenceGuard, child: bool) -> Self {
        Self {
            source: Source::Held(guard),
            child,
        }
    }

    /// A member judged from a read.
    #[must_use]
    pub fn judged(object: ObjectRef, holder: String, epoch: Option<u64>, child: bool) -> Self {
        Self {
            source: Source::Judged {
                object,
                holder,
                epoch,
                recovered: None,
            },
            child,
        }
    }

    /// A member settled as `fences release --keep-moved` decided (`plan`).
    #[must_use]
    pub(crate) fn keeping_moved(object: ObjectRef, plan: KeepMoved, child: bool) -> Self {
        Self {
            source: Source::KeepingMoved {
                object,
                plan: Box::new(plan),
            },
            child,
        }
    }

    /// Records a `HandoffRecovered` Event with `message` once released (judged members only).
    #[must_use]
    pub fn recovered(mut self, message: String) -> Self {
        if let Source::Judged { recovered, .. } = &mut self.source {
            *recovered = Some(message);
        }
        self
    }
}

/// What became of one member.
#[derive(Debug)]
#[non_exhaustive]
pub enum Settled {
    /// Released; marks restored.
    Released {
        /// The object.
        object: ObjectRef,
        /// Its uid (the one the fence was taken on).
        uid: String,
        /// The resourceVersion after the release, when known.
        resource_version: Option<String>,
        /// A person's resume kept as found ([`ReleaseOutcome::Released`]).
        kept_resume: Option<MarkAt>,
    },
    /// The object is gone, or was recreated (the new one was not touched).
    Gone {
        /// The object.
        object: ObjectRef,
    },
    /// The object carries no fence of the member's holder (and epoch) any more; nothing was
    /// written.
    NotOurs {
        /// The object.
        object: ObjectRef,
        /// The owner value found, if any.
        found: Option<String>,
    },
    /// The release kept the fence; the guard comes back, still armed.
    Kept {
        /// The guard.
        guard: Box<FenceGuard>,
        /// Why.
        why: Kept,
    },
    /// A `--keep-moved` patch did not apply: the object moved since it was read (`unknown`
    /// false: nothing changed), or the answer was lost and the fence is still on it (`unknown`
    /// true).
    NotApplied {
        /// The object.
        object: ObjectRef,
        /// Whether the outcome is unknown.
        unknown: bool,
    },
    /// Not tried; the member comes back as given.
    Skipped {
        /// The member.
        member: Member,
        /// Why.
        why: Skip,
    },
    /// The release failed with an API error (the guard was dropped and logged; fence
    /// discovery still lists the fence).
    Failed {
        /// The object.
        object: ObjectRef,
        /// The error.
        error: FenceError,
    },
}

impl Settled {
    /// Whether the member's fence is known to be off the object (released, gone, or no fence
    /// of its holder any more).
    #[must_use]
    pub(crate) fn is_off(&self) -> bool {
        matches!(
            self,
            Self::Released { .. } | Self::Gone { .. } | Self::NotOurs { .. }
        )
    }
}

/// Why a member was not tried.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Skip {
    /// A parent whose holder kept a member before it: a parent is never released while a
    /// child (or a parent below it) of its holder stays fenced.
    ChildKept {
        /// The holder.
        holder: String,
    },
    /// An earlier member was kept and the release stops at the first (`Rules::stop_at_first`).
    Stopped,
    /// The Lease held for the release could not be asserted.
    LeaseLost(String),
}

/// How the engine goes on after a member is not released.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Rules {
    /// Stop at the first member not released (a holder's own release: its parents wait for
    /// its targets); otherwise go on with the members of other holders (recovery).
    pub(crate) stop_at_first: bool,
    /// No try starts after this instant.
    pub deadline: Instant,
}

impl Rules {
    /// Stop at the first member not released; tries bounded by `CONTENTION_BUDGET`.
    #[must_use]
    pub fn one_holder() -> Self {
        Self {
            stop_at_first: true,
            deadline: Instant::now() + CONTENTION_BUDGET,
        }
    }

    /// Go on with other holders' members after one is not released.
    #[must_use]
    pub(crate) fn many_holders() -> Self {
        Self {
            stop_at_first: false,
            deadline: Instant::now() + CONTENTION_BUDGET,
        }
    }

    /// No try starts after `deadline` (never later than the default budget's end).
    #[must_use]
    pub fn until(mut self, deadline: Instant) -> Self {
        self.deadline = self.deadline.min(deadline);
        self
    }
}

/// What to do with the next member. Pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Release it.
    Release,
    /// Skip it, for this reason.
    Skip(Skip),
}

/// Decides the next member from what happened before it: `stopped` (a member was not
/// released under `Rules::stop_at_first`, or the Lease was lost) and the holders of which a
/// member was not released (`kept_of`). Pure.
#[must_use]
pub(crate) fn decide_next(child: bool, holder: &str, stopped: bool, kept_of: &[String]) -> Next {
    if stopped {
        return Next::Skip(Skip::Stopped);
    }
    if !child && kept_of.iter().any(|h| h == holder) {
        return Next::Skip(Skip::ChildKept {
            holder: holder.to_string(),
        });
    }
    Next::Release
}

/// `members` in release order: children before parents, each group in the order given.
/// Pure.
#[must_use]
pub(crate) fn release_order(members: Vec<Member>) -> Vec<Member> {
    let (mut children, parents): (Vec<_>, Vec<_>) = members.into_iter().partition(|m| m.child);
    children.extend(parents);
    children
}

/// Whether `found` is the fence a member was judged on: the same holder, and the same epoch
/// when it was known. Pure.
#[must_use]
pub(crate) fn same_fence(found: &OwnerValue, holder: &str, epoch: Option<u64>) -> bool {
    found.holder.as_str() == holder && epoch.is_none_or(|e| found.epoch.0 == e)
}

/// Gives `members` back, children first, under `lease` when the caller holds one for the
/// release (asserted before each member). `fencer` releases held members and lends its
/// client, keys and clock to the fencers of judged members. Returns one [`Settled`] per
/// member, in release order.
///
/// # Guarantees
/// See the module documentation: exact adoption, children before parents, the Lease asserted,
/// one CAS per try, no try after [`Rules::deadline`].
pub async fn release_members(
    fencer: &Fencer,
    members: Vec<Member>,
    lease: Option<&LeaseGuard>,
    rules: Rules,
) -> Vec<Settled> {
    let mut settled = Vec::with_capacity(members.len());
    let mut stopped = false;
    let mut kept_of: Vec<String> = Vec::new();
    for member in release_order(members) {
        let holder = member.source.holder();
        let skip = match decide_next(member.child, &holder, stopped, &kept_of) {
            Next::Skip(why) => Some(why),
            Next::Release => match lease {
                Some(g) => g
                    .assert()
                    .await
                    .err()
                    .map(|e| Skip::LeaseLost(crate::error::words(&e))),
                None => None,
            },
        };
        let one = if let Some(why) = skip {
            Settled::Skipped { member, why }
        } else {
            let role = if member.child { "target" } else { "parent" };
            let object = member.source.object().clone();
            let span = tracing::info_span!("member", step = "release", object = %object, role);
            release_one(fencer, member, rules.deadline)
                .instrument(span)
                .await
        };
        if !one.is_off() {
            // A lost Lease ends the release: no later assert can pass.
            stopped |= rules.stop_at_first
                || matches!(
                    &one,
                    Settled::Skipped {
                        why: Skip::LeaseLost(_),
                        ..
                    }
                );
            kept_of.push(holder);
        }
        settled.push(one);
    }
    settled
}

/// Adopts (when judged) and releases one member.
async fn release_one(fencer: &Fencer, member: Member, deadline: Instant) -> Settled {
    let (guard, recovered, fencer) = match member.source {
        Source::Held(g) => {
            let f = if g.owner() == fencer.owner() {
                fencer.clone()
            } else {
                fencer.for_owner(g.owner().clone())
            };
            (g, None, f)
        }
        Source::Judged {
            object,
            holder,
            epoch,
            recovered,
        } => match adopt_judged(fencer, &object, &holder, epoch).await {
            Ok(Ok((g, f))) => (g, recovered, f),
            Ok(Err(found)) => return Settled::NotOurs { object, found },
            Err(error) => return Settled::Failed { object, error },
        },
        Source::KeepingMoved { object, plan } => {
            return settle_keeping_moved(fencer, object, &plan).await;
        }
    };
    let object = guard.object().clone();
    let uid = guard.uid().to_string();
    let owner = guard.owner().to_string();
    match release_bounded(&fencer, guard, deadline).await {
        Ok(ReleaseOutcome::Released {
            resource_version,
            kept_resume,
        }) => {
            if let Some(msg) = recovered {
                let msg = format!("recovered from gone holder {owner}: {msg}");
                crate::events::record(fencer.client(), &object, &uid, EventKind::Recovered, &msg)
                    .await;
            }
            Settled::Released {
                object,
                uid,
                resource_version,
                kept_resume,
            }
        }
        Ok(ReleaseOutcome::Gone | ReleaseOutcome::Recreated) => Settled::Gone { object },
        Ok(ReleaseOutcome::NotOurs { holder }) => Settled::NotOurs {
            object,
            found: holder,
        },
        Ok(ReleaseOutcome::Kept { guard, why }) => Settled::Kept { guard, why },
        Err(error) => Settled::Failed { object, error },
    }
}

/// Sends the decided `--keep-moved` patch once (a moved object means the decision is stale:
/// it is not tried again).
async fn settle_keeping_moved(fencer: &Fencer, object: ObjectRef, plan: &KeepMoved) -> Settled {
    let fencer = fencer.for_owner(plan.held.owner.clone());
    match fencer.release_keeping_moved(&object, plan).await {
        Ok(KeepMovedOutcome::Released { resource_version }) => Settled::Released {
            uid: plan.held.uid.clone(),
            object,
            resource_version,
            kept_resume: None,
        },
        Ok(KeepMovedOutcome::Moved) => Settled::NotApplied {
            object,
            unknown: false,
        },
        Ok(KeepMovedOutcome::Gone) => Settled::Gone { object },
        Ok(KeepMovedOutcome::NotOurs { holder }) => Settled::NotOurs {
            object,
            found: Some(holder),
        },
        Ok(_) => Settled::NotApplied {
            object,
            unknown: true,
        },
        Err(error) => Settled::Failed { object, error },
    }
}

/// Reads `object` and adopts exactly the judged fence: `Ok(Err(found))` when the object
/// carries no fence of `holder` (at `epoch`) any more.
async fn adopt_judged(
    fencer: &Fencer,
    object: &ObjectRef,
    holder: &str,
    epoch: Option<u64>,
) -> Result<Result<(FenceGuard, Fencer), Option<String>>, FenceError> {
    let read = fencer.read(object).await?;
    let found = read
        .as_ref()
        .and_then(|r| crate::discover::owner_of(r, fencer.keys()));
    let Some(owner) = found
        .and_then(|o| o.parse::<OwnerValue>().ok())
        .filter(|o| same_fence(o, holder, epoch))
    else {
        return Ok(Err(found.map(ToString::to_string)));
    };
    let adopting = fencer.for_owner(owner.clone());
    match adopting.adopt_recorded(object, &owner).await? {
        Some(g) => Ok(Ok((g, adopting))),
        None => Ok(Err(None)),
    }
}

/// [`Fencer::release`], tried again from a fresh read (backoff doubling from 10 ms to 1 s)
/// while other writers win or the answer is lost, until `deadline`. Nothing is sent blindly:
/// every try reads and writes a CAS on that read.
async fn release_bounded(
    fencer: &Fencer,
    mut guard: FenceGuard,
    deadline: Instant,
) -> Result<ReleaseOutcome, FenceError> {
    let mut backoff = BACKOFF_START;
    loop {
        match fencer.release(guard).await? {
            ReleaseOutcome::Kept {
                guard: g,
                why: Kept::Contended | Kept::Unknown,
            } if Instant::now() + backoff < deadline => {
                guard = *g;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            other => return Ok(other),
        }
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
