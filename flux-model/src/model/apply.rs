//! A parent applying its children (facts 6 and 7): read at the start of the apply phase, skip
//! children annotated `kustomize.toolkit.fluxcd.io/reconcile: disabled` as read, take over the
//! fields of the managers Flux cleans up, then server-side apply with force as
//! `kustomize-controller`.

use std::sync::Arc;

use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};

use super::events::ModelEvent;
use super::{
    FIELD_MANAGER, Inner, PARENT_NAME_LABEL, PARENT_NAMESPACE_LABEL, RECONCILE_ANNOTATION,
    split_key,
};

/// Managers (name **prefix**, operation) whose main-resource fields kustomize-controller takes
/// over before applying (`kustomization_controller.go`, `applyOpts.Cleanup.FieldManagers`;
/// matched by prefix in fluxcd/pkg/ssa `patch.go` `matchFieldManager`, so `kubectl` also takes
/// `kubectl-patch`, `kubectl-edit`, `kubectl-annotate`).
const TAKEN_OVER: [(&str, &str); 4] = [
    ("kubectl", "Apply"),
    ("kubectl", "Update"),
    ("before-first-apply", "Update"),
    (FIELD_MANAGER, "Update"),
];

/// Attempts of the managedFields takeover when other writers keep moving the child.
const TAKEOVER_ATTEMPTS: usize = 5;

/// A child manifest with the child as the parent read it at the start of its apply phase.
#[derive(Debug)]
pub(crate) struct ChildPlan {
    key: String,
    manifest: Value,
    existing: Option<DynamicObject>,
}

/// Reads every child the parent's Git path declares.
pub(crate) async fn read_children(
    inner: &Arc<Inner>,
    parent_key: &str,
) -> anyhow::Result<Vec<ChildPlan>> {
    let (parent_ns, parent_name) = split_key(parent_key);
    let manifests = inner
        .knobs()
        .git
        .get(parent_key)
        .cloned()
        .unwrap_or_default();
    let mut plans = Vec::with_capacity(manifests.len());
    for mut manifest in manifests {
        let name = manifest["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let ns = manifest["metadata"]["namespace"]
            .as_str()
            .unwrap_or(parent_ns)
            .to_string();
        manifest["metadata"]["namespace"] = json!(ns);
        let labels = manifest["metadata"]
            .as_object_mut()
            .map(|m| m.entry("labels").or_insert_with(|| json!({})))
            .expect("a manifest has metadata");
        labels[PARENT_NAME_LABEL] = json!(parent_name);
        labels[PARENT_NAMESPACE_LABEL] = json!(parent_ns);
        let existing = inner.kustomizations(&ns).get_opt(&name).await?;
        plans.push(ChildPlan {
            key: format!("{ns}/{name}"),
            manifest,
            existing,
        });
    }
    Ok(plans)
}

/// Applies the children as read, skipping the excluded ones.
pub(crate) async fn apply_children(
    inner: &Arc<Inner>,
    parent_key: &str,
    plans: Vec<ChildPlan>,
) -> anyhow::Result<()> {
    for plan in plans {
        let (ns, name) = split_key(&plan.key);
        let excluded = plan
            .existing
            .as_ref()
            .and_then(|o| o.metadata.annotations.as_ref())
            .and_then(|a| a.get(RECONCILE_ANNOTATION))
            .is_some_and(|v| v == "disabled");
        if excluded {
            inner.events.push(ModelEvent::ChildSkipped {
                parent: parent_key.into(),
                child: plan.key.clone(),
            });
            continue;
        }
        let api = inner.kustomizations(ns);
        take_over_fields(&api, name).await?;
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(name, &pp, &Patch::Apply(&plan.manifest)).await?;
        inner.events.push(ModelEvent::ChildApplied {
            parent: parent_key.into(),
            child: plan.key.clone(),
        });
    }
    Ok(())
}

/// Moves the fields of the [`TAKEN_OVER`] managers to `kustomize-controller` (Apply), so the
/// next apply owns them and drops those Git no longer declares. Each attempt is guarded by the
/// resourceVersion it read; a lost race re-reads and decides again.
async fn take_over_fields(api: &kube::Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    for _ in 0..TAKEOVER_ATTEMPTS {
        let Some(current) = api.get_opt(name).await? else {
            return Ok(());
        };
        let Some(entries) = current.metadata.managed_fields.as_ref() else {
            return Ok(());
        };
        let raw: Vec<Value> = entries
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?;
        let Some(merged) = merged_managed_fields(&raw) else {
            return Ok(());
        };
        let patch = json!([
            { "op": "test", "path": "/metadata/resourceVersion",
              "value": current.metadata.resource_version },
            { "op": "replace", "path": "/metadata/managedFields", "value": merged },
        ]);
        let patch = Patch::Json::<()>(serde_json::from_value(patch)?);
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        match api.patch(name, &pp, &patch).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {}
            Err(e) => return Err(e.into()),
        }
    }
    anyhow::bail!("taking over field managers of {name}: lost the race {TAKEOVER_ATTEMPTS} times")
}

