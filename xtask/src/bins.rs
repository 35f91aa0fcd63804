//! Building this workspace's binaries that xtask runs as processes.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};

use crate::paths;

/// `cargo build -p <package>... --bin <bin>...` (debug profile, quietly, one cargo call so
/// features unify once); returns the binaries' paths.
pub fn build(packages: &[&str], bins: &[&str]) -> anyhow::Result<Vec<PathBuf>> {
    let mut cmd = Command::new(paths::cargo());
    cmd.args(["build", "--quiet"]);
    for p in packages {
        cmd.args(["-p", p]);
    }
    for b in bins {
        cmd.args(["--bin", b]);
    }
    eprintln!(
        "xtask: $ cargo build -p {} --bin {}",
        packages.join(" -p "),
        bins.join(" --bin ")
    );
    let status = cmd
        .current_dir(paths::root())
        .status()
        .context("cannot run cargo")?;
    if !status.success() {
        bail!("building {} failed ({status})", bins.join(", "));
    }
    let paths: Vec<PathBuf> = bins.iter().map(|b| paths::debug_bin(b)).collect();
    if let Some(missing) = paths.iter().find(|p| !p.is_file()) {
        bail!("cargo built, but {} is missing", missing.display());
    }
    Ok(paths)
}
