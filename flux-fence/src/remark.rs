//! Moving one mark of a held fence to a new value, keeping its prior: e.g. a fresh
//! `requestedAt` nonce that retires what a controller restart started. The release then still
//! restores the value from before the fence, and compares against the new value.

use serde_json::{Value, json};

use crate::decide::{Held, annotation};
use crate::mark::MarkAt;
use crate::mark::PriorRecord;
use crate::{AnnotationKeys, FenceError, pointer};

/// The answer of [`decide_remark`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RemarkDecision {
    /// Send this patch; afterwards the fence holds `held`.
    Patch {
        /// `test` uid, resourceVersion and owner; set the mark; rewrite the prior annotation.
        patch: json_patch::Patch,
        /// The fence with the mark's new value (its prior unchanged).
        held: Held,
    },
    /// The object is gone, recreated, or not ours: write nothing.
    NotOurs,
}

/// Decides the patch that sets the mark at `at` of the fence `held` to `value`, given the object
/// as read (`None` = 404).
///
/// # Guarantees
/// Pure. The patch applies only to exactly the object that was read while it carries our
/// owner value; the prior annotation is rewritten with the new value and the same prior, so
/// any process releasing from the annotations alone restores the pre-fence value.
///
/// # Errors
/// [`FenceError::InvalidMark`] when the fence has no mark at `at`; [`FenceError::Malformed`]
/// when our prior annotation does not parse.
pub fn decide_remark(
    obj: Option<&Value>,
    keys: &AnnotationKeys,
    held: &Held,
    at: &MarkAt,
    value: &Value,
) -> Result<RemarkDecision, FenceError> {
    let no_mark = || FenceError::InvalidMark {
        at: at.to_string(),
        why: "the fence holds no mark there",
    };
    if !held.marks.iter().any(|m| m.at == *at) {
        return Err(no_mark());
    }
    let Some(obj) = obj else {
        return Ok(RemarkDecision::NotOurs);
    };
    let owner = held.owner.to_string();
    if obj.pointer("/metadata/uid").and_then(Value::as_str) != Some(held.uid.as_str())
        || annotation(obj, &keys.owner) != Some(owner.as_str())
    {
        return Ok(RemarkDecision::NotOurs);
    }
    let prior_text = annotation(obj, &keys.prior)
        .ok_or_else(|| FenceError::malformed("prior annotation", "<absent>"))?;
    let mut record = PriorRecord::parse(prior_text)?;
    let recorded = record
        .marks
        .iter_mut()
        .find(|m| m.at == *at)
        .ok_or_else(no_mark)?;
    recorded.value = value.clone();
    let mut next = held.clone();
    for m in next.marks.iter_mut().filter(|m| m.at == *at) {
        m.value = value.clone();
    }
    let ops = json!([
        { "op": "test", "path": "/metadata/uid", "value": held.uid },
        { "op": "test", "path": "/metadata/resourceVersion",
          "value": obj.pointer("/metadata/resourceVersion") },
        { "op": "test", "path": pointer::annotation(&keys.owner), "value": owner },
        { "op": "add", "path": at.pointer(), "value": value },
        { "op": "add", "path": pointer::annotation(&keys.prior), "value": record.render()? },
    ]);
    let patch = serde_json::from_value(ops).map_err(|source| FenceError::Json {
        what: "remark patch",
        source,
    })?;
    Ok(RemarkDecision::Patch { patch, held: next })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::held_from_annotations;
    use crate::mark::RecordedMark;
    use crate::mark::Restore;
    use crate::{Epoch, Holder, OwnerValue};

    const NONCE: &str = "reconcile.fluxcd.io/requestedAt";

    fn fenced() -> (Value, Held) {
        let owner = OwnerValue::new("h1".parse::<Holder>().unwrap(), Epoch(3));
        let record = PriorRecord {
            since: "2026-11-30T12:00:00Z".parse().unwrap(),
            marks: vec![
                RecordedMark {
                    at: MarkAt::Field("/spec/suspend".into()),
                    value: json!(true),
                    prior: Some(json!(false)),
                    restore: Restore::Exact,
                },
                RecordedMark {
                    at: MarkAt::Annotation(NONCE.into()),
                    value: json!("n1"),
                    prior: Some(json!("before")),
                    restore: Restore::IfUnchanged,
                },
            ],
        };
        let obj = json!({ "metadata": { "uid": "u1", "resourceVersion": "9", "annotations": {
            "flux-handoff.io/owner": owner.to_string(),
            "flux-handoff.io/prior": record.render().unwrap(),
            NONCE: "n1",
        } }, "spec": { "suspend": true } });
        let (held, _) = held_from_annotations(&obj, &AnnotationKeys::default()).unwrap();
        (obj, held)
    }

    #[test]
    fn remark_sets_the_value_and_keeps_the_prior_for_the_release() {
        let (obj, held) = fenced();
        let at = MarkAt::Annotation(NONCE.into());
        let keys = AnnotationKeys::default();
        let RemarkDecision::Patch { patch, held: next } =
            decide_remark(Some(&obj), &keys, &held, &at, &json!("n2")).unwrap()
        else {
            panic!("ours: patch");
        };
        let mut after = obj.clone();
        json_patch::patch(&mut after, &patch).unwrap();
        assert_eq!(annotation(&after, NONCE), Some("n2"));
        let (recorded, _) = held_from_annotations(&after, &keys).unwrap();
        assert_eq!(recorded, next, "the annotations and the guard agree");
        let mark = next.marks.iter().find(|m| m.at == at).unwrap();
        assert_eq!(
            (&mark.value, &mark.prior),
            (&json!("n2"), &Some(json!("before")))
        );
        // A moved object fails the patch's tests.
        let mut moved = obj.clone();
        moved["metadata"]["resourceVersion"] = json!("10");
        assert!(json_patch::patch(&mut moved, &patch).is_err());
    }

    #[test]
    fn remark_writes_nothing_to_an_object_that_is_not_ours() {
        let (obj, held) = fenced();
        let at = MarkAt::Annotation(NONCE.into());
        let keys = AnnotationKeys::default();
        let mut other = obj.clone();
        other["metadata"]["annotations"]["flux-handoff.io/owner"] = json!("h2;4");
        let mut recreated = obj.clone();
        recreated["metadata"]["uid"] = json!("u2");
        for o in [None, Some(&other), Some(&recreated)] {
            assert_eq!(
                decide_remark(o, &keys, &held, &at, &json!("n2")).unwrap(),
                RemarkDecision::NotOurs
            );
        }
        let unknown = MarkAt::Annotation("x/y".into());
        assert!(decide_remark(Some(&obj), &keys, &held, &unknown, &json!(1)).is_err());
    }
}
