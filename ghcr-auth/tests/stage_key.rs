//! `stage_key_`: the credential staged in one data key of any Secret, against the real
//! kube-apiserver. Each test asserts what the server holds afterwards.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ghcr_auth::credential::DockerConfig;
use ghcr_auth::reassert::NoGate;
use ghcr_auth::stage::{KeyOutcome, KeyPlan, KeyTarget, key_holds, plan_key};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use secrecy::SecretString;
use testkit::TestNs;

fn config(token: &str) -> DockerConfig {
    DockerConfig::from_token("ghcr.io", "octocat", SecretString::from(token)).unwrap()
}

/// `variables-base` as Flux applies it: Opaque, labelled, owned by a `ConfigMap`, other keys.
async fn variables_base(ns: &TestNs) -> Secret {
    let owner = ns
        .api::<ConfigMap>()
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("owner".into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            },
        )
        .await
        .unwrap();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("variables-base".into()),
            labels: Some(BTreeMap::from([(
                "kustomize.toolkit.fluxcd.io/name".to_string(),
                "flux-system".to_string(),
            )])),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "owner".into(),
                uid: owner.metadata.uid.unwrap(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([
            ("cluster_name".to_string(), ByteString(b"prod".to_vec())),
            (
                "ghcr_dockerconfigjson".to_string(),
                ByteString(b"c3RhbGU=".to_vec()),
            ),
        ])),
        ..Secret::default()
    };
    ns.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap()
}

fn target(ns: &TestNs) -> KeyTarget {
    KeyTarget::parse(
        &format!("{}/variables-base:ghcr_dockerconfigjson", ns.name),
        "x",
    )
    .unwrap()
}

#[tokio::test]
async fn stage_key_changes_only_the_key_and_keeps_type_labels_owners_and_other_keys() {
    let ns = TestNs::new("stage-key").await.unwrap();
    let before = variables_base(&ns).await;
    let cfg = config("fresh-token");
    let outcome = ghcr_auth::stage::stage_key(&ns.client, &NoGate, &cfg, &target(&ns))
        .await
        .unwrap();
    assert!(matches!(outcome, KeyOutcome::Updated { .. }), "{outcome:?}");
    let after = ns.api::<Secret>().get("variables-base").await.unwrap();
    assert_eq!(after.type_.as_deref(), Some("Opaque"));
    assert_eq!(after.metadata.labels, before.metadata.labels);
    assert_eq!(
        after.metadata.owner_references,
        before.metadata.owner_references
    );
    assert_eq!(after.metadata.annotations, before.metadata.annotations);
    let data = after.data.clone().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data["cluster_name"].0, b"prod");
    // The value is base64 text of the Docker config, as the original tool stages it.
    let staged = String::from_utf8(data["ghcr_dockerconfigjson"].0.clone()).unwrap();
    let json = String::from_utf8(STANDARD.decode(staged).unwrap()).unwrap();
    assert_eq!(DockerConfig::parse(&json).unwrap(), cfg);
    assert!(key_holds(&after, "ghcr_dockerconfigjson", &cfg));
    // A second run writes nothing.
    let again = ghcr_auth::stage::stage_key(&ns.client, &NoGate, &cfg, &target(&ns))
        .await
        .unwrap();
    assert_eq!(again, KeyOutcome::Unchanged);
    let last = ns.api::<Secret>().get("variables-base").await.unwrap();
    assert_eq!(
        last.metadata.resource_version,
        after.metadata.resource_version
    );
}

#[tokio::test]
async fn stage_key_a_concurrent_writer_is_a_cas_refusal_not_an_overwrite() {
    let ns = TestNs::new("stage-key-race").await.unwrap();
    let read = variables_base(&ns).await;
    let KeyPlan::Patch(patch) = plan_key(&target(&ns), &config("ours"), Some(&read)) else {
        panic!("a stale key needs a patch");
    };
    // Someone else writes the key after our read and before our write.
    let theirs =
        serde_json::json!({ "data": { "ghcr_dockerconfigjson": STANDARD.encode("dGhlaXJz") } });
    ns.api::<Secret>()
        .patch(
            "variables-base",
            &PatchParams::default(),
            &Patch::Merge(&theirs),
        )
        .await
        .unwrap();
    let err = ns
        .api::<Secret>()
        .patch(
            "variables-base",
            &flux_fence::api::patch_params(),
            &Patch::Json::<()>(patch),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422 || s.code == 409),
        "{err}"
    );
    let now = ns.api::<Secret>().get("variables-base").await.unwrap();
    assert_eq!(now.data.unwrap()["ghcr_dockerconfigjson"].0, b"dGhlaXJz");
}

#[tokio::test]
async fn stage_key_a_missing_secret_is_not_created() {
    let ns = TestNs::new("stage-key-missing").await.unwrap();
    let outcome = ghcr_auth::stage::stage_key(&ns.client, &NoGate, &config("t"), &target(&ns))
        .await
        .unwrap();
    assert_eq!(outcome, KeyOutcome::SecretMissing);
    assert!(
        ns.api::<Secret>()
            .get_opt("variables-base")
            .await
            .unwrap()
            .is_none()
    );
}
