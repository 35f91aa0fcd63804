//! actionlint on the action, this repository's workflows and the workflow examples: built from
//! Go modules (`github.com/rhysd/actionlint/cmd/actionlint` at [`VERSION`]), cached by version
//! beside the API server launcher, and run on every `.github/workflows/*.yml` and
//! `docs/*.yml`.
//!
//! actionlint checks a local action (`uses: ./flux-handoff`, how the action example checks this
//! repository out) against its `action.yml` — inputs, `runs.using`, the files it names — but
//! only inside a project, which it recognises by a `.git` beside a `.github/workflows`
//! directory. The examples check this repository out as `flux-handoff/`, so the lint runs in a
//! scratch project (`target/flux-handoff/actionlint`) whose `docs`, `flux-handoff` and each
//! `.github/workflows/<file>` are links to this checkout; the paths it reports are the
//! repository's (`docs/<file>.yml`, `.github/workflows/<file>.yml`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::paths;

/// The actionlint release built (one the Go module proxy serves).
pub const VERSION: &str = "v1.7.12";

/// Builds actionlint when it is not cached yet, then lints every `.github/workflows/*.yml` and
/// `docs/*.yml` (and through the action example, `action.yml`).
pub fn run() -> anyhow::Result<()> {
    let bin = ensure_built()?;
    let root = paths::root();
    let project = paths::scratch().join("actionlint");
    let _ = fs::remove_dir_all(&project);
    for dir in [
        project.join(".git"),
        project.join(".github").join("workflows"),
    ] {
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::os::unix::fs::symlink(root.join("docs"), project.join("docs"))?;
    std::os::unix::fs::symlink(&root, project.join("flux-handoff"))?;
    let mut names = Vec::new();
    for dir in [".github/workflows", "docs"] {
        let found = workflows(&root.join(dir))?;
        if found.is_empty() {
            bail!("no workflow (*.yml) under {dir}/");
        }
        for p in found {
            let name = format!(
                "{dir}/{}",
                p.file_name().unwrap_or_default().to_string_lossy()
            );
            if dir != "docs" {
                std::os::unix::fs::symlink(&p, project.join(&name))?;
            }
            names.push(name);
        }
    }
    eprintln!("xtask: $ actionlint {}", names.join(" "));
    let status = Command::new(&bin)
        .args(&names)
        .current_dir(&project)
        .status()
        .with_context(|| format!("cannot run {}", bin.display()))?;
    if !status.success() {
        bail!("actionlint found problems ({status})");
    }
    Ok(())
}

/// The cached actionlint binary of [`VERSION`], built with `go install` when missing.
pub fn ensure_built() -> anyhow::Result<PathBuf> {
    let dir = paths::binary_cache()
        .parent()
        .map_or_else(|| paths::scratch().join("cache"), Path::to_path_buf)
        .join("actionlint")
        .join(VERSION);
    let bin = dir.join("actionlint");
    if bin.is_file() {
        return Ok(bin);
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    eprintln!(
        "xtask: building actionlint {VERSION} from Go modules (once; cached in {})",
        dir.display()
    );
    let tmp = dir.join(format!("gobin.tmp{}", std::process::id()));
    let status = Command::new("go")
        .args([
            "install",
            "-trimpath",
            &format!("github.com/rhysd/actionlint/cmd/actionlint@{VERSION}"),
        ])
        .env("GOBIN", &tmp)
        .status()
        .context("cannot run `go` (Go is needed to build actionlint)")?;
    if !status.success() {
        let _ = fs::remove_dir_all(&tmp);
        bail!("building actionlint {VERSION} failed ({status})");
    }
    fs::rename(tmp.join("actionlint"), &bin)?;
    let _ = fs::remove_dir_all(&tmp);
    Ok(bin)
}

/// The workflow files directly under `dir`, sorted.
fn workflows(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yml" || x == "yaml"))
        .collect();
    files.sort();
    Ok(files)
}
