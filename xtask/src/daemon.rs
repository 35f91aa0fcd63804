//! Long-running helper processes beside a control plane (the controller model, the source
//! model, the demo registry), recorded in its state directory as `<stem>.pid`, with
//! `<stem>.stdout` and `<stem>.log` (stderr).

use std::ffi::OsString;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::proc::{self, Stopped};

/// One helper process to start.
#[derive(Debug, Clone)]
pub struct Spec {
    /// File stem of its state files, e.g. `model`.
    pub stem: &'static str,
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Extra environment (how secrets reach it: never argv, which `ps` shows).
    pub envs: Vec<(String, String)>,
    /// It is ready once it printed a stdout line starting with this text (or, with
    /// `ready_in_log`, a stderr line containing it).
    pub ready: &'static str,
    /// Look for `ready` in its stderr log (programs that only log, like the Flux controllers).
    pub ready_in_log: bool,
    pub timeout: Duration,
    /// Its own process group, so a later Ctrl-C in this terminal does not reach it.
    pub detach: bool,
}

impl Spec {
    pub fn new(stem: &'static str, program: impl Into<PathBuf>, ready: &'static str) -> Self {
        Self {
            stem,
            program: program.into(),
            args: Vec::new(),
            envs: Vec::new(),
            ready,
            ready_in_log: false,
            timeout: Duration::from_mins(1),
            detach: false,
        }
    }

    #[must_use]
    pub fn arg(mut self, a: impl Into<OsString>) -> Self {
        self.args.push(a.into());
        self
    }

    #[must_use]
    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    #[must_use]
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// Ready once its stderr log has a line containing `ready`.
    #[must_use]
    pub fn ready_in_log(mut self) -> Self {
        self.ready_in_log = true;
        self
    }

    #[must_use]
    pub fn detach(mut self, detach: bool) -> Self {
        self.detach = detach;
        self
    }

    fn name(&self) -> String {
        self.program
            .file_name()
            .map_or_else(|| self.stem.to_string(), |n| n.to_string_lossy().into())
    }
}

/// Starts `spec` with its pid recorded in `state`, and waits until it is ready; returns the
/// ready line. A process that exits or misses its deadline is stopped
/// and the tail of its log is in the error.
pub fn start(spec: &Spec, state: &Path) -> anyhow::Result<String> {
    let name = spec.name();
    let out = state.join(format!("{}.stdout", spec.stem));
    let log = state.join(format!("{}.log", spec.stem));
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .envs(spec.envs.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out)?)
        .stderr(fs::File::create(&log)?);
    if spec.detach {
        cmd.process_group(0);
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", spec.program.display()))?;
    fs::write(pid_file(state, spec.stem), child.id().to_string())?;
    let start = Instant::now();
    loop {
        let ready = if spec.ready_in_log {
            fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .find(|l| l.contains(spec.ready))
                .map(str::to_string)
        } else {
            fs::read_to_string(&out)
                .unwrap_or_default()
                .lines()
                .find(|l| l.starts_with(spec.ready))
                .map(str::to_string)
        };
        if let Some(line) = ready {
            return Ok(line);
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "{name} exited ({status}) before it was ready:\n{}",
                tail(&log)
            );
        }
        if start.elapsed() > spec.timeout {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{name} was not ready within {:?}:\n{}",
                spec.timeout,
                tail(&log)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The pid of `stem`'s process in `state` when it is alive and still runs `program_name`.
pub fn running(state: &Path, stem: &str, program_name: &str) -> Option<u32> {
    let pid: u32 = fs::read_to_string(pid_file(state, stem))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (proc::alive(pid) && proc::runs(pid, program_name)).then_some(pid)
}

/// Stops `stem`'s process in `state` (SIGTERM, `grace`, SIGKILL) if it runs; says so on
/// stderr. Returns whether there was one.
pub fn stop(state: &Path, stem: &str, program_name: &str, grace: Duration) -> anyhow::Result<bool> {
    let Some(pid) = running(state, stem, program_name) else {
        let _ = fs::remove_file(pid_file(state, stem));
        return Ok(false);
    };
    match proc::stop(pid, grace).with_context(|| format!("stopping {program_name}"))? {
        Stopped::Terminated => eprintln!("xtask: {program_name} stopped"),
        Stopped::Killed => {
            eprintln!("xtask: {program_name} ignored SIGTERM for {grace:?}; killed");
        }
    }
    let _ = fs::remove_file(pid_file(state, stem));
    Ok(true)
}

fn pid_file(state: &Path, stem: &str) -> PathBuf {
    state.join(format!("{stem}.pid"))
}

/// The last 20 lines of a log file.
pub fn tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
