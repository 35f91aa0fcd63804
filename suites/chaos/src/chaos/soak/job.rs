//! One emulated deploy job: the Action's main step (`node action/main.js`) with the inputs and
//! the environment a runner gives it, the runner's cancel sequence when the plan cancels the
//! job, then the post step (`node action/post.js`, `post-if: always()`) with the main step's
//! saved state.
//!
//! The cancel sequence is the runner's (actions/runner, `src/Runner.Sdk/ProcessInvoker.cs`,
//! `CancelAndKillProcessTree`: `kill(pid, SIGINT)`, wait up to `_sigintTimeout` = 7500 ms
//! for the exit, `kill(pid, SIGTERM)`, wait up to `_sigtermTimeout` = 2500 ms, then
//! `Process.Kill()`, SIGKILL to that pid alone on Linux), sent to the step's process, node.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::judge::Cancel;
use super::schedule::{COMMAND_FAILS_WITH, Extra, Job};
use crate::chaos::nemesis::work;

/// The runner waits this long after SIGINT before SIGTERM (`ProcessInvoker`'s `_sigintTimeout`).
pub const SIGINT_TIMEOUT: Duration = Duration::from_millis(7_500);
/// And this long after SIGTERM before SIGKILL (`ProcessInvoker`'s `_sigtermTimeout`).
pub const SIGTERM_TIMEOUT: Duration = Duration::from_millis(2_500);
/// A main step still running at this bound is cancelled as a runner's `timeout-minutes`
/// would, and counted as an ejection (it is far beyond any queue's wait).
const MAIN_BOUND: Duration = Duration::from_secs(270);
/// The post step's bound: its own wait (`post-wait-seconds`, 60) and one release.
const POST_BOUND: Duration = Duration::from_secs(150);
/// `--wait-lease` of every job: longer than a group of four can hold the Lease.
pub const WAIT_LEASE: &str = "4m";
/// The repository every job's run belongs to (`GITHUB_REPOSITORY`).
pub const REPOSITORY: &str = "example/deploy";

/// What every job of the soak shares.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The repository's `action/` directory (main.js, post.js).
    pub action: PathBuf,
    pub handoff_bin: PathBuf,
    /// Kubeconfig through the fault proxy (the `kubeconfig` input).
    pub kubeconfig: PathBuf,
    /// The plane's own kubeconfig, for the work command (straight to the API server).
    pub direct: PathBuf,
    /// `flux-handoff.toml` (the `config` input): the namespace's short Lease.
    pub config: PathBuf,
    pub namespace: String,
    /// Scratch: one directory per job.
    pub dir: PathBuf,
    pub seed: u64,
    /// The `wait-lease` input: [`WAIT_LEASE`] in the soak, shorter in the nemesis (its runs
    /// queue behind holders it kills, which only a janitor or the seed's end frees).
    pub wait_lease: &'static str,
    /// The stand-in GitHub API: when set, every job runs with `recover-finished-runs` and a
    /// token, `GITHUB_API_URL` names the stub, and the job's run is `in_progress` from its main
    /// step's start until its post step ended (or the runner was preempted), then `completed`.
    pub github: Option<Arc<testkit::github_stub::GithubStub>>,
}

/// One line a step printed, and when.
pub type Line = (Instant, String);

/// A started step: node, the lines it printed so far, and the threads reading its pipes.
type Started = (
    Child,
    Arc<Mutex<Vec<Line>>>,
    Vec<std::thread::JoinHandle<()>>,
);

/// How one job went.
#[derive(Debug, Clone)]
pub struct Ran {
    pub holder: String,
    /// The main step's exit code; `None` when a signal ended it.
    pub main: Option<i32>,
    pub main_span: (Instant, Instant),
    pub cancel: Option<Cancel>,
    /// The main step outran [`MAIN_BOUND`] and the harness cancelled it.
    pub timed_out: bool,
    /// The runner was preempted: every process of the job killed with SIGKILL, no post step.
    pub preempted: bool,
    /// The command's own exit code and wall time (ms), when it reached its end.
    pub command: Option<(i32, u64)>,
    /// Time spent queued for the Lease (first `waiting for lease` line to `lease acquired`).
    pub queued_ms: u64,
    pub main_lines: Vec<Line>,
    pub post: Option<i32>,
    pub post_span: (Instant, Instant),
    pub post_lines: Vec<Line>,
}

