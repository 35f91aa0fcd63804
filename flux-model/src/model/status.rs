//! The model's pure half: conditions, the deferred `finalizeStatus` (docs/design/flux-model.md 3)
//! and the JSON merge patch that a status write sends. No I/O here.

use serde_json::{Map, Value, json};

/// Annotation that requests a reconcile (`reconcile.fluxcd.io/requestedAt`).
pub const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";
/// Condition type `Ready`.
pub const READY: &str = "Ready";
/// Condition type `Reconciling`.
pub const RECONCILING: &str = "Reconciling";
/// Condition type `Healthy`.
pub const HEALTHY: &str = "Healthy";
/// Reason of `Reconciling=True` while a reconcile works.
pub const PROGRESSING: &str = "Progressing";
/// Reason `finalizeStatus` gives `Reconciling` after a failed reconcile.
pub const PROGRESSING_WITH_RETRY: &str = "ProgressingWithRetry";

/// The status of a condition of `status` (`"True"`, `"False"`, `"Unknown"`), if present.
pub fn condition_status<'a>(status: &'a Value, type_: &str) -> Option<&'a str> {
    condition(status, type_)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
}

/// The condition of type `type_` in `status.conditions`, if present.
#[must_use]
pub fn condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// One condition to set, the way `conditions.Mark*` of fluxcd/pkg does: the transition time
/// moves only when the status value changes.
#[derive(Debug, Clone, Copy)]
pub struct Mark<'a> {
    pub type_: &'a str,
    pub status: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
}

/// Sets (or replaces) a condition in `status.conditions`.
pub fn set_condition(status: &mut Value, mark: Mark<'_>, generation: i64, now: &str) {
    let obj = ensure_object(status);
    let conditions = obj
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !conditions.is_array() {
        *conditions = Value::Array(Vec::new());
    }
    let list = conditions.as_array_mut().expect("conditions is an array");
    let existing = list
        .iter()
        .position(|c| c.get("type").and_then(Value::as_str) == Some(mark.type_));
    let transition = match existing.map(|i| &list[i]) {
        Some(old) if old.get("status").and_then(Value::as_str) == Some(mark.status) => old
            .get("lastTransitionTime")
            .cloned()
            .unwrap_or_else(|| json!(now)),
        _ => json!(now),
    };
    let new = json!({
        "type": mark.type_,
        "status": mark.status,
        "reason": mark.reason,
        "message": mark.message,
        "observedGeneration": generation,
        "lastTransitionTime": transition,
    });
    match existing {
        Some(i) => list[i] = new,
        None => list.push(new),
    }
}

/// Removes a condition from `status.conditions` (no-op when absent).
pub fn delete_condition(status: &mut Value, type_: &str) {
    if let Some(list) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        list.retain(|c| c.get("type").and_then(Value::as_str) != Some(type_));
    }
}

/// kustomize-controller's deferred `finalizeStatus` (docs/design/flux-model.md 3), applied to the
/// in-memory `status` of an object whose annotations and generation are given:
/// 1. copies `requestedAt` into `lastHandledReconcileAt`;
/// 2. `Ready=True`: deletes `Reconciling`, sets `observedGeneration = generation`;
/// 3. `Ready=False` with `Reconciling` present: `Reconciling` reason `ProgressingWithRetry`.
pub fn finalize_status(status: &mut Value, requested_at: Option<&str>, generation: i64) {
    if let Some(nonce) = requested_at {
        ensure_object(status).insert("lastHandledReconcileAt".into(), json!(nonce));
    }
    match condition_status(status, READY) {
        Some("True") => {
            delete_condition(status, RECONCILING);
            ensure_object(status).insert("observedGeneration".into(), json!(generation));
        }
        Some("False") => {
            if let Some(list) = status.get_mut("conditions").and_then(Value::as_array_mut)
                && let Some(rc) = list
                    .iter_mut()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some(RECONCILING))
            {
                rc["reason"] = json!(PROGRESSING_WITH_RETRY);
            }
        }
        _ => {}
    }
}

