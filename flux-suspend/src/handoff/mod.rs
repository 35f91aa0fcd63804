//! The pause and the resume of a handoff: the I/O that walks [`crate::steps::pause_steps`].

use flux_fence::mark::MarkAt;
use flux_fence::outcome::AcquireOutcome;
use flux_fence::{FenceGuard, Fencer, ObjectRef};
use kube::Client;
use serde_json::json;

use crate::cancel::Cancel;
pub use crate::error::{OtherWriter, SuspendError};
pub use marks::SUSPENDED_BY_ANNOTATION;
pub use marks::suspended_by;
pub(crate) use marks::{REPLICAS_POINTER, gate_marks, in_set, member_marks, pause_mark};

mod fence;
mod marks;
mod pause;
mod ready;
mod resume;
use crate::flux::{RECONCILE_ANNOTATION, RECONCILE_DISABLED, REQUESTED_AT_ANNOTATION};
use crate::io::{self, ControllerRef, ProofTarget, Timing};
use crate::judge::{Member, Proof, Role};
use crate::retire::Strategy;
use crate::steps::{Step, pause_steps};
pub use ready::{NotReady, ReadyWait};

/// First pause after a fence acquire lost every CAS round to other writers; doubles up to the
/// poll interval.
const CONTENDED_BACKOFF_START: std::time::Duration = std::time::Duration::from_millis(10);

/// A target and the Flux object that applies it (`None`: a top-level object).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Chain {
    pub parent: Option<ObjectRef>,
    pub target: ObjectRef,
    /// A replicas gate's count ([`crate::TargetSpec::scaled`]); `None` for a Flux object.
    pub replicas: Option<i32>,
}

impl Chain {
    /// `target`, under `parent` when a parent Kustomization applies it.
    #[must_use]
    pub fn new(parent: Option<ObjectRef>, target: ObjectRef) -> Self {
        Self {
            parent,
            target,
            replicas: None,
        }
    }

    /// The same chain as a replicas gate: its target, a Deployment, scaled to `replicas`.
    #[must_use]
    pub fn scaled(mut self, replicas: i32) -> Self {
        self.replicas = Some(replicas);
        self
    }
}

/// How to pause. Build it with [`PauseOptions::new`] and the `with_` methods; it may grow
/// fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PauseOptions {
    pub strategy: Strategy,
    /// Wait for targets to be quiet before fencing them (implied by [`Strategy::QuietWindow`]).
    pub quiesce: bool,
    /// The controller Deployment [`Strategy::Restart`] restarts.
    pub controller: ControllerRef,
    /// The interval of every poll, and the budget of the whole pause: its waits share one
    /// deadline (see [`Handoff::with_wait_budget`] to cap a single wait).
    pub timing: Timing,
    /// Why; recorded on each fenced object (annotation and Event). Never a secret.
    pub reason: Option<String>,
}

impl PauseOptions {
    /// Pause with `strategy`, polling and bounded by `timing`; no quiet wait before fencing
    /// unless the strategy implies it, the default controller (`flux-system/
    /// kustomize-controller`), no reason.
    #[must_use]
    pub fn new(strategy: Strategy, timing: Timing) -> Self {
        Self {
            strategy,
            quiesce: false,
            controller: ControllerRef::default(),
            timing,
            reason: None,
        }
    }

    /// The controller Deployment that [`Strategy::Restart`] restarts.
    #[must_use]
    pub fn with_controller(mut self, controller: ControllerRef) -> Self {
        self.controller = controller;
        self
    }

    /// Wait for the targets to be quiet before fencing them.
    #[must_use]
    pub fn with_quiesce(mut self, quiesce: bool) -> Self {
        self.quiesce = quiesce;
        self
    }

