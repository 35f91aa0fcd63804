//! The pause: fencing top-down, retiring in-flight executions, the proof.

use tracing::Instrument;

use super::{
    Chain, Handoff, HeldFence, MarkAt, Member, PauseOptions, PauseOutcome, ProofTarget,
    REQUESTED_AT_ANNOTATION, Role, Step, SuspendError, Timing, io, json, member_span, members,
    new_nonce, pause_steps, resource_version,
};

/// The pause's steps for these members: [`pause_steps`] and, for replicas gates,
/// [`crate::steps::with_gates`].
fn steps_for(
    chains: &[Chain],
    opts: &PauseOptions,
    parents: &[flux_fence::ObjectRef],
    targets: &[flux_fence::ObjectRef],
) -> Vec<Step> {
    let steps = pause_steps(opts.strategy, opts.quiesce, !parents.is_empty());
    let gates = targets
        .iter()
        .filter(|t| super::gate_of(chains, t).is_some())
        .count();
    crate::steps::with_gates(steps, gates, targets.len())
}

impl Handoff {
    /// Pauses the chains: fence, retire in-flight executions, prove. `progress` is told each
    /// finished step.
    ///
    /// # Guarantees
    /// - Every write is a CAS ([`flux_fence::Fencer::acquire`]); with a Lease on the fencer it is asserted
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
        for step in steps_for(chains, opts, &parents, &targets) {
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
                        let span = member_span("fence", p, false);
                        // Boxed: a fence's future inline would grow every pause future.
                        if let Some(refused) = Box::pin(self.fence(p, false, None, opts))
                            .instrument(span)
                            .await?
                        {
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
                        let span = member_span("fence", t, true);
                        let replicas = super::gate_of(chains, t);
                        if let Some(refused) = Box::pin(self.fence(t, true, replicas, opts))
                            .instrument(span)
                            .await?
                        {
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
                Step::AwaitScaled => self.await_scaled(timing).await?,
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

    /// Waits until every replicas gate's Deployment reports its count with no Pod of any other
    /// left ([`io::wait_scaled`]), one gate after the other within the step's budget.
    async fn await_scaled(&self, timing: Timing) -> Result<(), SuspendError> {
        let owner_key = &self.fencer.keys().owner;
        let owner = self.fencer.owner().to_string();
        for h in &self.targets {
            let Some(want) = h.gate() else { continue };
            let object = h.guard.object();
            let scaled = io::wait_scaled(
                &self.client,
                object,
                want,
                owner_key,
                &owner,
                h.guard.uid(),
                timing,
            );
            self.wait(Step::AwaitScaled, timing.timeout, scaled).await?;
        }
        Ok(())
    }

    /// A read-only wait of `step`, abandoned when the handoff is stopped; reports that it still
    /// waits about every [`crate::steps::WAITING_EVERY`].
    pub(super) async fn wait<T>(
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
    pub(super) async fn refence_and_reack(&mut self, timing: Timing) -> Result<(), SuspendError> {
        let owner_key = self.fencer.keys().owner.clone();
        let lease = self.fencer.lease().cloned();
        for h in self.parents.iter().chain(&self.targets) {
            io::refence(&self.client, &h.guard, &owner_key, lease.as_ref()).await?;
        }
        let at = MarkAt::Annotation(REQUESTED_AT_ANNOTATION.into());
        // A gate has no nonce to renew: no controller reconciles a Deployment's fence.
        let flux_members = self.parents.iter_mut().chain(self.targets.iter_mut());
        for h in flux_members.filter(|h| h.gate().is_none()) {
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

    /// Waits for each acknowledgement of one level, watching each object from the version
    /// its fence write left (no read first), and keeps the version it was seen at.
    pub(super) async fn await_acks(
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
                .instrument(member_span("ack", h.guard.object(), targets))
                .await?;
                acked = resource_version(&seen);
            }
            versions.push(acked);
        }
        Ok(versions)
    }

    /// Records the versions [`Handoff::await_acks`] returned for one level.
    pub(super) fn note_acked(&mut self, targets: bool, versions: Vec<Option<String>>) {
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
    pub(super) fn acked_versions(&self) -> Option<Vec<String>> {
        self.parents
            .iter()
            .chain(self.targets.iter().filter(|h| h.gate().is_none()))
            .map(|h| h.acked.clone())
            .collect()
    }

    /// A recheck of the pause this handoff proved, for the work to call before a protected
    /// write ([`crate::io::PauseCheck::still_holds`]), and what the session watches while the
    /// work runs: every member of the proof and every replicas gate (`Handoff::watch_chain`).
    #[must_use]
    pub fn pause_check(&self) -> crate::io::PauseCheck {
        crate::io::PauseCheck::new(
            self.client.clone(),
            self.fencer.keys().owner.clone(),
            self.watch_chain(),
        )
    }

    /// The members the stable-pause proof reads: the Flux objects (a replicas gate is proven
    /// by its own wait, [`io::wait_scaled`], and has no `spec.suspend` to judge).
    pub(super) fn proof_chain(&self) -> Vec<ProofTarget> {
        self.parents
            .iter()
            .map(|h| self.member(h, Role::Parent, false))
            .chain(
                self.targets
                    .iter()
                    .filter(|h| h.gate().is_none())
                    .map(|h| self.member(h, Role::Target, true)),
            )
            .collect()
    }

    /// The proof's members, then each replicas gate, held by its count and, when its fence
    /// set it, `kustomize.toolkit.fluxcd.io/reconcile: disabled`: what must still hold while
    /// the work runs and before a protected write.
    pub(super) fn watch_chain(&self) -> Vec<ProofTarget> {
        let gates = self.targets.iter().filter_map(|h| {
            let count = h.gate()?;
            let disabled = MarkAt::Annotation(crate::flux::RECONCILE_ANNOTATION.into());
            let needs_rd = h.guard.held().marks.iter().any(|m| m.at == disabled);
            let mut t = self.member(h, Role::Target, needs_rd);
            t.member = t.member.with_replicas(Some(count));
            Some(t)
        });
        let mut chain = self.proof_chain();
        chain.extend(gates);
        chain
    }

    fn member(&self, h: &HeldFence, role: Role, needs_rd: bool) -> ProofTarget {
        ProofTarget {
            object: h.guard.object().clone(),
            member: Member::new(
                role,
                h.guard.uid(),
                self.fencer.owner().to_string(),
                needs_rd,
            ),
        }
    }
}
