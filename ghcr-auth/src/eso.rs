//! The thin I/O layer of the External Secrets route: observe what exists (discovery for the
//! CRDs, the `PushSecret`, each consumer's `ExternalSecret`, the staging Secrets), request a sync
//! by the `force-sync` annotation with a fresh nonce, read the sync status and the target
//! Secrets back. Decisions are in [`crate::fanout`].
//!
//! What ESO does with the annotation (v0.16.2, read in its source): `ExternalSecret` and
//! `PushSecret` reconcilers refresh whenever `status.syncedResourceVersion` differs from
//! `<generation>-<hash of annotations and labels>` (`pkg/controllers/util.GetResourceVersion`,
//! `shouldRefresh` in `pkg/controllers/{externalsecret,pushsecret}`), and record that value
//! with `Ready=True` after a successful sync. ESO's documentation names the annotation
//! `force-sync` (`kubectl annotate es my-es force-sync=$(date +%s) --overwrite`); its key is a
//! convention, its changed value is what triggers the refresh. The value written here is a
//! random nonce, never credential material.

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch};
use serde_json::{Value, json};
use tracing::debug;

use crate::error::GhcrError;
use crate::fanout::{ExternalView, Observed, PushView, Route, SyncStatus};
use crate::plan::SecretTarget;
use crate::reassert::WriteGate;
use crate::source::MAX_REQUEST_ATTEMPTS;

/// The annotation that asks ESO to sync now; its value is a fresh nonce per run.
pub const FORCE_SYNC: &str = "force-sync";
/// ESO's API group.
pub const GROUP: &str = "external-secrets.io";
/// The `ExternalSecret` version used.
pub const EXTERNAL_SECRET_VERSION: &str = "v1";
/// The `PushSecret` version used.
pub const PUSH_SECRET_VERSION: &str = "v1alpha1";

/// `ExternalSecret` (`external-secrets.io/v1`).
#[must_use]
pub fn external_secret_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk(GROUP, EXTERNAL_SECRET_VERSION, "ExternalSecret");
    ApiResource::from_gvk_with_plural(&gvk, "externalsecrets")
}

/// `PushSecret` (`external-secrets.io/v1alpha1`).
#[must_use]
pub fn push_secret_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk(GROUP, PUSH_SECRET_VERSION, "PushSecret");
    ApiResource::from_gvk_with_plural(&gvk, "pushsecrets")
}

fn api(client: &Client, res: &ApiResource, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, res)
}

fn kube_err(verb: &'static str, what: String, source: kube::Error) -> GhcrError {
    GhcrError::Kube { verb, what, source }
}

/// Whether the API server serves `plural` in `external-secrets.io/<version>` (discovery,
/// which every authenticated identity may read).
///
/// # Errors
/// [`GhcrError::Kube`] for a discovery failure other than 404.
pub async fn served(client: &Client, version: &str, plural: &str) -> Result<bool, GhcrError> {
    let gv = format!("{GROUP}/{version}");
    match client.list_api_group_resources(&gv).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == plural)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(kube_err("discovering", gv, e)),
    }
}

