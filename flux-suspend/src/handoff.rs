//! The pause and the resume of a handoff: the I/O that walks [`crate::steps::pause_steps`].

use flux_fence::mark::MarkAt;
use flux_fence::mark::Restore;
use flux_fence::outcome::AcquireOutcome;
use flux_fence::outcome::ReleaseOutcome;
use flux_fence::{FenceGuard, Fencer, Mark, ObjectRef};
use kube::Client;
use kube::api::Patch;
use serde_json::json;

use crate::cancel::Cancel;
pub use crate::error::SuspendError;
use crate::flux::{RECONCILE_ANNOTATION, RECONCILE_DISABLED, REQUESTED_AT_ANNOTATION};
use crate::io::{self, ControllerRef, ProofTarget, Timing};
use crate::judge::{Member, Proof, Role};
use crate::object;
use crate::readiness::{Readiness, readiness};
use crate::retire::Strategy;
use crate::steps::{Step, pause_steps};

/// First pause after a fence acquire lost every CAS round to other writers; doubles up to the
/// poll interval.
const CONTENDED_BACKOFF_START: std::time::Duration = std::time::Duration::from_millis(10);

/// A target and the Flux object that applies it (`None`: a top-level object).
#[derive(Debug, Clone)]
pub struct Chain {
    pub parent: Option<ObjectRef>,
    pub target: ObjectRef,
}

/// How to pause.
#[derive(Debug, Clone)]
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

/// The end of a pause that did not break.
#[derive(Debug)]
#[must_use = "an unproven pause is a value: do not work on it"]
pub enum PauseOutcome {
    /// The pause is proven; the work may start.
    Proven(Proof),
    /// Someone else holds a member of the chain; nothing of that member was changed.
    Refused {
        object: String,
        why: crate::session::Refusal,
    },
}

/// What a resume released.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[must_use = "what resume left held is in the report"]
pub struct ResumeReport {
    /// Objects released, in release order.
    pub released: Vec<String>,
    /// Objects that were no longer ours (gone, recreated, or another owner): not touched.
    pub not_ours: Vec<String>,
}

