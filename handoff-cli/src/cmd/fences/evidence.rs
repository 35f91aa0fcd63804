//! Where the evidence that a holder is gone comes from: the Lease, watched (default), or the
//! holder's CI run, asked of GitHub (`--evidence github`, `[recovery] evidence = "github"`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::ValueEnum;
use flux_fence::liveness::{GithubConfig, GithubRuns, LivenessSource};

use crate::config::RecoveryConfig;
use crate::failure::Failure;

/// `--evidence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Evidence {
    /// Watch the Lease for one full duration.
    Lease,
    /// Ask GitHub whether the holder's exact run attempt is completed.
    Github,
}

/// The evidence chosen by flag, else by `[recovery] evidence`, else `lease`.
pub fn resolve(flag: Option<Evidence>, file: &RecoveryConfig) -> Result<Evidence, Failure> {
    if let Some(e) = flag {
        return Ok(e);
    }
    match file.evidence.as_deref() {
        None | Some("lease") => Ok(Evidence::Lease),
        Some("github") => Ok(Evidence::Github),
        Some(other) => Err(Failure::usage(format!(
            "[recovery] evidence = {other:?}: expected \"lease\" or \"github\""
        ))),
    }
}

/// The GitHub source from the environment (`GITHUB_REPOSITORY`, `GITHUB_API_URL`, and the
/// token from `token_file`, else `[recovery] github_token_file`, else `GITHUB_TOKEN`). Exit 2
/// with one line (never the token), starting with `flag`, when something is missing.
pub fn github(
    flag: &str,
    token_file: Option<&Path>,
    file: &RecoveryConfig,
) -> Result<Arc<dyn LivenessSource>, Failure> {
    let path: Option<PathBuf> = token_file
        .map(Path::to_path_buf)
        .or_else(|| file.github_token_file.clone());
    let cfg = GithubConfig::from_env(path.as_deref())
        .map_err(|e| Failure::usage(format!("{flag}: {e}")))?;
    let runs = GithubRuns::new(cfg).map_err(|e| Failure::usage(format!("{flag}: {e}")))?;
    Ok(Arc::new(runs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_then_the_config_file_then_lease() {
        let file = |e: Option<&str>| RecoveryConfig {
            evidence: e.map(str::to_string),
            ..RecoveryConfig::default()
        };
        let table = [
            (None, file(None), Some(Evidence::Lease)),
            (None, file(Some("lease")), Some(Evidence::Lease)),
            (None, file(Some("github")), Some(Evidence::Github)),
            (
                Some(Evidence::Lease),
                file(Some("github")),
                Some(Evidence::Lease),
            ),
            (Some(Evidence::Github), file(None), Some(Evidence::Github)),
            (None, file(Some("gitlab")), None),
        ];
        for (flag, f, want) in table {
            assert_eq!(resolve(flag, &f).ok(), want, "{flag:?} {f:?}");
        }
    }
}