    /// Why; recorded on each fenced object. Never a secret.
    #[must_use]
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// The end of a pause that did not break.
#[derive(Debug)]
#[must_use = "an unproven pause is a value: do not work on it"]
#[non_exhaustive]
pub enum PauseOutcome {
    /// The pause is proven; the work may start.
    Proven(Proof),
    /// Someone else holds a member of the chain; nothing of that member was changed.
    Refused {
        object: Box<ObjectRef>,
        why: crate::refusal::Refusal,
    },
}

/// What a resume released.
#[derive(Debug, Default, Clone, PartialEq)]
#[must_use = "what resume left held is in the report"]
#[non_exhaustive]
pub struct ResumeReport {
    /// Objects released, in release order.
    pub released: Vec<ObjectRef>,
    /// Objects that were no longer ours (gone, recreated, or another owner): not touched.
    pub not_ours: Vec<ObjectRef>,
    /// Those of `released` whose `spec.suspend` another writer had set back to false (a
    /// person's `flux resume`): their value was kept, the other marks restored, the fence
    /// removed ([`flux_fence::outcome::ReleaseOutcome::Released`]'s `kept_resume`).
    pub kept_resume: Vec<ObjectRef>,
    /// Each released object with the uid it had: what [`Handoff::wait_ready`] waits for.
    uids: Vec<(ObjectRef, String)>,
}

/// The span of one member's step (`fence`, `ack`, `release`) under the phase's span, as
/// kube-runtime gives each object its reconcile's span: the object and its role as fields.
fn member_span(step: &'static str, object: &ObjectRef, target: bool) -> tracing::Span {
    let role = if target { "target" } else { "parent" };
    tracing::info_span!("member", step, object = %object, role)
}

/// A fence held by this handoff, with the nonce its acquire wrote.
#[derive(Debug)]
struct HeldFence {
    guard: FenceGuard,
    nonce: Option<String>,
    /// The resourceVersion read when the nonce was seen acknowledged: the proof's baseline.
    acked: Option<String>,
}

impl HeldFence {
    /// A fence just taken (or adopted, without a nonce): not acknowledged yet.
    fn new(guard: FenceGuard, nonce: Option<String>) -> Self {
        Self {
            guard,
            nonce,
            acked: None,
        }
    }

    /// The count a replicas gate holds its Deployment at (its `/spec/replicas` mark); `None`
    /// for a Flux object's fence.
    fn gate(&self) -> Option<i32> {
        gate_count(&self.guard.held().marks)
    }
}

/// The count of a replicas gate's recorded marks ([`gate_marks`]); `None` for any other
/// fence.
fn gate_count(marks: &[flux_fence::mark::RecordedMark]) -> Option<i32> {
    marks
        .iter()
        .find(|m| m.at == MarkAt::Field(REPLICAS_POINTER.into()))
        .and_then(|m| m.value.as_i64())
        .and_then(|n| i32::try_from(n).ok())
}

/// One handoff: the fences it holds, parents and targets, and how to release them.
///
/// # Guarantees
/// - Fences are taken top-down (parents, then targets) and released bottom-up; a parent is
///   never released while one of its targets is still held.
/// - Everything this handoff fenced stays listed in it until released, including fences whose
///   write had an unknown outcome — so cleanup can act on every exit path.
pub struct Handoff {
    client: Client,
    fencer: Fencer,
    parents: Vec<HeldFence>,
    targets: Vec<HeldFence>,
    cancel: Cancel,
    waiting: Option<tokio::sync::mpsc::UnboundedSender<crate::steps::Waiting>>,
    wait_budget: Option<std::time::Duration>,
    /// Objects as a preflight read them, each used once for the first fence decision.
    reads: Vec<(ObjectRef, serde_json::Value)>,
}

impl std::fmt::Debug for Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoff")
            .field("fencer", &self.fencer)
            .field("held", &self.held_objects())
            .finish_non_exhaustive()
    }
}

impl Handoff {
    /// A handoff writing with `fencer` (which should carry the Lease, so every write asserts it).
    #[must_use]
    pub fn new(client: Client, fencer: Fencer) -> Self {
        Self {
            client,
            fencer,
            parents: Vec::new(),
            targets: Vec::new(),
            cancel: Cancel::new(),
            waiting: None,
            wait_budget: None,
            reads: Vec::new(),
        }
    }

    /// Gives the pause the objects as a preflight just read them: each fence's first CAS is
    /// decided on that read instead of reading again ([`Fencer::acquire_on`]); if the object
    /// moved since, the CAS is refused and the fence reads afresh.
    #[must_use]
    pub fn with_reads(mut self, reads: Vec<(ObjectRef, serde_json::Value)>) -> Self {
        self.reads = reads;
        self
    }

    /// Caps each single wait of [`Handoff::pause`] at `budget`; without it a wait may use
    /// whatever is left of the pause's whole budget ([`PauseOptions::timing`]).
    #[must_use]
    pub fn with_wait_budget(mut self, budget: std::time::Duration) -> Self {
        self.wait_budget = Some(budget);
        self
    }

    /// Sends a [`crate::steps::Waiting`] to `tx` about every
    /// [`crate::steps::WAITING_EVERY`] of each wait of [`Handoff::pause`].
    #[must_use]
    pub fn with_waiting(
        mut self,
        tx: tokio::sync::mpsc::UnboundedSender<crate::steps::Waiting>,
    ) -> Self {
        self.waiting = Some(tx);
        self
    }

