//! Tiers 2 and 3: the steps a caller runs ([`ghcr_auth::check_credential`], [`ghcr_auth::route::FanoutRun`] on the plain route) against a real local registry
//! and the real kube-apiserver: what they report, how they fail, and what the server holds.

mod support;

use std::sync::Arc;
use std::time::Duration;

use flux_fence::{Holder, Lease, LeaseAcquire, LeaseConfig, SystemClock};
use ghcr_auth::credential::DockerConfig;
use ghcr_auth::credential_input;
use ghcr_auth::fanout::Route;
use ghcr_auth::reassert::{Consumers, Reasserter, TargetSpec};
use ghcr_auth::route::FanoutRun;
use ghcr_auth::{ErrorClass, FlowError, GhcrSettings, Progress};
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams};
use secrecy::SecretString;
use serde_json::{Value, json};
use support::registry::LocalRegistry;
use testkit::TestNs;

const USER: &str = "robot";
const PASS: &str = "flow-registry-pass-0123456789";

/// What a step reported, in order.
#[derive(Debug, Default)]
struct Recorded {
    phases: Vec<String>,
    facts: Vec<(String, Value)>,
}

impl Progress for Recorded {
    fn phase(&mut self, line: &str) {
        self.phases.push(line.to_string());
    }
    fn fact(&mut self, key: &str, value: Value) {
        self.facts.push((key.to_string(), value));
    }
}

impl Recorded {
    fn fact(&self, key: &str) -> &Value {
        &self.facts.iter().find(|(k, _)| k == key).unwrap().1
    }
}

/// Settings reading `password` from a fresh file as a bare token for `image` on `host`.
fn settings(host: &str, image: &str, password: &str, negative: bool) -> GhcrSettings {
    let path = std::env::temp_dir().join(format!(
        "ghcr-flow-{}-{}",
        std::process::id(),
        ghcr_auth::source::new_nonce()
    ));
    std::fs::write(&path, password).unwrap();
    let mut s = GhcrSettings::default();
    s.credential_file = Some(path);
    s.username = Some(USER.into());
    s.images = vec![format!("{host}/{image}")];
    s.insecure_http_hosts = vec![host.into()];
    s.negative_check = negative.then_some(true);
    s
}

#[tokio::test]
async fn flow_check_proves_the_credential_then_that_a_wrong_password_is_refused() {
    support::crypto();
    let reg = LocalRegistry::start(&[(USER, PASS)]).await.unwrap();
    reg.push_image(USER, PASS, "team/app", "v1").await.unwrap();
    let flags = settings(&reg.host, "team/app:v1", PASS, true);
    let input = credential_input(&flags, &GhcrSettings::default()).unwrap();
    let mut seen = Recorded::default();
    let checked = ghcr_auth::check_credential(&input, Vec::new(), &mut seen).await;
    std::fs::remove_file(flags.credential_file.unwrap()).unwrap();
    let config = checked.unwrap();
    assert!(config.credential_for(&reg.host).is_some());
    assert_eq!(
        seen.phases,
        [
            "credential proven for 1 image(s)",
            "negative check: a wrong password is refused for 1 image(s)"
        ]
    );
    assert_eq!(seen.fact("images")[0]["proven"], json!(true));
    assert!(!format!("{seen:?}").contains(PASS));
}

#[tokio::test]
async fn flow_check_of_a_wrong_password_is_a_registry_refusal_naming_the_image_only() {
    support::crypto();
    let reg = LocalRegistry::start(&[(USER, PASS)]).await.unwrap();
    reg.push_image(USER, PASS, "team/app", "v1").await.unwrap();
    let wrong = "flow-wrong-password-42";
    let flags = settings(&reg.host, "team/app:v1", wrong, false);
    let input = credential_input(&flags, &GhcrSettings::default()).unwrap();
    let mut seen = Recorded::default();
    let checked = ghcr_auth::check_credential(&input, Vec::new(), &mut seen).await;
    std::fs::remove_file(flags.credential_file.unwrap()).unwrap();
    let e = checked.unwrap_err();
    assert!(matches!(e, FlowError::RegistryRefused(_)), "{e:?}");
    assert_eq!(e.class(), ErrorClass::Registry);
    let line = e.to_string();
    assert!(
        line.starts_with(&format!(
            "registry refused the credential: {}/team/app:v1: ",
            reg.host
        )),
        "{line}"
    );
    assert!(seen.phases.is_empty());
    assert_eq!(seen.fact("images")[0]["proven"], json!(false));
    for text in [line, format!("{e:?}"), format!("{seen:?}")] {
        assert!(!text.contains(wrong) && !text.contains(PASS), "{text}");
    }
}

