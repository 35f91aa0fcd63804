//! A cancelled GitHub Actions job, emulated (tests/common/runner.rs starts and cancels steps
//! the way actions/runner does), against the local control plane: whether the handoff runs in
//! the flux-handoff action or in a plain `run:` step, with a command that stops at SIGTERM or
//! one that ignores it, a cancelled job leaves nothing held, the Flux objects' specs as they
//! were before the run, and Events that say the run was cancelled.

mod common;

use common::{runner, runner_checks as checks};

use std::time::Duration;

use checks::*;
use common::*;
use runner::Job;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_cancel_action_with_a_prompt_command_releases_and_reports_the_actions_way() {
    let c = Cluster::seeded("rc-act-prompt").await;
    let before = specs(&c).await;
    let (secrets, token) = Secrets::new(&c);
    let mut job = Job::new(&[("GHCR_TOKEN", &token)]);
    let marker = job.temp.join("started");
    let (args, kc, run) = (
        flux_args(&c).join("\n"),
        c.kubeconfig.display().to_string(),
        marked(&marker, PROMPT),
    );
    let inputs = inputs(&args, &kc, &run);

    let mut main = job.action_main(&inputs);
    let command = wait_for_command(&marker, &mut main).await;
    assert!(suspended(&c.get(TARGET).await), "paused while it runs");
    let main = cancel(main).await;
    job.keep_state(&main);
    assert_command_gone(command);
    eprintln!("--- main step log ---\n{}", main.log);
    eprintln!("--- main step summary ---\n{}", main.files.summary_text());
    // flux-handoff got the forwarded SIGINT, stopped the command and released: no SIGTERM.
    assert_eq!(main.signals, ["INT"], "{}", main.log);
    assert_eq!(main.code(), 130, "{}", main.log);
    let holder = job
        .state
        .get("holder")
        .cloned()
        .expect("holder saved in the state");
    assert!(holder.starts_with("gh"), "{holder}");
    assert_eq!(job.state.get("exit_code").map(String::as_str), Some("130"));

    // The outputs and the summary of the cancelled main step.
    let outputs = main.files.outputs();
    assert_eq!(outputs.get("holder"), Some(&holder), "{outputs:?}");
    assert_eq!(
        outputs.get("outcome").map(String::as_str),
        Some("cancelled")
    );
    assert!(outputs.get("proven_after_s").is_some_and(|s| !s.is_empty()));
    let summary = main.files.summary_text();
    for want in [
        "### flux-handoff run: cancelled".to_string(),
        format!("| Holder | `{holder}` |"),
        format!("| Paused | Kustomization {}/{PARENT}", c.ns.name),
        "| pause proven |".to_string(),
        "| Exit code | 130 (cancelled) |".to_string(),
        "**Next:** `flux-handoff fences`".to_string(),
    ] {
        assert!(summary.contains(&want), "missing {want:?} in:\n{summary}");
    }

    // The run released everything itself and said so: the post step stands down.
    let post = finish(job.action_post(&inputs)).await;
    eprintln!("--- post step log ---\n{}", post.log);
    assert_eq!(post.code(), 0, "{}", post.log);
    assert!(
        post.log.contains("nothing to do") && post.log.contains("cleanup complete"),
        "{}",
        post.log
    );
    for (what, text) in [
        ("the main step's log", &main.log),
        ("the main step's summary", &summary),
        ("the main step's outputs", &main.files.output_text()),
        ("the post step's log", &post.log),
        ("the post step's summary", &post.files.summary_text()),
        ("the post step's outputs", &post.files.output_text()),
    ] {
        secrets.assert_absent(what, text);
    }
    assert_restored(&c, &before).await;
    assert_events_say_cancelled(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_cancel_action_with_a_command_ignoring_sigterm_releases() {
    let c = Cluster::seeded("rc-act-stubborn").await;
    let before = specs(&c).await;
    let mut job = Job::new(&[]);
    let marker = job.temp.join("started");
    let (args, kc, run) = (
        flux_args(&c).join("\n"),
        c.kubeconfig.display().to_string(),
        marked(&marker, STUBBORN),
    );
    let inputs = inputs(&args, &kc, &run);

    let mut main = job.action_main(&inputs);
    let command = wait_for_command(&marker, &mut main).await;
    let main = cancel(main).await;
    job.keep_state(&main);
    assert_command_gone(command);
    eprintln!("--- main step log ---\n{}", main.log);
    // Over before the runner's SIGKILL: with the default --grace (5 s) the command is killed
    // and everything released before the runner's SIGTERM at 7.5 s; a longer grace ends at
    // that SIGTERM (a second signal kills the command and still releases).
    assert!(
        !main.signals.contains(&"KILL"),
        "{:?}\n{}",
        main.signals,
        main.log
    );
    assert_eq!(main.code(), 130, "{}", main.log);
    let post = finish(job.action_post(&inputs)).await;
    eprintln!("--- post step log ---\n{}", post.log);
    assert_eq!(post.code(), 0, "{}", post.log);
    assert_restored(&c, &before).await;
    assert_events_say_cancelled(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_cancel_run_step_exec_with_a_prompt_command_releases_and_reports() {
    let c = Cluster::seeded("rc-run-prompt").await;
    let before = specs(&c).await;
    let (secrets, token) = Secrets::new(&c);
    let mut job = Job::new(&[("GHCR_TOKEN", &token)]);
    let marker = job.temp.join("started");
    let mut step = job.run_step(&run_script(&c, true, &marked(&marker, PROMPT)));
    let command = wait_for_command(&marker, &mut step).await;
    let ended = cancel(step).await;
    assert_command_gone(command);
    eprintln!("--- step log ---\n{}", ended.log);
    eprintln!("--- step summary ---\n{}", ended.files.summary_text());
    assert_eq!(ended.signals, ["INT"], "{}", ended.log);
    assert_eq!(ended.code(), 130, "{}", ended.log);
    assert!(ended.log.contains("lease released"), "{}", ended.log);
    let outputs = ended.files.outputs();
    assert_eq!(
        outputs.get("outcome").map(String::as_str),
        Some("cancelled"),
        "{outputs:?}"
    );
    let holder = outputs.get("holder").cloned().unwrap_or_default();
    assert!(holder.starts_with("gh"), "{outputs:?}");
    let summary = ended.files.summary_text();
    assert!(
        summary.contains("### flux-handoff run: cancelled"),
        "{summary}"
    );
    assert!(summary.contains(&format!("`{holder}`")), "{summary}");
    for (what, text) in [
        ("the step's log", &ended.log),
        ("the step's summary", &summary),
        ("the step's outputs", &ended.files.output_text()),
    ] {
        secrets.assert_absent(what, text);
    }
    assert_restored(&c, &before).await;
    assert_events_say_cancelled(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_cancel_run_step_exec_with_a_command_ignoring_sigterm_releases() {
    let c = Cluster::seeded("rc-run-stubborn").await;
    let before = specs(&c).await;
    let mut job = Job::new(&[]);
    let marker = job.temp.join("started");
    let mut step = job.run_step(&run_script(&c, true, &marked(&marker, STUBBORN)));
    let command = wait_for_command(&marker, &mut step).await;
    let ended = cancel(step).await;
    assert_command_gone(command);
    eprintln!("--- step log ---\n{}", ended.log);
    // Over before the runner's SIGKILL: the default --grace (5 s) ends the command and the
    // release before the runner's SIGTERM at 7.5 s.
    assert!(
        !ended.signals.contains(&"KILL"),
        "{:?}\n{}",
        ended.signals,
        ended.log
    );
    assert_eq!(ended.code(), 130, "{}", ended.log);
    assert_restored(&c, &before).await;
    assert_events_say_cancelled(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_cancel_run_step_without_exec_releases_once_bash_is_gone() {
    let c = Cluster::seeded("rc-run-noexec").await;
    let before = specs(&c).await;
    let mut job = Job::new(&[]);
    let marker = job.temp.join("started");
    let mut step = job.run_step(&run_script(&c, false, &marked(&marker, PROMPT)));
    let command = wait_for_command(&marker, &mut step).await;
    let fh = *runner::children(step.pid())
        .first()
        .expect("flux-handoff runs under bash");
    let ended = cancel(step).await;
    eprintln!("--- step log ---\n{}", ended.log);
    // bash ignores the SIGINT while it waits for flux-handoff, and dies of the SIGTERM; the
    // signals never reach flux-handoff, which must notice its parent died.
    assert_eq!(ended.signals, ["INT", "TERM"], "{}", ended.log);
    let gone = tokio::task::spawn_blocking(move || runner::wait_gone(fh, Duration::from_mins(1)))
        .await
        .unwrap();
    if !gone {
        // Do not leave it (and its command) running after the test.
        let _ = testkit::signal::to_process(fh, "KILL");
        let _ = testkit::signal::to_group(command, "KILL");
    }
    assert!(
        gone,
        "flux-handoff still runs 60s after the bash that started it died"
    );
    assert_command_gone(command);
    assert_restored(&c, &before).await;
    assert_events_say_cancelled(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_cancel_action_post_releases_by_holder_what_a_killed_main_step_left() {
    let c = Cluster::seeded("rc-act-killed").await;
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
    // The worst case: node and flux-handoff die at once (a runner host losing the processes),
    // so nothing is released by the run itself.
    let state: std::collections::BTreeMap<String, String> =
        runner::parse_file_commands(&std::fs::read_to_string(&main.files.state).unwrap())
            .into_iter()
            .collect();
    let fh: u32 = state["pid"].parse().unwrap();
    for pid in [fh, main.pid()] {
        let _ = testkit::signal::to_process(pid, "KILL");
    }
    // Its command is in a process group of its own: stop it as a test cleanup.
    let _ = testkit::signal::to_group(command, "KILL");
    let main = finish(main).await;
    job.keep_state(&main);
    let holder = job.state["holder"].clone();
    assert!(
        annotation(&c.get(TARGET).await, OWNER_KEY).is_some(),
        "the killed run left its fence"
    );
    let post = finish(job.action_post(&inputs)).await;
    eprintln!("--- post step log ---\n{}", post.log);
    assert_eq!(post.code(), 0, "{}", post.log);
    assert!(
        post.log
            .contains(&format!("released: Kustomization {}/{TARGET}", c.ns.name)),
        "{}",
        post.log
    );
    assert!(post.log.contains(&holder), "{}", post.log);
    assert_restored(&c, &before).await;
    assert!(!released_events(&c, TARGET).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_cancel_action_complete_run_leaves_the_post_step_nothing_to_do() {
    let c = Cluster::seeded("rc-act-done").await;
    let before = specs(&c).await;
    let mut job = Job::new(&[]);
    let (args, kc) = (flux_args(&c).join("\n"), c.kubeconfig.display().to_string());
    let inputs = inputs(&args, &kc, "test -n \"$FLUX_HANDOFF_PROOF\"");
    let main = finish(job.action_main(&inputs)).await;
    job.keep_state(&main);
    eprintln!("--- main step log ---\n{}", main.log);
    assert_eq!(main.code(), 0, "{}", main.log);
    let outputs = main.files.outputs();
    assert_eq!(
        outputs.get("outcome").map(String::as_str),
        Some("succeeded")
    );
    assert_eq!(outputs.get("holder"), job.state.get("holder"));
    assert!(
        main.files
            .summary_text()
            .contains("### flux-handoff run: succeeded")
    );
    let post = finish(job.action_post(&inputs)).await;
    assert_eq!(post.code(), 0, "{}", post.log);
    assert!(
        // flux-handoff said it holds nothing (cleanup=complete): the post step stands down.
        post.log.contains("nothing to do") && post.log.contains("cleanup complete (exit 0"),
        "{}",
        post.log
    );
    assert_restored(&c, &before).await;
}

#[test]
fn runner_cancel_action_lib_tests_pass() {
    let out = std::process::Command::new("node")
        .args(["--test", "action/lib.test.js", "action/install.test.js"])
        .current_dir(runner::repo_root())
        .output()
        .expect("node (the runner's JavaScript runtime) is needed for the action's tests");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_cancel_action_pause_is_released_by_the_post_step_when_the_job_ends() {
    let c = Cluster::seeded("rc-act-pause").await;
    let before = specs(&c).await;
    let mut job = Job::new(&[]);
    let (args, kc) = (flux_args(&c).join("\n"), c.kubeconfig.display().to_string());
    let inputs = [
        ("command", "pause"),
        ("args", args.as_str()),
        ("kubeconfig", kc.as_str()),
    ];
    let main = finish(job.action_main(&inputs)).await;
    job.keep_state(&main);
    eprintln!("--- main step log ---\n{}", main.log);
    assert_eq!(main.code(), 0, "{}", main.log);
    let holder = job.state["holder"].clone();
    // Paused between the steps of the job, by this run's holder.
    let target = c.get(TARGET).await;
    assert!(suspended(&target));
    assert!(
        annotation(&target, OWNER_KEY).is_some_and(|o| o.starts_with(&format!("{holder};"))),
        "{target}"
    );
    // The job ends: without keep-paused, the post step hands everything back.
    let post = finish(job.action_post(&inputs)).await;
    eprintln!("--- post step log ---\n{}", post.log);
    assert_eq!(post.code(), 0, "{}", post.log);
    assert!(post.log.contains("the job is over"), "{}", post.log);
    assert_restored(&c, &before).await;
}
