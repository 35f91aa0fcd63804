//! End to end: nothing `run`'s command started outlives the pause. Each command leaves
//! children behind and exits at once: one in the background, one in its own process group
//! (GNU `timeout` moves itself there), one in its own session (`setsid`, ignoring SIGTERM).
//! Each child records its pid and, three seconds later — well after an unguarded run would have
//! released everything — appends to a log. The evidence is ordering, not a clock: once the run
//! has ended, every child must already be dead (the run reaps them before its first release)
//! and none may have written its line.

mod common;

use std::path::PathBuf;
use std::process::Stdio;

use common::*;
use rustix::process::{Pid, Signal, kill_process};

/// Files of one test: `pids` (each child appends its pid) and `log` (each child's late write).
struct Files {
    pids: PathBuf,
    log: PathBuf,
}

impl Files {
    fn new(c: &Cluster) -> Self {
        let base = std::env::temp_dir().join(format!("flux-handoff-{}", c.ns.name));
        Self {
            pids: base.with_extension("pids"),
            log: base.with_extension("log"),
        }
    }

    fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(&self.pids)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

/// A child left running by a broken run must not outlive the test.
impl Drop for Files {
    fn drop(&mut self) {
        for pid in self.pids() {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = kill_process(p, Signal::KILL);
            }
        }
        let _ = std::fs::remove_file(&self.pids);
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A child's body (for `sh -c`): record its pid, wait, then act.
const CHILD: &str = "echo $$ >> \"$PIDS\"; sleep 3; echo \"late $$\" >> \"$LOG\"";

/// Runs `run --grace 1s -- sh -c SCRIPT` to completion.
async fn run(c: &Cluster, f: &Files, script: &str) -> (i32, String) {
    let mut cmd = c.cli();
    cmd.args(["run", "--grace", "1s", "--target", TARGET])
        .args(c.handoff_flags())
        .args(["--", "sh", "-c", script])
        .env("PIDS", &f.pids)
        .env("LOG", &f.log)
        .env("CHILD", CHILD)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (code(&out), stderr(&out))
}

/// Whether `pid` can still act: it exists and is not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

async fn assert_contained(c: &Cluster, f: &Files, expected: usize, (code, err): (i32, String)) {
    assert_eq!(code, 0, "{err}");
    let pids = f.pids();
    // Every child recorded its pid before the leader's `wait` for it returned, so all are
    // there by now.
    assert_eq!(pids.len(), expected, "children that ran: {pids:?}; {err}");
    for pid in &pids {
        assert!(!alive(*pid), "child {pid} outlived the run: {err}");
    }
    // All dead: the log is final. None wrote after the release, nor at all.
    let log = std::fs::read_to_string(&f.log).unwrap_or_default();
    assert!(log.is_empty(), "a child acted after the release: {log:?}");
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name} still fenced");
        assert!(!suspended(&o), "{name} still suspended");
    }
    let holder = c.ns.lease_holder().await;
    assert_eq!(holder, None, "Lease still held");
}

// Each script waits until its children recorded their pids (so the test knows whom to check),
// then exits 0 at once, leaving them running.
const WAIT_FOR_PIDS: &str =
    "while [ \"$(wc -l < \"$PIDS\" 2>/dev/null || echo 0)\" -lt $N ]; do sleep 0.05; done";

fn script(children: &str, n: usize) -> String {
    format!("exec >/dev/null 2>&1; N={n}; {children} {WAIT_FOR_PIDS}; exit 0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contain_a_background_child_does_not_outlive_the_pause() {
    let c = Cluster::seeded("contain-bg").await;
    let f = Files::new(&c);
    let ended = run(&c, &f, &script("sh -c \"$CHILD\" &", 1)).await;
    assert_contained(&c, &f, 1, ended).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contain_a_child_in_its_own_group_does_not_outlive_the_pause() {
    let c = Cluster::seeded("contain-group").await;
    let f = Files::new(&c);
    // GNU timeout puts itself (and so its child) in a process group of its own; it records its
    // own pid too.
    let children = "timeout 30 sh -c \"$CHILD\" & echo $! >> \"$PIDS\";";
    let ended = run(&c, &f, &script(children, 2)).await;
    assert_contained(&c, &f, 2, ended).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contain_a_child_in_its_own_session_does_not_outlive_the_pause() {
    let c = Cluster::seeded("contain-session").await;
    let f = Files::new(&c);
    // In a session of its own, and deaf to SIGTERM: only SIGKILL after the grace ends it.
    let children = "setsid sh -c \"trap '' TERM; $CHILD\" &";
    let ended = run(&c, &f, &script(children, 1)).await;
    assert_contained(&c, &f, 1, ended).await;
}
