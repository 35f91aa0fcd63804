//! `--flux real`: the real Flux controllers beside a control plane, instead of the model.
//!
//! State files in the control plane's directory: `flux` (`real`), `crds/` (the CRDs the
//! launcher installs: upstream's from the Go module cache), `registry-password` (mode 0600),
//! `registry.{pid,stdout,log}` (the local registry holding the artifact, run by
//! `flux-real-setup registry`), and per controller `<name>.{pid,stdout,log}` and `<name>-tmp/`
//! (its `TMPDIR`), `<name>.bin` (the binary's path, for tests that run a shard of their own);
//! source-controller's artifact storage is `source-storage/`; `notification-controller.events`
//! holds the URL of notification-controller's event server (what `--events-addr` takes).
//! With the operator (`--operator`): `flux-operator.{pid,stdout,log}`, `flux-operator-tmp/` and
//! `flux-operator-storage/` (its `--storage-path`, left empty: no Flux distribution to install).

use std::fmt::Write as _;
use std::fs;
use std::io::Read as _;
use std::net::TcpListener;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::daemon::{self, Spec};
use crate::flux::{self, Controller};
use crate::{bins, operator};

/// Which Flux runs beside the control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flux {
    /// `flux-model`, our controller model (the default).
    Model,
    /// kustomize-, source-, helm- and notification-controller built from Go modules.
    Real,
}

impl Flux {
    /// Parses the value of `--flux`.
    pub fn parse(value: &str) -> anyhow::Result<Self> {
        match value {
            "model" => Ok(Self::Model),
            "real" => Ok(Self::Real),
            other => bail!("--flux takes `model` or `real`, not `{other}`"),
        }
    }

    fn word(self) -> &'static str {
        match self {
            Self::Model => "model",
            Self::Real => "real",
        }
    }

    /// Records which Flux a control plane in `state` runs.
    pub fn record(self, state: &Path) -> anyhow::Result<()> {
        fs::write(state.join("flux"), self.word())?;
        Ok(())
    }

    /// Which Flux the control plane in `state` runs (model when unrecorded).
    pub fn of(state: &Path) -> Self {
        match fs::read_to_string(state.join("flux"))
            .as_deref()
            .map(str::trim)
        {
            Ok("real") => Self::Real,
            _ => Self::Model,
        }
    }
}

/// The registry user of the plane's artifact (testkit `real_flux::USER`).
pub const REGISTRY_USER: &str = "flux-pull";
/// The plane's artifact, `<repo>:<tag>` (testkit `real_flux::{REPO, TAG}`).
pub const ARTIFACT: &str = "flux-system/manifests:latest";

/// `127.0.0.1:<port>` of the registry of the real-Flux plane in `state`.
pub fn registry_host(state: &Path) -> anyhow::Result<String> {
    let out = fs::read_to_string(state.join(format!("{}.stdout", REGISTRY.0)))
        .context("reading the registry's output")?;
    out.split_whitespace()
        .find_map(|w| w.strip_prefix("host="))
        .map(str::to_string)
        .context("the registry printed no host=")
}

/// The registry password of the real-Flux plane in `state` (a throwaway, mode 0600).
pub fn registry_password(state: &Path) -> anyhow::Result<String> {
    Ok(fs::read_to_string(state.join("registry-password"))
        .context("reading the registry password")?
        .trim()
        .to_string())
}

/// The registry process: (state-file stem, program name).
const REGISTRY: (&str, &str) = ("registry", "flux-real-setup");
const SETUP_BIN: &str = "flux-real-setup";
/// How long a controller gets to stop after SIGTERM.
const GRACE: Duration = Duration::from_secs(10);
/// Objects labelled with this key are left to a shard controller (Flux's sharding).
const SHARD_KEY: &str = "sharding.fluxcd.io/key";
/// How long a controller may take to start its workers.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// Builds what `--flux real` needs (the controllers, cached; the setup tool; with
/// `with_operator` the Flux Operator) and writes the CRDs to install into `state/crds`; returns that directory.
pub fn prepare(state: &Path, with_operator: bool) -> anyhow::Result<PathBuf> {
    for c in flux::CONTROLLERS {
        c.ensure_built()?;
    }
    let mut files = Vec::new();
    if with_operator {
        operator::ensure_built()?;
        files.extend(operator::crds()?);
    }
    for c in flux::CONTROLLERS {
        files.extend(c.crds()?);
    }
    let crds = state.join("crds");
    fs::create_dir_all(&crds)?;
    for file in files {
        let name = file.file_name().context("CRD file without a name")?;
        fs::copy(&file, crds.join(name)).with_context(|| format!("copying {}", file.display()))?;
    }
    Ok(crds)
}

