//! `flux-handoff doctor`: read-only preflight.

use clap::Args;

use crate::cli::{Global, TargetArgs};
use crate::failure::Failure;
use crate::output::Output;

/// `doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub targets: TargetArgs,
}

pub async fn run(_global: &Global, _args: &DoctorArgs, _out: &mut Output) -> Result<u8, Failure> {
    Ok(0)
}
