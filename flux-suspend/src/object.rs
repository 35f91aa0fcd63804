//! A reference to one Flux (or any) object, and reading it as the judge needs it.

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use crate::flux;
use crate::judge::{Read, Seen};

/// A namespaced object of a given kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    pub resource: ApiResource,
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    /// A Flux Kustomization (`kustomize.toolkit.fluxcd.io/v1`).
    #[must_use]
    pub fn kustomization(namespace: &str, name: &str) -> Self {
        Self::new(kustomization_resource(), namespace, name)
    }

    /// A Flux `HelmRelease` (`helm.toolkit.fluxcd.io/v2`).
    #[must_use]
    pub fn helm_release(namespace: &str, name: &str) -> Self {
        Self::new(helmrelease_resource(), namespace, name)
    }

    #[must_use]
    pub fn new(resource: ApiResource, namespace: &str, name: &str) -> Self {
        Self {
            resource,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// The dynamic API for this object's kind and namespace.
    #[must_use]
    pub fn api(&self, client: &Client) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), &self.namespace, &self.resource)
    }

    /// Reads the object as JSON.
    pub async fn get_json(&self, client: &Client) -> Result<Value, kube::Error> {
        let obj = self.api(client).get(&self.name).await?;
        serde_json::to_value(&obj).map_err(kube::Error::SerdeError)
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.resource.kind, self.namespace, self.name)
    }
}

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
    match obj.get_json(client).await {
        Ok(v) => Read::Seen(seen(&v, owner_key)),
        Err(e) => {
            tracing::debug!(object = %obj, error = %e, "proof read failed");
            Read::Unreadable
        }
    }
}
