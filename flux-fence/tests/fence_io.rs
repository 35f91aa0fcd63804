//! Tier 2: owner fences against the real kube-apiserver. Every test asserts what the server
//! holds afterwards.

mod common;

use common::*;
use flux_fence::decide::AcquireDecision;
use flux_fence::mark::MarkAt;
use flux_fence::mark::PriorRecord;
use flux_fence::outcome::AcquireOutcome;
use flux_fence::outcome::Applied;
use flux_fence::outcome::ReleaseOutcome;
use flux_fence::{Mark, ObjectRef};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, ObjectMeta, PostParams};
use serde_json::json;
use testkit::TestNs;
use testkit::fixtures::{helmrelease_resource, kustomization};

fn guard_of(outcome: AcquireOutcome) -> flux_fence::FenceGuard {
    match outcome {
        AcquireOutcome::Acquired(g) => g,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

#[tokio::test]
async fn acquire_writes_one_fence_and_release_restores_the_exact_prior_state() {
    let ns = TestNs::new("fence").await.unwrap();
    let before = create_ks(&ns, "apps").await;
    let owner = owner(1);
    let fencer = fencer(&ns, &owner);
    let api = ks_api(&ns);

    let guard = guard_of(
        fencer
            .acquire(
                &ks_ref(&ns, "apps"),
                flux_marks("n-1"),
                Some("GHCR rotation, run 1"),
            )
            .await
            .unwrap(),
    );
    let held = get_json(&api, "apps").await;
    let a = annotations(&held);
    assert_eq!(a["flux-handoff.io/owner"], json!(owner.to_string()));
    assert_eq!(a["flux-handoff.io/reason"], "GHCR rotation, run 1");
    assert_eq!(a[RECONCILE], "disabled");
    assert_eq!(a[REQUESTED_AT], "n-1");
    assert_eq!(a["keep"], "me");
    assert_eq!(held["spec"]["suspend"], json!(true));
    let prior = PriorRecord::parse(a["flux-handoff.io/prior"].as_str().unwrap()).unwrap();
    assert_eq!(prior.marks.len(), 3);
    assert_eq!(prior.marks[0].prior, Some(json!(false)));
    assert_eq!(guard.resource_version(), Some(rv(&held).as_str()));
    assert!(fencer.prove(&guard).await.unwrap());

    let ReleaseOutcome::Released {
        resource_version,
        kept_resume,
    } = fencer.release(guard).await.unwrap()
    else {
        panic!("expected Released");
    };
    let after = get_json(&api, "apps").await;
    assert_eq!(resource_version, Some(rv(&after)));
    assert_eq!(kept_resume, None, "nothing moved: every mark restored");
    assert_eq!(annotations(&after), annotations(&before));
    assert_eq!(after["spec"], before["spec"]);
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
}

#[tokio::test]
async fn fence_on_configmap_without_annotations_and_on_helmrelease_round_trips() {
    let ns = TestNs::new("generic").await.unwrap();
    let owner = owner(2);
    let fencer = fencer(&ns, &owner);

    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("plain".into()),
            ..ObjectMeta::default()
        },
        data: Some([("k".to_string(), "v".to_string())].into()),
        ..ConfigMap::default()
    };
    ns.api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let cm_ref = ObjectRef::new(ApiResource::erase::<ConfigMap>(&()), &ns.name, "plain");
    let marks = vec![
        Mark::field("/data/k", json!("fenced")),
        Mark::field("/data/added", json!("x")),
    ];
    let guard = guard_of(fencer.acquire(&cm_ref, marks, None).await.unwrap());
    let held = ns.api::<ConfigMap>().get("plain").await.unwrap();
    assert_eq!(held.data.as_ref().unwrap()["k"], "fenced");
    assert_eq!(held.data.as_ref().unwrap()["added"], "x");
    assert_eq!(
        held.metadata.annotations.as_ref().unwrap()["flux-handoff.io/owner"],
        owner.to_string()
    );
    assert!(matches!(
        fencer.release(guard).await.unwrap(),
        ReleaseOutcome::Released { .. }
    ));
    let after = ns.api::<ConfigMap>().get("plain").await.unwrap();
    assert_eq!(after.data, cm.data);
    assert!(after.metadata.annotations.unwrap_or_default().is_empty());

    let hr_api: Api<DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &helmrelease_resource());
    let hr: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": { "name": "podinfo" },
        "spec": { "interval": "5m", "chart": { "spec": { "chart": "podinfo" } } },
    }))
    .unwrap();
    hr_api.create(&PostParams::default(), &hr).await.unwrap();
    let hr_ref = ObjectRef::new(helmrelease_resource(), &ns.name, "podinfo");
    let guard = guard_of(
        fencer
            .acquire(&hr_ref, flux_marks("n-2"), None)
            .await
            .unwrap(),
    );
    assert_eq!(
        get_json(&hr_api, "podinfo").await["spec"]["suspend"],
        json!(true)
    );
    assert!(matches!(
        fencer.release(guard).await.unwrap(),
        ReleaseOutcome::Released { .. }
    ));
    let after = get_json(&hr_api, "podinfo").await;
    assert!(
        after["spec"].get("suspend").is_none(),
        "absent prior is removed again: {after}"
    );
    assert!(annotations(&after).is_null());
}

