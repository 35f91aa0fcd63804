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
    let observed = obj
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
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
