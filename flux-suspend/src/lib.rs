//! Suspend-and-prove: pause a chain of Flux objects, prove that Flux has let go, resume.
//!
//! ```no_run
//! use flux_suspend::object::kustomization;
//! use flux_suspend::{Paused, Session, SessionOptions, TargetSpec, signals};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let client = kube::Client::try_default().await?;
//! // The first SIGINT/SIGTERM stops, a second hurries; either way everything is released.
//! let cancel = signals::cancel_on_signals()?;
//! let mut opts = SessionOptions::new(vec![TargetSpec::new(kustomization("flux-system", "apps"))]);
//! opts.reason = Some("rotate the GHCR pull secret".into());
//! let session = Session::start(client, opts, cancel).await?;
//! let work = |paused: Paused| async move {
//!     println!("proven after {} passes", paused.proof.passes());
//!     // Each write the pause protects goes through `paused.write(..)`: it asserts the Lease
//!     // and rechecks the pause first.
//!     Ok::<_, std::io::Error>(())
//! };
//! // Released in order on every path: targets, then parents, then the Lease.
//! session.run_paused(|event| println!("{event:?}"), work).await.into_result()?;
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
//! 1. Find the chain: the target and the Flux object that applies it ([`flux::owner_of`]).
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
//! ending every process it left behind) and `signals` (SIGINT/SIGTERM/SIGHUP as [`Cancel`]
//! requests) exist on Unix only: they need process groups and POSIX signals. Elsewhere the
//! rest of the crate builds; drive [`Cancel`] from the platform's own events and run the work
//! inside the pause.

mod cancel;
#[cfg(target_os = "linux")]
pub mod command;
mod error;
pub mod flux;
pub mod handoff;
pub mod io;
pub mod judge;
pub mod object;
pub mod quiesce;
pub mod readiness;
mod refusal;
pub mod report;
pub mod retire;
mod session;
#[cfg(unix)]
pub mod signals;
pub mod steps;

// The root is the session: what an embedder names to pause, work and hand back, each item
// at one path (the session module itself is private). The layers under it are reached
// through their modules (`handoff::Handoff`, `judge::Proof`, ...).
pub use cancel::Cancel;
pub use retire::Strategy;
pub use session::autoscaler;
pub use session::dry_run;
pub use session::{
    Asked, BrokenPause, Change, CleanupError, Event, LeaseWait, LeaseWaiting, Members, ObjectFence,
    Outcome, ParentSpec, Parked, ParkedPause, Paused, Recovered, Refusal, ResumeError,
    ResumeOptions, Resumed, STOP_GRACE, Session, SessionError, SessionOptions, Subject, TargetSpec,
    WaitDecision, WriteRefused, decide_holder, decide_wait, field_manager, holder_of,
    resume_holder, what_broke,
};

/// The README's program is compiled as a doc test, so the example a user copies builds.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeProgram;
