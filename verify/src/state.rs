//! The model's state: the API server's objects, the actors' local state and ghost bits that
//! record what the properties need to know about the past.

use crate::world::{LeaseObj, Obj, Sym};

/// Index of the parent Kustomization in [`State::objs`].
pub const P: usize = 0;
/// Index of the target Kustomization (a child the parent applies).
pub const T: usize = 1;

/// Where a handoff run is (protocol phases 2–10, strategy `ack`, chain parent → target).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pc {
    Lease,
    ReadFence(usize),
    WriteFence(usize),
    Ack(usize),
    Prove,
    /// Re-reads the chain right before the protected write (production's
    /// `PauseCheck::still_holds` before the root Secret).
    Recheck,
    Work,
    ReadRelease(usize),
    WriteRelease(usize),
    EndLease,
    Done,
    Crashed,
}

/// A fence a run holds: the prior annotation its acquire wrote, and the object's fence count
/// after it (which executions it must outlive).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hold {
    pub prior: Sym,
    pub seq: u8,
}

/// What the judge saw of one member in one pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeenC {
    pub rv: u16,
    pub owner: Option<Sym>,
    pub suspended: bool,
    pub disabled: bool,
}

/// One handoff run.
#[allow(clippy::struct_excessive_bools)]
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Run {
    pub pc: Pc,
    /// The Lease epoch it holds (0: none yet).
    pub epoch: u8,
    /// The tick of its own last renewal (its monotonic view).
    pub renewed: u8,
    /// It saw its Lease lost (sticky).
    pub lost: bool,
    pub held: [Option<Hold>; 2],
    /// The object read before the pending write.
    pub snap: Option<Obj>,
    /// The judge's last passes (at most two: enough for two consecutive counted passes).
    pub passes: Vec<[SeenC; 2]>,
    pub proven: bool,
    /// A release was refused (a mark moved): the Lease is left held for the fence report.
    pub kept: bool,
    /// It parked its Lease after a proven pause (`flux-handoff pause`).
    pub parked: bool,
    /// Ghost: the person-flip sequence number ([`State::flips`]) at its last re-read of the
    /// chain that found the pause holding (`None`: it has not re-read since its proof).
    pub rechecked_at: Option<u8>,
}

impl Run {
    #[must_use]
    pub fn new() -> Self {
        Self {
            pc: Pc::Lease,
            epoch: 0,
            renewed: 0,
            lost: false,
            held: [None, None],
            snap: None,
            passes: Vec::new(),
            proven: false,
            kept: false,
            parked: false,
            rechecked_at: None,
        }
    }

    /// Whether it is in its work phase: proven, up to and including its protected write.
    #[must_use]
    pub fn working(&self) -> bool {
        matches!(self.pc, Pc::Recheck | Pc::Work)
    }

    #[must_use]
    pub fn finished(&self) -> bool {
        matches!(self.pc, Pc::Done | Pc::Crashed)
    }
}

impl Default for Run {
    fn default() -> Self {
        Self::new()
    }
}

/// One execution of a reconcile, from the read at its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Exec {
    /// The object's fence count when it started.
    pub seq: u8,
    /// The `requestedAt` it read (it will record it as handled).
    pub nonce: Option<Sym>,
    /// It read `spec.suspend=true` (the suspended path: status only).
    pub suspended: bool,
    /// Parent only: the child carried `reconcile: disabled` when it read it.
    pub child_disabled: bool,
    /// Parent only: its apply of the child is done.
    pub applied: bool,
}

/// The controller's view of one object: serial executions, a dirty mark for the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Ctl {
    pub exec: Option<Exec>,
    pub dirty: bool,
}

/// Where a one-shot tool (`resume`, `fences recover`, the final recovery) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ToolPc {
    Idle,
    Lease,
    Release(usize),
    EndLease,
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tool {
    pub pc: ToolPc,
    pub epoch: u8,
    pub kept: bool,
}

impl Tool {
    #[must_use]
    pub fn idle() -> Self {
        Self {
            pc: ToolPc::Idle,
            epoch: 0,
            kept: false,
        }
    }

    #[must_use]
    pub fn busy(&self) -> bool {
        !matches!(self.pc, ToolPc::Idle | ToolPc::Done)
    }
}

/// What is left of each bounded nondeterministic choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Budget {
    /// Faults of any kind left (crash, lost response, restart, interval, person write,
    /// timeout, a clock jump that stalls a live run): each kind also has its own budget below.
    pub faults: u8,
    pub crashes: u8,
    pub lost: u8,
    pub restarts: u8,
    pub intervals: u8,
    pub person: u8,
    pub ticks: u8,
    pub giveups: u8,
}

/// Ghost bits: facts about the past that the properties check.
pub mod ghost {
    pub const LIVE_RELEASED: u8 = 1;
    pub const OVERWROTE: u8 = 2;
    pub const SECRET_UNPROVEN: u8 = 4;
    pub const FROZEN_BLOCKS: u8 = 8;
    pub const ORDER: u8 = 16;
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub objs: [Obj; 2],
    /// Each object's version before its last write (what a lagging informer may still show).
    pub prev: [Option<Obj>; 2],
    pub lease: Option<LeaseObj>,
    /// Model time in ticks (each longer than a lease duration).
    pub clock: u8,
    pub runs: Vec<Run>,
    pub ctl: [Ctl; 2],
    pub budget: Budget,
    pub resume: Tool,
    pub recover: Tool,
    pub janitor: Tool,
    /// Successful fence acquisitions per object.
    pub fences: [u8; 2],
    /// A field a person wrote on a fenced object (the field's JSON Pointer), until re-fenced.
    pub person_wrote: [Option<Sym>; 2],
    /// A person changed an `Exact` mark under a fence (the release then keeps the fence).
    pub person_moved_exact: bool,
    /// Ghost sequence number: how many times a person set the target's `spec.suspend=false`.
    pub flips: u8,
    pub ghost: u8,
}

/// Releases go target first, then parent, then the Lease.
pub(crate) fn next_release(o: usize) -> Pc {
    if o == T {
        Pc::ReadRelease(P)
    } else {
        Pc::EndLease
    }
}
