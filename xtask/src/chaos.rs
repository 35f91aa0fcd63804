//! `cargo xtask chaos [--quick] [--only S,S]`, or `cargo xtask chaos --nemesis [--seeds N]
//! [--seed S]` (the randomized campaign of issue 36): the real `flux-handoff` binary under crashes,
//! lost responses, concurrent runs, proxy faults, API server restarts, signals, a competing
//! writer and hostile input, through the fault-injecting proxy.
//!
//! 1. Build `flux-chaos` (suites/chaos) and `flux-handoff` (handoff-cli) in release mode
//!    (`--dev`: the dev profile the tests build, which skips a cold release build).
//! 2. Start a control plane of its own in `target/flux-handoff/chaos-cluster-<pid>` (never the
//!    shared one of `cluster up` that tests use, and one per invocation, so two runs never
//!    share one); `flux-chaos` plays the controller model in-process, one seeded namespace per
//!    scenario point.
//! 3. Run `flux-chaos` against it (`FLUX_HANDOFF_KUBECONFIG`, and `--launcher` for the restart
//!    scenario, which runs a control plane of its own that it stops and starts); it prints one
//!    `chaos:` line per scenario, the summary line last, and exits non-zero on any violation.
//! 4. Stop the control plane on every exit path (the guard's Drop, and the launcher exits by
//!    itself when our end of its stdin closes).
//!
//! `cargo xtask ci` runs `--quick --dev` and a quick nemesis. See docs/chaos.md.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::{cluster, envtest, paths, proc};

/// The flags of `cargo xtask chaos`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Flags {
    quick: bool,
    only: Option<String>,
    /// `--dev`: the dev-profile binaries (the ones the tests build) instead of release ones,
    /// to skip a cold release build of the whole dependency tree.
    dev: bool,
    /// `--nemesis`: the randomized campaign instead of the scenarios.
    nemesis: bool,
    /// `--seeds N` (nemesis).
    seeds: Option<u64>,
    /// `--seed S` (nemesis): the first seed.
    seed: Option<u64>,
    /// `--mutant NAME` (nemesis, not in the help): a deliberate bug the campaign must catch.
    mutant: Option<String>,
}

impl Flags {
    /// `[--quick] [--dev] [--only S,S]` or `--nemesis [--seeds N] [--seed S] [--dev]`, in
    /// any order.
    pub fn parse(args: &[&str]) -> anyhow::Result<Self> {
        let mut f = Self::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match *a {
                "--quick" if !f.quick => f.quick = true,
                "--dev" if !f.dev => f.dev = true,
                "--only" if f.only.is_none() => {
                    f.only = Some(
                        it.next()
                            .context("--only needs a list of scenarios")?
                            .to_string(),
                    );
                }
                "--nemesis" if !f.nemesis => f.nemesis = true,
                "--seeds" if f.seeds.is_none() => f.seeds = Some(number(it.next(), "--seeds")?),
                "--seed" if f.seed.is_none() => f.seed = Some(number(it.next(), "--seed")?),
                "--mutant" if f.mutant.is_none() => {
                    f.mutant = Some(it.next().context("--mutant needs a name")?.to_string());
                }
                other => bail!("chaos: unexpected argument {other}"),
            }
        }
        let nemesis_only = f.seeds.is_some() || f.seed.is_some() || f.mutant.is_some();
        if nemesis_only && !f.nemesis {
            bail!("chaos: --seeds, --seed and --mutant need --nemesis");
        }
        if f.nemesis && (f.quick || f.only.is_some()) {
            bail!("chaos: --nemesis runs no scenarios; --quick and --only do not apply");
        }
        Ok(f)
    }
}

/// The number after `flag`, or an error naming it (`chaos` and `soak` flags).
pub fn number(arg: Option<&&str>, flag: &str) -> anyhow::Result<u64> {
    arg.with_context(|| format!("{flag} needs a number"))?
        .parse()
        .with_context(|| format!("{flag} needs a number"))
}

/// Builds `flux-chaos` and `flux-handoff` in the dev profile (the tests' build) or release,
/// in one invocation: features unify once, so neither build invalidates the other.
pub fn build_bins(dev: bool) -> anyhow::Result<()> {
    let profile = if dev { "dev" } else { "release" };
    proc::run(
        "cargo",
        &[
            "build",
            "--profile",
            profile,
            "-p",
            "flux-chaos",
            "--bin",
            "flux-chaos",
            "-p",
            "handoff-cli",
            "--bin",
            "flux-handoff",
        ],
        &paths::root(),
    )
}

