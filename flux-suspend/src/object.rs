//! Objects of the chain ([`flux_fence::ObjectRef`]) and reading them as the judge needs them.

use flux_fence::ObjectRef;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use crate::flux;
use crate::judge::{Read, Seen};

/// `kustomize.toolkit.fluxcd.io/v1` Kustomization.
#[must_use]
pub fn kustomization_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    )
}

/// `helm.toolkit.fluxcd.io/v2` `HelmRelease`.
#[must_use]
pub fn helmrelease_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("helm.toolkit.fluxcd.io", "v2", "HelmRelease"),
        "helmreleases",
    )
}

/// A Kustomization `namespace/name`.
#[must_use]
pub fn kustomization(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef::new(kustomization_resource(), namespace, name)
}

/// A `HelmRelease` `namespace/name`.
#[must_use]
pub fn helm_release(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef::new(helmrelease_resource(), namespace, name)
}

/// The dynamic API for `obj`'s kind and namespace.
#[must_use]
pub fn api(client: &Client, obj: &ObjectRef) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), &obj.namespace, &obj.resource)
}

/// Reads `obj` as JSON.
pub async fn get_json(client: &Client, obj: &ObjectRef) -> Result<Value, kube::Error> {
    let got = api(client, obj).get(&obj.name).await?;
    serde_json::to_value(&got).map_err(kube::Error::SerdeError)
}

/// Reduces a read object to what the judge looks at. Status is deliberately not read.
#[must_use]
pub fn seen(obj: &Value, owner_key: &str) -> Seen {
    let text = |p: &str| {
        obj.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Seen {
        uid: text("/metadata/uid"),
        resource_version: text("/metadata/resourceVersion"),
        owner: flux::annotation(obj, owner_key).map(str::to_string),
        suspended: flux::suspended(obj),
        reconcile_disabled: flux::annotation(obj, flux::RECONCILE_ANNOTATION)
            == Some(flux::RECONCILE_DISABLED),
    }
}

/// Reads one object for a proof pass; any failure is `Unreadable` (the judge counts it).
pub async fn read_for_proof(client: &Client, obj: &ObjectRef, owner_key: &str) -> Read {
    match get_json(client, obj).await {
        Ok(v) => Read::Seen(seen(&v, owner_key)),
        Err(e) => {
            tracing::debug!(object = %obj, error = %e, "proof read failed");
            Read::Unreadable
        }
    }
}
