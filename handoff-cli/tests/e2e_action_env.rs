//! The deploy script gets no token the Action was given for flux-handoff (issue 48, item 6).
//! With `recover-finished-runs: true` the Action hands its `github-token` to flux-handoff
//! alone (`FLUX_HANDOFF_GITHUB_TOKEN`, which flux-handoff removes from its command's
//! environment) and no input (`INPUT_*`) to either; before, the script and everything it
//! started inherited the token as `GITHUB_TOKEN` and as `INPUT_GITHUB-TOKEN` — a plain `run:`
//! step has neither.
//!
//! The job here is the merge queue's: a killed deploy job's holder keeps the Lease and the
//! fences; the next job, through the Action with `recover-finished-runs: true`, asks GitHub (a
//! local stub of its REST API answering `completed`) with the token, recovers, and runs a
//! script that dumps its environment. The stub saw the token (flux-handoff had it); the dump
//! holds it nowhere.

mod common;

use std::process::Stdio;

use common::runner::{self, Job};
use common::runner_checks::{finish, flux_args, sh};
use common::*;
use testkit::github_stub::{Answer, GithubStub};

const REPO: &str = "acme/app";
const KILLED_RUN: u64 = 4811;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn action_env_the_deploy_script_never_holds_the_actions_token() {
    let c = Cluster::seeded("action-env").await;
    let stub = GithubStub::start().await.unwrap();
    let token = format!("ghs_actionEnv{}", testkit::random_suffix(24));

    // A deploy job of run KILLED_RUN, killed with SIGKILL while its command runs: its Lease
    // and fences stay.
    let dir = std::env::temp_dir().join(format!("fh-action-env-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("started");
    let m = marker.display();
    let mut killed = c.cli();
    killed
        .env("GITHUB_RUN_ID", KILLED_RUN.to_string())
        .env("GITHUB_RUN_ATTEMPT", "1")
        .args(["run", "--target", TARGET])
        .args(c.handoff_flags())
        .args(["--", "sh", "-c", &format!("touch {m}; exec sleep 600")])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut killed = killed.spawn().unwrap();
    wait_for_file(&marker, "the killed job's command").await;
    killed.kill().unwrap();
    let _ = killed.wait();
    let holder = annotation(&c.get(TARGET).await, OWNER_KEY)
        .unwrap()
        .to_string();
    assert!(
        holder.starts_with(&format!("gh{KILLED_RUN}.1-")),
        "{holder}"
    );
    stub.script(
        REPO,
        KILLED_RUN,
        1,
        vec![Answer::run(REPO, KILLED_RUN, 1, Some("completed"))],
    );

    // The next job: the Action, recover-finished-runs, a script that dumps its environment.
    let mut job = Job::new(&[("GITHUB_API_URL", &stub.url)]);
    let dump = job.temp.join("env.dump");
    let script = format!(
        "env > {d}.tmp && tr '\\0' '\\n' < /proc/$$/environ >> {d}.tmp && mv {d}.tmp {d}",
        d = sh(&dump.display().to_string())
    );
    let (args, kc) = (flux_args(&c).join("\n"), c.kubeconfig.display().to_string());
    let inputs = [
        ("command", "run"),
        ("args", args.as_str()),
        ("run", script.as_str()),
        ("kubeconfig", kc.as_str()),
        ("recover-finished-runs", "true"),
        ("github-token", token.as_str()),
    ];
    let main = finish(job.action_main(&inputs)).await;
    eprintln!("--- main step log ---\n{}", main.log);
    assert_eq!(main.code(), 0, "{}", main.log);

    // flux-handoff had the token: GitHub was asked with it, about the killed attempt.
    let seen = stub.seen();
    assert!(
        seen.iter()
            .any(|r| r.authorization.as_deref() == Some(&format!("Bearer {token}"))),
        "GitHub was never asked with the Action's token: {:?}",
        seen.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    assert!(
        main.log.contains("recovered"),
        "the killed job's hold was not recovered:\n{}",
        main.log
    );

    // The script had it nowhere: not as GITHUB_TOKEN, not as an input, not under any name.
    let env = std::fs::read_to_string(&dump).expect("the script dumped its environment");
    assert!(
        env.contains("FLUX_HANDOFF_HOLDER="),
        "not the command's environment:\n{env}"
    );
    let names: Vec<&str> = env.lines().filter_map(|l| l.split('=').next()).collect();
    let bad: Vec<&&str> = names
        .iter()
        .filter(|n| n.starts_with("INPUT_") || **n == "FLUX_HANDOFF_GITHUB_TOKEN")
        .collect();
    assert!(bad.is_empty(), "the script got {bad:?}:\n{env}");
    assert!(
        !env.contains(&token),
        "the Action's token is in the script's environment"
    );
    assert!(!main.log.contains(&token), "the token is in the step's log");
    // What was left was released by the run; nothing is held.
    assert_eq!(
        job_output(&main, "cleanup").as_deref(),
        Some("complete"),
        "{}",
        main.log
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn job_output(step: &runner::Ended, name: &str) -> Option<String> {
    step.files.outputs().get(name).cloned()
}
