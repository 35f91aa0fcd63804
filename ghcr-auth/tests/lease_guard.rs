//! Tier 2: the handoff Lease guards every Secret write and every source reconcile request, and
//! every write names the field manager `flux-handoff` — asserted on what the server holds.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use flux_fence::{FenceError, Holder, Lease, LeaseAcquire, LeaseConfig, LeaseGuard, SystemClock};
use ghcr_auth::GhcrError;
use ghcr_auth::credential::DockerConfig;
use ghcr_auth::credential::{SECRET_KEY, SECRET_TYPE};
use ghcr_auth::plan::REVISION_ANNOTATION;
use ghcr_auth::reassert::{Consumers, Reasserter, SecretOutcome, TargetSpec};
use ghcr_auth::source::{REQUESTED_AT, SourceRef, request_reconcile};
use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, PostParams};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use support::source_model::{oci_repository, oci_repository_resource};
use testkit::TestNs;

fn config(token: &str) -> DockerConfig {
    DockerConfig::from_token("ghcr.io", "octocat", SecretString::from(token)).unwrap()
}

async fn lease(ns: &TestNs) -> LeaseGuard {
    let cfg = LeaseConfig::new(ns.name.clone(), "flux-handoff");
    match Lease::acquire(
        ns.client.clone(),
        cfg,
        Holder::generate(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap()
    {
        LeaseAcquire::Acquired(g) => g,
        other => panic!("lease not acquired: {other:?}"),
    }
}

async fn delete_lease(ns: &TestNs) {
    Api::<KubeLease>::namespaced(ns.client.clone(), &ns.name)
        .delete("flux-handoff", &DeleteParams::default())
        .await
        .unwrap();
}

fn spec(ns: &TestNs, name: &str) -> TargetSpec {
    TargetSpec::new(name, Consumers::Namespaces(vec![ns.name.clone()]))
}

/// The managers of the `managedFields` entries whose fields mention `fragment`.
fn managers_of(obj: &impl serde::Serialize, fragment: &str) -> Vec<String> {
    let v = serde_json::to_value(obj).unwrap();
    v.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|e| e["fieldsV1"].to_string().contains(fragment))
        .filter_map(|e| e["manager"].as_str().map(str::to_string))
        .collect()
}

fn gate_lost(e: &GhcrError) -> bool {
    let (GhcrError::Gate { source, .. } | GhcrError::SourceGate { source, .. }) = e else {
        return false;
    };
    matches!(
        source.downcast_ref::<FenceError>(),
        Some(FenceError::LeaseLost { .. })
    )
}

#[tokio::test]
async fn field_manager_secret_create_and_patch_name_flux_handoff_and_carry_the_epoch() {
    let ns = TestNs::new("fm-secret").await.unwrap();
    let guard = lease(&ns).await;
    let reasserter = Reasserter::new(ns.client.clone()).with_lease(guard.handle());
    let api: Api<Secret> = Api::namespaced(ns.client.clone(), &ns.name);

    // Create.
    let report = reasserter
        .reassert(&config("token-fm-1"), &spec(&ns, "pull"))
        .await
        .unwrap();
    assert!(matches!(report.results[0].2, SecretOutcome::Created { .. }));
    let created = api.get("pull").await.unwrap();
    assert_eq!(
        managers_of(&created, SECRET_KEY),
        ["flux-handoff"],
        "the create names its field manager"
    );
    let owner = guard.owner().to_string();
    assert_eq!(
        created.metadata.annotations.as_ref().unwrap()[REVISION_ANNOTATION],
        owner
    );

    // Patch (another credential), over a Secret someone else created without annotations.
    let other = Secret {
        metadata: ObjectMeta {
            name: Some("theirs".into()),
            ..ObjectMeta::default()
        },
        type_: Some(SECRET_TYPE.into()),
        data: Some(BTreeMap::from([(
            SECRET_KEY.to_string(),
            ByteString(
                config("token-old")
                    .render()
                    .expose_secret()
                    .as_bytes()
                    .to_vec(),
            ),
        )])),
        ..Secret::default()
    };
    api.create(&PostParams::default(), &other).await.unwrap();
    let report = reasserter
        .reassert(&config("token-fm-2"), &spec(&ns, "theirs"))
        .await
        .unwrap();
    assert!(matches!(report.results[0].2, SecretOutcome::Updated { .. }));
    let patched = api.get("theirs").await.unwrap();
    assert!(
        managers_of(&patched, SECRET_KEY).contains(&"flux-handoff".to_string()),
        "the patch names its field manager: {:?}",
        managers_of(&patched, SECRET_KEY)
    );
    assert_eq!(
        patched.metadata.annotations.as_ref().unwrap()[REVISION_ANNOTATION],
        owner,
        "the patch carries the Lease epoch"
    );
    let _ = guard.release().await.unwrap();
}

#[tokio::test]
async fn lease_lost_before_a_secret_write_leaves_the_secret_unchanged() {
    let ns = TestNs::new("ll-secret").await.unwrap();
    let guard = lease(&ns).await;
    let api: Api<Secret> = Api::namespaced(ns.client.clone(), &ns.name);
    // An existing Secret holding another credential, and one that does not exist yet.
    let _ = Reasserter::new(ns.client.clone())
        .reassert(&config("token-before"), &spec(&ns, "pull"))
        .await
        .unwrap();
    let before = api.get("pull").await.unwrap();

    delete_lease(&ns).await;
    let reasserter = Reasserter::new(ns.client.clone()).with_lease(guard.handle());
    let err = reasserter
        .reassert(&config("token-after"), &spec(&ns, "pull"))
        .await
        .unwrap_err();
    assert!(gate_lost(&err), "typed LeaseLost: {err:?}");
    let after = api.get("pull").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "no write landed"
    );
    let err = reasserter
        .reassert(&config("token-after"), &spec(&ns, "fresh"))
        .await
        .unwrap_err();
    assert!(gate_lost(&err), "typed LeaseLost: {err:?}");
    assert!(
        api.get_opt("fresh").await.unwrap().is_none(),
        "no create landed"
    );
}

#[tokio::test]
async fn lease_lost_before_a_source_reconcile_request_sends_none() {
    let ns = TestNs::new("ll-source").await.unwrap();
    let guard = lease(&ns).await;
    let sources: Api<DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &oci_repository_resource());
    let created = sources
        .create(
            &PostParams::default(),
            &oci_repository("app", &ns.name, "oci://127.0.0.1:1/team/app", "v1", "pull"),
        )
        .await
        .unwrap();
    let src = SourceRef::oci_repository(&ns.name, "app");
    let reasserter = Reasserter::new(ns.client.clone()).with_lease(guard.handle());

    // While the Lease is ours, the request lands and names its field manager.
    let _ = request_reconcile(&ns.client, &src, "nonce-held", reasserter.gate())
        .await
        .unwrap();
    let requested = sources.get("app").await.unwrap();
    assert_eq!(
        requested.metadata.annotations.as_ref().unwrap()[REQUESTED_AT],
        "nonce-held"
    );
    assert_eq!(managers_of(&requested, REQUESTED_AT), ["flux-handoff"]);
    assert_ne!(
        requested.metadata.resource_version,
        created.metadata.resource_version
    );

    delete_lease(&ns).await;
    let err = request_reconcile(&ns.client, &src, "nonce-lost", reasserter.gate())
        .await
        .unwrap_err();
    assert!(gate_lost(&err), "typed LeaseLost: {err:?}");
    let after = sources.get("app").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, requested.metadata.resource_version,
        "no request landed"
    );
}