/// Starts the registry and the controllers against `kubeconfig` and seeds `flux-system` from
/// the artifact, then (with `with_operator`) the Flux Operator; returns a one-line summary.
/// Everything started is stopped on failure.
pub fn start(
    state: &Path,
    kubeconfig: &Path,
    detach: bool,
    with_operator: bool,
) -> anyhow::Result<String> {
    let result = start_inner(state, kubeconfig, detach).and_then(|seeded| {
        if !with_operator {
            return Ok(seeded);
        }
        let spec = operator_spec(state, kubeconfig)?.detach(detach);
        daemon::start(&spec, state).context("starting flux-operator")?;
        eprintln!("xtask: {} {} running", operator::NAME, operator::VERSION);
        Ok(format!(
            "{seeded}; {} {}",
            operator::NAME,
            operator::VERSION
        ))
    });
    if result.is_err() {
        let _ = stop(state);
    }
    result
}

/// The Flux Operator against `kubeconfig`, kept offline and alone: no leader election
/// (upstream turns it on unless the flag is given, cmd/operator/main.go:139-142), metrics and
/// health endpoints off (`0`), the web UI off (`--web-server-port=0`, and `WEB_SERVER_PORT`,
/// which would override the flag, set to 0 too: main.go:376-386), the offline entitlement
/// client (`MARKETPLACE_TYPE` empty, internal/entitlement/client.go:47-56), an empty
/// `--storage-path` (no Flux distribution: a `FluxInstance` cannot install over the plane's
/// own controllers), `RUNTIME_NAMESPACE=flux-system` (the only place a `FluxInstance` named
/// `flux` is reconciled, main.go:235-241), and its events to the plane's notification-controller
/// on loopback (`NOTIFICATION_CONTROLLER_ADDRESS`, internal/notifier/notifier.go:56; without it
/// the operator posts to `notification-controller.flux-system.svc.cluster.local.`).
fn operator_spec(state: &Path, kubeconfig: &Path) -> anyhow::Result<Spec> {
    let bin = operator::ensure_built()?;
    let events = fs::read_to_string(state.join(format!("{}.events", flux::NOTIFICATION.name)))
        .context("reading the event server address of notification-controller")?;
    let tmp = state.join(format!("{}-tmp", operator::NAME));
    let storage = state.join(format!("{}-storage", operator::NAME));
    fs::create_dir_all(&tmp)?;
    fs::create_dir_all(&storage)?;
    let mut spec = Spec::new(operator::NAME, bin, "Starting workers")
        .ready_in_log()
        .args([
            "--enable-leader-election=false",
            "--metrics-addr=0",
            "--health-addr=0",
            "--web-server-port=0",
            "--log-level=info",
        ])
        .arg(format!("--storage-path={}", storage.display()))
        .env("KUBECONFIG", &kubeconfig.to_string_lossy())
        .env("TMPDIR", &tmp.to_string_lossy())
        .env("RUNTIME_NAMESPACE", "flux-system")
        .env("WEB_SERVER_PORT", "0")
        .env("MARKETPLACE_TYPE", "")
        .env("NOTIFICATION_CONTROLLER_ADDRESS", events.trim());
    spec.timeout = START_TIMEOUT;
    Ok(spec)
}

