//! End to end: a run cancelled the way GitHub's runner cancels a step (SIGINT to the process,
//! SIGTERM 7.5 s later, SIGKILL 2.5 s after that — actions/runner
//! `src/Runner.Sdk/ProcessInvoker.cs`), and a run whose Lease is lost while its command runs.
//! After each, the server must hold nothing of the run.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use rustix::process::{Pid, Signal, kill_process};

fn send(child: &Child, sig: Signal) {
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    let _ = kill_process(pid, sig);
}

/// Waits for `child` up to `limit`: `Some(status)` once it exited.
async fn wait_for(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let end = tokio::time::Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if tokio::time::Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the runner does to a step it cancels. Returns the exit status and whether the run
/// had to be killed (then it could not release anything).
async fn cancel_like_the_runner(child: &mut Child) -> (ExitStatus, bool) {
    send(child, Signal::INT);
    if let Some(s) = wait_for(child, Duration::from_millis(7500)).await {
        return (s, false);
    }
    send(child, Signal::TERM);
    if let Some(s) = wait_for(child, Duration::from_millis(2500)).await {
        return (s, false);
    }
    send(child, Signal::KILL);
    (child.wait().unwrap(), true)
}

async fn wait_for_file(path: &Path) {
    for _ in 0..1200 {
        // The command writes its pid and a newline: a complete line means it runs.
        if std::fs::read_to_string(path).is_ok_and(|s| s.ends_with('\n')) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{} never appeared: the command did not start",
        path.display()
    );
}

async fn assert_nothing_held(c: &Cluster) {
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name} still fenced");
        assert!(!suspended(&o), "{name} still suspended");
    }
    let holder = c.ns.lease_holder().await;
    assert_eq!(holder, None, "Lease still held");
}

/// Starts `run -- sh -c SCRIPT`; SCRIPT creates `$MARKER` once it runs.
fn start_run(c: &Cluster, marker: &Path, extra: &[&str], script: &str) -> Child {
    let mut cmd = c.cli();
    cmd.args(["run", "--target", TARGET])
        .args(c.handoff_flags())
        .args(extra)
        .args(["--", "sh", "-c", script])
        .env("MARKER", marker)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd.spawn().unwrap()
}

fn marker(c: &Cluster) -> PathBuf {
    std::env::temp_dir().join(format!("flux-handoff-{}.running", c.ns.name))
}

fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut s);
    }
    s
}

// The commands let go of flux-handoff's stderr, so a command that outlives the run (the bug
// these tests guard against) cannot keep the test reading it forever.
const IGNORES_SIGTERM: &str =
    "exec >/dev/null 2>&1; trap '' TERM; echo $$ > \"$MARKER\"; while :; do sleep 0.2; done";
const EXITS_PROMPTLY: &str = "exec >/dev/null 2>&1; echo $$ > \"$MARKER\"; exec sleep 600";

/// Kills the command's process group when the test ends, whatever happened: a command left
/// running by a broken run must not outlive the test.
struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        let pid = std::fs::read_to_string(&self.0)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .and_then(Pid::from_raw);
        if let Some(group) = pid {
            let _ = rustix::process::kill_process_group(group, Signal::KILL);
        }
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_like_the_runner_a_command_that_ignores_sigterm_leaves_nothing_held() {
    let c = Cluster::seeded("cancel-ignores").await;
    let m = marker(&c);
    let _reaper = Reaper(m.clone());
    let mut child = start_run(&c, &m, &[], IGNORES_SIGTERM);
    wait_for_file(&m).await;
    let (status, killed) = cancel_like_the_runner(&mut child).await;
    let err = stderr_of(&mut child);
    assert!(!killed, "the runner had to SIGKILL the run: {err}");
    assert_eq!(status.code(), Some(130), "{err}");
    assert_nothing_held(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_like_the_runner_a_command_that_exits_promptly_leaves_nothing_held() {
    let c = Cluster::seeded("cancel-prompt").await;
    let m = marker(&c);
    let _reaper = Reaper(m.clone());
    let mut child = start_run(&c, &m, &[], EXITS_PROMPTLY);
    wait_for_file(&m).await;
    let (status, killed) = cancel_like_the_runner(&mut child).await;
    let err = stderr_of(&mut child);
    assert!(!killed, "the runner had to SIGKILL the run: {err}");
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("released: "), "{err}");
    assert_nothing_held(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_second_signal_kills_the_command_and_still_releases() {
    let c = Cluster::seeded("cancel-second").await;
    let m = marker(&c);
    let _reaper = Reaper(m.clone());
    // A grace longer than the runner waits: only the second signal can end the command in time.
    let mut child = start_run(&c, &m, &["--grace", "10m"], IGNORES_SIGTERM);
    wait_for_file(&m).await;
    let (status, killed) = cancel_like_the_runner(&mut child).await;
    let err = stderr_of(&mut child);
    assert!(!killed, "the runner had to SIGKILL the run: {err}");
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("second signal"), "{err}");
    assert_nothing_held(&c).await;
}

/// A config whose Lease is renewed every 500 ms, so a loss is noticed soon.
fn short_lease_config(c: &Cluster) -> PathBuf {
    let path = std::env::temp_dir().join(format!("flux-handoff-{}.toml", c.ns.name));
    std::fs::write(&path, "[lease]\nduration = \"2s\"\n").unwrap();
    path
}

async fn lease_lost_case(c: &Cluster, lose: impl AsyncFnOnce(&kube::Api<Lease>)) {
    let m = marker(c);
    let _reaper = Reaper(m.clone());
    let config = short_lease_config(c);
    let config_flag = config.to_string_lossy().to_string();
    let mut child = start_run(c, &m, &["--config", &config_flag], EXITS_PROMPTLY);
    wait_for_file(&m).await;
    lose(&c.ns.api::<Lease>()).await;
    let status = wait_for(&mut child, Duration::from_mins(1))
        .await
        .expect("the run did not stop after losing its Lease");
    let err = stderr_of(&mut child);
    assert_eq!(status.code(), Some(6), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.contains("lease was lost"), "{err}");
    assert!(!last.contains("still held"), "{err}");
    // The fences carry the run's epoch and were released by CAS.
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name} still fenced");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lost_by_deletion_stops_the_command_and_exits_6() {
    let c = Cluster::seeded("lease-lost-del").await;
    lease_lost_case(&c, async |leases| {
        leases
            .delete("flux-handoff", &kube::api::DeleteParams::default())
            .await
            .unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lost_to_a_takeover_stops_the_command_and_exits_6() {
    let c = Cluster::seeded("lease-lost-take").await;
    lease_lost_case(&c, async |leases| {
        let mut l = leases.get("flux-handoff").await.unwrap();
        let spec = l.spec.as_mut().unwrap();
        spec.holder_identity = Some("someone-else".into());
        spec.lease_transitions = spec.lease_transitions.map(|t| t + 1);
        leases
            .replace("flux-handoff", &kube::api::PostParams::default(), &l)
            .await
            .unwrap();
    })
    .await;
}
