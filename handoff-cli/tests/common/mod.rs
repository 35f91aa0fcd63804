//! End-to-end harness: the real `flux-handoff` binary against the local control plane, with
//! the Flux controller model running in the test process on a seeded tree.

#![allow(dead_code)] // each test binary uses a different part

pub mod events;
pub mod gate;
pub mod release;
pub mod runner;
pub mod runner_checks;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use flux_model::model::{ModelHandle, start_seeded};
use flux_suspend::object::{get_json, kustomization};
use serde_json::Value;
use testkit::TestNs;
// Not every test binary uses each of them.
#[allow(unused_imports)]
pub use testkit::fenced::{OWNER_KEY, annotation, fence_holder, suspended};

pub const PARENT: &str = "flux-system";
pub const TARGET: &str = "infrastructure";

pub struct Cluster {
    pub ns: TestNs,
    pub model: ModelHandle,
    pub kubeconfig: PathBuf,
}

impl Cluster {
    /// A seeded tree in a fresh namespace, settled.
    pub async fn seeded(prefix: &str) -> Self {
        let ns = TestNs::new(prefix).await.unwrap();
        let model = start_seeded(&ns.client, &ns.name, |c| c).await.unwrap();
        let kubeconfig = testkit::plane::kubeconfig().unwrap();
        Self {
            ns,
            model,
            kubeconfig,
        }
    }

    /// `flux-handoff` with the global flags pointing at this test's namespace, Lease and
    /// controller; extra environment from `env`.
    pub fn cli(&self) -> Command {
        self.cli_with(&self.kubeconfig, "30s")
    }

    /// [`Cluster::cli`] through another kubeconfig (a proxy's) and with its own `--timeout`.
    pub fn cli_with(&self, kubeconfig: &std::path::Path, timeout: &str) -> Command {
        cli_in(&self.ns.name, kubeconfig, timeout)
    }

    /// Flags every handoff subcommand takes: this test's Lease and controller.
    pub fn handoff_flags(&self) -> Vec<String> {
        vec![
            "--lease".into(),
            format!("{}/flux-handoff", self.ns.name),
            "--controller".into(),
            format!("{}/kustomize-controller", self.ns.name),
        ]
    }

    /// Runs the CLI to completion off the async runtime.
    pub async fn run(&self, args: &[&str]) -> Output {
        let mut cmd = self.cli();
        cmd.args(args);
        tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap()
    }

    pub async fn get(&self, name: &str) -> Value {
        get_json(&self.ns.client, &kustomization(&self.ns.name, name))
            .await
            .unwrap()
    }
}

/// `flux-handoff` through `kubeconfig` with the global flags pointing at `namespace`, a 200 ms
/// interval and `timeout`, none of the caller's CI or config environment inherited.
pub fn cli_in(namespace: &str, kubeconfig: &std::path::Path, timeout: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flux-handoff"));
    c.env_remove("GITHUB_ACTIONS")
        .env_remove("FLUX_HANDOFF_CONFIG")
        .env_remove("FLUX_HANDOFF_HOLDER")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "--namespace",
            namespace,
            "--interval",
            "200ms",
            "--timeout",
            timeout,
        ])
        .stdin(Stdio::null());
    c
}

/// `cmd` as a step of GitHub run `run`, attempt 1, of repository `repo`, whose API is the
/// stand-in at `api_url` and whose token is `token`.
pub fn as_ci_run(cmd: &mut Command, api_url: &str, repo: &str, run: u64, token: &str) {
    cmd.env("GITHUB_RUN_ID", run.to_string())
        .env("GITHUB_RUN_ATTEMPT", "1")
        .env("GITHUB_REPOSITORY", repo)
        .env("GITHUB_API_URL", api_url)
        .env("GITHUB_TOKEN", token);
}

pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until `marker` exists (a test command's first act); a minute without it fails the
/// test with `what`.
pub async fn wait_for_file(marker: &std::path::Path, what: &str) {
    let give_up = tokio::time::Instant::now() + std::time::Duration::from_mins(1);
    while !marker.exists() {
        assert!(
            tokio::time::Instant::now() < give_up,
            "waited a minute for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Polls `cond` every 20 ms; a condition still false after a minute fails the test with
/// `what`.
pub async fn wait_for(mut cond: impl FnMut() -> bool, what: &str) {
    let give_up = tokio::time::Instant::now() + std::time::Duration::from_mins(1);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < give_up,
            "waited a minute for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Waits (off the runtime's threads) for a spawned CLI process to end; its exit code (-1 when
/// a signal ended it) and its stderr.
pub async fn ended(mut child: std::process::Child) -> (i32, String) {
    tokio::task::spawn_blocking(move || {
        let status = child.wait().unwrap();
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        (status.code().unwrap_or(-1), err)
    })
    .await
    .unwrap()
}