#[tokio::test]
async fn foreign_owner_is_refused_by_value_and_nothing_is_written() {
    let ns = TestNs::new("refuse").await.unwrap();
    create_ks(&ns, "apps").await;
    let api = ks_api(&ns);
    let first = owner(1);
    let held = guard_of(
        fencer(&ns, &first)
            .acquire(&ks_ref(&ns, "apps"), flux_marks("a"), None)
            .await
            .unwrap(),
    );
    let before = get_json(&api, "apps").await;

    let outcome = fencer(&ns, &owner(2))
        .acquire(&ks_ref(&ns, "apps"), flux_marks("b"), None)
        .await
        .unwrap();
    let AcquireOutcome::Refused { holder } = outcome else {
        panic!("expected Refused, got {outcome:?}")
    };
    assert_eq!(holder, first.to_string());
    assert_eq!(get_json(&api, "apps").await, before);
    let released = fencer(&ns, &first).release(held).await.unwrap();
    assert!(
        matches!(released, ReleaseOutcome::Released { .. }),
        "{released:?}"
    );
}

#[tokio::test]
async fn already_suspended_by_someone_else_is_refused_and_missing_object_is_not_found() {
    let ns = TestNs::new("marked").await.unwrap();
    let api = ks_api(&ns);
    api.create(
        &PostParams::default(),
        &kustomization("paused").suspended().build(&ns.name),
    )
    .await
    .unwrap();
    let before = get_json(&api, "paused").await;
    let f = fencer(&ns, &owner(1));
    let outcome = f
        .acquire(&ks_ref(&ns, "paused"), flux_marks("n"), None)
        .await
        .unwrap();
    assert!(
        matches!(outcome, AcquireOutcome::AlreadyMarked { at: MarkAt::Field(ref p) } if p == "/spec/suspend"),
        "{outcome:?}"
    );
    assert_eq!(get_json(&api, "paused").await, before);
    let missing = f
        .acquire(&ks_ref(&ns, "missing"), flux_marks("n"), None)
        .await
        .unwrap();
    assert!(matches!(missing, AcquireOutcome::NotFound), "{missing:?}");
}

#[tokio::test]
async fn acquire_racing_a_foreign_writer_gets_422_and_leaves_the_writers_state() {
    let ns = TestNs::new("race").await.unwrap();
    create_ks(&ns, "apps").await;
    let api = ks_api(&ns);
    let f = fencer(&ns, &owner(1));
    let obj = ks_ref(&ns, "apps");
    let AcquireDecision::Patch(plan) = f.plan_acquire(&obj, &flux_marks("n"), None).await.unwrap()
    else {
        panic!("expected a plan");
    };
    // Another writer moves the object between our read and our write.
    let writers = merge(
        &api,
        "apps",
        json!({ "metadata": { "annotations": { "writer": "was-here" } } }),
    )
    .await;

    let applied = f.apply_acquire(&obj, plan, None).await.unwrap();
    assert!(matches!(applied, Applied::Moved), "{applied:?}");
    assert_eq!(
        get_json(&api, "apps").await,
        writers,
        "the object is exactly as the writer left it"
    );

    // The retry loop re-reads and decides again: now it fences on top of the writer's state.
    let guard = guard_of(f.acquire(&obj, flux_marks("n"), None).await.unwrap());
    assert_eq!(
        annotations(&get_json(&api, "apps").await)["writer"],
        "was-here"
    );
    assert!(matches!(
        f.release(guard).await.unwrap(),
        ReleaseOutcome::Released { .. }
    ));
}
