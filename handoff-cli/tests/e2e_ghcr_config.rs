//! End to end: every `[ghcr]` config key reaches the command when no flag overrides it (the CLI
//! turns the table into ghcr-auth's lower settings layer), against a real local registry.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use common::*;
use testkit::registry::LocalRegistry;

const USER: &str = "robot";
const PASS: &str = "s3cret-config-password-7";

/// A config file holding `text`, in a fresh directory.
fn config(text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ghcr-cfg-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("flux-handoff.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `flux-handoff --config <config> <args>` with no kubeconfig anywhere.
async fn run(config: &PathBuf, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flux-handoff"));
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env("HOME", "/nonexistent")
        .env("CONFIG_TOKEN", PASS)
        .stdin(Stdio::null())
        .arg("--config")
        .arg(config)
        .args(args);
    tokio::task::spawn_blocking(move || c.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ghcr_config_supplies_every_credential_key_to_check() {
    testkit::install_crypto();
    let reg = LocalRegistry::start(&[(USER, PASS)]).await.unwrap();
    reg.push_image(USER, PASS, "team/app", "v1").await.unwrap();
    let token = config("");
    std::fs::write(&token, PASS).unwrap();
    let keys = |source: &str| {
        format!(
            "[ghcr]\n{source}\nusername = \"{USER}\"\nimages = [\"{host}/team/app:v1\"]\n\
             insecure_http_hosts = [\"{host}\"]\nnegative_check = true\n",
            host = reg.host
        )
    };
    for source in [
        format!("credential_file = {:?}", token.display().to_string()),
        "credential_env = \"CONFIG_TOKEN\"".to_string(),
    ] {
        let out = run(&config(&keys(&source)), &["ghcr", "check"]).await;
        let err = stderr(&out);
        assert_eq!(code(&out), 0, "{source}: {err}");
        assert!(err.contains("credential proven for 1 image(s)"), "{err}");
        assert!(
            err.contains("negative check: a wrong password is refused for 1 image(s)"),
            "{err}"
        );
        assert!(!err.contains(PASS), "{err}");
    }
    std::fs::remove_file(token).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ghcr_config_supplies_every_secret_key_to_rbac() {
    let path = config(
        "[ghcr]\nsecret_name = \"pull\"\nnamespaces = [\"team-a\", \"team-b\"]\n\
         root_secret = \"flux-system/ghcr-root\"\n\
         sources = [\"helm/flux-system/charts\", \"flux-system/apps\"]\n",
    );
    let out = run(&path, &["rbac"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let yaml = stdout(&out);
    for want in [
        "namespace: team-a",
        "namespace: team-b",
        "resourceNames: [\"pull\"]",
        "resourceNames: [\"ghcr-root\"]",
        "resources: [\"helmrepositories\"]",
        "resourceNames: [\"charts\"]",
        "resources: [\"ocirepositories\"]",
        "resourceNames: [\"apps\"]",
    ] {
        assert!(yaml.contains(want), "{want} missing from:\n{yaml}");
    }
}
