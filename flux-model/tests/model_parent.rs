//! Tier 2: a parent Kustomization applying its children (docs/design/flux-model.md facts 6, 7), the
//! seeded tree, against the real kube-apiserver.

use flux_model::model::seed::{CHILDREN, PARENT};
use flux_model::model::{
    FIELD_MANAGER, FluxModel, ModelConfig, ModelEvent, ModelHandle, Outcome, PARENT_NAME_LABEL,
    Phase, RECONCILE_ANNOTATION, STATUS_MANAGER, seed_tree,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::TestNs;
use testkit::fixtures::{kustomization, kustomization_resource};

const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

struct Setup {
    ns: TestNs,
    api: Api<DynamicObject>,
    model: ModelHandle,
}

/// A model whose `parent` Git path holds one child, `child`, declaring `suspend: false`.
async fn setup(prefix: &str) -> Setup {
    let ns = TestNs::new(prefix).await.unwrap();
    let api = Api::namespaced_with(ns.client.clone(), &ns.name, &kustomization_resource());
    let config = ModelConfig::namespaced(&ns.name).with_git("parent", vec![child_manifest()]);
    let model = FluxModel::start(ns.client.clone(), config);
    Setup { ns, api, model }
}

fn child_manifest() -> Value {
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": { "name": "child" },
        "spec": { "interval": "10m", "path": "./child", "prune": true, "suspend": false,
                  "sourceRef": { "kind": "GitRepository", "name": "flux-system" } },
    })
}

async fn patch_as(s: &Setup, manager: &str, name: &str, body: Value) -> DynamicObject {
    let pp = PatchParams {
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    };
    s.api.patch(name, &pp, &Patch::Merge(body)).await.unwrap()
}

/// Asks for a parent run with `nonce` (as a person would: `requestedAt`); the event-log mark
/// taken before the request.
async fn request_parent(s: &Setup, nonce: &str) -> usize {
    let m = s.model.mark();
    patch_as(
        s,
        "test-writer",
        "parent",
        json!({ "metadata": { "annotations": { REQUESTED_AT: nonce } } }),
    )
    .await;
    m
}

/// [`request_parent`], then waits for that run and asserts it succeeded.
async fn run_parent(s: &Setup, nonce: &str) -> usize {
    let m = request_parent(s, nonce).await;
    assert_eq!(
        s.model.wait_run_seeing("parent", nonce, m).await.unwrap(),
        Outcome::Succeeded
    );
    m
}

fn suspend(o: &DynamicObject) -> bool {
    o.data["spec"]["suspend"].as_bool().unwrap_or(false)
}

