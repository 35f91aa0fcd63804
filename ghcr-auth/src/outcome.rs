//! How a step of [`crate::flow`] failed, and its class: the caller maps each [`ErrorClass`] to
//! an exit code and prints the error's chain as its one line.

use std::time::Duration;

use crate::error::{CredentialProblem, GhcrError};
use crate::eso::ForceOutcome;
use crate::fanout::{Missing, incomplete_line as fanout_line};
use crate::reassert::{ReassertReport, SecretOutcome};
use crate::source::{RequestOutcome, SourceProof};
use crate::stage::KeyOutcome;

/// What kind of failure a [`FlowError`] is, for exit codes: the workspace's one classification.
pub use flux_fence::ErrorClass;

/// A failed step of [`crate::check_credential`] or [`crate::route::FanoutRun`]. Messages carry names, counts and registry answers, never a
/// credential; the cause of a wrapped [`GhcrError`] is in `source()`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlowError {
    /// The credential could not be read or does not validate.
    #[error(transparent)]
    Credential(GhcrError),
    /// The GitHub Actions mask commands could not be written.
    #[error("writing the mask commands: {0}")]
    Mask(std::io::Error),
    /// Something that should not fail (building the registry client) did.
    #[error(transparent)]
    Internal(GhcrError),
    /// The negative check's wrong-password credential could not be built.
    #[error(transparent)]
    WrongPassword(CredentialProblem),
    /// A registry request failed in transport.
    #[error("registry unreachable: {0}")]
    Unreachable(#[source] GhcrError),
    /// The registry refused the credential: `image: outcome` for each image it refused.
    #[error("registry refused the credential: {}", .0.join("; "))]
    RegistryRefused(Vec<String>),
    /// The registry accepted a wrong password for these images.
    #[error(
        "negative check failed: the registry accepted a wrong password for {}; its proof proves \
         nothing",
        .0.join(", ")
    )]
    NegativeCheckFailed(Vec<String>),
    /// Reassertion broke (a refused write gate included, e.g. a lost Lease).
    #[error(transparent)]
    Reassert(GhcrError),
    /// Not every Secret holds the credential; nothing was overwritten.
    #[error("secrets not reasserted: {}", incomplete_line(.0))]
    Incomplete(ReassertReport),
    /// Proving a Flux source broke (a refused write gate included).
    #[error(transparent)]
    Source(GhcrError),
    /// The fan-out is incomplete (a CRD, the `PushSecret`, a consumer's `ExternalSecret` or a
    /// staging Secret is missing); nothing was written.
    #[error("{}", fanout_line(.0))]
    FanoutIncomplete(Vec<Missing>),
    /// A staged key was not written (nothing was overwritten); the root was not written.
    #[error("staged key {key} not written: {outcome}; the root Secret was not written")]
    Staging {
        /// `namespace/name:key`.
        key: String,
        /// What happened to it.
        outcome: KeyOutcome,
    },
    /// A force-sync request to an ESO object could not be made; the root was not written.
    #[error("{}", eso_request_line(.what, .outcome))]
    EsoRequest {
        /// `Kind namespace/name`.
        what: String,
        /// Why not.
        outcome: ForceOutcome,
    },
    /// ESO objects did not report synced (or their target Secret did not hold the credential)
    /// within the deadline; the root was not written.
    #[error(
        "{kind} not converged within {deadline:?}: {}; the root Secret was not written",
        .stale.join(", ")
    )]
    NotConverged {
        /// `PushSecret` or `ExternalSecret`.
        kind: String,
        /// `namespace/name (ESO's Ready reason or what differs)` for each.
        stale: Vec<String>,
        /// The bound.
        deadline: Duration,
    },
    /// A Flux source did not prove the credential.
    #[error("{}", source_line(.kind, .name, .proof, .deadline))]
    SourceNotProven {
        /// The source's kind, e.g. `OCIRepository`.
        kind: String,
        /// `namespace/name`.
        name: String,
        /// How the proof ended (never `Ready`).
        proof: SourceProof,
        /// The deadline it had.
        deadline: Duration,
    },
}

