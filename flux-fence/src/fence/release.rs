//! Releasing one fence: read, ask [`crate::release::decide_release`], write one CAS patch that
//! tests every mark and restores its prior value; a lost answer is judged by a re-read.

use kube::api::Patch;

use super::{Fencer, MAX_ATTEMPTS, rejected, resource_version};
use crate::FenceError;
use crate::api::{CallFailure, classify, error};
use crate::decide::ReleaseDecision;
use crate::events::{self, EventKind};
use crate::guard::FenceGuard;
use crate::mark::MarkAt;
use crate::outcome::{Kept, ReleaseOutcome};
use crate::release::decide_release;
use crate::release::{Moved, decide_release_marks};

impl Fencer {
    /// Releases the fence: one CAS patch restoring every mark's prior value and removing the
    /// owner, prior and reason annotations.
    ///
    /// # Guarantees
    /// - The patch tests the uid and our owner value, and each restored mark's marked value;
    ///   it never writes an object that is not ours, nor a recreated one.
    /// - [`crate::mark::Restore::IfUnchanged`] marks changed by another writer keep that writer's
    ///   value; a changed [`crate::mark::Restore::Exact`] mark keeps the whole fence
    ///   ([`ReleaseOutcome::Kept`]) — unless it is the only one and it is the pause set back
    ///   to `false` (a person's `flux resume`): their value is kept, tested, and the fence
    ///   released (`Released { kept_resume: Some(..) }`; [`crate::release`]).
    /// - Does not assert the Lease: cleanup after a lost Lease still releases what is
    ///   provably ours.
    ///
    /// # Errors
    /// [`FenceError::Forbidden`] on 403 and other API failures (the guard is then dropped and
    /// logged; fence discovery still lists the fence).
    pub async fn release(&self, guard: FenceGuard) -> Result<ReleaseOutcome, FenceError> {
        let obj = guard.object.clone();
        for _ in 0..MAX_ATTEMPTS {
            let read = self.read(&obj).await?;
            let read_rv = resource_version(read.as_ref());
            let decided =
                decide_release_marks(read.as_ref(), &self.keys, &guard.held, Moved::Withhold)?;
            let kept_resume = decided.marks.resumed;
            let patch = match decided.decision {
                ReleaseDecision::Patch(p) => p,
                ReleaseDecision::Gone => return Ok(done(guard, ReleaseOutcome::Gone)),
                ReleaseDecision::Recreated => return Ok(done(guard, ReleaseOutcome::Recreated)),
                ReleaseDecision::NotOurs { holder } => {
                    return Ok(done(guard, ReleaseOutcome::NotOurs { holder }));
                }
                ReleaseDecision::MarkMoved { at } => {
                    return Ok(ReleaseOutcome::Kept {
                        guard: Box::new(guard),
                        why: Kept::MarkMoved { at },
                    });
                }
            };
            match self
                .api(&obj)
                .patch(
                    &obj.name,
                    &crate::api::patch_params(),
                    &Patch::Json::<()>(patch),
                )
                .await
            {
                Ok(written) => {
                    if let Some(at) = &kept_resume {
                        tracing::info!(object = %obj, owner = %self.owner, %at, "fence released, keeping another writer's resume");
                    } else {
                        tracing::info!(object = %obj, owner = %self.owner, "fence released");
                    }
                    if self.events {
                        let mut msg = events::message(
                            "released by",
                            &guard.held.owner,
                            guard.reason.as_deref(),
                        );
                        let note = self
                            .release_note
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .clone();
                        if let Some(note) = note {
                            msg.push_str(" (");
                            msg.push_str(&note);
                            msg.push(')');
                        }
                        events::record(
                            &self.client,
                            &obj,
                            &guard.held.uid,
                            EventKind::Released,
                            &msg,
                        )
                        .await;
                    }
                    let rv = written.metadata.resource_version.clone();
                    return Ok(done(
                        guard,
                        ReleaseOutcome::Released {
                            resource_version: rv,
                            kept_resume,
                        },
                    ));
                }
                Err(e) => match classify(&e) {
                    CallFailure::Conflict | CallFailure::NotFound => {}
                    CallFailure::Invalid => {
                        if !self.moved_since(&obj, &read_rv).await? {
                            return Err(rejected(&obj, e));
                        }
                    }
                    CallFailure::Unknown => {
                        tracing::warn!(object = %obj, error = %e, "release response lost; re-reading");
                        return self.resolve_lost_release(guard, kept_resume).await;
                    }
                    CallFailure::Forbidden | CallFailure::Other => {
                        return Err(error("patch", obj.resource_name(), obj.target(), e));
                    }
                },
            }
        }
        Ok(ReleaseOutcome::Kept {
            guard: Box::new(guard),
            why: Kept::Contended,
        })
    }

    /// A release whose response was lost: re-read and judge. No owner annotation any more
    /// counts as released (ours was the only write testing our owner); still ours is kept.
    async fn resolve_lost_release(
        &self,
        guard: FenceGuard,
        kept_resume: Option<MarkAt>,
    ) -> Result<ReleaseOutcome, FenceError> {
        let read = self.read(&guard.object).await?;
        Ok(
            match decide_release(read.as_ref(), &self.keys, &guard.held)? {
                ReleaseDecision::Gone => done(guard, ReleaseOutcome::Gone),
                ReleaseDecision::Recreated => done(guard, ReleaseOutcome::Recreated),
                ReleaseDecision::NotOurs { holder: None } => done(
                    guard,
                    ReleaseOutcome::Released {
                        resource_version: None,
                        kept_resume,
                    },
                ),
                ReleaseDecision::NotOurs { holder } => {
                    done(guard, ReleaseOutcome::NotOurs { holder })
                }
                _ => ReleaseOutcome::Kept {
                    guard: Box::new(guard),
                    why: Kept::Unknown,
                },
            },
        )
    }
}

fn done(guard: FenceGuard, outcome: ReleaseOutcome) -> ReleaseOutcome {
    guard.disarm();
    outcome
}
