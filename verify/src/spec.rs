//! What is checked: bounds, mutants, the actors and the actions each can take, and the shared
//! helpers the actors use to render state for the production decision functions. The
//! transition system over it is [`crate::model`].

use std::str::FromStr;

use flux_fence::mark::Restore;
use flux_fence::{AnnotationKeys, Epoch, Holder, Mark, OwnerValue};
use flux_suspend::flux::{RECONCILE_ANNOTATION, RECONCILE_DISABLED, REQUESTED_AT_ANNOTATION};
use serde_json::{Value, json};

use crate::state::{P, State, T, ghost};
use crate::world::{Obj, Sym, at, sym, text};

/// How far the checker explores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Concurrent handoff runs (distinct holders).
    pub runs: usize,
    /// Faults per trace, of any kind (each kind is also bounded by its own budget).
    pub faults: u8,
    pub crashes: u8,
    /// Writes whose response is lost (applied or not).
    pub lost: u8,
    pub restarts: u8,
    /// Extra reconciles on the interval timer.
    pub intervals: u8,
    /// Writes by a person (annotations, `spec.suspend`, `flux reconcile`).
    pub person: u8,
    /// Times the clock may jump past a lease duration without a renewal.
    pub ticks: u8,
    /// Waits that may time out (acknowledgement, proof).
    pub giveups: u8,
    /// Whether a person runs `resume --holder <run 0>` at some point.
    pub resume: bool,
    /// Whether `fences recover --yes` runs at some point while runs are active.
    pub recover: bool,
    /// Whether a run may park its pause (`flux-handoff pause`) instead of working.
    pub park: bool,
}

impl Bounds {
    /// The bound `cargo xtask verify --quick` (and `cargo xtask ci`) checks: the actors of the
    /// full bound and one controller restart as the only fault, without clock jumps (so
    /// `fences recover` acts only on a free Lease).
    #[must_use]
    pub fn quick() -> Self {
        Self {
            crashes: 0,
            lost: 0,
            person: 0,
            ticks: 0,
            ..Self::full()
        }
    }

    /// A small bound for development (`verify --tiny`): two runs and the controller only.
    #[must_use]
    pub fn tiny() -> Self {
        Self {
            runs: 2,
            faults: u8::MAX,
            crashes: 0,
            lost: 0,
            restarts: 0,
            intervals: 0,
            person: 0,
            ticks: 0,
            giveups: 0,
            resume: false,
            recover: false,
            park: false,
        }
    }

    /// The bound of the full run: every actor at once. Two runs, the controller with stale
    /// reads, `resume --holder`, `fences recover`, parking, and one fault per trace of any
    /// kind: a crash at any step, a lost response (applied or not), a controller restart, a
    /// person's write, or a clock jump that stalls a live run. The clock jump once no run is
    /// live (a dead holder's Lease expiring) is not a fault.
    #[must_use]
    pub fn full() -> Self {
        Self {
            runs: 2,
            faults: 1,
            crashes: 1,
            lost: 1,
            restarts: 1,
            intervals: 0,
            person: 1,
            ticks: 1,
            giveups: 0,
            resume: true,
            recover: true,
            park: true,
        }
    }
}

impl std::fmt::Display for Bounds {
    /// `runs=2 faults=1 crashes=1 ...`: every budget, as `cargo xtask verify` prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let yes = |b: bool| if b { "yes" } else { "no" };
        write!(
            f,
            "runs={} faults={} crashes={} lost={} restarts={} intervals={} person={} ticks={} \
             timeouts={} resume={} recover={} park={}",
            self.runs,
            if self.faults == u8::MAX {
                "any".to_string()
            } else {
                self.faults.to_string()
            },
            self.crashes,
            self.lost,
            self.restarts,
            self.intervals,
            self.person,
            self.ticks,
            self.giveups,
            yes(self.resume),
            yes(self.recover),
            yes(self.park)
        )
    }
}

