//! `cargo xtask chaos [--quick]`: the real `flux-handoff` binary under crashes, lost responses
//! and concurrent runs, through testkit's fault-injecting proxy.
//!
//! 1. Build `flux-chaos` (testkit) and `flux-handoff` (handoff-cli) in release mode.
//! 2. Start a control plane of its own in `target/flux-handoff/chaos-cluster` (never the shared
//!    one of `cluster up` that tests use); `flux-chaos` plays the controller model in-process,
//!    one seeded namespace per scenario point.
//! 3. Run `flux-chaos` against it (`FLUX_HANDOFF_KUBECONFIG`); it prints one `chaos:` line per
//!    scenario and exits non-zero on any violation.
//! 4. Stop the control plane on every exit path (the guard's Drop, and the launcher exits by
//!    itself when our end of its stdin closes).
//!
//! Never part of `cargo xtask ci`. See docs/chaos.md.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};

use crate::{cluster, envtest, paths, proc};

/// `cargo xtask chaos [--quick]`.
pub fn run(quick: bool) -> anyhow::Result<()> {
    let root = paths::root();
    // One invocation: features unify once, so neither build invalidates the other.
    proc::run(
        "cargo",
        &[
            "build",
            "--release",
            "-p",
            "testkit",
            "--bin",
            "flux-chaos",
            "-p",
            "handoff-cli",
            "--bin",
            "flux-handoff",
        ],
        &root,
    )?;
    let launcher = envtest::ensure_built()?;
    let plane = cluster::Private::start(&launcher, &paths::scratch().join("chaos-cluster"))?;
    let mut cmd = Command::new(release_bin("flux-chaos"));
    cmd.current_dir(&root)
        .env("FLUX_HANDOFF_KUBECONFIG", &plane.kubeconfig)
        .arg("--out")
        .arg(paths::scratch().join("chaos"))
        .arg("--handoff-bin")
        .arg(release_bin("flux-handoff"));
    if quick {
        cmd.arg("--quick");
    }
    let status = cmd.status().context("cannot start flux-chaos");
    let stopped = plane.stop();
    let status = status?;
    if !status.success() {
        bail!("flux-chaos found violations or failed ({status})");
    }
    stopped
}

fn release_bin(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| paths::root().join("target"), |d| paths::root().join(d));
    target.join("release").join(name)
}
