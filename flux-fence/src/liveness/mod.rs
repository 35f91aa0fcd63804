//! Liveness from outside the cluster: whether a fence holder's CI run is provably finished.
//!
//! A holder identity made in CI carries its run and attempt (`gh<run>.<attempt>-<suffix>`,
//! see [`crate::Holder::for_ci_run`]). A [`LivenessSource`] asks the CI system about that
//! exact attempt (never "the latest attempt": a re-run is another holder) and answers with a
//! [`Verdict`]. Only a terminal answer is evidence that the holder is gone
//! ([`Verdict::Finished`]); every other answer — still running, queued, not found, a server
//! error, a timeout, a body without a status, a holder without a run reference — is
//! [`Verdict::NotProved`] with one line that says why and what a person can do.
//!
//! `GithubRuns` (feature `github`) asks the GitHub REST API. The decision on its answer is the
//! pure `judge_attempt`; the type only sends the request.

#[cfg(feature = "github")]
mod github;
// Only the `github` source calls the judge; its table tests run without the feature too.
#[cfg_attr(not(feature = "github"), allow(dead_code))]
mod judge;
mod settings;

use std::fmt;
use std::future::Future;
use std::pin::Pin;

#[cfg(feature = "github")]
pub use github::{GithubConfig, GithubRuns};
pub use settings::{Evidence, RecoveryTable};

/// The environment variable that carries a GitHub token meant for flux-handoff alone (the
/// Action's `github-token`): read before `GITHUB_TOKEN`, and never handed on to a command run
/// under a pause (flux-suspend removes it from the command's environment), so a deploy script
/// does not inherit a token it was not given.
pub const TOKEN_ENV: &str = "FLUX_HANDOFF_GITHUB_TOKEN";

/// What a liveness source answered about a holder.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// The holder's exact attempt is finished: evidence, in words (no secrets).
    Finished(String),
    /// Not proved finished: why, and what a person can do, in one line.
    NotProved {
        /// The line.
        why: String,
        /// Whether asking again later may change the answer (the run is still running or
        /// queued), as opposed to an answer that waiting does not change (not found, no run
        /// reference, a refused token).
        may_change: bool,
    },
}

impl Verdict {
    /// A `NotProved` that waiting may change.
    #[must_use]
    pub fn pending(why: impl Into<String>) -> Self {
        Self::NotProved {
            why: why.into(),
            may_change: true,
        }
    }

    /// A `NotProved` that waiting does not change.
    #[must_use]
    pub fn refused(why: impl Into<String>) -> Self {
        Self::NotProved {
            why: why.into(),
            may_change: false,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Finished(e) => f.write_str(e),
            Self::NotProved { why, .. } => f.write_str(why),
        }
    }
}

/// The future a [`LivenessSource`] returns.
pub type VerdictFuture<'a> = Pin<Box<dyn Future<Output = Verdict> + Send + 'a>>;

/// Asks a system outside the cluster whether a holder is provably gone.
///
/// Meant to be implemented (the GitHub runs source is one; an embedder adds its own CI or
/// scheduler). The contract: `check` never fails and never panics — a failure to ask is a
/// [`Verdict::NotProved`] — and answers [`Verdict::Finished`] only on evidence that the
/// holder's run has ended for good (its evidence text is shown to people and recorded, so it
/// must name the source and hold no secret). A holder it does not know is `NotProved`, never
/// `Finished`. It may be called concurrently and more than once per holder. New methods, if
/// any, come with default bodies.
pub trait LivenessSource: Send + Sync + fmt::Debug {
    /// The verdict on `holder` (a holder identity as found in the Lease or an owner
    /// annotation). Never fails: a failure to ask is a [`Verdict::NotProved`].
    fn check<'a>(&'a self, holder: &'a str) -> VerdictFuture<'a>;
}
