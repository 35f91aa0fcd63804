//! Tier 2: the API server semantics flux-handoff relies on, checked against the real
//! kube-apiserver of the local control plane. Each test asserts what the server holds
//! afterwards, not only the status code.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use testkit::TestNs;
use testkit::fixtures::{kustomization, kustomization_resource};

fn json_patch(ops: serde_json::Value) -> Patch<()> {
    Patch::Json(serde_json::from_value(ops).expect("valid JSON Patch"))
}

fn status_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

async fn configmap(ns: &TestNs, name: &str) -> ConfigMap {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some([("k".to_string(), "v".to_string())].into()),
        ..ConfigMap::default()
    };
    ns.api()
        .create(&PostParams::default(), &cm)
        .await
        .expect("create ConfigMap")
}

#[tokio::test]
async fn flux_crds_are_established() {
    let ns = TestNs::new("crds").await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(ns.client.clone());
    for name in [
        "kustomizations.kustomize.toolkit.fluxcd.io",
        "helmreleases.helm.toolkit.fluxcd.io",
        "ocirepositories.source.toolkit.fluxcd.io",
    ] {
        let crd = crds.get(name).await.unwrap();
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        assert!(established, "{name} is not Established");
    }
}

#[tokio::test]
async fn json_patch_with_failing_test_op_is_422_and_changes_nothing() {
    let ns = TestNs::new("cas").await.unwrap();
    let cms: Api<ConfigMap> = ns.api();
    let before = configmap(&ns, "target").await;
    let err = cms
        .patch(
            "target",
            &PatchParams::default(),
            &json_patch(json!([
                { "op": "test", "path": "/metadata/resourceVersion", "value": "1" },
                { "op": "replace", "path": "/data/k", "value": "changed" },
            ])),
        )
        .await
        .unwrap_err();
    assert_eq!(status_code(&err), Some(422), "{err}");
    let after = cms.get("target").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert_eq!(after.data.unwrap()["k"], "v");
}

#[tokio::test]
async fn json_patch_with_passing_test_op_applies() {
    let ns = TestNs::new("cas").await.unwrap();
    let cms: Api<ConfigMap> = ns.api();
    let before = configmap(&ns, "target").await;
    let rv = before.metadata.resource_version.clone().unwrap();
    cms.patch(
        "target",
        &PatchParams::default(),
        &json_patch(json!([
            { "op": "test", "path": "/metadata/resourceVersion", "value": rv },
            { "op": "test", "path": "/metadata/uid", "value": before.metadata.uid },
            { "op": "replace", "path": "/data/k", "value": "changed" },
        ])),
    )
    .await
    .unwrap();
    let after = cms.get("target").await.unwrap();
    assert_ne!(after.metadata.resource_version, Some(rv));
    assert_eq!(after.data.unwrap()["k"], "changed");
}

#[tokio::test]
async fn update_with_stale_resource_version_is_409_and_changes_nothing() {
    let ns = TestNs::new("cas").await.unwrap();
    let cms: Api<ConfigMap> = ns.api();
    let stale = configmap(&ns, "target").await;
    // Another writer moves the object on.
    let mut fresh = stale.clone();
    fresh.data = Some([("k".to_string(), "other-writer".to_string())].into());
    cms.replace("target", &PostParams::default(), &fresh)
        .await
        .unwrap();

    let mut ours = stale;
    ours.data = Some([("k".to_string(), "ours".to_string())].into());
    let err = cms
        .replace("target", &PostParams::default(), &ours)
        .await
        .unwrap_err();
    assert_eq!(status_code(&err), Some(409), "{err}");
    assert_eq!(
        cms.get("target").await.unwrap().data.unwrap()["k"],
        "other-writer"
    );
}

