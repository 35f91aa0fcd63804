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

/// The evidence chosen by flag, else by `[recovery] evidence`, else `lease` (exit 2 for a bad
/// value in the file).
pub fn resolve(flag: Option<Evidence>, file: &RecoveryTable) -> Result<Evidence, Failure> {
    let flag = flag.map(|e| match e {
        Evidence::Lease => liveness::Evidence::Lease,
        Evidence::Github => liveness::Evidence::Github,
    });
    match file.evidence(flag).map_err(Failure::usage)? {
        liveness::Evidence::Github => Ok(Evidence::Github),
        _ => Ok(Evidence::Lease),
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
