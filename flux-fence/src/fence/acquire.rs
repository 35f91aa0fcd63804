//! Taking a fence: the rounds of an acquire (read or take the caller's read, decide with
//! [`crate::decide::decide_acquire`], send one CAS patch, and on a 409 or a 422 after which
//! the object moved read and decide again), with the write sent for real ([`Real`]) or with the
//! server's `dryRun=All` ([`Dry`], the server dry run of [`crate::dry_run`]). Both modes run the
//! same rounds: the same read, decision, body, field manager and CAS tests; only what is done
//! with the answer differs.

use std::future::Future;

use kube::api::Patch;
use serde_json::Value;

use super::{Fencer, MAX_ATTEMPTS, rejected};
use crate::api::{CallFailure, classify, error};
use crate::decide::{
    AcquireDecision, AcquirePlan, Held, LostWrite, Refusal, decide_acquire, lost_write,
};
use crate::dry_run::{Answer, answer};
use crate::events::{self, EventKind};
use crate::guard::{FenceGuard, ObjectRef};
use crate::lease::handle::LeaseHandle;
use crate::mark::MarkAt;
use crate::outcome::{AcquireOutcome, Applied, LostAcquire};
use crate::{AnnotationKeys, FenceError, Mark};

/// How the rounds of an acquire send their planned patch. `Ok(None)`: the object moved (a
/// lost race), read and decide again; `Ok(Some(done))`: the rounds end with `done`.
pub(crate) trait Sender {
    /// What a send that ends the rounds gives.
    type Done;

    /// Sends `plan`'s patch for `obj`.
    fn send(
        &self,
        fencer: &Fencer,
        obj: &ObjectRef,
        plan: AcquirePlan,
        reason: Option<&str>,
    ) -> impl Future<Output = Result<Option<Self::Done>, FenceError>> + Send;
}

/// The real write ([`Fencer::apply_acquire`]): the chain on record first, then the patch; a
/// lost answer resolved by a re-read.
pub(crate) struct Real;

impl Sender for Real {
    type Done = Applied;

    async fn send(
        &self,
        fencer: &Fencer,
        obj: &ObjectRef,
        plan: AcquirePlan,
        reason: Option<&str>,
    ) -> Result<Option<Applied>, FenceError> {
        Ok(match fencer.apply_acquire(obj, plan, reason).await? {
            Applied::Moved => None,
            done => Some(done),
        })
    }
}

/// The same patch with `dryRun=All`: nothing is recorded, no Event, no Lease asserted; the
/// server's answer classified by [`crate::dry_run::answer`].
pub(crate) struct Dry;

impl Sender for Dry {
    type Done = Answer;

    async fn send(
        &self,
        fencer: &Fencer,
        obj: &ObjectRef,
        plan: AcquirePlan,
        _reason: Option<&str>,
    ) -> Result<Option<Answer>, FenceError> {
        let sent = fencer
            .api(obj)
            .patch(
                &obj.name,
                &crate::dry_run::dry_patch_params(),
                &Patch::Json::<()>(plan.patch),
            )
            .await;
        let Err(err) = sent else {
            return Ok(Some(Answer::WouldPass));
        };
        Ok(match classify(&err) {
            CallFailure::Conflict => None,
            CallFailure::Invalid
                if fencer.moved_since(obj, &plan.read_resource_version).await? =>
            {
                None
            }
            _ => Some(answer(Err(&err))),
        })
    }
}

/// How the rounds of an acquire ended.
pub(crate) enum Round<T> {
    /// The object does not exist.
    NotFound,
    /// The decision refused to write.
    Refused(Refusal),
    /// The object already carries exactly this fence: nothing to send.
    AlreadyOurs {
        /// What we hold.
        held: Held,
        /// The resourceVersion read.
        resource_version: String,
    },
    /// A send ended the rounds.
    Sent(T),
    /// The object moved on every round.
    Contended,
}

impl Fencer {
    /// Fences `obj`: one CAS patch adding the owner, prior and reason annotations and `marks`.
    ///
    /// # Guarantees
    /// - Every write tests the uid and resourceVersion just read; a 409/422 re-reads and
    ///   decides again (at most `MAX_ATTEMPTS` rounds), never retries blindly.
    /// - An object with another owner is never written ([`AcquireOutcome::Refused`]).
    /// - A lost response is resolved by a re-read: adopted only on exactly our post-state,
    ///   else [`AcquireOutcome::Ambiguous`] keeps the guard-equivalent.
    /// - With [`Fencer::with_lease`], the Lease is asserted before each write.
    ///
    /// # Errors
    /// [`FenceError::Forbidden`] naming verb and resource on 403, [`FenceError::LeaseLost`],
    /// invalid marks or reason, and other API failures.
    ///
    /// # Caveats
    /// `reason` is stored in an annotation and an Event: never pass secrets.
    pub async fn acquire(
        &self,
        obj: &ObjectRef,
        marks: Vec<Mark>,
        reason: Option<&str>,
    ) -> Result<AcquireOutcome, FenceError> {
        self.acquire_on(obj, None, marks, reason).await
    }

