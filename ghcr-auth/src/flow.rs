//! The GHCR handoff's steps as a caller runs them: [`check`] reads, masks and proves the
//! credential (no cluster call); [`Reassertion::run`] is the work done under a proven pause
//! (or without one): the Secrets in order, then the Flux source proofs. Progress goes to the
//! caller's [`Progress`] as phase lines and JSON facts (names and counts only); failures are
//! [`FlowError`]s with an [`ErrorClass`] the caller maps to its exit codes.

#[cfg(feature = "registry")]
use std::io::Write;
use std::time::Duration;

use kube::Client;
#[cfg(feature = "registry")]
use secrecy::SecretString;
use serde_json::{Value, json};

#[cfg(feature = "registry")]
use crate::credential::DockerConfig;
#[cfg(feature = "registry")]
use crate::mask;
use crate::plan::TargetRole;
use crate::reassert::{ReassertReport, Reasserter, SecretOutcome};
#[cfg(feature = "registry")]
use crate::registry::{ProofOutcome, ProverOptions, RegistryProver};
#[cfg(feature = "registry")]
use crate::source::new_nonce;
use crate::source::{SourceProof, SourceRef, prove_source};
#[cfg(feature = "registry")]
use crate::spec::CredentialInput;

pub use crate::outcome::{ErrorClass, FlowError};

/// Where a step reports what it did. Nothing passed here ever holds credential material.
///
/// Meant to be implemented (the CLI's output is one). The contract: both methods return
/// quickly and never fail; a sink that cannot report drops the line rather than stopping the
/// step. Lines arrive in the order the steps finish.
pub trait Progress {
    /// A step finished: one line for people, e.g. `credential proven for 2 image(s)`.
    fn phase(&mut self, line: &str);
    /// A fact for machines, e.g. `secret_counts` → `{"created": 2}`.
    fn fact(&mut self, key: &str, value: Value);
}

/// Loads and validates the credential, masks it in GitHub Actions (writing the `::add-mask::`
/// lines to `mask_to` before anything else is reported), and proves it for every image, then
/// (when asked) proves a wrong password is refused. Facts: `images`; phases: the proof, then
/// the negative check.
///
/// # Errors
/// [`FlowError::Credential`] for a credential that cannot be read or is invalid;
/// [`FlowError::Unreachable`], [`FlowError::RegistryRefused`] and
/// [`FlowError::NegativeCheckFailed`] from the registry; [`FlowError::Mask`] and
/// [`FlowError::Internal`] for what should not fail.
#[cfg(feature = "registry")]
pub async fn check(
    input: &CredentialInput,
    mut mask_to: impl Write,
    progress: &mut impl Progress,
) -> Result<DockerConfig, FlowError> {
    let config = DockerConfig::load(&input.source, &input.format).map_err(FlowError::Credential)?;
    mask::mask_in_github_actions(&config, &mut mask_to).map_err(FlowError::Mask)?;
    let prover = RegistryProver::new(ProverOptions {
        allow_insecure_loopback: input.allow_insecure_loopback,
        ..ProverOptions::default()
    })
    .map_err(FlowError::Internal)?;
    let results = prover
        .prove_all(&config, &input.images)
        .await
        .map_err(FlowError::Unreachable)?;
    let each = results.iter().map(|(image, outcome)| {
        json!({ "image": image.to_string(), "proven": outcome.is_proven(), "outcome": outcome.to_string() })
    });
    progress.fact("images", Value::Array(each.collect()));
    let refused: Vec<String> = results
        .iter()
        .filter(|(_, o)| !o.is_proven())
        .map(|(image, outcome)| format!("{image}: {outcome}"))
        .collect();
    if !refused.is_empty() {
        return Err(FlowError::RegistryRefused(refused));
    }
    progress.phase(&format!(
        "credential proven for {} image(s)",
        input.images.len()
    ));
    if input.negative_check {
        negative_check(&prover, &config, input, progress).await?;
    }
    Ok(config)
}

/// Proves a wrong password is refused for every image: otherwise the registry did not really
/// check the credential and the proof proves nothing.
#[cfg(feature = "registry")]
async fn negative_check(
    prover: &RegistryProver,
    config: &DockerConfig,
    input: &CredentialInput,
    progress: &mut impl Progress,
) -> Result<(), FlowError> {
    let mut accepted = Vec::new();
    for image in &input.images {
        let Some(auth) = config.credential_for(image.registry()) else {
            continue;
        };
        let wrong = SecretString::from(format!("flux-handoff-negative-check-{}", new_nonce()));
        let wrong = DockerConfig::from_token(image.registry(), auth.username(), wrong)
            .map_err(FlowError::WrongPassword)?;
        let outcome = prover
            .prove(&wrong, image)
            .await
            .map_err(FlowError::Unreachable)?;
        if matches!(
            outcome,
            ProofOutcome::Proven { .. } | ProofOutcome::NoChallenge { .. }
        ) {
            accepted.push(image.to_string());
        }
    }
    if !accepted.is_empty() {
        return Err(FlowError::NegativeCheckFailed(accepted));
    }
    progress.phase(&format!(
        "negative check: a wrong password is refused for {} image(s)",
        input.images.len()
    ));
    Ok(())
}

