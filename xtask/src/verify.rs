//! `cargo xtask verify [--quick]`: the model check of the handoff protocol (crate `verify`).
//!
//! Builds the checker in the dev profile (the model crate and stateright are optimised there,
//! see the workspace Cargo.toml) and runs it. It prints each property with the states explored,
//! each mutant with the length of its counterexample, a readable trace for any violation, and
//! last `verify: states=<N> properties=<K> violations=0 mutants_caught=<M>/<M>`. Exits non-zero
//! on a violation or a mutant the checker did not catch. `cargo xtask ci` runs `--quick`.

use crate::{paths, proc};

/// `cargo xtask verify [--quick]`.
pub fn run(quick: bool) -> anyhow::Result<()> {
    let mut args = vec!["run", "-p", "verify", "--"];
    if quick {
        args.push("--quick");
    }
    proc::run("cargo", &args, &paths::root())
}
