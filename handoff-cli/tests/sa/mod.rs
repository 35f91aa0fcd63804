//! A kubeconfig for a `ServiceAccount` of the test namespace, so the real binary runs as it.

#![allow(dead_code)] // each test binary uses a different part

use std::path::PathBuf;

use testkit::TestNs;

/// Creates `ServiceAccount` `name` in the test namespace (if absent), requests a token for it and
/// writes a kubeconfig using it (JSON, which is YAML) next to the admin one's cluster entry.
pub async fn kubeconfig_for(ns: &TestNs, name: &str) -> PathBuf {
    // The token is a test credential of a throwaway ServiceAccount on the local plane.
    let token = ns.service_account_token(name).await.unwrap();
    let dir = std::env::temp_dir().join(format!("fh-sa-{}", testkit::random_suffix(8)));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kubeconfig");
    let admin = testkit::plane::kubeconfig().unwrap();
    testkit::kubeconfig_with_token(&admin, &format!("sa-{name}"), &token, &path).unwrap();
    path
}

/// The CLI as `Cluster::cli` builds it, but authenticated by `kubeconfig`.
pub fn cli_as(c: &super::common::Cluster, kubeconfig: &std::path::Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_flux-handoff"));
    cmd.env_remove("GITHUB_ACTIONS")
        .env_remove("FLUX_HANDOFF_CONFIG")
        .env_remove("FLUX_HANDOFF_HOLDER")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "--namespace",
            &c.ns.name,
            "--interval",
            "200ms",
            "--timeout",
            "30s",
        ])
        .stdin(std::process::Stdio::null());
    cmd
}

/// Runs the CLI as `kubeconfig` to completion off the async runtime.
pub async fn run_as(
    c: &super::common::Cluster,
    kubeconfig: &std::path::Path,
    args: &[&str],
) -> std::process::Output {
    let mut cmd = cli_as(c, kubeconfig);
    cmd.args(args);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// A client authenticated by `kubeconfig` (as `kubeconfig_for` wrote it).
pub async fn client_from(kubeconfig: &std::path::Path) -> kube::Client {
    let cfg = testkit::config_from(kubeconfig).await.unwrap();
    kube::Client::try_from(cfg).unwrap()
}
