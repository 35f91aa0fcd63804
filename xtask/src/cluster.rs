//! Starting and stopping the local control plane and its controller model.
//!
//! State of one control plane lives in a directory: `envtest/` (key material, etcd data,
//! kubeconfig, owned by the launcher), `pid`, `ready` (the launcher's ready line), `stdout`,
//! `log` (the API server's stderr), and `model.pid`, `model.stdout`, `model.log` for the Flux
//! controller model process (`flux-model --namespace flux-system --seed`).

use std::fs;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::daemon::{self, Spec};
use crate::realflux::{self, Flux};
use crate::{bins, envtest, paths, proc};

const READY_TIMEOUT: Duration = Duration::from_mins(3);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// The controller model's state-file stem and program name.
const MODEL: &str = "model";
const MODEL_BIN: &str = "flux-model";
/// How long the model gets to shut down its controllers after SIGTERM.
const MODEL_STOP_GRACE: Duration = Duration::from_secs(10);

/// `cargo xtask cluster up [--flux model|real [--operator]] [--detach]`.
pub fn up(detach: bool, flux: Flux, with_operator: bool) -> anyhow::Result<()> {
    let state = paths::cluster_state();
    if let Some(line) = running(&state) {
        if Flux::of(&state) != flux {
            bail!(
                "a control plane with the other Flux ({:?}) is already running in {}; `cargo \
                 xtask cluster down` first",
                Flux::of(&state),
                state.display()
            );
        }
        if detach {
            if flux == Flux::Model && daemon::running(&state, MODEL, MODEL_BIN).is_none() {
                eprintln!(
                    "xtask: this control plane runs without the controller model (started by an \
                     older xtask?); `cargo xtask cluster down` then `up` starts both"
                );
            }
            println!("{line}");
            return Ok(());
        }
        bail!("a control plane is already running ({line}); `cargo xtask cluster down` first");
    }
    let (mut child, line) = start_with(&state, detach, flux, with_operator)?;
    println!("{line}");
    if detach {
        return Ok(());
    }
    eprintln!("xtask: running in the foreground; Ctrl-C stops it");
    let status = child.wait()?;
    daemon::stop(&state, MODEL, MODEL_BIN, MODEL_STOP_GRACE)?;
    realflux::stop(&state)?;
    clean(&state)?;
    if !status.success() {
        bail!("the launcher exited with {status}; see its log above");
    }
    Ok(())
}

/// `cargo xtask cluster down`.
pub fn down() -> anyhow::Result<()> {
    stop(&paths::cluster_state())
}

/// `cargo xtask cluster check [--kubeconfig K]`: `flux-handoff doctor` against the control
/// plane of `cluster up` (or K).
pub fn check(kubeconfig: Option<&str>) -> anyhow::Result<()> {
    let kubeconfig = if let Some(k) = kubeconfig {
        PathBuf::from(k)
    } else {
        let state = paths::cluster_state();
        let line = running(&state).with_context(|| {
            format!(
                "no control plane is running in {}; `cargo xtask cluster up --detach` first, or \
                 pass --kubeconfig",
                state.display()
            )
        })?;
        kubeconfig_of(&line)?
    };
    let cli = bins::build(&["handoff-cli"], &["flux-handoff"])?.remove(0);
    eprintln!(
        "xtask: $ flux-handoff doctor --kubeconfig {}",
        kubeconfig.display()
    );
    let status = Command::new(cli)
        .arg("doctor")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .status()
        .context("cannot run flux-handoff doctor")?;
    if !status.success() {
        bail!("flux-handoff doctor found failing checks ({status}); see its FAIL lines above");
    }
    Ok(())
}

/// Stops the controller model, then the control plane, of `state`, and deletes the state.
pub fn stop(state: &Path) -> anyhow::Result<()> {
    let model = daemon::stop(state, MODEL, MODEL_BIN, MODEL_STOP_GRACE);
    let real = realflux::stop(state);
    match read_pid(state) {
        Some(pid) if proc::alive(pid) => {
            stop_pid(pid)?;
            eprintln!("xtask: control plane stopped");
        }
        _ => eprintln!("xtask: no control plane was running"),
    }
    model?;
    real?;
    clean(state)
}