/// The RFC 7386 JSON merge patch that turns `before` into `after`, or `None` when they are
/// equal (nothing changed, nothing written). Arrays are replaced whole, as a merge patch does.
#[must_use]
pub fn merge_patch(before: &Value, after: &Value) -> Option<Value> {
    if before == after {
        return None;
    }
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let mut patch = Map::new();
            for (k, av) in a {
                match b.get(k) {
                    Some(bv) => {
                        if let Some(p) = merge_patch(bv, av) {
                            patch.insert(k.clone(), p);
                        }
                    }
                    None => {
                        patch.insert(k.clone(), av.clone());
                    }
                }
            }
            for k in b.keys() {
                if !a.contains_key(k) {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            Some(Value::Object(patch))
        }
        _ => Some(after.clone()),
    }
}

/// Now, as the RFC 3339 seconds timestamp Kubernetes uses in conditions.
#[must_use]
pub fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Parses a Go duration as Flux writes `spec.interval` (`"10m"`, `"1m30s"`, `"500ms"`, `"1h"`).
#[must_use]
pub fn parse_go_duration(s: &str) -> Option<std::time::Duration> {
    let mut total = std::time::Duration::ZERO;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += std::time::Duration::from_secs_f64(number * seconds);
    }
    Some(total)
}

fn ensure_object(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    v.as_object_mut().expect("just made an object")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark<'a>(type_: &'a str, status: &'a str) -> Mark<'a> {
        Mark {
            type_,
            status,
            reason: "R",
            message: "m",
        }
    }

    #[test]
    fn finalize_records_nonce_and_clears_reconciling_when_ready() {
        let mut s = json!({});
        set_condition(&mut s, mark(READY, "True"), 3, "t0");
        set_condition(&mut s, mark(RECONCILING, "True"), 3, "t0");
        finalize_status(&mut s, Some("n1"), 4);
        assert_eq!(s["lastHandledReconcileAt"], json!("n1"));
        assert_eq!(s["observedGeneration"], json!(4));
        assert!(condition(&s, RECONCILING).is_none());
    }

    #[test]
    fn finalize_keeps_reconciling_with_retry_when_not_ready() {
        let mut s = json!({});
        set_condition(&mut s, mark(READY, "False"), 3, "t0");
        set_condition(&mut s, mark(RECONCILING, "True"), 3, "t0");
        finalize_status(&mut s, None, 4);
        assert_eq!(
            condition(&s, RECONCILING).unwrap()["reason"],
            json!(PROGRESSING_WITH_RETRY)
        );
        assert!(s.get("observedGeneration").is_none());
        assert!(s.get("lastHandledReconcileAt").is_none());
    }

    #[test]
    fn finalize_leaves_unknown_ready_and_reconciling_frozen() {
        let mut s = json!({});
        set_condition(&mut s, mark(READY, "Unknown"), 3, "t0");
        set_condition(&mut s, mark(RECONCILING, "True"), 3, "t0");
        let before = s.clone();
        finalize_status(&mut s, Some("n"), 9);
        assert_eq!(
            merge_patch(&before, &s),
            Some(json!({ "lastHandledReconcileAt": "n" }))
        );
    }

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let mut s = json!({});
        set_condition(&mut s, mark(READY, "Unknown"), 1, "t0");
        set_condition(&mut s, mark(READY, "Unknown"), 1, "t1");
        assert_eq!(
            condition(&s, READY).unwrap()["lastTransitionTime"],
            json!("t0")
        );
        set_condition(&mut s, mark(READY, "True"), 1, "t2");
        assert_eq!(
            condition(&s, READY).unwrap()["lastTransitionTime"],
            json!("t2")
        );
    }

    #[test]
    fn merge_patch_is_none_when_equal_and_nulls_removed_keys() {
        let a = json!({ "x": 1, "y": { "z": 2 }, "l": [1] });
        assert_eq!(merge_patch(&a, &a), None);
        let b = json!({ "y": { "z": 3 }, "l": [1, 2] });
        assert_eq!(
            merge_patch(&a, &b),
            Some(json!({ "x": null, "y": { "z": 3 }, "l": [1, 2] }))
        );
    }

    #[test]
    fn go_durations_parse() {
        use std::time::Duration;
        assert_eq!(parse_go_duration("10m"), Some(Duration::from_mins(10)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("x"), None);
        assert_eq!(parse_go_duration(""), None);
    }
}
