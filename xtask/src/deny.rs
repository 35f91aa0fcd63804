//! `cargo deny check` in `cargo xtask ci`, after clippy: licenses, bans (duplicate versions,
//! wildcards) and sources as `deny.toml` sets them, and the `RustSec` advisories when their
//! database (a Git repository on GitHub) can be fetched; when it cannot, one line says the
//! advisories were skipped and why, and the other checks still run.

use crate::{paths, proc};

/// Installs cargo-deny when missing (`cargo install --locked`), then runs the checks.
pub fn run() -> anyhow::Result<()> {
    let root = paths::root();
    if !proc::succeeds("cargo", &["deny", "--version"], &root) {
        proc::run("cargo", &["install", "--locked", "cargo-deny"], &root)?;
    }
    let fetched = proc::succeeds("cargo", &["deny", "fetch", "db"], &root);
    if !fetched {
        eprintln!(
            "xtask: cargo deny: advisories skipped: the RustSec advisory database \
             (github.com/rustsec/advisory-db) cannot be fetched from this machine"
        );
    }
    let mut args = vec!["deny", "check"];
    args.extend(checks(fetched));
    proc::run("cargo", &args, &root)
}

/// The checks to run: all four when the advisory database was fetched, else all but
/// `advisories`.
fn checks(advisory_db_fetched: bool) -> &'static [&'static str] {
    if advisory_db_fetched {
        &["advisories", "bans", "licenses", "sources"]
    } else {
        &["bans", "licenses", "sources"]
    }
}

#[cfg(test)]
mod tests {
    use super::checks;

    #[test]
    fn advisories_run_only_with_a_fetched_database() {
        assert_eq!(checks(true), ["advisories", "bans", "licenses", "sources"]);
        assert_eq!(checks(false), ["bans", "licenses", "sources"]);
    }
}
