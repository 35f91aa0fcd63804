//! End to end: `pause`, `resume`, `run` as a user runs them.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_proves_and_leaves_it_paused_then_resume_releases_everything() {
    let c = Cluster::seeded("cli-pause").await;
    let before = c.get(TARGET).await;
    let mut args = vec!["pause", "--target", TARGET];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let holder = stdout(&out).trim().to_string();
    assert!(stderr(&out).contains("pause proven"), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!(
        "resume with: flux-handoff resume --holder {holder}"
    )));
    // The server holds the pause after the process is gone.
    let t = c.get(TARGET).await;
    assert!(suspended(&t));
    assert!(
        annotation(&t, OWNER_KEY)
            .unwrap()
            .starts_with(&format!("{holder};"))
    );
    assert!(suspended(&c.get(PARENT).await));

    let mut args = vec!["resume", "--holder", holder.as_str()];
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let after = c.get(TARGET).await;
    assert!(!suspended(&after));
    assert_eq!(annotation(&after, OWNER_KEY), None);
    assert_eq!(
        after["metadata"]["annotations"],
        before["metadata"]["annotations"]
    );
    assert_eq!(annotation(&c.get(PARENT).await, OWNER_KEY), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_propagates_the_commands_exit_status_and_resumes_even_when_it_fails() {
    let c = Cluster::seeded("cli-run").await;
    let flags = c.handoff_flags();
    let mut args = vec!["run", "--target", TARGET];
    args.extend(flags.iter().map(String::as_str));
    args.extend([
        "--",
        "sh",
        "-c",
        "test -n \"$FLUX_HANDOFF_HOLDER\" && echo \"$FLUX_HANDOFF_PROOF\" && exit 7",
    ]);
    let out = c.run(&args).await;
    assert_eq!(code(&out), 7, "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("passes=2 observations="),
        "{}",
        stdout(&out)
    );
    assert!(!suspended(&c.get(TARGET).await));
    assert!(!suspended(&c.get(PARENT).await));
    assert_eq!(annotation(&c.get(TARGET).await, OWNER_KEY), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_is_refused_with_exit_3_while_another_holder_has_the_lease() {
    let c = Cluster::seeded("cli-refuse").await;
    let flags = c.handoff_flags();
    let mut args = vec!["pause", "--target", TARGET];
    args.extend(flags.iter().map(String::as_str));
    let first = c.run(&args).await;
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let rv = c.get(TARGET).await["metadata"]["resourceVersion"].clone();
    let second = c.run(&args).await;
    assert_eq!(code(&second), 3, "{}", stderr(&second));
    assert!(
        stderr(&second).contains("is held by"),
        "{}",
        stderr(&second)
    );
    assert_eq!(
        c.get(TARGET).await["metadata"]["resourceVersion"],
        rv,
        "nothing changed"
    );
    let holder = stdout(&first).trim().to_string();
    let mut args = vec!["resume", "--holder", holder.as_str()];
    args.extend(flags.iter().map(String::as_str));
    assert_eq!(code(&c.run(&args).await), 0);
}

#[tokio::test]
async fn bad_flags_and_bad_config_exit_2_without_touching_the_cluster() {
    let c = Cluster::seeded("cli-usage").await;
    let rv = c.get(TARGET).await["metadata"]["resourceVersion"].clone();
    let out = c.run(&["pause", "--target", "a/b/c/d"]).await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
    let out = c
        .run(&["pause", "--target", TARGET, "--retire", "sometimes"])
        .await;
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("sometimes"));
    let dir = std::env::temp_dir().join(format!("fh-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("flux-handoff.toml");
    std::fs::write(&cfg, "[lease]\nname = \"x\"\nnamspace = \"typo\"\n").unwrap();
    let out = c.run(&["--config", cfg.to_str().unwrap(), "pause"]).await;
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains(":3: ") && stderr(&out).contains("namspace"),
        "{}",
        stderr(&out)
    );
    let out = c.run(&["pause"]).await;
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("no target"));
    assert_eq!(c.get(TARGET).await["metadata"]["resourceVersion"], rv);
}

#[tokio::test]
async fn help_lists_subcommands_and_exit_codes() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flux-handoff"))
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0);
    let help = stdout(&out);
    for word in ["pause", "resume", "run", "Exit codes:", "130"] {
        assert!(help.contains(word), "--help lacks {word}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_held_by_someone_else_is_refused_before_the_lease_or_the_parent_is_written() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::Event;
    use kube::api::{DynamicObject, ListParams, Patch, PatchParams};

    let c = Cluster::seeded("cli-preflight").await;
    let ks: kube::Api<DynamicObject> = kube::Api::namespaced_with(
        c.ns.client.clone(),
        &c.ns.name,
        &testkit::fixtures::kustomization_resource(),
    );
    let foreign = "local-elsewhere-4242-abcdef;3";
    let fence = serde_json::json!({ "metadata": { "annotations": { OWNER_KEY: foreign } } });
    ks.patch(TARGET, &PatchParams::default(), &Patch::Merge(&fence))
        .await
        .unwrap();
    let parent_before = c.get(PARENT).await;
    let flags = c.handoff_flags();
    let mut args = vec!["pause", "--target", TARGET];
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "error: Kustomization {}/{TARGET}: fenced by {foreign}; next: flux-handoff fences",
            c.ns.name
        )
    );
    // A reason that is not one line is a usage error, found before any write too.
    let mut args = vec![
        "--reason",
        "deploy\n::add-mask::x",
        "pause",
        "--target",
        "apps",
    ];
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("invalid reason"), "{}", stderr(&out));

    // The server: the parent never fenced, no Lease, no flux-handoff Event.
    let parent = c.get(PARENT).await;
    assert_eq!(parent["spec"], parent_before["spec"]);
    assert_eq!(
        parent["metadata"]["annotations"],
        parent_before["metadata"]["annotations"]
    );
    assert!(
        c.ns.api::<Lease>()
            .get_opt("flux-handoff")
            .await
            .unwrap()
            .is_none()
    );
    let events =
        c.ns.api::<Event>()
            .list(&ListParams::default())
            .await
            .unwrap();
    assert!(
        !events
            .items
            .iter()
            .any(|e| e.reporting_component.as_deref() == Some(flux_fence::events::COMPONENT)),
        "no flux-handoff Event"
    );
    assert_eq!(annotation(&c.get(TARGET).await, OWNER_KEY), Some(foreign));
}
