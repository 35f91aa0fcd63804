//! Fences on Flux objects: the [`Recovery`] of Kustomizations and `HelmRelease`s, with a
//! handoff target (a child, released before its parents) recognised by the mark a pause
//! writes, `kustomize.toolkit.fluxcd.io/reconcile: disabled`.

use flux_fence::recovery::{ChildMark, Recovery};
use flux_fence::{AnnotationKeys, LeaseConfig};
use kube::Client;

use flux_suspend::flux::{RECONCILE_ANNOTATION, RECONCILE_DISABLED};
use flux_suspend::object::{helmrelease_resource, kustomization_resource};

/// How a handoff target is recognised among the marks a fence recorded.
#[must_use]
pub fn child_mark() -> ChildMark {
    ChildMark::annotation(RECONCILE_ANNOTATION, RECONCILE_DISABLED)
}

/// The recovery of fences on Kustomizations and `HelmRelease`s (every namespace unless
/// scoped with [`Recovery::scope`]) and of the Lease `lease`; the members its chain record
/// names are read as any kind a pause fences (`flux_suspend::object::recorded_kinds`: Flux
/// Operator objects and replicas gates too).
#[must_use]
pub fn recovery(client: Client, keys: AnnotationKeys, lease: LeaseConfig) -> Recovery {
    let kinds = vec![kustomization_resource(), helmrelease_resource()];
    Recovery::new(client, keys, lease, kinds, child_mark())
        .recorded_kinds(flux_suspend::object::recorded_kinds())
}
