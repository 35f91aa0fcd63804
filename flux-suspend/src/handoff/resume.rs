//! The resume: the held fences through the release engine (targets first, no parent while a
//! target is held), then optionally waiting for Ready.

use flux_fence::engine::{Member, Rules, Settled, Source, release_members};

use super::ready::wait_ready_after_resume;
use super::{Handoff, HeldFence, ResumeReport, SuspendError, Timing};

impl Handoff {
    /// Releases every fence held through [`flux_fence::engine::release_members`]: targets
    /// first (last fenced first), then parents — but no parent while a target is still held.
    /// Optionally waits until each released object is Ready for its current generation.
    ///
    /// # Errors
    /// [`SuspendError::Invalid`] when something could not be released (it stays held here and
    /// on the cluster, where fence discovery lists it); API failures.
    pub async fn resume(
        &mut self,
        wait_ready: Option<Timing>,
    ) -> Result<ResumeReport, SuspendError> {
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
        let mut released = Vec::new();
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
                    released.insert(0, (object, uid));
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
        if let Some(timing) = wait_ready {
            // A gate's Deployment has its count back; it has no Flux Ready to wait for.
            let flux = released
                .iter()
                .filter(|(o, _)| !crate::object::is_gate_kind(&o.resource));
            for (obj, uid) in flux {
                wait_ready_after_resume(&self.client, obj, uid, &self.fencer.keys().owner, timing)
                    .await?;
            }
        }
        Ok(report)
    }
}
