//! End to end (issue 48, item 1): waiting composes with recovery. A merge-queue job that sets
//! both `--wait-lease` and `--recover-finished-runs` is queued behind a deploy job that died
//! without its post step (SIGKILL: its Lease and fences stay). Once the dead holder's Lease has
//! stood unwritten for its own duration, the waiter asks GitHub (a local stub of its REST API)
//! whether that run finished; while GitHub says `in_progress` it waits on, saying why, and once
//! GitHub says `completed` it recovers the dead run's hold and deploys — instead of waiting out
//! its budget and leaving the queue (before: exit 3 after the whole budget, GitHub asked 0
//! times).

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use testkit::github_stub::{Answer, GithubStub};

const REPO: &str = "acme/deploy";
const DEAD_RUN: u64 = 4811;

/// `cmd` as a step of GitHub run `run`, attempt 1, whose API is the stub.
fn as_ci_run(cmd: &mut std::process::Command, stub: &GithubStub, run: u64) {
    common::as_ci_run(
        cmd,
        &stub.url,
        REPO,
        run,
        "ghs_queueHealTokenNeverShown0123456789",
    );
}

fn scratch(c: &Cluster) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fh-qh-{}", c.ns.name));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Starts the deploy job that will die: `run` with a 4 s Lease (so the test waits 4 s, not
/// the default minute, for its silence), its command blocked on a marker. Returns it once its
/// command runs, with the marker to remove once it is killed.
async fn dying_job(c: &Cluster, stub: &GithubStub, dir: &Path) -> (std::process::Child, PathBuf) {
    let config = dir.join("short-lease.toml");
    std::fs::write(&config, "[lease]\nduration = \"4s\"\n").unwrap();
    let marker = dir.join("marker");
    let mut cmd = c.cli();
    as_ci_run(&mut cmd, stub, DEAD_RUN);
    cmd.arg("--config").arg(&config);
    cmd.args(["run", "--target", TARGET]);
    cmd.args(c.handoff_flags());
    let m = marker.display();
    cmd.args([
        "--",
        "sh",
        "-c",
        &format!("touch {m}; while [ -e {m} ]; do sleep 0.2; done"),
    ]);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let child = cmd.spawn().unwrap();
    wait_for_file(&marker, "the dying job's command").await;
    (child, marker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_heal_a_waiting_job_recovers_a_dead_jobs_hold_once_its_run_completed() {
    let c = Cluster::seeded("qh-dead").await;
    let dir = scratch(&c);
    let stub = GithubStub::start().await.unwrap();
    let (mut dead, marker) = dying_job(&c, &stub, &dir).await;
    let holder = fence_holder(&c.get(TARGET).await).unwrap().to_string();
    dead.kill().unwrap(); // SIGKILL: no post step, no cleanup
    let _ = dead.wait();
    let _ = std::fs::remove_file(&marker);
    // GitHub first says the dead attempt still runs (its runner has not noticed yet), then
    // that it completed.
    stub.script(
        REPO,
        DEAD_RUN,
        1,
        vec![
            Answer::run(REPO, DEAD_RUN, 1, Some("in_progress")),
            Answer::run(REPO, DEAD_RUN, 1, Some("completed")),
        ],
    );

    let mut next = c.cli();
    as_ci_run(&mut next, &stub, DEAD_RUN + 1);
    next.args([
        "run",
        "--recover-finished-runs",
        "--wait-lease",
        "2m",
        "--target",
        TARGET,
    ]);
    next.args(c.handoff_flags());
    next.args(["--", "true"]);
    let out = tokio::task::spawn_blocking(move || next.output().unwrap())
        .await
        .unwrap();
    let err = stderr(&out);
    eprintln!("--- the queued job ---\n{err}");
    assert_eq!(code(&out), 0, "{err}");
    // It asked only once the Lease had stood unwritten, waited on while the run was in
    // progress, saying why, and asked again later.
    let asked = stub.seen().len();
    assert!(asked >= 2, "GitHub asked {asked} time(s)");
    assert!(
        err.contains("not recovered:") && err.contains("in_progress"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "recovered: lease {}/flux-handoff from finished run holder {holder}",
            c.ns.name
        )),
        "{err}"
    );
    // What the server holds afterwards: nothing of either job.
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name} still fenced");
        assert!(!suspended(&o), "{name} still suspended");
    }
    let lease = c.ns.api::<Lease>().get("flux-handoff").await.unwrap();
    let held_by = lease.spec.and_then(|s| s.holder_identity);
    assert_eq!(held_by, None, "the Lease is still held");
    let _ = std::fs::remove_dir_all(&dir);
}
