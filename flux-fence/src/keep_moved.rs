//! Releasing a fence on an operator's word while keeping the values other writers moved
//! (`flux-handoff fences release --keep-moved`): typically a person's `flux resume` together
//! with another change, which every release withholds ([`crate::release`]).
//!
//! 1. `decide_keep_moved` (pure): the object as read, the keys and the named holder give the
//!    settling patch (every moved [`crate::mark::Restore::Exact`] mark kept as found and
//!    tested, every other mark restored, the fence annotations and label removed) or a typed
//!    [`KeepMovedRefusal`].
//! 2. [`Fencer::release_keeping_moved`] sends that patch, exactly as decided (a caller prints it
//!    first), with the field manager; a failed test is [`KeepMovedOutcome::Moved`] (nothing
//!    changed), a lost answer is judged by a re-read as [`Fencer::release`] judges one.

use kube::api::Patch;
use serde_json::Value;

use crate::api::{CallFailure, classify, error};
use crate::decide::{Held, ReleaseDecision, annotation, held_from_annotations};
use crate::release::decide_release;
use crate::release::{Moved, ReleaseMarks, decide_release_marks};
use crate::{AnnotationKeys, FenceError, Fencer, Holder, ObjectRef};

/// A settling patch decided on one read.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct KeepMoved {
    /// The fence as recorded on the object.
    pub(crate) held: Held,
    /// The resourceVersion read.
    pub(crate) resource_version: String,
    /// The patch: tests of uid, owner, each restored and each kept value; the restores; the
    /// removal of the fence annotations and label.
    pub patch: json_patch::Patch,
    /// What the patch does with each mark (`kept` is never empty).
    pub marks: ReleaseMarks,
}

/// Why `decide_keep_moved` writes nothing. Expected outcomes, not errors.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeepMovedRefusal {
    /// The object does not exist.
    NotFound,
    /// The object carries no owner annotation.
    NotFenced,
    /// The fence annotations do not parse (the problem, in words).
    Malformed(String),
    /// Another holder's fence.
    OtherHolder {
        /// The holder found.
        found: Holder,
    },
    /// No exact mark moved: a plain release is the right one.
    NothingMoved,
}

/// The outcome of [`Fencer::release_keeping_moved`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "a settling patch that did not apply is a value: report it"]
pub enum KeepMovedOutcome {
    /// Applied (or, after a lost answer, the re-read shows no owner annotation any more).
    Released {
        /// The resourceVersion after it (`None` after a lost answer).
        resource_version: Option<String>,
    },
    /// The object changed since it was read (a test failed): nothing changed.
    Moved,
    /// The object is gone or was recreated.
    Gone,
    /// After a lost answer the object carries another owner.
    NotOurs {
        /// The owner annotation found.
        holder: String,
    },
    /// The answer was lost and the re-read still shows the fence: it may or may not apply.
    Unknown,
}

/// Decides a settling release of `holder`'s fence on the object as read (`None`: not found).
///
/// # Errors
/// [`FenceError::Json`] only if the patch cannot be encoded.
pub(crate) fn decide_keep_moved(
    read: Option<&Value>,
    keys: &AnnotationKeys,
    holder: &Holder,
) -> Result<Result<KeepMoved, KeepMovedRefusal>, FenceError> {
    let Some(obj) = read else {
        return Ok(Err(KeepMovedRefusal::NotFound));
    };
    if annotation(obj, &keys.owner).is_none() {
        return Ok(Err(KeepMovedRefusal::NotFenced));
    }
    let held = match held_from_annotations(obj, keys) {
        Ok((held, _)) => held,
        Err(e) => return Ok(Err(KeepMovedRefusal::Malformed(e.to_string()))),
    };
    if &held.owner.holder != holder {
        return Ok(Err(KeepMovedRefusal::OtherHolder {
            found: held.owner.holder,
        }));
    }
    let decided = decide_release_marks(Some(obj), keys, &held, Moved::KeepAll)?;
    let ReleaseDecision::Patch(patch) = decided.decision else {
        // The fence was read from this very object: gone, recreated or not ours cannot be.
        let why = format!("unexpected release decision {:?}", decided.decision);
        return Ok(Err(KeepMovedRefusal::Malformed(why)));
    };
    if decided.marks.kept.is_empty() {
        return Ok(Err(KeepMovedRefusal::NothingMoved));
    }
    let resource_version = obj
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    Ok(Ok(KeepMoved {
        held,
        resource_version,
        patch,
        marks: decided.marks,
    }))
}

