//! Where the evidence that a holder is gone comes from: the Lease, watched (default), or the
//! holder's CI run, asked of GitHub (`--evidence github`, `[recovery] evidence = "github"`;
//! [`flux_fence::liveness::RecoveryTable`]).

use std::path::Path;
use std::sync::Arc;

use clap::ValueEnum;
use flux_fence::liveness::{self, LivenessSource, RecoveryTable};

use crate::failure::Failure;

/// `--evidence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Evidence {
    /// Watch the Lease for one full duration.
    Lease,
    /// Ask GitHub whether the holder's exact run attempt is completed.
    Github,
}

/// Whether GitHub is asked: by flag, else by `[recovery] evidence`, else not (exit 2 for a
/// bad value in the file).
pub fn asks_github(flag: Option<Evidence>, file: &RecoveryTable) -> Result<bool, Failure> {
    match flag {
        Some(e) => Ok(e == Evidence::Github),
        None => Ok(file.evidence(None).map_err(Failure::usage)? == liveness::Evidence::Github),
    }
}

/// The GitHub source from the environment; exit 2 with one line (never the token), starting
/// with `flag`, when something is missing.
pub fn github(
    flag: &str,
    token_file: Option<&Path>,
    file: &RecoveryTable,
) -> Result<Arc<dyn LivenessSource>, Failure> {
    file.github(token_file)
        .map_err(|e| Failure::usage(format!("{flag}: {e}")))
}
