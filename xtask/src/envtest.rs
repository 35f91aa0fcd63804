//! Building the Go launcher of the real kube-apiserver (xtask/envtest), cached by content.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::paths;

/// The Kubernetes version the launcher embeds; keep in step with xtask/envtest/go.mod.
pub const KUBE_VERSION: &str = "v1.36.3";

/// Returns the path of a launcher built from the current sources, building it when missing.
pub fn ensure_built() -> anyhow::Result<PathBuf> {
    let src = paths::envtest_src();
    let key = source_key(&src)?;
    let dir = paths::binary_cache().join(format!("{KUBE_VERSION}-{key:016x}"));
    let bin = dir.join("envtest");
    if bin.is_file() {
        return Ok(bin);
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    eprintln!(
        "xtask: building the local API server (kube-apiserver {KUBE_VERSION} + etcd from Go \
         modules); a cold build takes about 5-6 minutes on 2 cores, later builds reuse the cache"
    );
    let minor = KUBE_VERSION.split('.').nth(1).unwrap_or("0");
    let ldflags = format!(
        "-s -w -X k8s.io/component-base/version.gitVersion={KUBE_VERSION} \
         -X k8s.io/component-base/version.gitMajor=1 \
         -X k8s.io/component-base/version.gitMinor={minor}"
    );
    let tmp = dir.join(format!("envtest.tmp{}", std::process::id()));
    let status = Command::new("go")
        .args(["build", "-trimpath", "-ldflags", &ldflags, "-o"])
        .arg(&tmp)
        .arg(".")
        .current_dir(&src)
        .status()
        .context("cannot run `go` (Go 1.26 is needed to build the local API server)")?;
    if !status.success() {
        let _ = fs::remove_file(&tmp);
        bail!("building xtask/envtest failed ({status})");
    }
    fs::rename(&tmp, &bin)?;
    Ok(bin)
}

/// FNV-1a over the Go sources, `go.mod` and `go.sum` of module directory `src` and the Go
/// version: any change rebuilds.
pub fn source_key(src: &Path) -> anyhow::Result<u64> {
    let mut files: Vec<PathBuf> = fs::read_dir(src)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "go")
                || p.file_name()
                    .is_some_and(|n| n == "go.mod" || n == "go.sum")
        })
        .collect();
    files.sort();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for f in &files {
        feed(f.file_name().unwrap_or_default().as_encoded_bytes());
        feed(&fs::read(f)?);
    }
    let go = Command::new("go").arg("version").output();
    if let Ok(out) = go {
        feed(&out.stdout);
    }
    Ok(h)
}
