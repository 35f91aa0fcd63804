//! Marks: the changes a fence makes together with the owner annotation, and the record of each
//! mark's prior value that lets any process undo them.

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::{AnnotationKeys, FenceError, pointer};

pub(crate) mod at_root;

pub(crate) use at_root::Mark;

/// Where a mark writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MarkAt {
    /// An annotation key, e.g. `kustomize.toolkit.fluxcd.io/reconcile`.
    Annotation(String),
    /// A JSON Pointer outside `/metadata`, e.g. `/spec/suspend`. Its parent must exist.
    Field(String),
}

impl MarkAt {
    /// The JSON Pointer this mark writes.
    #[must_use]
    pub fn pointer(&self) -> String {
        match self {
            Self::Annotation(key) => pointer::annotation(key),
            Self::Field(p) => p.clone(),
        }
    }
}

impl std::fmt::Display for MarkAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Annotation(key) => write!(f, "annotation {key}"),
            Self::Field(p) => write!(f, "field {p}"),
        }
    }
}

/// How a release treats a mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Restore {
    /// The release tests that the mark still holds the marked value and restores the prior
    /// value; if another writer changed it, the release is refused (the fence stays).
    Exact,
    /// The release restores the prior value only if the read shows the marked value; otherwise
    /// it leaves the other writer's value (e.g. `reconcile.fluxcd.io/requestedAt`).
    IfUnchanged,
}

impl Mark {
    /// Sets annotation `key` to `value` ([`Restore::Exact`], not exclusive).
    #[must_use]
    pub fn annotation(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            at: MarkAt::Annotation(key.into()),
            value: Value::String(value.into()),
            restore: Restore::Exact,
            exclusive: false,
            if_absent: false,
        }
    }

    /// Sets the field at JSON Pointer `pointer` to `value` ([`Restore::Exact`], not exclusive).
    #[must_use]
    pub fn field(pointer: impl Into<String>, value: Value) -> Self {
        Self {
            at: MarkAt::Field(pointer.into()),
            value,
            restore: Restore::Exact,
            exclusive: false,
            if_absent: false,
        }
    }

    /// The same mark with another restore policy.
    #[must_use]
    pub fn restore(mut self, restore: Restore) -> Self {
        self.restore = restore;
        self
    }

    /// The same mark, refusing the acquire when the object already holds the value.
    #[must_use]
    pub fn exclusive(mut self) -> Self {
        self.exclusive = true;
        self
    }

    /// The same mark, written only where the object holds no value ([`Mark::if_absent`]).
    #[must_use]
    pub fn if_absent(mut self) -> Self {
        self.if_absent = true;
        self
    }

    /// Checks the mark can be fenced without touching the fence's own annotations or metadata.
    pub(crate) fn validate(&self, keys: &AnnotationKeys) -> Result<(), FenceError> {
        let invalid = |why| {
            Err(FenceError::InvalidMark {
                at: self.at.to_string(),
                why,
            })
        };
        match &self.at {
            MarkAt::Annotation(key) => {
                if key.is_empty() {
                    return invalid("empty annotation key");
                }
                if keys.is_own(key) {
                    return invalid("the fence manages this annotation itself");
                }
                if !self.value.is_string() {
                    return invalid("annotation values are strings");
                }
            }
            MarkAt::Field(p) => {
                if !p.starts_with('/') || p.len() < 2 {
                    return invalid("a field pointer starts with / and names a field");
                }
                let top = p[1..].split('/').next().unwrap_or_default();
                if matches!(top, "metadata" | "apiVersion" | "kind" | "status") {
                    return invalid(
                        "field marks must lie outside metadata, apiVersion, kind, status",
                    );
                }
                if pointer::unescape_all(p).is_err() {
                    return invalid("malformed JSON Pointer");
                }
            }
        }
        Ok(())
    }
}

/// One mark as recorded in the prior annotation: what was written and what was there before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RecordedMark {
    /// Where it wrote.
    pub at: MarkAt,
    /// The value it wrote.
    pub value: Value,
    /// The value before the fence; `None` when the field or annotation was absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub prior: Option<Value>,
    /// How the release undoes it.
    pub restore: Restore,
}

/// The pause of a Flux object: the field a fence sets to `true` and `flux resume` sets back to
/// `false`.
pub(crate) const PAUSE_FIELD: &str = "/spec/suspend";

/// The pause of a Flux Operator object (`ResourceSet`, `FluxInstance`), which have no
/// `spec.suspend`: the annotation a fence sets to [`PAUSE_DISABLED`] and `flux-operator
/// resume` sets to `enabled` (its web UI removes it).
pub(crate) const PAUSE_ANNOTATION: &str = "fluxcd.controlplane.io/reconcile";

