//! End to end: a merge-queue `run` killed with SIGKILL in a CI-shaped environment
//! (`GITHUB_RUN_ID`, `GITHUB_RUN_ATTEMPT`) leaves its Lease and fences; the next
//! `run --recover-finished-runs` refuses (exit 3, nothing changed) while GitHub — a local stub
//! of its REST API — reports the attempt `in_progress`, and recovers it then proceeds once it
//! reports `completed`. `fences recover --evidence github` does the same on its own. The token
//! never appears in output, the step summary, annotations or Events.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;
use serde_json::Value;
use testkit::github_stub::{Answer, GithubStub};

const REPO: &str = "acme/deploy";
const TOKEN: &str = "ghs_e2eTokenThatMustNeverShow0123456789";
const KILLED_RUN: u64 = 4711;

/// CI-shaped environment of run `run`, attempt 1, asking the stub.
fn ci_env(cmd: &mut std::process::Command, stub: &GithubStub, run: u64, dir: &Path) {
    common::as_ci_run(cmd, &stub.url, REPO, run, TOKEN);
    cmd.env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", dir.join("summary.md"))
        .env("GITHUB_OUTPUT", dir.join("output"));
}

fn temp_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("fh-ci-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&d).unwrap();
    // The runner creates these files fresh for each step; flux-handoff only appends.
    for f in ["summary.md", "output"] {
        std::fs::write(d.join(f), "").unwrap();
    }
    d
}

/// Starts a CI `run` whose command waits on a marker; returns it and its holder once its
/// command runs.
async fn running(c: &Cluster, stub: &GithubStub, dir: &Path) -> (Child, PathBuf, String) {
    let marker = dir.join("marker");
    let m = marker.display();
    let mut cmd = c.cli();
    ci_env(&mut cmd, stub, KILLED_RUN, dir);
    cmd.args(["run", "--target", TARGET]);
    cmd.args(c.handoff_flags());
    cmd.args([
        "--",
        "sh",
        "-c",
        &format!("touch {m} && while [ -e {m} ]; do sleep 0.2; done"),
    ]);
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
    (child, marker, holder)
}

async fn cli(c: &Cluster, stub: &GithubStub, dir: &Path, args: &[&str]) -> Output {
    let mut cmd = c.cli();
    ci_env(&mut cmd, stub, KILLED_RUN + 1, dir);
    cmd.args(args);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

async fn held(c: &Cluster) -> Vec<Value> {
    let mut v = Vec::new();
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        v.push(o["metadata"]["resourceVersion"].clone());
        v.push(Value::from(annotation(&o, OWNER_KEY)));
    }
    let l =
        c.ns.api::<Lease>()
            .get("flux-handoff")
            .await
            .unwrap()
            .spec
            .unwrap();
    v.push(Value::from(l.holder_identity));
    v
}

/// The token is nowhere: outputs, files the runner reads, Events, annotations.
async fn assert_no_token(c: &Cluster, outs: &[&Output], dir: &Path) {
    for o in outs {
        assert!(!stdout(o).contains(TOKEN) && !stderr(o).contains(TOKEN));
    }
    for f in ["summary.md", "output"] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        assert!(!text.contains(TOKEN), "{f}: {text}");
    }
    let events =
        c.ns.api::<Event>()
            .list(&kube::api::ListParams::default())
            .await
            .unwrap();
    for e in events {
        assert!(!e.message.unwrap_or_default().contains(TOKEN));
    }
    for name in [PARENT, TARGET] {
        assert!(!c.get(name).await.to_string().contains(TOKEN));
    }
}

