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

/// `fluxcd.controlplane.io/v1` `ResourceSet` (Flux Operator), paused by its reconcile
/// annotation ([`flux::OPERATOR_RECONCILE_ANNOTATION`]).
#[must_use]
pub fn resourceset_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(flux::OPERATOR_GROUP, "v1", "ResourceSet"),
        "resourcesets",
    )
}

/// `fluxcd.controlplane.io/v1` `FluxInstance` (Flux Operator), paused by its reconcile
/// annotation ([`flux::OPERATOR_RECONCILE_ANNOTATION`]).
#[must_use]
pub fn fluxinstance_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(flux::OPERATOR_GROUP, "v1", "FluxInstance"),
        "fluxinstances",
    )
}

/// `apps/v1` Deployment: the kind of a replicas gate ([`crate::TargetSpec::scaled`]), fenced
/// by its replica count and never paused by a Flux mark.
#[must_use]
pub fn deployment_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps", "v1", "Deployment"),
        "deployments",
    )
}

/// A Deployment `namespace/name`.
#[must_use]
pub fn deployment(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef::new(deployment_resource(), namespace, name)
}

/// Whether `resource` is a Deployment (a replicas gate's kind).
#[must_use]
pub fn is_gate_kind(resource: &ApiResource) -> bool {
    resource.group == "apps" && resource.kind == "Deployment"
}

/// Whether `resource` is a Flux Operator kind (paused by an annotation, not `spec.suspend`).
#[must_use]
pub fn is_operator_kind(resource: &ApiResource) -> bool {
    resource.group == flux::OPERATOR_GROUP
}

/// The kinds a chain record's members are read as (each member by a GET of its own name, never
/// a list): Flux's own kinds, Flux Operator's, and the Deployments of replicas gates. Discovery by listing keeps to Flux's own
/// kinds, so a cluster without the operator's CRDs, or a role without them, lists as before.
#[must_use]
pub fn recorded_kinds() -> Vec<ApiResource> {
    vec![
        kustomization_resource(),
        helmrelease_resource(),
        resourceset_resource(),
        fluxinstance_resource(),
        deployment_resource(),
    ]
}

/// A `ResourceSet` `namespace/name`.
#[must_use]
pub fn resource_set(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef::new(resourceset_resource(), namespace, name)
}

/// A `FluxInstance` `namespace/name`.
#[must_use]
pub fn flux_instance(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef::new(fluxinstance_resource(), namespace, name)
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

/// The Flux object a pause of `obj` suspends as its parent, from its labels
/// ([`flux::owner_of`]): the Kustomization or `HelmRelease` that applies it. `None` when none
/// does, or when a `ResourceSet` generates it (the set is never suspended: the object is
/// excluded from its apply instead).
#[must_use]
pub fn parent_from_labels(obj: &Value) -> Option<ObjectRef> {
    let owner = flux::owner_of(obj)?;
    let at = &owner.at;
    match owner.kind {
        flux::OwnerKind::Kustomization => Some(kustomization(&at.namespace, &at.name)),
        flux::OwnerKind::HelmRelease => Some(helm_release(&at.namespace, &at.name)),
        _ => None,
    }
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
        operator: flux::is_operator_object(obj),
        // Excluded from every applier: its parent Kustomization's apply and, for an object a
        // ResourceSet generates, the set's (`fluxcd.controlplane.io/reconcile: disabled`).
        reconcile_disabled: flux::annotation(obj, flux::RECONCILE_ANNOTATION)
            == Some(flux::RECONCILE_DISABLED)
            && flux::set_skips(obj),
        replicas: obj.pointer("/spec/replicas").and_then(Value::as_i64),
        last_writer: other_writer(obj),
    }
}

/// The field manager of `obj`'s newest change when that change is another writer's: the
/// newest `metadata.managedFields` entry (by `time`; in a tie the one not on `status`) is a
/// write of the object itself (not its `status`, which a controller's reconcile writes) by a
/// manager that is not flux-handoff's. Made printable: at most 64 characters of
/// `[A-Za-z0-9._:/@+-]`, anything else as `?`.
#[must_use]
pub fn other_writer(obj: &Value) -> Option<String> {
    fn text<'a>(e: &'a Value, k: &str) -> &'a str {
        e.get(k).and_then(Value::as_str).unwrap_or_default()
    }
    let entries = obj.pointer("/metadata/managedFields")?.as_array()?;
    let newest = entries.iter().max_by_key(|e| {
        (
            text(e, "time").to_string(),
            text(e, "subresource") != "status",
        )
    })?;
    let manager = text(newest, "manager");
    if text(newest, "subresource") == "status" || manager == flux_fence::api::FIELD_MANAGER {
        return None;
    }
    let printable = |c: char| c.is_ascii_alphanumeric() || "._:/@+-".contains(c);
    Some(
        manager
            .chars()
            .take(64)
            .map(|c| if printable(c) { c } else { '?' })
            .collect(),
    )
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::other_writer;

    fn with(entries: &serde_json::Value) -> serde_json::Value {
        json!({ "metadata": { "managedFields": entries } })
    }

    #[test]
    fn other_writer_is_the_newest_write_of_the_object_by_someone_else() {
        let entry = |m: &str, t: &str, sub: Option<&str>| {
            let mut e = json!({ "manager": m, "operation": "Update", "time": t });
            if let Some(sub) = sub {
                e["subresource"] = json!(sub);
            }
            e
        };
        let (t1, t2) = ("2026-12-03T10:00:01Z", "2026-12-03T10:00:02Z");
        let table = [
            // A person's annotate after the controller's status write: named.
            (
                vec![
                    entry("kustomize-controller", t1, Some("status")),
                    entry("kubectl-annotate", t2, None),
                ],
                Some("kubectl-annotate"),
            ),
            // The controller's status write is the newest: a reconcile, not another writer.
            (
                vec![
                    entry("kubectl-annotate", t1, None),
                    entry("kustomize-controller", t2, Some("status")),
                ],
                None,
            ),
            // The same second: the write of the object itself is taken.
            (
                vec![
                    entry("kustomize-controller", t2, Some("status")),
                    entry("kubectl-edit", t2, None),
                ],
                Some("kubectl-edit"),
            ),
            // Our own fence write is not another writer.
            (vec![entry("flux-handoff", t2, None)], None),
            // Unprintable bytes never reach a terminal or a log.
            (
                vec![entry("evil\u{1b}[2Jname\n", t2, None)],
                Some("evil??2Jname?"),
            ),
            (vec![], None),
        ];
        for (entries, want) in table {
            assert_eq!(
                other_writer(&with(&json!(entries))).as_deref(),
                want,
                "{entries:?}"
            );
        }
        assert_eq!(other_writer(&json!({ "metadata": {} })), None);
        let long = "m".repeat(100);
        assert_eq!(
            other_writer(&with(&json!([entry(&long, t1, None)]))).map(|m| m.len()),
            Some(64)
        );
    }
}