    /// Makes [`Handoff::pause`] stop at its next safe point when `cancel` is stopped: a wait is
    /// abandoned, a write in flight finishes first (so what it did is known), and no further
    /// write starts; it then returns [`SuspendError::Cancelled`]. Release with
    /// [`Handoff::resume`] as on any other error.
    #[must_use]
    pub fn with_cancel(mut self, cancel: Cancel) -> Self {
        self.cancel = cancel;
        self
    }

    /// Takes over fences found on the cluster (e.g. for `resume --holder`). Guards whose marks
    /// include `reconcile: disabled` are targets (released first); the rest are parents.
    #[must_use]
    pub fn adopt(client: Client, fencer: Fencer, guards: Vec<FenceGuard>) -> Self {
        let mut h = Self::new(client, fencer);
        h.absorb(guards);
        h
    }

    /// Adds fences found on the cluster to the ones this handoff holds (e.g. a fence whose
    /// write landed while the run was interrupted), classified like [`Handoff::adopt`], so one
    /// [`Handoff::resume`] releases everything in order.
    pub fn absorb(&mut self, guards: Vec<FenceGuard>) {
        let h = self;
        for guard in guards {
            let is_target = guard.held().marks.iter().any(|m| {
                m.at == MarkAt::Annotation(RECONCILE_ANNOTATION.into())
                    && m.value == json!(RECONCILE_DISABLED)
            });
            let held = HeldFence::new(guard, None);
            if is_target {
                h.targets.push(held);
            } else {
                h.parents.push(held);
            }
        }
    }

    /// The fencer this handoff writes with.
    #[must_use]
    pub fn fencer(&self) -> &Fencer {
        &self.fencer
    }

    /// Whether this handoff holds a fence on `obj`.
    #[must_use]
    pub fn holds(&self, obj: &ObjectRef) -> bool {
        self.targets
            .iter()
            .chain(&self.parents)
            .any(|h| h.guard.object() == obj)
    }

    /// Deliberately leaves every fence on the cluster (a pause that outlives this process);
    /// returns the objects left fenced, targets first. A later process adopts them with
    /// [`flux_fence::Fencer::adopt_recorded`] and [`Handoff::adopt`].
    #[must_use = "the returned list names what stays fenced"]
    pub fn leave_paused(mut self) -> Vec<ObjectRef> {
        let held = self.held_objects();
        for h in self.targets.drain(..).chain(self.parents.drain(..)) {
            h.guard.leave_in_place();
        }
        held
    }

    /// Whether any fence is held.
    #[must_use]
    pub fn holds_anything(&self) -> bool {
        !self.parents.is_empty() || !self.targets.is_empty()
    }

    /// The objects held, targets first (release order).
    #[must_use]
    pub fn held_objects(&self) -> Vec<ObjectRef> {
        self.targets
            .iter()
            .chain(&self.parents)
            .map(|h| h.guard.object().clone())
            .collect()
    }
}

impl Drop for Handoff {
    fn drop(&mut self) {
        if self.holds_anything() {
            tracing::error!(
                held = %self.held_objects().iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
                "handoff dropped while holding fences: they stay until resumed or recovered"
            );
        }
    }
}

/// The distinct parents and targets of `chains`, in order; an object that is both is invalid.
/// A replicas gate is a target (released first, before the parent that applies it).
pub(crate) fn members(chains: &[Chain]) -> Result<(Vec<ObjectRef>, Vec<ObjectRef>), SuspendError> {
    let mut parents: Vec<ObjectRef> = Vec::new();
    let mut targets: Vec<ObjectRef> = Vec::new();
    for c in chains {
        if let Some(p) = &c.parent
            && !parents.contains(p)
        {
            parents.push(p.clone());
        }
        if !targets.contains(&c.target) {
            targets.push(c.target.clone());
        }
    }
    if let Some(both) = targets.iter().find(|t| parents.contains(t)) {
        return Err(SuspendError::Invalid {
            step: "planning the pause",
            detail: format!("{both} is both a target and a parent"),
        });
    }
    Ok((parents, targets))
}

/// The count of `target` when `chains` make it a replicas gate.
pub(crate) fn gate_of(chains: &[Chain], target: &ObjectRef) -> Option<i32> {
    chains
        .iter()
        .find(|c| c.target == *target)
        .and_then(|c| c.replicas)
}

fn resource_version(v: &serde_json::Value) -> Option<String> {
    v.pointer("/metadata/resourceVersion")
        .and_then(serde_json::Value::as_str)
        .map(str::to_string)
}

/// A fresh `requestedAt` value: an RFC 3339 timestamp, as `flux reconcile` writes.
#[must_use]
pub fn new_nonce() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}