    /// [`Fencer::acquire`] whose first round decides on `read`, the object as the caller read
    /// it (e.g. in a preflight), instead of reading it again. The patch tests that read's uid
    /// and resourceVersion, so if the object changed since, the server refuses it and the next
    /// round reads afresh, as after any lost race.
    ///
    /// # Errors
    /// As [`Fencer::acquire`].
    pub async fn acquire_on(
        &self,
        obj: &ObjectRef,
        read: Option<Value>,
        marks: Vec<Mark>,
        reason: Option<&str>,
    ) -> Result<AcquireOutcome, FenceError> {
        let marks = self.with_lease_mark(marks);
        Ok(match self.rounds(obj, read, &marks, reason, &Real).await? {
            Round::NotFound | Round::Sent(Applied::Gone) => AcquireOutcome::NotFound,
            Round::Refused(r) => refused(r),
            Round::AlreadyOurs {
                held,
                resource_version,
            } => AcquireOutcome::Acquired(FenceGuard::new(
                obj.clone(),
                held,
                reason.map(str::to_string),
                Some(resource_version),
                true,
            )),
            Round::Sent(Applied::Acquired(guard)) => AcquireOutcome::Acquired(guard),
            Round::Sent(Applied::Ambiguous { guard, why }) => {
                AcquireOutcome::Ambiguous { guard, why }
            }
            Round::Sent(Applied::Moved) | Round::Contended => AcquireOutcome::Contended,
        })
    }

    /// The rounds of an acquire of `obj` with `marks` (see the module docs): the first decides
    /// on `read` when given, each later one on a fresh read; at most `MAX_ATTEMPTS`.
    pub(crate) async fn rounds<S: Sender>(
        &self,
        obj: &ObjectRef,
        mut read: Option<Value>,
        marks: &[Mark],
        reason: Option<&str>,
        sender: &S,
    ) -> Result<Round<S::Done>, FenceError> {
        for _ in 0..MAX_ATTEMPTS {
            let decided = match read.take() {
                Some(known) => decide_acquire(
                    Some(&known),
                    &self.keys,
                    &self.owner,
                    marks,
                    reason,
                    self.clock.now(),
                )?,
                None => self.plan_acquire(obj, marks, reason).await?,
            };
            let plan = match decided {
                AcquireDecision::Patch(plan) => plan,
                AcquireDecision::NotFound => return Ok(Round::NotFound),
                AcquireDecision::Refuse(r) => return Ok(Round::Refused(r)),
                AcquireDecision::AlreadyOurs {
                    held,
                    resource_version,
                } => {
                    return Ok(Round::AlreadyOurs {
                        held,
                        resource_version,
                    });
                }
            };
            if let Some(done) = sender.send(self, obj, plan, reason).await? {
                return Ok(Round::Sent(done));
            }
        }
        Ok(Round::Contended)
    }

    /// `marks` and, with a Lease, the mark naming it (`<prefix>/lease` = `namespace/name`),
    /// so whoever finds the fence judges it by the Lease it was taken under, and the holder's
    /// max-hold (`<prefix>/max-hold`) when it has one. Restored like any mark (removed on
    /// release); a changed value does not keep the fence.
    fn with_lease_mark(&self, marks: Vec<Mark>) -> Vec<Mark> {
        let name = self.lease.as_ref().map(LeaseHandle::lease_name);
        let max_hold = self.lease.as_ref().and_then(LeaseHandle::max_hold);
        lease_mark(&self.keys, marks, name.as_deref(), max_hold)
    }

    /// Reads `obj` and decides an acquire (no write).
    ///
    /// # Errors
    /// As [`Fencer::acquire`].
    pub async fn plan_acquire(
        &self,
        obj: &ObjectRef,
        marks: &[Mark],
        reason: Option<&str>,
    ) -> Result<AcquireDecision, FenceError> {
        let read = self.read(obj).await?;
        decide_acquire(
            read.as_ref(),
            &self.keys,
            &self.owner,
            marks,
            reason,
            self.clock.now(),
        )
    }