impl FlowError {
    /// The class of this failure.
    #[must_use]
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::Credential(
                GhcrError::ReadCredential { .. }
                | GhcrError::CredentialMissing { .. }
                | GhcrError::InvalidCredential(_)
                | GhcrError::InvalidImageRef { .. },
            ) => ErrorClass::BadInput,
            Self::Unreachable(_) | Self::RegistryRefused(_) | Self::NegativeCheckFailed(_) => {
                ErrorClass::Registry
            }
            // A refused gate; an incomplete fan-out refused before any write.
            Self::Reassert(GhcrError::Gate { .. }) | Self::FanoutIncomplete(_) => {
                ErrorClass::Refused
            }
            // Something changed under the pause after writes: as when the session's watch
            // sees it first; the release keeps that fence and the fence report names it.
            Self::Reassert(GhcrError::PauseBroken { .. }) => ErrorClass::PauseBroken,
            Self::Reassert(_) | Self::Source(_) => ErrorClass::KubeApi,
            Self::Staging { outcome, .. } => match outcome {
                KeyOutcome::Moved | KeyOutcome::Immutable | KeyOutcome::ReadBackDiffers => {
                    ErrorClass::Refused
                }
                _ => ErrorClass::KubeApi,
            },
            Self::EsoRequest { outcome, .. } => match outcome {
                ForceOutcome::Moved => ErrorClass::Refused,
                _ => ErrorClass::KubeApi,
            },
            Self::NotConverged { .. } => ErrorClass::Timeout,
            Self::Incomplete(report) => {
                let api = report.results.iter().any(|(_, _, o)| {
                    matches!(
                        o,
                        SecretOutcome::Forbidden { .. } | SecretOutcome::NamespaceMissing
                    )
                });
                if api {
                    ErrorClass::KubeApi
                } else {
                    ErrorClass::Refused
                }
            }
            Self::SourceNotProven { proof, .. } => match proof {
                SourceProof::Failed { .. } => ErrorClass::Registry,
                SourceProof::Suspended | SourceProof::NotRequested(RequestOutcome::Moved) => {
                    ErrorClass::Refused
                }
                SourceProof::TimedOut => ErrorClass::Timeout,
                SourceProof::NotRequested(_) => ErrorClass::KubeApi,
                SourceProof::Ready { .. } => ErrorClass::Internal,
            },
            Self::Credential(_) | Self::Mask(_) | Self::Internal(_) | Self::WrongPassword(_) => {
                ErrorClass::Internal
            }
        }
    }
}

/// `ns/a: forbidden to get; ns/b: moved (1 later Secret(s) not attempted; ...)`.
fn incomplete_line(report: &ReassertReport) -> String {
    let failed: Vec<String> = report
        .results
        .iter()
        .filter(|(_, _, o)| !o.is_ok() && *o != SecretOutcome::NotAttempted)
        .map(|(_, t, o)| match o {
            SecretOutcome::Forbidden { verb } => format!("{t}: forbidden to {verb}"),
            other => format!("{t}: {}", other.word().replace('_', " ")),
        })
        .collect();
    let skipped = report
        .results
        .iter()
        .filter(|(_, _, o)| *o == SecretOutcome::NotAttempted)
        .count();
    format!(
        "{} ({skipped} later Secret(s) not attempted; nothing was overwritten)",
        failed.join("; ")
    )
}

/// Why a force-sync request was not made.
fn eso_request_line(what: &str, outcome: &ForceOutcome) -> String {
    let why = match outcome {
        ForceOutcome::NotFound => "not found",
        ForceOutcome::Forbidden => "forbidden to patch",
        ForceOutcome::Moved => "kept changing; not requested",
        ForceOutcome::Requested { .. } => "requested",
    };
    format!("force-sync of {what}: {why}; the root Secret was not written")
}

