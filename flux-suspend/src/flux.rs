//! Reading Flux objects: the few fields the decisions need, from a `DynamicObject`'s JSON.
//!
//! Everything here is pure; the I/O layer hands in what it read.

use serde_json::Value;

pub mod order;

/// Makes a parent Kustomization skip a child it manages (docs/design/flux-model.md, fact 6).
pub const RECONCILE_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/reconcile";
/// Value of [`RECONCILE_ANNOTATION`] that disables apply and prune.
pub const RECONCILE_DISABLED: &str = "disabled";
/// Annotation whose change requests a reconcile; its value is copied into
/// `status.lastHandledReconcileAt` by every finished reconcile (fact 3).
pub const REQUESTED_AT_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";
/// The Flux Operator's API group (`ResourceSet`, `FluxInstance`).
pub const OPERATOR_GROUP: &str = "fluxcd.controlplane.io";
/// The Flux Operator's pause: these kinds have no `spec.suspend`; their controllers return
/// early while this annotation reads [`RECONCILE_DISABLED`] (any case), as `flux-operator
/// suspend` and its MCP tools set it (docs/design/flux-model.md, "Flux Operator").
pub const OPERATOR_RECONCILE_ANNOTATION: &str = "fluxcd.controlplane.io/reconcile";
/// Labels kustomize-controller puts on what a Kustomization applies.
pub const PARENT_NAME_LABEL: &str = "kustomize.toolkit.fluxcd.io/name";
pub const PARENT_NAMESPACE_LABEL: &str = "kustomize.toolkit.fluxcd.io/namespace";
/// Labels helm-controller's post-renderer puts on what a `HelmRelease` installs.
pub const HELM_NAME_LABEL: &str = "helm.toolkit.fluxcd.io/name";
pub const HELM_NAMESPACE_LABEL: &str = "helm.toolkit.fluxcd.io/namespace";
/// Labels Flux Operator puts on what a `ResourceSet` applies: its resource manager's owner
/// labels, group `resourceset.fluxcd.controlplane.io` (flux-operator v0.59.0
/// `api/v1/resourceset_types.go` `GroupOwnerLabelResourceSet`, set by `SetOwnerLabels` in
/// `internal/controller/resourceset_controller.go`).
pub const RESOURCESET_NAME_LABEL: &str = "resourceset.fluxcd.controlplane.io/name";
pub const RESOURCESET_NAMESPACE_LABEL: &str = "resourceset.fluxcd.controlplane.io/namespace";

/// One status condition, as Flux writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Condition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// `metadata.annotations[key]` of an object's JSON.
#[must_use]
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")?.get(key)?.as_str()
}

/// `metadata.labels[key]` of an object's JSON.
#[must_use]
pub fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/labels")?.get(key)?.as_str()
}

/// Whether `obj` is a Flux Operator object (its `apiVersion` is in [`OPERATOR_GROUP`]).
#[must_use]
pub fn is_operator_object(obj: &Value) -> bool {
    obj.get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.split_once('/'))
        .is_some_and(|(group, _)| group == OPERATOR_GROUP)
}

/// Whether `obj`'s controller is paused: `spec.suspend == true` for Flux's own kinds; for a
/// Flux Operator object, [`OPERATOR_RECONCILE_ANNOTATION`] reading `disabled` in any case, as
/// the operator's `IsDisabled` compares it (flux-operator `api/v1/resourceset_types.go`).
#[must_use]
pub fn suspended(obj: &Value) -> bool {
    if is_operator_object(obj) {
        return annotation(obj, OPERATOR_RECONCILE_ANNOTATION)
            .is_some_and(|v| v.eq_ignore_ascii_case(RECONCILE_DISABLED));
    }
    obj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true)
}

/// `status.lastHandledReconcileAt`.
#[must_use]
pub fn last_handled(obj: &Value) -> Option<&str> {
    obj.pointer("/status/lastHandledReconcileAt")?.as_str()
}