/// Builds (cached) and starts a control plane in `state`, then `flux` against it (the
/// controller model, or the real controllers seeded from the local registry); returns the
/// launcher and its ready line, written to `state/ready` once all is ready. With `detach`,
/// everything runs in its own process group.
pub fn start(state: &Path, detach: bool, flux: Flux) -> anyhow::Result<(Child, String)> {
    start_with(state, detach, flux, false)
}

/// [`start`], with the real Flux Operator beside the real controllers when `with_operator`
/// (only with [`Flux::Real`]).
pub fn start_with(
    state: &Path,
    detach: bool,
    flux: Flux,
    with_operator: bool,
) -> anyhow::Result<(Child, String)> {
    if with_operator && flux != Flux::Real {
        bail!("the Flux Operator runs only beside the real controllers (--flux real)");
    }
    let bin = envtest::ensure_built()?;
    clean(state)?;
    flux.record(state)?;
    if flux == Flux::Real {
        let crds = realflux::prepare(state, with_operator)?;
        return start_real(&bin, state, &crds, detach, with_operator);
    }
    let model_bin = bins::build(&["flux-model"], &[MODEL_BIN])?.remove(0);
    let mut cmd = launcher(&bin, state, &paths::crds())?;
    cmd.stdin(Stdio::null());
    if detach {
        // Its own process group: a Ctrl-C in this terminal later does not reach it.
        cmd.process_group(0);
    }
    let mut child = cmd.spawn().context("cannot start the launcher")?;
    fs::write(state.join("pid"), child.id().to_string())?;
    let line = wait_ready(&mut child, state)?;
    let started = kubeconfig_of(&line).and_then(|kubeconfig| {
        let spec = Spec::new(MODEL, model_bin, "model ready")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--namespace", "flux-system", "--seed"])
            .detach(detach);
        daemon::start(&spec, state).context("starting the controller model")
    });
    match started {
        Ok(model_line) => eprintln!("xtask: {model_line}"),
        Err(e) => {
            let _ = daemon::stop(state, MODEL, MODEL_BIN, MODEL_STOP_GRACE);
            let _ = stop_pid(child.id());
            let _ = child.wait();
            return Err(e);
        }
    }
    fs::write(state.join("ready"), &line)?;
    Ok((child, line))
}

/// The ready line of a running control plane in `state`, if there is one.
pub fn running(state: &Path) -> Option<String> {
    let pid = read_pid(state)?;
    let line = fs::read_to_string(state.join("ready")).ok()?;
    (proc::alive(pid) && line.starts_with("ready ")).then(|| line.trim().to_string())
}

/// The `kubeconfig=` path of a launcher ready line.
pub fn kubeconfig_of(line: &str) -> anyhow::Result<PathBuf> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("kubeconfig="))
        .map(PathBuf::from)
        .context("ready line without kubeconfig=")
}

