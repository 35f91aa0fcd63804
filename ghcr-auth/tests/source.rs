//! The Flux source proof: pure judgement (tier 1), the reconcile request against the real API
//! server (tier 2), and the end-to-end credential handoff with a source-controller model that
//! really pulls from a local registry (tier 3).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use ghcr_auth::credential::DockerConfig;
use ghcr_auth::credential::{SECRET_KEY, SECRET_TYPE};
use ghcr_auth::plan::SecretTarget;
use ghcr_auth::reassert::{NoGate, Reasserter, SecretOutcome};
use ghcr_auth::source::{
    REQUESTED_AT, RequestOutcome, SourceProof, SourceRef, SourceVerdict, judge_source,
    prove_source, request_patch, request_reconcile,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ObjectMeta, PostParams};
use secrecy::{ExposeSecret, SecretString};
use serde_json::json;
use support::registry::LocalRegistry;
use support::source_model::{SourceModel, oci_repository, oci_repository_resource};
use testkit::TestNs;

const DEADLINE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(100);

fn obj(status: &serde_json::Value, suspend: bool) -> DynamicObject {
    let mut o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "OCIRepository",
        "metadata": { "name": "app", "namespace": "flux-system", "generation": 3, "uid": "u1", "resourceVersion": "7" },
        "spec": { "suspend": suspend },
        "status": status,
    }))
    .unwrap();
    o.metadata.generation = Some(3);
    o
}

fn ready(status: &str, reason: &str, generation: i64) -> serde_json::Value {
    json!({ "type": "Ready", "status": status, "reason": reason, "message": "secret message", "observedGeneration": generation })
}

#[test]
fn unacknowledged_nonce_is_pending_even_when_ready() {
    let o = obj(
        &json!({ "lastHandledReconcileAt": "old", "conditions": [ready("True", "Succeeded", 3)] }),
        false,
    );
    assert_eq!(judge_source(&o, "new"), SourceVerdict::Pending);
}

#[test]
fn acknowledged_ready_true_is_ready_with_revision() {
    let o = obj(
        &json!({ "lastHandledReconcileAt": "n", "conditions": [ready("True", "Succeeded", 3)], "artifact": { "revision": "v1@sha256:ab" } }),
        false,
    );
    assert_eq!(
        judge_source(&o, "n"),
        SourceVerdict::Ready {
            revision: Some("v1@sha256:ab".into())
        }
    );
}

#[test]
fn acknowledged_ready_false_reports_reason_never_message() {
    let o = obj(
        &json!({ "lastHandledReconcileAt": "n", "conditions": [ready("False", "AuthenticationFailed", 3)] }),
        false,
    );
    let v = judge_source(&o, "n");
    assert_eq!(
        v,
        SourceVerdict::Failed {
            reason: "AuthenticationFailed".into()
        }
    );
    assert!(!format!("{v:?}").contains("secret message"));
    let o = obj(
        &json!({ "lastHandledReconcileAt": "n", "conditions": [ready("False", "token ghp_x leaked here", 3)] }),
        false,
    );
    assert_eq!(
        judge_source(&o, "n"),
        SourceVerdict::Failed {
            reason: "<not shown>".into()
        }
    );
}

#[test]
fn ready_from_an_older_generation_is_pending() {
    let o = obj(
        &json!({ "lastHandledReconcileAt": "n", "conditions": [ready("True", "Succeeded", 2)] }),
        false,
    );
    assert_eq!(judge_source(&o, "n"), SourceVerdict::Pending);
}

#[test]
fn suspended_source_proves_nothing() {
    let o = obj(
        &json!({ "lastHandledReconcileAt": "n", "conditions": [ready("True", "Succeeded", 3)] }),
        true,
    );
    assert_eq!(judge_source(&o, "n"), SourceVerdict::Suspended);
}

#[test]
fn request_patch_pins_uid_and_version_and_creates_annotations() {
    let o = obj(&json!({}), false);
    let ops = serde_json::to_value(request_patch(&o, "n1")).unwrap();
    assert_eq!(
        ops[0],
        json!({"op": "test", "path": "/metadata/uid", "value": "u1"})
    );
    assert_eq!(
        ops[1],
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"})
    );
    assert_eq!(
        ops[2],
        json!({"op": "add", "path": "/metadata/annotations", "value": {}})
    );
    assert_eq!(
        ops[3],
        json!({"op": "add", "path": "/metadata/annotations/reconcile.fluxcd.io~1requestedAt", "value": "n1"})
    );
}

