//! A GitHub Actions runner, emulated: steps are started and cancelled the way actions/runner
//! starts and cancels them, so tests see what a cancelled job does to a handoff.
//!
//! What is copied from actions/runner (read in its source, src/):
//! - A `run:` step with no `shell` is its script written to a file and run as `bash -e <file>`
//!   in the workspace (Runner.Worker/Handlers/ScriptHandler.cs; ScriptHandlerHelpers.cs has the
//!   argument formats). A JavaScript action's step is `node <main>`, later `node <post>`, with
//!   the workspace as working directory (Handlers/NodeScriptActionHandler.cs).
//! - Every input declared in action.yml reaches the action as `INPUT_<NAME>` (spaces to `_`,
//!   upper-cased, hyphens kept), defaults filled in, for the post step too
//!   (Handlers/Handler.cs `AddInputsToEnvironment`, ActionRunner.cs).
//! - Each step gets fresh `GITHUB_STATE`, `GITHUB_OUTPUT` and `GITHUB_STEP_SUMMARY` files, read
//!   when the step's process is over however it ended (FileCommandManager.cs; ActionRunner.cs
//!   processes them in a `finally`); the state saved by main reaches post as `STATE_<name>`
//!   (ActionRunner.cs). `GITHUB_ACTIONS=true` and `CI=true` are set (Runner.Sdk/ProcessInvoker.cs).
//! - Cancelling a step (Runner.Sdk/ProcessInvoker.cs `CancelAndKillProcessTree`): SIGINT to the
//!   step's process only; if it has not ended 7.5 s later, SIGTERM; 2.5 s after that, SIGKILL
//!   (`Process.Kill()`, the step's process only, on Linux). A process "has ended" once it exited
//!   and its stdout and stderr reached end of file, or 5 s after it exited when something it
//!   started still holds them (`ProcessExitedHandler`).

#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The runner's wait after SIGINT before SIGTERM.
pub const SIGINT_TIMEOUT: Duration = Duration::from_millis(7500);
/// The runner's wait after SIGTERM before SIGKILL.
pub const SIGTERM_TIMEOUT: Duration = Duration::from_millis(2500);
/// How long the runner waits for a child's output streams after the step's process exited.
pub const STREAM_GRACE: Duration = Duration::from_secs(5);

/// The repository root (the action lives there).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// One job: a workspace, the job's environment, and the action state saved so far.
pub struct Job {
    pub dir: PathBuf,
    pub workspace: PathBuf,
    pub temp: PathBuf,
    env: Vec<(String, String)>,
    /// What the action's main step saved in `GITHUB_STATE`.
    pub state: BTreeMap<String, String>,
    steps: usize,
}

/// The three per-step files.
#[derive(Debug, Clone)]
pub struct StepFiles {
    pub state: PathBuf,
    pub output: PathBuf,
    pub summary: PathBuf,
}

impl StepFiles {
    /// The outputs this step wrote (the last value of a name wins, as on the runner).
    pub fn outputs(&self) -> BTreeMap<String, String> {
        parse_file_commands(&read(&self.output))
            .into_iter()
            .collect()
    }

    pub fn summary_text(&self) -> String {
        read(&self.summary)
    }

    pub fn output_text(&self) -> String {
        read(&self.output)
    }
}

