//! The pure release decision, with what it does with each mark: restored to its prior value,
//! or left as another writer set it.
//!
//! 1. A mark still holding the value the fence wrote is tested and restored.
//! 2. A [`Restore::IfUnchanged`] mark another writer changed keeps their value, untested.
//! 3. A [`Restore::Exact`] mark another writer changed ("moved") keeps the fence
//!    ([`ReleaseDecision::MarkMoved`]) — except when the only moved mark is the pause set back
//!    to `false` or removed (`RecordedMark::resumed_by`): a person's `flux resume`, or Flux
//!    Operator's resume, asked for Flux back,
//!    so their value is kept (tested: a further change refuses the patch), the other marks are
//!    restored and the fence removed ([`ReleaseMarks::resumed`]). Every release goes through
//!    here ([`decide_release`], [`crate::Fencer::release`]).
//! 4. With `Moved::KeepAll` (an operator's `fences release --keep-moved`) every moved mark
//!    is kept the same way.

use serde_json::{Value, json};

use crate::decide::{Held, ReleaseDecision, annotation, label};
use crate::mark::{MarkAt, RecordedMark, Restore};
use crate::{AnnotationKeys, FenceError, pointer};

/// Decides a release of `held` on the object as read (`None`: not found).
///
/// # Guarantees
/// The patch tests the uid and our owner value, so it never applies to an object that is not
/// ours; each restored mark is tested to still hold the marked value. A moved
/// [`crate::mark::Restore::Exact`] mark keeps the fence ([`ReleaseDecision::MarkMoved`]) unless it is the
/// only one and it is the pause set back to `false` (a person's `flux resume`): then the patch
/// keeps that value, tested, and releases (`decide_release_marks` says so).
///
/// # Errors
/// [`FenceError::Json`] only if the patch cannot be encoded.
pub fn decide_release(
    read: Option<&Value>,
    keys: &AnnotationKeys,
    held: &Held,
) -> Result<ReleaseDecision, FenceError> {
    decide_release_marks(read, keys, held, Moved::Withhold).map(|d| d.decision)
}

/// How a release treats [`Restore::Exact`] marks another writer moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Moved {
    /// Keep the fence, unless the only moved mark is the pause set back to `false` (a
    /// person's `flux resume`): that value is kept and the fence released. Every release.
    Withhold,
    /// Keep every moved value as found (each tested) and release: on an operator's word.
    KeepAll,
}

/// What a release patch does with the recorded marks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseMarks {
    /// Marks restored to their prior value (or removed), in patch order.
    pub restored: Vec<MarkAt>,
    /// [`Restore::Exact`] marks left as another writer set them, each value tested.
    pub kept: Vec<MarkAt>,
    /// The pause another writer set back to `false` (a person's `flux resume`), kept by the
    /// rule every release follows; `None` when no such value was kept.
    pub resumed: Option<MarkAt>,
}

/// A release decision and what its patch does with the marks (empty unless it is a patch).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub(crate) struct Decided {
    /// The decision.
    pub decision: ReleaseDecision,
    /// What [`ReleaseDecision::Patch`] does with each mark.
    pub marks: ReleaseMarks,
}