impl Fencer {
    /// Reads `obj` and decides a settling release of `holder`'s fence (`decide_keep_moved`).
    /// The fence's owner is the one read, whatever this fencer's own owner value is.
    ///
    /// # Errors
    /// A failed read.
    pub(crate) async fn plan_keeping_moved(
        &self,
        obj: &ObjectRef,
        holder: &Holder,
    ) -> Result<Result<KeepMoved, KeepMovedRefusal>, FenceError> {
        let read = self.read(obj).await?;
        decide_keep_moved(read.as_ref(), self.keys(), holder)
    }

    /// Sends `plan`'s patch to `obj`, exactly as decided: ONE JSON Patch with the field
    /// manager, testing the uid, the owner and every value it keeps or restores.
    ///
    /// # Guarantees
    /// - Never re-decides: a failed test (the object moved since the read) is
    ///   [`KeepMovedOutcome::Moved`], nothing changed.
    /// - A lost answer is judged by a re-read as [`Fencer::release`] judges one: no owner
    ///   annotation any more is released (ours was the only write testing our owner), still
    ///   ours is [`KeepMovedOutcome::Unknown`].
    /// - Does not assert a Lease (an operator's release of a fence left behind).
    ///
    /// # Errors
    /// [`FenceError::Forbidden`] on 403, [`FenceError::Rejected`] for a 422 on an object that
    /// did not move, other API failures.
    pub async fn release_keeping_moved(
        &self,
        obj: &ObjectRef,
        plan: &KeepMoved,
    ) -> Result<KeepMovedOutcome, FenceError> {
        let sent = self
            .api(obj)
            .patch(
                &obj.name,
                &crate::api::patch_params(),
                &Patch::Json::<()>(plan.patch.clone()),
            )
            .await;
        let e = match sent {
            Ok(written) => {
                tracing::info!(object = %obj, owner = %plan.held.owner, kept = ?plan.marks.kept, "fence released, keeping moved values");
                return Ok(KeepMovedOutcome::Released {
                    resource_version: written.metadata.resource_version,
                });
            }
            Err(e) => e,
        };
        match classify(&e) {
            CallFailure::Conflict => Ok(KeepMovedOutcome::Moved),
            CallFailure::Invalid if self.moved_since(obj, &plan.resource_version).await? => {
                Ok(KeepMovedOutcome::Moved)
            }
            CallFailure::NotFound => Ok(KeepMovedOutcome::Gone),
            CallFailure::Unknown => {
                tracing::warn!(object = %obj, error = %e, "release response lost; re-reading");
                let read = self.read(obj).await?;
                Ok(
                    match decide_release(read.as_ref(), self.keys(), &plan.held)? {
                        ReleaseDecision::Gone | ReleaseDecision::Recreated => {
                            KeepMovedOutcome::Gone
                        }
                        ReleaseDecision::NotOurs { holder: None } => KeepMovedOutcome::Released {
                            resource_version: None,
                        },
                        ReleaseDecision::NotOurs {
                            holder: Some(holder),
                        } => KeepMovedOutcome::NotOurs { holder },
                        _ => KeepMovedOutcome::Unknown,
                    },
                )
            }
            CallFailure::Invalid => Err(FenceError::Rejected {
                verb: "patch",
                resource: obj.resource_name(),
                target: obj.target(),
                source: Box::new(e),
            }),
            CallFailure::Forbidden | CallFailure::Other => {
                Err(error("patch", obj.resource_name(), obj.target(), e))
            }
        }
    }
}

#[cfg(test)]
mod tests;
