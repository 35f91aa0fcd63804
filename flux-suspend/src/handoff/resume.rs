//! The resume: the held fences through the release engine (targets first, no parent while a
//! target is held); then, apart, the Ready wait, a report of its own ([`ReadyWait`]).

use flux_fence::engine::{Member, Rules, Settled, Source, release_members};

use super::ready::{ReadyWait, both, wait_available, wait_ready_after_release};
use super::{Handoff, HeldFence, ResumeReport, SuspendError, Timing};

impl Handoff {
    /// Releases every fence held, then optionally waits until each released object is Ready
    /// ([`Handoff::release`], then [`Handoff::wait_ready`]); an object not Ready in time is
    /// an error here, after everything was released.
    ///
    /// # Errors
    /// As [`Handoff::release`]; [`SuspendError::Invalid`] (step `waiting for Ready after
    /// resume`) when an object was not Ready in time or the handoff's cancel stopped the wait.
    pub async fn resume(
        &mut self,
        wait_ready: Option<Timing>,
    ) -> Result<ResumeReport, SuspendError> {
        let report = self.release().await?;
        let Some(timing) = wait_ready else {
            return Ok(report);
        };
        match self.wait_ready(&report, timing).await {
            ReadyWait::NotReady(objects) => Err(SuspendError::Invalid {
                step: "waiting for Ready after resume",
                detail: format!(
                    "not Ready within {}s: {}",
                    timing.timeout.as_secs(),
                    objects
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
            ReadyWait::Stopped(_) => Err(SuspendError::Invalid {
                step: "waiting for Ready after resume",
                detail: "stopped before every released object was Ready".into(),
            }),
            _ => Ok(report),
        }
    }

    /// Requests a reconcile of each Flux object `report` released and waits until each is
    /// Ready for its current generation with that request handled; meanwhile waits until each
    /// replicas gate's Deployment it released is available again at the count given back
    /// (status for its generation: every replica updated and available). Both within
    /// `timing.timeout`; a Deployment not available in time is not Ready. A stop of the
    /// handoff's cancel ([`Handoff::with_cancel`]) ends the wait at once. Nothing is held by
    /// then: the outcome is a report, never a release to retry.
    pub async fn wait_ready(&self, report: &ResumeReport, timing: Timing) -> ReadyWait {
        let (gates, flux): (Vec<_>, Vec<_>) = report
            .uids
            .iter()
            .cloned()
            .partition(|(o, _)| crate::object::is_gate_kind(&o.resource));
        let owner_key = &self.fencer.keys().owner;
        // Boxed: both waits inline would grow every session future that awaits this one.
        let (flux, gates) = Box::pin(futures::future::join(
            wait_ready_after_release(&self.client, &flux, owner_key, timing, &self.cancel),
            wait_available(&self.client, &gates, owner_key, timing, &self.cancel),
        ))
        .await;
        both(flux, gates)
    }

    /// Releases every fence held through [`flux_fence::engine::release_members`]: targets
    /// first (last fenced first), then parents — but no parent while a target is still held.
    ///
    /// # Errors
    /// [`SuspendError::Invalid`] when something could not be released (it stays held here and
    /// on the cluster, where fence discovery lists it); API failures.
    pub async fn release(&mut self) -> Result<ResumeReport, SuspendError> {
        let mut nonces = Vec::new();
        let mut members = Vec::new();
        for (list, child) in [(&mut self.targets, true), (&mut self.parents, false)] {
            while let Some(held) = list.pop() {
                nonces.push((held.guard.object().clone(), held.nonce, child));
                members.push(Member::held(held.guard, child));
            }
        }
        // Boxed: the engine's future would otherwise grow every session future that awaits it.
        let settled = Box::pin(release_members(
            &self.fencer,
            members,
            None,
            Rules::one_holder(),
        ))
        .await;
        let mut report = ResumeReport::default();
        let mut failure = None;
        // In reverse, so what goes back onto the stacks keeps its order (next to release last).
        for one in settled.into_iter().rev() {
            let (guard, _) = match one {
                Settled::Released {
                    object,
                    uid,
                    kept_resume,
                    ..
                } => {
                    if kept_resume.is_some() {
                        report.kept_resume.insert(0, object.clone());
                    }
                    report.released.insert(0, object.clone());
                    report.uids.insert(0, (object, uid));
                    continue;
                }
                Settled::Gone { object } | Settled::NotOurs { object, .. } => {
                    report.not_ours.insert(0, object);
                    continue;
                }
                Settled::Kept { guard, why } => {
                    let object = guard.object().clone();
                    failure = Some(match &why {
                        flux_fence::outcome::Kept::MarkMoved { at } => SuspendError::Withheld {
                            object: Box::new(object),
                            at: at.clone(),
                        },
                        other => SuspendError::Invalid {
                            step: "releasing",
                            detail: format!("{object} kept: {other:?}"),
                        },
                    });
                    (*guard, true)
                }
                Settled::Skipped { member, .. } => match member.source {
                    Source::Held(g) => (g, member.child),
                    _ => continue,
                },
                Settled::Failed { error, .. } => {
                    failure = Some(SuspendError::Fence {
                        step: "releasing",
                        source: error,
                    });
                    continue;
                }
                _ => continue,
            };
            let (nonce, child) = nonces
                .iter()
                .find(|(o, ..)| o == guard.object())
                .map_or((None, true), |(_, n, c)| (n.clone(), *c));
            let list = if child {
                &mut self.targets
            } else {
                &mut self.parents
            };
            list.push(HeldFence::new(guard, nonce));
        }
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(report)
    }
}