/// Reads everything [`crate::fanout::decide`] needs, before any write. `externals` are the
/// consumers' `ExternalSecrets` (`namespace/name`).
///
/// # Errors
/// [`GhcrError::Kube`] when a read fails for another reason than 404.
pub async fn observe(
    client: &Client,
    route: &Route,
    externals: &[SecretTarget],
) -> Result<Observed, GhcrError> {
    let mut observed = Observed::default();
    for key in &route.keys {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &key.secret.namespace);
        let found = secrets
            .get_metadata_opt(&key.secret.name)
            .await
            .map_err(|e| kube_err("reading", format!("Secret {}", key.secret), e))?;
        observed.staging.push((key.clone(), found.is_some()));
    }
    let Some(eso) = &route.eso else {
        return Ok(observed);
    };
    observed.external_secret_crd =
        served(client, EXTERNAL_SECRET_VERSION, "externalsecrets").await?;
    observed.push_secret_crd = served(client, PUSH_SECRET_VERSION, "pushsecrets").await?;
    if observed.push_secret_crd {
        let ps = &eso.push_secret;
        let obj = api(client, &push_secret_resource(), &ps.namespace)
            .get_opt(&ps.name)
            .await
            .map_err(|e| kube_err("reading", format!("PushSecret {ps}"), e))?;
        observed.push = obj.map(|o| push_view(&o.data));
    }
    if observed.external_secret_crd {
        for es in externals {
            let obj = api(client, &external_secret_resource(), &es.namespace)
                .get_opt(&es.name)
                .await
                .map_err(|e| kube_err("reading", format!("ExternalSecret {es}"), e))?;
            let view = obj.map(|o| ExternalView {
                created_once: o.data.pointer("/spec/refreshPolicy") == Some(&json!("CreatedOnce")),
            });
            observed.externals.push((es.clone(), view));
        }
    }
    Ok(observed)
}

