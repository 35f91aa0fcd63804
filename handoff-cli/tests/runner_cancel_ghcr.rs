//! The action's `ghcr-reassert` in an emulated job (tests/common/runner.rs): the step summary
//! and the outputs report the pause and the Secrets written, and no form of the registry token
//! appears in them or in the job log (beyond the `::add-mask::` commands the runner consumes).

mod common;

use common::{runner, runner_checks as checks};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use checks::*;
use common::*;
use flux_model::source_model::{SourceModel, oci_repository, oci_repository_resource};
use ghcr_auth::credential::DockerConfig;
use kube::api::{Api, DynamicObject, PostParams};
use runner::Job;
use secrecy::{ExposeSecret, SecretString};
use testkit::registry::LocalRegistry;

const USER: &str = "robot";
const TOKEN: &str = "ghp_RUNNERCANARY0123456789abcdefghijklmn";

/// The token, `user:token`, each in every base64 alphabet, and the base64 of the whole Docker
/// config.
fn forms(host: &str) -> Vec<String> {
    let pair = format!("{USER}:{TOKEN}");
    let mut forms = vec![TOKEN.to_string(), "RUNNERCANARY".to_string()];
    for text in [TOKEN, pair.as_str()] {
        for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
            forms.push(engine.encode(text));
        }
    }
    let config = DockerConfig::from_token(host, USER, SecretString::from(TOKEN)).unwrap();
    forms.push(STANDARD.encode(config.render().expose_secret()));
    forms
}

fn assert_clean(what: &str, text: &str, forms: &[String]) {
    for f in forms {
        assert!(
            !text.contains(f.as_str()),
            "{what} holds a form of the token"
        );
    }
}

/// The log as a person sees it: the runner consumes `::add-mask::` lines (and masks their
/// values everywhere after).
fn visible(log: &str) -> String {
    log.lines()
        .filter(|l| !l.starts_with("::add-mask::"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_cancel_action_ghcr_reassert_reports_without_any_form_of_the_token() {
    testkit::install_crypto();
    let reg = LocalRegistry::start(&[(USER, TOKEN)]).await.unwrap();
    reg.push_image(USER, TOKEN, "team/app", "v1").await.unwrap();
    let forms = forms(&reg.host);
    let c = Cluster::seeded("rc-act-ghcr").await;
    let ns = c.ns.name.clone();
    let sources: Api<DynamicObject> =
        Api::namespaced_with(c.ns.client.clone(), &ns, &oci_repository_resource());
    let url = format!("oci://{}/team/app", reg.host);
    sources
        .create(
            &PostParams::default(),
            &oci_repository("app", &ns, &url, "v1", "flux-pull"),
        )
        .await
        .unwrap();
    let _model = SourceModel::start(c.ns.client.clone(), &ns);
    let before = specs(&c).await;

    let mut job = Job::new(&[("REGISTRY_TOKEN", TOKEN)]);
    let mut args = flux_args(&c);
    args.extend(
        [
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
            &ns,
            "--root-secret",
            &format!("{ns}/flux-pull"),
            "--source",
            &format!("{ns}/app"),
        ]
        .map(String::from),
    );
    let (args, kc) = (args.join("\n"), c.kubeconfig.display().to_string());
    let inputs = [
        ("command", "ghcr-reassert"),
        ("args", args.as_str()),
        ("kubeconfig", kc.as_str()),
        ("reason", "runner emulation"),
    ];
    let main = finish(job.action_main(&inputs)).await;
    job.keep_state(&main);
    eprintln!("--- main step log ---\n{}", visible(&main.log));
    assert_eq!(main.code(), 0, "{}", visible(&main.log));

    let outputs = main.files.outputs();
    assert_eq!(
        outputs.get("outcome").map(String::as_str),
        Some("succeeded")
    );
    assert_eq!(outputs.get("holder"), job.state.get("holder"));
    let written: u64 = outputs["secrets_reasserted"].parse().unwrap();
    assert!(
        written >= 2,
        "the consumer and the root Secret: {outputs:?}"
    );
    assert!(!outputs["proven_after_s"].is_empty(), "{outputs:?}");
    let summary = main.files.summary_text();
    eprintln!("--- main step summary ---\n{summary}");
    for want in [
        "### flux-handoff ghcr reassert: succeeded".to_string(),
        format!("| Secrets reasserted | {written} ("),
        format!("| Paused | Kustomization {ns}/{PARENT}"),
        "| Pause proven after |".to_string(),
        "| Exit code | 0 (succeeded) |".to_string(),
    ] {
        assert!(summary.contains(&want), "missing {want:?} in:\n{summary}");
    }
    assert!(!summary.contains("**Next:**"), "{summary}");

    let post = finish(job.action_post(&inputs)).await;
    assert_eq!(post.code(), 0, "{}", post.log);
    assert!(post.log.contains("nothing to do"), "{}", post.log);

    for (what, text) in [
        ("the main step's log", visible(&main.log)),
        ("the main step's summary", summary),
        ("the main step's outputs", main.files.output_text()),
        ("the post step's log", visible(&post.log)),
        ("the post step's summary", post.files.summary_text()),
        ("the post step's outputs", post.files.output_text()),
    ] {
        assert_clean(what, &text, &forms);
    }
    assert_restored(&c, &before).await;
}
