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

/// The workspace root.
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit lives one level below the workspace root")
        .to_path_buf()
}

/// One kind of shared control plane: how a test process finds it or starts it.
pub(crate) struct Shared {
    /// Environment variable naming its kubeconfig (set by xtask for a private run).
    pub env: &'static str,
    /// Lock file under `target/flux-handoff` held while it is started.
    pub lock: &'static str,
    /// The arguments of `cargo xtask` that start it (or find it running) and print its
    /// ready line.
    pub up: &'static [&'static str],
    /// `FLUX_HANDOFF_CLUSTER_DIR` for it, when not the default.
    pub dir: Option<&'static str>,
}

impl Shared {
    /// `$env`, else the running one, else one started now under the lock; memoised in `cell`.
    pub(crate) fn kubeconfig(&self, cell: &OnceLock<PathBuf>) -> anyhow::Result<PathBuf> {
        if let Some(p) = cell.get() {
            return Ok(p.clone());
        }
        let path = match std::env::var_os(self.env) {
            Some(p) => PathBuf::from(p),
            None => self.start_or_reuse()?,
        };
        Ok(cell.get_or_init(|| path).clone())
    }

    fn start_or_reuse(&self) -> anyhow::Result<PathBuf> {
        let scratch = root().join("target").join("flux-handoff");
        fs::create_dir_all(&scratch)?;
        let lock = File::create(scratch.join(self.lock))?;
        lock.lock()
            .with_context(|| format!("locking {}", self.lock))?;
        let shown = format!("cargo xtask {}", self.up.join(" "));
        let mut cmd = Command::new(env!("CARGO"));
        cmd.arg("xtask").args(self.up).current_dir(root());
        if let Some(dir) = self.dir {
            cmd.env("FLUX_HANDOFF_CLUSTER_DIR", dir);
        }
        let out = cmd.output().with_context(|| format!("running `{shown}`"))?;
        drop(lock);
        if !out.status.success() {
            bail!(
                "`{shown}` failed:\n{}",
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
}

/// The kubeconfig path of the shared control plane (memoised per process).
pub fn kubeconfig() -> anyhow::Result<PathBuf> {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    // `cluster up --detach` reuses a running control plane and only starts one when needed.
    Shared {
        env: KUBECONFIG_ENV,
        lock: "cluster.lock",
        up: &["cluster", "up", "--detach"],
        dir: None,
    }
    .kubeconfig(&PATH)
}
