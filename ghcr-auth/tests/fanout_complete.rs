//! `fanout_complete_` on the shared control plane, which never has ESO's CRDs: a route through
//! External Secrets refuses before any write, and bootstrap mode writes root, staging, root.
//! (A missing `ExternalSecret` with the CRDs installed: `tests/eso_fanout.rs`.)

use std::collections::BTreeMap;
use std::time::Duration;

use ghcr_auth::credential::DockerConfig;
use ghcr_auth::credential::{SECRET_KEY, SECRET_TYPE};
use ghcr_auth::fanout::{EsoRoute, Route};
use ghcr_auth::plan::{SecretTarget, holds};
use ghcr_auth::reassert::{Consumers, Reasserter, TargetSpec};
use ghcr_auth::route::FanoutRun;
use ghcr_auth::stage::{KeyTarget, key_holds};
use ghcr_auth::{ErrorClass, FlowError, Progress};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use secrecy::{ExposeSecret, SecretString};
use testkit::TestNs;

fn config(token: &str) -> DockerConfig {
    DockerConfig::from_token("ghcr.io", "octocat", SecretString::from(token)).unwrap()
}

#[derive(Default)]
struct Recorded(Vec<String>);

impl Progress for Recorded {
    fn phase(&mut self, line: &str) {
        self.0.push(line.to_string());
    }
    fn fact(&mut self, _: &str, _: serde_json::Value) {}
}

async fn seed(ns: &TestNs, stale: &DockerConfig) -> (Secret, Secret) {
    let root = Secret {
        metadata: ObjectMeta {
            name: Some("ghcr-auth".into()),
            ..ObjectMeta::default()
        },
        type_: Some(SECRET_TYPE.into()),
        data: Some(BTreeMap::from([(
            SECRET_KEY.to_string(),
            ByteString(stale.render().expose_secret().as_bytes().to_vec()),
        )])),
        ..Secret::default()
    };
    let staging = Secret {
        metadata: ObjectMeta {
            name: Some("variables-base".into()),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            "other".to_string(),
            ByteString(b"x".to_vec()),
        )])),
        ..Secret::default()
    };
    let api = ns.api::<Secret>();
    (
        api.create(&PostParams::default(), &root).await.unwrap(),
        api.create(&PostParams::default(), &staging).await.unwrap(),
    )
}

fn route(ns: &TestNs, allow_incomplete: bool) -> Route {
    Route::new(
        TargetSpec::new(String::new(), Consumers::Namespaces(Vec::new()))
            .with_root(SecretTarget::new(&ns.name, "ghcr-auth")),
    )
    .with_keys(vec![
        KeyTarget::parse(
            &format!("{}/variables-base:ghcr_dockerconfigjson", ns.name),
            "x",
        )
        .unwrap(),
    ])
    .with_eso(EsoRoute::new(
        SecretTarget::new(&ns.name, "seed-ghcr"),
        "ghcr-auth",
        Consumers::Namespaces(vec![ns.name.clone()]),
    ))
    .with_allow_incomplete(allow_incomplete)
}

fn run(cfg: &DockerConfig, route: Route) -> FanoutRun {
    FanoutRun::new(
        cfg.clone(),
        route,
        Vec::new(),
        Duration::from_secs(20),
        Duration::from_millis(200),
    )
}

#[tokio::test]
async fn fanout_complete_missing_crds_refuse_before_any_write() {
    let ns = TestNs::new("fanout-nocrd").await.unwrap();
    let (root, staging) = seed(&ns, &config("stale")).await;
    let cfg = config("fresh");
    let mut progress = Recorded::default();
    let err = run(&cfg, route(&ns, false))
        .run(
            &Reasserter::new(ns.client.clone()),
            &ns.client,
            &mut progress,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, FlowError::FanoutIncomplete(_)), "{err}");
    assert_eq!(err.class(), ErrorClass::Refused);
    let line = err.to_string();
    assert!(
        line.contains("CRD externalsecrets.external-secrets.io/v1")
            && line.contains("CRD pushsecrets.external-secrets.io/v1alpha1"),
        "{line}"
    );
    assert_eq!(line.lines().count(), 1);
    let api = ns.api::<Secret>();
    let root_now = api.get("ghcr-auth").await.unwrap();
    let staging_now = api.get("variables-base").await.unwrap();
    assert_eq!(
        root_now.metadata.resource_version,
        root.metadata.resource_version
    );
    assert_eq!(
        staging_now.metadata.resource_version,
        staging.metadata.resource_version
    );
}

#[tokio::test]
async fn fanout_complete_bootstrap_writes_root_then_staging_then_root() {
    let ns = TestNs::new("fanout-boot").await.unwrap();
    seed(&ns, &config("stale")).await;
    let cfg = config("fresh");
    let mut progress = Recorded::default();
    run(&cfg, route(&ns, true))
        .run(
            &Reasserter::new(ns.client.clone()),
            &ns.client,
            &mut progress,
        )
        .await
        .unwrap();
    let api = ns.api::<Secret>();
    let root = api.get("ghcr-auth").await.unwrap();
    let staging = api.get("variables-base").await.unwrap();
    assert!(holds(&root, &cfg));
    assert!(key_holds(&staging, "ghcr_dockerconfigjson", &cfg));
    // The root was written before the staging Secret (etcd revisions are one global order).
    let rv = |s: &Secret| {
        s.metadata
            .resource_version
            .clone()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(
        rv(&root) < rv(&staging),
        "root {} staging {}",
        rv(&root),
        rv(&staging)
    );
    assert_eq!(staging.data.unwrap()["other"].0, b"x");
    // Root, staging, root: the second root pass found it holding the credential.
    let steps: Vec<&String> = progress
        .0
        .iter()
        .filter(|l| l.starts_with("secrets reasserted") || l.starts_with("staged"))
        .collect();
    assert_eq!(
        steps,
        [
            "secrets reasserted: created=0 updated=1 unchanged=0",
            &format!(
                "staged {}/variables-base:ghcr_dockerconfigjson: updated",
                ns.name
            ),
            "secrets reasserted: created=0 updated=0 unchanged=1",
        ],
        "{:?}",
        progress.0
    );
    assert!(progress.0[0].starts_with("bootstrap"), "{:?}", progress.0);
}
