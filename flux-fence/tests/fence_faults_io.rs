//! Tier 2: owner fences under faults against the real kube-apiserver — recreated objects,
//! lost responses, crashed holders, missing permissions, Events. Every test asserts what the
//! server holds afterwards.

mod common;

use common::*;
use flux_fence::decide::AcquireDecision;
use flux_fence::decide::Unclear;
use flux_fence::mark::MarkAt;
use flux_fence::outcome::AcquireOutcome;
use flux_fence::outcome::Applied;
use flux_fence::outcome::Kept;
use flux_fence::outcome::LostAcquire;
use flux_fence::outcome::ReleaseOutcome;
use flux_fence::{AnnotationKeys, FenceError, Fencer, ObjectRef};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use testkit::TestNs;

fn guard_of(outcome: AcquireOutcome) -> flux_fence::FenceGuard {
    match outcome {
        AcquireOutcome::Acquired(g) => g,
        other => panic!("expected Acquired, got {other:?}"),
    }
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
    let LostAcquire::Landed(guard) = f.resolve_lost_acquire(&obj, p, Some("lost")).await.unwrap()
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

    // Sent, then another writer un-suspends (and re-enables reconciling) before our re-read:
    // fail closed, keep the guard.
    let p = plan(f.clone(), obj.clone()).await;
    api.patch(
        "apps",
        &PatchParams::default(),
        &Patch::Json::<()>(p.patch.clone()),
    )
    .await
    .unwrap();
    let by_hand = json!({
        "spec": { "suspend": false },
        "metadata": { "annotations": { RECONCILE: "enabled" } }
    });
    merge(&api, "apps", by_hand).await;
    let LostAcquire::Unresolved { guard, why } =
        f.resolve_lost_acquire(&obj, p, None).await.unwrap()
    else {
        panic!("expected unresolved");
    };
    assert_eq!(why, Unclear::Differs);
    assert!(!guard.is_confirmed());
    // Cleanup with that guard is still a CAS: exact marks other than the resume alone moved,
    // so it is kept.
    let before = get_json(&api, "apps").await;
    let ReleaseOutcome::Kept { guard, why } = f.release(guard).await.unwrap() else {
        panic!("expected Kept")
    };
    assert_eq!(
        why,
        Kept::MarkMoved {
            at: MarkAt::Annotation(RECONCILE.into())
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
    ns.client_with_role(sa, rules).await.unwrap()
}

use testkit::rule;

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
