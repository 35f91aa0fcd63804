//! The stable-pause judge: a pure function of what each pass read.
//!
//! A pass *counts* when every member of the chain is readable, has the uid we fenced, carries
//! our owner value, is `spec.suspend=true`, every member below the top still carries
//! `kustomize.toolkit.fluxcd.io/reconcile: disabled`, and each resourceVersion equals the one
//! seen on the previous pass. [`REQUIRED_PASSES`] consecutive counted passes prove the pause.
//!
//! Status conditions are deliberately not part of [`Seen`]: a suspended Flux object may carry a
//! frozen `Reconciling=True` forever (docs/design/flux-model.md, fact 9): status is no clock after
//! suspension and must not block the proof.

use crate::report::{Counter, Counters};

/// Consecutive counted passes that prove the pause.
pub const REQUIRED_PASSES: u32 = 2;

/// What the proof needs to know about one read of a fenced object — and nothing more.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Seen {
    pub uid: String,
    pub resource_version: String,
    /// The raw owner annotation value, if any.
    pub owner: Option<String>,
    /// The controller is paused: `spec.suspend == true`, or for a Flux Operator object
    /// (`operator`) `fluxcd.controlplane.io/reconcile: disabled` ([`crate::flux::suspended`]).
    pub suspended: bool,
    /// A Flux Operator object (`ResourceSet`, `FluxInstance`): paused by its reconcile
    /// annotation, not `spec.suspend`.
    pub operator: bool,
    /// `kustomize.toolkit.fluxcd.io/reconcile: disabled` is present.
    pub reconcile_disabled: bool,
    /// `spec.replicas` as read (a replicas gate's Deployment); `None` when absent.
    pub replicas: Option<i64>,
    /// The field manager of the object's newest change when that was another writer's (not a
    /// status write, not ours: [`crate::object::other_writer`]).
    pub last_writer: Option<String>,
}

impl Seen {
    /// A read of the object with `uid` at `resource_version`: no owner annotation, not
    /// suspended, no `reconcile: disabled`, until the `with_` methods say otherwise.
    #[must_use]
    pub fn new(uid: impl Into<String>, resource_version: impl Into<String>) -> Self {
        Self {
            uid: uid.into(),
            resource_version: resource_version.into(),
            owner: None,
            suspended: false,
            operator: false,
            reconcile_disabled: false,
            replicas: None,
            last_writer: None,
        }
    }

    /// `spec.replicas` as read, if any (a replicas gate's Deployment).
    #[must_use]
    pub fn with_replicas(mut self, replicas: Option<i64>) -> Self {
        self.replicas = replicas;
        self
    }

    /// Whether the object is a Flux Operator kind, paused by its reconcile annotation.
    #[must_use]
    pub fn with_operator(mut self, operator: bool) -> Self {
        self.operator = operator;
        self
    }

    /// The field manager of another writer's newest change, if it was one.
    #[must_use]
    pub fn with_last_writer(mut self, manager: Option<String>) -> Self {
        self.last_writer = manager;
        self
    }

    /// The raw owner annotation value read, if any.
    #[must_use]
    pub fn with_owner(mut self, owner: Option<String>) -> Self {
        self.owner = owner;
        self
    }

    /// Whether `spec.suspend` read `true`.
    #[must_use]
    pub fn with_suspended(mut self, suspended: bool) -> Self {
        self.suspended = suspended;
        self
    }

    /// Whether `reconcile: disabled` was present.
    #[must_use]
    pub fn with_reconcile_disabled(mut self, disabled: bool) -> Self {
        self.reconcile_disabled = disabled;
        self
    }
}

/// One member's read in one pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    Seen(Seen),
    /// The read failed (transport error, 404, 403, ...). Why is not the judge's business.
    Unreadable,
}

/// Where a member sits in the chain; decides which counters it feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An object above the target (feeds `parent_not_owned`, `parent_changed`).
    Parent,
    /// The target itself (feeds `child_not_owned`, `version_changes`).
    Target,
}

