//! `flux-chaos`: the real `flux-handoff` binary against a control plane of its own, through
//! the fault-injecting proxy. Run it with `cargo xtask chaos [--quick] [--only S,S]`, which
//! starts that control plane and sets `FLUX_HANDOFF_KUBECONFIG`.
//!
//! 1. discover the mutation points (one clean run, recorded in order);
//! 2. run the scenarios, in this order: crash, lost, concurrency, faults, writer, signals,
//!    hostile, security, restart, deadline (each in fresh seeded namespaces; restart on a control plane
//!    of its own, started from `--launcher`);
//! 3. scan everything printed, and the annotations and Events on the server, for secrets;
//! 4. print one `chaos:` line per scenario, each finding on stderr, and the summary line last;
//!    exit 1 on any finding.
//!
//! Usage: `flux-chaos --handoff-bin PATH [--launcher PATH --crds DIR] [--quick] [--out DIR]
//! [--only S,S]`, or `--nemesis [--seeds N] [--seed S]` for the randomized campaign instead of
//! the scenarios (`chaos/nemesis.rs`), or `--soak [--jobs N] [--seed S] [--group G] --action DIR
//! --plane-dir DIR` for the merge-queue soak through the GitHub Action (`chaos/soak.rs`).

mod chaos;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};

use chaos::{Settings, Tally};

/// Every scenario, in the order they run.
const SCENARIOS: [&str; 12] = [
    "crash",
    "lost",
    "concurrency",
    "faults",
    "writer",
    "signals",
    "hostile",
    "security",
    "restart",
    "deadline",
    "outside",
    "second-lease",
];

/// The chaos suite: the real flux-handoff binary under faults, on the control plane of
/// `FLUX_HANDOFF_KUBECONFIG`.
#[derive(Debug, clap::Parser)]
#[command(name = "flux-chaos")]
#[allow(clippy::struct_excessive_bools)] // command-line switches, each independent
struct Args {
    /// Fewer rounds per scenario.
    #[arg(long)]
    quick: bool,
    /// Scratch directory (removed afterwards).
    #[arg(long, value_name = "DIR", default_value = "target/flux-handoff/chaos")]
    out: PathBuf,
    /// The flux-handoff binary under test.
    #[arg(long, value_name = "PATH")]
    handoff_bin: PathBuf,
    /// The control-plane launcher, for the restart scenario.
    #[arg(long, value_name = "PATH")]
    launcher: Option<PathBuf>,
    /// The Flux CRDs, for the restart scenario's control plane.
    #[arg(long, value_name = "DIR")]
    crds: Option<PathBuf>,
    /// Run only these scenarios (comma-separated).
    #[arg(long, value_name = "S,S", value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// Run the nemesis (random faults per seed, judged by the server's order) instead of the
    /// scenarios.
    #[arg(long)]
    nemesis: bool,
    /// Nemesis: how many seeds (default 1 with --seed, else 10).
    #[arg(long, value_name = "N", requires = "nemesis")]
    seeds: Option<u64>,
    /// Nemesis: the first seed (default 1). Soak: the seed of the schedule (default 1).
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// Nemesis: a deliberate mutant that must be caught (`rogue`: a work write naming a holder
    /// whose fences are not in place).
    #[arg(long, value_name = "NAME", hide = true, requires = "nemesis",
          value_parser = clap::builder::PossibleValuesParser::new(["rogue"]))]
    mutant: Option<String>,
    /// Run the merge-queue soak (deploy jobs through the GitHub Action) instead of the
    /// scenarios.
    #[arg(long, conflicts_with = "nemesis")]
    soak: bool,
    /// Soak: how many jobs.
    #[arg(long, value_name = "N", default_value_t = 200, requires = "soak")]
    jobs: usize,
    /// Soak: play only this group of the schedule (a replay).
    #[arg(long, value_name = "G", requires = "soak")]
    group: Option<usize>,
    /// Soak: also a person's pause/resume, replicas gates with a person's scale and Flux
    /// Operator targets among the jobs.
    #[arg(long, requires = "soak")]
    actors: bool,
    /// Soak and nemesis: the repository's `action/` directory.
    #[arg(long, value_name = "DIR")]
    action: Option<PathBuf>,
    /// Soak and nemesis: the state directory of their control plane, which they restart
    /// (`FLUX_HANDOFF_KUBECONFIG` names `<DIR>/envtest/kubeconfig`).
    #[arg(long, value_name = "DIR")]
    plane_dir: Option<PathBuf>,
}