/// Decides a release of `held` on the object as read (`None`: not found), treating moved
/// marks as `moved` says.
///
/// # Guarantees
/// The patch tests the uid and our owner value, so it never applies to an object that is not
/// ours; each restored mark is tested to still hold the marked value, and each kept mark to
/// still hold the value read.
///
/// # Errors
/// [`FenceError::Json`] only if the patch cannot be encoded.
pub(crate) fn decide_release_marks(
    read: Option<&Value>,
    keys: &AnnotationKeys,
    held: &Held,
    moved: Moved,
) -> Result<Decided, FenceError> {
    let plain = |decision| {
        Ok(Decided {
            decision,
            marks: ReleaseMarks::default(),
        })
    };
    let Some(obj) = read else {
        return plain(ReleaseDecision::Gone);
    };
    if obj.pointer("/metadata/uid").and_then(Value::as_str) != Some(held.uid.as_str()) {
        return plain(ReleaseDecision::Recreated);
    }
    let owner = held.owner.to_string();
    match annotation(obj, &keys.owner) {
        Some(found) if found == owner => {}
        found => {
            return plain(ReleaseDecision::NotOurs {
                holder: found.map(str::to_string),
            });
        }
    }
    // Undo in reverse order of application.
    let fates: Vec<(&RecordedMark, Fate)> =
        held.marks.iter().rev().map(|m| (m, fate(obj, m))).collect();
    let moved_exact: Vec<&RecordedMark> = fates
        .iter()
        .filter(|(_, f)| *f == Fate::Moved)
        .map(|(m, _)| *m)
        .collect();
    let mut marks = ReleaseMarks::default();
    if let [first, ..] = moved_exact.as_slice()
        && moved == Moved::Withhold
    {
        match moved_exact.as_slice() {
            [only] if only.resumed_by(obj.pointer(&only.at.pointer())) => {
                marks.resumed = Some(only.at.clone());
            }
            _ => {
                return plain(ReleaseDecision::MarkMoved {
                    at: first.at.clone(),
                });
            }
        }
    }
    let mut ops = vec![
        json!({ "op": "test", "path": "/metadata/uid", "value": held.uid }),
        json!({ "op": "test", "path": pointer::annotation(&keys.owner), "value": owner }),
    ];
    for (m, f) in fates {
        let p = m.at.pointer();
        match f {
            Fate::Restore => {
                ops.push(json!({ "op": "test", "path": p, "value": m.value }));
                ops.push(match &m.prior {
                    None => json!({ "op": "remove", "path": p }),
                    Some(v) => json!({ "op": "replace", "path": p, "value": v }),
                });
                marks.restored.push(m.at.clone());
            }
            Fate::Moved => {
                // Another writer's value stays; a change after this read refuses the patch.
                // A removed value is tested as `null`: the API server's JSON Patch (evanphx
                // json-patch) passes a `null` test on a missing path and fails it once the
                // path holds a value.
                let found = obj.pointer(&p).cloned().unwrap_or(Value::Null);
                ops.push(json!({ "op": "test", "path": p, "value": found }));
                marks.kept.push(m.at.clone());
            }
            Fate::Theirs => {}
        }
    }
    if let Some(prior) = annotation(obj, &keys.prior) {
        let p = pointer::annotation(&keys.prior);
        ops.push(json!({ "op": "test", "path": p, "value": prior }));
        ops.push(json!({ "op": "remove", "path": p }));
    }
    if annotation(obj, &keys.reason).is_some() {
        ops.push(json!({ "op": "remove", "path": pointer::annotation(&keys.reason) }));
    }
    ops.push(json!({ "op": "remove", "path": pointer::annotation(&keys.owner) }));
    // A fence written by an older version carries no label: nothing to remove then.
    if label(obj, &keys.fenced_label).is_some() {
        ops.push(json!({ "op": "remove", "path": pointer::label(&keys.fenced_label) }));
    }
    let patch = serde_json::from_value(Value::Array(ops)).map_err(|source| FenceError::Json {
        what: "JSON Patch",
        source,
    })?;
    Ok(Decided {
        decision: ReleaseDecision::Patch(patch),
        marks,
    })
}

/// What the release does with one mark, on the object as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Still the marked value: restore it.
    Restore,
    /// An exact mark another writer changed.
    Moved,
    /// An if-unchanged mark another writer changed: their value stays, untested.
    Theirs,
}

fn fate(obj: &Value, m: &RecordedMark) -> Fate {
    if obj.pointer(&m.at.pointer()) == Some(&m.value) {
        Fate::Restore
    } else if m.restore == Restore::Exact {
        Fate::Moved
    } else {
        Fate::Theirs
    }
}

#[cfg(test)]
mod tests;