/// Known-bad variants of a decision; each must yield a counterexample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// The judge also requires status to read quiet (no `Reconciling=True`), as the shell
    /// tool did.
    JudgeReadsConditions,
    /// The release neither checks nor tests the owner annotation.
    ReleaseWithoutOwnerTest,
    /// `fences recover` releases orphan-looking fences before it has taken the Lease.
    RecoveryBeforeLease,
    /// `resume --holder H` adopts H's Lease even while H renews it (not parked).
    ResumeAdoptsLiveHolder,
    /// The acknowledgement compares `lastHandledReconcileAt >= nonce` instead of equality.
    AckAtLeast,
    /// The release restores every mark's prior value even where another writer changed it.
    ReleaseIgnoresMovedMarks,
    /// The writer skips the re-read of the chain before its protected write.
    SecretWriteWithoutRecheck,
    /// A stalled holder keeps its command running until a request returns (no self-fence on
    /// its own clock), as before issue 25.
    HolderWaitsForRequests,
}

impl Mutant {
    pub const ALL: [Self; 8] = [
        Self::JudgeReadsConditions,
        Self::ReleaseWithoutOwnerTest,
        Self::RecoveryBeforeLease,
        Self::ResumeAdoptsLiveHolder,
        Self::AckAtLeast,
        Self::ReleaseIgnoresMovedMarks,
        Self::SecretWriteWithoutRecheck,
        Self::HolderWaitsForRequests,
    ];

    /// The bound a mutant is checked at: `base` plus the actors its counterexample needs
    /// (the checker stops at the first counterexample).
    #[must_use]
    pub fn bounds(self, base: Bounds) -> Bounds {
        match self {
            Self::JudgeReadsConditions => Bounds {
                restarts: 1,
                faults: base.faults.max(1),
                ..base
            },
            Self::ReleaseWithoutOwnerTest
            | Self::RecoveryBeforeLease
            | Self::HolderWaitsForRequests => Bounds {
                ticks: 1,
                recover: true,
                faults: base.faults.max(1),
                ..base
            },
            Self::ResumeAdoptsLiveHolder => Bounds {
                resume: true,
                ..base
            },
            Self::AckAtLeast => Bounds {
                person: 1,
                intervals: 1,
                faults: base.faults.max(2),
                ..base
            },
            Self::ReleaseIgnoresMovedMarks | Self::SecretWriteWithoutRecheck => Bounds {
                person: 1,
                faults: base.faults.max(1),
                ..base
            },
        }
    }

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::JudgeReadsConditions => "judge_reads_conditions",
            Self::ReleaseWithoutOwnerTest => "release_without_owner_test",
            Self::RecoveryBeforeLease => "recovery_releases_before_lease",
            Self::ResumeAdoptsLiveHolder => "resume_adopts_live_holder",
            Self::AckAtLeast => "ack_compared_at_least",
            Self::ReleaseIgnoresMovedMarks => "release_ignores_moved_marks",
            Self::SecretWriteWithoutRecheck => "secret_write_without_recheck",
            Self::HolderWaitsForRequests => "holder_waits_for_requests",
        }
    }
}

/// Who acted (for the release ghosts and the trace).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Actor {
    Run(usize),
    Resume,
    Recover,
    Janitor,
}

