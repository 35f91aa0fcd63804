//! End to end: `ghcr check` and `ghcr reassert` against a real local registry
//! (`testkit::registry`), the shared API server and, for source proofs, the source-controller
//! model (`flux_model::source_model`).

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};

use common::*;
use flux_model::source_model::{SourceModel, oci_repository, oci_repository_resource};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::Value;
use testkit::TestNs;
use testkit::registry::LocalRegistry;

const USER: &str = "robot";
const PASS: &str = "s3cret-registry-password-1";

/// A registry holding `team/app:v1`.
async fn registry() -> LocalRegistry {
    testkit::install_crypto();
    let reg = LocalRegistry::start(&[(USER, PASS)]).await.unwrap();
    reg.push_image(USER, PASS, "team/app", "v1").await.unwrap();
    reg
}

/// `flux-handoff` with no kubeconfig anywhere: `KUBECONFIG` names a missing file and `HOME` is
/// empty, so any cluster call would fail.
fn bare_cli(token: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flux-handoff"));
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env("HOME", "/nonexistent")
        .env("REGISTRY_TOKEN", token)
        .stdin(Stdio::null());
    c
}

async fn output(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

fn check_args(reg: &LocalRegistry) -> Vec<String> {
    [
        "ghcr",
        "check",
        "--credential-env",
        "REGISTRY_TOKEN",
        "--username",
        USER,
        "--image",
        &format!("{}/team/app:v1", reg.host),
        "--insecure-http-host",
        &reg.host,
    ]
    .map(String::from)
    .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_proves_a_good_credential_with_exit_0_and_needs_no_kubeconfig() {
    let reg = registry().await;
    let mut cmd = bare_cli(PASS);
    cmd.args(check_args(&reg));
    let out = output(cmd).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("credential proven for 1 image(s)"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_with_a_wrong_password_exits_5_naming_the_image() {
    let reg = registry().await;
    let mut cmd = bare_cli("wrong-password");
    cmd.args(check_args(&reg)).args(["--output", "json"]);
    let out = output(cmd).await;
    assert_eq!(code(&out), 5, "{}", stderr(&out));
    let line = stderr(&out);
    assert!(
        line.contains(&format!("{}/team/app:v1: unauthorized (401", reg.host)),
        "{line}"
    );
    assert_eq!(line.lines().count(), 1, "{line}");
    let doc: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(doc["exit_code"], 5);
    assert_eq!(doc["facts"]["images"][0]["proven"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_of_a_missing_image_exits_5_with_not_found() {
    let reg = registry().await;
    let mut cmd = bare_cli(PASS);
    let mut args = check_args(&reg);
    args[7] = format!("{}/team/absent:v9", reg.host);
    cmd.args(args);
    let out = output(cmd).await;
    assert_eq!(code(&out), 5, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("team/absent:v9: not found"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_with_a_malformed_config_exits_2_with_one_line_naming_the_field_not_the_value() {
    let dir = std::env::temp_dir().join(format!("ghcr-cfg-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("flux-handoff.toml");
    std::fs::write(
        &path,
        "[ghcr]\nusername = \"robot\"\npassword = \"hunter2-do-not-print\"\n",
    )
    .unwrap();
    let mut cmd = bare_cli(PASS);
    cmd.arg("--config").arg(&path).args(["ghcr", "check"]);
    let out = output(cmd).await;
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("password"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_with_a_malformed_docker_config_exits_2_naming_the_rule() {
    let reg = registry().await;
    let mut cmd = bare_cli(r#"{"auths": {"x": "#);
    cmd.args([
        "ghcr",
        "check",
        "--credential-env",
        "REGISTRY_TOKEN",
        "--image",
        &format!("{}/team/app:v1", reg.host),
        "--insecure-http-host",
        &reg.host,
    ]);
    let out = output(cmd).await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("not valid JSON"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_negative_check_passes_when_the_registry_refuses_a_wrong_password() {
    let reg = registry().await;
    let mut cmd = bare_cli(PASS);
    cmd.args(check_args(&reg)).arg("--negative-check");
    let out = output(cmd).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("negative check: a wrong password is refused for 1 image(s)"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_in_github_actions_prints_the_masks_before_anything_else() {
    let reg = registry().await;
    let mut cmd = bare_cli(PASS);
    cmd.env("GITHUB_ACTIONS", "true").args(check_args(&reg));
    let out = output(cmd).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let first = err.lines().next().unwrap();
    assert_eq!(first, format!("::add-mask::{PASS}"));
    let lines: Vec<&str> = err.lines().collect();
    let last_mask = lines
        .iter()
        .rposition(|l| l.starts_with("::add-mask::"))
        .unwrap();
    let first_other = lines
        .iter()
        .position(|l| !l.starts_with("::add-mask::"))
        .unwrap();
    assert!(last_mask < first_other, "{err}");
}

/// Three consumer namespaces (labelled for the selector test) plus the root namespace.
struct Consumers {
    names: Vec<String>,
}

impl Consumers {
    async fn new(label: &str) -> Self {
        let mut names = Vec::new();
        for i in 0..3 {
            let ns = TestNs::new(&format!("ghcr-c{i}")).await.unwrap();
            let api: Api<Namespace> = Api::all(ns.client.clone());
            let patch = serde_json::json!({ "metadata": { "labels": { label: "true" } } });
            api.patch(
                &ns.name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(patch),
            )
            .await
            .unwrap();
            names.push(ns.name);
        }
        Self { names }
    }
}

async fn secret(client: &kube::Client, ns: &str, name: &str) -> Option<Secret> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

fn reassert_args(c: &Cluster, reg: &LocalRegistry, consumers: &Consumers) -> Vec<String> {
    let mut a = [
        "ghcr",
        "reassert",
        "--credential-env",
        "REGISTRY_TOKEN",
        "--username",
        USER,
        "--image",
        &format!("{}/team/app:v1", reg.host),
        "--insecure-http-host",
        &reg.host,
        "--secret-name",
        "pull",
        "--namespace-list",
        &consumers.names.join(","),
        "--root-secret",
        &format!("{}/flux-pull", c.ns.name),
    ]
    .map(String::from)
    .to_vec();
    a.extend(c.handoff_flags());
    a
}

async fn run_with_token(c: &Cluster, args: &[String], token: &str) -> Output {
    let mut cmd = c.cli();
    cmd.env("REGISTRY_TOKEN", token).args(args);
    output(cmd).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reassert_without_targets_creates_every_secret_then_a_second_run_changes_nothing() {
    let reg = registry().await;
    let c = Cluster::seeded("ghcr-plain").await;
    let consumers = Consumers::new("ghcr-plain").await;
    let args = reassert_args(&c, &reg, &consumers);
    let out = run_with_token(&c, &args, PASS).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("no targets: reasserting without a pause or Lease"),
        "{err}"
    );
    assert!(
        err.contains("secrets reasserted: created=4 updated=0 unchanged=0"),
        "{err}"
    );
    let mut versions = BTreeMap::new();
    for ns in consumers.names.iter().chain([&c.ns.name]) {
        let name = if *ns == c.ns.name {
            "flux-pull"
        } else {
            "pull"
        };
        let s = secret(&c.ns.client, ns, name)
            .await
            .expect("secret created");
        assert_eq!(s.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
        let data: Value =
            serde_json::from_slice(&s.data.as_ref().unwrap()[".dockerconfigjson"].0).unwrap();
        assert!(data["auths"][&reg.host].is_object());
        versions.insert(ns.clone(), s.metadata.resource_version.unwrap());
    }
    // No Lease was taken.
    let leases: Api<Lease> = c.ns.api();
    assert!(leases.get_opt("flux-handoff").await.unwrap().is_none());

    let out = run_with_token(&c, &args, PASS).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("secrets reasserted: created=0 updated=0 unchanged=4"),
        "{}",
        stderr(&out)
    );
    for (ns, rv) in versions {
        let name = if ns == c.ns.name { "flux-pull" } else { "pull" };
        let s = secret(&c.ns.client, &ns, name).await.unwrap();
        assert_eq!(
            s.metadata.resource_version.unwrap(),
            rv,
            "{ns} was rewritten"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reassert_with_a_selector_updates_a_stale_secret_and_reports_json_facts() {
    let reg = registry().await;
    let c = Cluster::seeded("ghcr-sel").await;
    let label = format!("ghcr-sel-{}", testkit::random_suffix(4));
    let consumers = Consumers::new(&label).await;
    let mut args = reassert_args(&c, &reg, &consumers);
    // First with a stale credential (check would refuse it, so write it with the library).
    let stale = ghcr_auth::credential::DockerConfig::from_token(
        &reg.host,
        USER,
        secrecy::SecretString::from("old-token"),
    )
    .unwrap();
    let target = ghcr_auth::plan::SecretTarget::new(&consumers.names[1], "pull");
    ghcr_auth::reassert::Reasserter::new(c.ns.client.clone())
        .reassert_one(&stale, &target)
        .await
        .unwrap();
    let i = args.iter().position(|a| a == "--namespace-list").unwrap();
    args[i] = "--namespace-selector".into();
    args[i + 1] = format!("{label}=true");
    args.extend(["--output".into(), "json".into()]);
    let out = run_with_token(&c, &args, PASS).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("secrets reasserted: created=3 updated=1 unchanged=0"),
        "{}",
        stderr(&out)
    );
    let doc: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(doc["facts"]["secret_counts"]["created"], 3);
    assert_eq!(doc["facts"]["secret_counts"]["updated"], 1);
    let secrets = doc["facts"]["secrets"].as_array().unwrap();
    assert_eq!(secrets.last().unwrap()["role"], "root");
    assert_eq!(secrets.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reassert_with_targets_proves_the_pause_and_releases_it_afterwards() {
    let reg = registry().await;
    let c = Cluster::seeded("ghcr-pause").await;
    let consumers = Consumers::new("ghcr-pause").await;
    let before = c.get(TARGET).await;
    let mut args = reassert_args(&c, &reg, &consumers);
    args.extend(["--target".into(), TARGET.into()]);
    let out = run_with_token(&c, &args, PASS).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let proven = err.find("pause proven").expect("pause proven");
    let written = err.find("secrets reasserted: created=4").expect("secrets");
    let released = err.find("lease released").expect("lease released");
    assert!(proven < written && written < released, "{err}");
    // The server holds no pause and no owner afterwards, and the Lease has no holder.
    let after = c.get(TARGET).await;
    assert!(!suspended(&after));
    assert_eq!(annotation(&after, OWNER_KEY), None);
    assert_eq!(
        after["metadata"]["annotations"],
        before["metadata"]["annotations"]
    );
    assert!(!suspended(&c.get(PARENT).await));
    let lease = c.ns.api::<Lease>().get("flux-handoff").await.unwrap();
    assert_eq!(lease.spec.and_then(|s| s.holder_identity), None);
    assert!(
        secret(&c.ns.client, &c.ns.name, "flux-pull")
            .await
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reassert_is_refused_with_exit_3_while_another_holder_has_the_lease_and_writes_nothing() {
    let reg = registry().await;
    let c = Cluster::seeded("ghcr-held").await;
    let consumers = Consumers::new("ghcr-held").await;
    let flags = c.handoff_flags();
    let mut pause = vec!["pause", "--target", TARGET];
    pause.extend(flags.iter().map(String::as_str));
    let first = c.run(&pause).await;
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let mut args = reassert_args(&c, &reg, &consumers);
    args.extend(["--target".into(), TARGET.into()]);
    let out = run_with_token(&c, &args, PASS).await;
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("is held by"), "{}", stderr(&out));
    for ns in &consumers.names {
        assert!(secret(&c.ns.client, ns, "pull").await.is_none(), "{ns}");
    }
    assert!(
        secret(&c.ns.client, &c.ns.name, "flux-pull")
            .await
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reassert_with_a_refused_credential_exits_5_before_any_cluster_call() {
    let reg = registry().await;
    let c = Cluster::seeded("ghcr-first").await;
    let consumers = Consumers::new("ghcr-first").await;
    let mut args = reassert_args(&c, &reg, &consumers);
    args.extend(["--target".into(), TARGET.into()]);
    let out = run_with_token(&c, &args, "expired-token").await;
    assert_eq!(code(&out), 5, "{}", stderr(&out));
    assert!(
        c.ns.api::<Lease>()
            .get_opt("flux-handoff")
            .await
            .unwrap()
            .is_none()
    );
    assert!(!suspended(&c.get(TARGET).await));
    for ns in &consumers.names {
        assert!(secret(&c.ns.client, ns, "pull").await.is_none(), "{ns}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reassert_with_a_source_proves_flux_pulls_with_the_new_secret() {
    let reg = registry().await;
    let digest = reg.push_image(USER, PASS, "team/app", "v2").await.unwrap();
    let c = Cluster::seeded("ghcr-src").await;
    let consumers = Consumers::new("ghcr-src").await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(c.ns.client.clone(), &c.ns.name, &oci_repository_resource());
    let url = format!("oci://{}/team/app", reg.host);
    api.create(
        &PostParams::default(),
        &oci_repository("app", &c.ns.name, &url, "v2", "flux-pull"),
    )
    .await
    .unwrap();
    let _model = SourceModel::start(c.ns.client.clone(), &c.ns.name);
    let mut args = reassert_args(&c, &reg, &consumers);
    args.extend([
        "--target".into(),
        TARGET.into(),
        "--source".into(),
        format!("{}/app", c.ns.name),
    ]);
    let out = run_with_token(&c, &args, PASS).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "flux source proven: OCIRepository {}/app ready at v2@{digest}",
            c.ns.name
        )),
        "{}",
        stderr(&out)
    );
    let held = api.get("app").await.unwrap();
    assert_eq!(
        held.data
            .pointer("/status/conditions/0/status")
            .and_then(Value::as_str),
        Some("True")
    );
    assert!(!suspended(&c.get(TARGET).await));
}
