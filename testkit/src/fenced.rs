//! Reading a fence off an object as the server returned it (JSON), for the tests' assertions.

use serde_json::Value;

/// The owner annotation under the default prefix.
pub const OWNER_KEY: &str = "flux-handoff.io/owner";
/// Flux's reconcile-request annotation, where a fence writes its nonce.
pub const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";
/// Flux's per-object exclusion from a parent's apply.
pub const RECONCILE_KEY: &str = "kustomize.toolkit.fluxcd.io/reconcile";

/// Annotation `key` of `obj`.
#[must_use]
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")?.get(key)?.as_str()
}

/// The holder of the fence on `obj`: its owner annotation's value before the `;epoch`.
#[must_use]
pub fn fence_holder(obj: &Value) -> Option<&str> {
    annotation(obj, OWNER_KEY)?.split(';').next()
}

/// Whether `obj` has `spec.suspend: true`.
#[must_use]
pub fn suspended(obj: &Value) -> bool {
    obj.pointer("/spec/suspend") == Some(&Value::Bool(true))
}

/// Asserts the server holds `owner`'s fence on `obj` (a target also `reconcile: disabled`),
/// its nonce acknowledged by the controller.
///
/// # Panics
/// When any of that does not hold.
pub fn assert_fenced(obj: &Value, owner: &str, target: bool) {
    assert_eq!(annotation(obj, OWNER_KEY), Some(owner), "owner annotation");
    assert!(suspended(obj), "spec.suspend");
    if target {
        assert_eq!(annotation(obj, RECONCILE_KEY), Some("disabled"));
    }
    assert_eq!(
        obj.pointer("/status/lastHandledReconcileAt")
            .and_then(Value::as_str),
        annotation(obj, REQUESTED_AT),
        "the nonce was acknowledged"
    );
}
