//! `cargo xtask demo [--keep]` and `cargo xtask demo down`: the GHCR credential handoff of the
//! original incident, end to end, on a private control plane.
//!
//! 1. Tools: `docker-registry` and `htpasswd` (installed with apt-get when missing and root).
//! 2. Build the binaries, start a control plane in `target/flux-handoff/demo` (never the shared
//!    one) with the controller model seeding `flux-system` (parent `flux-system` applying
//!    `infrastructure` and `apps`).
//! 3. Start the registry (a throwaway token, passed by environment) with `demo/podinfo:6.9.2`,
//!    and the source model serving `OCIRepository` objects in `flux-system`.
//! 4. Seed a rotated-credential state (`flux-demo-setup seed`: stale Secrets, a source failing
//!    to pull) and freeze the parent at `Reconciling=True` (`flux-demo-setup freeze`).
//! 5. `flux-handoff ghcr reassert` as a user runs it; then `flux-handoff run -- flux-handoff
//!    fences` to show the fences while held; then `flux-handoff fences --output json`.
//! 6. The last line: `demo: ok pause_proven=<s>s secrets_reasserted=<n> fences_left=0`, only
//!    when every step passed. Any failure is one `xtask: ...` line and a non-zero exit.
//!
//! With `--flux real` (docs/real-flux.md) the same story runs against the real kustomize- and
//! source-controller of `cluster up --flux real`: no source model; the registry is that plane's
//! (user `flux-pull`, its password the throwaway credential), the image its Flux artifact, and
//! source-controller itself fails to pull with the stale Secret and pulls again after the
//! reassert.
//!
//! Without `--keep` everything stops on every exit path (a guard's `Drop`; Ctrl-C reaches the
//! processes, which share our process group); with `--keep` they run in their own process
//! groups and `cargo xtask demo down` stops them.

mod fanout;
mod report;

pub use fanout::Fanout;

use std::fmt::Write as _;
use std::fs;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::daemon::{self, Spec};
use crate::realflux::{self, Flux};
use crate::{bins, cluster, paths};

/// The demo user of the registry and of the credential.
const USER: &str = "demo-bot";
/// The environment variable the credential reaches `flux-handoff` by.
const TOKEN_ENV: &str = "GHCR_TOKEN";
const REASON: &str = "cargo xtask demo: rotate the GHCR pull credential";
const GRACE: Duration = Duration::from_secs(10);
/// Helper processes of the demo: (state-file stem, program name).
const REGISTRY: (&str, &str) = ("registry", "flux-demo-setup");
const SOURCE_MODEL: (&str, &str) = ("source-model", "flux-source-model");