fn parse_args() -> anyhow::Result<Args> {
    let args = <Args as clap::Parser>::parse();
    if let Some(bad) = args
        .only
        .iter()
        .flatten()
        .find(|n| !SCENARIOS.contains(&n.as_str()))
    {
        bail!(
            "unknown scenario {bad}; the scenarios are {}",
            SCENARIOS.join(",")
        );
    }
    if args.seed.is_some() && !args.nemesis && !args.soak {
        bail!("--seed needs --nemesis or --soak");
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if let Some((ns, writes)) = chaos::nemesis::work::parse(&argv) {
        // The nemesis's work command, run by `flux-handoff run -- ...`.
        let holder = std::env::var("FLUX_HANDOFF_HOLDER").unwrap_or_default();
        return match chaos::nemesis::work::run(&ns, writes, &holder).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nemesis-work: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    match Box::pin(run()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("flux-chaos: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The merge-queue soak on a control plane of its own; whether it passed.
async fn soak(args: &Args, s: &Settings) -> anyhow::Result<bool> {
    let (Some(action), Some(plane_dir)) = (args.action.clone(), args.plane_dir.clone()) else {
        bail!("--soak needs --action and --plane-dir");
    };
    let o = chaos::soak::Options {
        seed: args.seed.unwrap_or(1),
        jobs: args.jobs,
        group: args.group,
        actors: args.actors,
        action,
        plane_dir,
    };
    let passed = chaos::soak::run(s, &o).await?;
    let _ = std::fs::remove_dir_all(&s.scratch);
    Ok(passed)
}

/// Runs the scenarios; whether every one of them found nothing wrong.
async fn run() -> anyhow::Result<bool> {
    testkit::install_crypto();
    let args = parse_args()?;
    if std::env::var_os(testkit::plane::KUBECONFIG_ENV).is_none() {
        bail!(
            "set {} to the kubeconfig of a control plane of its own (cargo xtask chaos does)",
            testkit::plane::KUBECONFIG_ENV
        );
    }
    let scratch = args.out.join("scratch");
    std::fs::create_dir_all(&scratch)?;
    let s = Settings {
        bin: args.handoff_bin.clone(),
        scratch,
        lease_seconds: 4,
        rounds: if args.quick { 5 } else { 20 },
        run_bound: Duration::from_secs(90),
        quick: args.quick,
        launcher: args.launcher.clone(),
        crds: args.crds.clone(),
    };
    if args.soak {
        return soak(&args, &s).await;
    }
    if args.nemesis {
        let (Some(action), Some(plane_dir)) = (args.action.clone(), args.plane_dir.clone()) else {
            bail!("--nemesis needs --action and --plane-dir");
        };
        let o = chaos::nemesis::Options {
            first: args.seed.unwrap_or(1),
            seeds: args
                .seeds
                .unwrap_or(if args.seed.is_some() { 1 } else { 10 }),
            rogue: args.mutant.is_some(),
            action,
            plane_dir,
        };
        let passed = chaos::nemesis::run(&s, &o).await?;
        let _ = std::fs::remove_dir_all(&s.scratch);
        return Ok(passed);
    }
    // The admin token every CLI run carries must never be printed either.
    let admin = testkit::admin_config().await?;
    if let Some(token) = &admin.auth_info.token {
        chaos::secret(secrecy::ExposeSecret::expose_secret(token));
    }
    let base = chaos::discover::run(&s).await?;
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
    let mut tallies: Vec<Tally> = Vec::new();
    for name in SCENARIOS {
        if !args
            .only
            .as_ref()
            .is_none_or(|o| o.iter().any(|x| x == name))
        {
            continue;
        }
        eprintln!("flux-chaos: scenario {name}");
        let t = match name {
            "crash" => chaos::crash::run(&s, &base).await,
            "lost" => chaos::lost::run(&s, &base).await,
            "concurrency" => chaos::concurrency::run(&s, &base).await,
            "faults" => chaos::faults::run(&s, &base).await,
            "writer" => chaos::writer::run(&s, &base).await,
            "signals" => chaos::signals::run(&s, &base).await,
            "hostile" => chaos::hostile::run(&s, &base).await,
            "security" => chaos::security::run(&s, &base).await,
            "restart" => chaos::restart::run(&s, &base).await,
            "deadline" => chaos::deadline::run(&s, &base).await,
            "outside" => chaos::chain::outside(&s, &base).await,
            "second-lease" => chaos::chain::second_lease(&s, &base).await,
            other => bail!("no scenario {other}"),
        }
        .with_context(|| format!("scenario {name}"))?;
        eprintln!("{}", t.line);
        tallies.push(t);
    }
    tallies.push(chaos::leaks::scan(&kube::Client::try_from(admin)?).await?);
    let _ = std::fs::remove_dir_all(&s.scratch);
    for t in &tallies {
        for f in &t.findings {
            eprintln!("flux-chaos: {} [{:?}]: {}", t.scenario, f.kind, f.text);
        }
    }
    for t in &tallies {
        println!("{}", t.line);
    }
    let (line, passed) = chaos::summary(&tallies);
    println!("{line}");
    Ok(passed)
}
