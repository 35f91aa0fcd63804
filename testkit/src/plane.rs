//! Finding (or starting) the one control plane a test run shares.
//!
//! nextest runs every test in its own process, so no test starts a server of its own:
//! - under `cargo xtask ci`, `FLUX_HANDOFF_KUBECONFIG` names the private control plane of that
//!   run, which xtask stops afterwards;
//! - otherwise the first test process takes `target/flux-handoff/cluster.lock`, starts the shared
//!   control plane with `cargo xtask cluster up --detach` (or finds it running), and the rest
//!   reuse it. It stays up for the next run; `cargo xtask cluster down` stops it.

use std::fs::{self, File};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, bail};

/// Environment variable naming the kubeconfig of the control plane to use.
pub const KUBECONFIG_ENV: &str = "FLUX_HANDOFF_KUBECONFIG";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit lives one level below the workspace root")
        .to_path_buf()
}

/// The kubeconfig path of the shared control plane (memoised per process).
pub fn kubeconfig() -> anyhow::Result<PathBuf> {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    if let Some(p) = PATH.get() {
        return Ok(p.clone());
    }
    let path = match std::env::var_os(KUBECONFIG_ENV) {
        Some(p) => PathBuf::from(p),
        None => start_or_reuse()?,
    };
    Ok(PATH.get_or_init(|| path).clone())
}

fn start_or_reuse() -> anyhow::Result<PathBuf> {
    let scratch = root().join("target").join("flux-handoff");
    fs::create_dir_all(&scratch)?;
    let lock = File::create(scratch.join("cluster.lock"))?;
    lock.lock().context("locking the shared control plane")?;
    // `cluster up --detach` reuses a running control plane and only starts one when needed.
    let out = Command::new(env!("CARGO"))
        .args(["xtask", "cluster", "up", "--detach"])
        .current_dir(root())
        .output()
        .context("running `cargo xtask cluster up --detach`")?;
    drop(lock);
    if !out.status.success() {
        bail!(
            "`cargo xtask cluster up --detach` failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("kubeconfig="))
        .map(PathBuf::from)
        .with_context(|| format!("no kubeconfig= in the ready line: {stdout}"))
}
