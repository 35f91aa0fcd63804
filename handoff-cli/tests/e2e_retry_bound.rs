//! End to end: every retry is bounded. An API server (or a gateway in front of it) that
//! answers every fence write with 504 must not hold `run` past its `--timeout`: before, kube's
//! own retry layer sent each write again 15 times with a backoff doubling towards 1000 s,
//! minutes per write, out of reach of `--timeout` and signals.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use fault_proxy::{Fault, Proxy};

/// A proxy that answers every fence write with 504 (nothing reaches the server), and the
/// command line of a `run` through it with `--timeout timeout`.
async fn answering_504(c: &Cluster, timeout: &str) -> (Proxy, std::path::PathBuf, Command) {
    let (proxy, dir, cmd) = run_through_proxy(c, timeout).await;
    for n in 1..=1000 {
        proxy.arm_on(
            "patch kustomizations",
            n,
            Fault::Status {
                code: 504,
                retry_after: None,
            },
        );
    }
    (proxy, dir, cmd)
}

/// A proxy (nothing armed yet), and the command line of `run --target TARGET -- true`
/// through it with `--timeout timeout`.
async fn run_through_proxy(c: &Cluster, timeout: &str) -> (Proxy, std::path::PathBuf, Command) {
    let proxy = Proxy::start().await.unwrap();
    let dir = std::env::temp_dir().join(format!("fh-504-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let kc = dir.join("kubeconfig");
    proxy.write_kubeconfig(&kc).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flux-handoff"));
    cmd.env_remove("GITHUB_ACTIONS")
        .env_remove("FLUX_HANDOFF_CONFIG")
        .env_remove("FLUX_HANDOFF_HOLDER")
        .arg("--kubeconfig")
        .arg(&kc)
        .args([
            "--namespace",
            &c.ns.name,
            "--interval",
            "200ms",
            "--timeout",
            timeout,
        ])
        .args(["run", "--target", TARGET])
        .args(c.handoff_flags())
        .args(["--", "true"])
        .stdin(Stdio::null());
    (proxy, dir, cmd)
}

/// Nothing was forwarded, so the server must hold no fence on either member.
async fn assert_nothing_fenced(c: &Cluster, err: &str) {
    for name in [PARENT, TARGET] {
        assert_eq!(
            annotation(&c.get(name).await, OWNER_KEY),
            None,
            "{name}: {err}"
        );
    }
}

fn patches(proxy: &Proxy) -> u64 {
    proxy
        .counts()
        .get("patch kustomizations")
        .copied()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_a_fence_write_answered_504_every_time_ends_within_the_timeout() {
    let c = Cluster::seeded("deadline-504").await;
    let (proxy, dir, mut cmd) = answering_504(&c, "6s").await;
    let started = Instant::now();
    let out = tokio::time::timeout(
        Duration::from_mins(3),
        tokio::task::spawn_blocking(move || cmd.output().unwrap()),
    )
    .await
    .expect("the run was still retrying its fence write 3 minutes after a 6 s --timeout")
    .unwrap();
    let took = started.elapsed();
    let err = stderr(&out);
    assert_ne!(code(&out), 0, "{err}");
    let patches = patches(&proxy);
    println!(
        "deadline: exit={} after {took:?}, fence patches sent={patches}",
        code(&out)
    );
    // Nothing was forwarded, so the server holds no fence; the run says what it could not
    // release, or that nothing is held.
    assert_nothing_fenced(&c, &err).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts `cmd` and waits until its fence write was answered 504 three times.
async fn spawn_looping(proxy: &Proxy, mut cmd: Command) -> std::process::Child {
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..1200 {
        if patches(proxy) >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(patches(proxy) >= 3, "the run never sent its fence write");
    child
}

/// Sends `signals` (one of each kind: the kernel merges a pending signal with another of its
/// kind) to the run in its 504 loop and returns its output and its exit code.
async fn terminated(c: &Cluster, name: &str, signals: &[&str]) -> (String, i32) {
    // A --timeout far away: only the signal can end the run early.
    let (proxy, dir, cmd) = answering_504(c, "30m").await;
    let child = spawn_looping(&proxy, cmd).await;
    let pid = child.id();
    let (at_signal, signalled) = (patches(&proxy), Instant::now());
    for sig in signals {
        let sent = testkit::signal::to_process(pid, sig);
        assert!(sent.is_ok(), "SIG{sig} to {pid}: {sent:?}");
    }
    let out = tokio::time::timeout(
        Duration::from_mins(3),
        tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()),
    )
    .await
    .expect("the run was still retrying its fence write 3 minutes after the signal")
    .unwrap();
    let took = signalled.elapsed();
    println!(
        "{name}: {signals:?} at {at_signal} patches; exit={} {took:?} after it, {} patches in all",
        code(&out),
        patches(&proxy)
    );
    let _ = std::fs::remove_dir_all(&dir);
    (stderr(&out), code(&out))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_sigterm_during_a_504_loop_ends_the_run_with_its_stop() {
    let c = Cluster::seeded("deadline-term").await;
    let (err, code) = terminated(&c, "deadline", &["TERM"]).await;
    // Interrupted, with what it could not settle named (7): every settling write is answered
    // 504 too, so cleanup ends at its bound after the stop — never a run that goes on
    // retrying (before the bound: 35 s of retries after the stop's grace).
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: interrupted"), "{err}");
    assert_eq!(code, 7, "{err}");
    assert!(last.contains("still held or unsettled"), "{err}");
    assert!(
        err.contains("the releases did not finish within 10s of the stop"),
        "cleanup was not ended by its bound after the stop: {err}"
    );
    assert_nothing_fenced(&c, &err).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_a_second_sigterm_cuts_cleanup_to_its_hurried_bound() {
    let c = Cluster::seeded("deadline-hurry").await;
    // A runner's cancel: SIGINT, SIGTERM, then SIGKILL 2.5 s later. Cleanup is cut 2 s after
    // the second signal and says what it left, before that SIGKILL could come.
    let (err, code) = terminated(&c, "deadline-hurry", &["INT", "TERM"]).await;
    assert_eq!(code, 7, "{err}");
    assert!(
        err.contains("the releases did not finish within 2s of the second signal"),
        "cleanup was not cut by the second signal: {err}"
    );
    assert_nothing_fenced(&c, &err).await;
}

/// A gateway's 502 on the reads before anything is taken (the preflight's: a restarting API
/// server, a load balancer) is read again within the read budget, as every later read is:
/// a queued deploy must not fail on it. Before, the first 502 ended `run` with exit 6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_a_preflight_read_answered_502_is_read_again() {
    let c = Cluster::seeded("preflight-502").await;
    let (proxy, dir, mut cmd) = run_through_proxy(&c, "30s").await;
    for n in 1..=2 {
        let bad_gateway = Fault::Status {
            code: 502,
            retry_after: None,
        };
        proxy.arm_on("get kustomizations", n, bad_gateway);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    let gets = proxy
        .counts()
        .get("get kustomizations")
        .copied()
        .unwrap_or(0);
    assert!(gets >= 3, "the 502s were not read again: {gets} reads");
    assert_nothing_fenced(&c, &err).await;
    assert!(!suspended(&c.get(TARGET).await), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}