/// What "still ours" means for one member.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Member {
    pub role: Role,
    /// The uid we fenced; a different uid means deleted and recreated.
    pub uid: String,
    /// Our owner value (`holder;epoch`).
    pub owner: String,
    /// Whether the member must carry `reconcile: disabled` (every member but the chain's top).
    pub needs_reconcile_disabled: bool,
    /// A replicas gate's count: its Deployment must hold it in `spec.replicas`. A gate has no
    /// `spec.suspend`; it is held by that count (and its `reconcile: disabled` when
    /// `needs_reconcile_disabled`). `None` for a Flux object.
    pub replicas: Option<i32>,
}

impl Member {
    /// The member with `role` fenced at `uid` under `owner`, which must carry
    /// `reconcile: disabled` when `needs_reconcile_disabled` (every member but the chain's top).
    #[must_use]
    pub fn new(
        role: Role,
        uid: impl Into<String>,
        owner: impl Into<String>,
        needs_reconcile_disabled: bool,
    ) -> Self {
        Self {
            role,
            uid: uid.into(),
            owner: owner.into(),
            needs_reconcile_disabled,
            replicas: None,
        }
    }

    /// The member as a replicas gate holding `replicas` (`None`: a Flux object).
    #[must_use]
    pub fn with_replicas(mut self, replicas: Option<i32>) -> Self {
        self.replicas = replicas;
        self
    }

    fn owns(&self, seen: &Seen) -> bool {
        self.why_not(seen).is_none()
    }

    /// Why `seen` does not hold this member's pause: a Flux object by `spec.suspend` (or its
    /// operator annotation), a replicas gate by its count.
    fn why_not(&self, seen: &Seen) -> Option<Broken> {
        let paused = match self.replicas {
            Some(n) => (seen.replicas != Some(i64::from(n))).then_some(Broken::Rescaled),
            None if !seen.suspended && seen.operator => Some(Broken::OperatorEnabled),
            None if !seen.suspended => Some(Broken::Unsuspended),
            None => None,
        };
        if seen.uid != self.uid {
            Some(Broken::Recreated)
        } else if seen.owner.as_deref() != Some(self.owner.as_str()) {
            Some(Broken::NotOurs)
        } else if paused.is_some() {
            paused
        } else if self.needs_reconcile_disabled && !seen.reconcile_disabled {
            Some(Broken::ReconcileEnabled)
        } else {
            None
        }
    }
}

/// Why a member no longer holds the pause on a recheck ([`first_broken`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Broken {
    /// The read failed: the pause cannot be confirmed (fail closed).
    Unreadable,
    /// Another uid: the object was deleted and recreated.
    Recreated,
    /// The owner annotation is not our owner value any more.
    NotOurs,
    /// `spec.suspend` is not `true` (e.g. a person unsuspended it by hand).
    Unsuspended,
    /// `kustomize.toolkit.fluxcd.io/reconcile: disabled` is gone.
    ReconcileEnabled,
    /// A Flux Operator object's `fluxcd.controlplane.io/reconcile: disabled` is gone or reads
    /// otherwise (a person's `flux-operator resume` sets it to `enabled`).
    OperatorEnabled,
    /// A replicas gate's Deployment no longer has the gate's count in `spec.replicas`
    /// (someone scaled it by hand, or an autoscaler did).
    Rescaled,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Unreadable => "it could not be read",
            Self::Recreated => "it was deleted and recreated (another uid)",
            Self::NotOurs => "its owner annotation is not ours any more",
            Self::Unsuspended => "spec.suspend is not true any more",
            Self::ReconcileEnabled => "its reconcile: disabled annotation is gone",
            Self::OperatorEnabled => {
                "its fluxcd.controlplane.io/reconcile annotation is not disabled any more"
            }
            Self::Rescaled => "its spec.replicas is not the gate's count any more",
        })
    }
}

