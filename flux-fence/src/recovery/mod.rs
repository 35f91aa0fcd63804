//! Recovery rules: which fences and which Lease a gone holder left behind may be released,
//! on what evidence, and in which order.
//!
//! # Rules
//!
//! - **A holder is gone only on evidence, never on the wall clock.** The evidence is the
//!   Lease's `resourceVersion` staying the same for its full `leaseDurationSeconds` while we
//!   watch it on our own monotonic clock (`Recovery::watch`): a holder renews well within
//!   its duration, so a live one shows a change. Comparing the holder's `renewTime` with the
//!   local clock is never used: a recovering machine whose clock runs ahead would release a
//!   live run. Evidence from outside the cluster plugs in as [`HolderEvidence::Reported`]:
//!   with [`Recovery::ci_evidence`] a [`crate::liveness::LivenessSource`] (GitHub Actions) is
//!   asked about the holder's exact run attempt instead of watching; only a finished attempt,
//!   with the Lease unchanged since it was read, proves the holder gone. Every other answer
//!   keeps it ([`KeepReason::NotProved`]).
//! - **A parked Lease is a deliberate pause** (`LeaseGuard::park`): kept unless the caller
//!   opts in ([`Recovery::include_paused`]), and even then it needs the same evidence.
//! - **The Lease is taken first.** When the Lease holder's fences are to be released, the Lease
//!   is taken over with ONE CAS on the version the evidence was judged on
//!   ([`crate::Lease::recover`]); if it does not land, no fence is touched.
//! - **Children before parents.** A child is recognised by a caller-given mark
//!   ([`ChildMark`]); a parent is withheld while a child of its holder is held.
//! - **Adoption by holder** ([`adopt_holder`]) only for a parked pause or a holder whose
//!   process the caller attests exited ([`HolderProcess::Exited`]).
//!
//! The decisions are pure (`assess`, `plan_recover`, `watch_step`, [`decide_adopt`]);
//! [`Recovery`] and [`adopt_holder`] only read, ask and write. [`Recovery::list`] is the
//! read-only listing ([`FenceListing`]: a table, or JSON facts) and
//! [`Recovery::prepare_release`] / [`Recovery::release_prepared`] release one named fence on
//! an operator's word. [`overdue`] names the pauses held past their max-hold (never released
//! for it). The human wording is `Display` and `describe` on these types.
//!
//! ```no_run
//! use flux_fence::recovery::{ChildMark, RecoverOutcome, Recovery};
//! use flux_fence::{AnnotationKeys, LeaseConfig};
//! # async fn run(client: kube::Client, kinds: Vec<kube::api::ApiResource>) -> Result<(), flux_fence::FenceError> {
//! let recovery = Recovery::new(client, AnnotationKeys::default(), LeaseConfig::default(), kinds,
//!     ChildMark::annotation("kustomize.toolkit.fluxcd.io/reconcile", "disabled"));
//! let planned = recovery.plan(&mut |p| eprintln!("unchanged for {:?}", p.unchanged_for)).await?;
//! if let RecoverOutcome::Done(report) = recovery.execute(&planned.plan).await? {
//!     println!("released {} fences", report.released.len());
//! }
//! # Ok(())
//! # }
//! ```

mod adopt;
mod assess;
mod ci;
mod ends;
mod keep;
mod listing;
pub mod overdue;
mod plan;
mod release;
mod run;
mod watch;
mod words;

pub use adopt::{AdoptDecision, Adoption, HolderProcess, adopt_holder, decide_adopt};
pub use assess::{ChildMark, LeaseView, Liveness, Orphan, Withhold};
pub use ends::{Ending, Hold, what_ends};
pub use plan::{HolderEvidence, KeepReason, PlannedRelease, RecoverPlan, Subject};
pub use run::{Planned, RecoverOutcome, RecoverReport, Recovery, Snapshot};
pub use watch::WatchProgress;

pub use listing::FenceListing;
pub use release::{ReadyRelease, Refused, ReleaseRefusal};
pub use words::{age, short_ref};
