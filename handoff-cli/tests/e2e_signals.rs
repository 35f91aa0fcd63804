//! End to end: SIGTERM/SIGINT stop new work and release what the run holds, in order, before
//! exiting with 130.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use flux_model::model::{Phase, Touch};
use k8s_openapi::api::coordination::v1::Lease;

/// Sends `sig` (`TERM` or `INT`) to `pid`.
fn signal(pid: u32, sig: &str) {
    let sent = testkit::signal::to_process(pid, sig);
    assert!(sent.is_ok(), "SIG{sig} to {pid}: {sent:?}");
}

async fn wait_until(c: &Cluster, name: &str, pred: impl Fn(&serde_json::Value) -> bool) {
    for _ in 0..600 {
        if pred(&c.get(name).await) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{name} never reached the awaited state");
}

async fn assert_everything_released(c: &Cluster) {
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name} still fenced");
        assert!(!suspended(&o), "{name} still suspended");
    }
    let lease = c.ns.api::<Lease>().get("flux-handoff").await.unwrap();
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(holder.is_empty(), "Lease still held by {holder}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_proof_releases_target_parent_and_lease_then_exits_130() {
    let c = Cluster::seeded("cli-sigterm").await;
    // The target is mid-reconcile, so the pause waits for its acknowledgement after fencing it.
    c.model.hang_at(TARGET, Phase::Build);
    c.model
        .touch_now(
            TARGET,
            &Touch::Annotate {
                key: "reconcile.fluxcd.io/requestedAt".into(),
                value: "busy".into(),
            },
        )
        .await
        .unwrap();
    c.model.wait_hanging(TARGET).await.unwrap();

    let mut cmd = c.cli();
    cmd.args(["pause", "--target", TARGET])
        .args(c.handoff_flags())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    // Once the target carries a fence, the run is waiting inside the pause.
    wait_until(&c, TARGET, |o| annotation(o, OWNER_KEY).is_some()).await;
    signal(pid, "TERM");
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("interrupted"), "{err}");
    // Released in order: target before parent, then the Lease.
    let t = err
        .find(&format!("released: Kustomization {}/{TARGET}", c.ns.name))
        .unwrap();
    let p = err
        .find(&format!("released: Kustomization {}/{PARENT}", c.ns.name))
        .unwrap();
    let l = err.find("lease released").unwrap();
    assert!(t < p && p < l, "{err}");
    c.model.release(TARGET);
    assert_everything_released(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_while_the_command_runs_stops_it_and_resumes() {
    let c = Cluster::seeded("cli-sigint").await;
    let marker = std::env::temp_dir().join(format!("fh-started-{}", testkit::random_suffix(6)));
    let script = format!("touch {}; sleep 30", marker.display());
    let mut cmd = c.cli();
    cmd.args(["run", "--target", TARGET])
        .args(c.handoff_flags())
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    for _ in 0..600 {
        if marker.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(marker.exists(), "the command never started");
    assert!(
        suspended(&c.get(TARGET).await),
        "paused while the command runs"
    );
    signal(pid, "INT");
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    assert_everything_released(&c).await;
    let _ = std::fs::remove_file(marker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_the_target_fence_write_is_in_flight_still_releases_the_target_first() {
    let c = Cluster::seeded("cli-sigflight").await;
    // The target's fence write reaches the server and is applied, but its response is held
    // back: the run cannot have recorded the fence when the signal arrives.
    let proxy = fault_proxy::Proxy::start().await.unwrap();
    let kc = std::env::temp_dir().join(format!("fh-proxy-{}.json", testkit::random_suffix(6)));
    proxy.write_kubeconfig(&kc).unwrap();
    proxy.arm_on(
        "patch kustomizations",
        2,
        fault_proxy::Fault::Delay(Duration::from_secs(20)),
    );
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_flux-handoff"));
    cmd.env_remove("GITHUB_ACTIONS")
        .arg("--kubeconfig")
        .arg(&kc)
        .args([
            "--namespace",
            &c.ns.name,
            "--interval",
            "200ms",
            "--timeout",
            "30s",
        ])
        .args(["pause", "--target", TARGET])
        .args(c.handoff_flags())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    // The write landed: the target carries the fence, its response is still held back.
    wait_until(&c, TARGET, |o| annotation(o, OWNER_KEY).is_some()).await;
    signal(pid, "TERM");
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    let err = stderr(&out);
    let t = err
        .find(&format!("released: Kustomization {}/{TARGET}", c.ns.name))
        .unwrap_or_else(|| panic!("the in-flight target fence was not released: {err}"));
    let p = err
        .find(&format!("released: Kustomization {}/{PARENT}", c.ns.name))
        .unwrap();
    assert!(
        t < p,
        "the parent was released while its child was still ours: {err}"
    );
    assert_everything_released(&c).await;
    let _ = std::fs::remove_file(kc);
}
