//! `flux-handoff ghcr check` and `ghcr reassert`: prove a registry credential, then reassert it
//! into Kubernetes Secrets inside a handoff. The rules and steps live in ghcr-auth
//! ([`ghcr_auth::CredentialInput`]: the inputs, [`ghcr_auth::check_credential`] and
//! [`ghcr_auth::route::FanoutRun`]: the proof and the work), the settings in
//! `handoff_app::settings` (flags over `[ghcr]`); here are the flags ([`input`]), the output
//! and the exit codes.

mod dry_run;
mod input;
mod reassert;

use clap::{Args, Subcommand};
use ghcr_auth::credential::DockerConfig;
use ghcr_auth::{CredentialInput, FlowError, Progress};

use crate::args::Global;
use crate::exit;
use crate::failure::{Failure, chain};
use crate::output::Output;
use flux_suspend::Cancel;
use handoff_app::config;

use input::CredentialArgs;
pub(crate) use input::{FanoutArgs, SecretArgs, layer};
pub use reassert::ReassertArgs;

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

/// `flux-handoff ghcr check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub credential: CredentialArgs,
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
        GhcrCommand::Check(a) => {
            let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
            let flags = crate::settings::ghcr_flags(global, layer(Some(&a.credential), None));
            let input = handoff_app::settings::ghcr_credential(&flags, &file.tables())
                .map_err(Failure::usage)?;
            check(&input, out).await.map(|_| exit::SUCCESS)
        }
        GhcrCommand::Reassert(a) => Box::pin(reassert::run(global, a, out, cancel)).await,
    }
}

/// Reads, validates, masks (before any other output) and proves the credential; no cluster I/O.
async fn check(input: &CredentialInput, out: &mut Output) -> Result<DockerConfig, Failure> {
    let check = ghcr_auth::check_credential(input, std::io::stderr(), out);
    check.await.map_err(|e| failure(&e))
}

/// ghcr-auth reports its phases and facts into the output.
impl Progress for Output {
    fn phase(&mut self, line: &str) {
        Output::phase(self, line);
    }
    fn fact(&mut self, key: &str, value: serde_json::Value) {
        Output::fact(self, key, value);
    }
}

/// The exit code of each class of failure, and the error's chain as the line.
fn failure(e: &FlowError) -> Failure {
    Failure::new(exit::code(e.class()), chain(e))
}
