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

/// The mark that freezes a target in the `ResourceSet` that generates it
/// ([`crate::flux::excluded_from_set`]): `fluxcd.controlplane.io/reconcile: disabled`, which the
/// set's apply skips, so the set is never paused as a whole (other tenants' objects go on being
/// applied). Not exclusive (an object a person froze already is gated as it is) and restored
/// exactly: the prior value, or its absence.
pub(crate) fn set_exclusion_mark() -> Mark {
    Mark::annotation(OPERATOR_RECONCILE_ANNOTATION, RECONCILE_DISABLED)
}

/// The marks of one member's fence: a replicas gate's when it has a count, else a Flux
/// object's ([`fence_marks`]); with [`set_exclusion_mark`] for a target `in_set` (its labels
/// name a `ResourceSet` that applies it).
pub(crate) fn member_marks(
    obj: &ObjectRef,
    nonce: &str,
    is_target: bool,
    by: &str,
    replicas: Option<i32>,
    in_set: bool,
) -> Vec<Mark> {
    let operator = crate::object::is_operator_kind(&obj.resource);
    let mut marks = match replicas {
        Some(n) => gate_marks(n),
        None => fence_marks(nonce, is_target, operator, by),
    };
    // An operator kind's own pause is that annotation already.
    if is_target && in_set && !operator {
        marks.push(set_exclusion_mark());
    }
    marks
}

/// Whether a target read as `read` is frozen in its `ResourceSet` by its fence: its labels name
/// a set that applies it ([`crate::flux::excluded_from_set`]).
pub(crate) fn in_set(is_target: bool, read: Option<&serde_json::Value>) -> bool {
    is_target && read.and_then(crate::flux::excluded_from_set).is_some()
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

    #[test]
    fn a_target_generated_by_a_resourceset_is_frozen_in_it_by_a_non_exclusive_exact_mark() {
        use crate::object::{deployment, helm_release, kustomization, resource_set};
        let exclusion = MarkAt::Annotation(OPERATOR_RECONCILE_ANNOTATION.into());
        // (object, target, gate, in_set) -> how many marks sit at the operator annotation.
        let cases = [
            (kustomization("a", "k"), true, None, true, 1),
            (kustomization("a", "k"), true, None, false, 0),
            (kustomization("a", "k"), false, None, true, 0),
            (helm_release("a", "h"), true, None, true, 1),
            (deployment("a", "d"), true, Some(0), true, 1),
            (deployment("a", "d"), true, Some(0), false, 0),
            // A generated ResourceSet: its own exclusive pause is the same annotation.
            (resource_set("a", "r"), true, None, true, 1),
        ];
        for (obj, target, gate, in_set, want) in cases {
            let marks = member_marks(&obj, "n1", target, "by", gate, in_set);
            let at_it: Vec<&Mark> = marks.iter().filter(|m| m.at == exclusion).collect();
            assert_eq!(at_it.len(), want, "{obj} target={target} in_set={in_set}");
            if let Some(m) = at_it.first() {
                assert_eq!(m.value, json!("disabled"), "{obj}");
                assert_eq!(m.restore, Restore::Exact, "{obj}");
                let operator = crate::object::is_operator_kind(&obj.resource);
                assert_eq!(m.exclusive, operator, "{obj}");
            }
        }
        let read = |labels: serde_json::Value| json!({ "metadata": { "namespace": "a", "labels": labels } });
        let generated = read(json!({ "resourceset.fluxcd.controlplane.io/name": "t" }));
        assert!(in_set(true, Some(&generated)));
        assert!(!in_set(false, Some(&generated)));
        assert!(!in_set(true, None));
        assert!(!in_set(true, Some(&read(json!({ "app": "web" })))));
    }
}