/// Why the source `kind name` did not prove the credential.
fn source_line(kind: &str, name: &str, proof: &SourceProof, deadline: &Duration) -> String {
    match proof {
        SourceProof::Failed { reason } => {
            format!("flux source {kind} {name} failed to pull after reassertion: {reason}")
        }
        SourceProof::Suspended => {
            format!("flux source {kind} {name} is suspended, so it cannot prove the credential")
        }
        SourceProof::TimedOut => format!("flux source {kind} {name} not ready within {deadline:?}"),
        SourceProof::NotRequested(RequestOutcome::Moved) => {
            format!("flux source {kind} {name} kept changing; reconcile not requested")
        }
        SourceProof::NotRequested(RequestOutcome::Forbidden) => {
            format!("forbidden to request a reconcile of {kind} {name}")
        }
        SourceProof::NotRequested(_) => format!("flux source {kind} {name} not found"),
        SourceProof::Ready { .. } => "source ready judged a failure".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{SecretTarget, TargetRole};

    fn incomplete(outcomes: Vec<SecretOutcome>) -> FlowError {
        FlowError::Incomplete(ReassertReport {
            results: outcomes
                .into_iter()
                .enumerate()
                .map(|(i, o)| {
                    (
                        TargetRole::Consumer,
                        SecretTarget::new(format!("ns{i}"), "p"),
                        o,
                    )
                })
                .collect(),
        })
    }

    #[test]
    fn an_incomplete_reassertion_names_what_failed_and_counts_what_was_skipped() {
        let e = incomplete(vec![
            SecretOutcome::Unchanged {
                resource_version: "1".into(),
            },
            SecretOutcome::Moved,
            SecretOutcome::NotAttempted,
        ]);
        assert_eq!(
            e.to_string(),
            "secrets not reasserted: ns1/p: moved (1 later Secret(s) not attempted; nothing was \
             overwritten)"
        );
        assert_eq!(e.class(), ErrorClass::Refused);
        let e = incomplete(vec![
            SecretOutcome::Forbidden { verb: "patch" },
            SecretOutcome::ReadBackDiffers,
        ]);
        assert_eq!(
            e.to_string(),
            "secrets not reasserted: ns0/p: forbidden to patch; ns1/p: read back differs (0 \
             later Secret(s) not attempted; nothing was overwritten)"
        );
        assert_eq!(e.class(), ErrorClass::KubeApi);
        assert_eq!(
            incomplete(vec![SecretOutcome::NamespaceMissing]).class(),
            ErrorClass::KubeApi
        );
    }

    #[test]
    fn each_unproven_source_has_its_class_and_line() {
        let cases = [
            (
                SourceProof::Failed {
                    reason: "AuthenticationFailed".into(),
                },
                ErrorClass::Registry,
                "flux source OCIRepository ns/app failed to pull after reassertion: \
                 AuthenticationFailed",
            ),
            (
                SourceProof::Suspended,
                ErrorClass::Refused,
                "flux source OCIRepository ns/app is suspended, so it cannot prove the credential",
            ),
            (
                SourceProof::TimedOut,
                ErrorClass::Timeout,
                "flux source OCIRepository ns/app not ready within 2s",
            ),
            (
                SourceProof::NotRequested(RequestOutcome::Moved),
                ErrorClass::Refused,
                "flux source OCIRepository ns/app kept changing; reconcile not requested",
            ),
            (
                SourceProof::NotRequested(RequestOutcome::Forbidden),
                ErrorClass::KubeApi,
                "forbidden to request a reconcile of OCIRepository ns/app",
            ),
            (
                SourceProof::NotRequested(RequestOutcome::NotFound),
                ErrorClass::KubeApi,
                "flux source OCIRepository ns/app not found",
            ),
        ];
        for (proof, class, line) in cases {
            let e = FlowError::SourceNotProven {
                kind: "OCIRepository".into(),
                name: "ns/app".into(),
                proof,
                deadline: Duration::from_secs(2),
            };
            assert_eq!((e.class(), e.to_string().as_str()), (class, line));
        }
    }

    #[test]
    fn registry_and_credential_failures_have_their_classes() {
        let missing = || GhcrError::CredentialMissing {
            from: "environment variable T".into(),
        };
        assert_eq!(
            FlowError::Credential(missing()).class(),
            ErrorClass::BadInput
        );
        assert_eq!(FlowError::Internal(missing()).class(), ErrorClass::Internal);
        let refused = FlowError::RegistryRefused(vec!["ghcr.io/a/b:1: 401".into(), "x".into()]);
        assert_eq!(refused.class(), ErrorClass::Registry);
        assert_eq!(
            refused.to_string(),
            "registry refused the credential: ghcr.io/a/b:1: 401; x"
        );
        let accepted = FlowError::NegativeCheckFailed(vec!["a".into(), "b".into()]);
        assert_eq!(
            accepted.to_string(),
            "negative check failed: the registry accepted a wrong password for a, b; its proof \
             proves nothing"
        );
        let gate = GhcrError::Gate {
            namespace: "ns".into(),
            name: "p".into(),
            source: "lease lost".into(),
        };
        assert_eq!(FlowError::Reassert(gate).class(), ErrorClass::Refused);
        let broken = GhcrError::PauseBroken {
            namespace: "flux-system".into(),
            name: "ghcr-auth".into(),
            source: "the pause no longer holds".into(),
        };
        assert_eq!(FlowError::Reassert(broken).class(), ErrorClass::PauseBroken);
        let e = FlowError::Reassert(GhcrError::InvalidSelector("bad".into()));
        assert_eq!(e.class(), ErrorClass::KubeApi);
    }
}
