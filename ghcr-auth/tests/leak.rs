//! Tier 2/3 leak test: run every path of the crate (validation, registry proof, reassertion,
//! races, RBAC refusal, transport errors) with TRACE logging of every crate captured, then
//! render every value, report and error, and assert that no form of any credential used —
//! token, its base64 forms, the Docker config, its base64 — appears anywhere, nor on the
//! Secrets' metadata or in the namespace's Events.

mod support;

use std::fmt::Write as _;
use std::io::Write;
use std::sync::{Arc, Mutex};

use ghcr_auth::BoxError;
use ghcr_auth::MaskCommands;
use ghcr_auth::Redactor;
use ghcr_auth::credential::DockerConfig;
use ghcr_auth::image::ImageRef;
use ghcr_auth::plan::SecretTarget;
use ghcr_auth::reassert::{Consumers, Reasserter, TargetSpec};
use ghcr_auth::registry::{ProverOptions, RegistryProver};
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{ListParams, Patch, PatchParams};
use secrecy::SecretString;
use support::registry::LocalRegistry;
use testkit::TestNs;

const USER: &str = "leak-robot";
const GOOD: &str = "ghp_LEAKcanaryGOOD0123456789abcdefghij";
const BAD: &str = "ghp_LEAKcanaryBAD9876543210zyxwvutsrqp";

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut out = format!("{e} | {e:?}");
    let mut cur = e.source();
    while let Some(s) = cur {
        let _ = write!(out, " | {s} | {s:?}");
        cur = s.source();
    }
    out
}

#[tokio::test]
#[allow(clippy::too_many_lines)] // one run through every path, read top to bottom
async fn no_form_of_any_credential_reaches_logs_outputs_errors_or_the_cluster() {
    let logs = Buffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    support::crypto();
    let mut shown: Vec<String> = Vec::new();

    // Validation refusals that contain the token in odd places.
    for text in [
        format!(r#"{{"auths":{{"ghcr.io":{{"username":"u","password":"{GOOD}\u0001"}}}}}}"#),
        format!(r#"{{"auths":{{"ghcr.io":{{"{GOOD}":"x"}}}}}}"#),
        format!(r#"{{"auths":{{"{GOOD}":{{"username":"u","password":"p"}}}}}}"#),
        format!("{{\"auths\": {GOOD}"),
    ] {
        let p = DockerConfig::parse(&text).unwrap_err();
        shown.push(format!("{p} {p:?}"));
    }

    // Registry proof: good, bad, and a transport error.
    let reg = LocalRegistry::start(&[(USER, GOOD)]).await.unwrap();
    reg.push_image(USER, GOOD, "team/app", "v1").await.unwrap();
    let image: ImageRef = format!("{}/team/app:v1", reg.host).parse().unwrap();
    let good = DockerConfig::from_token(&reg.host, USER, SecretString::from(GOOD)).unwrap();
    let bad = DockerConfig::from_token(&reg.host, USER, SecretString::from(BAD)).unwrap();
    let prover =
        RegistryProver::new(ProverOptions::default().with_insecure_loopback(true)).unwrap();
    for cfg in [&good, &bad] {
        let o = prover.prove(cfg, &image).await.unwrap();
        shown.push(format!("{o} {o:?}"));
    }
    let dead: ImageRef = "127.0.0.1:9/team/app:v1".parse().unwrap();
    let dead_cfg = DockerConfig::from_token("127.0.0.1:9", USER, SecretString::from(GOOD)).unwrap();
    let e = prover.prove(&dead_cfg, &dead).await.unwrap_err();
    shown.push(chain(&e));

    // Reassertion: create, unchanged, update, a racing writer, a forbidden identity, a gate error.
    let ns = TestNs::new("leak").await.unwrap();
    let spec = TargetSpec::new("pull", Consumers::Namespaces(vec![ns.name.clone()]))
        .with_root(SecretTarget::new(&ns.name, "root"));
    let reasserter = Reasserter::new(ns.client.clone());
    for cfg in [&bad, &bad, &good] {
        let r = reasserter.reassert(cfg, &spec).await.unwrap();
        shown.push(format!("{r} {r:?}"));
    }
    let api = ns.api::<Secret>();
    let racing = move || {
        let api = api.clone();
        async move {
            let bump = serde_json::json!({"metadata": {"labels": {"bumped": "yes"}}});
            api.patch("pull", &PatchParams::default(), &Patch::Merge(&bump))
                .await?;
            Ok::<(), BoxError>(())
        }
    };
    let r = Reasserter::new(ns.client.clone())
        .with_gate(racing)
        .reassert(&bad, &spec)
        .await
        .unwrap();
    shown.push(format!("{r} {r:?}"));
    let sa = ns.service_account_client("nobody").await.unwrap();
    let r = Reasserter::new(sa).reassert(&good, &spec).await.unwrap();
    shown.push(format!("{r} {r:?}"));
    let failing = || async { Err::<(), BoxError>("lease lost".into()) };
    let e = Reasserter::new(ns.client.clone())
        .with_gate(failing)
        .reassert_one(&bad, &SecretTarget::new(&ns.name, "pull"))
        .await
        .unwrap_err();
    shown.push(chain(&e));
    shown.push(format!(
        "{good:?} {:?} {:?}",
        MaskCommands::for_config(&good),
        Redactor::new(&good)
    ));

    // What the cluster shows about the Secrets apart from their data, and the Events.
    for s in ns
        .api::<Secret>()
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        shown.push(serde_json::to_string(&s.metadata).unwrap());
    }
    for e in ns
        .api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        shown.push(serde_json::to_string(&e).unwrap());
    }

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("secret reassertion"),
        "the run must have logged something"
    );
    let everything = format!("{}\n{logs}", shown.join("\n"));
    for cfg in [&good, &bad, &dead_cfg] {
        let redactor = Redactor::new(cfg);
        assert!(
            !redactor.leaks_in(&everything),
            "a credential form leaked:\n{}",
            redactor.redact(&everything)
        );
    }
    assert!(!everything.contains("LEAKcanary"));
}
