//! Suspend-and-prove: pause a chain of Flux objects, prove that Flux has let go, resume.
//!
//! This crate is the fix for a merge-queue deploy that timed out waiting for a suspended Flux
//! Kustomization to look quiet. Its decisions are pure functions of what was read; the thin
//! I/O layer reads, asks them, writes.
//!
//! # The flow
//!
//! 1. Find the chain: the target and the Kustomization that applies it ([`flux::parent_of`]).
//! 2. Quiesce only where the retirement strategy needs it ([`quiesce::blockers`]).
//! 3. Fence top-down: `spec.suspend=true`, a fresh `reconcile.fluxcd.io/requestedAt` nonce, an
//!    owner annotation, and for a child `kustomize.toolkit.fluxcd.io/reconcile: disabled`.
//! 4. Retire in-flight executions ([`retire`]): wait for the acknowledgement of each nonce
//!    (`ack`), or restart the controller and wait for every old Pod to go (`restart`).
//! 5. Prove the stable pause ([`judge::Judge`]): two consecutive passes in which every member
//!    is ours, suspended, and unchanged. On timeout, report only fixed counters
//!    ([`report::Counters`]).
//! 6. Work, then resume bottom-up and check readiness ([`readiness`]).
//!
//! # Why status is not a clock after suspension
//!
//! kustomize-controller finishes every reconcile — even the early return of a suspended object —
//! with a deferred status patch that deletes `Reconciling` only when `Ready=True`. An object
//! suspended after a failed or interrupted reconcile therefore keeps `Reconciling=True` for as
//! long as it stays suspended, and a controller restart mid-reconcile leaves
//! `Reconciling=True, Ready=Unknown` that the new process never clears while suspended
//! (flux-model.md, facts 3, 4 and 9). A proof that waits for `Reconciling` to clear on a
//! suspended object can wait forever — which is exactly what happened in the incident. The
//! judge therefore never reads conditions: it proves ownership, suspension and stillness
//! (unchanged resourceVersions), and the retirement strategy proves that no reconcile that began
//! before the suspend is still running.

pub mod error;
pub mod flux;
pub mod handoff;
pub mod io;
pub mod judge;
pub mod object;
pub mod quiesce;
pub mod readiness;
pub mod report;
pub mod retire;
pub mod steps;

pub use error::SuspendError;
pub use handoff::{Chain, Handoff, PauseOptions, PauseOutcome, ResumeReport};
pub use judge::Proof;
