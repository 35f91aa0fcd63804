//! One fence of the pause: the CAS write through the fencer, recorded as held.

use super::{
    AcquireOutcome, CONTENDED_BACKOFF_START, Handoff, HeldFence, ObjectRef, PauseOptions,
    PauseOutcome, Step, SuspendError, in_set, member_marks, new_nonce, suspended_by,
};

impl Handoff {
    pub(super) async fn fence(
        &mut self,
        obj: &ObjectRef,
        is_target: bool,
        replicas: Option<i32>,
        opts: &PauseOptions,
    ) -> Result<Option<PauseOutcome>, SuspendError> {
        let by = suspended_by(&self.fencer.owner().holder, opts.reason.as_deref());
        // A gate has no nonce: nothing acknowledges a Deployment's fence.
        let nonce = replicas.is_none().then(new_nonce);
        let mut known = self.take_read(obj);
        if is_target && known.is_none() {
            // Whether a ResourceSet applies it is on its labels: one read, which the first
            // CAS then decides on (a missing object is the acquire's NotFound).
            known = self.read_to_fence(obj).await?;
        }
        let marks = member_marks(
            obj,
            nonce.as_deref().unwrap_or_default(),
            is_target,
            &by,
            replicas,
            in_set(is_target, known.as_ref()),
        );
        // A busy controller moves the resourceVersion with every status write, so a CAS can
        // lose several rounds in a row. Contention is a value: re-read and try again, backing
        // off, within the phase budget — never a write without the test.
        let deadline = tokio::time::Instant::now() + opts.timing.timeout;
        let mut backoff = CONTENDED_BACKOFF_START;
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
                object: Box::new(obj.clone()),
                why,
            }))
        };
        let guard = match outcome {
            AcquireOutcome::Acquired(guard) => guard,
            AcquireOutcome::Refused { holder } => {
                return refused(crate::session::Refusal::FencedBy { holder });
            }
            AcquireOutcome::AlreadyMarked { at } => {
                // Someone set it (e.g. `flux suspend`): who, from the managed fields of one
                // more read, on this refusal only; an unreadable object names no one.
                let read = crate::object::get_json(&self.client, obj).await.ok();
                return refused(crate::session::Refusal::of_fence(
                    flux_fence::decide::Refusal::AlreadyMarked { at },
                    read.as_ref(),
                ));
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
                self.push(is_target, HeldFence::new(guard, nonce));
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
        self.push(is_target, HeldFence::new(guard, nonce));
        Ok(None)
    }

    /// The preflight's read of `obj`, once.
    pub(super) fn take_read(&mut self, obj: &ObjectRef) -> Option<serde_json::Value> {
        let i = self.reads.iter().position(|(o, _)| o == obj)?;
        Some(self.reads.swap_remove(i).1)
    }

    pub(super) fn push(&mut self, is_target: bool, held: HeldFence) {
        if is_target {
            self.targets.push(held);
        } else {
            self.parents.push(held);
        }
    }

    /// The target as read before its fence, through the fencer's client (as the acquire's own
    /// read would have gone), so the first CAS starts from it; `None` when it does not exist
    /// (the acquire then reports it). A failed read fails the fence as the acquire's would
    /// have: a `ResourceSet`'s target fenced without its exclusion could never be proven.
    async fn read_to_fence(
        &self,
        obj: &ObjectRef,
    ) -> Result<Option<serde_json::Value>, SuspendError> {
        match crate::object::get_json(self.fencer.client(), obj).await {
            Ok(v) => Ok(Some(v)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(source) => Err(SuspendError::Kube {
                step: "reading the target to fence",
                source,
            }),
        }
    }
}
