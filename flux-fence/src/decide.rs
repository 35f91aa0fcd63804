//! The pure decision core: what was read goes in, the patch to send (or a refusal) comes out.
//! No I/O here; the objects are the JSON the API server returned (`serde_json::Value`), so the
//! same functions serve any kind with an annotations map.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::mark::{MarkAt, PriorRecord, RecordedMark};
use crate::{AnnotationKeys, FenceError, Mark, OwnerValue, pointer};

/// Longest reason text accepted (it is stored in an annotation and an Event message).
pub(crate) const REASON_MAX_LEN: usize = 256;

/// What a fence holds: enough to release it with a CAS, by this process or another one.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Held {
    /// The uid of the fenced object when it was fenced.
    pub uid: String,
    /// Our owner value.
    pub owner: OwnerValue,
    /// The marks with their prior values, in the order they were applied.
    pub marks: Vec<RecordedMark>,
}

/// The answer of [`decide_acquire`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AcquireDecision {
    /// The object does not exist.
    NotFound,
    /// Send this patch.
    Patch(AcquirePlan),
    /// Do not write.
    Refuse(Refusal),
    /// The object already carries exactly our fence (same owner value, same marks, each mark
    /// in place): adopt it without writing.
    AlreadyOurs {
        /// What we hold.
        held: Held,
        /// The resourceVersion read.
        resource_version: String,
    },
}

/// Why an acquire does not write. Expected outcomes, not errors.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// Another owner is present; `holder` is the annotation value as read (it may be malformed,
    /// or our holder at another epoch).
    Owned {
        /// The owner annotation value found.
        holder: String,
    },
    /// Our owner value is present but with other marks or with a mark no longer in place.
    OursDiffers,
    /// An exclusive mark's value is already set (e.g. suspended by someone else).
    AlreadyMarked {
        /// The mark.
        at: MarkAt,
    },
}

/// A planned acquire: the CAS patch and what it will have fenced once it applies.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AcquirePlan {
    /// What the fence will hold.
    pub held: Held,
    /// The resourceVersion the patch tests.
    pub(crate) read_resource_version: String,
    /// The rendered prior annotation the patch writes.
    pub prior_annotation: String,
    /// The patch: tests of uid and resourceVersion first, then the additions.
    pub patch: json_patch::Patch,
}

/// What a re-read after a lost acquire response shows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostWrite {
    /// The object shows exactly the post-state of the write: it landed, and it is ours.
    Landed {
        /// The resourceVersion read.
        resource_version: String,
    },
    /// The object is unchanged since the read the plan was made from: the write did not land.
    NotApplied,
    /// Anything else: fail closed.
    Unclear(Unclear),
}

/// Why a lost write could not be judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unclear {
    /// The object is gone.
    Gone,
    /// The object was deleted and recreated (uid differs).
    Recreated,
    /// The object moved on, but not to our post-state.
    Differs,
}

/// The answer of [`crate::release::decide_release`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ReleaseDecision {
    /// Send this patch.
    Patch(json_patch::Patch),
    /// The object is gone: nothing to release.
    Gone,
    /// The object was deleted and recreated: the new one is not ours to touch.
    Recreated,
    /// The owner annotation is not ours (absent, foreign, or malformed).
    NotOurs {
        /// The owner annotation value found, if any.
        holder: Option<String>,
    },
    /// A [`crate::mark::Restore::Exact`] mark no longer holds the marked value: another writer changed it.
    MarkMoved {
        /// The mark.
        at: MarkAt,
    },
}