/// What a `PushSecret` reads: `spec.selector.secret.name` and `spec.data[].match.secretKey`.
#[must_use]
pub fn push_view(data: &Value) -> PushView {
    let keys = data
        .pointer("/spec/data")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|d| {
                    d.pointer("/match/secretKey")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default();
    PushView {
        source_secret: data
            .pointer("/spec/selector/secret/name")
            .and_then(Value::as_str)
            .map(str::to_string),
        keys,
    }
}

/// The sync status of an ESO object.
#[must_use]
pub fn sync_status(obj: &DynamicObject) -> SyncStatus {
    let ready = obj
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    SyncStatus {
        generation: obj.metadata.generation.unwrap_or_default(),
        synced_resource_version: text(obj.data.pointer("/status/syncedResourceVersion")),
        ready: text(ready.and_then(|c| c.get("status"))),
        reason: text(ready.and_then(|c| c.get("reason"))),
    }
}

/// The name of an `ExternalSecret`'s target Secret: `spec.target.name`, else its own name.
#[must_use]
pub fn target_name(obj: &DynamicObject) -> String {
    obj.data
        .pointer("/spec/target/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map_or_else(
            || obj.metadata.name.clone().unwrap_or_default(),
            str::to_string,
        )
}

/// The result of a force-sync request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a force-sync that was not written is a value"]
#[non_exhaustive]
pub enum ForceOutcome {
    /// The annotation holds the nonce; `before` is the `syncedResourceVersion` read before.
    Requested {
        /// `status.syncedResourceVersion` before the request.
        before: Option<String>,
    },
    /// The object does not exist (deleted since it was observed).
    NotFound,
    /// Forbidden for our identity.
    Forbidden,
    /// It moved on every attempt (each a CAS on a fresh read).
    Moved,
}

/// The JSON Patch of a force-sync request: `test` uid and resourceVersion, then set
/// [`FORCE_SYNC`] to `nonce`. Pure.
#[must_use]
pub fn force_sync_patch(obj: &DynamicObject, nonce: &str) -> json_patch::Patch {
    crate::source::annotation_patch(obj, FORCE_SYNC, nonce)
}

/// Sets [`FORCE_SYNC`] = `nonce` on the object by a CAS patch on a fresh read (re-read and
/// tried again, at most [`MAX_REQUEST_ATTEMPTS`], when ESO's status writes moved it), `gate`
/// before every patch.
///
/// # Errors
/// [`GhcrError::Gate`] when the gate refuses; [`GhcrError::Kube`] for other API failures.
pub async fn force_sync(
    client: &Client,
    gate: &dyn WriteGate,
    res: &ApiResource,
    target: &SecretTarget,
    nonce: &str,
) -> Result<ForceOutcome, GhcrError> {
    let api = api(client, res, &target.namespace);
    let what = || format!("{} {target}", res.kind);
    for _ in 0..MAX_REQUEST_ATTEMPTS {
        let obj = match api.get_opt(&target.name).await {
            Ok(Some(o)) => o,
            Ok(None) => return Ok(ForceOutcome::NotFound),
            Err(kube::Error::Api(s)) if s.code == 403 => return Ok(ForceOutcome::Forbidden),
            Err(e) => return Err(kube_err("reading", what(), e)),
        };
        let before = sync_status(&obj).synced_resource_version;
        let patch = Patch::Json::<()>(force_sync_patch(&obj, nonce));
        gate.check().await.map_err(|source| GhcrError::Gate {
            namespace: target.namespace.clone(),
            name: target.name.clone(),
            source,
        })?;
        match api
            .patch(&target.name, &flux_fence::api::patch_params(), &patch)
            .await
        {
            Ok(_) => return Ok(ForceOutcome::Requested { before }),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
                debug!(target = %what(), "moved; re-reading");
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(ForceOutcome::NotFound),
            Err(kube::Error::Api(s)) if s.code == 403 => return Ok(ForceOutcome::Forbidden),
            Err(e) => return Err(kube_err("patching", what(), e)),
        }
    }
    Ok(ForceOutcome::Moved)
}

/// Reads an ESO object (`None`: gone).
///
/// # Errors
/// [`GhcrError::Kube`] when the read fails for another reason than 404.
pub async fn read(
    client: &Client,
    res: &ApiResource,
    target: &SecretTarget,
) -> Result<Option<DynamicObject>, GhcrError> {
    api(client, res, &target.namespace)
        .get_opt(&target.name)
        .await
        .map_err(|e| kube_err("reading", format!("{} {target}", res.kind), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(data: Value) -> DynamicObject {
        let mut o = DynamicObject::new("x", &external_secret_resource()).within("apps");
        o.metadata.generation = Some(2);
        o.metadata.uid = Some("u".into());
        o.metadata.resource_version = Some("9".into());
        o.data = data;
        o
    }

    #[test]
    fn eso_fanout_status_target_and_push_source_are_read_from_the_object() {
        let o = obj(json!({
            "spec": { "target": { "name": "ghcr-pull" } },
            "status": {
                "syncedResourceVersion": "2-abc",
                "conditions": [{ "type": "Ready", "status": "False", "reason": "SecretSyncedError" }],
            },
        }));
        let s = sync_status(&o);
        assert_eq!(s.generation, 2);
        assert_eq!(s.synced_resource_version.as_deref(), Some("2-abc"));
        assert_eq!(s.ready.as_deref(), Some("False"));
        assert_eq!(s.reason.as_deref(), Some("SecretSyncedError"));
        assert_eq!(target_name(&o), "ghcr-pull");
        assert_eq!(target_name(&obj(json!({ "spec": {} }))), "x");
        let ps = push_view(&json!({ "spec": {
            "selector": { "secret": { "name": "variables-base" } },
            "data": [{ "match": { "secretKey": "ghcr_dockerconfigjson" } }, { "match": {} }],
        }}));
        assert_eq!(ps.source_secret.as_deref(), Some("variables-base"));
        assert_eq!(ps.keys, ["ghcr_dockerconfigjson", ""]);
    }

    #[test]
    fn eso_fanout_the_force_sync_patch_is_a_cas_that_sets_only_the_nonce() {
        let p = serde_json::to_value(force_sync_patch(&obj(json!({})), "ghcr-auth-n1")).unwrap();
        assert_eq!(p[0]["path"], "/metadata/uid");
        assert_eq!(p[1]["path"], "/metadata/resourceVersion");
        assert_eq!(p[1]["value"], "9");
        assert_eq!(
            p[2],
            json!({ "op": "add", "path": "/metadata/annotations", "value": {} })
        );
        assert_eq!(
            p[3],
            json!({ "op": "add", "path": "/metadata/annotations/force-sync", "value": "ghcr-auth-n1" })
        );
    }
}