fn work(token: &str, consumers: Vec<String>) -> FanoutRun {
    let config = DockerConfig::from_token("ghcr.io", USER, SecretString::from(token)).unwrap();
    let spec = TargetSpec::new("pull", Consumers::Namespaces(consumers));
    FanoutRun::new(
        config,
        Route::new(spec),
        Vec::new(),
        Duration::from_secs(5),
        Duration::from_millis(100),
    )
}

#[tokio::test]
async fn flow_reassertion_reports_counts_and_refuses_an_incomplete_run_after_the_facts() {
    let ns = TestNs::new("flow-counts").await.unwrap();
    let missing = format!("{}-absent", ns.name);
    let reasserter = Reasserter::new(ns.client.clone());

    let mut seen = Recorded::default();
    let e = work("flow-token-1", vec![ns.name.clone(), missing.clone()])
        .run(&reasserter, &ns.client, &mut seen)
        .await
        .unwrap_err();
    assert_eq!(e.class(), ErrorClass::KubeApi, "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "secrets not reasserted: {missing}/pull: namespace missing (0 later Secret(s) not \
             attempted; nothing was overwritten)"
        )
    );
    assert_eq!(
        seen.fact("secret_counts"),
        &json!({ "created": 1, "namespace_missing": 1 })
    );
    assert!(seen.phases.is_empty(), "{:?}", seen.phases);

    let mut seen = Recorded::default();
    work("flow-token-1", vec![ns.name.clone()])
        .run(&reasserter, &ns.client, &mut seen)
        .await
        .unwrap();
    assert_eq!(
        seen.phases,
        ["secrets reasserted: created=0 updated=0 unchanged=1"]
    );
    let held = Api::<Secret>::namespaced(ns.client.clone(), &ns.name)
        .get("pull")
        .await
        .unwrap();
    assert!(ghcr_auth::plan::holds(
        &held,
        &work("flow-token-1", vec![]).config
    ));
}

#[tokio::test]
async fn flow_reassertion_under_a_lost_lease_is_refused_and_writes_nothing() {
    let ns = TestNs::new("flow-lease").await.unwrap();
    let cfg = LeaseConfig::new(ns.name.clone(), "flux-handoff");
    let acquired = Lease::acquire(
        ns.client.clone(),
        cfg,
        Holder::generate(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let LeaseAcquire::Acquired(guard) = acquired else {
        panic!("lease not acquired: {acquired:?}");
    };
    Api::<KubeLease>::namespaced(ns.client.clone(), &ns.name)
        .delete("flux-handoff", &DeleteParams::default())
        .await
        .unwrap();
    let reasserter = Reasserter::new(ns.client.clone()).with_lease(guard.handle());
    let mut seen = Recorded::default();
    let e = work("flow-token-2", vec![ns.name.clone()])
        .run(&reasserter, &ns.client, &mut seen)
        .await
        .unwrap_err();
    assert!(matches!(e, FlowError::Reassert(_)), "{e:?}");
    assert_eq!(e.class(), ErrorClass::Refused);
    assert!(seen.facts.is_empty() && seen.phases.is_empty());
    let secret = Api::<Secret>::namespaced(ns.client.clone(), &ns.name)
        .get_opt("pull")
        .await
        .unwrap();
    assert!(secret.is_none(), "nothing is written without the Lease");
}