    /// Sends one planned acquire patch and classifies the answer. A lost response is resolved
    /// with [`Fencer::resolve_lost_acquire`].
    ///
    /// # Errors
    /// As [`Fencer::acquire`].
    pub async fn apply_acquire(
        &self,
        obj: &ObjectRef,
        plan: AcquirePlan,
        reason: Option<&str>,
    ) -> Result<Applied, FenceError> {
        if let Some(lease) = &self.lease {
            // The chain on record: the object is on the Lease before its fence can be.
            lease.record(&self.keys.chain, obj).await?;
        }
        let reason = reason.map(str::to_string);
        match self
            .api(obj)
            .patch(
                &obj.name,
                &crate::api::patch_params(),
                &Patch::Json::<()>(plan.patch.clone()),
            )
            .await
        {
            Ok(written) => {
                let rv = written.metadata.resource_version.clone();
                tracing::info!(object = %obj, owner = %self.owner, "fenced");
                if self.events {
                    let msg = events::message("fenced by", &self.owner, reason.as_deref());
                    events::record(&self.client, obj, &plan.held.uid, EventKind::Fenced, &msg)
                        .await;
                }
                Ok(Applied::Acquired(FenceGuard::new(
                    obj.clone(),
                    plan.held,
                    reason,
                    rv,
                    true,
                )))
            }
            Err(e) => match classify(&e) {
                CallFailure::Conflict => Ok(Applied::Moved),
                CallFailure::Invalid => {
                    if self.moved_since(obj, &plan.read_resource_version).await? {
                        Ok(Applied::Moved)
                    } else {
                        Err(rejected(obj, e))
                    }
                }
                CallFailure::NotFound => Ok(Applied::Gone),
                CallFailure::Unknown => {
                    tracing::warn!(object = %obj, error = %e, "acquire response lost; re-reading");
                    Ok(
                        match self
                            .resolve_lost_acquire(obj, plan, reason.as_deref())
                            .await?
                        {
                            LostAcquire::Landed(guard) => Applied::Acquired(guard),
                            LostAcquire::NotApplied => Applied::Moved,
                            LostAcquire::Unresolved { guard, why } => {
                                Applied::Ambiguous { guard, why }
                            }
                        },
                    )
                }
                CallFailure::Forbidden | CallFailure::Other => {
                    Err(error("patch", obj.resource_name(), obj.target(), e))
                }
            },
        }
    }

    /// Resolves an acquire write whose response was lost: re-reads `obj` and adopts only if it
    /// shows exactly the post-state of `plan`. An object that shows the write not applied is
    /// first moved on by a CAS of ours ([`Fencer::settle_unheld`]), so the lost request cannot
    /// commit later: only then is it judged not applied.
    ///
    /// # Errors
    /// A failed re-read.
    pub async fn resolve_lost_acquire(
        &self,
        obj: &ObjectRef,
        plan: AcquirePlan,
        reason: Option<&str>,
    ) -> Result<LostAcquire, FenceError> {
        let read = self.read(obj).await?;
        let reason = reason.map(str::to_string);
        Ok(match lost_write(read.as_ref(), &self.keys, &plan) {
            LostWrite::Landed { resource_version } => {
                tracing::info!(object = %obj, owner = %self.owner, "adopted fence after lost response");
                LostAcquire::Landed(FenceGuard::new(
                    obj.clone(),
                    plan.held,
                    reason,
                    Some(resource_version),
                    true,
                ))
            }
            // Unchanged on one read is "not applied *yet*": the request may still commit (a
            // gateway's 504 while the server works on). Move the object on with a CAS of our
            // own first, so its precondition fails whenever it arrives; then decide.
            LostWrite::NotApplied => match self.settle_unheld(obj).await? {
                Some(guard) => {
                    tracing::info!(object = %obj, owner = %self.owner, "adopted fence after lost response");
                    LostAcquire::Landed(guard)
                }
                None => LostAcquire::NotApplied,
            },
            LostWrite::Unclear(why) => {
                tracing::error!(object = %obj, owner = %self.owner, ?why, "fence outcome unknown; keeping it for cleanup");
                LostAcquire::Unresolved {
                    guard: FenceGuard::new(obj.clone(), plan.held, reason, None, false),
                    why,
                }
            }
        })
    }
}

/// `marks` and, with a Lease named `lease` (`namespace/name`), the mark naming it, and with
/// a `max_hold` the mark recording it (also what a dry-run fence adds: `crate::dry_run`).
/// Both are restored only if unchanged: the release removes them, and a value someone
/// changed does not keep the fence.
pub(crate) fn lease_mark(
    keys: &AnnotationKeys,
    mut marks: Vec<Mark>,
    lease: Option<&str>,
    max_hold: Option<std::time::Duration>,
) -> Vec<Mark> {
    let max_hold = max_hold.map(crate::lease::decide::format_max_hold);
    for (key, value) in [
        (&keys.lease, lease.map(str::to_string)),
        (&keys.max_hold, max_hold),
    ] {
        if let Some(value) = value
            && !marks
                .iter()
                .any(|m| m.at == MarkAt::Annotation(key.clone()))
        {
            marks.push(
                Mark::annotation(key.clone(), value).restore(crate::mark::Restore::IfUnchanged),
            );
        }
    }
    marks
}

fn refused(r: Refusal) -> AcquireOutcome {
    match r {
        Refusal::Owned { holder } => AcquireOutcome::Refused { holder },
        Refusal::OursDiffers => AcquireOutcome::OursDiffers,
        Refusal::AlreadyMarked { at } => AcquireOutcome::AlreadyMarked { at },
    }
}