fn start_inner(state: &Path, kubeconfig: &Path, detach: bool) -> anyhow::Result<String> {
    let setup = bins::build(&["realflux"], &[SETUP_BIN])?.remove(0);
    let password = random_hex()?;
    write_private(&state.join("registry-password"), &password)?;
    let line = daemon::start(
        &Spec::new(REGISTRY.0, &setup, "registry ready")
            .arg("registry")
            .env(PASSWORD_ENV, &password)
            .detach(detach),
        state,
    )
    .context("starting the registry")?;
    let host = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("host="))
        .context("registry line without host=")?
        .to_string();
    for c in flux::CONTROLLERS {
        let spec = controller_spec(c, state, kubeconfig)?.detach(detach);
        daemon::start(&spec, state).with_context(|| format!("starting {}", c.name))?;
        eprintln!("xtask: {} {} running", c.name, c.version);
    }
    let out = Command::new(&setup)
        .args(["seed", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--host", &host])
        .env(PASSWORD_ENV, &password)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("running flux-real-setup seed")?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("no output");
        bail!(
            "{last}\nkustomize-controller log tail:\n{}",
            daemon::tail(&state.join(format!("{}.log", flux::KUSTOMIZE.name)))
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The environment variable the registry password reaches `flux-real-setup` by.
const PASSWORD_ENV: &str = "FLUX_REAL_REGISTRY_PASSWORD";

fn controller_spec(c: Controller, state: &Path, kubeconfig: &Path) -> anyhow::Result<Spec> {
    let bin = c.ensure_built()?;
    let tmp = state.join(format!("{}-tmp", c.name));
    fs::create_dir_all(&tmp)?;
    // Tests that kill a controller run a shard of their own (docs/real-flux.md).
    fs::write(
        state.join(format!("{}.bin", c.name)),
        bin.as_os_str().as_encoded_bytes(),
    )?;
    let mut spec = Spec::new(c.name, bin, "Starting workers")
        .ready_in_log()
        .args(["--metrics-addr=0", "--health-addr=0", "--log-level=info"])
        .env("KUBECONFIG", &kubeconfig.to_string_lossy())
        .env("TMPDIR", &tmp.to_string_lossy())
        .env("RUNTIME_NAMESPACE", "flux-system");
    spec.timeout = START_TIMEOUT;
    if c == flux::KUSTOMIZE || c == flux::HELM {
        spec = spec.arg(format!("--watch-label-selector=!{SHARD_KEY}"));
        for arg in extra_args(std::env::var(EXTRA_ARGS_ENV).ok().as_deref()) {
            spec = spec.arg(arg);
        }
    }
    if c == flux::NOTIFICATION {
        // The event server on a loopback port of its own, recorded for the tests; the webhook
        // receiver (unused here) on another.
        let events = free_loopback_addr()?;
        fs::write(
            state.join(format!("{}.events", c.name)),
            format!("http://{events}/"),
        )?;
        spec = spec
            .arg(format!("--events-addr={events}"))
            .arg(format!("--receiverAddr={}", free_loopback_addr()?));
    }
    if c == flux::SOURCE {
        let storage = state.join("source-storage");
        fs::create_dir_all(&storage)?;
        let addr = free_loopback_addr()?;
        spec = spec
            .arg(format!("--storage-path={}", storage.display()))
            .arg(format!("--storage-addr={addr}"))
            .arg(format!("--storage-adv-addr={addr}"));
    }
    Ok(spec)
}

/// `127.0.0.1:<port>` of a port free a moment ago (the controller binds it right after).
fn free_loopback_addr() -> anyhow::Result<String> {
    Ok(format!(
        "127.0.0.1:{}",
        TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()
    ))
}

/// Extra arguments for kustomize- and helm-controller, whitespace-separated, e.g.
/// `--feature-gates=CancelHealthCheckOnNewRevision=true` (a feature gate is read at start).
pub const EXTRA_ARGS_ENV: &str = "FLUX_HANDOFF_REAL_CONTROLLER_ARGS";

/// The arguments in the value of [`EXTRA_ARGS_ENV`].
fn extra_args(value: Option<&str>) -> Vec<String> {
    value
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Stops the controllers and the registry of `state` (those that run).
pub fn stop(state: &Path) -> anyhow::Result<()> {
    let mut first_err = None;
    if let Err(e) = daemon::stop(state, operator::NAME, operator::NAME, GRACE) {
        first_err.get_or_insert(e);
    }
    for c in flux::CONTROLLERS.iter().rev() {
        if let Err(e) = daemon::stop(state, c.name, c.name, GRACE) {
            first_err.get_or_insert(e);
        }
    }
    if let Err(e) = daemon::stop(state, REGISTRY.0, REGISTRY.1, GRACE) {
        first_err.get_or_insert(e);
    }
    first_err.map_or(Ok(()), Err)
}

fn random_hex() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    Ok(bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    }))
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
    fn extra_controller_args_split_on_whitespace() {
        assert!(extra_args(None).is_empty());
        assert!(extra_args(Some("  ")).is_empty());
        assert_eq!(
            extra_args(Some(
                "--feature-gates=CancelHealthCheckOnNewRevision=true  --log-level=debug"
            )),
            [
                "--feature-gates=CancelHealthCheckOnNewRevision=true",
                "--log-level=debug"
            ]
        );
    }

    #[test]
    fn flux_parses_model_and_real_only() {
        assert_eq!(Flux::parse("real").unwrap(), Flux::Real);
        assert_eq!(Flux::parse("model").unwrap(), Flux::Model);
        assert!(Flux::parse("Real").is_err());
    }
}
