//! `fences release --keep-moved`: settle a fence whose release is withheld because another
//! writer changed an exact mark since — typically a person's `flux resume` setting
//! `spec.suspend` to false in the middle of a pause. The person's value is kept as found (and
//! tested, so a further change refuses); every other mark is restored as a plain release
//! would (e.g. `kustomize.toolkit.fluxcd.io/reconcile` back to its prior value), and the fence
//! annotations and label go. One JSON Patch, a CAS on the uid, the owner and each value.

use flux_fence::decide::annotation;
use flux_fence::decide::held_from_annotations;
use flux_fence::{AnnotationKeys, Holder, pointer};
use serde_json::{Value, json};

/// What the settling patch keeps and writes, for the evidence lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Settle {
    /// The JSON Patch.
    pub patch: Value,
    /// The marks left as another writer set them (JSON Pointers).
    pub kept: Vec<String>,
    /// The marks restored to their prior value or removed (JSON Pointers).
    pub restored: Vec<String>,
}

/// The settling patch of `holder`'s fence on `obj` as read; `Err` (one line) when the object
/// carries no fence of `holder` or no mark moved (then a plain `fences release` is right).
pub fn settle(obj: &Value, keys: &AnnotationKeys, holder: &Holder) -> Result<Settle, String> {
    let (held, _) = held_from_annotations(obj, keys).map_err(|e| e.to_string())?;
    if &held.owner.holder != holder {
        return Err(format!("fenced by {}, not {holder}", held.owner.holder));
    }
    let owner = held.owner.to_string();
    let mut ops = vec![
        json!({ "op": "test", "path": "/metadata/uid", "value": held.uid }),
        json!({ "op": "test", "path": pointer::annotation(&keys.owner), "value": owner }),
    ];
    let (mut kept, mut restored) = (Vec::new(), Vec::new());
    for m in held.marks.iter().rev() {
        let p = m.at.pointer();
        let found = obj.pointer(&p);
        if found == Some(&m.value) {
            ops.push(json!({ "op": "test", "path": p, "value": m.value }));
            ops.push(match &m.prior {
                None => json!({ "op": "remove", "path": p }),
                Some(v) => json!({ "op": "replace", "path": p, "value": v }),
            });
            restored.push(p);
        } else {
            // Another writer's value stays; a change after this read refuses the patch.
            ops.push(match found {
                Some(v) => json!({ "op": "test", "path": p, "value": v }),
                None => json!({ "op": "test", "path": p, "value": null }),
            });
            kept.push(p);
        }
    }
    if kept.is_empty() {
        return Err("no mark moved: `fences release` without --keep-moved releases it".into());
    }
    for key in [&keys.prior, &keys.reason] {
        if let Some(v) = annotation(obj, key) {
            let p = pointer::annotation(key);
            ops.push(json!({ "op": "test", "path": p, "value": v }));
            ops.push(json!({ "op": "remove", "path": p }));
        }
    }
    ops.push(json!({ "op": "remove", "path": pointer::annotation(&keys.owner) }));
    if flux_fence::decide::label(obj, &keys.fenced_label).is_some() {
        ops.push(json!({ "op": "remove", "path": pointer::label(&keys.fenced_label) }));
    }
    Ok(Settle {
        patch: Value::Array(ops),
        kept,
        restored,
    })
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    /// A target fenced by `h1` (suspend and reconcile: disabled), then `spec.suspend` set to
    /// `suspend` by someone else.
    fn fenced(suspend: bool) -> Value {
        let prior = json!({
            "since": "2026-12-01T00:00:00Z",
            "marks": [
                { "at": { "field": "/spec/suspend" }, "value": true, "prior": false, "restore": "exact" },
                { "at": { "annotation": "kustomize.toolkit.fluxcd.io/reconcile" }, "value": "disabled", "restore": "exact" }
            ]
        });
        json!({
            "metadata": {
                "uid": "u1",
                "annotations": {
                    "flux-handoff.io/owner": "h1;3",
                    "flux-handoff.io/prior": prior.to_string(),
                    "kustomize.toolkit.fluxcd.io/reconcile": "disabled"
                },
                "labels": { "flux-handoff.io/fenced": "true" }
            },
            "spec": { "suspend": suspend }
        })
    }

    #[test]
    fn next_step_withheld_after_a_persons_flux_resume_keeps_their_suspend_restores_the_rest() {
        let keys = AnnotationKeys::default();
        let h1 = Holder::from_str("h1").unwrap();
        let obj = fenced(false);
        let s = match settle(&obj, &keys, &h1) {
            Ok(s) => s,
            // The prior record's format is the library's: show it if this test's guess is off.
            Err(e) => panic!(
                "{e}: {}",
                obj["metadata"]["annotations"]["flux-handoff.io/prior"]
            ),
        };
        assert_eq!(s.kept, ["/spec/suspend"]);
        assert_eq!(
            s.restored,
            ["/metadata/annotations/kustomize.toolkit.fluxcd.io~1reconcile"]
        );
        let ops = s.patch.as_array().unwrap();
        assert!(ops.contains(&json!({ "op": "test", "path": "/spec/suspend", "value": false })));
        assert!(
            !ops.iter()
                .any(|o| o["path"] == "/spec/suspend" && o["op"] != "test")
        );
        assert!(ops.contains(
            &json!({ "op": "remove", "path": "/metadata/annotations/flux-handoff.io~1owner" })
        ));
        assert!(ops.contains(
            &json!({ "op": "remove", "path": "/metadata/labels/flux-handoff.io~1fenced" })
        ));
        // Nothing moved: a plain release is right. Another holder: refused.
        assert!(
            settle(&fenced(true), &keys, &h1)
                .unwrap_err()
                .contains("no mark moved")
        );
        let h2 = Holder::from_str("h2").unwrap();
        assert_eq!(
            settle(&obj, &keys, &h2).unwrap_err(),
            "fenced by h1, not h2"
        );
    }
}