/// `cargo xtask demo [--keep] [--flux model|real] [--fanout direct|eso]`.
pub fn run(keep: bool, flux: Flux, fanout: Fanout) -> anyhow::Result<()> {
    if fanout == Fanout::Eso && flux == Flux::Real {
        bail!("--fanout eso runs on the controller model only (drop --flux real)");
    }
    let started = Instant::now();
    let state = paths::demo_state();
    let mut clock = Clock::new();
    require_tools("the demo")?;
    if cluster::running(&state).is_some() {
        eprintln!("xtask: stopping the demo left running by an earlier `cargo xtask demo --keep`");
    }
    stop_all(&state)?;
    let (packages, wanted): (&[&str], &[&str]) = match flux {
        Flux::Model => (
            &["flux-model", "flux-demo-setup"],
            &["flux-model", "flux-source-model", "flux-demo-setup"],
        ),
        Flux::Real => (&["flux-demo-setup"], &["flux-demo-setup"]),
    };
    let testkit = bins::build(packages, wanted)?;
    let cli = bins::build(&["handoff-cli"], &["flux-handoff"])?.remove(0);
    clock.step("built flux-handoff, the Flux side, the setup tool");
    let eso = if fanout == Fanout::Eso {
        let prepared = fanout::prepare()?;
        clock.step("External Secrets Operator built (cached) with its CRDs");
        Some(prepared)
    } else {
        None
    };

    let (_launcher, line) = cluster::start(&state, keep, flux)?;
    let teardown = Teardown {
        state: state.clone(),
        keep,
    };
    let kubeconfig = cluster::kubeconfig_of(&line)?;
    let demo = match flux {
        Flux::Model => {
            clock.step("control plane and controller model ready (flux-system seeded)");
            Demo::start_helpers(&state, kubeconfig, cli, &testkit, keep)?
        }
        Flux::Real => {
            clock.step(
                "control plane, real kustomize-controller and source-controller ready \
                 (flux-system seeded from the OCI artifact)",
            );
            Demo::on_real_plane(&state, kubeconfig, cli, &testkit[0])?
        }
    };
    clock.step(&format!(
        "registry {} holds {}; {} running",
        demo.host,
        demo.image,
        match flux {
            Flux::Model => "source model",
            Flux::Real => "source-controller",
        }
    ));
    let summary = demo.seed_and_reassert(&state, eso.as_ref(), keep, &mut clock)?;
    if let Some(s) = &summary {
        clock.step(&format!(
            "ghcr reassert: pause proven in {:.1}s despite the frozen parent, {} Secrets \
             reasserted, the source pulls again",
            s.pause_proven_secs, s.secrets
        ));
    }
    let fences_left = demo.show_fences()?;
    clock.step(&format!(
        "fences shown while held; {fences_left} left after the runs"
    ));

    if keep {
        eprintln!(
            "demo: kept running (stop it with `cargo xtask demo down`); the throwaway token is \
             in {}",
            state.join("ghcr-token").display()
        );
        println!("export KUBECONFIG={}", demo.kubeconfig.display());
    }
    drop(teardown);
    eprintln!("demo: total {:.1}s", started.elapsed().as_secs_f64());
    let Some(summary) = summary else {
        bail!(
            "incomplete: this build has no `flux-handoff ghcr reassert`, so the credential \
             handoff did not run (everything else did)"
        );
    };
    if fences_left != 0 {
        bail!("{fences_left} fence(s) left after the runs; see `flux-handoff fences`");
    }
    println!(
        "demo: ok pause_proven={:.1}s secrets_reasserted={} fences_left={fences_left}",
        summary.pause_proven_secs, summary.secrets
    );
    Ok(())
}

/// The running demo: where things are, and the throwaway credential.
struct Demo {
    kubeconfig: PathBuf,
    /// The registry user the credential belongs to.
    user: &'static str,
    cli: PathBuf,
    setup: PathBuf,
    token: String,
    /// The registry, `127.0.0.1:<port>`.
    host: String,
    /// The pushed image, `<host>/demo/podinfo:6.9.2`.
    image: String,
}

