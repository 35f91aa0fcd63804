//! Flux's and kubectl's habits (issue 28, item 1), through the real binary: positional
//! targets, `resume` by object with `flux resume`'s Ready wait, `FLUX_SYSTEM_NAMESPACE`, and
//! `-o yaml` / `-o name`. What the server holds afterwards is read back.

mod common;

use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;

const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

/// `pause` with the target named positionally; returns the holder it prints on stdout.
async fn pause_positional(c: &Cluster) -> String {
    let mut args = vec!["pause", TARGET];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let holder = stdout(&out).trim().to_string();
    let t = c.get(TARGET).await;
    let owner = annotation(&t, OWNER_KEY).unwrap_or_default();
    assert!(owner.starts_with(&format!("{holder};")), "{t}");
    assert!(suspended(&t), "{t}");
    holder
}

fn assert_released(o: &Value, name: &str) {
    assert_eq!(annotation(o, OWNER_KEY), None, "{name} still fenced: {o}");
    assert!(!suspended(o), "{name} still suspended: {o}");
}

fn ready_for_generation(o: &Value) -> bool {
    let gen_ok = o["status"]["observedGeneration"] == o["metadata"]["generation"];
    let conds = o["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    gen_ok
        && conds
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_habits_resume_by_object_finds_the_holder_and_waits_for_ready() {
    let c = Cluster::seeded("habits-resume-obj").await;
    let before = c.get(TARGET).await;
    let holder = pause_positional(&c).await;

    // `flux resume ks infrastructure`: the object, not the holder; waits by default.
    let mut args = vec!["resume", TARGET, "-o", "json"];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("fenced by {holder}: resuming its pause")),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("every released object is Ready"),
        "{}",
        stderr(&out)
    );
    let doc: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let released = doc["facts"]["released"].as_array().unwrap();
    assert_eq!(released.len(), 2, "target and parent: {doc}");

    // The whole pause is released: target and parent, and the Lease.
    for name in [TARGET, PARENT] {
        assert_released(&c.get(name).await, name);
    }
    assert_eq!(c.ns.lease_holder().await, None);
    // It waited: a fresh reconcile request, handled, and Ready for the current generation.
    let t = c.get(TARGET).await;
    let asked = annotation(&t, REQUESTED_AT).unwrap_or_default().to_string();
    assert_ne!(
        Some(asked.as_str()),
        annotation(&before, REQUESTED_AT),
        "{t}"
    );
    assert_eq!(t["status"]["lastHandledReconcileAt"], asked.as_str(), "{t}");
    assert!(ready_for_generation(&t), "{t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_habits_resume_by_object_wait_false_and_name_output() {
    let c = Cluster::seeded("habits-resume-nowait").await;
    let before = c.get(TARGET).await;
    pause_positional(&c).await;

    let target = format!("ks/{}/{TARGET}", c.ns.name);
    let mut args = vec!["resume", target.as_str(), "--wait=false", "-o", "name"];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Released in order, targets first, in the form commands take back.
    let text = stdout(&out);
    let names: Vec<&str> = text.lines().collect();
    let parent = format!("ks/{}/{PARENT}", c.ns.name);
    assert_eq!(
        names,
        [target.as_str(), parent.as_str()],
        "{}",
        stderr(&out)
    );
    for name in [TARGET, PARENT] {
        assert_released(&c.get(name).await, name);
    }
    assert_eq!(c.ns.lease_holder().await, None);
    // No wait: no reconcile was requested; the requestedAt is what it was before the pause.
    let t = c.get(TARGET).await;
    assert_eq!(
        annotation(&t, REQUESTED_AT),
        annotation(&before, REQUESTED_AT),
        "{t}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_habits_resume_of_an_unfenced_object_is_refused_and_changes_nothing() {
    let c = Cluster::seeded("habits-resume-none").await;
    let before = c.get(TARGET).await;
    let mut args = vec!["resume", TARGET];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is not paused by flux-handoff (no fence); nothing was changed"),
        "{}",
        stderr(&out)
    );
    let after = c.get(TARGET).await;
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
}

/// The binary with no cluster at all: `rbac` makes no request.
fn offline(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flux-handoff"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::null());
    c.output().unwrap()
}

#[test]
fn flux_habits_flux_system_namespace_is_the_default_of_n() {
    let out = offline(
        &["rbac", "apps", "-o", "json"],
        &[("FLUX_SYSTEM_NAMESPACE", "tenant-a")],
    );
    // `rbac` takes -t only; the positional form is for pause, run and ghcr reassert.
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let out = offline(
        &["rbac", "-t", "apps"],
        &[("FLUX_SYSTEM_NAMESPACE", "tenant-a")],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("namespace: tenant-a"),
        "{}",
        stdout(&out)
    );
    let out = offline(
        &["rbac", "-t", "apps", "-n", "other"],
        &[("FLUX_SYSTEM_NAMESPACE", "tenant-a")],
    );
    assert!(
        !stdout(&out).contains("namespace: tenant-a"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn flux_habits_yaml_output_and_name_refused_where_nothing_is_listed() {
    let out = offline(&["rbac", "-t", "apps", "-o", "yaml"], &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("---\ncommand: \"rbac\"\n"), "{text}");
    assert!(text.contains("\nexit_code: 0\n"), "{text}");
    let out = offline(&["rbac", "-t", "apps", "-o", "name"], &[]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("-o name: `rbac` lists no objects"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn flux_habits_positional_targets_parse_on_pause_run_and_reassert() {
    // A bad positional target is the same one-line usage error as a bad -t (exit 2), so
    // the positional form reaches the same resolution.
    for args in [
        &["pause", "a/b/c/d"][..],
        &["run", "a/b/c/d", "--", "true"],
        &[
            "ghcr",
            "reassert",
            "a/b/c/d",
            "--image",
            "ghcr.io/acme/app:1.0.0",
            "--credential-env",
            "TOK",
            "--username",
            "robot",
            "--secret-name",
            "pull",
            "--namespace-list",
            "apps",
        ],
    ] {
        let out = offline(args, &[("TOK", "ghp_notarealtoken0123456789")]);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("a/b/c/d"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // `run` needs `--` before its command now that targets are positional.
    let out = offline(&["run", "apps", "true"], &[]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
}

const SUSPENDED_BY: &str = "fluxcd.controlplane.io/suspendedBy";

async fn pause_with_reason(c: &Cluster) -> String {
    let mut args = vec!["--reason", "rotate the pull secret", "pause", TARGET];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out).trim().to_string()
}

async fn resume_holder(c: &Cluster, holder: &str) {
    let mut args = vec!["resume", "--holder", holder];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspended_by_names_the_holder_and_reason_while_paused_and_goes_on_release() {
    let c = Cluster::seeded("suspended-by").await;
    let holder = pause_with_reason(&c).await;
    let want = format!("flux-handoff {holder}: rotate the pull secret");
    for name in [TARGET, PARENT] {
        let o = c.get(name).await;
        assert_eq!(
            annotation(&o, SUSPENDED_BY),
            Some(want.as_str()),
            "{name}: {o}"
        );
    }
    resume_holder(&c, &holder).await;
    for name in [TARGET, PARENT] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, SUSPENDED_BY), None, "{name}: {o}");
        assert_released(&o, name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspended_by_someone_elses_value_is_never_overwritten_and_stays_after_release() {
    use kube::api::{DynamicObject, Patch, PatchParams};
    let c = Cluster::seeded("suspended-by-foreign").await;
    let api: kube::Api<DynamicObject> = kube::Api::namespaced_with(
        c.ns.client.clone(),
        &c.ns.name,
        &testkit::fixtures::kustomization_resource(),
    );
    let theirs = "alice: incident 42";
    let pp = PatchParams {
        field_manager: Some("alice".into()),
        ..PatchParams::default()
    };
    let patch = serde_json::json!({ "metadata": { "annotations": { SUSPENDED_BY: theirs } } });
    api.patch(TARGET, &pp, &Patch::Merge(patch)).await.unwrap();

    let holder = pause_with_reason(&c).await;
    let t = c.get(TARGET).await;
    assert_eq!(annotation(&t, SUSPENDED_BY), Some(theirs), "{t}");
    assert!(suspended(&t), "{t}");
    // The parent had none: it gets ours.
    let p = c.get(PARENT).await;
    assert!(
        annotation(&p, SUSPENDED_BY).is_some_and(|v| v.contains(&holder)),
        "{p}"
    );

    resume_holder(&c, &holder).await;
    let t = c.get(TARGET).await;
    assert_eq!(
        annotation(&t, SUSPENDED_BY),
        Some(theirs),
        "the release left theirs: {t}"
    );
    assert_released(&t, TARGET);
    let p = c.get(PARENT).await;
    assert_eq!(annotation(&p, SUSPENDED_BY), None, "{p}");
}