impl Member {
    /// Why `read` does not hold this member's pause, if it does not.
    #[must_use]
    pub fn broken(&self, read: &Read) -> Option<Broken> {
        match read {
            Read::Seen(seen) => self.why_not(seen),
            Read::Unreadable => Some(Broken::Unreadable),
        }
    }
}

/// A recheck of a proven pause before a protected write: the first member (in chain order)
/// whose one fresh read no longer holds the pause, and why; `None` when every member is still
/// ours, suspended, with the same uid and (below the top) `reconcile: disabled`. A missing read
/// counts as unreadable. Unlike [`Judge::observe`], resourceVersions are not compared: a status
/// write after the proof does not break a pause, a changed mark does.
#[must_use]
pub fn first_broken(members: &[Member], reads: &[Read]) -> Option<(usize, Broken)> {
    members.iter().enumerate().find_map(|(i, m)| {
        m.broken(reads.get(i).unwrap_or(&Read::Unreadable))
            .map(|b| (i, b))
    })
}

/// The judge's answer to one pass.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Not proven yet; keep observing until the caller's deadline.
    Pending,
    /// Proven: the work phase may start.
    Proven(Proof),
    /// Member `member` (chain order) was read and no longer holds the pause: another writer
    /// resumed it (`spec.suspend` false or removed), removed its `reconcile: disabled`, took or
    /// removed its fence, or recreated it. No later pass mends that by itself, so waiting for
    /// the deadline would only cost its length: stop here. An unreadable member is no break.
    Broken { member: usize, why: Broken },
}

/// Evidence that the chain's pause is stable. Only [`Judge::observe`] can mint one, so a
/// function that takes `&Proof` cannot be called without a judged proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    passes: u32,
    counters: Counters,
}

impl Proof {
    /// Consecutive counted passes behind this proof.
    #[must_use]
    pub fn passes(&self) -> u32 {
        self.passes
    }

    /// The counters as they stood when the pause was proven.
    #[must_use]
    pub fn counters(&self) -> Counters {
        self.counters
    }
}

/// Judges passes over a chain of fenced objects, in chain order (top first).
#[derive(Debug, Clone)]
pub struct Judge {
    members: Vec<Member>,
    previous: Option<Vec<String>>,
    streak: u32,
    counters: Counters,
    writers: Vec<(usize, String, u32)>,
}

impl Judge {
    /// A judge for `members`, in chain order (top first). Without a baseline the first pass
    /// only records resourceVersions.
    #[must_use]
    pub fn new(members: Vec<Member>) -> Self {
        Self {
            members,
            previous: None,
            streak: 0,
            counters: Counters::default(),
            writers: Vec::new(),
        }
    }

    /// Seeds the resourceVersions a first pass must match (e.g. those read when the
    /// acknowledgement was seen), so a quiet chain is proven in [`REQUIRED_PASSES`] reads.
    #[must_use]
    pub fn with_baseline(mut self, versions: Vec<String>) -> Self {
        if versions.len() == self.members.len() {
            self.previous = Some(versions);
        }
        self
    }

