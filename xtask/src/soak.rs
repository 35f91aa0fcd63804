//! `cargo xtask soak [--jobs N] [--seed S] [--group G] [--dev]` (issue 36, item 3): N emulated
//! deploy jobs of a merge queue through the GitHub Action (`node action/main.js`, then
//! `node action/post.js`), queued on one Lease in groups of 2–4, under runner cancels, API
//! server restarts, hung connections and a person's `flux resume`.
//!
//! 1. Build `flux-chaos` and `flux-handoff` (release, or `--dev`: the dev profile) and the
//!    control-plane launcher.
//! 2. Run `flux-chaos --soak`, which starts a control plane of its own in
//!    `target/flux-handoff/soak-<pid>/plane` (it restarts it, so it owns it) and names its
//!    kubeconfig in `FLUX_HANDOFF_KUBECONFIG` before it exists; the launcher exits by itself when
//!    flux-chaos's end of its stdin closes.
//! 3. It ends with `soak: jobs=N ejections=N unwarranted=N leaked_fences=N
//!    work_outside_pause=N overhead_p50_ms=N overhead_p99_ms=N` and exits non-zero on any
//!    ejection, unwarranted job or violation.
//!
//! `cargo xtask ci` runs a quick one (`--jobs 20 --dev`). See docs/chaos.md, "Soak".

use anyhow::{Context, bail};

use crate::{chaos, envtest, paths};

/// The flags of `cargo xtask soak`.
#[derive(Debug, PartialEq, Eq)]
pub struct Flags {
    pub jobs: u64,
    pub seed: u64,
    pub group: Option<u64>,
    pub dev: bool,
    /// A person's pause/resume, gates with a scale and Flux Operator targets among the jobs.
    pub actors: bool,
}

impl Default for Flags {
    fn default() -> Self {
        Self {
            jobs: 200,
            seed: 1,
            group: None,
            dev: false,
            actors: false,
        }
    }
}

impl Flags {
    /// `[--jobs N] [--seed S] [--group G] [--dev] [--actors]`, in any order, each at most once.
    pub fn parse(args: &[&str]) -> anyhow::Result<Self> {
        let mut f = Self::default();
        let mut seen: Vec<&str> = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if seen.contains(a) {
                bail!("soak: {a} given twice");
            }
            seen.push(a);
            match *a {
                "--dev" => f.dev = true,
                "--actors" => f.actors = true,
                "--jobs" => f.jobs = chaos::number(it.next(), a)?,
                "--seed" => f.seed = chaos::number(it.next(), a)?,
                "--group" => f.group = Some(chaos::number(it.next(), a)?),
                other => bail!("soak: unexpected argument {other}"),
            }
        }
        if f.jobs == 0 {
            bail!("soak: --jobs needs at least 1");
        }
        Ok(f)
    }
}

/// `cargo xtask soak ...`.
pub fn run(flags: &Flags) -> anyhow::Result<()> {
    chaos::build_bins(flags.dev)?;
    let launcher = envtest::ensure_built()?;
    let dir = paths::scratch().join(format!("soak-{}", std::process::id()));
    let mut cmd = chaos::on_own_plane(flags.dev, &launcher, &dir);
    cmd.arg("--soak")
        .args(["--jobs", &flags.jobs.to_string()])
        .args(["--seed", &flags.seed.to_string()]);
    if let Some(g) = flags.group {
        cmd.args(["--group", &g.to_string()]);
    }
    if flags.actors {
        cmd.arg("--actors");
    }
    let status = cmd.status().context("cannot start flux-chaos")?;
    if !status.success() {
        bail!(
            "the soak found ejections or violations, or failed ({status}); state in {}",
            dir.display()
        );
    }
    // What a failed run left stays for inspection.
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Flags;

    #[test]
    fn soak_flags_take_jobs_seed_group_and_dev_once_each() {
        assert_eq!(Flags::parse(&[]).unwrap(), Flags::default());
        assert_eq!(Flags::default().jobs, 200);
        let f = Flags::parse(&["--dev", "--seed", "7", "--jobs", "20", "--group", "3"]).unwrap();
        assert_eq!(
            f,
            Flags {
                jobs: 20,
                seed: 7,
                group: Some(3),
                dev: true,
                actors: false,
            }
        );
        assert!(Flags::parse(&["--actors"]).unwrap().actors);
        for bad in [
            &["--jobs"][..],
            &["--jobs", "x"],
            &["--jobs", "0"],
            &["--dev", "--dev"],
            &["--seed", "1", "--seed", "2"],
            &["--quick"],
        ] {
            assert!(Flags::parse(bad).is_err(), "{bad:?}");
        }
    }
}
