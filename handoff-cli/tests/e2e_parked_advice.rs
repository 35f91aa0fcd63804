//! `parked_advice_`: advice that follows liveness (issue 48, deliverable 4). A run refused by
//! a person's parked pause is told whose pause it is, why (its `--reason`), since when, and
//! the one command that ends it, `resume --holder H` — never "looks expired", never
//! `fences recover` (which keeps a parked pause), never `--include-paused` (which would
//! resume someone's maintenance). `fences --overdue` names `fences recover` only for a pause
//! recover acts on: a dead run's, whose Lease nobody renews, not "its run releases it".
//!
//! A dead run's Lease and an hour-old pause are written as such (the Lease's times set in the
//! past, its parked mark removed), so no test waits for a Lease to expire.

mod common;

use std::process::Output;
use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

const REASON: &str = "maint";
const PARKED_KEY: &str = "flux-handoff.io/parked";

/// `flux-handoff GLOBAL… --reason maint pause --holder HOLDER EXTRA… TARGET` under the
/// test's Lease; asserts exit 0.
async fn pause(c: &Cluster, global: &[&str], holder: &str, extra: &[&str], target: &str) {
    let flags = c.handoff_flags();
    let args = [
        global,
        &["--reason", REASON, "pause", "--holder", holder][..],
        &flags.iter().map(String::as_str).collect::<Vec<_>>(),
        extra,
        &[target],
    ]
    .concat();
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "pause: {}", stderr(&out));
}

/// `run infrastructure EXTRA… -- true` under the test's Lease.
async fn run(c: &Cluster, extra: &[&str]) -> Output {
    let flags = c.handoff_flags();
    let args = [
        &["run", TARGET][..],
        &flags.iter().map(String::as_str).collect::<Vec<_>>(),
        extra,
        &["--", "true"],
    ]
    .concat();
    c.run(&args).await
}

