//! End to end: `resume --holder H` never adopts a live holder. A Lease held by H and not
//! parked (a `run` whose command is still running) is refused with exit 3 and nothing changed;
//! a parked pause resumes; `--holder-exited` (a CI post step's attestation) releases it.

mod common;

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::Value;

/// A `flux-handoff run` inside its command, and the file whose removal ends that command.
struct Running {
    child: Child,
    marker: PathBuf,
}

/// Starts `flux-handoff run` whose command waits until its marker file is removed; returns it
/// and its holder once the command runs (the run is then inside `run -- cmd`, renewing its
/// Lease).
async fn running(c: &Cluster) -> (Running, String) {
    running_as(c, &[]).await
}

/// [`running`] with extra flags for `run` (e.g. `--holder H`).
async fn running_as(c: &Cluster, extra: &[&str]) -> (Running, String) {
    let marker = std::env::temp_dir().join(format!("fh-live-{}", testkit::random_suffix(6)));
    let m = marker.display();
    let script = format!("touch {m} && while [ -e {m} ]; do sleep 0.2; done");
    let mut cmd = c.cli();
    cmd.args(["run", "--target", TARGET]);
    cmd.args(extra);
    cmd.args(c.handoff_flags());
    cmd.args(["--", "sh", "-c", &script]);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let child = cmd.spawn().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_mins(1);
    while !marker.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command never started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let holder = fence_holder(&c.get(TARGET).await).unwrap().to_string();
    (Running { child, marker }, holder)
}

async fn resume(c: &Cluster, holder: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["resume", "--holder", holder];
    args.extend(extra);
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    c.run(&args).await
}

/// The Lease annotation that marks a parked pause (default prefix).
const PARKED_KEY: &str = "flux-handoff.io/parked";

async fn lease(c: &Cluster) -> Lease {
    c.ns.api::<Lease>().get("flux-handoff").await.unwrap()
}

/// What the server holds that a refusal must not change: each object's resourceVersion and
/// owner annotation, the Lease holder and epoch.
async fn held(c: &Cluster) -> Vec<Value> {
    let mut v = Vec::new();
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        v.push(o["metadata"]["resourceVersion"].clone());
        v.push(Value::from(annotation(&o, OWNER_KEY)));
    }
    let l = lease(c).await.spec.unwrap();
    v.push(Value::from(l.holder_identity));
    v.push(Value::from(l.lease_transitions));
    v
}

/// SIGKILLs the run (no cleanup runs), then ends its command.
fn stop(mut r: Running) {
    r.child.kill().unwrap();
    let _ = r.child.wait();
    let _ = std::fs::remove_file(&r.marker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_holder_resume_of_a_running_run_is_refused_and_changes_nothing() {
    let c = Cluster::seeded("live-holder").await;
    let (child, holder) = running(&c).await;
    let before = held(&c).await;
    assert!(suspended(&c.get(TARGET).await));

    let out = resume(&c, &holder, &[]).await;
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("held by {holder}, not parked")),
        "{err}"
    );
    assert!(err.contains("looks live"), "{err}");
    assert!(err.contains("fences recover"), "{err}");
    assert!(
        err.contains(&format!("resume --holder {holder} --holder-exited")),
        "{err}"
    );
    assert_eq!(
        held(&c).await,
        before,
        "the server holds exactly what it held"
    );

    stop(child);
    let out = resume(&c, &holder, &["--holder-exited"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_holder_a_parked_pause_is_resumed() {
    let c = Cluster::seeded("live-parked").await;
    let mut args = vec!["pause", "--target", TARGET];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let holder = stdout(&out).trim().to_string();

    let out = resume(&c, &holder, &[]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name}");
        assert!(!suspended(&o), "{name}");
    }
    assert_eq!(lease(&c).await.spec.unwrap().holder_identity, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_holder_exited_attestation_releases_a_live_looking_holder() {
    let c = Cluster::seeded("live-exited").await;
    let (child, holder) = running(&c).await;
    // The run is stopped without cleanup (a runner killed the job); its Lease still looks live.
    stop(child);
    let out = resume(&c, &holder, &[]).await;
    assert_eq!(code(&out), 3, "{}", stderr(&out));

    let out = resume(&c, &holder, &["--holder-exited"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name}");
        assert!(!suspended(&o), "{name}");
    }
    assert_eq!(lease(&c).await.spec.unwrap().holder_identity, None);

    // A holder that holds nothing any more: exit 0, saying so.
    let out = resume(&c, &holder, &["--holder-exited"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("{holder} holds no fence")),
        "{}",
        stderr(&out)
    );
}

/// A parked mark must not outlive its pause: park as H, resume H, then a new `run` as H (a
/// re-run of the same job with a fixed `--holder`) is live, not parked, so `resume --holder H`
/// refuses it and changes nothing (issue 18; before the fix the released Lease kept
/// `parked: H` and the live run looked parked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_holder_a_reused_holder_name_does_not_inherit_an_old_parked_mark() {
    let c = Cluster::seeded("live-reused").await;
    let holder = format!("reused-{}", testkit::random_suffix(6));
    let flags = c.handoff_flags();
    let mut args = vec!["pause", "--target", TARGET, "--holder", &holder];
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = resume(&c, &holder, &[]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let released = lease(&c).await;
    assert_eq!(released.spec.unwrap().holder_identity, None);
    assert_eq!(
        released
            .metadata
            .annotations
            .unwrap_or_default()
            .get(PARKED_KEY),
        None,
        "a released Lease is not parked"
    );

    let (child, running_holder) = running_as(&c, &["--holder", &holder]).await;
    assert_eq!(running_holder, holder);
    let before = held(&c).await;
    let out = resume(&c, &holder, &[]).await;
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("looks live"), "{}", stderr(&out));
    assert_eq!(
        held(&c).await,
        before,
        "the server holds exactly what it held"
    );
    assert!(
        suspended(&c.get(TARGET).await),
        "the live run's pause stays"
    );

    stop(child);
    let out = resume(&c, &holder, &["--holder-exited"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}
