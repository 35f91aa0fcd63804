//! A kubeconfig for a `ServiceAccount` of the test namespace, so the real binary runs as it.

#![allow(dead_code)] // each test binary uses a different part

use std::path::PathBuf;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::Kubeconfig;
use testkit::TestNs;

/// Creates `ServiceAccount` `name` in the test namespace (if absent), requests a token for it and
/// writes a kubeconfig using it (JSON, which is YAML) next to the admin one's cluster entry.
pub async fn kubeconfig_for(ns: &TestNs, name: &str) -> PathBuf {
    let sas: Api<ServiceAccount> = ns.api();
    if sas.get_opt(name).await.unwrap().is_none() {
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        sas.create(&PostParams::default(), &sa).await.unwrap();
    }
    let req = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(vec!["https://kubernetes.default.svc".to_string()]),
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = sas
        .create_token_request(name, &PostParams::default(), &req)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let token = token.expect("TokenRequest without token");
    let admin = testkit::plane::kubeconfig().unwrap();
    let kc = Kubeconfig::read_from(&admin).unwrap();
    let mut kc = serde_json::to_value(&kc).unwrap();
    let user = format!("sa-{name}");
    kc["users"] = serde_json::json!([{ "name": user, "user": { "token": token } }]);
    for ctx in kc["contexts"].as_array_mut().unwrap() {
        ctx["context"]["user"] = serde_json::json!(user);
    }
    let dir = std::env::temp_dir().join(format!("fh-sa-{}", testkit::random_suffix(8)));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kubeconfig");
    // The token is a test credential of a throwaway ServiceAccount on the local plane.
    let text = serde_json::to_string(&kc).unwrap();
    std::fs::write(&path, text).unwrap();
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
    let kc = Kubeconfig::read_from(kubeconfig).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}
