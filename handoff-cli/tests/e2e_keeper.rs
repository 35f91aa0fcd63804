//! End to end: the command cannot outlive its holder. `run`'s command and everything it
//! starts — a double-forked child in a session of its own with a cleared environment among
//! them — end when the holder is killed (before `resume --holder-exited` releases anything),
//! and when the holder is stopped (before `fences recover` can take the Lease over). Job
//! control: Ctrl-Z's SIGTSTP to the holder stops the command too, SIGCONT continues both.
//!
//! The evidence is ordering, not a clock: once the releasing command has returned, every
//! process of the tree must already be gone, so nothing of it can write afterwards.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use common::*;
use rustix::process::{Pid, Signal, kill_process};

/// One test's files: `pids` (each process of the tree appends its pid) and `log` (each
/// appends a timestamp every 100 ms while it works).
struct Files {
    dir: PathBuf,
}

impl Files {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("fh-keeper-{}", testkit::random_suffix(6)));
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.path("pids"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    fn writes(&self) -> Vec<u128> {
        std::fs::read_to_string(self.path("log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    fn config(&self, duration: &str) -> PathBuf {
        let cfg = self.path("flux-handoff.toml");
        std::fs::write(&cfg, format!("[lease]\nduration = \"{duration}\"\n")).unwrap();
        cfg
    }

    /// The command: a loop, a background child, and a grandchild that clears its environment
    /// and double-forks into a session of its own (as daemonizing tools do). Each records its
    /// pid, then writes a timestamp every 100 ms.
    fn script(&self) -> String {
        let (p, l) = (self.path("pids"), self.path("log"));
        let (p, l) = (p.display(), l.display());
        let work = format!("while true; do date +%s%N >> {l}; sleep 0.1; done");
        format!(
            "echo $$ >> {p}; \
             sh -c 'echo $$ >> {p}; {work}' & \
             env -i /bin/sh -c '( setsid /bin/sh -c \"echo \\$\\$ >> {p}; {work}\" & ) &'; \
             {work}"
        )
    }
}

/// A process left running by a broken run must not outlive the test.
impl Drop for Files {
    fn drop(&mut self) {
        for pid in self.pids() {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = kill_process(p, Signal::KILL);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether `pid` can still act: it exists and is neither a zombie nor dead.
fn alive(pid: i32) -> bool {
    state(pid).is_some_and(|s| s != 'Z' && s != 'X')
}

/// The state letter of `pid` (`R`, `S`, `T`, `Z`, ...), if it exists.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

fn signal(pid: u32, sig: Signal) {
    kill_process(Pid::from_raw(i32::try_from(pid).unwrap()).unwrap(), sig).unwrap();
}

/// Starts `run --grace 1s --holder H` with the command of `f`, and waits until its three
/// processes work.
async fn start(
    c: &Cluster,
    f: &Files,
    holder: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Child {
    let mut cmd = c.cli();
    cmd.args([
        "run", "--grace", "1s", "--holder", holder, "--target", TARGET,
    ])
    .args(extra)
    .args(c.handoff_flags())
    .args(["--", "sh", "-c", &f.script()])
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    wait_for(
        || f.pids().len() >= 3 && f.writes().len() >= 6,
        "the command's processes to work",
    )
    .await;
    child
}

fn reap(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

async fn assert_released(c: &Cluster) {
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name} still fenced");
        assert!(!suspended(&o), "{name} still suspended");
    }
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// SIGKILL to the holder; then `resume --holder H --holder-exited`, as the Action's post step
/// runs it. When it returns, every process of the tree is gone.
async fn killed_holder(prefix: &str, env: &[(&str, &str)]) {
    let c = Cluster::seeded(prefix).await;
    let f = Files::new();
    let holder = format!("keeper-{}", testkit::random_suffix(6));
    let mut run = start(&c, &f, &holder, &[], env).await;
    let pids = f.pids();
    let killed_at = now_ns();
    run.kill().unwrap();
    let _ = run.wait();
    let gone = watch_gone(pids.clone());

    let mut args = vec!["resume", "--holder", &holder, "--holder-exited"];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    let released_at = now_ns();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for pid in &pids {
        assert!(
            !alive(*pid),
            "{pid} of the killed holder's command still runs after the release"
        );
    }
    assert_released(&c).await;
    let gone_at = gone.await.unwrap();
    let last = f.writes().into_iter().max().unwrap_or(0);
    assert!(
        last <= gone_at && gone_at <= released_at,
        "a write after the release"
    );
    println!(
        "keeper_killed: last_write={last} holder_killed={killed_at} keeper_kill={gone_at} resume_returned={released_at}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeper_a_killed_holders_tree_is_gone_before_resume_holder_exited_releases() {
    killed_holder("keeper-kill", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeper_without_a_cgroup_the_process_walk_ends_the_whole_tree_too() {
    killed_holder("keeper-walk", &[("FLUX_HANDOFF_CGROUP", "off")]).await;
}

/// The processes' death, in a task of its own: the first instant each check saw all gone.
fn watch_gone(pids: Vec<i32>) -> tokio::task::JoinHandle<u128> {
    tokio::spawn(async move {
        loop {
            if pids.iter().all(|p| !alive(*p)) {
                return now_ns();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeper_a_stopped_holders_tree_ends_before_recovery_takes_the_lease_over() {
    let c = Cluster::seeded("keeper-stop").await;
    let f = Files::new();
    let cfg = f.config("4s");
    let cfg = cfg.to_str().unwrap();
    let holder = format!("keeper-{}", testkit::random_suffix(6));
    let run = start(&c, &f, &holder, &["--config", cfg], &[]).await;
    let pids = f.pids();
    // SIGSTOP, as a debugger or a suspended VM would: the holder renews nothing any more.
    signal(run.id(), Signal::STOP);
    let gone = watch_gone(pids.clone());

    let lease = format!("{}/flux-handoff", c.ns.name);
    let out = c
        .run(&[
            "fences", "--lease", &lease, "--config", cfg, "recover", "--yes",
        ])
        .await;
    let recovered_at = now_ns();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_released(&c).await;
    for pid in &pids {
        assert!(
            !alive(*pid),
            "{pid} of the stopped holder's command runs under released fences"
        );
    }
    let gone_at = gone.await.unwrap();
    let last = f.writes().into_iter().max().unwrap_or(0);
    assert!(last <= gone_at && gone_at <= recovered_at);
    println!(
        "keeper_stopped: last_write={last} keeper_kill={gone_at} recover_returned={recovered_at}"
    );
    signal(run.id(), Signal::CONT);
    reap(run);
}

/// A file whose removal ends the job-control test's command.
fn job_script(marker: &Path, pid: &Path) -> String {
    format!(
        "echo $$ > {p}; touch {m}; while [ -e {m} ]; do sleep 0.05; done",
        p = pid.display(),
        m = marker.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_control_sigtstp_and_sigcont_to_the_holder_stop_and_continue_the_command() {
    let c = Cluster::seeded("job-control").await;
    let f = Files::new();
    let (marker, pid_file) = (f.path("running"), f.path("pid"));
    let mut cmd = c.cli();
    cmd.args(["run", "--target", TARGET])
        .args(c.handoff_flags())
        .args(["--", "sh", "-c", &job_script(&marker, &pid_file)])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let run = cmd.spawn().unwrap();
    wait_for(|| marker.exists(), "the command to start").await;
    let command: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::fs::write(f.path("pids"), format!("{command}\n")).unwrap();

    signal(run.id(), Signal::TSTP);
    wait_for(|| state(command) == Some('T'), "the command to stop").await;
    let holder = i32::try_from(run.id()).unwrap();
    wait_for(|| state(holder) == Some('T'), "the holder to stop").await;

    signal(run.id(), Signal::CONT);
    wait_for(
        || state(command).is_some_and(|s| s != 'T'),
        "the command to continue",
    )
    .await;
    assert_ne!(state(holder), Some('T'), "the holder continued");

    std::fs::remove_file(&marker).unwrap();
    let out = tokio::task::spawn_blocking(move || run.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_released(&c).await;
}

/// A stop at the holder's deadline is a lost Lease (exit 6), never the command's own exit. The
/// holder is stopped (SIGSTOP) until its keeper has ended the command at the deadline, then
/// continued at once, well inside its Lease's window: its own timer, a renewal that now
/// answers, and the command's exit all come at the same moment. The command exits 0 on
/// SIGTERM, so reporting its exit would call the stopped work a success. Six holders at once
/// on two CPUs: on the code before the keeper's report each was a race its own timer lost
/// now and then (tokio's `select!` picks among ready branches at random).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeper_a_stop_at_the_holders_deadline_is_a_lost_lease_never_the_commands_exit() {
    let rounds = (1..=6).map(|r| tokio::spawn(deadline_round(r)));
    let mut wrong = Vec::new();
    for r in rounds {
        if let Err(e) = r.await.unwrap() {
            wrong.push(e);
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// One holder of the test above; what went wrong, if anything.
async fn deadline_round(round: usize) -> Result<(), String> {
    let c = Cluster::seeded(&format!("keeper-deadline-{round}")).await;
    let f = Files::new();
    let cfg = f.config("4s");
    let (p, l) = (f.path("pids"), f.path("log"));
    let script = format!(
        "trap 'exit 0' TERM; echo $$ >> {p}; \
         while true; do date +%s%N >> {l}; sleep 0.1; done",
        p = p.display(),
        l = l.display()
    );
    let holder = format!("keeper-{}", testkit::random_suffix(6));
    let mut cmd = c.cli();
    cmd.args([
        "run", "--grace", "1s", "--holder", &holder, "--target", TARGET,
    ])
    .args(["--config", cfg.to_str().unwrap()])
    .args(c.handoff_flags())
    .args(["--", "sh", "-c", &script])
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    let run = cmd.spawn().unwrap();
    wait_for(
        || !f.pids().is_empty() && f.writes().len() >= 3,
        "the command to work",
    )
    .await;
    let command = f.pids()[0];
    signal(run.id(), Signal::STOP);
    wait_for(
        || !alive(command),
        "the keeper to end the command at the holder's deadline",
    )
    .await;
    signal(run.id(), Signal::CONT);
    let out = tokio::task::spawn_blocking(move || run.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let err = stderr(&out);
    if code(&out) != 6 || !err.contains("fenced itself") {
        return Err(format!("round {round}: exit {}: {err}", code(&out)));
    }
    assert_released(&c).await;
    println!("keeper_deadline: round {round} exit 6");
    Ok(())
}
