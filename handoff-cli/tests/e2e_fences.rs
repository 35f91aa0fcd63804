//! End to end: `fences`, `fences release`, `fences recover` against a pause left behind (a
//! `pause` never resumed leaves its fences and the Lease held, as a killed run does).

mod common;
mod sa;

use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::Value;

/// Pauses the seeded tree and leaves it paused; returns the holder.
async fn pause_and_leave(c: &Cluster, extra: &[&str]) -> String {
    let flags = c.handoff_flags();
    let mut args: Vec<&str> = extra.to_vec();
    args.extend(["pause", "--target", TARGET]);
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out).trim().to_string()
}

fn lease_flag(c: &Cluster) -> String {
    format!("{}/flux-handoff", c.ns.name)
}

async fn fences(c: &Cluster, extra: &[&str]) -> std::process::Output {
    let lease = lease_flag(c);
    let mut args = vec!["fences", "--lease", lease.as_str()];
    args.extend(extra);
    c.run(&args).await
}

fn rv(obj: &Value) -> Value {
    obj["metadata"]["resourceVersion"].clone()
}

async fn lease(c: &Cluster) -> Lease {
    c.ns.api::<Lease>().get("flux-handoff").await.unwrap()
}

/// Polls (bounded) until the Lease's renewTime + duration lies in the past by the server's
/// record, so its holder's renew has provably stopped.
async fn await_lease_expiry(c: &Cluster) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let l = lease(c).await;
        let spec = l.spec.unwrap();
        let renewed = spec.renew_time.unwrap().0;
        let secs = i64::from(spec.lease_duration_seconds.unwrap());
        let expiry = renewed
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(secs))
            .unwrap();
        if k8s_openapi::jiff::Timestamp::now() > expiry {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn write_config(text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("fh-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("flux-handoff.toml");
    std::fs::write(&cfg, text).unwrap();
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_lists_a_pause_left_behind_with_holder_liveness_and_release_commands() {
    let c = Cluster::seeded("fences-list").await;
    let holder = pause_and_leave(&c, &[]).await;
    let out = fences(&c, &[]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let table = stdout(&out);
    let ns = &c.ns.name;
    assert!(table.contains(&format!("held by {holder}")), "{table}");
    assert!(
        table.contains("OBJECT") && table.contains("STATE"),
        "{table}"
    );
    assert!(table.contains(&format!("ks/{ns}/{TARGET}")), "{table}");
    let target_row = table
        .lines()
        .find(|l| l.starts_with(&format!("ks/{ns}/{TARGET} ")))
        .unwrap();
    assert!(target_row.ends_with("PAUSED"), "{table}");
    assert!(
        table.lines().next().unwrap().ends_with("PAUSED"),
        "the Lease line: {table}"
    );
    assert!(
        table.contains(&format!(
            "release:  flux-handoff fences release ks/{ns}/{TARGET} --holder {holder}"
        )),
        "{table}"
    );
    // The parent's release is withheld while its child is held, and says why.
    assert!(
        table.contains(&format!(
            "withheld: a parent whose child is still held by {holder}: release ks/{ns}/{TARGET} first"
        )),
        "{table}"
    );
    assert!(
        !table.contains(&format!("fences release ks/{ns}/{PARENT} ")),
        "{table}"
    );
    let resume = format!("resume --holder {holder}");
    let args: Vec<String> = resume
        .split(' ')
        .map(String::from)
        .chain(c.handoff_flags())
        .collect();
    let out = c
        .run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_release_clears_a_left_fence_and_restores_the_pre_pause_state() {
    let c = Cluster::seeded("fences-release").await;
    let before_t = c.get(TARGET).await;
    let before_p = c.get(PARENT).await;
    let holder = pause_and_leave(&c, &[]).await;
    let ns = c.ns.name.clone();
    let t = format!("ks/{ns}/{TARGET}");
    let out = fences(&c, &["release", &t, "--holder", &holder]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("observed: {t} fenced by {holder};")),
        "{err}"
    );
    assert!(err.contains("patch: [{\"op\":\"test\""), "{err}");
    assert!(err.contains(&format!("released: {t}")), "{err}");
    let p = format!("ks/{ns}/{PARENT}");
    let out = fences(&c, &["release", &p, "--holder", &holder]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    for (name, before) in [(TARGET, before_t), (PARENT, before_p)] {
        let after = c.get(name).await;
        assert_eq!(after["spec"], before["spec"], "{name} spec restored");
        assert_eq!(
            after["metadata"]["annotations"], before["metadata"]["annotations"],
            "{name} annotations restored"
        );
    }
    // Nothing is listed any more; the Lease is still held and says how to release it.
    let out = fences(&c, &[]).await;
    assert_eq!(code(&out), 0);
    assert!(
        stdout(&out).contains(&format!("no fences in namespace(s) {ns}")),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains(&format!("flux-handoff resume --holder {holder}")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_is_refused_for_another_holder_and_for_a_parent_while_its_child_is_held() {
    let c = Cluster::seeded("fences-refuse").await;
    let holder = pause_and_leave(&c, &[]).await;
    let ns = c.ns.name.clone();
    let (t_rv, p_rv) = (rv(&c.get(TARGET).await), rv(&c.get(PARENT).await));

    let t = format!("ks/{ns}/{TARGET}");
    let out = fences(
        &c,
        &["release", &t, "--holder", "local-someone-else-1-abcdef"],
    )
    .await;
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "is fenced by {holder}, not local-someone-else-1-abcdef"
        )),
        "{}",
        stderr(&out)
    );

    let p = format!("ks/{ns}/{PARENT}");
    let out = fences(&c, &["release", &p, "--holder", &holder]).await;
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "child is still held by {holder}: release {t} first"
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
    // Nothing moved on the server.
    assert_eq!(rv(&c.get(TARGET).await), t_rv);
    assert_eq!(rv(&c.get(PARENT).await), p_rv);
    assert!(
        annotation(&c.get(PARENT).await, OWNER_KEY)
            .unwrap()
            .starts_with(&holder)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_output_json_is_one_document_with_lease_and_fences() {
    let c = Cluster::seeded("fences-json").await;
    let holder = pause_and_leave(&c, &[]).await;
    let out = fences(&c, &["--output", "json"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let doc: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(doc["command"], "fences");
    assert_eq!(doc["exit_code"], 0);
    let facts = &doc["facts"];
    assert_eq!(facts["lease"]["holder"], Value::String(holder.clone()));
    assert_eq!(facts["lease"]["expired"], false);
    let fences = facts["fences"].as_array().unwrap();
    assert_eq!(fences.len(), 2, "{fences:?}");
    let target = fences.iter().find(|f| f["name"] == TARGET).unwrap();
    assert_eq!(target["holder"], Value::String(holder.clone()));
    assert_eq!(target["role"], "target");
    assert_eq!(
        target["liveness"], "PAUSED",
        "a deliberate pause is not an orphan"
    );
    assert_eq!(target["release_patch"][0]["op"], "test");
    let parent = fences.iter().find(|f| f["name"] == PARENT).unwrap();
    assert_eq!(parent["release_command"], Value::Null);
    assert!(
        parent["withheld"]
            .as_str()
            .unwrap()
            .contains("child is still held")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_include_paused_dry_run_changes_nothing_and_yes_releases_an_expired_pause() {
    let c = Cluster::seeded("fences-recover").await;
    let before_t = c.get(TARGET).await;
    let cfg = write_config("[lease]\nduration = \"2s\"\n");
    let cfg_s = cfg.to_str().unwrap();
    let holder = pause_and_leave(&c, &["--config", cfg_s]).await;
    await_lease_expiry(&c).await;
    let (t_rv, p_rv) = (rv(&c.get(TARGET).await), rv(&c.get(PARENT).await));
    let lease_rv = lease(&c).await.metadata.resource_version;

    let out = fences(&c, &["--config", cfg_s, "recover", "--include-paused"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let ns = &c.ns.name;
    assert!(
        err.contains(&format!(
            "would release: ks/{ns}/{TARGET} (holder {holder}: a deliberate pause, released on request"
        )),
        "{err}"
    );
    assert!(err.contains("dry run: nothing changed"), "{err}");
    // The target is listed before its parent (bottom-up).
    assert!(
        err.find(TARGET.to_string().as_str()).unwrap()
            < err.find(&format!("ks/{ns}/{PARENT} ")).unwrap(),
        "{err}"
    );
    assert_eq!(rv(&c.get(TARGET).await), t_rv);
    assert_eq!(rv(&c.get(PARENT).await), p_rv);
    assert_eq!(lease(&c).await.metadata.resource_version, lease_rv);

    let out = fences(
        &c,
        &["--config", cfg_s, "recover", "--yes", "--include-paused"],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let after = c.get(TARGET).await;
    assert_eq!(after["spec"], before_t["spec"]);
    assert_eq!(
        after["metadata"]["annotations"],
        before_t["metadata"]["annotations"]
    );
    assert_eq!(annotation(&c.get(PARENT).await, OWNER_KEY), None);
    assert!(!suspended(&c.get(PARENT).await));
    let l = lease(&c).await.spec.unwrap();
    assert_eq!(l.holder_identity, None, "lease cleared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_keeps_a_deliberate_pause_and_says_how_to_resume_it() {
    let c = Cluster::seeded("fences-paused").await;
    let cfg = write_config("[lease]\nduration = \"2s\"\n");
    let cfg_s = cfg.to_str().unwrap();
    let holder = pause_and_leave(&c, &["--config", cfg_s]).await;
    // Even once its Lease has expired, a parked pause is no evidence of a crashed run.
    await_lease_expiry(&c).await;
    let (t_rv, p_rv) = (rv(&c.get(TARGET).await), rv(&c.get(PARENT).await));
    let out = fences(&c, &["--config", cfg_s, "recover", "--yes"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "keep: ks/{}/{TARGET}: {holder} paused on purpose by `flux-handoff pause`",
            c.ns.name
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("flux-handoff resume --holder {holder}")),
        "{err}"
    );
    assert_eq!(rv(&c.get(TARGET).await), t_rv);
    assert_eq!(rv(&c.get(PARENT).await), p_rv);
    assert_eq!(
        lease(&c).await.spec.unwrap().holder_identity,
        Some(holder.clone())
    );
    let resume = format!("resume --holder {holder}");
    let args: Vec<String> = ["--config", cfg_s]
        .into_iter()
        .map(String::from)
        .chain(resume.split(' ').map(String::from))
        .chain(c.handoff_flags())
        .collect();
    let out = c
        .run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_exits_6_with_one_line_when_listing_is_forbidden() {
    let c = Cluster::seeded("fences-forbid").await;
    let kc = sa::kubeconfig_for(&c.ns, "nobody").await;
    let lease = lease_flag(&c);
    let out = sa::run_as(&c, &kc, &["fences", "--lease", lease.as_str()]).await;
    assert_eq!(code(&out), 6, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("forbidden to list kustomizations"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_lists_what_a_run_killed_with_sigkill_left_behind() {
    let c = Cluster::seeded("fences-kill").await;
    let flags = c.handoff_flags();
    let marker = std::env::temp_dir().join(format!("fh-mark-{}", testkit::random_suffix(6)));
    let script = format!("touch {} && sleep 60", marker.display());
    let mut cmd = c.cli();
    cmd.args(["run", "--target", TARGET]);
    cmd.args(&flags);
    cmd.args(["--", "sh", "-c", &script]);
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_mins(1);
    while !marker.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command never started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // While the run is alive its heartbeat renews the Lease: recover keeps everything.
    let out = fences(&c, &["recover", "--yes"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is live: holder has the Lease, renewed"),
        "{}",
        stderr(&out)
    );
    assert!(suspended(&c.get(TARGET).await));
    child.kill().unwrap(); // SIGKILL: no cleanup runs
    let _ = child.wait();
    let holder = fence_holder(&c.get(TARGET).await).unwrap().to_string();
    let out = fences(&c, &[]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!(
            "fences release ks/{}/{TARGET} --holder {holder}",
            c.ns.name
        )),
        "{}",
        stdout(&out)
    );
    // The run was killed, so this caller knows its process has exited: it says so.
    let resume = format!("resume --holder {holder} --holder-exited");
    let args: Vec<String> = resume
        .split(' ')
        .map(String::from)
        .chain(c.handoff_flags())
        .collect();
    let out = c
        .run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!suspended(&c.get(TARGET).await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_a_killed_run_watches_the_lease_then_releases_children_first_and_the_lease() {
    let c = Cluster::seeded("fences-watch").await;
    // 11 s: long enough for one progress line (about every 10 s of the watch).
    let cfg = write_config("[lease]\nduration = \"11s\"\n");
    let cfg_s = cfg.to_str().unwrap();
    let marker = std::env::temp_dir().join(format!("fh-mark-{}", testkit::random_suffix(6)));
    let path = marker.display();
    let script = format!("touch {path} && while [ -e {path} ]; do sleep 0.2; done");
    let mut cmd = c.cli();
    cmd.args(["--config", cfg_s, "run", "--target", TARGET]);
    cmd.args(c.handoff_flags());
    cmd.args(["--", "sh", "-c", &script]);
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_mins(1);
    while !marker.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command never started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child.kill().unwrap(); // SIGKILL: no cleanup runs
    let _ = child.wait();
    std::fs::remove_file(&marker).unwrap(); // ends the command
    let holder = lease(&c).await.spec.unwrap().holder_identity.unwrap();
    let epoch = lease(&c).await.spec.unwrap().lease_transitions.unwrap();

    let out = fences(&c, &["--config", cfg_s, "recover", "--yes"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let ns = &c.ns.name;
    assert!(
        err.contains(&format!(
            "watching lease {ns}/flux-handoff (holder {holder}, resourceVersion "
        )),
        "{err}"
    );
    assert!(err.contains("s of 11s"), "{err}");
    assert!(
        err.contains(&format!(
            "release: ks/{ns}/{TARGET} (holder {holder}: lease unchanged"
        )),
        "{err}"
    );
    let (at_target, at_parent) = (
        err.find(&format!("released: ks/{ns}/{TARGET}"))
            .expect(&err),
        err.find(&format!("released: ks/{ns}/{PARENT}"))
            .expect(&err),
    );
    assert!(at_target < at_parent, "children before parents: {err}");
    assert!(
        err.contains(&format!("lease cleared: {ns}/flux-handoff")),
        "{err}"
    );
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name}");
        assert!(!suspended(&o), "{name}");
    }
    let l = lease(&c).await.spec.unwrap();
    assert_eq!(l.holder_identity, None);
    assert_eq!(
        l.lease_transitions,
        Some(epoch + 1),
        "taken over, then released"
    );
}

/// A wall clock `by` off the system clock.
#[derive(Debug)]
struct SkewedClock(k8s_openapi::jiff::SignedDuration);

impl flux_fence::Clock for SkewedClock {
    fn now(&self) -> k8s_openapi::jiff::Timestamp {
        k8s_openapi::jiff::Timestamp::now()
            .checked_add(self.0)
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_keeps_a_live_session_whose_renew_times_lag_the_recovering_clock_by_50s() {
    use std::sync::Arc;

    use flux_fence::outcome::AcquireOutcome;
    use flux_fence::{AnnotationKeys, Fencer, Holder, LeaseAcquire, LeaseConfig};

    let c = Cluster::seeded("fences-skew").await;
    // A live session renewing every 500 ms within a 3 s duration, on a machine whose clock
    // runs 50 s behind the recovering one (the same as the recovering clock 50 s ahead): by
    // the recovering wall clock its Lease expired long ago.
    let cfg = LeaseConfig::new(c.ns.name.clone(), "flux-handoff")
        .with_duration(Duration::from_secs(3))
        .with_renew_every(Duration::from_millis(500));
    let clock = Arc::new(SkewedClock(k8s_openapi::jiff::SignedDuration::from_secs(
        -50,
    )));
    let holder = Holder::local("skewed", std::process::id());
    let LeaseAcquire::Acquired(session) =
        flux_fence::Lease::acquire(c.ns.client.clone(), cfg, holder.clone(), clock.clone())
            .await
            .unwrap()
    else {
        panic!("lease")
    };
    let fencer = Fencer::new(
        c.ns.client.clone(),
        AnnotationKeys::default(),
        session.owner(),
    )
    .with_clock(clock)
    .with_lease(session.handle());
    let target = flux_suspend::object::kustomization(&c.ns.name, TARGET);
    let marks = vec![
        flux_fence::Mark::field("/spec/suspend", serde_json::json!(true)).exclusive(),
        flux_fence::Mark::annotation("kustomize.toolkit.fluxcd.io/reconcile", "disabled"),
    ];
    let AcquireOutcome::Acquired(guard) = fencer.acquire(&target, marks, None).await.unwrap()
    else {
        panic!("fence")
    };
    let out = fences(&c, &["recover", "--yes", "--include-paused"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "keep: ks/{}/{TARGET}: {holder} is live: holder has the Lease, renewed while watched",
            c.ns.name
        )),
        "{err}"
    );
    let after = c.get(TARGET).await;
    assert_eq!(
        annotation(&after, OWNER_KEY),
        Some(session.owner().to_string().as_str()),
        "nothing released"
    );
    assert!(suspended(&after));
    assert_eq!(
        lease(&c).await.spec.unwrap().holder_identity,
        Some(holder.to_string())
    );
    session
        .assert()
        .await
        .expect("the session still holds its Lease");
    let released = fencer.release(guard).await.unwrap();
    assert!(
        matches!(
            released,
            flux_fence::outcome::ReleaseOutcome::Released { .. }
        ),
        "{released:?}"
    );
    let lease_release = session.release().await.unwrap();
    assert_eq!(lease_release, flux_fence::lease::LeaseRelease::Released);
}