    /// The members this judge checks.
    #[must_use]
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Counters so far.
    #[must_use]
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Who changed the chain while it was judged: (member index, another writer's field
    /// manager, passes that saw a change of theirs), in the order first seen. A change whose
    /// newest write was a status write (a reconcile in flight) or ours names nobody.
    #[must_use]
    pub fn writers(&self) -> &[(usize, String, u32)] {
        &self.writers
    }

    /// Judges one pass. `reads` must be in member order; a pass with the wrong number of reads
    /// counts as unreadable.
    pub fn observe(&mut self, reads: &[Read]) -> Verdict {
        self.counters.incr(Counter::Observations);
        let seen: Option<Vec<&Seen>> = (reads.len() == self.members.len())
            .then(|| {
                reads
                    .iter()
                    .map(|r| match r {
                        Read::Seen(s) => Some(s),
                        Read::Unreadable => None,
                    })
                    .collect()
            })
            .flatten();

        let mut counted = true;
        let mut hits: Vec<Counter> = Vec::new();
        for (i, member) in self.members.iter().enumerate() {
            let Some(Read::Seen(s)) = reads.get(i) else {
                continue;
            };
            let (not_owned, moved_counter) = match member.role {
                Role::Target => (Counter::ChildNotOwned, Counter::VersionChanges),
                Role::Parent => (Counter::ParentNotOwned, Counter::ParentChanged),
            };
            if !member.owns(s) {
                counted = false;
                hits.push(not_owned);
            }
            let moved = self
                .previous
                .as_ref()
                .is_some_and(|prev| prev.get(i).is_some_and(|rv| *rv != s.resource_version));
            if moved {
                counted = false;
                hits.push(moved_counter);
                if let Some(m) = &s.last_writer {
                    match self.writers.iter_mut().find(|w| w.0 == i && w.1 == *m) {
                        Some(w) => w.2 += 1,
                        None => self.writers.push((i, m.clone(), 1)),
                    }
                }
            }
        }
        // Each counter counts passes, not members: at most one per pass.
        for counter in Counter::ALL {
            if hits.contains(&counter) {
                self.counters.incr(counter);
            }
        }

        let broken = reads
            .iter()
            .zip(&self.members)
            .enumerate()
            .find_map(|(i, (r, m))| match m.broken(r) {
                None | Some(Broken::Unreadable) => None,
                Some(why) => Some((i, why)),
            });
        match seen {
            None => {
                self.counters.incr(Counter::Unreadable);
                self.previous = None;
                self.streak = 0;
            }
            Some(seen) => {
                counted &= self.previous.is_some();
                self.previous = Some(seen.iter().map(|s| s.resource_version.clone()).collect());
                self.streak = if counted { self.streak + 1 } else { 0 };
            }
        }
        if let Some((member, why)) = broken {
            self.streak = 0;
            Verdict::Broken { member, why }
        } else if self.streak >= REQUIRED_PASSES {
            Verdict::Proven(Proof {
                passes: self.streak,
                counters: self.counters,
            })
        } else {
            Verdict::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_watch_a_recheck_holds_a_replicas_gate_by_its_count_not_spec_suspend() {
        let owner = "h-1;3";
        let gate = Member::new(Role::Target, "g-uid", owner, true).with_replicas(Some(0));
        // A gated Deployment as read: ours, at the count, reconcile: disabled, no spec.suspend.
        let at = |n: Option<i64>| {
            Seen::new("g-uid", "5")
                .with_owner(Some(owner.into()))
                .with_reconcile_disabled(true)
                .with_replicas(n)
        };
        let table: Vec<(Seen, Option<Broken>)> = vec![
            (at(Some(0)), None),
            (at(Some(2)), Some(Broken::Rescaled)),
            (at(None), Some(Broken::Rescaled)),
            (
                at(Some(0)).with_reconcile_disabled(false),
                Some(Broken::ReconcileEnabled),
            ),
            (at(Some(0)).with_owner(None), Some(Broken::NotOurs)),
            (
                Seen::new("other", "5")
                    .with_owner(Some(owner.into()))
                    .with_replicas(Some(0)),
                Some(Broken::Recreated),
            ),
        ];
        for (seen, want) in table {
            let reads = [Read::Seen(seen.clone())];
            let got = first_broken(std::slice::from_ref(&gate), &reads);
            assert_eq!(got, want.map(|w| (0, w)), "{seen:?}");
        }
        // The same read judged as a Flux object: not suspended.
        let flux = Member::new(Role::Target, "g-uid", owner, true);
        assert_eq!(
            flux.broken(&Read::Seen(at(Some(0)))),
            Some(Broken::Unsuspended)
        );
    }
}
