//! Tier 2: owner fences against the real kube-apiserver. Every test asserts what the server
//! holds afterwards.

mod common;

use common::*;
use flux_fence::{
    AcquireDecision, AcquireOutcome, AnnotationKeys, Applied, FenceError, Fencer, Kept,
    LostAcquire, Mark, MarkAt, ObjectRef, PriorRecord, ReleaseOutcome, Unclear,
};
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams,
    PostParams,
};
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

    let ReleaseOutcome::Released { resource_version } = fencer.release(guard).await.unwrap() else {
        panic!("expected Released");
    };
    let after = get_json(&api, "apps").await;
    assert_eq!(resource_version, Some(rv(&after)));
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

#[tokio::test]
async fn deleted_and_recreated_object_is_detected_by_uid_and_never_touched() {
    let ns = TestNs::new("uid").await.unwrap();
    let old = create_ks(&ns, "apps").await;
    let api = ks_api(&ns);
    let f = fencer(&ns, &owner(1));
    let obj = ks_ref(&ns, "apps");
    let AcquireDecision::Patch(stale_plan) =
        f.plan_acquire(&obj, &flux_marks("n"), None).await.unwrap()
    else {
        panic!("expected a plan");
    };
    let guard = guard_of(f.acquire(&obj, flux_marks("n"), None).await.unwrap());

    api.delete("apps", &DeleteParams::default()).await.unwrap();
    eventually(std::time::Duration::from_secs(30), "deletion", || async {
        api.get_opt("apps").await.unwrap().is_none()
    })
    .await;
    let new = create_ks(&ns, "apps").await;
    assert_ne!(new["metadata"]["uid"], old["metadata"]["uid"]);

    assert!(!f.prove(&guard).await.unwrap());
    let applied = f.apply_acquire(&obj, stale_plan, None).await.unwrap();
    assert!(matches!(applied, Applied::Moved), "{applied:?}");
    assert!(matches!(
        f.release(guard).await.unwrap(),
        ReleaseOutcome::Recreated
    ));
    assert_eq!(
        get_json(&api, "apps").await,
        new,
        "the new object was not touched"
    );
}

#[tokio::test]
async fn lost_acquire_response_is_adopted_only_on_exactly_the_post_state() {
    let ns = TestNs::new("lost").await.unwrap();
    create_ks(&ns, "apps").await;
    let api = ks_api(&ns);
    let f = fencer(&ns, &owner(1));
    let obj = ks_ref(&ns, "apps");
    let plan = |f: Fencer, obj: ObjectRef| async move {
        match f
            .plan_acquire(&obj, &flux_marks("n"), Some("lost"))
            .await
            .unwrap()
        {
            AcquireDecision::Patch(p) => p,
            other => panic!("expected a plan, got {other:?}"),
        }
    };

    // Never sent: the re-read shows the unchanged object.
    let unsent = plan(f.clone(), obj.clone()).await;
    assert!(matches!(
        f.resolve_lost_acquire(&obj, unsent, None).await.unwrap(),
        LostAcquire::NotApplied
    ));

    // Sent, response "lost": adopted, with the server's resourceVersion.
    let p = plan(f.clone(), obj.clone()).await;
    api.patch(
        "apps",
        &PatchParams::default(),
        &Patch::Json::<()>(p.patch.clone()),
    )
    .await
    .unwrap();
    let LostAcquire::Adopted(guard) = f.resolve_lost_acquire(&obj, p, Some("lost")).await.unwrap()
    else {
        panic!("expected adoption");
    };
    assert_eq!(
        guard.resource_version(),
        Some(rv(&get_json(&api, "apps").await).as_str())
    );
    assert!(matches!(
        f.release(guard).await.unwrap(),
        ReleaseOutcome::Released { .. }
    ));

    // Sent, then another writer un-suspends before our re-read: fail closed, keep the guard.
    let p = plan(f.clone(), obj.clone()).await;
    api.patch(
        "apps",
        &PatchParams::default(),
        &Patch::Json::<()>(p.patch.clone()),
    )
    .await
    .unwrap();
    merge(&api, "apps", json!({ "spec": { "suspend": false } })).await;
    let LostAcquire::Unresolved { guard, why } =
        f.resolve_lost_acquire(&obj, p, None).await.unwrap()
    else {
        panic!("expected unresolved");
    };
    assert_eq!(why, Unclear::Differs);
    assert!(!guard.is_confirmed());
    // Cleanup with that guard is still a CAS: the exact suspend mark moved, so it is kept.
    let before = get_json(&api, "apps").await;
    let ReleaseOutcome::Kept { guard, why } = f.release(guard).await.unwrap() else {
        panic!("expected Kept")
    };
    assert_eq!(
        why,
        Kept::MarkMoved {
            at: MarkAt::Field("/spec/suspend".into())
        }
    );
    assert_eq!(get_json(&api, "apps").await, before);
    drop(guard); // left for cleanup and discovery; dropping only logs
}

