//! `cargo xtask`: project automation. One binary, plain `std::process::Command`, no kube.
//!
//! - `cargo xtask demo [--keep]` / `demo down` — the GHCR credential handoff end to end on a
//!   private control plane with the controller and source models and a local registry.
//! - `cargo xtask cluster up [--detach]` — build (cached) and start the local control plane and
//!   the Flux controller model (`flux-system` seeded).
//! - `cargo xtask cluster down` — stop both and delete their state.
//! - `cargo xtask cluster check [--kubeconfig K]` — `flux-handoff doctor` against it (or K).
//! - `cargo xtask ci` — everything CI checks: fmt, clippy, `cargo deny check`, actionlint, the
//!   launcher build, all tests (installs `cargo-nextest`, `cargo-deny` and, as root, the
//!   registry's Debian packages when missing).
//! - `cargo xtask dist [--target T] [--base-url URL]` — the release archive, checksums and the
//!   Flux CLI plugin manifest in `dist/`.
//! - `cargo xtask catalog [--manifest FILE]` — the entry for Flux's plugin catalog and the
//!   plugin manifest against the catalog's rules.
//! - `cargo xtask api [--bless]` — each library's public API (rustdoc JSON) against the
//!   committed listing `api/<crate>.txt`; `--bless` rewrites the listings.
//! - `cargo xtask layers` — no import circle between the files of any workspace crate's `src/`.
//! - `cargo xtask docpaths` — every repository path docs/design names exists.
//! - `cargo xtask actionlint` — actionlint (built and cached) on the action and `docs/*.yml`.
//! - `cargo xtask verify [--quick]` — the model check of the handoff protocol.
//! - `cargo xtask chaos [--quick] [--only S,S]` / `chaos --nemesis [--seeds N] [--seed S]` — the
//!   chaos suite and the randomized nemesis (docs/chaos.md).
//! - `cargo xtask soak [--jobs N] [--seed S] [--group G] [--dev] [--actors]` — the merge-queue soak: N
//!   deploy jobs through the GitHub Action under cancels and faults (docs/chaos.md, "Soak").