/// Decides an acquire on the object as read (`None`: not found).
///
/// # Guarantees
/// The returned patch tests the uid and resourceVersion read, so it applies only to exactly
/// that state; it never touches an object with an owner annotation.
///
/// # Errors
/// [`FenceError::InvalidMark`] / [`FenceError::InvalidReason`] for bad caller input, and
/// [`FenceError::Malformed`] for an object without uid or resourceVersion.
pub fn decide_acquire(
    read: Option<&Value>,
    keys: &AnnotationKeys,
    owner: &OwnerValue,
    marks: &[Mark],
    reason: Option<&str>,
    now: Timestamp,
) -> Result<AcquireDecision, FenceError> {
    for m in marks {
        m.validate(keys)?;
    }
    if let Some(r) = reason {
        validate_reason(r)?;
    }
    let Some(obj) = read else {
        return Ok(AcquireDecision::NotFound);
    };
    let uid = required(obj, "/metadata/uid", "uid")?;
    let rv = required(obj, "/metadata/resourceVersion", "resourceVersion")?;

    if let Some(found) = annotation(obj, &keys.owner) {
        if found == owner.to_string()
            && let Some(held) = held_if_in_place(obj, keys, owner, marks)
        {
            return Ok(AcquireDecision::AlreadyOurs {
                held,
                resource_version: rv,
            });
        }
        if found == owner.to_string() {
            return Ok(AcquireDecision::Refuse(Refusal::OursDiffers));
        }
        return Ok(AcquireDecision::Refuse(Refusal::Owned {
            holder: found.to_string(),
        }));
    }

    let mut recorded = Vec::with_capacity(marks.len());
    for m in marks {
        let p = m.at.pointer();
        let current = obj.pointer(&p);
        if m.if_absent && current.is_some() {
            // Someone else's value: left as it is, and not part of this fence.
            continue;
        }
        if m.exclusive && current == Some(&m.value) {
            return Ok(AcquireDecision::Refuse(Refusal::AlreadyMarked {
                at: m.at.clone(),
            }));
        }
        if let MarkAt::Field(_) = m.at
            && !obj
                .pointer(pointer::parent(&p))
                .is_some_and(Value::is_object)
        {
            return Err(FenceError::InvalidMark {
                at: m.at.to_string(),
                why: "the parent of the field is not an object on this object",
            });
        }
        recorded.push(RecordedMark {
            at: m.at.clone(),
            value: m.value.clone(),
            prior: current.cloned(),
            restore: m.restore,
        });
    }
    let prior = PriorRecord {
        since: now,
        marks: recorded.clone(),
    }
    .render()?;

    let mut ops = vec![
        json!({ "op": "test", "path": "/metadata/uid", "value": uid }),
        json!({ "op": "test", "path": "/metadata/resourceVersion", "value": rv }),
    ];
    if !obj
        .pointer(pointer::ANNOTATIONS)
        .is_some_and(Value::is_object)
    {
        ops.push(json!({ "op": "add", "path": pointer::ANNOTATIONS, "value": {} }));
    }
    ops.push(add(
        &pointer::annotation(&keys.owner),
        &json!(owner.to_string()),
    ));
    // The fenced label travels with the owner annotation: selectable server-side.
    if !obj.pointer(pointer::LABELS).is_some_and(Value::is_object) {
        ops.push(json!({ "op": "add", "path": pointer::LABELS, "value": {} }));
    }
    ops.push(add(
        &pointer::label(&keys.fenced_label),
        &json!(crate::keys::FENCED_LABEL_VALUE),
    ));
    ops.push(add(&pointer::annotation(&keys.prior), &json!(prior)));
    if let Some(r) = reason {
        ops.push(add(&pointer::annotation(&keys.reason), &json!(r)));
    }
    // What is recorded is what is written (an if-absent mark over someone's value is neither).
    for m in &recorded {
        ops.push(add(&m.at.pointer(), &m.value));
    }
    Ok(AcquireDecision::Patch(AcquirePlan {
        held: Held {
            uid,
            owner: owner.clone(),
            marks: recorded,
        },
        read_resource_version: rv,
        prior_annotation: prior,
        patch: to_patch(ops)?,
    }))
}

