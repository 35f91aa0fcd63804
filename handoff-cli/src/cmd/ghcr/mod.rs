//! `flux-handoff ghcr check` and `ghcr reassert`: prove a registry credential, then reassert it
//! into Kubernetes Secrets inside a handoff.
//!
//! 1. Resolve every input (flags over `[ghcr]` config) before anything else: a bad input is
//!    exit 2 with one line naming the field, never a value ([`input`]).
//! 2. Read the credential from an environment variable, a file or stdin (never argv), validate
//!    it, and in GitHub Actions print the `::add-mask::` lines before any other output.
//! 3. Prove it against the registry for every image, with no cluster call ([`check`]).
//! 4. `reassert` only: with targets, acquire the Lease and prove the pause; reassert consumer
//!    Secrets then the root Secret, asserting the Lease before every write; optionally prove a
//!    Flux source pulls with it; resume and release on every exit path ([`reassert`]).

mod check;
mod input;
mod reassert;

use clap::{Args, Subcommand};

use crate::cli::Global;
use crate::failure::Failure;
use crate::output::Output;
use flux_suspend::Cancel;

pub use check::CheckArgs;
pub use reassert::ReassertArgs;
pub(crate) use reassert::{SecretArgs, secret_spec, source_refs};

/// `flux-handoff ghcr ...`.
#[derive(Debug, Args)]
pub struct GhcrArgs {
    #[command(subcommand)]
    pub command: GhcrCommand,
}

/// The `ghcr` subcommands.
#[derive(Debug, Subcommand)]
pub enum GhcrCommand {
    /// Validate the credential and prove it against the registry for each image. Touches no
    /// cluster (needs no kubeconfig). Exit 0 proven, 5 rejected or unreachable, 2 bad input.
    Check(CheckArgs),
    /// Prove the credential (as `check`), then — paused under the handoff Lease when targets
    /// are given — reassert it into consumer Secrets and the root Secret, optionally prove a
    /// Flux source pulls with it, and resume.
    Reassert(Box<ReassertArgs>),
}

impl GhcrArgs {
    /// The command's name for the JSON document.
    pub fn name(&self) -> &'static str {
        match self.command {
            GhcrCommand::Check(_) => "ghcr check",
            GhcrCommand::Reassert(_) => "ghcr reassert",
        }
    }
}

/// Runs `ghcr check` or `ghcr reassert`.
pub async fn run(
    global: &Global,
    args: &GhcrArgs,
    out: &mut Output,
    cancel: Cancel,
) -> Result<u8, Failure> {
    match &args.command {
        GhcrCommand::Check(a) => check::run(global, a, out).await,
        GhcrCommand::Reassert(a) => Box::pin(reassert::run(global, a, out, cancel)).await,
    }
}