/// A fence held by this handoff, with the nonce its acquire wrote.
#[derive(Debug)]
struct HeldFence {
    guard: FenceGuard,
    nonce: Option<String>,
    /// The resourceVersion read when the nonce was seen acknowledged: the proof's baseline.
    acked: Option<String>,
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
            let held = HeldFence {
                guard,
                nonce: None,
                acked: None,
            };
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
    pub fn leave_paused(mut self) -> Vec<String> {
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
    pub fn held_objects(&self) -> Vec<String> {
        self.targets
            .iter()
            .chain(&self.parents)
            .map(|h| h.guard.object().to_string())
            .collect()
    }

    /// Pauses the chains: fence, retire in-flight executions, prove. `progress` is told each
    /// finished step.
    ///
    /// # Guarantees
    /// - Every write is a CAS ([`Fencer::acquire`]); with a Lease on the fencer it is asserted
    ///   before each write.
    /// - No target is fenced while a parent execution that began before the parent was fenced
    ///   may still run (ack: the parent's acknowledgement; restart: re-fence after the restart;
    ///   none: the parent read quiet before its fence — the weakest).
    /// - The proof never reads status conditions.
    ///
    /// # Errors
    /// Timeouts of each wait ([`SuspendError::ProofTimeout`] carries only counters), API and
    /// fence failures. What was fenced before the error stays held: call [`Handoff::resume`].
    pub async fn pause(
        &mut self,
        chains: &[Chain],
        opts: &PauseOptions,
        progress: &mut (dyn FnMut(Step) + Send),
    ) -> Result<PauseOutcome, SuspendError> {
        let (parents, targets) = members(chains)?;
        // One deadline for the whole pause, divided among its waits as they come.
        let deadline = tokio::time::Instant::now() + opts.timing.timeout;
        for step in pause_steps(opts.strategy, opts.quiesce, !parents.is_empty()) {
            if self.cancel.is_stopped() {
                return Err(SuspendError::Cancelled { step });
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let timing = Timing::new(
                opts.timing.interval,
                self.wait_budget.map_or(left, |cap| cap.min(left)),
            );
            match step {
                Step::QuiesceParents => {
                    for p in &parents {
                        self.wait(
                            step,
                            timing.timeout,
                            io::wait_quiet(&self.client, p, timing),
                        )
                        .await?;
                    }
                }
                Step::FenceParents => {
                    for p in &parents {
                        if let Some(refused) = self.fence(p, false, opts).await? {
                            return Ok(refused);
                        }
                    }
                }
                Step::AwaitParentAcks => {
                    let acked = self
                        .wait(step, timing.timeout, self.await_acks(false, timing))
                        .await?;
                    self.note_acked(false, acked);
                }
                Step::QuiesceTargets => {
                    for t in &targets {
                        self.wait(
                            step,
                            timing.timeout,
                            io::wait_quiet(&self.client, t, timing),
                        )
                        .await?;
                    }
                }
                Step::FenceTargets => {
                    for t in &targets {
                        if let Some(refused) = self.fence(t, true, opts).await? {
                            return Ok(refused);
                        }
                    }
                }
                Step::AwaitTargetAcks => {
                    let acked = self
                        .wait(step, timing.timeout, self.await_acks(true, timing))
                        .await?;
                    self.note_acked(true, acked);
                }
                Step::RestartController => {
                    let token = flux_fence::Holder::generate().to_string();
                    io::restart_controller(
                        &self.client,
                        &opts.controller,
                        &token,
                        self.fencer.lease(),
                        timing,
                    )
                    .await?;
                }
                Step::RefenceReverted => self.refence_and_reack(timing).await?,
                Step::Prove => {
                    let chain = self.proof_chain();
                    let prove = io::prove_stable_pause(
                        &self.client,
                        &chain,
                        &self.fencer.keys().owner,
                        self.acked_versions(),
                        timing,
                    );
                    let proof = self.wait(step, timing.timeout, prove).await?;
                    progress(step);
                    return Ok(PauseOutcome::Proven(proof));
                }
            }
            progress(step);
        }
        unreachable!("pause_steps always ends with Prove")
    }

    /// Releases every fence held, targets first (last fenced first), then parents — but no
    /// parent while a target is still held. Optionally waits until each released object is
    /// Ready for its current generation.
    ///
    /// # Errors
    /// [`SuspendError::Invalid`] when something could not be released (it stays held here and
    /// on the cluster, where fence discovery lists it); API failures.
    pub async fn resume(
        &mut self,
        wait_ready: Option<Timing>,
    ) -> Result<ResumeReport, SuspendError> {
        let mut report = ResumeReport::default();
        let mut released = Vec::new();
        for level in [true, false] {
            loop {
                let list = if level {
                    &mut self.targets
                } else {
                    &mut self.parents
                };
                let Some(held) = list.pop() else { break };
                let name = held.guard.object().to_string();
                let object = held.guard.object().clone();
                let uid = held.guard.uid().to_string();
                match release_with_retry(&self.fencer, held.guard).await {
                    Ok(ReleaseOutcome::Released { .. }) => {
                        report.released.push(name);
                        released.push((object, uid));
                    }
                    Ok(ReleaseOutcome::Kept { guard, why }) => {
                        let list = if level {
                            &mut self.targets
                        } else {
                            &mut self.parents
                        };
                        list.push(HeldFence {
                            guard: *guard,
                            nonce: held.nonce,
                            acked: None,
                        });
                        let detail = match &why {
                            // Words the CLI's next step reads (`release of OBJ withheld`).
                            flux_fence::outcome::Kept::MarkMoved { at } => format!(
                                "release of {} withheld: {at} was changed by another writer",
                                flux_fence::recovery::short_ref(&object)
                            ),
                            other => format!("{name} kept: {other:?}"),
                        };
                        return Err(SuspendError::Invalid {
                            step: "releasing",
                            detail,
                        });
                    }
                    Ok(_) => report.not_ours.push(name),
                    Err(source) => {
                        return Err(SuspendError::Fence {
                            step: "releasing",
                            source,
                        });
                    }
                }
            }
        }
        if let Some(timing) = wait_ready {
            for (obj, uid) in &released {
                wait_ready_after_resume(&self.client, obj, uid, timing).await?;
            }
        }
        Ok(report)
    }

    async fn fence(
        &mut self,
        obj: &ObjectRef,
        is_target: bool,
        opts: &PauseOptions,
    ) -> Result<Option<PauseOutcome>, SuspendError> {
        let nonce = new_nonce();
        let by = suspended_by(&self.fencer.owner().holder, opts.reason.as_deref());
        let marks = fence_marks(&nonce, is_target, &by);
        // A busy controller moves the resourceVersion with every status write, so a CAS can
        // lose several rounds in a row. Contention is a value: re-read and try again, backing
        // off, within the phase budget — never a write without the test.
        let deadline = tokio::time::Instant::now() + opts.timing.timeout;
        let mut backoff = CONTENDED_BACKOFF_START;
        let mut known = self.take_read(obj);
        let outcome = loop {
            let outcome = self
                .fencer
                .acquire_on(obj, known.take(), marks.clone(), opts.reason.as_deref())
                .await
                .map_err(|source| SuspendError::Fence {
                    step: "fencing",
                    source,
                })?;
            if !matches!(outcome, AcquireOutcome::Contended)
                || tokio::time::Instant::now() + backoff > deadline
            {
                break outcome;
            }
            tracing::debug!(object = %obj, ?backoff, "fence contended; retrying");
            if self
                .cancel
                .unless_stopped(tokio::time::sleep(backoff))
                .await
                .is_none()
            {
                return Err(SuspendError::Cancelled {
                    step: if is_target {
                        Step::FenceTargets
                    } else {
                        Step::FenceParents
                    },
                });
            }
            backoff = (backoff * 2).min(opts.timing.interval.max(CONTENDED_BACKOFF_START));
        };
        let refused = |why: crate::session::Refusal| {
            Ok(Some(PauseOutcome::Refused {
                object: obj.to_string(),
                why,
            }))
        };
        let guard = match outcome {
            AcquireOutcome::Acquired(guard) => guard,
            AcquireOutcome::Refused { holder } => {
                return refused(crate::session::Refusal::FencedBy { holder });
            }
            AcquireOutcome::AlreadyMarked { at } => {
                return refused(crate::session::Refusal::MarkTaken {
                    at,
                    field_manager: None,
                });
            }
            AcquireOutcome::OursDiffers => return refused(crate::session::Refusal::OursDiffers),
            AcquireOutcome::NotFound => {
                return Err(SuspendError::Invalid {
                    step: "fencing",
                    detail: format!("{obj} not found"),
                });
            }
            AcquireOutcome::Ambiguous { guard, why } => {
                // Keep it, so cleanup releases it with a CAS if it turns out to be ours.
                self.push(
                    is_target,
                    HeldFence {
                        guard,
                        nonce: Some(nonce),
                        acked: None,
                    },
                );
                return Err(SuspendError::Invalid {
                    step: "fencing",
                    detail: format!("{obj}: response lost and the re-read is unclear ({why:?})"),
                });
            }
            AcquireOutcome::Contended => {
                return Err(SuspendError::Invalid {
                    step: "fencing",
                    detail: format!("{obj} changed on every attempt"),
                });
            }
            other => {
                return Err(SuspendError::Invalid {
                    step: "fencing",
                    detail: format!("{obj}: {other:?}"),
                });
            }
        };
        self.push(
            is_target,
            HeldFence {
                guard,
                nonce: Some(nonce),
                acked: None,
            },
        );
        Ok(None)
    }

    /// A read-only wait of `step`, abandoned when the handoff is stopped; reports that it still
    /// waits about every [`crate::steps::WAITING_EVERY`].
    async fn wait<T>(
        &self,
        step: Step,
        budget: std::time::Duration,
        wait: impl Future<Output = Result<T, SuspendError>>,
    ) -> Result<T, SuspendError> {
        let started = tokio::time::Instant::now();
        let ticks = async {
            let Some(tx) = &self.waiting else {
                return std::future::pending().await;
            };
            let mut every = tokio::time::interval_at(
                started + crate::steps::WAITING_EVERY,
                crate::steps::WAITING_EVERY,
            );
            loop {
                every.tick().await;
                let _ = tx.send(crate::steps::Waiting {
                    step,
                    waited: started.elapsed(),
                    budget,
                });
            }
        };
        let reported = async {
            tokio::select! {
                r = wait => r,
                () = ticks => unreachable!("the ticks never end"),
            }
        };
        self.cancel
            .unless_stopped(reported)
            .await
            .unwrap_or(Err(SuspendError::Cancelled { step }))
    }

    /// After a restart: put back every mark a pre-restart parent execution reverted, then
    /// retire what the restart started — the new controller may already be reconciling a
    /// member (one it found reverted, before the re-fence) — with a fresh nonce on every member
    /// ([`Fencer::remark`]: CAS, Lease asserted, the prior kept for the release) and its
    /// acknowledgement.
    async fn refence_and_reack(&mut self, timing: Timing) -> Result<(), SuspendError> {
        let owner_key = self.fencer.keys().owner.clone();
        let lease = self.fencer.lease().cloned();
        for h in self.parents.iter().chain(&self.targets) {
            io::refence(&self.client, &h.guard, &owner_key, lease.as_ref()).await?;
        }
        let at = MarkAt::Annotation(REQUESTED_AT_ANNOTATION.into());
        for h in self.parents.iter_mut().chain(self.targets.iter_mut()) {
            let nonce = new_nonce();
            let ours = self
                .fencer
                .remark(&mut h.guard, &at, json!(nonce))
                .await
                .map_err(|source| SuspendError::Fence {
                    step: "requesting an acknowledgement after the restart",
                    source,
                })?;
            if ours {
                let seen =
                    io::wait_acknowledged(&self.client, h.guard.object(), &nonce, timing).await?;
                h.acked = resource_version(&seen);
                h.nonce = Some(nonce);
            }
        }
        Ok(())
    }

    /// The preflight's read of `obj`, once.
    fn take_read(&mut self, obj: &ObjectRef) -> Option<serde_json::Value> {
        let i = self.reads.iter().position(|(o, _)| o == obj)?;
        Some(self.reads.swap_remove(i).1)
    }

    fn push(&mut self, is_target: bool, held: HeldFence) {
        if is_target {
            self.targets.push(held);
        } else {
            self.parents.push(held);
        }
    }

    /// Waits for each acknowledgement of one level, watching each object from the version
    /// its fence write left (no read first), and keeps the version it was seen at.
    async fn await_acks(
        &self,
        targets: bool,
        timing: Timing,
    ) -> Result<Vec<Option<String>>, SuspendError> {
        let list = if targets {
            &self.targets
        } else {
            &self.parents
        };
        let mut versions = Vec::with_capacity(list.len());
        for h in list {
            let mut acked = None;
            if let Some(nonce) = &h.nonce {
                let seen = io::wait_acknowledged_since(
                    &self.client,
                    h.guard.object(),
                    nonce,
                    h.guard.resource_version(),
                    timing,
                )
                .await?;
                acked = resource_version(&seen);
            }
            versions.push(acked);
        }
        Ok(versions)
    }

    /// Records the versions [`Handoff::await_acks`] returned for one level.
    fn note_acked(&mut self, targets: bool, versions: Vec<Option<String>>) {
        let list = if targets {
            &mut self.targets
        } else {
            &mut self.parents
        };
        for (h, v) in list.iter_mut().zip(versions) {
            h.acked = v;
        }
    }

    /// The versions every member was seen at when it acknowledged, in proof-chain order, as
    /// the proof's baseline: its first pass then counts only if no member was written since
    /// (the judge compares), so a quiet chain is proven in
    /// [`crate::judge::REQUIRED_PASSES`] reads spaced by the interval. `None` when a member
    /// has none (strategies without acknowledgements).
    fn acked_versions(&self) -> Option<Vec<String>> {
        self.parents
            .iter()
            .chain(&self.targets)
            .map(|h| h.acked.clone())
            .collect()
    }

    /// A recheck of the pause this handoff proved, for the work to call before a protected
    /// write ([`crate::io::PauseCheck::still_holds`]).
    #[must_use]
    pub fn pause_check(&self) -> crate::io::PauseCheck {
        crate::io::PauseCheck::new(
            self.client.clone(),
            self.fencer.keys().owner.clone(),
            self.proof_chain(),
        )
    }

    fn proof_chain(&self) -> Vec<ProofTarget> {
        let owner = self.fencer.owner().to_string();
        let member = |h: &HeldFence, role: Role, needs_rd: bool| ProofTarget {
            object: h.guard.object().clone(),
            member: Member {
                role,
                uid: h.guard.uid().to_string(),
                owner: owner.clone(),
                needs_reconcile_disabled: needs_rd,
            },
        };
        self.parents
            .iter()
            .map(|h| member(h, Role::Parent, false))
            .chain(self.targets.iter().map(|h| member(h, Role::Target, true)))
            .collect()
    }
}

impl Drop for Handoff {
    fn drop(&mut self) {
        if self.holds_anything() {
            tracing::error!(
                held = ?self.held_objects(),
                "handoff dropped while holding fences: `flux-handoff fences` lists them"
            );
        }
    }
}

/// The Flux Operator's annotation naming who suspended an object (its web UI shows it).
pub const SUSPENDED_BY_ANNOTATION: &str = "fluxcd.controlplane.io/suspendedBy";

/// The `suspendedBy` value: `flux-handoff HOLDER` and the reason when given (validated, never a
/// secret: it is on the fence's reason annotation too).
#[must_use]
pub fn suspended_by(holder: &flux_fence::Holder, reason: Option<&str>) -> String {
    match reason {
        Some(r) if !r.is_empty() => format!("flux-handoff {holder}: {r}"),
        _ => format!("flux-handoff {holder}"),
    }
}

/// The marks of a fence: `spec.suspend=true` (exclusive), the `requestedAt` nonce, for a
/// target `reconcile: disabled`, and `fluxcd.controlplane.io/suspendedBy` = `by` where no one
/// else set one (a value someone else set stays, and the release leaves it; ours is removed
/// on release unless someone changed it since).
pub(crate) fn fence_marks(nonce: &str, is_target: bool, by: &str) -> Vec<Mark> {
    let mut marks = vec![
        Mark::field("/spec/suspend", json!(true)).exclusive(),
        Mark::annotation(REQUESTED_AT_ANNOTATION, nonce.to_string()).restore(Restore::IfUnchanged),
        Mark::annotation(SUSPENDED_BY_ANNOTATION, by)
            .restore(Restore::IfUnchanged)
            .if_absent(),
    ];
    if is_target {
        marks.push(Mark::annotation(RECONCILE_ANNOTATION, RECONCILE_DISABLED));
    }
    marks
}

/// The distinct parents and targets of `chains`, in order; an object that is both is invalid.
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

/// Budget for re-trying a release that lost every CAS round to other writers or whose response
/// was lost without being applied.
const RELEASE_CONTENTION_BUDGET: std::time::Duration = std::time::Duration::from_secs(30);

/// Releases, re-reading and trying again (with backoff, bounded) while other writers win every
/// CAS round, or while a release's response was lost (a 5xx, a reset connection) and the
/// re-read showed it was not applied: every try starts with a fresh read and writes a CAS on
/// it, so nothing is sent blindly. Any other outcome is returned as is.
async fn release_with_retry(
    fencer: &Fencer,
    mut guard: FenceGuard,
) -> Result<ReleaseOutcome, flux_fence::FenceError> {
    let deadline = tokio::time::Instant::now() + RELEASE_CONTENTION_BUDGET;
    let mut backoff = CONTENDED_BACKOFF_START;
    loop {
        match fencer.release(guard).await? {
            ReleaseOutcome::Kept {
                guard: g,
                why: flux_fence::outcome::Kept::Contended | flux_fence::outcome::Kept::Unknown,
            } if tokio::time::Instant::now() + backoff < deadline => {
                guard = *g;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_secs(1));
            }
            other => return Ok(other),
        }
    }
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

/// Requests a reconcile of a released object (uid precondition) and waits until it is Ready
/// for its current generation with that request handled.
async fn wait_ready_after_resume(
    client: &Client,
    obj: &ObjectRef,
    uid: &str,
    timing: Timing,
) -> Result<(), SuspendError> {
    let nonce = new_nonce();
    let patch =
        json!({ "metadata": { "uid": uid, "annotations": { REQUESTED_AT_ANNOTATION: nonce } } });
    object::api(client, obj)
        .patch(
            &obj.name,
            &flux_fence::api::patch_params(),
            &Patch::Merge(patch),
        )
        .await
        .map_err(SuspendError::kube("requesting a reconcile after resume"))?;
    let last = std::sync::Mutex::new(Readiness::Pending);
    let ready = io::poll_soon(timing, || async {
        let v = object::get_json(client, obj).await.ok()?;
        let r = readiness(&v, Some(&nonce));
        let done = r == Readiness::Ready;
        *last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = r;
        done.then_some(())
    })
    .await;
    match ready {
        Some(()) => Ok(()),
        None => Err(SuspendError::Invalid {
            step: "waiting for Ready after resume",
            detail: format!(
                "{obj} not Ready within {}s ({:?})",
                timing.timeout.as_secs(),
                last.into_inner()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            ),
        }),
    }
}
