//! What a fence is held on and the guard that proves it: [`ObjectRef`], [`FenceGuard`].

use kube::api::ApiResource;

use crate::OwnerValue;
use crate::api::resource_name;
use crate::decide::Held;

/// Any namespaced object with an annotations map.
#[derive(Debug, Clone)]
pub struct ObjectRef {
    /// Its API resource (group, version, kind, plural).
    pub resource: ApiResource,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// `resource` object `namespace/name`.
    #[must_use]
    pub fn new(
        resource: ApiResource,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            resource,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    pub(crate) fn target(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub(crate) fn resource_name(&self) -> String {
        resource_name(&self.resource)
    }
}

impl PartialEq for ObjectRef {
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (&self.resource, &other.resource);
        (
            &a.group,
            &a.version,
            &a.kind,
            &a.plural,
            &self.namespace,
            &self.name,
        ) == (
            &b.group,
            &b.version,
            &b.kind,
            &b.plural,
            &other.namespace,
            &other.name,
        )
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.resource.kind, self.namespace, self.name)
    }
}

/// Proof of a fence this process holds. `release` consumes it; dropping it without a release
/// logs an error (no I/O happens in `Drop`; the fence stays on the object and fence discovery
/// lists it).
#[derive(Debug)]
pub struct FenceGuard {
    pub(crate) object: ObjectRef,
    pub(crate) held: Held,
    pub(crate) reason: Option<String>,
    resource_version: Option<String>,
    confirmed: bool,
    armed: bool,
}

impl FenceGuard {
    pub(crate) fn new(
        object: ObjectRef,
        held: Held,
        reason: Option<String>,
        rv: Option<String>,
        confirmed: bool,
    ) -> Self {
        Self {
            object,
            held,
            reason,
            resource_version: rv,
            confirmed,
            armed: true,
        }
    }

    /// The fenced object.
    #[must_use]
    pub fn object(&self) -> &ObjectRef {
        &self.object
    }

    /// The uid, owner value and marks (with priors) of the fence.
    #[must_use]
    pub fn held(&self) -> &Held {
        &self.held
    }

    /// The uid the object had when it was fenced.
    #[must_use]
    pub fn uid(&self) -> &str {
        &self.held.uid
    }

    /// Our owner value.
    #[must_use]
    pub fn owner(&self) -> &OwnerValue {
        &self.held.owner
    }

    /// The resourceVersion right after the fence was written (or adopted); `None` when the
    /// outcome of the write is unknown.
    #[must_use]
    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    /// `false` for a guard from an unresolved lost response: the fence may or may not be on
    /// the object. A release is still safe (it is a CAS on our owner value).
    #[must_use]
    pub fn is_confirmed(&self) -> bool {
        self.confirmed
    }

    /// Deliberately leaves the fence on the object and forgets the guard without the
    /// dropped-guard error (e.g. `flux-handoff pause`, whose fences a later `resume --holder`
    /// adopts with [`crate::Fencer::adopt_recorded`]).
    pub fn leave_in_place(self) {
        self.disarm();
    }

    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for FenceGuard {
    fn drop(&mut self) {
        if self.armed {
            tracing::error!(
                object = %self.object,
                owner = %self.held.owner,
                uid = %self.held.uid,
                confirmed = self.confirmed,
                "fence guard dropped without release: the fence stays on the object until \
                 released (fence discovery lists it)"
            );
        }
    }
}

/// A Kustomization `namespace/name`, for the crate's unit tests.
#[cfg(test)]
pub(crate) fn test_kustomization(namespace: &str, name: &str) -> ObjectRef {
    let gvk =
        kube::api::GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization");
    ObjectRef::new(
        ApiResource::from_gvk_with_plural(&gvk, "kustomizations"),
        namespace,
        name,
    )
}