/// Proves each source pulls with the credential, in order (a reconcile request guarded by the
/// reasserter's gate, then the wait for its acknowledgement). Fact: `sources_proven`.
pub(crate) async fn prove_sources(
    sources: &[SourceRef],
    reasserter: &Reasserter,
    client: &Client,
    deadline: Duration,
    poll: Duration,
    progress: &mut impl Progress,
) -> Result<(), FlowError> {
    let mut proven = Vec::new();
    for source in sources {
        let proof = prove_source(client, source, reasserter.gate(), deadline, poll)
            .await
            .map_err(FlowError::Source)?;
        let name = format!("{}/{}", source.namespace, source.name);
        let kind = source.resource.kind.clone();
        match proof {
            SourceProof::Ready { revision } => {
                let at = revision.map(|r| format!(" at {r}")).unwrap_or_default();
                progress.phase(&format!("flux source proven: {kind} {name} ready{at}"));
                proven.push(name);
            }
            proof => {
                return Err(FlowError::SourceNotProven {
                    kind,
                    name,
                    proof,
                    deadline,
                });
            }
        }
    }
    if !sources.is_empty() {
        progress.fact("sources_proven", json!(proven));
    }
    Ok(())
}

/// `secrets reasserted: created=1 updated=0 unchanged=2[ adopted=1]`.
pub(crate) fn summary(report: &ReassertReport) -> String {
    let count =
        |f: fn(&SecretOutcome) -> bool| report.results.iter().filter(|(_, _, o)| f(o)).count();
    let adopted = count(|o| matches!(o, SecretOutcome::Adopted { .. }));
    format!(
        "secrets reasserted: created={} updated={} unchanged={}{}",
        count(|o| matches!(o, SecretOutcome::Created { .. })),
        count(|o| matches!(o, SecretOutcome::Updated { .. })),
        count(|o| matches!(o, SecretOutcome::Unchanged { .. })),
        if adopted > 0 {
            format!(" adopted={adopted}")
        } else {
            String::new()
        }
    )
}

/// Counts per outcome and each Secret's outcome (names only) as facts.
pub(crate) fn report_facts(report: &ReassertReport, progress: &mut impl Progress) {
    let mut counts = serde_json::Map::new();
    let mut each = Vec::new();
    for (role, target, outcome) in &report.results {
        let word = outcome.word();
        let n = counts.get(word).and_then(Value::as_u64).unwrap_or(0);
        counts.insert(word.into(), json!(n + 1));
        each.push(json!({
            "namespace": target.namespace,
            "name": target.name,
            "role": match role { TargetRole::Root => "root", TargetRole::Consumer => "consumer" },
            "outcome": word,
        }));
    }
    progress.fact("secret_counts", Value::Object(counts));
    progress.fact("secrets", json!(each));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Drift, SecretTarget};

    #[derive(Default)]
    struct Recorded {
        phases: Vec<String>,
        facts: Vec<(String, Value)>,
    }

    impl Progress for Recorded {
        fn phase(&mut self, line: &str) {
            self.phases.push(line.to_string());
        }
        fn fact(&mut self, key: &str, value: Value) {
            self.facts.push((key.to_string(), value));
        }
    }

    fn report(outcomes: Vec<SecretOutcome>) -> ReassertReport {
        let n = outcomes.len();
        ReassertReport {
            results: outcomes
                .into_iter()
                .enumerate()
                .map(|(i, o)| {
                    let role = if i + 1 == n {
                        TargetRole::Root
                    } else {
                        TargetRole::Consumer
                    };
                    (role, SecretTarget::new(format!("ns{i}"), "pull"), o)
                })
                .collect(),
        }
    }

    #[test]
    fn the_summary_counts_each_outcome_and_names_adoptions_only_when_there_are_some() {
        let rv = || "1".to_string();
        let r = report(vec![
            SecretOutcome::Created {
                resource_version: rv(),
            },
            SecretOutcome::Updated {
                drift: Drift::DifferentCredential,
                resource_version: rv(),
            },
            SecretOutcome::Unchanged {
                resource_version: rv(),
            },
            SecretOutcome::Unchanged {
                resource_version: rv(),
            },
        ]);
        assert_eq!(
            summary(&r),
            "secrets reasserted: created=1 updated=1 unchanged=2"
        );
        let r = report(vec![SecretOutcome::Adopted {
            resource_version: rv(),
        }]);
        assert_eq!(
            summary(&r),
            "secrets reasserted: created=0 updated=0 unchanged=0 adopted=1"
        );
    }

    #[test]
    fn the_facts_count_outcomes_and_name_each_secret_by_role_without_values() {
        let r = report(vec![
            SecretOutcome::NamespaceMissing,
            SecretOutcome::NotAttempted,
            SecretOutcome::NotAttempted,
        ]);
        let mut p = Recorded::default();
        report_facts(&r, &mut p);
        assert!(p.phases.is_empty());
        assert_eq!(p.facts[0].0, "secret_counts");
        assert_eq!(
            p.facts[0].1,
            json!({ "namespace_missing": 1, "not_attempted": 2 })
        );
        assert_eq!(p.facts[1].0, "secrets");
        assert_eq!(
            p.facts[1].1[2],
            json!({ "namespace": "ns2", "name": "pull", "role": "root", "outcome": "not_attempted" })
        );
    }
}
