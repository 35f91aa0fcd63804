//! Models of the Flux controllers that run in-process against a real kube-apiserver, for tests
//! of Flux automation (not published). Each follows `docs/design/flux-model.md` fact by fact;
//! the crate's own tests (`tests/model_*.rs`) check them against those facts.
//!
//! 1. [`model`] plays kustomize-controller (and its Deployment) on `Kustomization`s, and
//!    helm-controller on `HelmRelease`s ([`model::Controller::Helm`]), and Flux Operator on
//!    `ResourceSet`s and `FluxInstance`s ([`model::Controller::ResourceSet`]): the work queue and its
//!    triggers (facts 1, 2), the deferred finalisation (fact 3), suspend (fact 4), the phases
//!    of a working reconcile with their status writes (fact 5), and the parent's apply of its
//!    children, skipping `reconcile: disabled` ones (facts 6, 7). Tests hang, fail, restart
//!    and touch it at chosen phases. Binary `flux-model` runs it against a control plane.
//! 2. [`source_model`] plays source-controller for `OCIRepository` objects (the
//!    "source-controller" section): it really pulls the manifest from the registry with the
//!    credentials of `spec.secretRef`, so `Ready=True` is evidence that a Secret works.
//!    Binary `flux-source-model` runs it.
//!
//! 3. [`facts`] holds the bodies of the `fact_` tests, written once against a
//!    [`facts::Backend`]: this crate's `tests/model_facts.rs` runs them against the model and
//!    the real-Flux tier (`suites/realflux`) against the real kustomize-controller, under the
//!    same names: a conformance check of the model against Flux itself.
//!
//! The models use [`testkit`] (fixtures, clients) and nothing of the crates they test.

pub mod facts;
pub mod model;
pub mod source_model;
