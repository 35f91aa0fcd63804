//! The real Flux Operator (`flux-operator`, `cmd/operator` of
//! `github.com/controlplaneio-fluxcd/flux-operator`), built from the Go module proxy and run
//! beside the real-Flux plane by `cargo xtask ci operator` and `cluster up --flux real
//! --operator` (docs/real-flux.md, "Flux Operator").
//!
//! Upstream's module needs Go 1.27, so every `go` command here runs with
//! `GOTOOLCHAIN=go1.27.3` in its own environment (the go command takes that toolchain from the
//! module proxy); nothing else in the repository changes Go version. The module is built as the
//! main module from a private writable copy of its directory in the Go module cache (no wrapper
//! module: upstream's own `go.mod` and `go.sum` decide the graph), with two changes, both in
//! that throwaway copy only and listed in `xtask/operator/DEVIATIONS.md`: a placeholder
//! `web/dist/index.html` (the module zip lacks the web UI's built files, which `web/embed.go`
//! embeds; the UI is switched off at run time) and one `replace` of a module version the proxy
//! refuses. The binary is cached under `~/.cache/flux-handoff/operator/`, keyed by what
//! decides it (version, toolchain, those changes, the build flags).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::paths;

/// The upstream module and the one version of it the module proxy serves.
pub const MODULE: &str = "github.com/controlplaneio-fluxcd/flux-operator";
pub const VERSION: &str = "v0.59.0";
/// The Go toolchain upstream's `go.mod` needs (`go 1.27.0`), set only for our `go` commands.
pub const TOOLCHAIN: &str = "go1.27.3";
/// Binary, process and state-file stem.
pub const NAME: &str = "flux-operator";
/// `go mod edit -replace` of the build copy: upstream's requirement the proxy refuses (403
/// "This module version is not available") and the newest version it serves.
const REPLACES: [(&str, &str); 1] = [(
    "github.com/google/go-containerregistry/pkg/authn/kubernetes@v0.0.0-20260604213829-6849394e8a65",
    "github.com/google/go-containerregistry/pkg/authn/kubernetes@v0.0.0-20260224031529-85f2bf5f7303",
)];
/// What `web/dist/index.html` of the build copy holds (upstream builds it with npm).
const WEB_PLACEHOLDER: &str =
    "<!doctype html><title>flux-operator web UI not built (flux-handoff xtask)</title>\n";
/// The build's environment and flags, as upstream's `Makefile` `build-only` target has them.
const BUILD_ENV: [(&str, &str); 2] = [("CGO_ENABLED", "0"), ("GOFIPS140", "latest")];
const LDFLAGS: &str = "-s -w -X main.VERSION=v0.59.0";

/// A `go` command with the toolchain upstream needs.
fn go() -> Command {
    let mut cmd = Command::new("go");
    cmd.env("GOTOOLCHAIN", TOOLCHAIN);
    cmd
}

/// The cache key: an FNV hash of everything that decides the binary.
fn key() -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |s: &str| {
        for b in s.bytes().chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    feed(MODULE);
    feed(VERSION);
    feed(TOOLCHAIN);
    for (from, to) in REPLACES {
        feed(from);
        feed(to);
    }
    feed(WEB_PLACEHOLDER);
    for (k, v) in BUILD_ENV {
        feed(k);
        feed(v);
    }
    feed(LDFLAGS);
    h
}

/// Upstream's module directory in the Go module cache (downloaded when missing).
pub fn module_dir() -> anyhow::Result<PathBuf> {
    // Outside any module: the workspace root has no go.mod, the scratch directory neither.
    let cwd = paths::scratch();
    fs::create_dir_all(&cwd)?;
    let out = go()
        .args(["mod", "download", "-json"])
        .arg(format!("{MODULE}@{VERSION}"))
        .current_dir(&cwd)
        .output()
        .context("cannot run `go mod download` (Go on PATH is needed)")?;
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "`go mod download {MODULE}@{VERSION}` answered no JSON: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    match info["Dir"].as_str() {
        Some(dir) if out.status.success() => Ok(PathBuf::from(dir)),
        _ => bail!(
            "cannot download {MODULE}@{VERSION}: {}",
            info["Error"].as_str().unwrap_or("no Dir in its answer")
        ),
    }
}

/// The built binary, building it when missing.
pub fn ensure_built() -> anyhow::Result<PathBuf> {
    let dir = paths::binary_cache()
        .with_file_name("operator")
        .join(format!("{NAME}-{VERSION}-{:016x}", key()));
    let bin = dir.join(NAME);
    if bin.is_file() {
        return Ok(bin);
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    eprintln!(
        "xtask: building {MODULE} {VERSION} (cmd/operator) from Go modules with \
         GOTOOLCHAIN={TOOLCHAIN} (docs/real-flux.md has the cold build's cost; later builds \
         reuse the cache)"
    );
    let work = paths::scratch().join(format!("operator-build-{}", std::process::id()));
    let built = build_in(&module_dir()?, &work, &dir);
    let _ = fs::remove_dir_all(&work);
    fs::rename(built?, &bin)?;
    Ok(bin)
}

/// Copies the module to `work`, makes the two changes, builds; returns the binary (a
/// temporary name in `dir`).
fn build_in(module: &Path, work: &Path, dir: &Path) -> anyhow::Result<PathBuf> {
    let _ = fs::remove_dir_all(work);
    fs::create_dir_all(work.parent().context("work dir without a parent")?)?;
    // The module cache is read-only: a copy we may write to (cp keeps the modes, chmod adds
    // the owner's write bit).
    let copied = Command::new("cp")
        .arg("-r")
        .arg(module)
        .arg(work)
        .status()?;
    let writable = Command::new("chmod")
        .args(["-R", "u+w"])
        .arg(work)
        .status()?;
    if !copied.success() || !writable.success() {
        bail!("copying {} to {} failed", module.display(), work.display());
    }
    let dist = work.join("web").join("dist");
    fs::create_dir_all(&dist)?;
    fs::write(dist.join("index.html"), WEB_PLACEHOLDER)?;
    for (from, to) in REPLACES {
        run(
            go().args(["mod", "edit"])
                .arg(format!("-replace={from}={to}")),
            work,
        )?;
        let module = to.split('@').next().unwrap_or(to);
        // Adds the replacement's sums to the copy's go.sum.
        run(go().args(["mod", "download", module]), work)?;
    }
    let tmp = dir.join(format!("{NAME}.tmp{}", std::process::id()));
    let mut build = go();
    build
        .envs(BUILD_ENV)
        .args(["build", "-trimpath", "-ldflags", LDFLAGS, "-o"])
        .arg(&tmp)
        .arg("./cmd/operator");
    if let Err(e) = run(&mut build, work) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(tmp)
}

fn run(cmd: &mut Command, dir: &Path) -> anyhow::Result<()> {
    let status = cmd
        .current_dir(dir)
        .status()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}

/// Upstream's CRD manifests, `config/crd/bases/*.yaml` of the module (`FluxInstance`,
/// `FluxReport`, `ResourceSet`, `ResourceSetInputProvider`).
pub fn crds() -> anyhow::Result<Vec<PathBuf>> {
    crate::flux::crd_files(&module_dir()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ldflags_version_is_the_module_version() {
        assert!(LDFLAGS.ends_with(&format!("main.VERSION={VERSION}")));
    }

    #[test]
    fn each_replace_keeps_the_module_path() {
        for (from, to) in REPLACES {
            assert_eq!(from.split('@').next(), to.split('@').next());
        }
    }
}
