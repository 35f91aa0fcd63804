//! Tier 2: edge cases of fences and the Lease against the real kube-apiserver. Every test
//! asserts what the server holds afterwards.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use flux_fence::discover::{Scope, discover};
use flux_fence::mark::MarkAt;
use flux_fence::outcome::AcquireOutcome;
use flux_fence::outcome::Kept;
use flux_fence::outcome::ReleaseOutcome;
use flux_fence::{
    AnnotationKeys, FenceError, FenceGuard, Fencer, Holder, Lease, LeaseAcquire, LeaseConfig,
    LossReason, Mark, SystemClock,
};
use k8s_openapi::api::coordination::v1::{Lease as KubeLease, LeaseSpec};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use serde_json::json;
use testkit::TestNs;
use testkit::fixtures::kustomization_resource;

fn guard_of(outcome: AcquireOutcome) -> FenceGuard {
    match outcome {
        AcquireOutcome::Acquired(g) => g,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

async fn fenced(ns: &TestNs, f: &Fencer, name: &str) -> FenceGuard {
    create_ks(ns, name).await;
    guard_of(
        f.acquire(&ks_ref(ns, name), flux_marks("n"), None)
            .await
            .unwrap(),
    )
}

async fn sa_client(
    ns: &TestNs,
    sa: &str,
    group: &str,
    resource: &str,
    verbs: &[&str],
) -> kube::Client {
    ns.client_with_role(sa, vec![testkit::rule(group, resource, verbs)])
        .await
        .unwrap()
}

#[tokio::test]
async fn acquiring_twice_with_the_same_owner_and_marks_adopts_without_writing() {
    let ns = TestNs::new("idem").await.unwrap();
    let f = fencer(&ns, &owner(1));
    let first = fenced(&ns, &f, "apps").await;
    let before = get_json(&ks_api(&ns), "apps").await;
    let second = guard_of(
        f.acquire(&ks_ref(&ns, "apps"), flux_marks("n"), None)
            .await
            .unwrap(),
    );
    assert_eq!(second.resource_version(), Some(rv(&before).as_str()));
    assert_eq!(get_json(&ks_api(&ns), "apps").await, before);
    assert!(matches!(
        f.release(second).await.unwrap(),
        ReleaseOutcome::Released { .. }
    ));
    assert!(matches!(
        f.release(first).await.unwrap(),
        ReleaseOutcome::NotOurs { holder: None }
    ));
}

#[tokio::test]
async fn release_after_another_owner_replaced_ours_writes_nothing() {
    let ns = TestNs::new("replaced").await.unwrap();
    let f = fencer(&ns, &owner(1));
    let guard = fenced(&ns, &f, "apps").await;
    let api = ks_api(&ns);
    let taken = merge(
        &api,
        "apps",
        json!({ "metadata": { "annotations": { "flux-handoff.io/owner": "gh7.1-other0;9" } } }),
    )
    .await;
    assert!(!f.prove(&guard).await.unwrap());
    let outcome = f.release(guard).await.unwrap();
    assert!(
        matches!(outcome, ReleaseOutcome::NotOurs { holder: Some(ref h) } if h == "gh7.1-other0;9"),
        "{outcome:?}"
    );
    assert_eq!(get_json(&api, "apps").await, taken);
}

#[tokio::test]
async fn release_of_a_deleted_object_is_gone() {
    let ns = TestNs::new("gone").await.unwrap();
    let f = fencer(&ns, &owner(1));
    let guard = fenced(&ns, &f, "apps").await;
    ks_api(&ns)
        .delete("apps", &DeleteParams::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "deletion", || async {
        ks_api(&ns).get_opt("apps").await.unwrap().is_none()
    })
    .await;
    assert!(!f.prove(&guard).await.unwrap());
    assert!(matches!(
        f.release(guard).await.unwrap(),
        ReleaseOutcome::Gone
    ));
    assert!(ks_api(&ns).get_opt("apps").await.unwrap().is_none());
}

/// A person's `flux resume` (spec.suspend false) is the only moved mark: the release keeps
/// their value, restores the rest and removes the fence (issue 35; the old code kept the fence).
#[tokio::test]
async fn release_engine_keeps_a_persons_resume_and_removes_the_fence() {
    let ns = TestNs::new("resumed").await.unwrap();
    let f = fencer(&ns, &owner(1));
    let guard = fenced(&ns, &f, "apps").await;
    merge(
        &ks_api(&ns),
        "apps",
        json!({ "spec": { "suspend": false } }),
    )
    .await;
    let outcome = f.release(guard).await.unwrap();
    let ReleaseOutcome::Released { kept_resume, .. } = outcome else {
        panic!("expected Released keeping the resume, got {outcome:?}")
    };
    assert_eq!(kept_resume, Some(MarkAt::Field("/spec/suspend".into())));
    let after = get_json(&ks_api(&ns), "apps").await;
    assert_eq!(after["spec"]["suspend"], json!(false), "{after}");
    assert_eq!(
        after["metadata"]["annotations"]["flux-handoff.io/owner"],
        serde_json::Value::Null,
        "{after}"
    );
}

/// A resume together with another moved mark (`reconcile` changed by hand) keeps the fence,
/// as any moved mark but the resume alone does.
#[tokio::test]
async fn release_keeps_the_fence_when_another_writer_resumed_and_moved_another_mark() {
    let ns = TestNs::new("resumed-more").await.unwrap();
    let f = fencer(&ns, &owner(1));
    let guard = fenced(&ns, &f, "apps").await;
    let resumed = merge(
        &ks_api(&ns),
        "apps",
        json!({ "spec": { "suspend": false }, "metadata": { "annotations": { RECONCILE: "enabled" } } }),
    )
    .await;
    let ReleaseOutcome::Kept { guard, why } = f.release(guard).await.unwrap() else {
        panic!("expected Kept")
    };
    assert_eq!(
        why,
        Kept::MarkMoved {
            at: MarkAt::Annotation(RECONCILE.into())
        }
    );
    assert_eq!(get_json(&ks_api(&ns), "apps").await, resumed);
    assert!(
        f.prove(&guard).await.unwrap(),
        "the owner annotation is still ours"
    );
    drop(guard);
}

#[tokio::test]
async fn annotation_keys_with_tilde_and_slash_and_a_custom_prefix_round_trip_on_the_server() {
    let ns = TestNs::new("keys").await.unwrap();
    let before = create_ks(&ns, "apps").await;
    let keys = AnnotationKeys::with_prefix("handoff.example.org");
    let f = Fencer::new(ns.client.clone(), keys.clone(), owner(1));
    let marks = vec![
        Mark::annotation("example.com/a-b", "v"),
        Mark::field("/spec/x~1y", json!({ "n": 1 })),
        Mark::field("/spec/t~0z", json!("tilde")),
    ];
    let guard = guard_of(f.acquire(&ks_ref(&ns, "apps"), marks, None).await.unwrap());
    let held = get_json(&ks_api(&ns), "apps").await;
    assert_eq!(annotations(&held)["example.com/a-b"], "v");
    assert_eq!(held["spec"]["t~z"], json!("tilde"));
    assert_eq!(
        annotations(&held)["handoff.example.org/owner"],
        json!(guard.owner().to_string())
    );
    assert_eq!(held["spec"]["x/y"], json!({ "n": 1 }));
    assert!(annotations(&held).get("flux-handoff.io/owner").is_none());

    // Discovery with the default keys does not see it; with the custom keys it does.
    let scope = Scope::Namespaces(vec![ns.name.clone()]);
    let kinds = [kustomization_resource()];
    let default = discover(
        &ns.client,
        &AnnotationKeys::default(),
        &kinds,
        &scope,
        None,
        &SystemClock,
    )
    .await
    .unwrap();
    assert!(default.fences.is_empty());
    let custom = discover(&ns.client, &keys, &kinds, &scope, None, &SystemClock)
        .await
        .unwrap();
    assert_eq!(custom.fences.len(), 1);

    assert!(matches!(
        f.release(guard).await.unwrap(),
        ReleaseOutcome::Released { .. }
    ));
    let after = get_json(&ks_api(&ns), "apps").await;
    assert_eq!(after["spec"], before["spec"]);
    assert_eq!(annotations(&after), annotations(&before));
}

#[tokio::test]
async fn invalid_marks_and_reasons_fail_before_any_write() {
    let ns = TestNs::new("invalid").await.unwrap();
    let before = create_ks(&ns, "apps").await;
    let f = fencer(&ns, &owner(1));
    let obj = ks_ref(&ns, "apps");
    let deep = f
        .acquire(
            &obj,
            vec![Mark::field("/spec/missing/deep", json!(1))],
            None,
        )
        .await
        .unwrap_err();
    assert!(matches!(deep, FenceError::InvalidMark { .. }), "{deep:?}");
    let own = f
        .acquire(
            &obj,
            vec![Mark::annotation("flux-handoff.io/owner", "x")],
            None,
        )
        .await
        .unwrap_err();
    assert!(matches!(own, FenceError::InvalidMark { .. }), "{own:?}");
    // A key the server refuses is a typed rejection, not a "moved" race.
    let bad_key = f
        .acquire(&obj, vec![Mark::annotation("example.com/a~b/c", "v")], None)
        .await
        .unwrap_err();
    assert!(
        matches!(bad_key, FenceError::Rejected { verb: "patch", .. }),
        "{bad_key:?}"
    );
    let long = "x".repeat(300);
    let reason = f
        .acquire(&obj, flux_marks("n"), Some(&long))
        .await
        .unwrap_err();
    assert!(
        matches!(reason, FenceError::InvalidReason { .. }),
        "{reason:?}"
    );
    assert_eq!(get_json(&ks_api(&ns), "apps").await, before);
}

#[tokio::test]
async fn exclusive_annotation_mark_already_set_is_refused_on_the_server() {
    let ns = TestNs::new("excl").await.unwrap();
    create_ks(&ns, "apps").await;
    let api = ks_api(&ns);
    let before = merge(
        &api,
        "apps",
        json!({ "metadata": { "annotations": { RECONCILE: "disabled" } } }),
    )
    .await;
    let f = fencer(&ns, &owner(1));
    let outcome = f
        .acquire(
            &ks_ref(&ns, "apps"),
            vec![Mark::annotation(RECONCILE, "disabled").exclusive()],
            None,
        )
        .await
        .unwrap();
    assert!(
        matches!(outcome, AcquireOutcome::AlreadyMarked { at: MarkAt::Annotation(ref k) } if k == RECONCILE),
        "{outcome:?}"
    );
    assert_eq!(get_json(&api, "apps").await, before);
}

#[tokio::test]
async fn fencing_with_a_lease_renews_it_before_the_write() {
    let ns = TestNs::new("assert").await.unwrap();
    create_ks(&ns, "apps").await;
    let cfg =
        LeaseConfig::new(ns.name.clone(), "flux-handoff").with_renew_every(Duration::from_hours(1));
    let LeaseAcquire::Acquired(lease) = Lease::acquire(
        ns.client.clone(),
        cfg,
        Holder::generate(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap() else {
        panic!("lease");
    };
    let leases: Api<KubeLease> = ns.api();
    let rv_before = leases
        .get("flux-handoff")
        .await
        .unwrap()
        .metadata
        .resource_version;
    let f = fencer(&ns, &lease.owner()).with_lease(lease.handle());
    let guard = guard_of(
        f.acquire(&ks_ref(&ns, "apps"), flux_marks("n"), None)
            .await
            .unwrap(),
    );
    let after = leases.get("flux-handoff").await.unwrap();
    assert_ne!(
        after.metadata.resource_version, rv_before,
        "the Lease was renewed (written) by the assert"
    );
    assert_eq!(
        after.spec.unwrap().holder_identity,
        Some(lease.owner().holder.to_string())
    );
    assert_eq!(
        annotations(&get_json(&ks_api(&ns), "apps").await)["flux-handoff.io/owner"],
        json!(lease.owner().to_string())
    );
    assert!(matches!(
        f.release(guard).await.unwrap(),
        ReleaseOutcome::Released { .. }
    ));
    let handle = lease.handle();
    let _ = lease.release().await.unwrap();
    let err = handle.assert().await.unwrap_err();
    assert!(
        matches!(
            err,
            FenceError::LeaseLost {
                reason: LossReason::Released
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn lease_already_naming_us_after_a_lost_create_response_is_adopted_at_its_epoch() {
    let ns = TestNs::new("lease-adopt").await.unwrap();
    let me = Holder::generate();
    // As if our create landed but its response was lost.
    let lease = KubeLease {
        metadata: ObjectMeta {
            name: Some("flux-handoff".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(me.to_string()),
            lease_duration_seconds: Some(60),
            lease_transitions: Some(1),
            renew_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                k8s_openapi::jiff::Timestamp::now(),
            )),
            ..LeaseSpec::default()
        }),
    };
    ns.api::<KubeLease>()
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    let cfg =
        LeaseConfig::new(ns.name.clone(), "flux-handoff").with_renew_every(Duration::from_hours(1));
    let LeaseAcquire::Acquired(guard) =
        Lease::acquire(ns.client.clone(), cfg, me, Arc::new(SystemClock))
            .await
            .unwrap()
    else {
        panic!("expected adoption");
    };
    assert_eq!(guard.epoch().0, 1);
    guard.assert().await.unwrap();
    let _ = guard.release().await.unwrap();
    assert_eq!(
        ns.api::<KubeLease>()
            .get("flux-handoff")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity,
        None
    );
}

#[tokio::test]
async fn missing_lease_permissions_and_list_permissions_are_clear_forbidden_errors() {
    let ns = TestNs::new("lease-rbac").await.unwrap();
    let client = sa_client(&ns, "no-lease", "coordination.k8s.io", "leases", &["get"]).await;
    let cfg = LeaseConfig::new(ns.name.clone(), "flux-handoff");
    let err = Lease::acquire(
        client.clone(),
        cfg,
        Holder::generate(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "forbidden to create leases.coordination.k8s.io {}/flux-handoff",
            ns.name
        )
    );
    assert!(
        ns.api::<KubeLease>()
            .get_opt("flux-handoff")
            .await
            .unwrap()
            .is_none()
    );

    let err = discover(
        &client,
        &AnnotationKeys::default(),
        &[kustomization_resource()],
        &Scope::Namespaces(vec![ns.name.clone()]),
        None,
        &SystemClock,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, FenceError::Forbidden { verb: "list", .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "forbidden to list kustomizations.kustomize.toolkit.fluxcd.io {}",
            ns.name
        )
    );
}

/// Flux Operator's resume removes `spec.suspend` instead of setting it false: the same
/// request for Flux back. The release keeps the removal, restores the rest and removes the
/// fence (before, the fence was withheld as a moved mark).
#[tokio::test]
async fn operator_kinds_a_removed_suspend_is_a_resume_the_release_keeps() {
    let ns = TestNs::new("removed").await.unwrap();
    let f = fencer(&ns, &owner(1));
    let guard = fenced(&ns, &f, "apps").await;
    merge(&ks_api(&ns), "apps", json!({ "spec": { "suspend": null } })).await;
    let outcome = f.release(guard).await.unwrap();
    let ReleaseOutcome::Released { kept_resume, .. } = outcome else {
        panic!("expected Released keeping the removal, got {outcome:?}")
    };
    assert_eq!(kept_resume, Some(MarkAt::Field("/spec/suspend".into())));
    let after = get_json(&ks_api(&ns), "apps").await;
    assert_eq!(after["spec"].get("suspend"), None, "{after}");
    assert_eq!(
        after["metadata"]["annotations"]["flux-handoff.io/owner"],
        serde_json::Value::Null,
        "{after}"
    );
}

/// What the kept removal rests on: the API server's JSON Patch passes a `null` test on a
/// missing path and fails it once the path holds a value (a resume undone by `flux suspend`
/// between the read and the release refuses the release).
#[tokio::test]
async fn release_engine_the_servers_null_test_holds_a_removed_value() {
    let ns = TestNs::new("null-test").await.unwrap();
    create_ks(&ns, "apps").await;
    merge(&ks_api(&ns), "apps", json!({ "spec": { "suspend": null } })).await;
    let test_null: json_patch::Patch = serde_json::from_value(json!([
        { "op": "test", "path": "/spec/suspend", "value": null },
        { "op": "add", "path": "/metadata/annotations/checked", "value": "yes" },
    ]))
    .unwrap();
    let pp = kube::api::PatchParams::default();
    ks_api(&ns)
        .patch(
            "apps",
            &pp,
            &kube::api::Patch::<()>::Json(test_null.clone()),
        )
        .await
        .expect("a null test on a missing path passes");
    merge(&ks_api(&ns), "apps", json!({ "spec": { "suspend": true } })).await;
    let refused = ks_api(&ns)
        .patch("apps", &pp, &kube::api::Patch::<()>::Json(test_null))
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422),
        "a null test on a present value must fail: {refused:?}"
    );
}
