//! Where things live.

use std::path::PathBuf;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// The Go launcher module.
pub fn envtest_src() -> PathBuf {
    root().join("xtask").join("envtest")
}

/// CRDs installed into every control plane.
pub fn crds() -> PathBuf {
    envtest_src().join("crds")
}

/// Our scratch space inside cargo's target directory.
pub fn scratch() -> PathBuf {
    root().join("target").join("flux-handoff")
}

/// Environment variable naming another state directory for `cluster up|down|check`, so a
/// second control plane can run beside the shared one (relative paths are taken from the
/// workspace root).
pub const CLUSTER_DIR_ENV: &str = "FLUX_HANDOFF_CLUSTER_DIR";

/// State of the control plane of `cluster up|down`: `$FLUX_HANDOFF_CLUSTER_DIR`, else the
/// shared one (also used by tests run outside `xtask ci`).
pub fn cluster_state() -> PathBuf {
    match std::env::var_os(CLUSTER_DIR_ENV) {
        Some(dir) if !dir.is_empty() => root().join(dir),
        _ => shared_state(),
    }
}

/// State of the shared control plane of `cluster up` (and of tests run outside `xtask ci`).
pub fn shared_state() -> PathBuf {
    scratch().join("cluster")
}

/// State of the demo: its own control plane, controller and source models, registry.
pub fn demo_state() -> PathBuf {
    scratch().join("demo")
}

/// Cargo's target directory (`$CARGO_TARGET_DIR`, else `target/` in the workspace).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| root().join("target"), |d| root().join(d))
}

/// A binary of this workspace built by `cargo build` (debug profile).
pub fn debug_bin(name: &str) -> PathBuf {
    target_dir().join("debug").join(name)
}

/// The `cargo` that runs us (`$CARGO`), else `cargo` from `PATH`.
pub fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// State of the private control plane of one `xtask ci` run.
pub fn ci_state() -> PathBuf {
    scratch().join("ci-cluster")
}

/// Built launcher binaries, keyed by a hash of their sources, kept across clones so that a
/// machine pays the cold Go build once.
pub fn binary_cache() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| scratch().join("cache"));
    base.join("flux-handoff").join("envtest")
}

/// The wrapper Go modules that build the real Flux controllers (one directory each).
pub fn flux_src() -> PathBuf {
    root().join("xtask").join("flux")
}

/// Built Flux controller binaries, keyed like [`binary_cache`].
pub fn flux_cache() -> PathBuf {
    binary_cache().with_file_name("flux")
}