fn annotation<'a>(o: &'a DynamicObject, key: &str) -> Option<&'a str> {
    o.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn applied(model: &ModelHandle, since: usize) -> Vec<String> {
    model.events()[since..]
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ChildApplied { child, .. } => Some(format!("applied {child}")),
            ModelEvent::ChildSkipped { child, .. } => Some(format!("skipped {child}")),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn fact_6_parent_skips_reconcile_disabled_child() {
    let s = setup("model-f6").await;
    let ns = s.ns.name.clone();
    let child = kustomization("child")
        .managed_by("parent", &ns)
        .suspended()
        .annotated(RECONCILE_ANNOTATION, "disabled")
        .build(&ns);
    s.api.create(&PostParams::default(), &child).await.unwrap();
    s.model.wait_settled("child", 0).await.unwrap();
    let before = s.api.get("child").await.unwrap();

    let m = s.model.mark();
    s.api
        .create(&PostParams::default(), &kustomization("parent").build(&ns))
        .await
        .unwrap();
    assert_eq!(
        s.model.wait_settled("parent", m).await.unwrap(),
        Outcome::Succeeded
    );
    assert_eq!(applied(&s.model, m), vec![format!("skipped {ns}/child")]);
    let after = s.api.get("child").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert!(suspend(&after), "Git's suspend: false was not applied");
}

#[tokio::test]
async fn fact_6_parent_that_read_child_before_annotation_still_applies_it() {
    let s = setup("model-f6r").await;
    let ns = s.ns.name.clone();
    s.api
        .create(&PostParams::default(), &kustomization("parent").build(&ns))
        .await
        .unwrap();
    assert_eq!(
        s.model.wait_settled("parent", 0).await.unwrap(),
        Outcome::Succeeded
    );
    assert!(!suspend(&s.api.get("child").await.unwrap()));

    // The parent reads the child at the start of its apply phase, then parks.
    s.model.hang_at("parent", Phase::Apply);
    let m = request_parent(&s, "1").await;
    s.model.wait_hanging("parent").await.unwrap();
    // Too late: the exclusion lands after the parent read the child.
    let body = json!({ "metadata": { "annotations": { RECONCILE_ANNOTATION: "disabled" } },
                       "spec": { "suspend": true } });
    patch_as(&s, "flux-handoff", "child", body).await;
    s.model.release("parent");
    assert_eq!(
        s.model.wait_run_seeing("parent", "1", m).await.unwrap(),
        Outcome::Succeeded
    );
    assert_eq!(applied(&s.model, m), vec![format!("applied {ns}/child")]);
    let child = s.api.get("child").await.unwrap();
    assert!(
        !suspend(&child),
        "the stale read re-applied Git's suspend: false"
    );
    assert_eq!(annotation(&child, RECONCILE_ANNOTATION), Some("disabled"));

    // The next parent run reads the annotation and leaves the child alone.
    patch_as(
        &s,
        "flux-handoff",
        "child",
        json!({ "spec": { "suspend": true } }),
    )
    .await;
    let m = run_parent(&s, "2").await;
    assert_eq!(applied(&s.model, m), vec![format!("skipped {ns}/child")]);
    assert!(suspend(&s.api.get("child").await.unwrap()));
}

#[tokio::test]
async fn fact_7_parent_reverts_suspend_without_annotation() {
    let s = setup("model-f7").await;
    let ns = s.ns.name.clone();
    s.api
        .create(&PostParams::default(), &kustomization("parent").build(&ns))
        .await
        .unwrap();
    s.model.wait_settled("parent", 0).await.unwrap();
    let child = s.api.get("child").await.unwrap();
    let labels = child.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get(PARENT_NAME_LABEL).map(String::as_str),
        Some("parent")
    );

    patch_as(
        &s,
        "flux-handoff",
        "child",
        json!({ "spec": { "suspend": true } }),
    )
    .await;
    run_parent(&s, "1").await;
    let child = s.api.get("child").await.unwrap();
    assert!(
        !suspend(&child),
        "Git suspend: false wins over another manager's suspend"
    );
    let owner = child
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .find(|e| {
            e.manager.as_deref() == Some(FIELD_MANAGER) && e.operation.as_deref() == Some("Apply")
        })
        .expect("kustomize-controller apply entry");
    let fields = serde_json::to_value(owner.fields_v1).unwrap();
    assert!(fields["f:spec"].get("f:suspend").is_some(), "{fields}");
}

#[tokio::test]
async fn fact_7_other_managers_undeclared_fields_survive_and_kubectl_fields_are_taken_over() {
    let s = setup("model-f7m").await;
    let ns = s.ns.name.clone();
    s.api
        .create(&PostParams::default(), &kustomization("parent").build(&ns))
        .await
        .unwrap();
    s.model.wait_settled("parent", 0).await.unwrap();

    let other = json!({ "metadata": { "annotations": { "example.com/note": "keep" } },
                        "spec": { "timeout": "5m" } });
    patch_as(&s, "other-tool", "child", other).await;
    let kubectl =
        json!({ "metadata": { "labels": { "team": "x" } }, "spec": { "retryInterval": "1m" } });
    patch_as(&s, "kubectl", "child", kubectl).await;

    run_parent(&s, "1").await;
    let child = s.api.get("child").await.unwrap();
    assert_eq!(annotation(&child, "example.com/note"), Some("keep"));
    assert_eq!(child.data["spec"]["timeout"], json!("5m"));
    let labels = child.metadata.labels.clone().unwrap_or_default();
    assert!(
        !labels.contains_key("team"),
        "kubectl's label was taken over and dropped: {labels:?}"
    );
    assert!(
        child.data["spec"].get("retryInterval").is_none(),
        "{}",
        child.data["spec"]
    );
    assert!(
        !child
            .metadata
            .managed_fields
            .unwrap_or_default()
            .iter()
            .any(|e| e.manager.as_deref() == Some("kubectl")),
        "no kubectl entry is left"
    );
}

