//! Whether a write carries a precondition on the object's version.
//!
//! A write conditional on the `resourceVersion` it was based on cannot apply twice: once the
//! first copy landed, the version moved and the server refuses the second with 409. So a
//! conditional write sent again after its response was lost is safe, where an unconditional one
//! would apply twice. The chaos suite uses this to flag only unconditional repeats.
//!
//! Only the version counts. A JSON patch `test` on another field (an owner annotation, say)
//! may still pass the second time, so it is not a precondition here.

use serde_json::Value;

/// True when the API server will apply this request only if the object is still at the
/// version the body names:
/// - PUT, merge or apply PATCH: a non-empty `metadata.resourceVersion` in the body;
/// - JSON PATCH (`application/json-patch+json`): a `test` of `/metadata/resourceVersion`;
/// - DELETE: `preconditions.resourceVersion` in its `DeleteOptions` body.
///
/// Anything else, including a body that is not JSON, is unconditional.
#[must_use]
pub fn on_version(method: &str, content_type: &str, body: &[u8]) -> bool {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    let non_empty = |x: Option<&Value>| x.and_then(Value::as_str).is_some_and(|s| !s.is_empty());
    match method {
        "PATCH" if content_type.starts_with("application/json-patch+json") => v
            .as_array()
            .is_some_and(|ops| ops.iter().any(tests_version)),
        "PUT" | "PATCH" => non_empty(v.pointer("/metadata/resourceVersion")),
        "DELETE" => non_empty(v.pointer("/preconditions/resourceVersion")),
        _ => false,
    }
}

fn tests_version(op: &Value) -> bool {
    op.get("op").and_then(Value::as_str) == Some("test")
        && op.get("path").and_then(Value::as_str) == Some("/metadata/resourceVersion")
}

#[cfg(test)]
mod tests {
    use super::on_version;

    const JSON: &str = "application/json";
    const JSON_PATCH: &str = "application/json-patch+json";
    const MERGE: &str = "application/merge-patch+json";

    #[test]
    fn only_a_version_precondition_counts() {
        let rows: &[(&str, &str, &str, bool, &str)] = &[
            (
                "PUT",
                JSON,
                r#"{"metadata":{"name":"l","resourceVersion":"7"}}"#,
                true,
                "put at a version",
            ),
            (
                "PUT",
                JSON,
                r#"{"metadata":{"name":"l"}}"#,
                false,
                "put without a version",
            ),
            (
                "PUT",
                JSON,
                r#"{"metadata":{"resourceVersion":""}}"#,
                false,
                "put with an empty version",
            ),
            (
                "PATCH",
                JSON_PATCH,
                r#"[{"op":"test","path":"/metadata/resourceVersion","value":"7"},{"op":"add","path":"/spec/suspend","value":true}]"#,
                true,
                "json patch testing the version",
            ),
            (
                "PATCH",
                JSON_PATCH,
                r#"[{"op":"test","path":"/metadata/annotations/o","value":"me"},{"op":"remove","path":"/metadata/annotations/o"}]"#,
                false,
                "json patch testing another field",
            ),
            (
                "PATCH",
                JSON_PATCH,
                r#"[{"op":"replace","path":"/metadata/resourceVersion","value":"7"}]"#,
                false,
                "json patch writing, not testing, the version",
            ),
            (
                "PATCH",
                MERGE,
                r#"{"metadata":{"resourceVersion":"7"},"spec":{"suspend":true}}"#,
                true,
                "merge patch at a version",
            ),
            (
                "PATCH",
                MERGE,
                r#"{"spec":{"suspend":true}}"#,
                false,
                "merge patch without a version",
            ),
            (
                "DELETE",
                JSON,
                r#"{"preconditions":{"resourceVersion":"7"}}"#,
                true,
                "delete at a version",
            ),
            (
                "DELETE",
                JSON,
                r#"{"preconditions":{"uid":"u"}}"#,
                false,
                "delete on uid only",
            ),
            ("DELETE", JSON, "", false, "delete without a body"),
            (
                "POST",
                JSON,
                r#"{"metadata":{"resourceVersion":"7"}}"#,
                false,
                "create",
            ),
            ("PUT", JSON, "not json", false, "a body that is not json"),
        ];
        for (method, ct, body, want, why) in rows {
            assert_eq!(on_version(method, ct, body.as_bytes()), *want, "{why}");
        }
    }
}
