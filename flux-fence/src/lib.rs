//! Owner fences: the coordination Lease and owner annotations with compare-and-swap.
//!
//! ```no_run
//! use std::sync::Arc;
//! use flux_fence::mark::Restore;
//! use flux_fence::outcome::AcquireOutcome;
//! use flux_fence::{
//!     AnnotationKeys, Fencer, Holder, Lease, LeaseAcquire, LeaseConfig, Mark, ObjectRef,
//!     SystemClock,
//! };
//! use kube::api::{ApiResource, GroupVersionKind};
//! use serde_json::json;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! // 1. The Lease: acquired only when free; a heartbeat renews it.
//! let lease = match Lease::acquire(client.clone(), LeaseConfig::default(), Holder::generate(),
//!                                  Arc::new(SystemClock)).await? {
//!     LeaseAcquire::Acquired(guard) => guard,
//!     LeaseAcquire::Held { holder, .. } => return Err(format!("held by {holder}").into()),
//!     other => return Err(format!("{other:?}").into()),
//! };
//! // 2. Fence an object: one CAS patch, asserting the Lease first.
//! let fencer = Fencer::new(client, AnnotationKeys::default(), lease.owner())
//!     .with_lease(lease.handle());
//! let kustomizations = ApiResource::from_gvk_with_plural(
//!     &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
//!     "kustomizations",
//! );
//! let target = ObjectRef::new(kustomizations, "flux-system", "infrastructure");
//! let marks = vec![
//!     Mark::field("/spec/suspend", json!(true)).exclusive(),
//!     Mark::annotation("reconcile.fluxcd.io/requestedAt", "nonce-1").restore(Restore::IfUnchanged),
//! ];
//! let guard = match fencer.acquire(&target, marks, Some("GHCR credential rotation")).await? {
//!     AcquireOutcome::Acquired(guard) => guard,
//!     AcquireOutcome::Refused { holder } => return Err(format!("fenced by {holder}").into()),
//!     other => return Err(format!("{other:?}").into()),
//! };
//! // 3. Work, proving the fence before each step.
//! assert!(fencer.prove(&guard).await?);
//! // 4. Release (restores every prior value), then the Lease.
//! fencer.release(guard).await?;
//! lease.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Flow
//!
//! 1. **Holder.** [`Holder::generate`] names the transaction (`gh<run>.<attempt>-<random>` in
//!    GitHub Actions, `local-<host>-<pid>-<random>` elsewhere).
//! 2. **Lease.** [`Lease::acquire`] takes the coordination Lease (default
//!    `flux-system/flux-handoff`) only when it has no holder: create if absent, else update
//!    carrying the read resourceVersion. The epoch ([`Epoch`], the fencing token) is
//!    `leaseTransitions`, incremented on each change of hands. A held Lease is never taken over
//!    because it looks expired; [`Lease::recover`] does that, only with caller evidence that
//!    the holder is gone, and still as a CAS. A heartbeat renews it; [`LeaseGuard::assert`]
//!    renews and reads back before a protected mutation; loss is sticky.
//! 3. **Fence.** [`Fencer::acquire`] reads the object, asks [`decide::decide_acquire`], and sends ONE
//!    JSON Patch: `test` uid and resourceVersion, create the annotations map if absent, add
//!    `<prefix>/owner` = `holder;epoch`, `<prefix>/prior` (compact JSON: the fence time and
//!    each [`Mark`]'s prior value), optional `<prefix>/reason`, and the marks. Another owner is
//!    refused as a value ([`outcome::AcquireOutcome::Refused`]). 409/422 re-read and decide again.
//! 4. **Lost responses.** A write with unknown outcome is resolved by a re-read
//!    ([`Fencer::resolve_lost_acquire`], pure core [`decide::lost_write`]): accepted only when the object
//!    shows exactly the post-state; anything else fails closed and keeps an unconfirmed guard.
//! 5. **Prove.** [`Fencer::prove`] re-reads: same uid and our owner value.
//! 6. **Release.** [`Fencer::release`] consumes the guard and sends ONE JSON Patch: `test` uid
//!    and owner, `test` each mark still holds its value, restore priors (replace or remove),
//!    remove the fence annotations ([`release::decide_release`]). Any process can release a fence left
//!    behind, from the annotations alone ([`Fencer::adopt_recorded`]). The acquire and release
//!    patches also add and remove the label `<prefix>/fenced=true`. A moved exact mark keeps
//!    the fence, except a person's `flux resume` alone (`spec.suspend` set to false): kept as
//!    they set it, the rest restored ([`release`]). An operator settles any other moved mark
//!    with [`keep_moved`].
//! 7. **Discover.** [`discover::discover_listed`] lists the Lease and every fenced object with
//!    holder, epoch, age and the exact CAS release patch, selecting the fenced label
//!    server-side (or scanning every object, for fences an older version wrote).
//! 8. **Recover.** [`recovery`] judges which fences a gone holder left may be released, on
//!    evidence (the Lease unchanged for a full duration while watched, never the wall clock),
//!    takes the Lease first and releases children before parents.
//! 9. **Events.** Acquire and release record `HandoffFenced` / `HandoffReleased` Events on the
//!    object; failing to record one is logged, never fatal.
//!
//! # Guarantees
//!
//! - Every write is a CAS on what was read (JSON Patch `test`, or resourceVersion on update);
//!   a lost race is a value, never an overwrite.
//! - A release never applies to an object whose owner is not ours, nor to a recreated object.
//! - The decisions are pure functions ([`decide`], and [`lease`]'s `decide_*`); the I/O layer only reads,
//!   asks, writes.
//! - No secrets are handled here but the GitHub token of `github` (a `SecretString`, never in
//!   a log, an error or `Debug`); the reason text is caller-supplied and must not contain any.

//!
//! # Features
//!
//! - `github` (off by default): [`liveness::GithubRuns`], GitHub Actions evidence that a
//!   holder's exact run attempt is finished, for recovery. It brings reqwest over rustls
//!   *without* a crypto provider: the application installs one at process start, as it does for
//!   kube. Without it the crate's only HTTP is kube's, with the TLS stack the application
//!   chose for kube; any other [`liveness::LivenessSource`] can be plugged in.

// Without `github`, the link above to the GitHub source renders as plain text.
#![cfg_attr(not(feature = "github"), allow(rustdoc::broken_intra_doc_links))]

pub mod api;
mod class;
mod clock;
pub mod command;
pub mod decide;
pub mod discover;
pub mod dry_run;
pub mod engine;
mod error;
pub mod events;
mod fence;
mod guard;
mod holder;
pub mod keep_moved;
pub mod keys;
pub mod lease;
pub mod liveness;
pub mod mark;
mod one_line;
pub mod outcome;
pub mod pointer;
pub mod recovery;
pub mod release;
mod remark;
mod settle;

// The root holds what an embedder names to take part in a handoff; the rest is reached through
// its module (`lease::LeaseRelease`, `decide::decide_acquire`, `api::patch_params`, ...).
pub use class::ErrorClass;
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::FenceError;
pub use fence::Fencer;
pub use guard::{FenceGuard, ObjectRef};
pub use holder::{Epoch, Holder, OwnerValue};
pub use keys::at_root::AnnotationKeys;
pub use lease::acquire::{Lease, LeaseAcquire};
pub use lease::config::{LeaseConfig, LossReason};
pub use lease::guard::LeaseGuard;
pub use lease::handle::{LeaseHandle, LeaseState};
pub use mark::at_root::Mark;
pub use one_line::one_line;

/// The README's program is compiled as a doc test, so the example a user copies builds.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeProgram;
