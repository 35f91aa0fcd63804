//! The marks of a fence: what a Flux object's pause writes, and what a replicas gate writes.

use flux_fence::mark::Restore;
use flux_fence::{Mark, ObjectRef};
use serde_json::json;

use crate::flux::{
    OPERATOR_RECONCILE_ANNOTATION, RECONCILE_ANNOTATION, RECONCILE_DISABLED,
    REQUESTED_AT_ANNOTATION,
};

/// The Flux Operator's annotation naming who suspended an object (its web UI shows it).
pub const SUSPENDED_BY_ANNOTATION: &str = "fluxcd.controlplane.io/suspendedBy";

/// The `suspendedBy` value: the writer's field manager and `HOLDER` (`flux-handoff HOLDER`),
/// and the reason when given (validated, never a secret: it is on the fence's reason annotation
/// too).
#[must_use]
pub fn suspended_by(holder: &flux_fence::Holder, reason: Option<&str>) -> String {
    let by = flux_fence::api::FIELD_MANAGER;
    match reason {
        Some(r) if !r.is_empty() => format!("{by} {holder}: {r}"),
        _ => format!("{by} {holder}"),
    }
}

/// The marks of a fence: the pause, exclusive — `spec.suspend=true`, or for a Flux Operator
/// kind (`operator`) `fluxcd.controlplane.io/reconcile: disabled`, which is all that pauses
/// those — the `requestedAt` nonce, for a target `reconcile: disabled`, and
/// `fluxcd.controlplane.io/suspendedBy` = `by` where no one else set one (a value someone else
/// set stays, and the release leaves it; ours is removed on release unless someone changed it
/// since).
pub(crate) fn fence_marks(nonce: &str, is_target: bool, operator: bool, by: &str) -> Vec<Mark> {
    let mut marks = vec![
        pause_mark(operator),
        Mark::annotation(REQUESTED_AT_ANNOTATION, nonce.to_string()).restore(Restore::IfUnchanged),
        Mark::annotation(SUSPENDED_BY_ANNOTATION, by)
            .restore(Restore::IfUnchanged)
            .if_absent(),
    ];
    if is_target {
        marks.push(Mark::annotation(RECONCILE_ANNOTATION, RECONCILE_DISABLED));
    }
    marks
}

/// Where a replicas gate writes its count.
pub(crate) const REPLICAS_POINTER: &str = "/spec/replicas";

/// The marks of a replicas gate: the Deployment's `spec.replicas` set to `replicas`, restored
/// exactly (a count someone else wrote meanwhile withholds the release), and
/// `kustomize.toolkit.fluxcd.io/reconcile: disabled`, so that not even a resumed parent applies
/// the Deployment over the gate. Neither is exclusive: a Deployment already at the count, or
/// already disabled by a person, is gated as it is and given back as it was.
pub(crate) fn gate_marks(replicas: i32) -> Vec<Mark> {
    vec![
        Mark::field(REPLICAS_POINTER, json!(replicas)),
        Mark::annotation(RECONCILE_ANNOTATION, RECONCILE_DISABLED),
    ]
}

/// The marks of one member's fence: a replicas gate's when it has a count, else a Flux
/// object's ([`fence_marks`]).
pub(crate) fn member_marks(
    obj: &ObjectRef,
    nonce: &str,
    is_target: bool,
    by: &str,
    replicas: Option<i32>,
) -> Vec<Mark> {
    match replicas {
        Some(n) => gate_marks(n),
        None => fence_marks(
            nonce,
            is_target,
            crate::object::is_operator_kind(&obj.resource),
            by,
        ),
    }
}

/// The exclusive mark that pauses an object's controller: `spec.suspend=true`, or for a Flux
/// Operator kind `fluxcd.controlplane.io/reconcile: disabled` (the only pause those kinds
/// have). Exclusive: an object someone else already paused this way is refused.
pub(crate) fn pause_mark(operator: bool) -> Mark {
    let pause = if operator {
        Mark::annotation(OPERATOR_RECONCILE_ANNOTATION, RECONCILE_DISABLED)
    } else {
        Mark::field("/spec/suspend", json!(true))
    };
    pause.exclusive()
}

#[cfg(test)]
mod tests {
    use flux_fence::mark::MarkAt;

    use super::*;

    #[test]
    fn operator_kinds_fence_with_their_reconcile_annotation_as_the_exclusive_pause() {
        let at = |m: &Mark| m.at.clone();
        for (operator, is_target) in [(true, true), (true, false), (false, true), (false, false)] {
            let marks = fence_marks("n1", is_target, operator, "by");
            let exclusive: Vec<MarkAt> = marks.iter().filter(|m| m.exclusive).map(at).collect();
            let want = if operator {
                MarkAt::Annotation(OPERATOR_RECONCILE_ANNOTATION.into())
            } else {
                MarkAt::Field("/spec/suspend".into())
            };
            assert_eq!(exclusive, vec![want], "operator={operator}");
            let pause = marks.iter().find(|m| m.exclusive).unwrap();
            let value = if operator {
                json!("disabled")
            } else {
                json!(true)
            };
            assert_eq!((&pause.value, pause.restore), (&value, Restore::Exact));
            // No spec.suspend on a kind that has none; the nonce and suspendedBy as for any.
            let fields: Vec<MarkAt> = marks.iter().map(at).collect();
            assert_eq!(
                fields.contains(&MarkAt::Field("/spec/suspend".into())),
                !operator
            );
            for key in [REQUESTED_AT_ANNOTATION, SUSPENDED_BY_ANNOTATION] {
                assert!(fields.contains(&MarkAt::Annotation(key.into())), "{key}");
            }
            assert_eq!(
                fields.contains(&MarkAt::Annotation(RECONCILE_ANNOTATION.into())),
                is_target
            );
        }
    }
}
