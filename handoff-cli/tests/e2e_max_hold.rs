//! `max_hold_`: a pause nobody can forget (issue 38, item 4). `--max-hold` is recorded on the
//! Lease and on each fence; `fences`, `fences --overdue` and `doctor` name a pause held past
//! it with its holder, reason, age and limit; `fences --overdue --events-addr URL` posts one
//! Flux-format event per overdue pause (here to a loopback receiver standing in for
//! notification-controller); and nothing is ever resumed because the time ran out.
//!
//! "Overdue" is reached with a one-second max-hold and a bounded poll of `fences --overdue`
//! (exit 9 once a pause is past it), never a sleep.

mod common;

use std::process::{Output, Stdio};
use std::time::Duration;

use common::events::Receiver;
use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::{Value, json};

const MAX_HOLD_KEY: &str = "flux-handoff.io/max-hold";
const REASON: &str = "rotate the pull secret";
/// The bound of the poll for "overdue": far above the one-second limit.
const OVERDUE_WITHIN: Duration = Duration::from_mins(1);

/// `flux-handoff pause` under the Lease `lease` of the test's namespace with `extra` flags;
/// asserts exit 0.
async fn pause(c: &Cluster, lease: &str, holder: &str, extra: &[&str]) {
    let controller = format!("{}/kustomize-controller", c.ns.name);
    let lease = format!("{}/{lease}", c.ns.name);
    let args = [
        &["--reason", REASON, "pause", "--holder", holder][..],
        &["--lease", &lease, "--controller", &controller],
        extra,
    ]
    .concat();
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "pause {extra:?}: {}", stderr(&out));
}

