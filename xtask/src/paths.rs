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

/// State of the shared control plane of `cluster up` (and of tests run outside `xtask ci`).
pub fn shared_state() -> PathBuf {
    scratch().join("cluster")
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
