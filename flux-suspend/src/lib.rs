//! Suspend-and-prove: pause a chain of Flux objects, prove that Flux has let go, resume.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use flux_fence::{AnnotationKeys, Fencer, Holder, Lease, LeaseAcquire, LeaseConfig, SystemClock};
//! use flux_suspend::io::{ControllerRef, Timing};
//! use flux_suspend::object::kustomization;
//! use flux_suspend::retire::Strategy;
//! use flux_suspend::{Chain, Handoff, PauseOptions, PauseOutcome};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! // The Lease keeps other handoffs out; the fencer asserts it before every write.
//! let LeaseAcquire::Acquired(lease) = Lease::acquire(
//!     client.clone(), LeaseConfig::default(), Holder::generate(), Arc::new(SystemClock),
//! ).await? else {
//!     return Err("another handoff holds the Lease".into());
//! };
//! let fencer = Fencer::new(client.clone(), AnnotationKeys::default(), lease.owner())
//!     .with_lease(lease.handle());
//! let mut handoff = Handoff::new(client, fencer);
//! let chain = [Chain {
//!     parent: Some(kustomization("flux-system", "flux-system")),
//!     target: kustomization("flux-system", "infrastructure"),
//! }];
//! let opts = PauseOptions {
//!     strategy: Strategy::Ack,
//!     quiesce: false,
//!     controller: ControllerRef::default(),
//!     timing: Timing::new(Duration::from_secs(2), Duration::from_secs(300)),
//!     reason: Some("rotate the GHCR pull secret".into()),
//! };
//! let outcome = handoff.pause(&chain, &opts, &mut |step| println!("{step:?} done")).await;
//! if let Ok(PauseOutcome::Proven(proof)) = &outcome {
//!     // ... the work, while Flux provably leaves the chain alone ...
//!     println!("proven after {} passes", proof.passes());
//! }
//! // Every exit path gives back what was taken: target first, then parent, then the Lease.
//! handoff.resume(None).await?;
//! lease.release().await?;
//! outcome?;
//! # Ok(())
//! # }
//! ```
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
//! (docs/design/flux-model.md, facts 3, 4, 9). A proof that waits for `Reconciling` to clear on a
//! suspended object can wait forever — which is exactly what happened in the incident. The
//! judge therefore never reads conditions: it proves ownership, suspension and stillness
//! (unchanged resourceVersions), and the retirement strategy proves that no reconcile that began
//! before the suspend is still running.

//!
//! # Platforms and features
//!
//! The crate has no features and no HTTP client or TLS stack of its own: it talks to the API
//! server through the caller's `kube::Client` only. GitHub Actions evidence for recovery is
//! flux-fence's `github` feature (`flux_fence::liveness::GithubRuns`), given to a session as a
//! [`flux_fence::liveness::LivenessSource`].
//!
//! `command` (running a program in its own process group while the chain is paused, and
//! ending every process it left behind) exists on Unix only: it needs process groups and
//! POSIX signals. Elsewhere the rest of the crate builds and the caller runs its own work
//! inside the pause.

mod cancel;
#[cfg(unix)]
pub mod command;
pub mod doctor;
pub mod error;
pub mod fences;
pub mod flux;
pub mod github;
pub mod handoff;
pub mod io;
pub mod judge;
pub mod kubeconfig;
pub mod names;
pub mod object;
pub mod quiesce;
pub mod readiness;
pub mod report;
pub mod retire;
pub mod rights;
pub mod session;
pub mod settings;
pub mod steps;

pub use cancel::Cancel;
pub use flux_fence::{Holder, LeaseConfig, ObjectRef};
pub use io::{ControllerRef, Timing};
pub use retire::Strategy;
pub use session::{
    CleanupError, Event, Members, Outcome, ParentSpec, Parked, Paused, ResumeError, ResumeOptions,
    Resumed, Session, SessionError, SessionOptions, TargetSpec, resume_holder,
};
pub use steps::Step;

pub use error::SuspendError;
pub use handoff::{Chain, Handoff, PauseOptions, PauseOutcome, ResumeReport};
pub use judge::Proof;

/// The README's program is compiled as a doc test, so the example a user copies builds.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeProgram;