impl Job {
    /// A job with a random run id, attempt 1, and `env` as its job-level environment (e.g. a
    /// secret), `flux-handoff` installed on `PATH`.
    pub fn new(env: &[(&str, &str)]) -> Self {
        let dir = std::env::temp_dir().join(format!("fh-runner-{}", testkit::random_suffix(8)));
        let workspace = dir.join("workspace");
        let temp = dir.join("temp");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::create_dir_all(&temp).unwrap();
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_flux-handoff"));
        let path = format!(
            "{}:{}",
            bin.parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let run_id: u64 = 10_000_000 + u64::from(std::process::id());
        let mut all = vec![
            ("GITHUB_ACTIONS".to_string(), "true".to_string()),
            ("CI".into(), "true".into()),
            ("GITHUB_RUN_ID".into(), run_id.to_string()),
            ("GITHUB_RUN_ATTEMPT".into(), "1".into()),
            ("GITHUB_REPOSITORY".into(), "acme/app".into()),
            ("GITHUB_WORKSPACE".into(), workspace.display().to_string()),
            ("RUNNER_TEMP".into(), temp.display().to_string()),
            ("PATH".into(), path),
        ];
        all.extend(
            env.iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string())),
        );
        Self {
            dir,
            workspace,
            temp,
            env: all,
            state: BTreeMap::new(),
            steps: 0,
        }
    }

    fn files(&mut self) -> StepFiles {
        self.steps += 1;
        let d = self.dir.join(format!("step{}", self.steps));
        std::fs::create_dir_all(&d).unwrap();
        let f = StepFiles {
            state: d.join("save_state"),
            output: d.join("set_output"),
            summary: d.join("step_summary"),
        };
        for p in [&f.state, &f.output, &f.summary] {
            std::fs::write(p, "").unwrap();
        }
        f
    }

    fn command(&self, program: &str, files: &StepFiles) -> Command {
        let mut c = Command::new(program);
        // The runner's own environment is not the test's: drop what would leak in.
        for (k, _) in std::env::vars() {
            if k.starts_with("GITHUB_")
                || k.starts_with("INPUT_")
                || k.starts_with("STATE_")
                || k.starts_with("FLUX_HANDOFF_")
                || k == "KUBECONFIG"
            {
                c.env_remove(k);
            }
        }
        c.envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("GITHUB_STATE", &files.state)
            .env("GITHUB_OUTPUT", &files.output)
            .env("GITHUB_STEP_SUMMARY", &files.summary)
            .current_dir(&self.workspace)
            .stdin(Stdio::null());
        c
    }

    /// Starts a `run:` step: the script in a file, `bash -e <file>`.
    pub fn run_step(&mut self, script: &str) -> Step {
        let files = self.files();
        let file = self.temp.join(format!("{}.sh", testkit::random_suffix(12)));
        std::fs::write(&file, script).unwrap();
        let mut c = self.command("bash", &files);
        c.arg("-e").arg(&file);
        Step::start(c, files)
    }

    /// Starts the action's main step: `node action/main.js` with every declared input.
    pub fn action_main(&mut self, inputs: &[(&str, &str)]) -> Step {
        self.action_stage("main", inputs)
    }

    /// Starts the action's post step: `node action/post.js`, the saved state as `STATE_*`.
    pub fn action_post(&mut self, inputs: &[(&str, &str)]) -> Step {
        self.action_stage("post", inputs)
    }

    fn action_stage(&mut self, stage: &str, inputs: &[(&str, &str)]) -> Step {
        let files = self.files();
        let mut c = self.command("node", &files);
        // The job installed flux-handoff on PATH (the tests' binary): the action runs that one
        // unless a test asks it to install a release (`version` or `download-url`).
        let installs = inputs
            .iter()
            .any(|(n, _)| matches!(*n, "binary" | "version" | "download-url"));
        let binary = [("binary", "flux-handoff")];
        let defaults: &[(&str, &str)] = if installs { &[] } else { &binary };
        for (name, default) in action_inputs() {
            let value = inputs
                .iter()
                .chain(defaults)
                .find(|(n, _)| *n == name)
                .map_or(default, |(_, v)| (*v).to_string());
            c.env(input_variable(&name), value);
        }
        if stage == "post" {
            for (k, v) in &self.state {
                c.env(format!("STATE_{k}"), v);
            }
        }
        c.arg(repo_root().join("action").join(format!("{stage}.js")));
        Step::start(c, files)
    }

    /// What the runner does when a main step is over: its saved state joins the job's.
    pub fn keep_state(&mut self, ended: &Ended) {
        for (k, v) in parse_file_commands(&read(&ended.files.state)) {
            self.state.insert(k, v);
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `INPUT_<NAME>` for input `name` (Handler.cs).
pub fn input_variable(name: &str) -> String {
    format!("INPUT_{}", name.replace(' ', "_").to_uppercase())
}

/// The inputs action.yml declares, with their defaults (read from the file the way the runner
/// gets them: every declared input is passed, unset ones as their default).
pub fn action_inputs() -> Vec<(String, String)> {
    let text = read(&repo_root().join("action.yml"));
    let mut inputs = Vec::new();
    let mut in_inputs = false;
    for line in text.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            in_inputs = line == "inputs:";
            continue;
        }
        if !in_inputs {
            continue;
        }
        if let Some(name) = line.strip_prefix("  ").and_then(|l| l.strip_suffix(':'))
            && !name.starts_with(' ')
        {
            inputs.push((name.to_string(), String::new()));
        } else if let Some(d) = line.strip_prefix("    default:")
            && let Some(last) = inputs.last_mut()
        {
            last.1 = d.trim().trim_matches('"').to_string();
        }
    }
    assert!(!inputs.is_empty(), "no inputs found in action.yml");
    inputs
}

