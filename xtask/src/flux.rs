//! Building the real Flux controllers from the wrapper modules in `xtask/flux/`, cached by
//! content like the API server (see `xtask/flux/DEVIATIONS.md` for how their module graphs
//! differ from upstream's).

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};

use crate::{envtest, paths};

/// One controller: its wrapper module directory (under `xtask/flux/`) and upstream module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Controller {
    /// Directory, binary and process name, e.g. `kustomize-controller`.
    pub name: &'static str,
    /// The upstream Go module whose main package is built.
    pub module: &'static str,
    /// Its version; keep in step with the wrapper's `go.mod`.
    pub version: &'static str,
}

pub const KUSTOMIZE: Controller = Controller {
    name: "kustomize-controller",
    module: "github.com/fluxcd/kustomize-controller",
    version: "v1.9.6",
};

pub const SOURCE: Controller = Controller {
    name: "source-controller",
    module: "github.com/fluxcd/source-controller",
    version: "v1.9.6",
};

pub const HELM: Controller = Controller {
    name: "helm-controller",
    module: "github.com/fluxcd/helm-controller",
    version: "v1.6.4",
};

/// notification-controller of the same Flux release (v1.9.x; v1.9.4, which flux2 v2.9.5
/// ships, is refused by the module proxy: xtask/flux/DEVIATIONS.md). Its event server receives
/// `flux-handoff --events-addr` events in the `flux_events_` tests.
pub const NOTIFICATION: Controller = Controller {
    name: "notification-controller",
    module: "github.com/fluxcd/notification-controller",
    version: "v1.9.3",
};

/// The controllers `cluster up --flux real` runs, in start order.
pub const CONTROLLERS: [Controller; 4] = [SOURCE, KUSTOMIZE, HELM, NOTIFICATION];

impl Controller {
    fn src(self) -> PathBuf {
        paths::flux_src().join(self.name)
    }

    /// The path of the binary built from the current wrapper, building it when missing.
    pub fn ensure_built(self) -> anyhow::Result<PathBuf> {
        let src = self.src();
        let key = envtest::source_key(&src)?;
        let dir = paths::flux_cache().join(format!("{}-{}-{key:016x}", self.name, self.version));
        let bin = dir.join(self.name);
        if bin.is_file() {
            return Ok(bin);
        }
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        eprintln!(
            "xtask: building {} {} from Go modules (a cold build takes several minutes on 2 \
             cores; later builds reuse the cache)",
            self.name, self.version
        );
        let tmp = dir.join(format!("{}.tmp{}", self.name, std::process::id()));
        let status = Command::new("go")
            .args(["build", "-trimpath", "-ldflags", "-s -w", "-o"])
            .arg(&tmp)
            .arg(self.module)
            .current_dir(&src)
            .status()
            .context("cannot run `go` (Go 1.26 is needed to build the Flux controllers)")?;
        if !status.success() {
            let _ = fs::remove_file(&tmp);
            bail!(
                "building {} from xtask/flux/{} failed ({status})",
                self.module,
                self.name
            );
        }
        fs::rename(&tmp, &bin)?;
        Ok(bin)
    }

    /// The upstream module's directory in the Go module cache (downloaded when missing).
    pub fn module_dir(self) -> anyhow::Result<PathBuf> {
        if let Some(dir) = self.cached_module_dir()? {
            return Ok(dir);
        }
        let dl = Command::new("go")
            .args(["mod", "download", self.module])
            .current_dir(self.src())
            .status()
            .context("cannot run `go mod download`")?;
        match self.cached_module_dir()? {
            Some(dir) if dl.success() => Ok(dir),
            _ => bail!(
                "cannot locate {}@{} in the Go module cache",
                self.module,
                self.version
            ),
        }
    }

    fn cached_module_dir(self) -> anyhow::Result<Option<PathBuf>> {
        let out = Command::new("go")
            .args(["list", "-m", "-f", "{{.Dir}}", self.module])
            .current_dir(self.src())
            .output()
            .context("cannot run `go list`")?;
        let dir = String::from_utf8(out.stdout)?.trim().to_string();
        Ok((out.status.success() && !dir.is_empty()).then(|| PathBuf::from(dir)))
    }

    /// The upstream CRD manifests, `config/crd/bases/*.yaml` of the module.
    pub fn crds(self) -> anyhow::Result<Vec<PathBuf>> {
        crd_files(&self.module_dir()?)
    }
}

/// The CRD manifests of a Go module's directory, `config/crd/bases/*.yaml`, sorted.
pub fn crd_files(module: &std::path::Path) -> anyhow::Result<Vec<PathBuf>> {
    let bases = module.join("config").join("crd").join("bases");
    let mut files: Vec<PathBuf> = fs::read_dir(&bases)
        .with_context(|| format!("reading {}", bases.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    Ok(files)
}
