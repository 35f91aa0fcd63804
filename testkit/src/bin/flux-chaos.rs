//! `flux-chaos`: the real `flux-handoff` binary against a control plane of its own, through
//! the fault-injecting proxy — crash at every mutation point, a lost response at every
//! mutation point, and concurrent pauses. Run it with `cargo xtask chaos [--quick]`, which
//! starts that control plane and sets `FLUX_HANDOFF_KUBECONFIG`.
//!
//! 1. discover the mutation points (one clean run, recorded in order);
//! 2. crash, 3. lost response — each point k in a fresh seeded namespace;
//! 4. concurrency with 2, 4 and 8 contenders;
//! 5. one `chaos:` line per scenario; exit 1 on any violation.
//!
//! Usage: `flux-chaos --handoff-bin PATH [--quick] [--out DIR] [--only a,b]` with scenario
//! names `crash`, `lost`, `concurrency`.

#[path = "../chaos/mod.rs"]
mod chaos;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};

use chaos::{Settings, concurrency, crash, discover, lost};

struct Args {
    quick: bool,
    out: PathBuf,
    handoff_bin: PathBuf,
    only: Option<Vec<String>>,
}

fn parse_args() -> anyhow::Result<Args> {
    const USAGE: &str = "usage: flux-chaos --handoff-bin PATH [--quick] [--out DIR] [--only crash,lost,concurrency]";
    let mut quick = false;
    let mut out = PathBuf::from("target/flux-handoff/chaos");
    let mut bin = None;
    let mut only = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--out" => out = it.next().context(USAGE)?.into(),
            "--handoff-bin" => bin = Some(PathBuf::from(it.next().context(USAGE)?)),
            "--only" => {
                only = Some(
                    it.next()
                        .context(USAGE)?
                        .split(',')
                        .map(str::to_string)
                        .collect(),
                );
            }
            other => bail!("unknown argument {other}; {USAGE}"),
        }
    }
    Ok(Args {
        quick,
        out,
        handoff_bin: bin.context(USAGE)?,
        only,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("flux-chaos: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs the scenarios; returns the number of violations.
async fn run() -> anyhow::Result<usize> {
    testkit::install_crypto();
    let args = parse_args()?;
    if std::env::var_os(testkit::plane::KUBECONFIG_ENV).is_none() {
        bail!(
            "set {} to the kubeconfig of a control plane of its own (cargo xtask chaos does)",
            testkit::plane::KUBECONFIG_ENV
        );
    }
    let wanted = |name: &str| {
        args.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|x| x == name))
    };
    let scratch = args.out.join("scratch");
    std::fs::create_dir_all(&scratch)?;
    let s = Settings {
        bin: args.handoff_bin.clone(),
        scratch,
        lease_seconds: 4,
        rounds: if args.quick { 5 } else { 20 },
        run_bound: Duration::from_secs(90),
    };
    let base = discover::run(&s).await?;
    eprintln!(
        "flux-chaos: {} mutation points in a clean run:",
        base.points.len()
    );
    for (i, p) in base.points.iter().enumerate() {
        eprintln!("  {:>2}. {p}", i + 1);
    }
    eprintln!(
        "flux-chaos: a clean run changes annotations {:?}",
        base.allowed
    );
    let mut lines = Vec::new();
    let mut violations = 0;

    if wanted("crash") {
        let (line, bad) = crash_all(&s, &base).await?;
        violations += bad;
        lines.push(line);
    }
    if wanted("lost") {
        let (line, bad) = lost_all(&s, &base).await?;
        violations += bad;
        lines.push(line);
    }
    if wanted("concurrency") {
        for contenders in [2, 4, 8] {
            let t = concurrency::run(&s, &base, contenders).await?;
            for v in &t.violations {
                eprintln!("flux-chaos: concurrency {v}");
            }
            violations += t.violations.len();
            lines.push(format!(
                "chaos: concurrency n={contenders} rounds={} winners_per_round={} violations={}",
                t.rounds,
                if t.single_winner == t.rounds {
                    "1"
                } else {
                    "not-1"
                },
                t.violations.len()
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&s.scratch);
    for l in &lines {
        println!("{l}");
    }
    Ok(violations)
}

/// Crash at every point; the `chaos:` line and the number of failed points.
async fn crash_all(s: &Settings, base: &discover::Baseline) -> anyhow::Result<(String, usize)> {
    let n = base.points.len();
    let (mut ok, mut unreached, mut failed) = (0, 0, 0);
    for (i, kind) in base.points.iter().enumerate() {
        let k = i + 1;
        match crash::point(s, base, u64::try_from(k)?).await? {
            crash::Outcome::Ok => ok += 1,
            crash::Outcome::Unreached => unreached += 1,
            crash::Outcome::Failed(p) => {
                failed += 1;
                eprintln!("flux-chaos: crash k={k} ({kind}): {}", p.join("; "));
            }
        }
        eprintln!("flux-chaos: crash {k}/{n} done");
    }
    Ok((
        format!("chaos: crash points={n} ok={ok} unreached={unreached} failed={failed}"),
        failed,
    ))
}

/// A lost response at every point; the `chaos:` line and the number of violating points.
async fn lost_all(s: &Settings, base: &discover::Baseline) -> anyhow::Result<(String, usize)> {
    let n = base.points.len();
    let (mut completed, mut closed, mut unreached, mut bad) = (0, 0, 0, 0);
    for (i, kind) in base.points.iter().enumerate() {
        let k = i + 1;
        match lost::point(s, base, u64::try_from(k)?).await? {
            lost::Outcome::Completed => completed += 1,
            lost::Outcome::FailedClosed(code) => {
                closed += 1;
                eprintln!("flux-chaos: lost k={k} ({kind}): failed closed with exit {code}");
            }
            lost::Outcome::Unreached => unreached += 1,
            lost::Outcome::Violation(p) => {
                bad += 1;
                eprintln!("flux-chaos: lost k={k} ({kind}): {}", p.join("; "));
            }
        }
        eprintln!("flux-chaos: lost {k}/{n} done");
    }
    Ok((
        format!(
            "chaos: lost points={n} completed={completed} failed_closed={closed} unreached={unreached} violations={bad}"
        ),
        bad,
    ))
}
