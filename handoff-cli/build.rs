//! Records the commit the binary is built from, for `flux-handoff --version`.
//!
//! In order: `FLUX_HANDOFF_COMMIT` (set by a packager building from a source archive), the
//! `HEAD` of the git checkout the crate is in, or `unknown` (a crates.io build, no git).
//! Reruns when `HEAD` or the branch it points at moves.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=FLUX_HANDOFF_COMMIT");
    let commit = std::env::var("FLUX_HANDOFF_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    // Rebuild when the checkout moves to another commit: HEAD, the branch it names, packed refs.
    for path in ["HEAD", "packed-refs"]
        .into_iter()
        .filter_map(|p| git(&["rev-parse", "--git-path", p]))
        .chain(
            git(&["symbolic-ref", "-q", "HEAD"])
                .and_then(|r| git(&["rev-parse", "--git-path", &r])),
        )
    {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    println!("cargo:rustc-env=FLUX_HANDOFF_COMMIT={commit}");
}
