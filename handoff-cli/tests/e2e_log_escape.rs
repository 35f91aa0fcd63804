//! Every line flux-handoff prints escapes text from the cluster, its log included (issue 48,
//! item 6). A Lease holder is a string anyone who may update the Lease chooses; before, one
//! with a newline reached stderr raw through tracing's "lease lost" lines, so
//! `::error::…` and `##[add-mask]…` lines appeared — workflow commands to a GitHub Actions
//! runner — with and without `GITHUB_ACTIONS`. Now tracing's fields and messages go through
//! the one escaper (`handoff_app::render::plain`), and so does each record on its way out.
//!
//! Here a run holds the Lease and its command runs; someone writes a hostile holder onto the
//! Lease; the run loses it, stops its command and ends. Then a second run waits behind that
//! holder and gives up. No line of either, on stdout or stderr, is a workflow command the
//! hostile text made.

mod common;
#[path = "common/inert.rs"]
mod inert;

use std::process::Stdio;

use common::*;
use inert::check;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Patch, PatchParams};
use serde_json::json;

/// A newline, a workflow command, a carriage return, a `##[` command.
const EVIL: &str = "evil\n::error::x-injected\r\n##[add-mask]y-injected";

/// Runs `cmd` to its end; its stdout and stderr, one after the other.
async fn output(mut cmd: std::process::Command) -> (i32, String) {
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let all = format!("{}{}", stdout(&out), stderr(&out));
    (code(&out), all)
}

/// `github`: in GitHub Actions; `json`: the log as JSON (`--log-format json`).
async fn hostile_holder_while_a_run_holds_then_waits(github: bool, json: bool) {
    let c = Cluster::seeded(match (github, json) {
        (_, true) => "logesc-js",
        (true, false) => "logesc-gh",
        (false, false) => "logesc",
    })
    .await;
    let log_format = if json { "json" } else { "text" };
    let dir = std::env::temp_dir().join(format!("fh-logesc-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    // The runner creates these fresh for each step; flux-handoff only appends.
    for f in ["summary", "output"] {
        std::fs::write(dir.join(f), "").unwrap();
    }
    let marker = dir.join("started");
    let m = marker.display();
    let gh = |cmd: &mut std::process::Command| {
        if github {
            cmd.env("GITHUB_ACTIONS", "true")
                .env("GITHUB_STEP_SUMMARY", dir.join("summary"))
                .env("GITHUB_OUTPUT", dir.join("output"));
        }
    };

    // 1. A run holds the Lease; its command runs until it is stopped.
    let mut run = c.cli();
    gh(&mut run);
    run.args(["--log-format", log_format, "run", "--target", TARGET])
        .args(c.handoff_flags())
        .args(["--", "sh", "-c", &format!("touch {m}; exec sleep 600")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = run.spawn().unwrap();
    wait_for_file(&marker, "the run's command").await;

    // 2. Someone who may update the Lease writes a hostile holder onto it.
    let patch = json!({ "spec": { "holderIdentity": EVIL } });
    c.ns.api::<Lease>()
        .patch(
            "flux-handoff",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let all = format!("{}{}", stdout(&out), stderr(&out));
    eprintln!(
        "--- run that lost the Lease (GITHUB_ACTIONS={github}, {log_format}) exit {} ---\n{all}",
        code(&out)
    );
    assert_ne!(code(&out), 0, "the run did not lose its Lease:\n{all}");
    assert!(
        all.contains("lease lost") && all.contains("evil"),
        "the loss, or the holder, is not shown at all:\n{all}"
    );
    check("run that lost the Lease", &all);
    if github {
        // Our own commands stay ours: each group is closed, not escaped into text.
        assert!(!all.contains("\\::endgroup::"), "{all}");
        assert!(all.lines().any(|l| l == "::endgroup::"), "{all}");
    }

    // 3. Another run waits behind that holder, then gives up.
    let mut wait = c.cli();
    gh(&mut wait);
    wait.args([
        "-v",
        "--log-format",
        log_format,
        "run",
        "--wait-lease",
        "2s",
    ])
    .args(["--target", TARGET])
    .args(c.handoff_flags())
    .args(["--", "true"]);
    let (code, all) = output(wait).await;
    eprintln!("--- run that waited (GITHUB_ACTIONS={github}) exit {code} ---\n{all}");
    assert_eq!(code, 3, "{all}");
    assert!(
        all.contains("evil"),
        "the holder is not shown at all:\n{all}"
    );
    check("run that waited", &all);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_escape_a_hostile_holder_reaches_no_line_raw_outside_actions() {
    hostile_holder_while_a_run_holds_then_waits(false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_escape_a_hostile_holder_reaches_no_line_raw_in_actions() {
    hostile_holder_while_a_run_holds_then_waits(true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_escape_a_hostile_holder_reaches_no_line_raw_in_a_json_log() {
    hostile_holder_while_a_run_holds_then_waits(true, true).await;
}