#[tokio::test]
async fn seed_tree_parent_applies_both_children_and_all_turn_ready() {
    let ns = TestNs::new("model-seed").await.unwrap();
    let tree = seed_tree(&ns.client, &ns.name).await.unwrap();
    assert_eq!(tree.git.len(), 2);
    for c in &tree.consumer_namespaces {
        Api::<Namespace>::all(ns.client.clone())
            .get(c)
            .await
            .unwrap();
    }
    ns.api::<Deployment>()
        .get("kustomize-controller")
        .await
        .unwrap();

    let model = FluxModel::start(ns.client.clone(), tree.model_config());
    assert_eq!(
        model.wait_settled(PARENT, 0).await.unwrap(),
        Outcome::Succeeded
    );
    for child in CHILDREN {
        assert_eq!(
            model.wait_settled(child, 0).await.unwrap(),
            Outcome::Succeeded
        );
    }
    let applied = applied(&model, 0);
    for child in CHILDREN {
        assert!(
            applied.contains(&format!("applied {}/{child}", ns.name)),
            "{applied:?}"
        );
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &kustomization_resource());
    for name in [PARENT, CHILDREN[0], CHILDREN[1]] {
        let o = api.get(name).await.unwrap();
        let ready = flux_model::model::status::condition_status(&o.data["status"], "Ready");
        assert_eq!(ready, Some("True"), "{name}");
    }
    model.shutdown().await;
}

#[tokio::test]
async fn fact_7_status_and_finalizers_are_written_as_gotk_kustomize_controller_and_kept() {
    // Real Flux writes finalizers and status as `gotk-<controller>` (kustomize-controller
    // main.go: StatusManager), which its own apply never takes over; only the apply is
    // `kustomize-controller`.
    let s = setup("model-f7g").await;
    let ns = s.ns.name.clone();
    let m = s.model.mark();
    s.api
        .create(&PostParams::default(), &kustomization("parent").build(&ns))
        .await
        .unwrap();
    assert_eq!(
        s.model.wait_settled("parent", m).await.unwrap(),
        Outcome::Succeeded
    );
    s.model.wait_settled("child", m).await.unwrap();
    // A second apply of the parent leaves the status writer's entries alone.
    let m = request_parent(&s, "again").await;
    s.model.wait_run_seeing("parent", "again", m).await.unwrap();
    let child = s.api.get("child").await.unwrap();
    let entries: Vec<(String, String, String)> = child
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            (
                e.manager.unwrap_or_default(),
                e.operation.unwrap_or_default(),
                e.subresource.unwrap_or_default(),
            )
        })
        .collect();
    let has = |m: &str, op: &str, sub: &str| {
        entries
            .iter()
            .any(|(em, eo, es)| em == m && eo == op && es == sub)
    };
    assert!(has(STATUS_MANAGER, "Update", "status"), "{entries:?}");
    assert!(has(STATUS_MANAGER, "Update", ""), "finalizers: {entries:?}");
    assert!(has(FIELD_MANAGER, "Apply", ""), "{entries:?}");
    assert!(!has(FIELD_MANAGER, "Update", ""), "{entries:?}");
}