impl Demo {
    /// Starts the registry and the source model; `helpers` are the paths of the flux-model,
    /// flux-source-model and flux-demo-setup binaries.
    fn start_helpers(
        state: &Path,
        kubeconfig: PathBuf,
        cli: PathBuf,
        helpers: &[PathBuf],
        keep: bool,
    ) -> anyhow::Result<Self> {
        let [_, source_model, setup] = helpers else {
            bail!("expected three helper binaries");
        };
        let token = demo_token()?;
        write_private(&state.join("ghcr-token"), &token)?;
        let registry = daemon::start(
            &Spec::new(REGISTRY.0, setup, "registry ready")
                .arg("registry")
                .env("FLUX_DEMO_USER", USER)
                .env("FLUX_DEMO_TOKEN", &token)
                .detach(keep),
            state,
        )
        .context("starting the demo registry")?;
        let image = report::word(&registry, "image=").context("registry line without image=")?;
        let host = report::word(&registry, "host=").context("registry line without host=")?;
        daemon::start(
            &Spec::new(SOURCE_MODEL.0, source_model, "source model ready")
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["--namespace", "flux-system"])
                .detach(keep),
            state,
        )
        .context("starting the source model")?;
        Ok(Self {
            kubeconfig,
            user: USER,
            cli,
            setup: setup.clone(),
            token,
            host,
            image,
        })
    }

    /// The demo on a `--flux real` plane: its registry, user and artifact (no helper process).
    fn on_real_plane(
        state: &Path,
        kubeconfig: PathBuf,
        cli: PathBuf,
        setup: &Path,
    ) -> anyhow::Result<Self> {
        let host = realflux::registry_host(state)?;
        let token = realflux::registry_password(state)?;
        Ok(Self {
            kubeconfig,
            user: realflux::REGISTRY_USER,
            cli,
            setup: setup.to_path_buf(),
            token,
            image: format!("{host}/{}", realflux::ARTIFACT),
            host,
        })
    }

    /// The seeded state (with ESO's layout and ESO itself when `eso` names its binary and
    /// CRDs), then the rotation.
    fn seed_and_reassert(
        &self,
        state: &Path,
        eso: Option<&(PathBuf, PathBuf)>,
        keep: bool,
        clock: &mut Clock,
    ) -> anyhow::Result<Option<report::ReassertSummary>> {
        self.seed(eso.is_none())?;
        clock.step("seeded: stale Secrets, a source that cannot pull, a frozen parent");
        let Some((bin, crds)) = eso else {
            return self.reassert();
        };
        self.eso_seed(crds, || fanout::start(state, bin, &self.kubeconfig, keep))?;
        clock.step("External Secrets running; the stale credential synced into each consumer");
        self.reassert_eso(state)
    }

    /// Stale Secrets (a consumer's too unless ESO writes the consumers), a source that cannot
    /// pull with them, and the frozen parent.
    fn seed(&self, consumer_secret: bool) -> anyhow::Result<()> {
        let mut seed = Command::new(&self.setup);
        seed.args(["seed", "--kubeconfig"])
            .arg(&self.kubeconfig)
            .args(["--image", &self.image]);
        if !consumer_secret {
            seed.arg("--no-consumer-secret");
        }
        run_step(&mut seed, "seeding the rotated-credential state")?;
        run_step(
            Command::new(&self.setup)
                .args(["freeze", "--kubeconfig"])
                .arg(&self.kubeconfig),
            "freezing the parent",
        )
    }

    /// `flux-handoff` with the demo's kubeconfig, short waits, and no stray config file.
    fn handoff(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.cli);
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env_remove("FLUX_HANDOFF_CONFIG")
            .args(["--interval", "500ms", "--timeout", "120s"])
            .args(args);
        cmd
    }

    /// Runs `ghcr reassert` as a user would, when this build has it.
    fn reassert(&self) -> anyhow::Result<Option<report::ReassertSummary>> {
        let available = self
            .handoff(&["ghcr", "reassert", "--help"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !available {
            eprintln!("demo: this build has no `flux-handoff ghcr reassert`; skipping it");
            return Ok(None);
        }
        let args = [
            "--reason",
            REASON,
            "--output",
            "json",
            "ghcr",
            "reassert",
            "--credential-env",
            TOKEN_ENV,
            "--username",
            self.user,
            "--image",
            &self.image,
            "--insecure-http-host",
            &self.host,
            "--target",
            "infrastructure",
            "--secret-name",
            "ghcr-auth",
            "--namespace-list",
            "infrastructure,apps",
            "--root-secret",
            "flux-system/ghcr-auth",
            "--source",
            "flux-system/podinfo",
        ];
        eprintln!(
            "demo: $ {TOKEN_ENV}=<token> flux-handoff {}",
            shell_words(&args)
        );
        let doc = capture_json(
            self.handoff(&args).env(TOKEN_ENV, &self.token),
            "flux-handoff ghcr reassert",
        )?;
        report::reassert_summary(&doc).map(Some)
    }

    /// ESO's CRDs and the layout, then ESO (`start_eso`: it refuses to start without its
    /// CRDs), then its first sync of the stale credential into every consumer.
    fn eso_seed(
        &self,
        crds: &Path,
        start_eso: impl FnOnce() -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let setup = |step: &str| {
            let mut cmd = Command::new(&self.setup);
            cmd.args([step, "--kubeconfig"])
                .arg(&self.kubeconfig)
                .args(["--image", &self.image]);
            cmd
        };
        run_step(
            setup("eso-seed").env("FLUX_HANDOFF_ESO_CRDS", crds),
            "creating the External Secrets layout",
        )?;
        start_eso()?;
        run_step(&mut setup("eso-synced"), "waiting for ESO's first sync")
    }

    /// `ghcr reassert` from the layout's config file, then the read-back of every consumer
    /// and the root. Secrets reasserted: the root's count plus each consumer ESO converged.
    fn reassert_eso(&self, state: &Path) -> anyhow::Result<Option<report::ReassertSummary>> {
        let (config, text) =
            fanout::config_file(state, self.user, &self.image, &self.host, TOKEN_ENV)?;
        eprintln!("demo: {}:", config.display());
        for line in text.lines() {
            eprintln!("demo:   {line}");
        }
        let config = config.to_string_lossy();
        let args = [
            "--config", &config, "--reason", REASON, "--output", "json", "ghcr", "reassert",
        ];
        eprintln!(
            "demo: $ {TOKEN_ENV}=<token> flux-handoff {}",
            shell_words(&args)
        );
        let doc = capture_json(
            self.handoff(&args).env(TOKEN_ENV, &self.token),
            "flux-handoff ghcr reassert (External Secrets)",
        )?;
        let mut summary = report::reassert_summary(&doc)?;
        summary.secrets += report::external_secrets(&doc)?;
        run_step(
            Command::new(&self.setup)
                .args(["eso-check", "--kubeconfig"])
                .arg(&self.kubeconfig)
                .args(["--image", &self.image])
                .env("FLUX_DEMO_TOKEN", &self.token),
            "reading the consumers and the root back",
        )?;
        Ok(Some(summary))
    }

    /// `flux-handoff fences` from inside a handoff (fences held), then the count after it.
    fn show_fences(&self) -> anyhow::Result<usize> {
        let cli = self.cli.to_string_lossy();
        eprintln!("demo: $ flux-handoff run --target infrastructure -- flux-handoff fences");
        run_step(
            &mut self.handoff(&[
                "--reason",
                "cargo xtask demo: show the fences while held",
                "run",
                "--target",
                "infrastructure",
                "--",
                &cli,
                "fences",
            ]),
            "flux-handoff run -- flux-handoff fences",
        )?;
        let doc = capture_json(
            &mut self.handoff(&["--output", "json", "fences", "--all-namespaces"]),
            "flux-handoff fences --output json",
        )?;
        report::fences_left(&doc)
    }
}

/// `cargo xtask demo down`: stops a demo left running by `--keep`.
pub fn down() -> anyhow::Result<()> {
    stop_all(&paths::demo_state())
}

/// Stops the demo's helper processes, then its controller model and control plane.
fn stop_all(state: &Path) -> anyhow::Result<()> {
    if !state.exists() {
        return Ok(());
    }
    // A real-Flux demo has no helpers of its own: its registry is the plane's (same state
    // stem), which `cluster::stop` stops.
    if Flux::of(state) == Flux::Real {
        return cluster::stop(state);
    }
    let eso = daemon::stop(state, fanout::ESO.0, fanout::ESO.1, GRACE);
    let source = daemon::stop(state, SOURCE_MODEL.0, SOURCE_MODEL.1, GRACE);
    let registry = daemon::stop(state, REGISTRY.0, REGISTRY.1, GRACE);
    cluster::stop(state)?;
    eso?;
    source?;
    registry?;
    Ok(())
}

/// Stops everything when dropped, unless the demo keeps it.
struct Teardown {
    state: PathBuf,
    keep: bool,
}

impl Drop for Teardown {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        if let Err(e) = stop_all(&self.state) {
            eprintln!("xtask: stopping the demo: {e:#}");
        }
    }
}

