//! The chaos scenarios `flux-chaos` runs (issue 8, first part): the real `flux-handoff` binary
//! against a control plane of its own, through the fault-injecting proxy.
//!
//! 1. [`discover`]: one clean `run --target infrastructure -- true`; its ordered mutating
//!    requests are the points k = 1..N, and the annotation keys it changed are what a run is
//!    meant to change (the retire nonce); everything else must come back exactly.
//! 2. [`crash`]: SIGKILL after mutation k; `fences` lists every fence left; `fences recover
//!    --yes --include-paused` after the Lease expired restores the pre-run spec and annotations.
//! 3. [`lost`]: the response of mutation k is dropped; the run completes or fails closed with
//!    everything it holds listed; no write repeated without a re-read; recovery restores.
//! 4. [`concurrency`]: n `pause` runs at once: exactly one wins, the others exit 3.

pub mod cell;
pub mod concurrency;
pub mod crash;
pub mod discover;
pub mod lost;
pub mod recorder;

use std::path::PathBuf;
use std::time::Duration;

/// What every scenario needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `flux-handoff` binary under test.
    pub bin: PathBuf,
    /// Per-cell scratch files (kubeconfigs, config files).
    pub scratch: PathBuf,
    /// Lease duration written to each cell's config file (short, so recovery waits little).
    pub lease_seconds: u64,
    /// Rounds per concurrency size.
    pub rounds: usize,
    /// Bound on one CLI run.
    pub run_bound: Duration,
}

/// Waits for `child` within `bound` (it is killed when the bound passes: `kill_on_drop`);
/// (exit code, stdout, stderr).
pub async fn finish(
    child: tokio::process::Child,
    bound: Duration,
) -> anyhow::Result<(i32, String, String)> {
    match tokio::time::timeout(bound, child.wait_with_output()).await {
        Ok(out) => {
            let out = out?;
            Ok((
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ))
        }
        Err(_) => anyhow::bail!("the CLI did not finish within {bound:?}"),
    }
}
