//! `cargo xtask publish`: `cargo publish --dry-run` of the libraries, as `cargo xtask ci` runs
//! it.
//!
//! Cargo packages each library, resolves the later ones against the packages of the earlier
//! ones (none is on crates.io yet) through a local registry, and builds each from its package.
//! Our versions stay 0.1.0 from commit to commit, and cargo takes a package of a registry as
//! unchanging once it has it at a version, in two places:
//! - the unpacked copy, `$CARGO_HOME/registry/src/<registry>/<name>-<version>`: a directory
//!   holding `.cargo-ok` is used as is, without comparing checksums (`unpack_package` in
//!   cargo's src/cargo/sources/registry/mod.rs);
//! - the build of a registry package is fingerprinted by its id and version, not by its files.
//!
//! So on a machine that ran this before, flux-suspend was built against the earlier run's
//! flux-fence: a CI run failed so ("could not find `dry_run` in `flux_fence`"). Before each
//! run, our libraries' unpacked copies and cached `.crate` files in the cargo home go, and the
//! dry run builds in a target directory of its own (`target/publish`), where every build of a
//! library comes from a package; our libraries' artifacts there go too, the dependencies' stay
//! warm. Nothing else in the cargo home or the workspace's target directory is touched.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::api::LIBRARIES;
use crate::paths;

/// `cargo publish --dry-run` of every library at once, in dependency order.
pub fn dry_run() -> anyhow::Result<()> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .context("neither CARGO_HOME nor HOME is set")?;
    for kind in ["src", "cache"] {
        for registry in subdirs(&home.join("registry").join(kind)) {
            forget(&registry, is_library_package)?;
        }
    }
    let target = paths::target_dir().join("publish");
    let package = target.join("package");
    if package.exists() {
        std::fs::remove_dir_all(&package)
            .with_context(|| format!("cannot remove {}", package.display()))?;
    }
    for profile in subdirs(&target) {
        for dir in ["deps", ".fingerprint", "build"] {
            forget(&profile.join(dir), is_library_artifact)?;
        }
    }
    let target = target.to_string_lossy().into_owned();
    let mut args = vec![
        "publish",
        "--dry-run",
        "--allow-dirty",
        "--target-dir",
        &target,
    ];
    for krate in LIBRARIES {
        args.extend(["-p", krate]);
    }
    crate::proc::run("cargo", &args, &paths::root())
}

/// The directories in `dir` (none when it does not exist).
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes each entry of `dir` whose name `ours` accepts.
fn forget(dir: &Path, ours: fn(&str) -> bool) -> anyhow::Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        if !ours(&entry.file_name().to_string_lossy()) {
            continue;
        }
        let path = entry.path();
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.with_context(|| format!("cannot remove {}", path.display()))?;
    }
    Ok(())
}

/// The part of `entry` after one of our libraries' names (as `form` spells it) and a dash.
fn after_library(entry: &str, form: fn(&str) -> String) -> Option<&str> {
    LIBRARIES
        .iter()
        .find_map(|lib| entry.strip_prefix(form(lib).as_str())?.strip_prefix('-'))
}

/// A registry entry of one of ours: `flux-fence-0.1.0` (unpacked) or `flux-fence-0.1.0.crate`.
fn is_library_package(entry: &str) -> bool {
    after_library(entry, str::to_owned).is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
}

/// A build artifact of one of ours: `flux-fence-<hash>` (fingerprint, build script) or
/// `libflux_fence-<hash>.rlib`, `flux_fence-<hash>.d` (deps).
fn is_library_artifact(entry: &str) -> bool {
    let forms: [fn(&str) -> String; 3] = [
        str::to_owned,
        |lib| lib.replace('-', "_"),
        |lib| format!("lib{}", lib.replace('-', "_")),
    ];
    forms.into_iter().any(|form| {
        after_library(entry, form).is_some_and(|rest| {
            let hash = rest.split('.').next().unwrap_or_default();
            hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::{is_library_artifact, is_library_package};

    #[test]
    fn publish_forgets_only_our_packages() {
        for (entry, ours) in [
            ("flux-fence-0.1.0", true),
            ("flux-fence-0.1.0.crate", true),
            ("flux-suspend-0.2.3", true),
            ("handoff-app-0.1.0", true),
            ("ghcr-auth-1.0.0.crate", true),
            ("flux-fence", false),
            ("flux-fence-extra-0.1.0", false),
            ("flux-fencer-0.1.0", false),
            ("handoff-cli-0.1.0", false),
            ("kube-5.0.0", false),
            (".package-cache", false),
        ] {
            assert_eq!(is_library_package(entry), ours, "{entry}");
        }
    }

    #[test]
    fn publish_forgets_only_our_artifacts() {
        for (entry, ours) in [
            ("flux-fence-c08e65cd8821f172", true),
            ("libflux_fence-c08e65cd8821f172.rlib", true),
            ("libflux_fence-c08e65cd8821f172.rmeta", true),
            ("flux_fence-c08e65cd8821f172.d", true),
            ("ghcr-auth-0123456789abcdef", true),
            ("libhandoff_app-0123456789abcdef.rmeta", true),
            ("flux-fence-0.1.0", false),
            ("flux-fence-extra-c08e65cd8821f172", false),
            ("libflux_fencer-c08e65cd8821f172.rlib", false),
            ("libkube-c08e65cd8821f172.rlib", false),
            ("handoff-cli-c08e65cd8821f172", false),
        ] {
            assert_eq!(is_library_artifact(entry), ours, "{entry}");
        }
    }
}