/// Polls `fences --overdue ARGS` until it exits 9 (bounded); returns that run.
async fn until_overdue(c: &Cluster, args: &[&str]) -> Output {
    let give_up = tokio::time::Instant::now() + OVERDUE_WITHIN;
    loop {
        let out = c.run(&[&["fences", "--overdue"][..], args].concat()).await;
        match code(&out) {
            9 => return out,
            0 => assert!(
                tokio::time::Instant::now() < give_up,
                "never overdue: {}",
                stdout(&out)
            ),
            other => panic!("fences --overdue exited {other}: {}", stderr(&out)),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Each object still fenced by `holder` and suspended, and the Lease still parked by it.
async fn assert_still_paused(c: &Cluster, names: &[&str], holder: &str, lease: &str) {
    for name in names {
        let o = c.get(name).await;
        let owner = annotation(&o, OWNER_KEY).unwrap_or_default();
        assert!(owner.starts_with(&format!("{holder};")), "{name}: {o}");
        assert!(suspended(&o), "{name} was resumed: {o}");
    }
    let l = c.ns.api::<Lease>().get(lease).await.unwrap();
    let spec = l.spec.unwrap_or_default();
    assert_eq!(
        spec.holder_identity.as_deref(),
        Some(holder),
        "lease {lease}"
    );
    let parked = l.metadata.annotations.unwrap_or_default();
    assert_eq!(
        parked.get("flux-handoff.io/parked").map(String::as_str),
        Some(holder)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_an_overdue_pause_is_listed_by_fences_and_doctor_and_stays_paused() {
    let c = Cluster::seeded("max-hold-list").await;
    let ns = c.ns.name.clone();
    let holder = format!("mh-{}", testkit::random_suffix(6));
    pause(&c, "flux-handoff", &holder, &["--max-hold", "1s", TARGET]).await;
    // Recorded on each fence and on the Lease.
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, MAX_HOLD_KEY), Some("1s"), "{name}: {o}");
    }
    let l = c.ns.api::<Lease>().get("flux-handoff").await.unwrap();
    let recorded = l.metadata.annotations.unwrap_or_default();
    assert_eq!(recorded.get(MAX_HOLD_KEY).map(String::as_str), Some("1s"));

    let lease = format!("{ns}/flux-handoff");
    let out = until_overdue(&c, &["--lease", &lease]).await;
    let text = stdout(&out);
    let head = format!("OVERDUE pause by {holder} (epoch 1): held ");
    assert!(text.starts_with(&head), "{text}");
    for want in [
        format!(", max-hold 1s, reason: {REASON}\n"),
        format!("  fenced:   ks/{ns}/{PARENT}, ks/{ns}/{TARGET}\n"),
        format!("  resume:   flux-handoff resume --holder {holder} --lease {ns}/flux-handoff\n"),
        "1 pause(s) held past their max-hold; nothing is resumed automatically\n".into(),
    ] {
        assert!(text.contains(&want), "missing {want:?} in\n{text}");
    }
    // The whole listing says it too, on the Lease line and after the table.
    let out = c.run(&["fences", "--lease", &lease]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains(", PAUSED, max-hold 1s, OVERDUE\n"), "{text}");
    assert!(text.contains(&head), "{text}");
    // As JSON: holder, reason, age and limit.
    let out = c.run(&["-o", "json", "fences", "--overdue"]).await;
    assert_eq!(code(&out), 9, "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &doc["facts"]["overdue"][0];
    assert_eq!(p["holder"], holder.as_str(), "{doc}");
    assert_eq!(p["reason"], REASON, "{doc}");
    assert_eq!(p["max_hold"], "1s", "{doc}");
    assert!(p["age_seconds"].as_u64().is_some(), "{doc}");
    assert_eq!(doc["facts"]["overdue"].as_array().unwrap().len(), 1);
    // doctor: one check naming it.
    let controller = format!("{ns}/kustomize-controller");
    let doctor = [
        "doctor",
        "--target",
        TARGET,
        "--controller",
        &controller,
        "--lease",
        &lease,
    ];
    let out = c.run(&doctor).await;
    assert_eq!(code(&out), 6, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    let check = format!("FAIL no pause held past its max-hold in {ns}:");
    assert!(text.contains(&check), "{text}");
    assert!(
        text.contains(&format!("  pause by {holder} (epoch 1): held ")),
        "{text}"
    );
    assert_eq!(text.matches("FAIL").count(), 1, "{text}");

    // Listing and doctor resumed nothing.
    assert_still_paused(&c, &[PARENT, TARGET], &holder, "flux-handoff").await;
    // A person resumes it: the max-hold mark goes with the fence.
    let out = c
        .run(&["resume", "--holder", &holder, "--lease", &lease])
        .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, MAX_HOLD_KEY), None, "{name}: {o}");
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name}: {o}");
    }
    let out = c.run(&["fences", "--overdue"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!("no pause held past its max-hold in namespace(s) {ns}\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_fences_overdue_sends_one_alert_per_overdue_pause_to_a_loopback_receiver() {
    let c = Cluster::seeded("max-hold-alert").await;
    let ns = c.ns.name.clone();
    let late = format!("mh-late-{}", testkit::random_suffix(6));
    let fresh = format!("mh-fresh-{}", testkit::random_suffix(6));
    // Two fences, one pause, one second to hold it.
    pause(&c, "late", &late, &["--max-hold", "1s", TARGET]).await;
    // Another pause, well within its limit: no alert.
    pause(
        &c,
        "fresh",
        &fresh,
        &["--max-hold", "1h", "--parent", "none", "apps"],
    )
    .await;
    until_overdue(&c, &[]).await;
    let mut receiver = Receiver::start().await;
    let out = c
        .run(&[
            "-o",
            "json",
            "fences",
            "--overdue",
            "--events-addr",
            &receiver.url,
        ])
        .await;
    assert_eq!(code(&out), 9, "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["facts"]["events"],
        json!({ "sent": 1, "failed": 0 }),
        "{doc}"
    );
    // Each POST was answered before the command ended: everything it sent is here.
    let event = receiver.bodies.try_recv().expect("one event");
    assert!(receiver.bodies.try_recv().is_err(), "one event per pause");
    let o = &event["involvedObject"];
    assert_eq!(o["kind"], "Kustomization", "{event}");
    assert_eq!(o["namespace"], ns.as_str(), "{event}");
    assert_eq!(o["name"], TARGET, "{event}");
    assert_eq!(o["apiVersion"], "kustomize.toolkit.fluxcd.io/v1", "{event}");
    assert_eq!(event["reason"], "HandoffOverdue", "{event}");
    assert_eq!(event["severity"], "error", "{event}");
    assert_eq!(event["reportingController"], "flux-handoff", "{event}");
    assert_eq!(event["reportingInstance"], late.as_str(), "{event}");
    let message = event["message"].as_str().unwrap();
    let head = format!("pause by {late} for {REASON} overdue: held ");
    let tail = format!(", max-hold 1s; fenced: ks/{ns}/{PARENT}, ks/{ns}/{TARGET}");
    assert!(
        message.starts_with(&head) && message.ends_with(&tail),
        "{message}"
    );
    let group = "kustomize.toolkit.fluxcd.io";
    assert_eq!(
        event["metadata"],
        json!({ format!("{group}/holder"): late, format!("{group}/reason"): REASON }),
        "{event}"
    );
    // Alerting resumed nothing, neither the overdue pause nor the other one.
    assert_still_paused(&c, &[PARENT, TARGET], &late, "late").await;
    assert_still_paused(&c, &["apps"], &fresh, "fresh").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_a_run_past_its_max_hold_is_listed_and_never_stopped_or_resumed() {
    let c = Cluster::seeded("max-hold-run").await;
    let marker = std::env::temp_dir().join(format!("fh-mh-{}", testkit::random_suffix(6)));
    let m = marker.display();
    let script = format!("touch {m} && while [ -e {m} ]; do sleep 0.1; done");
    let holder = format!("mh-run-{}", testkit::random_suffix(6));
    let mut cmd = c.cli();
    cmd.args(["run", "--holder", &holder, "--max-hold", "1s", TARGET])
        .args(c.handoff_flags())
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let run = cmd.spawn().unwrap();
    wait_for_file(&marker, "the command to start").await;
    let lease = format!("{}/flux-handoff", c.ns.name);
    let out = until_overdue(&c, &["--lease", &lease]).await;
    let text = stdout(&out);
    assert!(
        text.contains(&format!("OVERDUE pause by {holder} (epoch 1): held ")),
        "{text}"
    );
    // A run still holds its Lease: no resume command is offered for it.
    assert!(
        text.contains(
            "  resume:   not parked: its run still holds the Lease and releases it when it ends\n"
        ),
        "{text}"
    );
    // Still running under its fences: time running out stopped and released nothing.
    assert!(marker.exists(), "the command was stopped");
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert!(suspended(&o), "{name} was resumed: {o}");
        let owner = annotation(&o, OWNER_KEY).unwrap_or_default();
        assert!(owner.starts_with(&format!("{holder};")), "{name}: {o}");
    }
    std::fs::remove_file(&marker).unwrap();
    let out = tokio::task::spawn_blocking(move || run.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name}: {o}");
        assert_eq!(annotation(&o, MAX_HOLD_KEY), None, "{name}: {o}");
    }
}

#[test]
fn max_hold_a_bad_max_hold_is_one_line_exit_2_before_any_request() {
    let dir = std::env::temp_dir().join(format!("fh-mh-cfg-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let zero = dir.join("zero.toml");
    std::fs::write(&zero, "[lease]\nmax_hold = \"0s\"\n").unwrap();
    let zero = zero.display().to_string();
    let cases: [(&[&str], &str); 5] = [
        (
            &["pause", "apps", "--max-hold", "0"],
            "error: --max-hold: max-hold \"0\" must be above zero (e.g. 30m, 2h); leave it out \
             for no limit",
        ),
        (
            &["run", "apps", "--max-hold", "abc", "--", "true"],
            "error: --max-hold: invalid duration \"abc\" (use e.g. 500ms, 30s, 5m, 1h)",
        ),
        (
            &["--config", &zero, "pause", "apps"],
            "error: config: lease.max_hold: max-hold \"0s\" must be above zero (e.g. 30m, 2h); \
             leave it out for no limit",
        ),
        (
            &["fences", "--overdue", "--events-addr", "http://u:p@nc/"],
            "error: --events-addr: credentials in the URL are not accepted",
        ),
        (
            &["fences", "--events-addr", "http://nc/"],
            "error: --events-addr: only with --overdue (fences sends an alert per overdue pause)",
        ),
    ];
    for (args, want) in cases {
        // A kubeconfig that does not exist: reaching the cluster would fail differently.
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_flux-handoff"))
            .env_remove("FLUX_HANDOFF_CONFIG")
            .args(["--kubeconfig", "/nonexistent/kubeconfig"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).trim(), want, "{args:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