/// The Lease's times set `ago` in the past (as a holder that took it then and stopped
/// renewing would leave them); `unpark` also removes its parked mark (a run's Lease).
async fn age_lease(c: &Cluster, ago: Duration, unpark: bool) {
    let then = Timestamp::now() - SignedDuration::try_from(ago).unwrap();
    let t = then.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    let mut patch = json!({"spec": {"acquireTime": t, "renewTime": t}});
    if unpark {
        patch["metadata"] = json!({"annotations": {PARKED_KEY: null}});
    }
    c.ns.api::<Lease>()
        .patch(
            "flux-handoff",
            &PatchParams::apply("parked-advice-test"),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

/// What a refusal must leave as it was: the Lease's version, and each object's annotations
/// and `spec.suspend`.
async fn server(c: &Cluster) -> (Option<String>, Vec<Value>) {
    let lease = c.ns.api::<Lease>().get("flux-handoff").await.unwrap();
    let mut objects = Vec::new();
    for name in [PARENT, TARGET, "apps"] {
        let o = c.get(name).await;
        objects.push(json!([o["metadata"]["annotations"], o["spec"]["suspend"]]));
    }
    (lease.metadata.resource_version, objects)
}

/// The refusal of a run by `holder`'s parked pause: exit 3, one line naming the holder, the
/// reason, its age and `resume --holder H`, no recovery advice, no wait.
fn assert_names_the_pause(out: &Output, lease: &str, holder: &str, how: &str) {
    let err = stderr(out);
    assert_eq!(code(out), 3, "{how}: {err}");
    let line = err
        .lines()
        .find(|l| l.contains("parked pause"))
        .unwrap_or_else(|| panic!("{how}: no line names the parked pause:\n{err}"));
    for want in [
        format!("lease {lease}: it is held by a parked pause of {holder} since "),
        " ago)".to_string(),
        format!("reason: {REASON}"),
        format!("next: flux-handoff resume --holder {holder}"),
    ] {
        assert!(line.contains(&want), "{how}: {want:?} missing in {line:?}");
    }
    for never in [
        "fences recover",
        "--include-paused",
        "looks expired",
        "waiting for lease",
    ] {
        assert!(!err.contains(never), "{how}: {never:?} in:\n{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_advice_a_run_refused_by_a_parked_pause_names_it_and_its_resume() {
    let c = Cluster::seeded("parked-advice").await;
    let holder = format!("pa-{}", testkit::random_suffix(6));
    let lease = format!("{}/flux-handoff", c.ns.name);
    pause(&c, &[], &holder, &["--parent", "none"], "apps").await;
    let before = server(&c).await;
    for (when, aged) in [("fresh", false), ("an hour old", true)] {
        if aged {
            // A maintenance pause from an hour ago: its Lease looks expired by any clock.
            age_lease(&c, Duration::from_hours(1), false).await;
        }
        let before = if aged {
            server(&c).await
        } else {
            before.clone()
        };
        for wait in [&[][..], &["--wait-lease", "5s"]] {
            let how = format!("{when} pause, run {wait:?}");
            let out = run(&c, wait).await;
            assert_names_the_pause(&out, &lease, &holder, &how);
            if aged {
                assert!(
                    stderr(&out).contains("(1h00m ago)"),
                    "{how}: {}",
                    stderr(&out)
                );
            }
            assert_eq!(server(&c).await, before, "{how}: the server changed");
        }
    }
    // The command it names ends the pause, and the run then goes.
    let out = c
        .run(&["resume", "--holder", &holder, "--lease", &lease])
        .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(&c, &[]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// Polls `fences --overdue --lease L` until it exits 9 (a one-second max-hold: bounded).
async fn until_overdue(c: &Cluster, lease: &str) -> String {
    let give_up = tokio::time::Instant::now() + Duration::from_mins(1);
    loop {
        let out = c.run(&["fences", "--overdue", "--lease", lease]).await;
        match code(&out) {
            9 => return stdout(&out),
            0 => assert!(tokio::time::Instant::now() < give_up, "never overdue"),
            other => panic!("fences --overdue exited {other}: {}", stderr(&out)),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_advice_fences_overdue_names_recover_for_a_dead_runs_pause_and_it_acts() {
    let c = Cluster::seeded("parked-advice-dead").await;
    let ns = c.ns.name.clone();
    let lease = format!("{ns}/flux-handoff");
    let holder = format!("pa-dead-{}", testkit::random_suffix(6));
    // A two-second Lease: the recovery below watches it unwritten for that long.
    let dir = std::env::temp_dir().join(format!("fh-pa-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("short.toml");
    std::fs::write(&cfg, "[lease]\nduration = \"2s\"\n").unwrap();
    let cfg = cfg.display().to_string();
    let global = ["--config", cfg.as_str()];
    let extra = ["--max-hold", "1s", "--parent", "none"];
    pause(&c, &global, &holder, &extra, "apps").await;
    // A run that took the Lease an hour ago and died: unparked, never renewed since.
    age_lease(&c, Duration::from_hours(1), true).await;
    let text = until_overdue(&c, &lease).await;
    assert!(
        text.contains(&format!("OVERDUE pause by {holder} (epoch 1): held ")),
        "{text}"
    );
    let recover = format!(
        "  resume:   its run stopped renewing the Lease {lease} and did not park it: \
         `flux-handoff fences recover --lease {lease}` releases it once the Lease stays \
         unwritten for its full duration\n"
    );
    assert!(text.contains(&recover), "{text}");
    for never in [
        "releases it when it ends",
        "--include-paused",
        "resume --holder",
    ] {
        assert!(!text.contains(never), "{never:?} in:\n{text}");
    }
    // As JSON too, and no resume command for a run.
    let out = c
        .run(&["-o", "json", "fences", "--overdue", "--lease", &lease])
        .await;
    assert_eq!(code(&out), 9, "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &doc["facts"]["overdue"][0];
    assert_eq!(p["resume_command"], Value::Null, "{doc}");
    assert!(
        p["ends"]
            .as_str()
            .unwrap_or_default()
            .contains("fences recover"),
        "{doc}"
    );
    // What it says is true: recover acts on it (after watching the Lease unwritten).
    let out = c
        .run(&["fences", "recover", "--yes", "--lease", &lease])
        .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let o = c.get("apps").await;
    assert_eq!(annotation(&o, OWNER_KEY), None, "{o}");
    let out = c.run(&["fences", "--overdue", "--lease", &lease]).await;
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_advice_recover_keeps_a_parked_pause_without_advising_include_paused() {
    let c = Cluster::seeded("parked-advice-keep").await;
    let lease = format!("{}/flux-handoff", c.ns.name);
    let holder = format!("pa-keep-{}", testkit::random_suffix(6));
    pause(&c, &[], &holder, &["--parent", "none"], "apps").await;
    age_lease(&c, Duration::from_hours(1), false).await;
    // A dry run: a parked pause needs no watch, so it answers at once.
    let out = c.run(&["fences", "recover", "--lease", &lease]).await;
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        text.contains(&format!("only `flux-handoff resume --holder {holder}")),
        "{text}"
    );
    assert!(!text.contains("--include-paused"), "{text}");
    let o = c.get("apps").await;
    assert!(suspended(&o), "{o}");
}