async fn recovered_events(c: &Cluster) -> Vec<String> {
    c.ns.api::<Event>()
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(flux_fence::events::REASON_RECOVERED))
        .filter_map(|e| e.message)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_liveness_a_killed_run_is_recovered_by_the_next_run_only_once_completed() {
    let c = Cluster::seeded("ci-e2e-run").await;
    let dir = temp_dir();
    let stub = GithubStub::start().await.unwrap();
    let (mut child, marker, holder) = running(&c, &stub, &dir).await;
    assert!(
        holder.starts_with(&format!("gh{KILLED_RUN}.1-")),
        "{holder}"
    );
    child.kill().unwrap(); // SIGKILL: no cleanup runs
    let _ = child.wait();
    let _ = std::fs::remove_file(&marker);
    let before = held(&c).await;

    // 1. GitHub says the killed attempt still runs (its runner has not noticed yet): refused.
    stub.script(
        REPO,
        KILLED_RUN,
        1,
        vec![Answer::run(REPO, KILLED_RUN, 1, Some("in_progress"))],
    );
    let mut args = vec!["run", "--recover-finished-runs", "--target", TARGET];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    args.extend(["--", "true"]);
    let refused = cli(&c, &stub, &dir, &args).await;
    eprintln!("--- while in_progress:\n{}", stderr(&refused));
    assert_eq!(code(&refused), 3, "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(
        err.contains(&format!("held by {holder}, not proved finished")),
        "{err}"
    );
    assert!(err.contains("is in_progress"), "{err}");
    assert_eq!(
        held(&c).await,
        before,
        "the server holds exactly what it held"
    );

    // 2. GitHub says it completed: the next run recovers it, then does its own work.
    stub.script(
        REPO,
        KILLED_RUN,
        1,
        vec![Answer::run(REPO, KILLED_RUN, 1, Some("completed"))],
    );
    let done = cli(&c, &stub, &dir, &args).await;
    eprintln!("--- once completed:\n{}", stderr(&done));
    assert_eq!(code(&done), 0, "{}", stderr(&done));
    let err = stderr(&done);
    assert!(
        err.contains(&format!(
            "recovered: lease {}/flux-handoff from finished run holder {holder}",
            c.ns.name
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "GitHub run {KILLED_RUN} attempt 1 in {REPO} is completed"
        )),
        "{err}"
    );
    let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(
        summary.contains("recovered:") && summary.contains("is completed"),
        "{summary}"
    );
    let events = recovered_events(&c).await;
    assert!(
        events
            .iter()
            .any(|m| m.contains(&holder) && m.contains("is completed")),
        "{events:?}"
    );
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name}");
        assert!(!suspended(&o), "{name}");
    }
    let l =
        c.ns.api::<Lease>()
            .get("flux-handoff")
            .await
            .unwrap()
            .spec
            .unwrap();
    assert_eq!(l.holder_identity, None);
    for s in stub.seen() {
        assert_eq!(
            s.path,
            format!("/repos/{REPO}/actions/runs/{KILLED_RUN}/attempts/1")
        );
    }
    assert_no_token(&c, &[&refused, &done], &dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_liveness_fences_recover_evidence_github_refuses_then_recovers() {
    let c = Cluster::seeded("ci-e2e-fences").await;
    let dir = temp_dir();
    let stub = GithubStub::start().await.unwrap();
    let (mut child, marker, holder) = running(&c, &stub, &dir).await;
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_file(&marker);
    let before = held(&c).await;
    let lease = format!("{}/flux-handoff", c.ns.name);
    let args = [
        "fences",
        "recover",
        "--evidence",
        "github",
        "--yes",
        "--lease",
        &lease,
    ];

    stub.script(REPO, KILLED_RUN, 1, vec![Answer::error(404)]);
    let refused = cli(&c, &stub, &dir, &args).await;
    assert_eq!(code(&refused), 3, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("was not found (404"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(held(&c).await, before);

    stub.script(
        REPO,
        KILLED_RUN,
        1,
        vec![Answer::run(REPO, KILLED_RUN, 1, Some("completed"))],
    );
    let done = cli(&c, &stub, &dir, &args).await;
    assert_eq!(code(&done), 0, "{}", stderr(&done));
    for name in [PARENT, TARGET] {
        assert_eq!(annotation(&c.get(name).await, OWNER_KEY), None, "{name}");
    }
    assert!(
        recovered_events(&c)
            .await
            .iter()
            .any(|m| m.contains(&holder))
    );
    assert_no_token(&c, &[&refused, &done], &dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_liveness_pause_recovers_a_finished_run_then_parks_its_own_pause() {
    let c = Cluster::seeded("ci-e2e-pause").await;
    let dir = temp_dir();
    let stub = GithubStub::start().await.unwrap();
    let (mut child, marker, holder) = running(&c, &stub, &dir).await;
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_file(&marker);
    stub.script(
        REPO,
        KILLED_RUN,
        1,
        vec![Answer::run(REPO, KILLED_RUN, 1, Some("completed"))],
    );

    let mut args = vec!["pause", "--recover-finished-runs", "--target", TARGET];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = cli(&c, &stub, &dir, &args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("from finished run holder {holder}")),
        "{}",
        stderr(&out)
    );
    let ours = format!("gh{}.1-", KILLED_RUN + 1);
    let owner = annotation(&c.get(TARGET).await, OWNER_KEY)
        .unwrap()
        .to_string();
    assert!(
        owner.starts_with(&ours),
        "the new pause holds the target: {owner}"
    );
    assert_no_token(&c, &[&out], &dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_liveness_a_chain_fence_of_a_run_without_the_lease_is_recovered_only_once_completed() {
    let c = Cluster::seeded("ci-e2e-orphan").await;
    let dir = temp_dir();
    let stub = GithubStub::start().await.unwrap();
    let (mut child, marker, holder) = running(&c, &stub, &dir).await;
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_file(&marker);
    // Someone deleted the Lease: the killed run's fences are left without it.
    c.ns.api::<Lease>()
        .delete("flux-handoff", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    let before: Vec<Value> = {
        let mut v = Vec::new();
        for name in [PARENT, TARGET] {
            v.push(c.get(name).await["metadata"]["resourceVersion"].clone());
        }
        v
    };

    stub.script(
        REPO,
        KILLED_RUN,
        1,
        vec![Answer::run(REPO, KILLED_RUN, 1, Some("in_progress"))],
    );
    let mut args = vec!["run", "--recover-finished-runs", "--target", TARGET];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    args.extend(["--", "true"]);
    let refused = cli(&c, &stub, &dir, &args).await;
    assert_eq!(code(&refused), 3, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains(&format!("fenced by {holder}")),
        "{}",
        stderr(&refused)
    );
    for (name, rv) in [PARENT, TARGET].iter().zip(&before) {
        assert_eq!(
            &c.get(name).await["metadata"]["resourceVersion"],
            rv,
            "{name}"
        );
    }

    stub.script(
        REPO,
        KILLED_RUN,
        1,
        vec![Answer::run(REPO, KILLED_RUN, 1, Some("completed"))],
    );
    let done = cli(&c, &stub, &dir, &args).await;
    assert_eq!(code(&done), 0, "{}", stderr(&done));
    assert!(
        stderr(&done).contains(&format!(
            "recovered: Kustomization {}/{TARGET} from finished run holder {holder}",
            c.ns.name
        )),
        "{}",
        stderr(&done)
    );
    for name in [PARENT, TARGET] {
        assert_eq!(annotation(&c.get(name).await, OWNER_KEY), None, "{name}");
    }
    assert_no_token(&c, &[&refused, &done], &dir).await;
}
