//! The resume: releasing bottom-up, then optionally waiting for Ready.

use tracing::Instrument;

use super::ready::wait_ready_after_resume;
use super::{
    Handoff, HeldFence, ReleaseOutcome, ResumeReport, SuspendError, Timing, release_with_retry,
};

impl Handoff {
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
                let span = super::member_span("release", &object, level);
                match release_with_retry(&self.fencer, held.guard)
                    .instrument(span)
                    .await
                {
                    Ok(ReleaseOutcome::Released { kept_resume, .. }) => {
                        if kept_resume.is_some() {
                            report.kept_resume.push(name.clone());
                        }
                        report.released.push(name);
                        released.push((object, uid));
                    }
                    Ok(ReleaseOutcome::Kept { guard, why }) => {
                        let list = if level {
                            &mut self.targets
                        } else {
                            &mut self.parents
                        };
                        list.push(HeldFence::new(*guard, held.nonce));
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
                wait_ready_after_resume(&self.client, obj, uid, &self.fencer.keys().owner, timing)
                    .await?;
            }
        }
        Ok(report)
    }
}