/// The managedFields with every taken-over main-resource entry merged into the
/// `kustomize-controller` Apply entry; `None` when there is nothing to take over.
pub(crate) fn merged_managed_fields(entries: &[Value]) -> Option<Vec<Value>> {
    let taken = |e: &Value| {
        let m = e["manager"].as_str().unwrap_or_default();
        let op = e["operation"].as_str().unwrap_or_default();
        e.get("subresource")
            .is_none_or(|s| s.as_str().unwrap_or_default().is_empty())
            && TAKEN_OVER
                .iter()
                .any(|(tm, to)| m.starts_with(tm) && *to == op)
    };
    if !entries.iter().any(taken) {
        return None;
    }
    let is_ours = |e: &Value| {
        e["manager"] == json!(FIELD_MANAGER)
            && e["operation"] == json!("Apply")
            && e.get("subresource")
                .is_none_or(|s| s.as_str().unwrap_or_default().is_empty())
    };
    let mut fields = Value::Object(Map::new());
    let mut template = None;
    let mut rest = Vec::new();
    for e in entries {
        if taken(e) || is_ours(e) {
            union(&mut fields, e.get("fieldsV1").unwrap_or(&Value::Null));
            template.get_or_insert_with(|| e.clone());
        } else {
            rest.push(e.clone());
        }
    }
    let mut ours = template.expect("at least one taken entry");
    ours["manager"] = json!(FIELD_MANAGER);
    ours["operation"] = json!("Apply");
    ours["fieldsV1"] = fields;
    if let Some(o) = ours.as_object_mut() {
        o.remove("subresource");
    }
    rest.push(ours);
    Some(rest)
}

/// Deep union of two fieldsV1 sets.
fn union(into: &mut Value, from: &Value) {
    let (Some(into), Some(from)) = (into.as_object_mut(), from.as_object()) else {
        return;
    };
    for (k, v) in from {
        let slot = into.entry(k.clone()).or_insert_with(|| json!({}));
        union(slot, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_fields_merge_into_controller_apply_entry_and_others_stay() {
        let entries = vec![
            json!({ "manager": "kustomize-controller", "operation": "Apply", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": { "f:path": {} } } }),
            json!({ "manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": { "f:prune": {} } } }),
            json!({ "manager": "flux-handoff", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": { "f:suspend": {} } } }),
        ];
        let merged = merged_managed_fields(&entries).unwrap();
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0]["manager"], json!("flux-handoff"));
        assert_eq!(
            merged[1]["fieldsV1"],
            json!({ "f:spec": { "f:path": {}, "f:prune": {} } })
        );
    }

    #[test]
    fn kubectl_prefixed_managers_are_taken_over_like_kubectl() {
        // Flux matches the cleaned-up managers by prefix (fluxcd/pkg/ssa patch.go,
        // matchFieldManager: strings.HasPrefix unless ExactMatch): `kubectl patch` writes as
        // `kubectl-patch`, `kubectl edit` as `kubectl-edit`.
        for manager in [
            "kubectl-patch",
            "kubectl-edit",
            "kubectl-annotate",
            "kubectl-client-side-apply",
        ] {
            let entries = vec![
                json!({ "manager": manager, "operation": "Update", "apiVersion": "v1",
                        "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": { "f:suspend": {} } } }),
            ];
            let merged = merged_managed_fields(&entries)
                .unwrap_or_else(|| panic!("{manager} was not taken over"));
            assert_eq!(merged.len(), 1);
            assert_eq!(merged[0]["manager"], json!(FIELD_MANAGER));
        }
        // A status entry is never taken over, whatever its manager.
        let status = vec![json!({ "manager": "kubectl-patch", "operation": "Update",
                                  "subresource": "status", "fieldsV1": {} })];
        assert!(merged_managed_fields(&status).is_none());
    }

    #[test]
    fn nothing_to_take_over_is_none() {
        let entries = vec![json!({ "manager": "other", "operation": "Update", "fieldsV1": {} })];
        assert!(merged_managed_fields(&entries).is_none());
    }
}