/// One step of one actor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A run's next step, its write answered.
    Run(usize),
    /// A run's pending write whose response is lost; `applied` says whether it landed.
    RunLost(usize, bool),
    /// A run's wait times out (acknowledgement or proof): cleanup.
    RunGiveUp(usize),
    /// A run with a proven pause parks it instead of working (`flux-handoff pause`).
    RunPark(usize),
    /// A run's process dies (SIGKILL, runner lost).
    RunCrash(usize),
    /// The controller starts a reconcile of an object (fresh or stale read).
    CtlStart(usize, bool),
    /// The parent's execution applies the child's Git state.
    CtlApply,
    /// An execution returns, writing status.
    CtlFinish(usize),
    /// The controller process restarts, killing every execution.
    CtlRestart,
    /// The interval timer queues an object.
    CtlInterval(usize),
    /// A person runs `flux reconcile` (a new `requestedAt`) on an object.
    PersonReconcile(usize),
    /// A person annotates the target.
    PersonNote,
    /// A person sets the target's `spec.suspend=false` by hand.
    PersonUnsuspend,
    /// Time passes beyond a lease duration without a renewal (holders stall or died).
    Tick,
    /// `resume --holder <run 0>`: its next step.
    Resume,
    /// `fences recover --yes`: its next step.
    Recover,
    /// The final recovery, after every run ended: its next step.
    Janitor,
}

impl Action {
    /// Whether the action always spends the trace's fault budget. A clock jump spends it only
    /// when it stalls a live run (see `next_state`).
    #[must_use]
    pub fn is_fault(self) -> bool {
        matches!(
            self,
            Self::RunLost(..)
                | Self::RunGiveUp(_)
                | Self::RunCrash(_)
                | Self::CtlRestart
                | Self::CtlInterval(_)
                | Self::PersonReconcile(_)
                | Self::PersonNote
                | Self::PersonUnsuspend
        )
    }
}

/// The handoff protocol, checked with the production decisions.
#[derive(Clone, Debug)]
pub struct Handoff {
    pub bounds: Bounds,
    pub mutant: Option<Mutant>,
    pub keys: AnnotationKeys,
    /// Whether the reductions of [`crate::reduce`] apply (off only to test them).
    pub reduced: bool,
    holders: Vec<Holder>,
    tool_holders: [Holder; 3],
}

impl Handoff {
    #[must_use]
    pub fn new(bounds: Bounds, mutant: Option<Mutant>) -> Self {
        let h = |s: &str| Holder::from_str(s).expect("valid holder");
        Self {
            bounds,
            mutant,
            keys: AnnotationKeys::default(),
            holders: (0..bounds.runs)
                .map(|i| h(&format!("run{i}-verify")))
                .collect(),
            tool_holders: [h("run0-verify"), h("recover-verify"), h("janitor-verify")],
            reduced: true,
        }
    }

    /// The same model without the reductions (every step, every resourceVersion), to check
    /// that the reductions keep its behaviours.
    #[must_use]
    pub fn unreduced(bounds: Bounds, mutant: Option<Mutant>) -> Self {
        Self {
            reduced: false,
            ..Self::new(bounds, mutant)
        }
    }

    /// The representative the reduced model keeps for a state of the unreduced one: local
    /// steps merged, dead variables reset, resourceVersions renamed.
    #[must_use]
    pub fn representative(&self, mut s: State) -> State {
        for r in 0..s.runs.len() {
            crate::reduce::skip_local(&mut s, r);
        }
        crate::reduce::canonical(s)
    }

    pub(crate) fn is(&self, m: Mutant) -> bool {
        self.mutant == Some(m)
    }

    pub(crate) fn holder(&self, actor: Actor) -> &Holder {
        match actor {
            Actor::Run(i) => &self.holders[i],
            Actor::Resume => &self.tool_holders[0],
            Actor::Recover => &self.tool_holders[1],
            Actor::Janitor => &self.tool_holders[2],
        }
    }

    pub(crate) fn owner(&self, actor: Actor, epoch: u8) -> OwnerValue {
        OwnerValue::new(self.holder(actor).clone(), Epoch(u64::from(epoch)))
    }