#[tokio::test]
async fn release_keeps_another_writers_requested_at_and_another_process_can_release() {
    let ns = TestNs::new("release").await.unwrap();
    let before = create_ks(&ns, "apps").await;
    let api = ks_api(&ns);
    let first = owner(1);
    let guard = guard_of(
        fencer(&ns, &first)
            .acquire(&ks_ref(&ns, "apps"), flux_marks("ours"), None)
            .await
            .unwrap(),
    );
    merge(
        &api,
        "apps",
        json!({ "metadata": { "annotations": { REQUESTED_AT: "someone-else" } } }),
    )
    .await;
    // The first process "crashes": its guard is gone (dropping it only logs).
    drop(guard);

    // Another process finds the fence and releases it from the annotations alone.
    let cleaner = fencer(&ns, &owner(9));
    let adopted = cleaner
        .adopt_recorded(&ks_ref(&ns, "apps"), &first)
        .await
        .unwrap()
        .expect("recorded fence");
    assert!(matches!(
        cleaner.release(adopted).await.unwrap(),
        ReleaseOutcome::Released { .. }
    ));
    let after = get_json(&api, "apps").await;
    assert_eq!(after["spec"], before["spec"]);
    assert_eq!(
        annotations(&after),
        json!({ "keep": "me", REQUESTED_AT: "someone-else" })
    );
    assert!(
        cleaner
            .adopt_recorded(&ks_ref(&ns, "apps"), &first)
            .await
            .unwrap()
            .is_none()
    );
}

async fn bind(ns: &TestNs, sa: &str, rules: Vec<PolicyRule>) -> kube::Client {
    let role = Role {
        metadata: ObjectMeta {
            name: Some(sa.into()),
            ..ObjectMeta::default()
        },
        rules: Some(rules),
    };
    ns.api::<Role>()
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some(sa.into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: sa.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: sa.into(),
            namespace: Some(ns.name.clone()),
            ..Subject::default()
        }]),
    };
    ns.api::<RoleBinding>()
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    ns.service_account_client(sa).await.unwrap()
}

fn rule(group: &str, resource: &str, verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(vec![resource.into()]),
        verbs: verbs.iter().map(|v| (*v).to_string()).collect(),
        ..PolicyRule::default()
    }
}

#[tokio::test]
async fn service_account_without_patch_gets_a_clear_forbidden_error_and_nothing_changes() {
    let ns = TestNs::new("rbac").await.unwrap();
    let before = create_ks(&ns, "apps").await;
    let client = bind(
        &ns,
        "reader",
        vec![rule(
            "kustomize.toolkit.fluxcd.io",
            "kustomizations",
            &["get", "list"],
        )],
    )
    .await;
    let f = Fencer::new(client, AnnotationKeys::default(), owner(1));
    let err = f
        .acquire(&ks_ref(&ns, "apps"), flux_marks("n"), None)
        .await
        .unwrap_err();
    let FenceError::Forbidden {
        verb,
        ref resource,
        ref target,
        ..
    } = err
    else {
        panic!("expected Forbidden, got {err:?}")
    };
    assert_eq!(verb, "patch");
    assert_eq!(resource, "kustomizations.kustomize.toolkit.fluxcd.io");
    assert_eq!(target, &format!("{}/apps", ns.name));
    assert_eq!(
        err.to_string(),
        format!(
            "forbidden to patch kustomizations.kustomize.toolkit.fluxcd.io {}/apps",
            ns.name
        )
    );
    assert_eq!(get_json(&ks_api(&ns), "apps").await, before);
}

#[tokio::test]
async fn events_are_recorded_on_acquire_and_release_and_their_failure_is_not_fatal() {
    let ns = TestNs::new("events").await.unwrap();
    create_ks(&ns, "apps").await;
    create_ks(&ns, "quiet").await;
    let owner = owner(4);
    let f = fencer(&ns, &owner);
    let guard = guard_of(
        f.acquire(
            &ks_ref(&ns, "apps"),
            flux_marks("n"),
            Some("rotation run 7"),
        )
        .await
        .unwrap(),
    );
    assert!(matches!(
        f.release(guard).await.unwrap(),
        ReleaseOutcome::Released { .. }
    ));
    let events: Api<Event> = ns.api();
    let list = events.list(&ListParams::default()).await.unwrap().items;
    let on_apps: Vec<_> = list
        .iter()
        .filter(|e| e.involved_object.name.as_deref() == Some("apps"))
        .collect();
    let fenced = on_apps
        .iter()
        .find(|e| e.reason.as_deref() == Some("HandoffFenced"))
        .expect("HandoffFenced");
    let released = on_apps
        .iter()
        .find(|e| e.reason.as_deref() == Some("HandoffReleased"))
        .expect("HandoffReleased");
    assert_eq!(
        fenced.message.as_deref(),
        Some(format!("fenced by {owner}: rotation run 7").as_str())
    );
    assert_eq!(
        released.message.as_deref(),
        Some(format!("released by {owner}: rotation run 7").as_str())
    );
    assert_eq!(
        fenced.involved_object.kind.as_deref(),
        Some("Kustomization")
    );

    // A client that may patch Kustomizations but not create Events still fences.
    let client = bind(
        &ns,
        "fencer",
        vec![rule(
            "kustomize.toolkit.fluxcd.io",
            "kustomizations",
            &["get", "patch"],
        )],
    )
    .await;
    let narrow = Fencer::new(client, AnnotationKeys::default(), owner.clone());
    let guard = guard_of(
        narrow
            .acquire(&ks_ref(&ns, "quiet"), flux_marks("n"), None)
            .await
            .unwrap(),
    );
    assert!(matches!(
        narrow.release(guard).await.unwrap(),
        ReleaseOutcome::Released { .. }
    ));
    let list = events.list(&ListParams::default()).await.unwrap().items;
    assert!(
        list.iter()
            .all(|e| e.involved_object.name.as_deref() != Some("quiet"))
    );
}
