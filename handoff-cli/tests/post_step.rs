//! The action's post step acts only where something may still be held (issue 27, item 4): not
//! after exit 2 or 3 (nothing was taken, the refusal was reported once), not after a main step
//! whose flux-handoff reported its cleanup complete (a cancel that released everything exits
//! 130), and never by taking a free Lease. Each test asserts the Lease's resourceVersion is
//! the same after the post step as before it: the post step wrote nothing.

mod common;

use common::{runner, runner_checks as checks};

use checks::*;
use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use runner::Job;

/// The Lease's resourceVersion (None: there is no Lease).
async fn lease_version(c: &Cluster) -> Option<String> {
    c.ns.api::<Lease>()
        .get_opt("flux-handoff")
        .await
        .unwrap()
        .and_then(|l| l.metadata.resource_version)
}

/// Runs the post step and checks it wrote nothing and raised no error annotation.
async fn post_writes_nothing(c: &Cluster, job: &mut Job, inputs: &[(&str, &str)]) -> String {
    let before = lease_version(c).await;
    let post = finish(job.action_post(inputs)).await;
    eprintln!("--- post step log ---\n{}", post.log);
    assert_eq!(post.code(), 0, "{}", post.log);
    assert!(!post.log.contains("::error::"), "{}", post.log);
    assert_eq!(
        lease_version(c).await,
        before,
        "the post step wrote the Lease:\n{}",
        post.log
    );
    post.log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_step_after_a_refusal_writes_nothing_and_reports_it_once() {
    let c = Cluster::seeded("ps-refused").await;
    // Another run's pause holds the Lease and the chain.
    let mut pause = vec!["pause", "--target", TARGET];
    let flags = c.handoff_flags();
    pause.extend(flags.iter().map(String::as_str));
    let other = c.run(&pause).await;
    assert_eq!(code(&other), 0, "{}", stderr(&other));
    let mut job = Job::new(&[]);
    let (args, kc) = (flux_args(&c).join("\n"), c.kubeconfig.display().to_string());
    let inputs = inputs(&args, &kc, "true");
    let main = finish(job.action_main(&inputs)).await;
    job.keep_state(&main);
    eprintln!("--- main step log ---\n{}", main.log);
    assert_eq!(main.code(), 3, "{}", main.log);
    assert_eq!(main.log.matches("::error::").count(), 1, "{}", main.log);
    let log = post_writes_nothing(&c, &mut job, &inputs).await;
    assert!(
        log.contains("nothing to do") && log.contains("exit 3 (refused)"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_step_after_a_usage_error_writes_nothing() {
    let c = Cluster::seeded("ps-usage").await;
    // A complete run first, so there is a Lease (free) whose version can be compared.
    let mut job = Job::new(&[]);
    let (args, kc) = (flux_args(&c).join("\n"), c.kubeconfig.display().to_string());
    let ok = finish(job.action_main(&inputs(&args, &kc, "true"))).await;
    assert_eq!(ok.code(), 0, "{}", ok.log);
    let mut job = Job::new(&[]);
    let bad = format!("{args}\n--retire\nsometimes");
    let inputs = inputs(&bad, &kc, "true");
    let main = finish(job.action_main(&inputs)).await;
    job.keep_state(&main);
    eprintln!("--- main step log ---\n{}", main.log);
    assert_eq!(main.code(), 2, "{}", main.log);
    assert!(lease_version(&c).await.is_some());
    let log = post_writes_nothing(&c, &mut job, &inputs).await;
    assert!(log.contains("exit 2 (usage-error)"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_step_after_a_cancel_whose_cleanup_completed_writes_nothing() {
    let c = Cluster::seeded("ps-cancel").await;
    let before = specs(&c).await;
    let mut job = Job::new(&[]);
    let marker = job.temp.join("started");
    let (args, kc, run) = (
        flux_args(&c).join("\n"),
        c.kubeconfig.display().to_string(),
        marked(&marker, PROMPT),
    );
    let inputs = inputs(&args, &kc, &run);
    let mut main = job.action_main(&inputs);
    let command = wait_for_command(&marker, &mut main).await;
    let main = cancel(main).await;
    job.keep_state(&main);
    assert_command_gone(command);
    eprintln!("--- main step log ---\n{}", main.log);
    assert_eq!(main.code(), 130, "{}", main.log);
    assert_eq!(
        job.state.get("cleanup").map(String::as_str),
        Some("complete")
    );
    assert_eq!(
        main.files.outputs().get("cleanup").map(String::as_str),
        Some("complete")
    );
    assert_restored(&c, &before).await;
    let log = post_writes_nothing(&c, &mut job, &inputs).await;
    assert!(
        log.contains("nothing to do") && log.contains("cleanup complete (exit 130, cancelled)"),
        "{log}"
    );
    assert_restored(&c, &before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_step_never_takes_a_free_lease() {
    let c = Cluster::seeded("ps-free").await;
    let before = specs(&c).await;
    let mut job = Job::new(&[]);
    let marker = job.temp.join("started");
    let (args, kc, run) = (
        flux_args(&c).join("\n"),
        c.kubeconfig.display().to_string(),
        marked(&marker, PROMPT),
    );
    let inputs = inputs(&args, &kc, &run);
    let mut main = job.action_main(&inputs);
    let command = wait_for_command(&marker, &mut main).await;
    // Node and flux-handoff die at once: the main step reports nothing.
    let state: std::collections::BTreeMap<String, String> =
        runner::parse_file_commands(&std::fs::read_to_string(&main.files.state).unwrap())
            .into_iter()
            .collect();
    let fh: u32 = state["pid"].parse().unwrap();
    for pid in [fh, main.pid()] {
        let _ = testkit::signal::to_process(pid, "KILL");
    }
    let _ = testkit::signal::to_group(command, "KILL");
    let main = finish(main).await;
    job.keep_state(&main);
    let holder = job.state["holder"].clone();
    // Someone else releases what it left before the post step runs (a person, `fences
    // recover`): the Lease is free.
    let mut resume = vec!["resume", "--holder", &holder, "--holder-exited"];
    let flags = c.handoff_flags();
    resume.extend(flags.iter().map(String::as_str));
    let out = c.run(&resume).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_restored(&c, &before).await;
    let log = post_writes_nothing(&c, &mut job, &inputs).await;
    assert!(
        log.contains(&format!("{holder} holds neither the Lease")),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_step_leaves_another_runs_lease_alone() {
    let c = Cluster::seeded("ps-other").await;
    let mut job = Job::new(&[]);
    let marker = job.temp.join("started");
    let (args, kc, run) = (
        flux_args(&c).join("\n"),
        c.kubeconfig.display().to_string(),
        marked(&marker, PROMPT),
    );
    let inputs = inputs(&args, &kc, &run);
    let mut main = job.action_main(&inputs);
    let command = wait_for_command(&marker, &mut main).await;
    let state: std::collections::BTreeMap<String, String> =
        runner::parse_file_commands(&std::fs::read_to_string(&main.files.state).unwrap())
            .into_iter()
            .collect();
    let fh: u32 = state["pid"].parse().unwrap();
    for pid in [fh, main.pid()] {
        let _ = testkit::signal::to_process(pid, "KILL");
    }
    let _ = testkit::signal::to_group(command, "KILL");
    let main = finish(main).await;
    job.keep_state(&main);
    let holder = job.state["holder"].clone();
    let flags = c.handoff_flags();
    let mut resume = vec!["resume", "--holder", &holder, "--holder-exited"];
    resume.extend(flags.iter().map(String::as_str));
    assert_eq!(code(&c.run(&resume).await), 0);
    // Another run pauses in between: its Lease is not ours to touch, and no error is raised.
    let mut pause = vec!["pause", "--target", TARGET];
    pause.extend(flags.iter().map(String::as_str));
    let other = c.run(&pause).await;
    assert_eq!(code(&other), 0, "{}", stderr(&other));
    let log = post_writes_nothing(&c, &mut job, &inputs).await;
    assert!(log.contains("holds neither the Lease"), "{log}");
}