mod actionlint;
mod api;
mod bench;
mod bins;
mod catalog;
mod chaos;
mod cluster;
mod daemon;
mod demo;
mod deny;
mod dist;
mod docpaths;
mod envtest;
mod eso;
mod flux;
mod fluxcli;
mod layers;
mod operator;
mod paths;
mod proc;
mod publish;
mod realflux;
mod soak;
mod verify;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  demo [--keep] [--flux model|real] [--fanout direct|eso]
                          the GHCR credential handoff of the original incident, end to end:
                          builds what it needs, starts a private control plane (state in
                          target/flux-handoff/demo) with the Flux controller and source models
                          and a local registry, seeds stale Secrets and a parent frozen at
                          Reconciling=True, runs `flux-handoff ghcr reassert`, shows
                          `flux-handoff fences` while the fences are held, and ends with
                          `demo: ok pause_proven=<s>s secrets_reasserted=<n> fences_left=0`.
                          Stops everything afterwards; --keep leaves it running and prints
                          `export KUBECONFIG=...`. --flux real runs it against the real
                          kustomize- and source-controller (cluster up --flux real).
                          --fanout eso rotates through External Secrets instead (the real
                          ESO v0.16.2, built once from Go modules: staged key, PushSecret,
                          an ExternalSecret per consumer, the root last; docs/fanout.md)
  demo down               stop a demo left running by --keep
  cluster up [--flux model|real [--operator]] [--detach]
                          build (cached) and start the local control plane: a real
                          kube-apiserver with embedded etcd, RBAC on, Flux CRDs installed,
                          and the Flux controller model (flux-model) with the flux-system tree
                          seeded. Prints `ready kubeconfig=<path> server=<url>`. Without
                          --detach it runs in the foreground until Ctrl-C; with --detach it
                          returns (an already running one is reused). --flux real runs the
                          real kustomize-, source-, helm- and notification-controller (built
                          from Go modules, cached; xtask/flux/) with upstream's CRDs, and
                          seeds the tree from an OCI artifact in a local registry
                          (docs/real-flux.md); --operator adds the real Flux Operator v0.59.0
                          (built with GOTOOLCHAIN=go1.27.3, cached; xtask/operator/)
  cluster down            stop the controller model, then the control plane, and delete their
                          state
  cluster check [--kubeconfig K]
                          run `flux-handoff doctor` (read-only preflight: API, Flux CRDs,
                          controller, Lease namespace, permissions) against the control plane
                          of `cluster up`, or against K; fails when a check fails
  dist [--target T] [--base-url URL]
                          release-build flux-handoff for the host (or T, which must run here)
                          and write dist/flux-handoff_<version>_<os>_<arch>.tar.gz (binary,
                          LICENSE, README, man page, completions),
                          dist/flux-handoff_<version>_checksums.txt (sha256sum -c; the name
                          Flux's plugin catalog asks for; dist/checksums.txt, the same, kept
                          for compatibility) and dist/handoff.yaml, the Flux CLI plugin
                          manifest of every archive in dist/ under URL (default: the GitHub
                          release v<version> of the workspace's repository)
  dist index [--dir D] [--base-url URL]
                          only rewrite both checksums files and handoff.yaml from the
                          archives in dist/ (or D)
  dist ... --action-sums FILE
                          also write FILE (action/checksums.txt for a release): the sums the
                          Action ships for its own version, each archive's sha256 and the
                          sha256 of the binary in it (`<archive>!flux-handoff`)
  catalog [--manifest FILE]
                          check deploy/flux-plugin/catalog.yaml (the entry for Flux's plugin
                          catalog, fluxcd/plugins) and the Plugin manifest dist writes
                          (FILE, else dist/handoff.yaml, else its shape) against the
                          catalog's rules and this workspace; print `catalog: ok ...`
  flux-cli                build the flux CLI (v2.9, Go modules, cached) and print its path
  api [--bless]           list each library's public API from rustdoc's JSON (stable
                          rustdoc, RUSTC_BOOTSTRAP=1; all features) and compare it with
                          api/<crate>.txt; print `api: <crate> root_items=N items=M`; fail on
                          a difference, printing the changed lines. --bless rewrites the
                          listings instead
  layers                  fail naming each crate whose src/ files import each other in a
                          circle (every workspace member's library, or its binary when it
                          has no library; the file graph of `crate::` and `super::` paths);
                          print `layers: crates=N files=N arrows=M`
  docpaths                fail naming each repository path (`flux-fence/src/x.rs`, in
                          backticks) that docs/design names and that does not exist; print
                          `docpaths: files=N paths=M`
  publish                 cargo publish --dry-run of the libraries in dependency order, as ci
                          runs it, in target/publish; first removes what cargo kept of earlier
                          packages of them (unpacked copies, builds), which it would reuse at
                          the same version
  actionlint              build actionlint (Go modules, cached under ~/.cache/flux-handoff)
                          and lint the workflows under docs/ and, through them, action.yml
  ci                      install what the tests need when missing (cargo-nextest,
                          cargo-deny; as root docker-registry, apache2-utils and libfaketime,
                          otherwise it names the command and fails), fmt check, the public-API listings
                          (api, below), layers, docpaths, cargo publish --dry-run of the libraries in
                          dependency order, clippy -D warnings, cargo
                          deny check (deny.toml; advisories only when their database on GitHub
                          can be fetched, else one line says so), actionlint, build the
                          launcher, start a private control plane, cargo nextest run
                          --workspace, doc tests; stops the control plane on every exit path;
                          then the real Flux tier (below)
  ci real                 only the real Flux tier: a private control plane with the real
                          kustomize-, source-, helm- and notification-controller (cluster up
                          --flux real), the real_flux_ tests and the fact_ tests against the
                          real controllers (suites/realflux/tests/real_flux.rs), the
                          flux_events_ tests (handoff-cli/tests/flux_events.rs), and with the
                          real Flux Operator v0.59.0 beside them (built from Go modules with
                          GOTOOLCHAIN=go1.27.3, cached; xtask/operator/) the
                          operator_kinds_real_ tests (suites/realflux/tests/operator_real.rs),
                          everything stopped on every exit path; then the External Secrets
                          tier (ci eso)
  ci eso                  only the External Secrets tier: the real External Secrets Operator
                          v0.16.2 (built from Go modules, cached; xtask/eso/) beside a private
                          control plane with its CRDs, the eso_fanout_ tests
                          (ghcr-auth/tests/eso_fanout.rs); everything stopped on every exit path
  ci operator             only the operator_kinds_real_ tests
                          (suites/realflux/tests/operator_real.rs) on a private real-Flux plane
                          with the Flux Operator (as in ci real); everything stopped on every
                          exit path
  eso prepare             build External Secrets (cached) and print `bin=<path> crds=<dir>`
  verify [--quick]        model-check the handoff protocol with the production decision
                          functions (crate verify, docs/verify.md): every property to the
                          bound, then each mutant must be caught; last line `verify:
                          states=<N> properties=<K> violations=0 mutants_caught=<M>/<M>`
  bench [--quick]         release-build flux-bench and flux-handoff, start a control plane of
                          its own (target/flux-handoff/bench-cluster), measure handoff vs the
                          kubectl+jq shell way, fan-out, retirement strategies and footprint;
                          writes target/flux-handoff/bench/{bench.json,fanout.svg}, prints a
                          table and `bench:` lines. Never part of ci
  bench --real [--only C,C]
                          flux-bench (dev profile) on a real-Flux plane of its own
                          (target/flux-handoff/bench-real-cluster): time to a proven pause
                          while a reconcile is stuck in a 35 s health check, per retirement and
                          feature gate, beside `flux suspend` + `flux resume`; one
                          `bench: real_<case>` line each (docs/bench.md)
  chaos [--quick] [--dev] [--only S,S]
                          release-build flux-chaos and flux-handoff (--dev: the dev profile
                          the tests build, no cold release build), start a control plane of
                          its own (target/flux-handoff/chaos-cluster-<pid>), drive the real
                          CLI through the fault-injecting proxy (crash and lost response at
                          every mutation point, concurrent pauses, proxy faults, API server
                          restarts, signals, a competing writer, hostile input, security
                          checks); prints one `chaos:` line per scenario and the summary
                          line last; fails on any violation (docs/chaos.md). --only runs the
                          named scenarios. ci runs --quick --dev
  chaos --nemesis [--seeds N] [--seed S] [--dev]
                          the randomized campaign instead, on a control plane of its own:
                          per seed, queued runs, pauses, Action jobs (main.js, post.js, the
                          runner's cancels) and janitors under random faults (API server
                          restarts among them), each history judged by the API server's
                          order; ends `nemesis: seeds=N operations=N faults=N
                          violations=N unwarranted=N`. Seeds 1..N (default 10), or S..S+N. ci
                          runs a quick one
  soak [--jobs N] [--seed S] [--group G] [--dev] [--actors]
                          the merge-queue soak: N deploy jobs (default 200) through the GitHub
                          Action (node main.js, then post.js), queued on one Lease in groups
                          of 2-4, under the runner's cancels, API server restarts, hung
                          connections and a person's flux resume, on a control plane of its
                          own; ends `soak: jobs=N ejections=N unwarranted=N
                          leaked_fences=N work_outside_pause=N overhead_p50_ms=N
                          overhead_p99_ms=N`. --group G
                          replays one group of the seed's schedule. --actors adds a
                          person's pause/resume, replicas gates with a person's scale and
                          Flux Operator targets (not in ci yet: docs/chaos.md says why).
                          ci runs --jobs 20

environment:
  FLUX_HANDOFF_CLUSTER_DIR  state directory of `cluster up|down|check` (default
                            target/flux-handoff/cluster, the one tests share)
";

/// Seeds of the nemesis in `ci`: 24..=35, the first twelve in a row whose schedules draw
/// every fault kind and an Action job (flux-chaos's test
/// `nemesis_the_ci_seeds_plan_every_fault_kind_and_an_action_job` holds it to that); about
/// 2 minutes here, docs/chaos.md has the figures.
const NEMESIS_CI_FIRST: &str = "24";
const NEMESIS_CI_SEEDS: &str = "12";
/// Jobs of the soak in `ci` (docs/chaos.md, "Soak", has the figures).
const SOAK_CI_JOBS: &str = "20";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["cluster", "up", flags @ ..] => match cluster_flags(flags) {
            Ok((detach, flux, with_operator)) => cluster::up(detach, flux, with_operator),
            Err(e) => {
                eprintln!("xtask: {e}");
                eprint!("{USAGE}");
                return ExitCode::from(2);
            }
        },
        ["cluster", "down"] => cluster::down(),
        ["cluster", "check"] => cluster::check(None),
        ["cluster", "check", "--kubeconfig", k] => cluster::check(Some(k)),
        ["demo", "down"] => demo::down(),
        ["demo", flags @ ..] => match demo_flags(flags) {
            Ok((keep, flux, fanout)) => demo::run(keep, flux, fanout),
            Err(e) => {
                eprintln!("xtask: {e}");
                eprint!("{USAGE}");
                return ExitCode::from(2);
            }
        },
        ["chaos", flags @ ..] => match chaos::Flags::parse(flags) {
            Ok(f) => chaos::run(&f),
            Err(e) => {
                eprintln!("xtask: {e}");
                eprint!("{USAGE}");
                return ExitCode::from(2);
            }
        },
        ["soak", flags @ ..] => match soak::Flags::parse(flags) {
            Ok(f) => soak::run(&f),
            Err(e) => {
                eprintln!("xtask: {e}");
                eprint!("{USAGE}");
                return ExitCode::from(2);
            }
        },
        ["bench", flags @ ..] if flags.len() <= 1 && flags.iter().all(|f| *f == "--quick") => {
            bench::run(!flags.is_empty())
        }
        ["dist", flags @ ..] => match dist::Flags::parse(flags) {
            Ok(f) => dist::run(&f),
            Err(e) => {
                eprintln!("xtask: {e}");
                eprint!("{USAGE}");
                return ExitCode::from(2);
            }
        },
        ["catalog", flags @ ..] => catalog::run(flags),
        ["flux-cli"] => fluxcli::ensure_built().map(|p| println!("{}", p.display())),
        ["bench", "--real"] => bench::run_real(None),
        ["bench", "--real", "--only", only] => bench::run_real(Some(only)),
        ["ci"] => ci(),
        ["api"] => api::run(false),
        ["api", "--bless"] => api::run(true),
        ["layers"] => layers::run(),
        ["docpaths"] => docpaths::run(),
        ["publish"] => publish::dry_run(),
        ["actionlint"] => actionlint::run(),
        ["ci", "real"] => ci_real(),
        ["ci", "eso"] => ci_eso(),
        ["ci", "operator"] => ci_operator(),
        ["eso", "prepare"] => eso::prepare(),
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

/// `[--keep] [--flux model|real] [--fanout direct|eso]` of `demo`, in any order.
fn demo_flags(flags: &[&str]) -> anyhow::Result<(bool, realflux::Flux, demo::Fanout)> {
    let mut keep = false;
    let mut flux = realflux::Flux::Model;
    let mut fanout = demo::Fanout::Direct;
    let mut it = flags.iter();
    while let Some(flag) = it.next() {
        match *flag {
            "--keep" => keep = true,
            "--flux" => {
                let value = it
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--flux needs a value"))?;
                flux = realflux::Flux::parse(value)?;
            }
            "--fanout" => {
                let value = it
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--fanout needs a value"))?;
                fanout = demo::Fanout::parse(value)?;
            }
            other => anyhow::bail!("unknown flag `{other}` for demo"),
        }
    }
    Ok((keep, flux, fanout))
}

/// `[--flux model|real] [--operator] [--detach]` of `cluster up`, in any order.
fn cluster_flags(flags: &[&str]) -> anyhow::Result<(bool, realflux::Flux, bool)> {
    let mut detach = false;
    let mut with_operator = false;
    let mut flux = realflux::Flux::Model;
    let mut it = flags.iter();
    while let Some(flag) = it.next() {
        match *flag {
            "--detach" => detach = true,
            "--operator" => with_operator = true,
            "--flux" => {
                let value = it
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--flux needs a value"))?;
                flux = realflux::Flux::parse(value)?;
            }
            other => anyhow::bail!("unknown flag `{other}` for cluster up"),
        }
    }
    Ok((detach, flux, with_operator))
}

fn ci() -> anyhow::Result<()> {
    use proc::run;
    let root = paths::root();
    let mut phases = Phases::start();
    // What the tests need on a fresh machine, before minutes of fmt and clippy.
    demo::require_tools("cargo xtask ci")?;
    // libfaketime: the `queue_` tests run one `flux-handoff` with its clock two minutes ahead.
    demo::require(
        "cargo xtask ci",
        &[demo::Need::File(demo::FAKETIME_LIB, "libfaketime")],
    )?;
    if !proc::succeeds("cargo", &["nextest", "--version"], &root) {
        run("cargo", &["install", "--locked", "cargo-nextest"], &root)?;
    }
    phases.end("tools");
    run("cargo", &["fmt", "--all", "--check"], &root)?;
    phases.end("fmt");
    // Early and cheap: a changed public item without its reviewed listing fails here; then
    // each library packages and builds alone from its package, in dependency order.
    api::run(false)?;
    // No import circle between handoff-cli's files (pure, reads src/ only).
    layers::run()?;
    // Every repository path the design docs name exists (pure, reads docs/design only).
    docpaths::run()?;
    publish::dry_run()?;
    phases.end("api, layers, docpaths, publish");
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
    phases.end("clippy");
    // The libraries' public docs: every intra-doc link resolves to a public item, with no
    // default features and with all of them (the combinations an embedder builds).
    for features in ["--no-default-features", "--all-features"] {
        for krate in api::LIBRARIES {
            proc::run_env(
                "cargo",
                &["doc", "--no-deps", "-p", krate, features],
                &root,
                &[("RUSTDOCFLAGS", std::ffi::OsStr::new("-D warnings"))],
            )?;
        }
    }
    phases.end("docs");
    deny::run()?;
    phases.end("deny");
    actionlint::run()?;
    phases.end("actionlint");
    verify::run(true)?;
    phases.end("verify");
    let bin = envtest::ensure_built()?;
    // A private control plane for this run, stopped on every exit path (its guard's Drop, and
    // the launcher exits by itself when our end of its stdin closes, even if we are killed).
    // The flux CLI of the flux_plugin_ tests, built before the tests (cached; minutes cold).
    let flux_cli = fluxcli::ensure_built()?;
    phases.end("api server and flux CLI builds");
    let plane = cluster::Private::start(&bin, &paths::ci_state())?;
    let env = [
        ("FLUX_HANDOFF_KUBECONFIG", plane.kubeconfig.as_os_str()),
        ("FLUX_HANDOFF_FLUX_CLI", flux_cli.as_os_str()),
    ];
    proc::run_env(
        "cargo",
        &[
            "nextest",
            "run",
            "--workspace",
            "--profile",
            "ci",
            "-E",
            "not binary(real_flux) and not binary(flux_events) and not binary(eso_fanout) and not \
             binary(operator_real)",
        ],
        &root,
        &env,
    )?;
    proc::run_env("cargo", &["test", "--doc", "--workspace"], &root, &env)?;
    phases.end("workspace tests");
    plane.stop()?;
    // The chaos suite's sample, on the dev binaries just built (a release build would compile
    // the whole tree again): no scenario rots unseen (it went red on main once, unnoticed).
    chaos::run(&chaos::Flags::parse(&["--quick", "--dev"])?)?;
    phases.end("chaos");
    // The nemesis's quick campaign: fixed seeds, so a red CI names a seed that replays.
    chaos::run(&chaos::Flags::parse(&[
        "--nemesis",
        "--seed",
        NEMESIS_CI_FIRST,
        "--seeds",
        NEMESIS_CI_SEEDS,
        "--dev",
    ])?)?;
    phases.end("nemesis");
    // The merge-queue soak's quick run: a fixed seed, so a red CI names a group that replays.
    soak::run(&soak::Flags::parse(&["--jobs", SOAK_CI_JOBS, "--dev"])?)?;
    phases.end("soak");
    ci_real()?;
    phases.end("real Flux tier");
    ci_eso()?;
    phases.end("External Secrets tier");
    phases.summary();
    Ok(())
}

/// The phases of `cargo xtask ci`: each prints its duration as it ends, and the whole table
/// is printed once all passed, so a run says where its minutes went.
struct Phases {
    started: std::time::Instant,
    last: std::time::Instant,
    done: Vec<(&'static str, std::time::Duration)>,
}

impl Phases {
    fn start() -> Self {
        let now = std::time::Instant::now();
        Self {
            started: now,
            last: now,
            done: Vec::new(),
        }
    }

    /// Ends the phase `name`, begun when the last one ended: `ci: phase NAME took Ns`.
    fn end(&mut self, name: &'static str) {
        let took = self.last.elapsed();
        eprintln!("ci: phase {name} took {}s", took.as_secs());
        self.done.push((name, took));
        self.last = std::time::Instant::now();
    }

    /// One line per phase and the total.
    fn summary(&self) {
        eprintln!("ci: phases:");
        for (name, took) in &self.done {
            eprintln!("ci:   {:>6}s  {name}", took.as_secs());
        }
        eprintln!("ci:   {:>6}s  total", self.started.elapsed().as_secs());
    }
}

/// `cargo xtask ci operator`: only the `operator_kinds_real_` tests, on a private real-Flux
/// plane with the Flux Operator (the same tests `ci real` runs on its plane).
fn ci_operator() -> anyhow::Result<()> {
    let root = paths::root();
    if !proc::succeeds("cargo", &["nextest", "--version"], &root) {
        anyhow::bail!("cargo-nextest is missing: cargo install --locked cargo-nextest");
    }
    let real = cluster::RealPlane::start_with(&paths::scratch().join("ci-operator-cluster"), true)?;
    operator_tests(&real.kubeconfig)?;
    real.stop()
}

/// The `operator_kinds_real_` tests (`suites/realflux/tests/operator_real.rs`) against the real
/// Flux Operator on the real-Flux plane of `kubeconfig`, with the `flux-handoff` they run.
fn operator_tests(kubeconfig: &std::path::Path) -> anyhow::Result<()> {
    let cli = bins::build(&["handoff-cli"], &["flux-handoff"])?.remove(0);
    let env = [
        ("FLUX_HANDOFF_REAL_KUBECONFIG", kubeconfig.as_os_str()),
        ("FLUX_HANDOFF_BIN", cli.as_os_str()),
    ];
    nextest("realflux", "operator_real", &env)
}

/// `cargo nextest run -p PACKAGE --profile ci --test TEST` in the workspace with `env`.
fn nextest(package: &str, test: &str, env: &[(&str, &std::ffi::OsStr)]) -> anyhow::Result<()> {
    let args = [
        "nextest",
        "run",
        "-p",
        package,
        "--profile",
        "ci",
        "--test",
        test,
    ];
    proc::run_env("cargo", &args, &paths::root(), env)
}

/// Tier 4 of `ci` (also `cargo xtask ci eso` alone): the `eso_fanout_` tests against the real
/// External Secrets Operator (built from Go modules, cached; xtask/eso/) on a private control
/// plane of their own, where they install ESO's CRDs.
fn ci_eso() -> anyhow::Result<()> {
    let eso_bin = eso::ensure_built()?;
    let crds = eso::crds()?;
    let bin = envtest::ensure_built()?;
    let plane = cluster::Private::start(&bin, &paths::scratch().join("ci-eso-cluster"))?;
    let env = [
        ("FLUX_HANDOFF_ESO_KUBECONFIG", plane.kubeconfig.as_os_str()),
        ("FLUX_HANDOFF_ESO_BIN", eso_bin.as_os_str()),
        ("FLUX_HANDOFF_ESO_CRDS", crds.as_os_str()),
    ];
    nextest("ghcr-auth", "eso_fanout", &env)?;
    plane.stop()
}

/// Tier 3 of `ci` (also `cargo xtask ci real` alone): the `real_flux_` tests and the `fact_`
/// tests against the real Flux controllers (built from Go modules, cached) on a private control
/// plane of their own, then the `flux_events_` tests (handoff-cli's `flux_events` binary:
/// `--events-addr` through the real notification-controller) and the `operator_kinds_real_`
/// tests (the real Flux Operator, run beside the controllers) on the same plane.
fn ci_real() -> anyhow::Result<()> {
    let root = paths::root();
    if !proc::succeeds("cargo", &["nextest", "--version"], &root) {
        anyhow::bail!("cargo-nextest is missing: cargo install --locked cargo-nextest");
    }
    let real = cluster::RealPlane::start_with(&paths::scratch().join("ci-real-cluster"), true)?;
    let env = [("FLUX_HANDOFF_REAL_KUBECONFIG", real.kubeconfig.as_os_str())];
    nextest("realflux", "real_flux", &env)?;
    nextest("handoff-cli", "flux_events", &env)?;
    operator_tests(&real.kubeconfig)?;
    real.stop()
}
