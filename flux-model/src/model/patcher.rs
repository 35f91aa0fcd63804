//! Status writes the way fluxcd/pkg `runtime/patch.SerialPatcher` makes them: relative to the
//! previous write of the run (the first relative to the object as read), conditions merged into
//! a fresh read under a resourceVersion lock, every other status field as a plain JSON merge
//! patch with no precondition.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::STATUS_MANAGER;
use super::status::merge_patch;

/// Attempts of the conditions patch on 409, as the Flux helper's backoff (5 steps).
const CONDITION_ATTEMPTS: usize = 5;

#[derive(Debug)]
pub(crate) struct StatusPatcher {
    api: Api<DynamicObject>,
    name: String,
    baseline: Value,
    /// resourceVersion after the last write (or of the read).
    pub resource_version: String,
}

impl StatusPatcher {
    pub(crate) fn new(api: Api<DynamicObject>, obj: &DynamicObject) -> Self {
        Self {
            api,
            name: obj.metadata.name.clone().unwrap_or_default(),
            baseline: status_of(obj),
            resource_version: obj.metadata.resource_version.clone().unwrap_or_default(),
        }
    }

    /// The status as last written (or read).
    pub(crate) fn baseline(&self) -> &Value {
        &self.baseline
    }

    /// Writes the difference between the baseline and `current`; nothing when equal.
    pub(crate) async fn write(&mut self, current: &Value) -> anyhow::Result<()> {
        let pp = PatchParams {
            field_manager: Some(STATUS_MANAGER.into()),
            ..PatchParams::default()
        };
        // All parts are attempted and the first error returned, as the Flux helper aggregates
        // them (runtime `patch/patch.go:223-235`): a failed conditions part does not stop the
        // rest of status, `lastHandledReconcileAt` included.
        let before_conds = conditions(&self.baseline);
        let after_conds = conditions(current);
        let mut first_err = None;
        if before_conds != after_conds
            && let Err(e) = self
                .write_conditions(&before_conds, &after_conds, &pp)
                .await
        {
            first_err = Some(e);
        }
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.remove("conditions");
            }
            v
        };
        if let Some(diff) = merge_patch(&strip(&self.baseline), &strip(current)) {
            match self
                .api
                .patch_status(&self.name, &pp, &Patch::Merge(json!({ "status": diff })))
                .await
            {
                Ok(out) => {
                    self.resource_version = out.metadata.resource_version.unwrap_or_default();
                }
                Err(e) => {
                    first_err.get_or_insert(e.into());
                }
            }
        }
        // The SerialPatcher moves its baseline only after a patch without error.
        if let Some(e) = first_err {
            return Err(e);
        }
        self.baseline = current.clone();
        Ok(())
    }

    async fn write_conditions(
        &mut self,
        before: &[Value],
        after: &[Value],
        pp: &PatchParams,
    ) -> anyhow::Result<()> {
        let mut last_err = None;
        for _ in 0..CONDITION_ATTEMPTS {
            let latest = self.api.get_status(&self.name).await?;
            let merged = apply_condition_diff(&conditions(&status_of(&latest)), before, after);
            let body = json!({
                "metadata": { "resourceVersion": latest.metadata.resource_version },
                "status": { "conditions": merged },
            });
            match self
                .api
                .patch_status(&self.name, pp, &Patch::Merge(body))
                .await
            {
                Ok(out) => {
                    self.resource_version = out.metadata.resource_version.unwrap_or_default();
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 => last_err = Some(kube::Error::Api(s)),
                Err(e) => return Err(e.into()),
            }
        }
        Err(last_err.map_or_else(
            || anyhow::anyhow!("conditions patch conflicted"),
            Into::into,
        ))
    }
}

/// The conditions of a status value (empty when none).
pub(crate) fn conditions(status: &Value) -> Vec<Value> {
    status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The `status` of an object (an empty object when none).
pub(crate) fn status_of(obj: &DynamicObject) -> Value {
    obj.data
        .get("status")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}))
}

/// Applies the change `before -> after` (per condition type) onto `latest`.
fn apply_condition_diff(latest: &[Value], before: &[Value], after: &[Value]) -> Vec<Value> {
    let type_of = |c: &Value| c.get("type").and_then(Value::as_str).map(str::to_string);
    let mut out: Vec<Value> = latest.to_vec();
    for a in after {
        let t = type_of(a);
        if before.iter().any(|b| b == a) {
            continue;
        }
        match out.iter().position(|c| type_of(c) == t) {
            Some(i) => out[i] = a.clone(),
            None => out.push(a.clone()),
        }
    }
    for b in before {
        let t = type_of(b);
        if !after.iter().any(|a| type_of(a) == t) {
            out.retain(|c| type_of(c) != t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condition_diff_keeps_foreign_conditions_and_applies_ours() {
        let latest = vec![
            json!({ "type": "Ready", "status": "True" }),
            json!({ "type": "Foreign", "status": "True" }),
        ];
        let before = vec![
            json!({ "type": "Ready", "status": "True" }),
            json!({ "type": "Reconciling", "status": "True" }),
        ];
        let after = vec![json!({ "type": "Ready", "status": "Unknown" })];
        let merged = apply_condition_diff(&latest, &before, &after);
        assert_eq!(
            merged,
            vec![
                json!({ "type": "Ready", "status": "Unknown" }),
                json!({ "type": "Foreign", "status": "True" })
            ]
        );
    }
}