/// Prints each finished step with its duration.
struct Clock {
    last: Instant,
}

impl Clock {
    fn new() -> Self {
        Self {
            last: Instant::now(),
        }
    }

    fn step(&mut self, line: &str) {
        eprintln!("demo: {line} ({:.1}s)", self.last.elapsed().as_secs_f64());
        self.last = Instant::now();
    }
}

/// Arguments as a shell would need them typed (single-quoted when they hold spaces).
fn shell_words(args: &[&str]) -> String {
    args.iter()
        .map(|a| {
            if a.contains(|c: char| c.is_whitespace() || c == '\'') {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                (*a).to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs a step with its output shown; fails loudly.
fn run_step(cmd: &mut Command, what: &str) -> anyhow::Result<()> {
    let status = cmd
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("cannot start {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// Runs a command whose stdout is one JSON document (stderr shown); fails loudly.
fn capture_json(cmd: &mut Command, what: &str) -> anyhow::Result<serde_json::Value> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start {what}"))?;
    let doc: Option<serde_json::Value> = serde_json::from_slice(&out.stdout).ok();
    if !out.status.success() {
        let error = doc
            .as_ref()
            .and_then(|d| d["error"].as_str())
            .unwrap_or("see its output above");
        bail!("{what} failed ({}): {error}", out.status);
    }
    doc.with_context(|| format!("{what} printed no JSON document"))
}

/// Tools the local registry needs (the demo's and the tests').
const REGISTRY_TOOLS: &[Need] = &[
    Need::Program("docker-registry", "docker-registry"),
    Need::Program("htpasswd", "apache2-utils"),
    Need::Program("sha256sum", "coreutils"),
];

/// Where Debian's `libfaketime` puts the library the clock-skew tests preload.
pub(crate) const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// One thing a command needs from Debian: a program on `PATH` or a file, and its package.
#[derive(Clone, Copy)]
pub(crate) enum Need {
    Program(&'static str, &'static str),
    File(&'static str, &'static str),
}

impl Need {
    fn present(self) -> bool {
        match self {
            Need::Program(p, _) => on_path(p),
            Need::File(f, _) => std::path::Path::new(f).is_file(),
        }
    }

    fn package(self) -> &'static str {
        match self {
            Need::Program(_, p) | Need::File(_, p) => p,
        }
    }
}

/// Tools the local registry needs (the demo's and the tests'); installed with apt-get when
/// missing and we are root, otherwise the one command to run is named and `who` fails.
pub(crate) fn require_tools(who: &str) -> anyhow::Result<()> {
    require(who, REGISTRY_TOOLS)
}

/// `needs` installed with apt-get when missing and we are root; otherwise the one command to
/// run is named and `who` fails.
pub(crate) fn require(who: &str, needs: &[Need]) -> anyhow::Result<()> {
    let mut packages: Vec<&str> = needs
        .iter()
        .filter(|n| !n.present())
        .map(|n| n.package())
        .collect();
    packages.dedup();
    if packages.is_empty() {
        return Ok(());
    }
    let install = format!("apt-get install -y {}", packages.join(" "));
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    if !root || !on_path("apt-get") {
        bail!(
            "{who} needs {}: install it with `sudo {install}`",
            packages.join(", ")
        );
    }
    eprintln!("xtask: $ {install}");
    let run = || {
        Command::new("apt-get")
            .args(["install", "-y"])
            .args(&packages)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    if !run() {
        eprintln!("xtask: $ apt-get update");
        let updated = Command::new("apt-get")
            .arg("update")
            .status()
            .is_ok_and(|s| s.success());
        if !updated || !run() {
            bail!("`{install}` failed");
        }
    }
    Ok(())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

/// A throwaway token for the local registry (not a real credential).
fn demo_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    let hex: String = bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    });
    Ok(format!("ghp_demo{hex}"))
}

/// Writes a file only its owner can read.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let _ = fs::remove_file(path);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_quotes_only_what_needs_it() {
        assert_eq!(
            shell_words(&["--reason", "a b", "it's", "x"]),
            r"--reason 'a b' 'it'\''s' x"
        );
    }
}
