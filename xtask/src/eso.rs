//! The real External Secrets Operator, built from Go modules like the Flux controllers: the
//! wrapper module `xtask/eso/external-secrets` (see `xtask/eso/DEVIATIONS.md`) builds
//! `github.com/external-secrets/external-secrets` unchanged; the binary is cached under
//! `~/.cache/flux-handoff/eso/`, keyed by the wrapper's `go.mod`/`go.sum` and `go version`.
//!
//! `cargo xtask eso prepare` builds it when missing and prints `bin=<path> crds=<dir>`
//! (upstream's `config/crds/bases` in the Go module cache); the ESO tests (testkit `eso`)
//! install those CRDs into their control plane and run the binary beside it.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};

use crate::{envtest, paths};

/// The upstream module and its version (keep in step with the wrapper's `go.mod`).
pub const MODULE: &str = "github.com/external-secrets/external-secrets";
pub const VERSION: &str = "v0.16.2";
const NAME: &str = "external-secrets";

fn src() -> PathBuf {
    paths::root().join("xtask").join("eso").join(NAME)
}

/// The built binary, building it when missing.
pub fn ensure_built() -> anyhow::Result<PathBuf> {
    let src = src();
    let key = envtest::source_key(&src)?;
    let dir = paths::flux_cache()
        .with_file_name("eso")
        .join(format!("{NAME}-{VERSION}-{key:016x}"));
    let bin = dir.join(NAME);
    if bin.is_file() {
        return Ok(bin);
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    eprintln!(
        "xtask: building {MODULE} {VERSION} from Go modules (cold: about 45 minutes measured on 2 shared \
         cores; later builds reuse the cache)"
    );
    let tmp = dir.join(format!("{NAME}.tmp{}", std::process::id()));
    let status = Command::new("go")
        .args(["build", "-trimpath", "-ldflags", "-s -w", "-o"])
        .arg(&tmp)
        .arg(MODULE)
        .current_dir(&src)
        .status()
        .context("cannot run `go` (Go 1.26 is needed to build External Secrets)")?;
    if !status.success() {
        let _ = fs::remove_file(&tmp);
        bail!("building {MODULE} from xtask/eso/{NAME} failed ({status})");
    }
    fs::rename(&tmp, &bin)?;
    Ok(bin)
}

/// Upstream's CRD directory in the Go module cache (downloaded when missing).
pub fn crds() -> anyhow::Result<PathBuf> {
    let dir = || -> anyhow::Result<Option<PathBuf>> {
        let out = Command::new("go")
            .args(["list", "-m", "-f", "{{.Dir}}", MODULE])
            .current_dir(src())
            .output()
            .context("cannot run `go list`")?;
        let dir = String::from_utf8(out.stdout)?.trim().to_string();
        Ok((out.status.success() && !dir.is_empty()).then(|| PathBuf::from(dir)))
    };
    let module = match dir()? {
        Some(d) if d.is_dir() => d,
        _ => {
            let _ = Command::new("go")
                .args(["mod", "download", MODULE])
                .current_dir(src())
                .status();
            dir()?.with_context(|| format!("cannot locate {MODULE}@{VERSION}"))?
        }
    };
    let bases = module.join("config").join("crds").join("bases");
    if !bases.is_dir() {
        bail!("{} is missing", bases.display());
    }
    Ok(bases)
}

/// `cargo xtask eso prepare`: build (cached) and print `bin=<path> crds=<dir>`.
pub fn prepare() -> anyhow::Result<()> {
    let bin = ensure_built()?;
    let crds = crds()?;
    println!("bin={} crds={}", bin.display(), crds.display());
    Ok(())
}
