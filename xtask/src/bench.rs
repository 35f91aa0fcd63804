//! `cargo xtask bench [--quick]`: measured speed and API cost, side by side with the shell way.
//!
//! 1. Build `flux-bench` (suites/bench) and `flux-handoff` (handoff-cli) in release mode, in one
//!    cargo call. When that fails, `flux-bench` alone is built and the footprint scenario is
//!    skipped.
//! 2. Build (or take from the cache) the `flux` CLI for the peer scenario ([`fluxcli`]); when
//!    that fails, one line says why and the scenario reports itself skipped.
//! 3. Start a control plane of its own in `target/flux-handoff/bench-cluster` (never the shared
//!    one of `cluster up` that tests use), without the controller model: `flux-bench` plays
//!    the model in-process, with the phase timings it needs.
//! 4. Run `flux-bench` against it (`FLUX_HANDOFF_KUBECONFIG`); it writes
//!    `target/flux-handoff/bench/{bench.json,fanout.svg}` and prints the table and the
//!    `bench:` lines.
//! 5. Stop the control plane on every exit path (the guard's Drop, and the launcher exits by
//!    itself when our end of its stdin closes).
//!
//! `cargo xtask bench --real [--only C,C]`: `flux-bench` in the dev profile (with the plane's
//! `flux-real-setup`) and the `flux` CLI, then a real-Flux plane of its own in `target/flux-handoff/bench-real-cluster` (`cluster up --flux
//! real`'s, stopped on every exit path), and `flux-bench --real --real-state <dir>`: only the
//! real-Flux scenario (suites/bench/src/bench/real), which runs controllers of its own beside the
//! plane's. It writes `target/flux-handoff/bench/bench-real.json`.
//!
//! Benchmarks never run in `cargo xtask ci`.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};

use crate::{bins, cluster, envtest, fluxcli, paths, proc};

/// `cargo xtask bench [--quick]`.
pub fn run(quick: bool) -> anyhow::Result<()> {
    let root = paths::root();
    let (handoff, flux) = build()?;
    let launcher = envtest::ensure_built()?;
    let plane = cluster::Private::start(&launcher, &paths::scratch().join("bench-cluster"))?;
    let out = paths::scratch().join("bench");
    let mut cmd = Command::new(release_bin("flux-bench"));
    cmd.current_dir(&root)
        .env("FLUX_HANDOFF_KUBECONFIG", &plane.kubeconfig)
        .arg("--out")
        .arg(&out);
    if quick {
        cmd.arg("--quick");
    }
    if let Some(bin) = &handoff {
        cmd.arg("--handoff-bin").arg(bin);
    }
    if let Some(bin) = &flux {
        cmd.arg("--flux-bin").arg(bin);
    }
    let status = cmd.status().context("cannot start flux-bench");
    let stopped = plane.stop();
    let status = status?;
    if !status.success() {
        bail!("flux-bench failed ({status})");
    }
    stopped
}

/// `cargo xtask bench --real [--only C,C]`.
pub fn run_real(only: Option<&str>) -> anyhow::Result<()> {
    let root = paths::root();
    // The dev profile, with the plane's flux-real-setup: these figures are the controllers'
    // (seconds), not the client's (milliseconds), and a release build of the workspace is
    // not needed for them.
    let bench = bins::build(
        &["flux-bench", "realflux"],
        &["flux-bench", "flux-real-setup"],
    )?
    .remove(0);
    let flux = fluxcli::ensure_built()
        .inspect_err(|e| eprintln!("xtask: the flux CLI cases are skipped: {e:#}"))
        .ok();
    let state = paths::scratch().join("bench-real-cluster");
    let plane = cluster::RealPlane::start(&state)?;
    let mut cmd = Command::new(bench);
    cmd.current_dir(&root)
        .env("FLUX_HANDOFF_KUBECONFIG", &plane.kubeconfig)
        .arg("--out")
        .arg(paths::scratch().join("bench"))
        .arg("--real")
        .arg("--real-state")
        .arg(&state);
    if let Some(only) = only {
        cmd.args(["--only", only]);
    }
    if let Some(bin) = &flux {
        cmd.arg("--flux-bin").arg(bin);
    }
    let status = cmd.status().context("cannot start flux-bench");
    let stopped = plane.stop();
    let status = status?;
    if !status.success() {
        bail!("flux-bench --real failed ({status})");
    }
    stopped
}

/// Builds `flux-bench` and `flux-handoff` (release) and finds or builds the `flux` CLI; the
/// release `flux-handoff` and the CLI, each `None` when its build failed (said in one line).
fn build() -> anyhow::Result<(Option<PathBuf>, Option<PathBuf>)> {
    let root = paths::root();
    // One cargo call for both binaries: separate calls would unify features differently and
    // rebuild the shared dependencies each time.
    let both = [
        "build",
        "--release",
        "-p",
        "flux-bench",
        "--bin",
        "flux-bench",
        "-p",
        "handoff-cli",
        "--bin",
        "flux-handoff",
    ];
    let handoff = match proc::run("cargo", &both, &root) {
        Ok(()) => Some(release_bin("flux-handoff")),
        Err(e) => {
            eprintln!("xtask: {e:#}; building flux-bench alone, the footprint scenario is skipped");
            proc::run(
                "cargo",
                &[
                    "build",
                    "--release",
                    "-p",
                    "flux-bench",
                    "--bin",
                    "flux-bench",
                ],
                &root,
            )?;
            None
        }
    };
    let started = std::time::Instant::now();
    let flux = match fluxcli::ensure_built() {
        Ok(bin) => {
            eprintln!(
                "xtask: flux CLI {} ({:.1} s to build or find in the cache)",
                bin.display(),
                started.elapsed().as_secs_f64()
            );
            Some(bin)
        }
        Err(e) => {
            eprintln!("xtask: the flux CLI peer is skipped: {e:#}");
            None
        }
    };
    Ok((handoff, flux))
}

fn release_bin(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| paths::root().join("target"), |d| paths::root().join(d));
    target.join("release").join(name)
}
