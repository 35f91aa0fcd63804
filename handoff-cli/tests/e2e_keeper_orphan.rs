//! End to end: the holder and its keeper killed at the same instant (`pkill -9 flux-handoff`
//! kills both, the keeper being a fork of the same binary). The command's background writer
//! then has nobody left to end it; `resume --holder H --holder-exited` (the Action's post
//! step) must end it before it releases anything, through the command's cgroup, which is
//! named after the holder.
//!
//! The evidence is ordering, not a clock: when resume returns, the writer is gone (it cannot
//! be signalled any more), so nothing of the command can write afterwards.

mod common;

use std::path::PathBuf;
use std::process::{Child, Stdio};

use common::*;
use rustix::process::{Pid, Signal, kill_process};

/// The test's directory, with `writer` (the background writer's pid) and `log` (it appends a
/// line every 100 ms).
struct Files {
    dir: PathBuf,
    writer: PathBuf,
    log: PathBuf,
}

impl Files {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("fh-orphan-{}", testkit::random_suffix(6)));
        std::fs::create_dir_all(&dir).unwrap();
        let (writer, log) = (dir.join("writer"), dir.join("log"));
        Self { dir, writer, log }
    }

    fn writer(&self) -> Option<i32> {
        std::fs::read_to_string(&self.writer)
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn config(&self, duration: &str) -> String {
        let cfg = self.dir.join("flux-handoff.toml");
        std::fs::write(&cfg, format!("[lease]\nduration = \"{duration}\"\n")).unwrap();
        cfg.display().to_string()
    }

    fn size(&self) -> u64 {
        std::fs::metadata(&self.log).map_or(0, |m| m.len())
    }

    /// The command: a background writer deaf to SIGTERM and SIGHUP, and a leader that waits.
    fn script(&self) -> String {
        let (w, l) = (&self.writer, &self.log);
        format!(
            "sh -c 'trap \"\" TERM HUP; echo $$ > {w}.tmp; mv {w}.tmp {w}; \
             while true; do echo tick >> {l}; sleep 0.1; done' & wait",
            w = w.display(),
            l = l.display()
        )
    }
}

/// A writer left running by a broken run must not outlive the test.
impl Drop for Files {
    fn drop(&mut self) {
        if let Some(p) = self.writer().and_then(Pid::from_raw) {
            let _ = kill_process(p, Signal::KILL);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether `pid` can still act: it exists and is neither a zombie nor dead.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')')?.1.trim_start().chars().next())
        .is_some_and(|s| s != 'Z' && s != 'X')
}

/// The direct children of `parent` (its keeper, for a holder).
fn children(parent: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse()
                        .ok()
                })
                == Some(parent)
        })
        .collect()
}

fn signal(pid: i32, sig: Signal) {
    kill_process(Pid::from_raw(pid).unwrap(), sig).unwrap();
}

fn start(c: &Cluster, f: &Files, holder: &str, cfg: &str) -> Child {
    let mut cmd = c.cli();
    cmd.args([
        "run", "--grace", "1s", "--holder", holder, "--target", TARGET, "--config", cfg,
    ])
    .args(c.handoff_flags())
    .args(["--", "sh", "-c", &f.script()])
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    cmd.spawn().unwrap()
}

/// A run whose holder and keeper were killed together, its writer writing on: returns the
/// writer's pid.
async fn orphaned(c: &Cluster, f: &Files, holder: &str, cfg: &str) -> i32 {
    let mut run = start(c, f, holder, cfg);
    wait_for(
        || f.writer().is_some() && f.size() >= 3 * 5,
        "the background writer to work",
    )
    .await;
    let writer = f.writer().unwrap();
    let holder_pid = i32::try_from(run.id()).unwrap();
    let keepers = children(holder_pid);
    assert_eq!(keepers.len(), 1, "the holder has one child, its keeper");
    // Both stopped first, so neither sees the other die and acts on it: then both killed, as
    // `pkill -9 flux-handoff` does.
    for pid in [holder_pid, keepers[0]] {
        signal(pid, Signal::STOP);
    }
    for pid in [holder_pid, keepers[0]] {
        signal(pid, Signal::KILL);
    }
    let _ = run.wait();
    wait_for(|| !alive(keepers[0]), "the keeper to be gone").await;
    // The premise: with holder and keeper gone, the writer works on.
    let before = f.size();
    wait_for(|| f.size() > before + 5, "the orphaned writer to write on").await;
    writer
}

/// When the releasing command returned: the writer is gone, and it released everything.
async fn assert_ended(c: &Cluster, f: &Files, writer: i32, out: &std::process::Output) {
    let size_at_return = f.size();
    assert!(
        !alive(writer),
        "the writer {writer} of the killed holder's command still runs after the release returned (exit {}): {}",
        code(out),
        stderr(out)
    );
    assert_eq!(code(out), 0, "{}", stderr(out));
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name} still fenced");
        assert!(!suspended(&o), "{name} still suspended");
    }
    // The writer was gone before the release returned: its file cannot grow any more.
    assert_eq!(
        f.size(),
        size_at_return,
        "the writer's file grew after the release returned"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeper_orphan_holder_and_keeper_killed_together_resume_holder_exited_ends_the_writer() {
    let c = Cluster::seeded("keeper-orphan").await;
    let f = Files::new();
    let cfg = f.config("10s");
    let holder = format!("orphan-{}", testkit::random_suffix(6));
    let writer = orphaned(&c, &f, &holder, &cfg).await;

    let mut args = vec!["resume", "--holder", &holder, "--holder-exited"];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_ended(&c, &f, writer, &out).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeper_orphan_holder_and_keeper_killed_together_fences_recover_ends_the_writer() {
    let c = Cluster::seeded("keeper-orphan-rec").await;
    let f = Files::new();
    let cfg = f.config("4s");
    let holder = format!("orphan-{}", testkit::random_suffix(6));
    let writer = orphaned(&c, &f, &holder, &cfg).await;

    let lease = format!("{}/flux-handoff", c.ns.name);
    let out = c
        .run(&[
            "fences", "--lease", &lease, "--config", &cfg, "recover", "--yes",
        ])
        .await;
    assert_ended(&c, &f, writer, &out).await;
}
