//! `fanout_complete_` end to end: `ghcr reassert` along the External Secrets route on the shared
//! API server, which has no ESO CRDs. With targets to pause, the incomplete fan-out is refused
//! before the pause: no Lease, no fence, no Secret written.

mod common;

use std::process::Output;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use testkit::registry::LocalRegistry;

const USER: &str = "robot";
const PASS: &str = "s3cret-registry-password-2";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fanout_complete_cli_refuses_an_incomplete_route_before_the_pause_with_exit_3() {
    testkit::install_crypto();
    let reg = LocalRegistry::start(&[(USER, PASS)]).await.unwrap();
    reg.push_image(USER, PASS, "team/app", "v1").await.unwrap();
    let c = Cluster::seeded("fanout-cli").await;
    let ns = c.ns.name.clone();
    let before = c.get(TARGET).await;
    let mut args = vec![
        "ghcr".to_string(),
        "reassert".into(),
        "--credential-env".into(),
        "REGISTRY_TOKEN".into(),
        "--username".into(),
        USER.into(),
        "--image".into(),
        format!("{}/team/app:v1", reg.host),
        "--insecure-http-host".into(),
        reg.host.clone(),
        "--secret-key".into(),
        format!("{ns}/variables-base:ghcr_dockerconfigjson"),
        "--push-secret".into(),
        format!("{ns}/seed-ghcr"),
        "--external-secret".into(),
        "ghcr-auth".into(),
        "--namespace-list".into(),
        ns.clone(),
        "--root-secret".into(),
        format!("{ns}/ghcr-auth"),
        "--target".into(),
        format!("{ns}/{TARGET}"),
    ];
    args.extend(c.handoff_flags());
    let mut cmd = c.cli();
    cmd.env("REGISTRY_TOKEN", PASS).args(&args);
    let out: Output = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let err = stderr(&out);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.contains("fan-out incomplete, nothing written: missing staging Secret")
            && last.contains("CRD externalsecrets.external-secrets.io/v1"),
        "{err}"
    );
    // Refused before the pause: no Lease, the target untouched, no Secret created.
    assert!(
        c.ns.api::<Lease>()
            .get_opt("flux-handoff")
            .await
            .unwrap()
            .is_none()
    );
    let after = c.get(TARGET).await;
    assert_eq!(
        after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "the target was not fenced"
    );
    let secrets: Api<Secret> = c.ns.api();
    assert!(secrets.get_opt("ghcr-auth").await.unwrap().is_none());
    assert!(!err.contains(PASS));
}