    /// The nonce run `r` writes on object `o`: an RFC 3339 time, as production's.
    pub(crate) fn nonce(r: usize, o: usize) -> String {
        at(0)
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(
                i64::try_from(10 * r + o + 1).unwrap_or(0),
            ))
            .expect("in range")
            .to_string()
    }

    /// The marks production's pause writes (`Handoff::pause`): suspend (exclusive), a fresh
    /// `requestedAt` (restored only if unchanged), `suspendedBy` where absent (no actor of the
    /// model writes it: always written, removed if unchanged), and on the target
    /// `reconcile: disabled`.
    pub(crate) fn marks(r: usize, o: usize) -> Vec<Mark> {
        let mut marks = vec![
            Mark::field("/spec/suspend", json!(true)).exclusive(),
            Mark::annotation(REQUESTED_AT_ANNOTATION, Self::nonce(r, o))
                .restore(Restore::IfUnchanged),
            Mark::annotation(
                flux_suspend::handoff::SUSPENDED_BY_ANNOTATION,
                format!("flux-handoff run{r}-verify"),
            )
            .restore(Restore::IfUnchanged)
            .if_absent(),
        ];
        if o == T {
            marks.push(Mark::annotation(RECONCILE_ANNOTATION, RECONCILE_DISABLED));
        }
        marks
    }

    /// What a fence holds, rebuilt from its owner value and prior annotation with the
    /// production reader (`held_from_annotations`).
    pub(crate) fn held(&self, owner: &str, prior: Sym, uid: &str) -> flux_fence::decide::Held {
        let obj = json!({ "metadata": { "uid": uid, "annotations": {
            self.keys.owner.clone(): owner, self.keys.prior.clone(): text(prior) } } });
        flux_fence::decide::held_from_annotations(&obj, &self.keys)
            .expect("a prior this model wrote parses")
            .0
    }

    /// Whether run `r` is live: running, renewing by its own clock, holding the Lease at its
    /// epoch, not parked.
    pub(crate) fn live(&self, s: &State, r: usize) -> bool {
        let run = &s.runs[r];
        !run.finished()
            && !run.lost
            && run.renewed == s.clock
            && s.lease.as_ref().is_some_and(|l| {
                l.holder == Some(sym(self.holders[r].as_str()))
                    && l.transitions == run.epoch
                    && !l.is_parked()
            })
    }

    /// The run whose owner value `owner` is, if any.
    pub(crate) fn run_of(&self, s: &State, owner: &str) -> Option<usize> {
        (0..s.runs.len()).find(|&r| self.owner(Actor::Run(r), s.runs[r].epoch).to_string() == owner)
    }

    /// Records what a release write by `actor` on object `o` did, for the properties.
    pub(crate) fn note_release(&self, s: &mut State, actor: Actor, o: usize, before: &Obj) {
        let after = s.objs[o].clone();
        let owner_key = &self.keys.owner;
        if let Some(prev) = before.get(owner_key)
            && after.get(owner_key).is_none()
        {
            if let Some(r) = self.run_of(s, prev)
                && actor != Actor::Run(r)
                && self.live(s, r)
            {
                s.ghost |= ghost::LIVE_RELEASED;
            }
            if o == P
                && let Some(child) = s.objs[T].get(owner_key)
                && child.split(';').next() == prev.split(';').next()
            {
                s.ghost |= ghost::ORDER;
            }
        }
        if let Some(field) = s.person_wrote[o]
            && pointer_value(&before.render(), text(field))
                != pointer_value(&after.render(), text(field))
        {
            s.ghost |= ghost::OVERWROTE;
        }
        Self::touched(s, o, before);
    }

    /// Marks object `o` dirty for its controller when a write changed what queues a
    /// reconcile (`spec`, `requestedAt`).
    pub(crate) fn touched(s: &mut State, o: usize, before: &Obj) {
        let after = &s.objs[o];
        if after.suspend != before.suspend
            || after.get(REQUESTED_AT_ANNOTATION) != before.get(REQUESTED_AT_ANNOTATION)
        {
            s.ctl[o].dirty = true;
        }
    }

    /// `now` as the actors' clocks read it.
    pub(crate) fn now(s: &State) -> k8s_openapi::jiff::Timestamp {
        at(s.clock)
    }
}

fn pointer_value(v: &Value, p: &str) -> Option<Value> {
    v.pointer(p).cloned()
}