async fn create_source(ns: &TestNs, url: &str) -> DynamicObject {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &oci_repository_resource());
    api.create(
        &PostParams::default(),
        &oci_repository("app", &ns.name, url, "v1", "pull"),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn reconcile_request_sets_the_nonce_and_keeps_other_annotations() {
    let ns = TestNs::new("src-req").await.unwrap();
    let created = create_source(&ns, "oci://127.0.0.1:1/team/app").await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &oci_repository_resource());
    let src = SourceRef::oci_repository(&ns.name, "app");
    let first = request_reconcile(&ns.client, &src, "nonce-1", &NoGate)
        .await
        .unwrap();
    assert!(matches!(first, RequestOutcome::Requested { .. }));
    api.patch(
        "app",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"annotations": {"keep": "me"}}})),
    )
    .await
    .unwrap();
    let _ = request_reconcile(&ns.client, &src, "nonce-2", &NoGate)
        .await
        .unwrap();
    let after = api.get("app").await.unwrap();
    let annotations = after.metadata.annotations.unwrap();
    assert_eq!(annotations[REQUESTED_AT], "nonce-2");
    assert_eq!(annotations["keep"], "me");
    assert_ne!(
        after.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(after.metadata.uid, created.metadata.uid);
}

#[tokio::test]
async fn reconcile_request_on_a_missing_source_is_not_found() {
    let ns = TestNs::new("src-missing").await.unwrap();
    let src = SourceRef::oci_repository(&ns.name, "nope");
    assert_eq!(
        request_reconcile(&ns.client, &src, "n", &NoGate)
            .await
            .unwrap(),
        RequestOutcome::NotFound
    );
}

#[tokio::test]
async fn source_without_a_controller_times_out_within_the_callers_deadline() {
    let ns = TestNs::new("src-idle").await.unwrap();
    create_source(&ns, "oci://127.0.0.1:1/team/app").await;
    let src = SourceRef::oci_repository(&ns.name, "app");
    let proof = prove_source(&ns.client, &src, &NoGate, Duration::from_millis(500), POLL)
        .await
        .unwrap();
    assert_eq!(proof, SourceProof::TimedOut);
}

fn pull_secret(cfg: &DockerConfig) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some("pull".into()),
            ..ObjectMeta::default()
        },
        type_: Some(SECRET_TYPE.into()),
        data: Some(BTreeMap::from([(
            SECRET_KEY.to_string(),
            ByteString(cfg.render().expose_secret().as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

#[tokio::test]
async fn flux_source_fails_with_the_expired_credential_and_is_ready_after_reassertion() {
    support::crypto();
    let reg = LocalRegistry::start(&[("robot", "rotated-token-2")])
        .await
        .unwrap();
    let digest = reg
        .push_image("robot", "rotated-token-2", "team/app", "v1")
        .await
        .unwrap();
    let ns = TestNs::new("src-e2e").await.unwrap();
    let expired =
        DockerConfig::from_token(&reg.host, "robot", SecretString::from("expired-token-1"))
            .unwrap();
    let rotated =
        DockerConfig::from_token(&reg.host, "robot", SecretString::from("rotated-token-2"))
            .unwrap();
    ns.api::<Secret>()
        .create(&PostParams::default(), &pull_secret(&expired))
        .await
        .unwrap();
    create_source(&ns, &format!("oci://{}/team/app", reg.host)).await;
    let _model = SourceModel::start(ns.client.clone(), &ns.name);
    let src = SourceRef::oci_repository(&ns.name, "app");

    let before = prove_source(&ns.client, &src, &NoGate, DEADLINE, POLL)
        .await
        .unwrap();
    assert_eq!(
        before,
        SourceProof::Failed {
            reason: "AuthenticationFailed".into()
        }
    );

    let outcome = Reasserter::new(ns.client.clone())
        .reassert_one(&rotated, &SecretTarget::new(&ns.name, "pull"))
        .await
        .unwrap();
    assert!(
        matches!(outcome, SecretOutcome::Updated { .. }),
        "{outcome:?}"
    );

    let after = prove_source(&ns.client, &src, &NoGate, DEADLINE, POLL)
        .await
        .unwrap();
    assert_eq!(
        after,
        SourceProof::Ready {
            revision: Some(format!("v1@{digest}"))
        }
    );
    let api: Api<DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &oci_repository_resource());
    let held = api.get("app").await.unwrap();
    let nonce = held.metadata.annotations.as_ref().unwrap()[REQUESTED_AT].clone();
    assert_eq!(
        held.data
            .pointer("/status/lastHandledReconcileAt")
            .and_then(|v| v.as_str()),
        Some(nonce.as_str())
    );
}

#[tokio::test]
async fn suspended_source_is_reported_suspended_not_ready() {
    support::crypto();
    let ns = TestNs::new("src-susp").await.unwrap();
    let mut o = oci_repository("app", &ns.name, "oci://127.0.0.1:1/team/app", "v1", "pull");
    o.data["spec"]["suspend"] = json!(true);
    let api: Api<DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &oci_repository_resource());
    api.create(&PostParams::default(), &o).await.unwrap();
    let _model = SourceModel::start(ns.client.clone(), &ns.name);
    let src = SourceRef::oci_repository(&ns.name, "app");
    assert_eq!(
        prove_source(&ns.client, &src, &NoGate, DEADLINE, POLL)
            .await
            .unwrap(),
        SourceProof::Suspended
    );
}
