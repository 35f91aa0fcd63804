//! Fixture builders for Flux objects that read like sentences:
//! `kustomization("infrastructure").managed_by("flux-system").suspended()`.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

/// API resource of Flux Kustomizations (`kustomize.toolkit.fluxcd.io/v1`).
#[must_use]
pub fn kustomization_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    )
}

/// API resource of Flux `HelmReleases` (`helm.toolkit.fluxcd.io/v2`).
#[must_use]
pub fn helmrelease_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("helm.toolkit.fluxcd.io", "v2", "HelmRelease"),
        "helmreleases",
    )
}

/// API resource of Flux `OCIRepositories` (`source.toolkit.fluxcd.io/v1`).
#[must_use]
pub fn ocirepository_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", "OCIRepository"),
        "ocirepositories",
    )
}

/// API resource of Flux Operator `ResourceSets` (`fluxcd.controlplane.io/v1`).
#[must_use]
pub fn resourceset_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fluxcd.controlplane.io", "v1", "ResourceSet"),
        "resourcesets",
    )
}

/// API resource of Flux Operator `FluxInstances` (`fluxcd.controlplane.io/v1`).
#[must_use]
pub fn fluxinstance_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fluxcd.controlplane.io", "v1", "FluxInstance"),
        "fluxinstances",
    )
}

/// A Flux Operator object of `resource` named `name` in `ns`, with `spec` (neither kind has a
/// `spec.suspend`: `fluxcd.controlplane.io/reconcile: disabled` pauses it).
#[must_use]
pub fn operator_object(
    resource: &ApiResource,
    ns: &str,
    name: &str,
    spec: &Value,
) -> DynamicObject {
    let mut o = DynamicObject::new(name, resource).within(ns);
    o.data = json!({ "spec": spec });
    o
}

/// Starts a Kustomization fixture.
#[must_use]
pub fn kustomization(name: &str) -> Kustomization {
    Kustomization {
        name: name.to_string(),
        labels: serde_json::Map::new(),
        annotations: serde_json::Map::new(),
        suspend: false,
    }
}

/// A Kustomization under construction.
#[derive(Debug, Clone)]
pub struct Kustomization {
    name: String,
    labels: serde_json::Map<String, Value>,
    annotations: serde_json::Map<String, Value>,
    suspend: bool,
}

impl Kustomization {
    /// Marks it as applied by parent Kustomization `parent` in namespace `ns`, the way
    /// kustomize-controller labels what it applies.
    #[must_use]
    pub fn managed_by(mut self, parent: &str, ns: &str) -> Self {
        self.labels
            .insert("kustomize.toolkit.fluxcd.io/name".into(), json!(parent));
        self.labels
            .insert("kustomize.toolkit.fluxcd.io/namespace".into(), json!(ns));
        self
    }

    #[must_use]
    pub fn suspended(mut self) -> Self {
        self.suspend = true;
        self
    }

    #[must_use]
    pub fn annotated(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.into(), json!(value));
        self
    }

    /// The object to create in namespace `ns`.
    #[must_use]
    pub fn build(&self, ns: &str) -> DynamicObject {
        let mut metadata = json!({ "name": self.name, "namespace": ns });
        if !self.labels.is_empty() {
            metadata["labels"] = Value::Object(self.labels.clone());
        }
        if !self.annotations.is_empty() {
            metadata["annotations"] = Value::Object(self.annotations.clone());
        }
        serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": metadata,
            "spec": {
                "interval": "10m",
                "path": format!("./{}", self.name),
                "prune": true,
                "suspend": self.suspend,
                "sourceRef": { "kind": "GitRepository", "name": "flux-system" },
            },
        }))
        .expect("a Kustomization fixture is a valid DynamicObject")
    }
}
