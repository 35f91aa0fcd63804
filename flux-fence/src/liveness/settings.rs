//! The `[recovery]` table of the config file: which evidence recovery uses to prove a holder
//! gone, and where the GitHub token comes from.

use std::path::PathBuf;
#[cfg(feature = "github")]
use std::{path::Path, sync::Arc};

use serde::Deserialize;

#[cfg(feature = "github")]
use super::{GithubConfig, GithubRuns, LivenessSource};

/// Where the evidence that a holder is gone comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Evidence {
    /// Watch the Lease for one full duration (the default).
    Lease,
    /// Ask GitHub whether the holder's exact run attempt is completed.
    Github,
}

/// `[recovery]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RecoveryTable {
    /// `lease` (default) or `github`.
    pub evidence: Option<String>,
    /// The file holding the GitHub token (default: `GITHUB_TOKEN`).
    pub github_token_file: Option<PathBuf>,
    /// Recover a finished CI run's hold before starting a handoff.
    pub recover_finished_runs: Option<bool>,
}

impl RecoveryTable {
    /// The evidence chosen by `flag`, else by this table, else [`Evidence::Lease`].
    ///
    /// # Errors
    ///
    /// One line naming the key, for a value other than `lease` or `github`.
    pub fn evidence(&self, flag: Option<Evidence>) -> Result<Evidence, String> {
        if let Some(e) = flag {
            return Ok(e);
        }
        match self.evidence.as_deref() {
            None | Some("lease") => Ok(Evidence::Lease),
            Some("github") => Ok(Evidence::Github),
            Some(other) => Err(format!(
                "[recovery] evidence = {other:?}: expected \"lease\" or \"github\""
            )),
        }
    }

    /// The GitHub source from the environment (`GITHUB_REPOSITORY`, `GITHUB_API_URL`), the
    /// token read from `token_file`, else this table's `github_token_file`, else
    /// `GITHUB_TOKEN`.
    ///
    /// # Errors
    ///
    /// One line (never the token) when something is missing.
    #[cfg(feature = "github")]
    pub fn github(&self, token_file: Option<&Path>) -> Result<Arc<dyn LivenessSource>, String> {
        let path = token_file.or(self.github_token_file.as_deref());
        let runs = GithubRuns::new(GithubConfig::from_env(path)?)?;
        Ok(Arc::new(runs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_then_the_table_then_lease() {
        let file = |e: Option<&str>| RecoveryTable {
            evidence: e.map(str::to_string),
            ..RecoveryTable::default()
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
            assert_eq!(f.evidence(flag).ok(), want, "{flag:?} {f:?}");
        }
    }
}