/// The value of `PAUSE_ANNOTATION` that pauses (compared in any case, as the operator does).
pub(crate) const PAUSE_DISABLED: &str = "disabled";

impl RecordedMark {
    /// Whether `found`, the value at this mark as read, is another writer's resume of the
    /// pause this mark set: the mark set `PAUSE_FIELD` to `true` and it now holds `false`
    /// (what `flux resume` writes) or is gone (Flux Operator's resume removes the field); or
    /// the mark set `PAUSE_ANNOTATION` to `disabled` and it is gone or holds a value that
    /// does not pause (`enabled`, what `flux-operator resume` writes). Any other value there is
    /// not a resume.
    #[must_use]
    pub(crate) fn resumed_by(&self, found: Option<&Value>) -> bool {
        if self.at == MarkAt::Annotation(PAUSE_ANNOTATION.into())
            && self.value == Value::String(PAUSE_DISABLED.into())
        {
            return match found {
                None => true,
                Some(Value::String(v)) => !v.eq_ignore_ascii_case(PAUSE_DISABLED),
                Some(_) => false,
            };
        }
        self.at == MarkAt::Field(PAUSE_FIELD.into())
            && self.value == Value::Bool(true)
            && matches!(found, None | Some(Value::Bool(false)))
    }
}

/// The content of the prior annotation (`<prefix>/prior`), compact JSON:
/// `{"since":"2026-11-30T12:00:00Z","marks":[{"at":{"field":"/spec/suspend"},"value":true,
/// "prior":false,"restore":"exact"}]}`.
///
/// `since` is the fencer's clock at acquire time; fence discovery reports ages from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PriorRecord {
    /// When the fence was taken.
    pub since: Timestamp,
    /// The marks, in the order they were applied.
    pub marks: Vec<RecordedMark>,
}

impl PriorRecord {
    /// Compact JSON for the annotation.
    ///
    /// # Errors
    /// [`FenceError::Json`] if a value cannot be encoded (not expected for JSON values).
    pub fn render(&self) -> Result<String, FenceError> {
        serde_json::to_string(self).map_err(|source| FenceError::Json {
            what: "prior annotation",
            source,
        })
    }

    /// Parses the annotation value.
    ///
    /// # Errors
    /// [`FenceError::Malformed`] for anything that is not a prior record.
    pub fn parse(text: &str) -> Result<Self, FenceError> {
        serde_json::from_str(text).map_err(|_| FenceError::malformed("prior annotation", text))
    }
}

/// Deserialises a present field (even `null`) as `Some`, so absent and `null` stay distinct.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prior_record_keeps_absent_and_null_distinct() {
        let rec = PriorRecord {
            since: "2026-11-30T12:00:00Z".parse().unwrap(),
            marks: vec![
                RecordedMark {
                    at: MarkAt::Field("/spec/a".into()),
                    value: json!(1),
                    prior: None,
                    restore: Restore::Exact,
                },
                RecordedMark {
                    at: MarkAt::Field("/spec/b".into()),
                    value: json!(1),
                    prior: Some(Value::Null),
                    restore: Restore::IfUnchanged,
                },
                RecordedMark {
                    at: MarkAt::Annotation("x/y".into()),
                    value: json!("v"),
                    prior: Some(json!("old")),
                    restore: Restore::Exact,
                },
            ],
        };
        let text = rec.render().unwrap();
        assert!(!text.contains('\n'));
        assert_eq!(PriorRecord::parse(&text).unwrap(), rec);
        assert!(PriorRecord::parse("{not json").is_err());
        assert!(PriorRecord::parse("{}").is_err());
    }

    #[test]
    fn marks_on_fence_keys_metadata_or_status_are_invalid() {
        let keys = AnnotationKeys::default();
        assert!(
            Mark::annotation(keys.owner.clone(), "x")
                .validate(&keys)
                .is_err()
        );
        assert!(
            Mark::field("/metadata/labels", json!({}))
                .validate(&keys)
                .is_err()
        );
        assert!(Mark::field("/status/x", json!(1)).validate(&keys).is_err());
        assert!(
            Mark::field("spec/suspend", json!(true))
                .validate(&keys)
                .is_err()
        );
        assert!(
            Mark::field("/spec/a~2", json!(true))
                .validate(&keys)
                .is_err()
        );
        assert!(
            Mark {
                value: json!(1),
                ..Mark::annotation("a", "")
            }
            .validate(&keys)
            .is_err()
        );
        assert!(
            Mark::field("/spec/suspend", json!(true))
                .validate(&keys)
                .is_ok()
        );
        assert!(
            Mark::annotation("reconcile.fluxcd.io/requestedAt", "n")
                .validate(&keys)
                .is_ok()
        );
    }
}