impl Ran {
    /// The main step's wall time (ms).
    #[must_use]
    pub fn main_ms(&self) -> u64 {
        ms(self.main_span.1 - self.main_span.0)
    }

    /// Its last error line (`error:` or `::error::`), or its last line.
    #[must_use]
    pub fn main_error(&self) -> String {
        last_error(&self.main_lines)
    }

    #[must_use]
    pub fn post_error(&self) -> String {
        last_error(&self.post_lines)
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn last_error(lines: &[Line]) -> String {
    lines
        .iter()
        .rev()
        .find(|(_, l)| l.contains("error:") || l.starts_with("::error::"))
        .or_else(|| lines.last())
        .map(|(_, l)| l.clone())
        .unwrap_or_default()
}

/// The deploy script of the `run` input: the work, timed, its exit code and time saved.
fn script(job: &Job) -> String {
    let fail = if job.fails { COMMAND_FAILS_WITH } else { 0 };
    format!(
        "s=$(date +%s%N); rc=0; \"$SOAK_BIN\" {sub} \"$SOAK_NS\" {w} || rc=$?; \
         e=$(date +%s%N); if [ \"$rc\" -eq 0 ]; then rc={fail}; fi; \
         echo \"$rc $(( (e - s) / 1000000 ))\" > \"$SOAK_DIR/command\"; exit \"$rc\"",
        sub = work::SUBCOMMAND,
        w = job.writes,
    )
}

/// The job's GitHub run id.
fn run_id(ctx: &Ctx, job: &Job) -> u64 {
    ctx.seed * 1_000_000 + job.index as u64 + 1
}

/// The job's `github-token` input, registered with the leak scan.
fn token(run_id: u64) -> String {
    let t = format!("ghs_soak{run_id:x}Zq8");
    crate::chaos::secret(&t);
    t
}

/// The environment a runner gives the action's node process, with the job's inputs.
fn runner_env(ctx: &Ctx, job: &Job, dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let run_id = run_id(ctx, job);
    let (api, recover) = match &ctx.github {
        Some(stub) => (stub.url.clone(), "true"),
        None => ("https://api.github.com".into(), "false"),
    };
    let exe = std::env::current_exe()?;
    let mut e: Vec<(String, String)> = vec![
        ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".into(), dir.display().to_string()),
        ("CI".into(), "true".into()),
        ("GITHUB_ACTIONS".into(), "true".into()),
        ("GITHUB_RUN_ID".into(), run_id.to_string()),
        ("GITHUB_RUN_ATTEMPT".into(), "1".into()),
        ("GITHUB_RUN_NUMBER".into(), (job.index + 1).to_string()),
        ("GITHUB_REPOSITORY".into(), REPOSITORY.into()),
        ("GITHUB_WORKFLOW".into(), "deploy".into()),
        ("GITHUB_JOB".into(), "deploy".into()),
        ("GITHUB_EVENT_NAME".into(), "merge_group".into()),
        (
            "GITHUB_REF".into(),
            format!(
                "refs/heads/gh-readonly-queue/main/pr-{}-soak",
                job.index + 1
            ),
        ),
        ("GITHUB_SERVER_URL".into(), "https://github.com".into()),
        ("GITHUB_API_URL".into(), api),
        ("GITHUB_WORKSPACE".into(), dir.display().to_string()),
        (
            "GITHUB_ACTION_PATH".into(),
            ctx.action.display().to_string(),
        ),
        ("RUNNER_OS".into(), "Linux".into()),
        ("RUNNER_ARCH".into(), "X64".into()),
        ("RUNNER_TEMP".into(), dir.join("tmp").display().to_string()),
        (
            "RUNNER_TOOL_CACHE".into(),
            dir.join("tool").display().to_string(),
        ),
        // The deploy script's own variables (a workflow's `env:`).
        ("SOAK_BIN".into(), exe.display().to_string()),
        ("SOAK_NS".into(), ctx.namespace.clone()),
        ("SOAK_DIR".into(), dir.display().to_string()),
        (
            testkit::plane::KUBECONFIG_ENV.into(),
            ctx.direct.display().to_string(),
        ),
    ];
    let mut args = vec!["--target".to_string(), crate::chaos::cell::TARGET.into()];
    if let Some(t) = extra_target(job.extra, &ctx.namespace) {
        args.extend(["--target".into(), t]);
    }
    for a in [
        "--namespace",
        &ctx.namespace,
        "--interval",
        "200ms",
        "--timeout",
        "30s",
        "--grace",
        "1s",
    ] {
        args.push(a.into());
    }
    let args = args.join("\n");
    // Inputs as the runner passes them (INPUT_<NAME>, upper-cased, hyphens kept).
    for (name, value) in [
        ("COMMAND", "run".to_string()),
        ("ARGS", args),
        ("RUN", script(job)),
        ("BINARY", ctx.handoff_bin.display().to_string()),
        ("KUBECONFIG", ctx.kubeconfig.display().to_string()),
        ("CONFIG", ctx.config.display().to_string()),
        ("REASON", format!("merge-group run {run_id}")),
        ("WAIT-LEASE", ctx.wait_lease.into()),
        ("KEEP-PAUSED", "false".into()),
        ("RECOVER-FINISHED-RUNS", recover.into()),
        ("GITHUB-TOKEN", token(run_id)),
        ("POST-WAIT-SECONDS", "60".into()),
        ("HOLDER", String::new()),
        ("VERSION", String::new()),
        ("DOWNLOAD-URL", String::new()),
        ("EVENTS-ADDR", String::new()),
    ] {
        e.push((format!("INPUT_{name}"), value));
    }
    Ok(e)
}

/// The target `extra` adds, in namespace `ns` ([`super::stage`] sets them up).
#[must_use]
pub fn extra_target(extra: Extra, ns: &str) -> Option<String> {
    match extra {
        Extra::None => None,
        Extra::Operator => Some(format!("rset/{ns}/{}", super::stage::OPERATOR)),
        Extra::Gate { .. } => Some(format!("deploy/{ns}/{}=0", super::stage::GATED)),
    }
}

/// The files the runner hands one step, fresh for it.
fn step_files(dir: &Path, step: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut e = Vec::new();
    for var in ["OUTPUT", "STATE", "ENV", "PATH", "STEP_SUMMARY"] {
        let f = dir.join(format!("{step}-{}", var.to_lowercase()));
        std::fs::write(&f, "")?;
        e.push((format!("GITHUB_{var}"), f.display().to_string()));
    }
    Ok(e)
}

/// Starts node on `script` with exactly `env`; its lines go to a shared list.
fn start(ctx: &Ctx, script: &str, env: &[(String, String)]) -> anyhow::Result<Started> {
    let mut c = Command::new("node");
    c.arg(ctx.action.join(script))
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn()?;
    let lines = Arc::new(Mutex::new(Vec::new()));
    let mut readers = Vec::new();
    let out = child
        .stdout
        .take()
        .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>);
    let err = child
        .stderr
        .take()
        .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>);
    for pipe in [out, err].into_iter().flatten() {
        let lines = lines.clone();
        readers.push(std::thread::spawn(move || {
            for l in BufReader::new(pipe).lines() {
                let Ok(l) = l else { break };
                crate::chaos::record("soak", &l);
                lines
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((Instant::now(), l));
            }
        }));
    }
    Ok((child, lines, readers))
}

