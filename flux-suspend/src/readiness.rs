//! Suspend-aware readiness after resume.
//!
//! A suspended Kustomization keeps a lagging `observedGeneration` (docs/design/flux-model.md, fact
//! 10), and a frozen `Ready`/`Reconciling` pair from before the suspend (fact 9). Neither is
//! progress: readiness is judged only on a resumed object, for the current generation, and —
//! when a reconcile was requested — after that request was handled.

use serde_json::Value;

use crate::flux;

/// Readiness of a resumed object.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Readiness {
    /// `Ready=True` for the current generation (and the requested reconcile was handled).
    Ready,
    /// Still suspended: nothing it says is progress.
    Suspended,
    /// `Ready=False` for the current generation after the request was handled.
    Failed { reason: String },
    /// Not there yet.
    Pending,
}

/// Judges readiness of `obj`; `nonce` is the `requestedAt` value we set on resume, if any.
#[must_use]
pub fn readiness(obj: &Value, nonce: Option<&str>) -> Readiness {
    if flux::suspended(obj) {
        return Readiness::Suspended;
    }
    let generation = obj.pointer("/metadata/generation").and_then(Value::as_i64);
    // Flux Operator writes no top-level `observedGeneration`, only each condition's (fo
    // `api/v1/resourceset_types.go`, `ResourceSetStatus`): its Ready condition's then.
    let observed = obj
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .or_else(|| {
            flux::is_operator_object(obj)
                .then(|| ready_observed(obj))
                .flatten()
        });
    let handled = nonce.is_none_or(|n| flux::last_handled(obj) == Some(n));
    let conds = flux::conditions(obj);
    match flux::condition(&conds, "Ready") {
        Some(r)
            if r.status == "True" && handled && generation.is_some() && generation == observed =>
        {
            Readiness::Ready
        }
        Some(r) if r.status == "False" && handled => Readiness::Failed {
            reason: r.reason.clone(),
        },
        _ => Readiness::Pending,
    }
}

/// `observedGeneration` of the `Ready` condition in `status.conditions`.
fn ready_observed(obj: &Value) -> Option<i64> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))?
        .get("observedGeneration")?
        .as_i64()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(api_version: &str, top: Option<i64>, ready: i64, annotations: &Value) -> Value {
        let mut status = json!({
            "lastHandledReconcileAt": "n1",
            "conditions": [{ "type": "Ready", "status": "True", "reason": "R", "message": "",
                             "observedGeneration": ready }]
        });
        if let Some(g) = top {
            status["observedGeneration"] = json!(g);
        }
        json!({
            "apiVersion": api_version,
            "metadata": { "generation": 2, "annotations": annotations },
            "status": status
        })
    }

    #[test]
    fn operator_kinds_are_ready_by_their_ready_conditions_generation() {
        let op = "fluxcd.controlplane.io/v1";
        let ks = "kustomize.toolkit.fluxcd.io/v1";
        let none = json!({});
        let disabled = json!({ "fluxcd.controlplane.io/reconcile": "disabled" });
        // (case, object, readiness)
        let table = [
            (
                "operator, Ready for this generation",
                obj(op, None, 2, &none),
                Readiness::Ready,
            ),
            (
                "operator, Ready for an older one",
                obj(op, None, 1, &none),
                Readiness::Pending,
            ),
            (
                "operator, still disabled",
                obj(op, None, 2, &disabled),
                Readiness::Suspended,
            ),
            (
                "Flux's own kinds keep the top-level one",
                obj(ks, None, 2, &none),
                Readiness::Pending,
            ),
            (
                "Flux's own kinds, top-level current",
                obj(ks, Some(2), 1, &none),
                Readiness::Ready,
            ),
        ];
        for (case, o, want) in table {
            assert_eq!(readiness(&o, Some("n1")), want, "{case}");
        }
    }
}
