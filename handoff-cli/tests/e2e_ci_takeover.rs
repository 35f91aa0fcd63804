//! End to end: CI evidence never shortens the wait. GitHub can report a run's attempt
//! `completed` while its job still works (its runner lost GitHub but not the cluster): while
//! that run renews its Lease, `fences recover --evidence github --yes` must not take over,
//! however sure GitHub is.

mod common;

use std::process::Stdio;

use common::*;
use testkit::github_stub::{Answer, GithubStub};

const REPO: &str = "acme/deploy";
const RUN: u64 = 5150;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_takeover_a_completed_report_while_the_holder_renews_takes_nothing_over() {
    let c = Cluster::seeded("ci-takeover").await;
    let stub = GithubStub::start().await.unwrap();
    let dir = std::env::temp_dir().join(format!("fh-cit-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("marker");
    let m = marker.display();
    let ci = |cmd: &mut std::process::Command, run: u64| {
        cmd.env("GITHUB_RUN_ID", run.to_string());
        cmd.env("GITHUB_RUN_ATTEMPT", "1")
            .env("GITHUB_REPOSITORY", REPO)
            .env("GITHUB_API_URL", &stub.url)
            .env("GITHUB_TOKEN", "ghs_takeoverTokenNeverShown0123456789");
    };
    let mut cmd = c.cli();
    ci(&mut cmd, RUN);
    cmd.args(["run", "--target", TARGET])
        .args(c.handoff_flags())
        .args(["--", "sh", "-c"])
        .arg(format!("touch {m} && while [ -e {m} ]; do sleep 0.1; done"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut run = cmd.spawn().unwrap();
    wait_for_file(&marker, "the command to start").await;
    let holder = annotation(&c.get(TARGET).await, OWNER_KEY)
        .unwrap()
        .to_string();

    stub.script(
        REPO,
        RUN,
        1,
        vec![Answer::run(REPO, RUN, 1, Some("completed"))],
    );
    let lease = format!("{}/flux-handoff", c.ns.name);
    let mut rec = c.cli();
    ci(&mut rec, RUN + 1);
    rec.args([
        "fences",
        "recover",
        "--evidence",
        "github",
        "--yes",
        "--lease",
        &lease,
    ]);
    let out = tokio::task::spawn_blocking(move || rec.output().unwrap())
        .await
        .unwrap();
    let err = stderr(&out);
    // Kept, not failed: recover exits 0 listing what it kept and why.
    assert_eq!(code(&out), 0, "{err}");
    assert!(err.contains("is live"), "{err}");
    assert!(
        run.try_wait().unwrap().is_none(),
        "the live run was ended: {err}"
    );
    for name in [PARENT, TARGET] {
        assert_eq!(
            annotation(&c.get(name).await, OWNER_KEY),
            Some(holder.as_str()),
            "{name} was taken from the live run: {err}"
        );
    }

    std::fs::remove_file(&marker).unwrap();
    let out = tokio::task::spawn_blocking(move || run.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}