fn read_pid(state: &Path) -> Option<u32> {
    fs::read_to_string(state.join("pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn clean(state: &Path) -> anyhow::Result<()> {
    if state.exists() {
        fs::remove_dir_all(state).with_context(|| format!("removing {}", state.display()))?;
    }
    fs::create_dir_all(state)?;
    Ok(())
}

/// [`start`] with the real controllers: the launcher installs `crds` (upstream's).
fn start_real(
    bin: &Path,
    state: &Path,
    crds: &Path,
    detach: bool,
    with_operator: bool,
) -> anyhow::Result<(Child, String)> {
    let mut cmd = launcher(bin, state, crds)?;
    cmd.stdin(Stdio::null());
    if detach {
        cmd.process_group(0);
    }
    let mut child = cmd.spawn().context("cannot start the launcher")?;
    fs::write(state.join("pid"), child.id().to_string())?;
    let line = wait_ready(&mut child, state)?;
    match kubeconfig_of(&line).and_then(|k| realflux::start(state, &k, detach, with_operator)) {
        Ok(seeded) => eprintln!("xtask: {seeded}"),
        Err(e) => {
            let _ = stop_pid(child.id());
            let _ = child.wait();
            return Err(e.context("starting the real Flux controllers"));
        }
    }
    fs::write(state.join("ready"), &line)?;
    Ok((child, line))
}

fn launcher(bin: &Path, state: &Path, crds: &Path) -> anyhow::Result<Command> {
    let mut cmd = Command::new(bin);
    cmd.arg("--dir")
        .arg(state.join("envtest"))
        .arg("--crds")
        .arg(crds)
        .stdout(fs::File::create(state.join("stdout"))?)
        .stderr(fs::File::create(state.join("log"))?);
    Ok(cmd)
}

/// Waits for the launcher's ready line; fails early (with the log's tail) if it exits.
fn wait_ready(child: &mut Child, state: &Path) -> anyhow::Result<String> {
    let start = Instant::now();
    loop {
        let out = fs::read_to_string(state.join("stdout")).unwrap_or_default();
        if let Some(line) = out.lines().find(|l| l.starts_with("ready ")) {
            return Ok(line.to_string());
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "the launcher exited ({status}) before it was ready:\n{}",
                daemon::tail(&state.join("log"))
            );
        }
        if start.elapsed() > READY_TIMEOUT {
            let _ = child.kill();
            bail!(
                "the launcher was not ready within {READY_TIMEOUT:?}:\n{}",
                daemon::tail(&state.join("log"))
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn stop_pid(pid: u32) -> anyhow::Result<()> {
    if proc::stop(pid, STOP_TIMEOUT)? == proc::Stopped::Killed {
        bail!("the control plane (pid {pid}) ignored SIGTERM for {STOP_TIMEOUT:?}; killed");
    }
    Ok(())
}

/// A control plane owned by this process (for `xtask ci`): stopped by `stop`, by `Drop`, and
/// by the launcher itself when our end of its stdin closes (this process died).
#[derive(Debug)]
pub struct Private {
    child: Child,
    stdin: Option<ChildStdin>,
    state: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Private {
    pub fn start(bin: &Path, state: &Path) -> anyhow::Result<Self> {
        clean(state)?;
        let mut cmd = launcher(bin, state, &paths::crds())?;
        cmd.arg("--exit-on-stdin-eof").stdin(Stdio::piped());
        let mut child = cmd.spawn().context("cannot start the launcher")?;
        let stdin = child.stdin.take();
        let line = wait_ready(&mut child, state)?;
        eprintln!("xtask: {line}");
        let kubeconfig = kubeconfig_of(&line)?;
        Ok(Self {
            child,
            stdin,
            state: state.to_path_buf(),
            kubeconfig,
        })
    }

    pub fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> anyhow::Result<()> {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.flush();
        }
        if self.child.try_wait()?.is_none() {
            stop_pid(self.child.id())?;
            let _ = self.child.wait();
        }
        if self.state.exists() {
            fs::remove_dir_all(&self.state)?;
        }
        Ok(())
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            eprintln!("xtask: stopping the control plane: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_of_reads_the_path_from_a_ready_line() {
        let line = "ready kubeconfig=/tmp/x/kubeconfig server=https://127.0.0.1:1234";
        assert_eq!(
            kubeconfig_of(line).unwrap(),
            PathBuf::from("/tmp/x/kubeconfig")
        );
        assert!(kubeconfig_of("ready server=https://127.0.0.1:1").is_err());
    }
}

/// A control plane with the real controllers owned by this process (for `xtask ci`): stopped
/// with everything beside it by `stop` and by `Drop`.
#[derive(Debug)]
pub struct RealPlane {
    child: Option<std::process::Child>,
    state: PathBuf,
    pub kubeconfig: PathBuf,
}

impl RealPlane {
    pub fn start(state: &Path) -> anyhow::Result<Self> {
        Self::start_with(state, false)
    }

    /// [`RealPlane::start`], with the real Flux Operator when `with_operator`.
    pub fn start_with(state: &Path, with_operator: bool) -> anyhow::Result<Self> {
        let (child, line) = start_with(state, false, Flux::Real, with_operator)?;
        eprintln!("xtask: real Flux: {line}");
        Ok(Self {
            child: Some(child),
            state: state.to_path_buf(),
            kubeconfig: kubeconfig_of(&line)?,
        })
    }

    pub fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let stopped = stop(&self.state);
        let _ = child.wait();
        stopped
    }
}

impl Drop for RealPlane {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            eprintln!("xtask: stopping the real-Flux control plane: {e:#}");
        }
    }
}