#[tokio::test]
async fn status_write_keeps_spec_and_generation_and_spec_change_bumps_generation() {
    let ns = TestNs::new("status").await.unwrap();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &kustomization_resource());
    let created = api
        .create(
            &PostParams::default(),
            &kustomization("apps").build(&ns.name),
        )
        .await
        .unwrap();
    let gen0 = created.metadata.generation.unwrap();

    // A status write through the status subresource: spec and generation stay.
    api.patch_status(
        "apps",
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": {
            "conditions": [{ "type": "Reconciling", "status": "True", "reason": "Progressing",
                             "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z" }],
        }})),
    )
    .await
    .unwrap();
    // A status field sent to the main resource is ignored.
    api.patch(
        "apps",
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": { "lastHandledReconcileAt": "x" } })),
    )
    .await
    .unwrap();
    let after_status = api.get("apps").await.unwrap();
    assert_eq!(after_status.metadata.generation, Some(gen0));
    assert_eq!(after_status.data["spec"]["suspend"], json!(false));
    assert_eq!(
        after_status.data["status"]["conditions"][0]["type"],
        json!("Reconciling")
    );
    assert!(
        after_status.data["status"]
            .get("lastHandledReconcileAt")
            .is_none()
    );

    // An annotation change does not bump generation; a spec change does.
    api.patch(
        "apps",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "annotations": { "a": "b" } } })),
    )
    .await
    .unwrap();
    assert_eq!(
        api.get("apps").await.unwrap().metadata.generation,
        Some(gen0)
    );
    api.patch(
        "apps",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "suspend": true } })),
    )
    .await
    .unwrap();
    let after_spec = api.get("apps").await.unwrap();
    assert_eq!(after_spec.metadata.generation, Some(gen0 + 1));
    assert_eq!(
        after_spec.data["status"]["conditions"][0]["type"],
        json!("Reconciling")
    );
}

#[tokio::test]
async fn annotation_keys_with_slash_need_tilde_one_escaping() {
    let ns = TestNs::new("pointer").await.unwrap();
    let cms: Api<ConfigMap> = ns.api();
    configmap(&ns, "target").await;
    cms.patch(
        "target",
        &PatchParams::default(),
        &json_patch(json!([
            { "op": "add", "path": "/metadata/annotations", "value": {} },
            { "op": "add", "path": "/metadata/annotations/flux-handoff.io~1owner", "value": "h;1" },
        ])),
    )
    .await
    .unwrap();
    let held = cms.get("target").await.unwrap();
    assert_eq!(
        held.metadata.annotations.unwrap()["flux-handoff.io/owner"],
        "h;1"
    );

    // Unescaped, the `/` is a path separator: the pointer names a missing parent and the
    // server refuses the patch without changing anything.
    let err = cms
        .patch(
            "target",
            &PatchParams::default(),
            &json_patch(json!([
                { "op": "add", "path": "/metadata/annotations/flux-handoff.io/reason", "value": "x" },
            ])),
        )
        .await
        .unwrap_err();
    assert!(matches!(status_code(&err), Some(422 | 500)), "{err}");
    let after = cms.get("target").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        held.metadata.resource_version
    );
}

#[tokio::test]
async fn service_account_with_narrow_role_is_forbidden_outside_it() {
    let ns = TestNs::new("rbac").await.unwrap();
    configmap(&ns, "target").await;
    let narrow = ns
        .client_with_role(
            "narrow",
            vec![testkit::rule("", "configmaps", &["get", "list"])],
        )
        .await
        .unwrap();
    let as_narrow: Api<ConfigMap> = Api::namespaced(narrow.clone(), &ns.name);
    // Inside the role: allowed.
    assert_eq!(
        as_narrow.get("target").await.unwrap().data.unwrap()["k"],
        "v"
    );
    // Outside it (patch): forbidden, and nothing changed.
    let err = as_narrow
        .patch(
            "target",
            &PatchParams::default(),
            &Patch::Merge(json!({ "data": { "k": "x" } })),
        )
        .await
        .unwrap_err();
    assert_eq!(status_code(&err), Some(403), "{err}");
    assert_eq!(
        ns.api::<ConfigMap>()
            .get("target")
            .await
            .unwrap()
            .data
            .unwrap()["k"],
        "v"
    );
    // Another namespace: forbidden too.
    let other: Api<ConfigMap> = Api::namespaced(narrow, "default");
    let err = other
        .list(&kube::api::ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(status_code(&err), Some(403), "{err}");
}
