//! JSON Pointer (RFC 6901) tokens. Annotation keys contain `/` (and may contain `~`), so every
//! pointer into the annotations map is built by [`annotation`], which escapes with [`escape`].

use crate::FenceError;

/// Escapes one reference token: `~` becomes `~0`, then `/` becomes `~1`.
#[must_use]
pub fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Reverses [`escape`].
///
/// # Errors
/// [`FenceError::Malformed`] for a `~` not followed by `0` or `1`.
pub(crate) fn unescape(token: &str) -> Result<String, FenceError> {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return Err(FenceError::malformed("JSON Pointer token", token)),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// Checks every token of a whole pointer unescapes.
pub(crate) fn unescape_all(pointer: &str) -> Result<(), FenceError> {
    pointer
        .split('/')
        .skip(1)
        .try_for_each(|t| unescape(t).map(drop))
}

/// The pointer to annotation `key`: `/metadata/annotations/<escaped key>`.
#[must_use]
pub fn annotation(key: &str) -> String {
    format!("{ANNOTATIONS}/{}", escape(key))
}

/// The pointer to the annotations map.
pub(crate) const ANNOTATIONS: &str = "/metadata/annotations";

/// The pointer to label `key`: `/metadata/labels/<escaped key>`.
#[must_use]
pub(crate) fn label(key: &str) -> String {
    format!("{LABELS}/{}", escape(key))
}

/// The pointer to the labels map.
pub(crate) const LABELS: &str = "/metadata/labels";

/// The parent of a pointer: `/spec/suspend` -> `/spec`, `/a` -> the empty pointer.
pub(crate) fn parent(pointer: &str) -> &str {
    pointer.rfind('/').map_or("", |i| &pointer[..i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn escapes_tilde_before_slash() {
        assert_eq!(escape("a/b~c"), "a~1b~0c");
        assert_eq!(escape("~1"), "~01");
        assert_eq!(unescape("~01").unwrap(), "~1");
        assert_eq!(
            annotation("flux-handoff.io/owner"),
            "/metadata/annotations/flux-handoff.io~1owner"
        );
        assert!(unescape("~2").is_err());
        assert!(unescape("a~").is_err());
        assert_eq!(parent("/spec/suspend"), "/spec");
        assert_eq!(parent("/spec"), "");
    }

    proptest! {
        #[test]
        fn escaping_round_trips_for_any_key(key in ".*") {
            let escaped = escape(&key);
            prop_assert!(!escaped.contains('/'));
            prop_assert_eq!(unescape(&escaped).unwrap(), key);
        }

        #[test]
        fn annotation_pointer_addresses_exactly_that_key(key in "[a-zA-Z0-9~/._-]{1,30}") {
            let mut doc = json!({ "metadata": { "annotations": {} } });
            let patch: json_patch::Patch = serde_json::from_value(json!([
                { "op": "add", "path": annotation(&key), "value": "v" },
            ])).unwrap();
            json_patch::patch(&mut doc, &patch).unwrap();
            prop_assert_eq!(doc["metadata"]["annotations"].as_object().unwrap().len(), 1);
            prop_assert_eq!(&doc["metadata"]["annotations"][key.as_str()], &json!("v"));
            prop_assert_eq!(doc.pointer(&annotation(&key)), Some(&json!("v")));
        }
    }
}