/// `status.conditions`, skipping malformed entries.
#[must_use]
pub fn conditions(obj: &Value) -> Vec<Condition> {
    let text = |c: &Value, k: &str| {
        c.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter(|c| c.get("type").and_then(Value::as_str).is_some())
                .map(|c| Condition {
                    type_: text(c, "type"),
                    status: text(c, "status"),
                    reason: text(c, "reason"),
                    message: text(c, "message"),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The condition of `type_`, if present.
#[must_use]
pub fn condition<'a>(conds: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conds.iter().find(|c| c.type_ == type_)
}

/// A namespaced name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NamespacedName {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for NamespacedName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The Kustomization that applied `obj`, from kustomize-controller's labels only (every
/// applier: [`owner_of`]). The namespace label defaults to the object's own namespace.
#[must_use]
pub fn parent_of(obj: &Value) -> Option<NamespacedName> {
    labelled(obj, PARENT_NAME_LABEL, PARENT_NAMESPACE_LABEL)
}

/// The kind of Flux object that applies another ([`owner_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OwnerKind {
    /// A Kustomization (`kustomize.toolkit.fluxcd.io/name|namespace` labels): paused as the
    /// target's parent.
    Kustomization,
    /// A `HelmRelease` (`helm.toolkit.fluxcd.io/name|namespace` labels): paused as the
    /// target's parent, exactly as a Kustomization is.
    HelmRelease,
    /// A Flux Operator `ResourceSet` (`resourceset.fluxcd.controlplane.io/name|namespace`
    /// labels): never paused as a whole; the target is frozen in it instead
    /// ([`excluded_from_set`]).
    ResourceSet,
}

/// The Flux object that applies an object: its kind and `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct FluxOwner {
    pub kind: OwnerKind,
    pub at: NamespacedName,
}

/// The Flux object that applies `obj`, from the labels its applier puts on it, in this order:
/// a Kustomization's, a `HelmRelease`'s, a `ResourceSet`'s. Each namespace label defaults to
/// the object's own namespace; an empty name or namespace is no owner.
#[must_use]
pub fn owner_of(obj: &Value) -> Option<FluxOwner> {
    [
        (
            OwnerKind::Kustomization,
            PARENT_NAME_LABEL,
            PARENT_NAMESPACE_LABEL,
        ),
        (
            OwnerKind::HelmRelease,
            HELM_NAME_LABEL,
            HELM_NAMESPACE_LABEL,
        ),
        (
            OwnerKind::ResourceSet,
            RESOURCESET_NAME_LABEL,
            RESOURCESET_NAMESPACE_LABEL,
        ),
    ]
    .into_iter()
    .find_map(|(kind, name, namespace)| {
        labelled(obj, name, namespace).map(|at| FluxOwner { kind, at })
    })
}

/// The `ResourceSet` whose apply must skip `obj` while it is a target: the one its
/// `resourceset.fluxcd.controlplane.io` labels name, unless `obj` is itself a Flux Operator
/// object (its own pause, [`OPERATOR_RECONCILE_ANNOTATION`], already excludes it). The set
/// skips an in-cluster object carrying [`OPERATOR_RECONCILE_ANNOTATION`] `disabled` (flux-operator
/// v0.59.0 `internal/controller/resourceset_controller.go`: its apply's `ExclusionSelector`).
#[must_use]
pub fn excluded_from_set(obj: &Value) -> Option<NamespacedName> {
    if is_operator_object(obj) {
        return None;
    }
    labelled(obj, RESOURCESET_NAME_LABEL, RESOURCESET_NAMESPACE_LABEL)
}

/// Whether `obj` carries what makes its `ResourceSet` skip it: true when no set applies it
/// ([`excluded_from_set`]), else [`OPERATOR_RECONCILE_ANNOTATION`] reading `disabled` (any
/// case, as the set's selector compares it).
#[must_use]
pub fn set_skips(obj: &Value) -> bool {
    excluded_from_set(obj).is_none()
        || annotation(obj, OPERATOR_RECONCILE_ANNOTATION)
            .is_some_and(|v| v.eq_ignore_ascii_case(RECONCILE_DISABLED))
}

/// The `namespace/name` of labels `name_key` and `namespace_key`, the namespace defaulting to
/// `obj`'s own.
fn labelled(obj: &Value, name_key: &str, namespace_key: &str) -> Option<NamespacedName> {
    let name = label(obj, name_key)?;
    let namespace = label(obj, namespace_key)
        .or_else(|| obj.pointer("/metadata/namespace").and_then(Value::as_str))?;
    (!name.is_empty() && !namespace.is_empty()).then(|| NamespacedName {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
}

/// `spec.dependsOn` of a Kustomization or `HelmRelease`, namespaces defaulted to `obj`'s.
#[must_use]
pub fn depends_on(obj: &Value) -> Vec<NamespacedName> {
    let own_ns = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    obj.pointer("/spec/dependsOn")
        .and_then(Value::as_array)
        .map(|deps| {
            deps.iter()
                .filter_map(|d| {
                    let name = d.get("name")?.as_str()?;
                    let ns = d.get("namespace").and_then(Value::as_str).unwrap_or(own_ns);
                    Some(NamespacedName {
                        namespace: ns.to_string(),
                        name: name.to_string(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