/// Waits up to `d` for `child`'s exit (polled every 20 ms); its status once it exited.
async fn wait_for(
    child: &mut Child,
    d: Duration,
) -> anyhow::Result<Option<std::process::ExitStatus>> {
    let until = Instant::now() + d;
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(Some(st));
        }
        if Instant::now() >= until {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The runner's cancel sequence on `child`; how far it went and the exit status.
async fn cancel(child: &mut Child) -> anyhow::Result<(Cancel, std::process::ExitStatus)> {
    let pid = child.id();
    let _ = testkit::signal::to_process(pid, "INT");
    if let Some(st) = wait_for(child, SIGINT_TIMEOUT).await? {
        return Ok((Cancel::Int, st));
    }
    let _ = testkit::signal::to_process(pid, "TERM");
    if let Some(st) = wait_for(child, SIGTERM_TIMEOUT).await? {
        return Ok((Cancel::Term, st));
    }
    child.kill()?;
    Ok((Cancel::Kill, child.wait()?))
}

/// Joins the pipe readers within `d` (a process that inherited a pipe may outlive the step:
/// the post step ends it, or its bound does).
async fn drain(
    readers: Vec<std::thread::JoinHandle<()>>,
    lines: &Mutex<Vec<Line>>,
    d: Duration,
) -> Vec<Line> {
    let until = Instant::now() + d;
    while readers.iter().any(|r| !r.is_finished()) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    lines.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Runs `job`: main step, the cancel if planned, then the post step.
pub async fn run(ctx: &Ctx, job: &Job) -> anyhow::Result<Ran> {
    let dir = ctx.dir.join(format!("job-{}", job.index));
    std::fs::create_dir_all(dir.join("tmp"))?;
    let base = runner_env(ctx, job, &dir)?;
    let mut env = base.clone();
    env.extend(step_files(&dir, "main")?);
    github(ctx, job, "in_progress");
    let (mut child, main_lines, main_readers) = start(ctx, "main.js", &env)?;
    let t0 = Instant::now();
    if let Some(p) = job.preempt_ms {
        let d = Duration::from_millis(p);
        let held = super::preempt::held_for(&mut child, &main_lines, d, MAIN_BOUND).await?;
        if held.is_none() {
            super::preempt::kill_job(&dir);
            let status = child.wait()?;
            let t1 = Instant::now();
            github(ctx, job, "completed");
            let main_lines = drain(main_readers, &main_lines, Duration::from_secs(10)).await;
            return Ok(Ran {
                holder: holder_of(&dir),
                main: status.code(),
                main_span: (t0, t1),
                cancel: None,
                timed_out: false,
                preempted: true,
                command: command_of(&dir),
                queued_ms: queued(&main_lines),
                main_lines,
                post: None,
                post_span: (t1, t1),
                post_lines: Vec::new(),
            });
        }
    }
    let planned = job.cancel_ms.map_or(MAIN_BOUND, Duration::from_millis);
    let ended = wait_for(&mut child, planned.min(MAIN_BOUND)).await?;
    let (status, cancelled, timed_out) = if let Some(st) = ended {
        (st, None, false)
    } else {
        let (c, st) = cancel(&mut child).await?;
        (st, Some(c), job.cancel_ms.is_none())
    };
    let t1 = Instant::now();
    // Empty when node never got as far as saving it (the post step then has nothing to do).
    let state =
        parse_file_commands(&std::fs::read_to_string(dir.join("main-state")).unwrap_or_default());
    let holder = state.get("holder").cloned().unwrap_or_default();
    // The post step: the same inputs, the main step's state as STATE_*, fresh files.
    let mut env = base;
    env.extend(step_files(&dir, "post")?);
    env.extend(state.iter().map(|(k, v)| (format!("STATE_{k}"), v.clone())));
    let (mut post, post_lines, post_readers) = start(ctx, "post.js", &env)?;
    let p0 = Instant::now();
    let post_status = if let Some(st) = wait_for(&mut post, POST_BOUND).await? {
        st.code()
    } else {
        post.kill()?;
        post.wait()?;
        None
    };
    let p1 = Instant::now();
    github(ctx, job, "completed");
    let main_lines = drain(main_readers, &main_lines, Duration::from_secs(10)).await;
    let post_lines = drain(post_readers, &post_lines, Duration::from_secs(10)).await;
    Ok(Ran {
        holder,
        main: status.code(),
        main_span: (t0, t1),
        cancel: cancelled,
        timed_out,
        preempted: false,
        command: command_of(&dir),
        queued_ms: queued(&main_lines),
        main_lines,
        post: post_status,
        post_span: (p0, p1),
        post_lines,
    })
}

/// Tells the stand-in GitHub API (if any) the job's run is now in `status`.
fn github(ctx: &Ctx, job: &Job, status: &str) {
    if let Some(stub) = &ctx.github {
        let id = run_id(ctx, job);
        let answer = testkit::github_stub::Answer::run(REPOSITORY, id, 1, Some(status));
        stub.script(REPOSITORY, id, 1, vec![answer]);
    }
}

/// The holder the main step saved (empty when node never got as far as saving it).
fn holder_of(dir: &Path) -> String {
    let state =
        parse_file_commands(&std::fs::read_to_string(dir.join("main-state")).unwrap_or_default());
    state.get("holder").cloned().unwrap_or_default()
}

/// The deploy script's own exit code and wall time (ms), when it reached its end.
fn command_of(dir: &Path) -> Option<(i32, u64)> {
    std::fs::read_to_string(dir.join("command"))
        .ok()
        .and_then(|t| {
            let mut w = t.split_whitespace().map(str::parse::<u64>);
            Some((i32::try_from(w.next()?.ok()?).ok()?, w.next()?.ok()?))
        })
}

/// Time between the first `waiting for lease` line and `lease acquired` (0 when it never
/// waited).
#[must_use]
pub fn queued(lines: &[Line]) -> u64 {
    let at = |s: &str| lines.iter().find(|(_, l)| l.contains(s)).map(|(t, _)| *t);
    match (at("waiting for lease"), at("lease acquired")) {
        (Some(w), Some(a)) if a > w => ms(a - w),
        _ => 0,
    }
}

/// `name=value` lines and `name<<delimiter` blocks of a runner's file command (`GITHUB_STATE`,
/// `GITHUB_OUTPUT`); the last value of a name wins.
#[must_use]
pub fn parse_file_commands(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let (eq, hd) = (line.find('='), line.find("<<"));
        match (eq, hd) {
            (Some(e), h) if e > 0 && h.is_none_or(|h| e < h) => {
                out.insert(line[..e].to_string(), line[e + 1..].to_string());
            }
            (_, Some(h)) if h > 0 => {
                let delimiter = &line[h + 2..];
                let value: Vec<&str> = lines.by_ref().take_while(|l| *l != delimiter).collect();
                out.insert(line[..h].to_string(), value.join("\n"));
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soak_file_commands_parse_as_the_runner_reads_them() {
        let text = "holder<<ghadelimiter_ab\ngh1.1-abc\nghadelimiter_ab\npid=42\n\
                    multi<<EOF\na\nb=c\nEOF\npid=43\n";
        let m = parse_file_commands(text);
        assert_eq!(m["holder"], "gh1.1-abc");
        assert_eq!(m["pid"], "43", "the last value wins");
        assert_eq!(m["multi"], "a\nb=c");
        assert!(parse_file_commands("").is_empty());
    }

    #[test]
    fn soak_queue_time_is_from_the_first_wait_to_the_lease() {
        let t = Instant::now();
        let at = |ms: u64, l: &str| (t + Duration::from_millis(ms), l.to_string());
        let waited = [
            at(0, "holder: gh1.1-abc"),
            at(50, "waiting for lease ns/l: held by x (waited 0s of 4m)"),
            at(900, "waiting for lease ns/l: held by x (waited 10s of 4m)"),
            at(2050, "lease acquired: ns/l (holder gh1.1-abc, epoch 2)"),
        ];
        assert_eq!(queued(&waited), 2000);
        assert_eq!(queued(&[at(0, "lease acquired: ns/l")]), 0);
    }

    #[test]
    fn soak_the_deploy_script_times_the_command_and_keeps_its_exit() {
        let job = Job {
            index: 0,
            at_ms: 0,
            writes: 3,
            fails: true,
            cancel_ms: None,
            preempt_ms: None,
            extra: Extra::None,
        };
        let s = script(&job);
        assert!(s.contains("nemesis-work \"$SOAK_NS\" 3 || rc=$?"), "{s}");
        assert!(s.contains("then rc=42; fi"), "{s}");
        assert!(s.ends_with("exit \"$rc\""), "{s}");
    }
}
