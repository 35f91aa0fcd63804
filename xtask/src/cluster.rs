//! Starting and stopping the local control plane.
//!
//! State of one control plane lives in a directory: `envtest/` (key material, etcd data,
//! kubeconfig, owned by the launcher), `pid`, `ready` (the launcher's ready line), `stdout`,
//! `log` (the API server's stderr).

use std::fs;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::{envtest, paths, proc};

const READY_TIMEOUT: Duration = Duration::from_mins(3);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// `cargo xtask cluster up [--detach]`.
pub fn up(detach: bool) -> anyhow::Result<()> {
    let state = paths::shared_state();
    if let Some(line) = running(&state) {
        if detach {
            println!("{line}");
            return Ok(());
        }
        bail!("a control plane is already running ({line}); `cargo xtask cluster down` first");
    }
    let bin = envtest::ensure_built()?;
    clean(&state)?;
    let mut cmd = launcher(&bin, &state)?;
    if detach {
        // Its own process group: a Ctrl-C in this terminal later does not reach it.
        cmd.stdin(Stdio::null()).process_group(0);
    } else {
        cmd.stdin(Stdio::null());
    }
    let mut child = cmd.spawn().context("cannot start the launcher")?;
    fs::write(state.join("pid"), child.id().to_string())?;
    let line = wait_ready(&mut child, &state)?;
    fs::write(state.join("ready"), &line)?;
    println!("{line}");
    if detach {
        return Ok(());
    }
    eprintln!("xtask: running in the foreground; Ctrl-C stops it");
    let status = child.wait()?;
    clean(&state)?;
    if !status.success() {
        bail!("the launcher exited with {status}; see its log above");
    }
    Ok(())
}

/// `cargo xtask cluster down`.
pub fn down() -> anyhow::Result<()> {
    let state = paths::shared_state();
    match read_pid(&state) {
        Some(pid) if proc::alive(pid) => {
            stop_pid(pid)?;
            eprintln!("xtask: control plane stopped");
        }
        _ => eprintln!("xtask: no control plane was running"),
    }
    clean(&state)
}

/// The ready line of a running control plane in `state`, if there is one.
fn running(state: &Path) -> Option<String> {
    let pid = read_pid(state)?;
    let line = fs::read_to_string(state.join("ready")).ok()?;
    (proc::alive(pid) && line.starts_with("ready ")).then(|| line.trim().to_string())
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

fn launcher(bin: &Path, state: &Path) -> anyhow::Result<Command> {
    let mut cmd = Command::new(bin);
    cmd.arg("--dir")
        .arg(state.join("envtest"))
        .arg("--crds")
        .arg(paths::crds())
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
                tail(state)
            );
        }
        if start.elapsed() > READY_TIMEOUT {
            let _ = child.kill();
            bail!(
                "the launcher was not ready within {READY_TIMEOUT:?}:\n{}",
                tail(state)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn tail(state: &Path) -> String {
    let log = fs::read_to_string(state.join("log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

fn stop_pid(pid: u32) -> anyhow::Result<()> {
    proc::signal(pid, "TERM");
    let start = Instant::now();
    while proc::alive(pid) {
        if start.elapsed() > STOP_TIMEOUT {
            proc::signal(pid, "KILL");
            bail!("the control plane (pid {pid}) ignored SIGTERM for {STOP_TIMEOUT:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(100));
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
        let mut cmd = launcher(bin, state)?;
        cmd.arg("--exit-on-stdin-eof").stdin(Stdio::piped());
        let mut child = cmd.spawn().context("cannot start the launcher")?;
        let stdin = child.stdin.take();
        let line = wait_ready(&mut child, state)?;
        eprintln!("xtask: {line}");
        let kubeconfig = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("kubeconfig="))
            .map(PathBuf::from)
            .context("ready line without kubeconfig=")?;
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
