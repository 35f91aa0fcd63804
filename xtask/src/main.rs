//! `cargo xtask`: project automation. One binary, plain `std::process::Command`, no kube.
//!
//! - `cargo xtask demo [--keep]` / `demo down` — the GHCR credential handoff end to end on a
//!   private control plane with the controller and source models and a local registry.
//! - `cargo xtask cluster up [--detach]` — build (cached) and start the local control plane and
//!   the Flux controller model (`flux-system` seeded).
//! - `cargo xtask cluster down` — stop both and delete their state.
//! - `cargo xtask cluster check [--kubeconfig K]` — `flux-handoff doctor` against it (or K).
//! - `cargo xtask ci` — everything CI checks: fmt, clippy, the launcher build, all tests.
//! - `cargo xtask verify [--quick]` — the model check of the handoff protocol.

mod bench;
mod bins;
mod chaos;
mod cluster;
mod daemon;
mod demo;
mod envtest;
mod paths;
mod proc;
mod verify;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  demo [--keep]           the GHCR credential handoff of the original incident, end to end:
                          builds what it needs, starts a private control plane (state in
                          target/flux-handoff/demo) with the Flux controller and source models
                          and a local registry, seeds stale Secrets and a parent frozen at
                          Reconciling=True, runs `flux-handoff ghcr reassert`, shows
                          `flux-handoff fences` while the fences are held, and ends with
                          `demo: ok pause_proven=<s>s secrets_reasserted=<n> fences_left=0`.
                          Stops everything afterwards; --keep leaves it running and prints
                          `export KUBECONFIG=...`
  demo down               stop a demo left running by --keep
  cluster up [--detach]   build (cached) and start the local control plane: a real
                          kube-apiserver with embedded etcd, RBAC on, Flux CRDs installed,
                          and the Flux controller model (flux-model) with the flux-system tree
                          seeded. Prints `ready kubeconfig=<path> server=<url>`. Without
                          --detach it runs in the foreground until Ctrl-C; with --detach it
                          returns (an already running one is reused).
  cluster down            stop the controller model, then the control plane, and delete their
                          state
  cluster check [--kubeconfig K]
                          run `flux-handoff doctor` (read-only preflight: API, Flux CRDs,
                          controller, Lease namespace, permissions) against the control plane
                          of `cluster up`, or against K; fails when a check fails
  ci                      fmt check, clippy -D warnings, the model check (verify --quick),
                          build the launcher, start a private control plane, cargo nextest
                          run --workspace, doc tests; stops the control plane on every exit
                          path
  verify [--quick]        model-check the handoff protocol with the production decision
                          functions (crate verify, docs/verify.md): every property to the
                          bound, then each mutant must be caught; last line `verify:
                          states=<N> properties=<K> violations=0 mutants_caught=<M>/<M>`
  bench [--quick]         release-build flux-bench and flux-handoff, start a control plane of
                          its own (target/flux-handoff/bench-cluster), measure handoff vs the
                          kubectl+jq shell way, fan-out, retirement strategies and footprint;
                          writes target/flux-handoff/bench/{bench.json,fanout.svg}, prints a
                          table and `bench:` lines. Never part of ci
  chaos [--quick] [--only S,S]
                          release-build flux-chaos and flux-handoff, start a control plane of
                          its own (target/flux-handoff/chaos-cluster-<pid>), drive the real
                          CLI through the fault-injecting proxy (crash and lost response at
                          every mutation point, concurrent pauses, proxy faults, API server
                          restarts, signals, a competing writer, hostile input, security
                          checks); prints one `chaos:` line per scenario and the summary
                          line last; fails on any violation (docs/chaos.md). --only runs the
                          named scenarios. Never part of ci

environment:
  FLUX_HANDOFF_CLUSTER_DIR  state directory of `cluster up|down|check` (default
                            target/flux-handoff/cluster, the one tests share)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["cluster", "up"] => cluster::up(false),
        ["cluster", "up", "--detach"] => cluster::up(true),
        ["cluster", "down"] => cluster::down(),
        ["cluster", "check"] => cluster::check(None),
        ["cluster", "check", "--kubeconfig", k] => cluster::check(Some(k)),
        ["demo"] => demo::run(false),
        ["demo", "--keep"] => demo::run(true),
        ["demo", "down"] => demo::down(),
        ["chaos", flags @ ..] => match chaos::Flags::parse(flags) {
            Ok(f) => chaos::run(&f),
            Err(e) => {
                eprintln!("xtask: {e}");
                eprint!("{USAGE}");
                return ExitCode::from(2);
            }
        },
        ["bench", flags @ ..] if flags.len() <= 1 && flags.iter().all(|f| *f == "--quick") => {
            bench::run(!flags.is_empty())
        }
        ["ci"] => ci(),
        ["verify"] => verify::run(false),
        ["verify", "--quick"] => verify::run(true),
        ["-h" | "--help" | "help"] => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn ci() -> anyhow::Result<()> {
    use proc::run;
    let root = paths::root();
    run("cargo", &["fmt", "--all", "--check"], &root)?;
    run(
        "cargo",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &root,
    )?;
    verify::run(true)?;
    if !proc::succeeds("cargo", &["nextest", "--version"], &root) {
        anyhow::bail!("cargo-nextest is missing: cargo install --locked cargo-nextest");
    }
    let bin = envtest::ensure_built()?;
    // A private control plane for this run, stopped on every exit path (its guard's Drop, and
    // the launcher exits by itself when our end of its stdin closes, even if we are killed).
    let plane = cluster::Private::start(&bin, &paths::ci_state())?;
    let env = [("FLUX_HANDOFF_KUBECONFIG", plane.kubeconfig.as_os_str())];
    proc::run_env(
        "cargo",
        &["nextest", "run", "--workspace", "--profile", "ci"],
        &root,
        &env,
    )?;
    proc::run_env("cargo", &["test", "--doc", "--workspace"], &root, &env)?;
    plane.stop()
}
