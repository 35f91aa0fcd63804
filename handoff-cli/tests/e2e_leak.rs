//! Leak tests: a recognisable token run through `ghcr check` and `ghcr reassert` (with `-vv`
//! logs, JSON output, a pause, a source proof) must never appear — raw, in any base64 form, or
//! as the base64 of the whole Docker config — in stdout, stderr, the JSON document, annotations
//! or Events on the server, or the Secrets' annotations.

mod common;

use std::process::{Command, Output, Stdio};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use common::*;
use flux_model::source_model::{SourceModel, oci_repository, oci_repository_resource};
use ghcr_auth::credential::DockerConfig;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use secrecy::{ExposeSecret, SecretString};
use testkit::registry::LocalRegistry;

const USER: &str = "robot";
const CANARY: &str = "ghp_LEAKCANARY0123456789abcdefghijklmnopqr";

/// Every form of the canary that must not appear anywhere.
fn forbidden_forms(host: &str) -> Vec<String> {
    let mut forms = vec![CANARY.to_string()];
    let pair = format!("{USER}:{CANARY}");
    for text in [CANARY, pair.as_str()] {
        for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
            forms.push(engine.encode(text));
        }
    }
    let config = DockerConfig::from_token(host, USER, SecretString::from(CANARY)).unwrap();
    let rendered = config.render();
    forms.push(STANDARD.encode(rendered.expose_secret()));
    // A recognisable fragment: the token's distinctive middle, in case of truncation.
    forms.push("LEAKCANARY".into());
    forms
}

fn assert_clean(what: &str, text: &str, forms: &[String]) {
    for form in forms {
        assert!(
            !text.contains(form.as_str()),
            "{what} leaks a credential form"
        );
    }
}

async fn registry() -> LocalRegistry {
    testkit::install_crypto();
    let reg = LocalRegistry::start(&[(USER, CANARY)]).await.unwrap();
    reg.push_image(USER, CANARY, "team/app", "v1")
        .await
        .unwrap();
    reg
}

async fn output(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leak_check_prints_no_form_of_the_token_with_trace_logs_json_or_failures() {
    let reg = registry().await;
    let forms = forbidden_forms(&reg.host);
    for (token, image, expect) in [
        (CANARY, "team/app:v1", 0),
        (CANARY, "team/absent:v1", 5),
        ("ghp_LEAKCANARYwrongwrongwrong", "team/app:v1", 5),
    ] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flux-handoff"));
        cmd.env_remove("GITHUB_ACTIONS")
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env("REGISTRY_TOKEN", token)
            .stdin(Stdio::null())
            .args([
                "-vv",
                "--output",
                "json",
                "ghcr",
                "check",
                "--credential-env",
                "REGISTRY_TOKEN",
                "--username",
                USER,
                "--image",
                &format!("{}/{image}", reg.host),
                "--insecure-http-host",
                &reg.host,
                "--negative-check",
            ]);
        let out = output(cmd).await;
        assert_eq!(code(&out), expect, "{}", stderr(&out));
        assert_clean("stdout", &stdout(&out), &forms);
        assert_clean("stderr", &stderr(&out), &forms);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leak_reassert_leaves_no_form_of_the_token_in_output_annotations_or_events() {
    let reg = registry().await;
    let forms = forbidden_forms(&reg.host);
    let c = Cluster::seeded("ghcr-leak").await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(c.ns.client.clone(), &c.ns.name, &oci_repository_resource());
    let url = format!("oci://{}/team/app", reg.host);
    api.create(
        &PostParams::default(),
        &oci_repository("app", &c.ns.name, &url, "v1", "flux-pull"),
    )
    .await
    .unwrap();
    let _model = SourceModel::start(c.ns.client.clone(), &c.ns.name);
    let mut args: Vec<String> = [
        "-vv",
        "--output",
        "json",
        "--reason",
        "leak test run",
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
        &c.ns.name,
        "--root-secret",
        &format!("{}/flux-pull", c.ns.name),
        "--target",
        TARGET,
        "--source",
        &format!("{}/app", c.ns.name),
    ]
    .map(String::from)
    .to_vec();
    args.extend(c.handoff_flags());
    let mut cmd = c.cli();
    cmd.env_remove("GITHUB_ACTIONS")
        .env("REGISTRY_TOKEN", CANARY)
        .args(&args);
    let out = output(cmd).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("flux source proven"),
        "{}",
        stderr(&out)
    );
    assert_clean("stdout (JSON document)", &stdout(&out), &forms);
    assert_clean("stderr (-vv logs)", &stderr(&out), &forms);

    // The Secrets hold it in data only: never in their metadata.
    for name in ["pull", "flux-pull"] {
        let s = c.ns.api::<Secret>().get(name).await.unwrap();
        assert_clean(
            "Secret metadata",
            &serde_json::to_string(&s.metadata).unwrap(),
            &forms,
        );
    }
    // Annotations of every Flux object the run touched, and every Event in the namespace.
    for name in [PARENT, TARGET] {
        let obj = c.get(name).await;
        assert_clean("Flux object metadata", &obj["metadata"].to_string(), &forms);
    }
    let source = api.get("app").await.unwrap();
    assert_clean(
        "OCIRepository",
        &serde_json::to_string(&source).unwrap(),
        &forms,
    );
    let events =
        c.ns.api::<Event>()
            .list(&ListParams::default())
            .await
            .unwrap();
    assert!(!events.items.is_empty(), "the run records Events");
    assert_clean(
        "Events",
        &serde_json::to_string(&events.items).unwrap(),
        &forms,
    );
}
