//! What both backends of the facts speak: the reconcile request annotation, what a fact's
//! Kustomization deploys, and a position in a backend's observations.

/// Flux's reconcile request annotation.
pub const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

/// What a fact's Kustomization deploys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// A `ConfigMap`; no health phase (`wait: false`).
    Plain,
    /// A Deployment with `wait: true`: the health phase runs, and [`super::Setup::hang`] parks it.
    Waiting,
    /// As `Waiting`, but its health check fails (short timeout) until [`super::Setup::heal`].
    Failing,
}

/// A position in the backend's observations; later waits see only what came after it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mark {
    pub(super) events: usize,
    pub(super) log: usize,
}
