//! End to end: nothing shortens the wait for a live holder. GitHub can report a run's attempt
//! `completed` while its job still works (its runner lost GitHub but not the cluster): while
//! that run renews its Lease, `fences recover --evidence github --yes` must not take over,
//! however sure GitHub is. Nor may a person's edit of `leaseDurationSeconds`: recovery waits
//! for the holder's own duration.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
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

/// The Lease's `resourceVersion`, holder and `leaseDurationSeconds` as the server has them.
async fn lease_facts(c: &Cluster) -> (String, Option<String>, Option<i32>, Option<String>) {
    let l = c.ns.api::<Lease>().get("flux-handoff").await.unwrap();
    let spec = l.spec.unwrap_or_default();
    let recorded = l
        .metadata
        .annotations
        .and_then(|mut a| a.remove("flux-handoff.io/duration"));
    (
        l.metadata.resource_version.unwrap_or_default(),
        spec.holder_identity,
        spec.lease_duration_seconds,
        recorded,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_takeover_a_shortened_lease_duration_does_not_shorten_recoverys_wait() {
    let c = Cluster::seeded("ci-takeover-dur").await;
    let dir = std::env::temp_dir().join(format!("fh-cid-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("flux-handoff.toml");
    // 40 s: the holder renews every 10 s.
    std::fs::write(&cfg, "[lease]\nduration = \"40s\"\n").unwrap();
    let marker = dir.join("marker");
    let m = marker.display();
    let mut cmd = c.cli();
    cmd.arg("--config").arg(&cfg);
    cmd.args(["run", "--target", TARGET])
        .args(c.handoff_flags())
        .args(["--", "sh", "-c"])
        .arg(format!("touch {m} && while [ -e {m} ]; do sleep 0.1; done"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut run = cmd.spawn().unwrap();
    wait_for_file(&marker, "the command to start").await;
    let owner = annotation(&c.get(TARGET).await, OWNER_KEY)
        .unwrap()
        .to_string();
    let holder = owner.split(';').next().unwrap().to_string();
    assert_eq!(lease_facts(&c).await.2, Some(40));

    // Right after a renewal (the next one is 10 s away), a person shortens the duration "to
    // speed up recovery": a CAS of their own, under their own field manager.
    let (seen, ..) = lease_facts(&c).await;
    let give_up = tokio::time::Instant::now() + Duration::from_mins(1);
    while lease_facts(&c).await.0 == seen {
        assert!(
            tokio::time::Instant::now() < give_up,
            "the run never renewed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let api = c.ns.api::<Lease>();
    let person = PostParams {
        field_manager: Some("a-person".into()),
        ..PostParams::default()
    };
    loop {
        let mut l = api.get("flux-handoff").await.unwrap();
        l.spec.as_mut().unwrap().lease_duration_seconds = Some(2);
        match api.replace("flux-handoff", &person, &l).await {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("the edit failed: {e}"),
        }
    }

    let lease = format!("{}/flux-handoff", c.ns.name);
    let mut rec = c.cli();
    rec.args(["fences", "recover", "--yes", "--lease", &lease]);
    let out = tokio::task::spawn_blocking(move || rec.output().unwrap())
        .await
        .unwrap();
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert!(err.contains("is live"), "{err}");
    assert!(
        run.try_wait().unwrap().is_none(),
        "the live run was ended: {err}"
    );
    for name in [PARENT, TARGET] {
        assert_eq!(
            annotation(&c.get(name).await, OWNER_KEY),
            Some(owner.as_str()),
            "{name} was taken from the live run: {err}"
        );
    }
    // Still the run's, and its own duration is back on the Lease.
    let (_, now_holder, secs, recorded) = lease_facts(&c).await;
    assert_eq!(now_holder.as_deref(), Some(holder.as_str()), "{err}");
    assert_eq!((secs, recorded.as_deref()), (Some(40), Some("40")), "{err}");

    std::fs::remove_file(&marker).unwrap();
    let out = tokio::task::spawn_blocking(move || run.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (_, after, ..) = lease_facts(&c).await;
    assert_eq!(after, None, "the run's Lease is still held after it ended");
    let _ = std::fs::remove_dir_all(&dir);
}