/// Judges a re-read after an acquire whose response was lost.
///
/// # Guarantees
/// Adopts only when the object shows exactly the post-state `plan` would produce: same uid,
/// our owner value, our prior record, every mark's value in place.
#[must_use]
pub fn lost_write(read: Option<&Value>, keys: &AnnotationKeys, plan: &AcquirePlan) -> LostWrite {
    let Some(obj) = read else {
        return LostWrite::Unclear(Unclear::Gone);
    };
    if obj.pointer("/metadata/uid").and_then(Value::as_str) != Some(plan.held.uid.as_str()) {
        return LostWrite::Unclear(Unclear::Recreated);
    }
    let rv = obj
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let ours = annotation(obj, &keys.owner) == Some(plan.held.owner.to_string().as_str())
        && annotation(obj, &keys.prior) == Some(plan.prior_annotation.as_str())
        && plan
            .held
            .marks
            .iter()
            .all(|m| obj.pointer(&m.at.pointer()) == Some(&m.value));
    if ours {
        LostWrite::Landed {
            resource_version: rv.to_string(),
        }
    } else if rv == plan.read_resource_version {
        LostWrite::NotApplied
    } else {
        LostWrite::Unclear(Unclear::Differs)
    }
}

/// Reconstructs what a fence holds from the annotations alone (for fence discovery and
/// `fences release` by another process).
///
/// # Errors
/// [`FenceError::Malformed`] when the owner or prior annotation is absent or malformed, or the
/// object has no uid.
pub fn held_from_annotations(
    obj: &Value,
    keys: &AnnotationKeys,
) -> Result<(Held, Timestamp), FenceError> {
    let owner_text = annotation(obj, &keys.owner)
        .ok_or_else(|| FenceError::malformed("owner annotation", "<absent>"))?;
    let owner: OwnerValue = owner_text.parse()?;
    let prior_text = annotation(obj, &keys.prior)
        .ok_or_else(|| FenceError::malformed("prior annotation", "<absent>"))?;
    let prior = PriorRecord::parse(prior_text)?;
    let uid = required(obj, "/metadata/uid", "uid")?;
    Ok((
        Held {
            uid,
            owner,
            marks: prior.marks,
        },
        prior.since,
    ))
}

/// The value of annotation `key`, if present and a string.
#[must_use]
pub(crate) fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer(pointer::ANNOTATIONS)?.get(key)?.as_str()
}

/// The value of label `key`, if present and a string.
#[must_use]
pub(crate) fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer(pointer::LABELS)?.get(key)?.as_str()
}

fn held_if_in_place(
    obj: &Value,
    keys: &AnnotationKeys,
    owner: &OwnerValue,
    marks: &[Mark],
) -> Option<Held> {
    let (held, _) = held_from_annotations(obj, keys).ok()?;
    // An if-absent mark that found someone else's value was not recorded: compare with the
    // marks the acquire wrote.
    let recorded_at = |m: &&Mark| !m.if_absent || held.marks.iter().any(|r| r.at == m.at);
    let written: Vec<&Mark> = marks.iter().filter(recorded_at).collect();
    let same = held.owner == *owner
        && held.marks.len() == written.len()
        && held
            .marks
            .iter()
            .zip(written)
            .all(|(r, m)| r.at == m.at && r.value == m.value && r.restore == m.restore)
        && held
            .marks
            .iter()
            .all(|r| obj.pointer(&r.at.pointer()) == Some(&r.value));
    same.then_some(held)
}

/// Checks a reason text the way [`decide_acquire`] does (at most 256 bytes, no control
/// characters), so a caller can reject it before any I/O.
///
/// # Errors
/// [`FenceError::InvalidReason`] naming what is wrong (never the text).
pub fn validate_reason(reason: &str) -> Result<(), FenceError> {
    if reason.len() > REASON_MAX_LEN {
        return Err(FenceError::InvalidReason {
            why: "longer than 256 bytes",
        });
    }
    if reason.chars().any(char::is_control) {
        return Err(FenceError::InvalidReason {
            why: "contains control characters",
        });
    }
    Ok(())
}

fn required(obj: &Value, p: &str, what: &'static str) -> Result<String, FenceError> {
    obj.pointer(p)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .ok_or_else(|| FenceError::malformed(what, "<absent>"))
}

fn add(path: &str, value: &Value) -> Value {
    json!({ "op": "add", "path": path, "value": value })
}

fn to_patch(ops: Vec<Value>) -> Result<json_patch::Patch, FenceError> {
    serde_json::from_value(Value::Array(ops)).map_err(|source| FenceError::Json {
        what: "JSON Patch",
        source,
    })
}

#[cfg(test)]
mod tests;
