//! `ghcr check`: read, validate, mask and prove the credential — no cluster I/O at all.

use clap::Args;
use ghcr_auth::registry::{ProofOutcome, ProverOptions, RegistryProver};
use ghcr_auth::{DockerConfig, GhcrError, mask};
use secrecy::SecretString;
use serde_json::json;

use super::input::{self, CredentialArgs, CredentialInput};
use crate::cli::Global;
use crate::failure::{Failure, chain};
use crate::output::Output;
use crate::{config, exit};

/// `flux-handoff ghcr check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub credential: CredentialArgs,
}

/// Runs `ghcr check`.
pub async fn run(global: &Global, args: &CheckArgs, out: &mut Output) -> Result<u8, Failure> {
    let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
    let input = input::resolve(&args.credential, file.ghcr.as_ref()).map_err(Failure::usage)?;
    prove(&input, out).await?;
    Ok(exit::SUCCESS)
}

/// Loads and validates the credential, masks it in GitHub Actions (before any other output),
/// and proves it for every image (plus the negative check when asked). Exit 2 for a bad
/// credential, 5 for a registry that refuses or cannot be reached.
pub async fn prove(input: &CredentialInput, out: &mut Output) -> Result<DockerConfig, Failure> {
    let config = DockerConfig::load(&input.source, &input.format).map_err(|e| load_failure(&e))?;
    mask::mask_in_github_actions(&config, &mut std::io::stderr())
        .map_err(|e| Failure::new(exit::INTERNAL, format!("writing the mask commands: {e}")))?;
    let prover = RegistryProver::new(ProverOptions {
        allow_insecure_loopback: input.allow_insecure_loopback,
        ..ProverOptions::default()
    })
    .map_err(|e| Failure::new(exit::INTERNAL, chain(&e)))?;
    let results = prover
        .prove_all(&config, &input.images)
        .await
        .map_err(|e| registry_failure(&e))?;
    out.fact(
        "images",
        json!(
            results
                .iter()
                .map(|(image, outcome)| json!({
                    "image": image.to_string(),
                    "proven": outcome.is_proven(),
                    "outcome": outcome.to_string(),
                }))
                .collect::<Vec<_>>()
        ),
    );
    let refused: Vec<String> = results
        .iter()
        .filter(|(_, o)| !o.is_proven())
        .map(|(image, outcome)| format!("{image}: {outcome}"))
        .collect();
    if !refused.is_empty() {
        return Err(Failure::new(
            exit::REGISTRY,
            format!("registry refused the credential: {}", refused.join("; ")),
        ));
    }
    out.phase(&format!(
        "credential proven for {} image(s)",
        input.images.len()
    ));
    if input.negative_check {
        negative_check(&prover, &config, input, out).await?;
    }
    Ok(config)
}

/// Proves a wrong password is refused for every image: otherwise the registry did not really
/// check the credential and the proof proves nothing.
async fn negative_check(
    prover: &RegistryProver,
    config: &DockerConfig,
    input: &CredentialInput,
    out: &mut Output,
) -> Result<(), Failure> {
    let mut accepted = Vec::new();
    for image in &input.images {
        let Some(auth) = config.credential_for(image.registry()) else {
            continue;
        };
        let wrong = SecretString::from(format!(
            "flux-handoff-negative-check-{}",
            ghcr_auth::source::new_nonce()
        ));
        let wrong = DockerConfig::from_token(image.registry(), auth.username(), wrong)
            .map_err(|e| Failure::new(exit::INTERNAL, chain(&e)))?;
        let outcome = prover
            .prove(&wrong, image)
            .await
            .map_err(|e| registry_failure(&e))?;
        if matches!(
            outcome,
            ProofOutcome::Proven { .. } | ProofOutcome::NoChallenge { .. }
        ) {
            accepted.push(image.to_string());
        }
    }
    if !accepted.is_empty() {
        return Err(Failure::new(
            exit::REGISTRY,
            format!(
                "negative check failed: the registry accepted a wrong password for {}; its \
                 proof proves nothing",
                accepted.join(", ")
            ),
        ));
    }
    out.phase(&format!(
        "negative check: a wrong password is refused for {} image(s)",
        input.images.len()
    ));
    Ok(())
}

fn load_failure(e: &GhcrError) -> Failure {
    let code = match e {
        GhcrError::ReadCredential { .. }
        | GhcrError::CredentialMissing { .. }
        | GhcrError::InvalidCredential(_)
        | GhcrError::InvalidImageRef { .. } => exit::USAGE,
        _ => exit::INTERNAL,
    };
    Failure::new(code, chain(e))
}

fn registry_failure(e: &GhcrError) -> Failure {
    Failure::new(
        exit::REGISTRY,
        format!("registry unreachable: {}", chain(e)),
    )
}