/// `name=value` lines and `name<<DELIMITER` blocks, as the runner reads `GITHUB_OUTPUT`,
/// `GITHUB_STATE` and `GITHUB_ENV` (FileCommandManager.cs).
pub fn parse_file_commands(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = text.split('\n');
    while let Some(line) = lines.next() {
        if line.is_empty() {
            continue;
        }
        let eq = line.find('=');
        let heredoc = line.find("<<");
        match (eq, heredoc) {
            (Some(e), h) if h.is_none_or(|h| e < h) => {
                out.push((line[..e].to_string(), line[e + 1..].to_string()));
            }
            (_, Some(h)) => {
                let (name, delimiter) = (&line[..h], &line[h + 2..]);
                let mut value = Vec::new();
                for l in lines.by_ref() {
                    if l == delimiter {
                        break;
                    }
                    value.push(l);
                }
                out.push((name.to_string(), value.join("\n")));
            }
            _ => panic!("not a file command: {line:?}"),
        }
    }
    out
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// A running step.
pub struct Step {
    child: Child,
    pub files: StepFiles,
    log: Arc<Mutex<Vec<u8>>>,
    eofs: Arc<AtomicUsize>,
    exited: Option<(Instant, ExitStatus)>,
}

/// A step that is over.
#[derive(Debug)]
pub struct Ended {
    pub status: ExitStatus,
    /// stdout and stderr, interleaved as they arrived (the job log).
    pub log: String,
    pub files: StepFiles,
    /// The signals the runner sent, in order (`INT`, `TERM`, `KILL`).
    pub signals: Vec<&'static str>,
    /// From the first signal until the step was over.
    pub took: Option<Duration>,
}

impl Ended {
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }
}

impl Step {
    fn start(mut c: Command, files: StepFiles) -> Self {
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c
            .spawn()
            .expect("starting the step (bash; node 20 or later for the action)");
        let log = Arc::new(Mutex::new(Vec::new()));
        let eofs = Arc::new(AtomicUsize::new(0));
        let streams: [Box<dyn Read + Send>; 2] = [
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for mut s in streams {
            let (log, eofs) = (log.clone(), eofs.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    log.lock().unwrap().extend_from_slice(&buf[..n]);
                }
                eofs.fetch_add(1, Ordering::SeqCst);
            });
        }
        Self {
            child,
            files,
            log,
            eofs,
            exited: None,
        }
    }

    /// The step's process id (the one the runner signals).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the step's process has exited (it is reaped, as the runner's `Process` does).
    pub fn exited(&mut self) -> bool {
        if self.exited.is_none()
            && let Some(status) = self.child.try_wait().unwrap()
        {
            self.exited = Some((Instant::now(), status));
        }
        self.exited.is_some()
    }

    /// The log so far.
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&self.log.lock().unwrap()).into_owned()
    }

    /// Waits until the step is over, or `limit` passed (`false`).
    fn settle(&mut self, limit: Option<Duration>) -> bool {
        let start = Instant::now();
        loop {
            self.exited();
            if let Some((at, _)) = self.exited
                && (self.eofs.load(Ordering::SeqCst) == 2 || at.elapsed() >= STREAM_GRACE)
            {
                return true;
            }
            if limit.is_some_and(|l| start.elapsed() >= l) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn signal(&self, sig: &str) {
        // Never signal a pid this harness already reaped (it may belong to someone else now).
        if self.exited.is_none() {
            let _ = testkit::signal::to_process(self.pid(), sig);
        }
    }

    fn ended(self, signals: Vec<&'static str>, took: Option<Duration>) -> Ended {
        let status = self.exited.expect("settled").1;
        Ended {
            status,
            log: String::from_utf8_lossy(&self.log.lock().unwrap()).into_owned(),
            files: self.files,
            signals,
            took,
        }
    }

    /// Lets the step run to its end.
    pub fn wait(mut self) -> Ended {
        self.settle(None);
        self.ended(Vec::new(), None)
    }

    /// Cancels the step as the runner does: SIGINT, 7.5 s, SIGTERM, 2.5 s, SIGKILL — each to
    /// the step's process only, each only while it has not ended.
    pub fn cancel(mut self) -> Ended {
        let start = Instant::now();
        let mut sent = Vec::new();
        for (sig, wait) in [
            ("INT", Some(SIGINT_TIMEOUT)),
            ("TERM", Some(SIGTERM_TIMEOUT)),
            ("KILL", None),
        ] {
            if self.exited.is_some() {
                break;
            }
            self.signal(sig);
            sent.push(sig);
            if self.settle(wait) {
                break;
            }
        }
        self.settle(None);
        self.ended(sent, Some(start.elapsed()))
    }
}

/// The children of process `pid` (Linux `/proc`).
pub fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// Whether process `pid` still runs (exists and is not a zombie).
pub fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
    }
}

/// Waits until process `pid` is gone (it is not ours to reap: an orphan re-parented away).
pub fn wait_gone(pid: u32, limit: Duration) -> bool {
    let start = Instant::now();
    while running(pid) {
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// The live (not zombie) processes of process group `pgid` (Linux `/proc`).
pub fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let (_, rest) = stat.rsplit_once(')')?;
                    let f: Vec<&str> = rest.split_whitespace().collect();
                    // f[0] state, f[1] ppid, f[2] process group.
                    Some(f.first()? != &"Z" && f.get(2)?.parse::<u32>().ok()? == pgid)
                })
                .unwrap_or(false)
        })
        .collect()
}
