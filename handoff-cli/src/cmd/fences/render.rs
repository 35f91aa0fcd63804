//! The words of `fences`: how a judged fence, a kept entry and the evidence read to a person
//! and in JSON. The rules themselves live in `flux_fence::recovery`.

use std::time::Duration;

use flux_fence::ObjectRef;
use flux_fence::recovery::{Action, ChildMark, KeepReason, Liveness, Row, Subject, Withhold};
use flux_suspend::flux::{RECONCILE_ANNOTATION, RECONCILE_DISABLED};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

/// How a handoff target (a child, released before its parents) is recognised: the target
/// carries `kustomize.toolkit.fluxcd.io/reconcile: disabled`.
#[must_use]
pub fn child_mark() -> ChildMark {
    ChildMark::annotation(RECONCILE_ANNOTATION, RECONCILE_DISABLED)
}

/// `ks/ns/name` or `hr/ns/name`: the form `fences release` takes.
#[must_use]
pub fn short_ref(obj: &ObjectRef) -> String {
    let kind = match obj.resource.kind.as_str() {
        "HelmRelease" => "hr",
        _ => "ks",
    };
    format!("{kind}/{}/{}", obj.namespace, obj.name)
}

/// The release command of a fence that may be released.
#[must_use]
pub fn release_command(row: &Row, suffix: &str) -> Option<String> {
    match (&row.action, &row.holder) {
        (Action::Release { .. }, Some(h)) => Some(format!(
            "flux-handoff fences release {} --holder {h}{suffix}",
            short_ref(&row.object)
        )),
        _ => None,
    }
}

/// The evidence of a liveness, in words.
#[must_use]
pub fn evidence(l: &Liveness, now: Timestamp) -> String {
    match l {
        Liveness::Live {
            renewed_while_watched: Some(after),
            ..
        } => format!(
            "holder has the Lease, renewed while watched ({}s into the watch)",
            after.as_secs()
        ),
        Liveness::Live {
            renewed: Some(r), ..
        } => format!(
            "holder has the Lease, renewed {} ago",
            age(duration_since(now, *r))
        ),
        Liveness::Live { .. } => "holder has the Lease".into(),
        Liveness::Paused => {
            "paused on purpose by `flux-handoff pause` (Lease parked, not renewed)".into()
        }
        Liveness::Orphaned(o) => o.to_string(),
        _ => "unknown".into(),
    }
}

/// Why a release is withheld, in words.
#[must_use]
pub fn withhold(w: &Withhold) -> String {
    match w {
        Withhold::ChildrenHeld { holder, children } => format!(
            "a parent whose child is still held by {holder}: release {} first",
            children
                .iter()
                .map(short_ref)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Withhold::MarkMoved(at) => format!(
            "{at} was changed by another writer since the fence; a release cannot restore it safely (inspect it, then remove the fence annotations by hand)"
        ),
        Withhold::Malformed { owner, problem } => format!(
            "owner annotation {owner:?} is malformed ({problem}); inspect it and fix by hand"
        ),
        _ => "unknown fence state; inspect it by hand".into(),
    }
}

/// Why something is kept by `fences recover`, in words.
#[must_use]
pub fn keep(why: &KeepReason, now: Timestamp) -> String {
    match why {
        KeepReason::Live { holder, liveness } => {
            format!("{holder} is live: {}", evidence(liveness, now))
        }
        KeepReason::Paused { holder } => format!(
            "{holder} {}; resume it with `flux-handoff resume --holder {holder}` (or recover \
             with --include-paused)",
            evidence(&Liveness::Paused, now)
        ),
        KeepReason::Withheld(w) => withhold(w),
        KeepReason::ChildKept { holder } => {
            format!("a parent whose child is still held by {holder}")
        }
        KeepReason::NotProved { holder, why } => format!("{holder} not proved gone: {why}"),
        _ => "its holder is unknown".into(),
    }
}

/// A kept entry's name: `ks/ns/name` or `lease ns/name`.
#[must_use]
pub fn subject(s: &Subject, lease: &str) -> String {
    match s {
        Subject::Fence(o) => short_ref(o),
        _ => format!("lease {lease}"),
    }
}

/// `1h02m`, `3m05s`, `12s`.
#[must_use]
pub fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// `now - then`, zero if `then` lies in the future.
#[must_use]
pub fn duration_since(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(then)).unwrap_or_default()
}

/// One row as JSON (for `--output json`).
#[must_use]
pub fn row_json(row: &Row, now: Timestamp, suffix: &str) -> Value {
    let (patch, withheld) = match &row.action {
        Action::Release { patch } => (serde_json::from_str::<Value>(patch).ok(), None),
        Action::Withheld(w) => (None, Some(withhold(w))),
        _ => (None, None),
    };
    json!({
        "object": short_ref(&row.object),
        "kind": row.object.resource.kind,
        "namespace": row.object.namespace,
        "name": row.object.name,
        "holder": row.holder,
        "epoch": row.epoch,
        "age_seconds": row.age.map(|a| a.as_secs()),
        "role": if row.child { "target" } else { "parent" },
        "liveness": row.liveness.as_ref().map(Liveness::label),
        "evidence": row.liveness.as_ref().map(|l| evidence(l, now)),
        "release_command": release_command(row, suffix),
        "release_patch": patch,
        "withheld": withheld,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_at_a_glance() {
        assert_eq!(age(Duration::from_secs(7)), "7s");
        assert_eq!(age(Duration::from_secs(65)), "1m05s");
        assert_eq!(age(Duration::from_mins(62)), "1h02m");
        assert_eq!(age(Duration::from_hours(25)), "1d01h");
    }

    #[test]
    fn a_parent_names_the_children_to_release_first() {
        let w = Withhold::ChildrenHeld {
            holder: "h".into(),
            children: vec![flux_suspend::object::kustomization("ns", "child")],
        };
        assert_eq!(
            withhold(&w),
            "a parent whose child is still held by h: release ks/ns/child first"
        );
    }
}