/// `cargo xtask chaos [--quick] [--only S,S]` / `--nemesis [--seeds N] [--seed S]`.
pub fn run(flags: &Flags) -> anyhow::Result<()> {
    let root = paths::root();
    build_bins(flags.dev)?;
    let launcher = envtest::ensure_built()?;
    let id = std::process::id();
    if flags.nemesis {
        return nemesis(flags, &launcher, id);
    }
    let plane = cluster::Private::start(
        &launcher,
        &paths::scratch().join(format!("chaos-cluster-{id}")),
    )?;
    let out = paths::scratch().join(format!("chaos-{id}"));
    let mut cmd = Command::new(bin(flags, "flux-chaos"));
    cmd.current_dir(&root)
        .env("FLUX_HANDOFF_KUBECONFIG", &plane.kubeconfig)
        .arg("--out")
        .arg(&out)
        .arg("--handoff-bin")
        .arg(bin(flags, "flux-handoff"))
        .arg("--launcher")
        .arg(&launcher)
        .arg("--crds")
        .arg(paths::crds());
    if flags.quick {
        cmd.arg("--quick");
    }
    if let Some(only) = &flags.only {
        cmd.arg("--only").arg(only);
    }
    let status = cmd.status().context("cannot start flux-chaos");
    let stopped = plane.stop();
    // flux-chaos removes its scratch files; what a failed run left stays for inspection.
    let _ = std::fs::remove_dir(&out);
    let status = status?;
    if !status.success() {
        bail!("flux-chaos found violations or failed ({status})");
    }
    stopped
}

/// The nemesis runs on a control plane it starts and restarts itself (as the soak does), so
/// no shared one is started here.
fn nemesis(flags: &Flags, launcher: &Path, id: u32) -> anyhow::Result<()> {
    let dir = paths::scratch().join(format!("nemesis-{id}"));
    let mut cmd = on_own_plane(flags.dev, launcher, &dir);
    cmd.arg("--nemesis");
    for (flag, value) in [("--seeds", flags.seeds), ("--seed", flags.seed)] {
        if let Some(v) = value {
            cmd.arg(flag).arg(v.to_string());
        }
    }
    if let Some(m) = &flags.mutant {
        cmd.arg("--mutant").arg(m);
    }
    let status = cmd.status().context("cannot start flux-chaos")?;
    if !status.success() {
        bail!(
            "the nemesis found violations or failed ({status}); state in {}",
            dir.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// `flux-chaos` set up to start (and restart) a control plane of its own under `dir/plane`,
/// with the Action's directory: the nemesis's and the soak's invocation, less their mode.
pub fn on_own_plane(dev: bool, launcher: &Path, dir: &Path) -> Command {
    let root = paths::root();
    let plane = dir.join("plane");
    let mut cmd = Command::new(built(dev, "flux-chaos"));
    cmd.current_dir(&root)
        .env(
            "FLUX_HANDOFF_KUBECONFIG",
            plane.join("envtest").join("kubeconfig"),
        )
        .arg("--out")
        .arg(dir.join("out"))
        .arg("--handoff-bin")
        .arg(built(dev, "flux-handoff"))
        .arg("--launcher")
        .arg(launcher)
        .arg("--crds")
        .arg(paths::crds())
        .arg("--action")
        .arg(root.join("action"))
        .arg("--plane-dir")
        .arg(&plane);
    cmd
}

fn bin(flags: &Flags, name: &str) -> PathBuf {
    built(flags.dev, name)
}

/// Where the build of `cargo xtask chaos` (and `soak`) leaves binary `name`.
pub fn built(dev: bool, name: &str) -> PathBuf {
    let dir = if dev { "debug" } else { "release" };
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| paths::root().join("target"), |d| paths::root().join(d));
    target.join(dir).join(name)
}

#[cfg(test)]
mod tests {
    use super::Flags;

    #[test]
    fn flags_take_quick_and_only_in_any_order_and_refuse_the_rest() {
        assert_eq!(Flags::parse(&[]).unwrap(), Flags::default());
        let f = Flags::parse(&["--only", "crash,lost", "--quick"]).unwrap();
        assert!(f.quick);
        assert_eq!(f.only.as_deref(), Some("crash,lost"));
        assert!(Flags::parse(&["--only"]).is_err());
        assert!(Flags::parse(&["--quick", "--quick"]).is_err());
        let f = Flags::parse(&["--dev", "--quick"]).unwrap();
        assert!(f.dev && f.quick && f.only.is_none());
        assert!(Flags::parse(&["--dev", "--dev"]).is_err());
        assert!(Flags::parse(&["--fast"]).is_err());
    }

    #[test]
    fn nemesis_flags_need_nemesis_and_take_numbers() {
        let f = Flags::parse(&["--nemesis", "--seeds", "12", "--dev", "--seed", "3"]).unwrap();
        assert!(f.nemesis && f.dev);
        assert_eq!((f.seeds, f.seed), (Some(12), Some(3)));
        let f = Flags::parse(&["--mutant", "rogue", "--nemesis"]).unwrap();
        assert_eq!(f.mutant.as_deref(), Some("rogue"));
        assert!(Flags::parse(&["--seeds", "3"]).is_err());
        assert!(Flags::parse(&["--nemesis", "--seeds", "x"]).is_err());
        assert!(Flags::parse(&["--nemesis", "--seed"]).is_err());
        assert!(Flags::parse(&["--nemesis", "--quick"]).is_err());
    }
}
