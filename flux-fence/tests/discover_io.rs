//! Tier 2: fence discovery across namespaces against the real kube-apiserver.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use flux_fence::discover::{FoundState, ReleasePlan, Scope, discover, inspect};
use flux_fence::outcome::AcquireOutcome;
use flux_fence::{
    AnnotationKeys, Holder, Lease, LeaseAcquire, LeaseConfig, ManualClock, Mark, ObjectRef,
    SystemClock,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use testkit::TestNs;
use testkit::fixtures::kustomization_resource;

#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "one scenario told start to end reads best in one piece"
)]
async fn discovery_lists_fences_in_several_namespaces_with_age_and_a_working_release_patch() {
    let (n1, n2, n3) = (
        TestNs::new("disc-a").await.unwrap(),
        TestNs::new("disc-b").await.unwrap(),
        TestNs::new("disc-c").await.unwrap(),
    );
    let t0 = Timestamp::now();
    let clock = ManualClock::new(t0);
    let lease_cfg = LeaseConfig::new(n1.name.clone(), "flux-handoff");
    let LeaseAcquire::Acquired(lease) = Lease::acquire(
        n1.client.clone(),
        lease_cfg.clone(),
        Holder::generate(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap() else {
        panic!("lease");
    };
    let owner = lease.owner();

    let mut originals = Vec::new();
    for ns in [&n1, &n2] {
        originals.push(create_ks(ns, "apps").await);
        let f = fencer(ns, &owner).with_clock(Arc::new(clock.clone()));
        let AcquireOutcome::Acquired(g) = f
            .acquire(&ks_ref(ns, "apps"), flux_marks("n"), Some("disc"))
            .await
            .unwrap()
        else {
            panic!("acquire");
        };
        drop(g); // left behind, as by a crashed run
    }
    let cm_resource = ApiResource::erase::<ConfigMap>(&());
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("cfg".into()),
            ..ObjectMeta::default()
        },
        data: Some([("k".to_string(), "v".to_string())].into()),
        ..ConfigMap::default()
    };
    n3.api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let f = fencer(&n3, &owner).with_clock(Arc::new(clock.clone()));
    let cm_ref = ObjectRef::new(cm_resource.clone(), &n3.name, "cfg");
    let AcquireOutcome::Acquired(g) = f
        .acquire(&cm_ref, vec![Mark::field("/data/k", json!("x"))], None)
        .await
        .unwrap()
    else {
        panic!("acquire");
    };
    drop(g);
    // A malformed owner annotation is listed, never skipped.
    let bad = ConfigMap {
        metadata: ObjectMeta {
            name: Some("bad".into()),
            annotations: Some(
                [(
                    "flux-handoff.io/owner".to_string(),
                    "not an owner".to_string(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    n3.api::<ConfigMap>()
        .create(&PostParams::default(), &bad)
        .await
        .unwrap();

    clock.advance(Duration::from_secs(90));
    let scope = Scope::Namespaces(vec![n1.name.clone(), n2.name.clone(), n3.name.clone()]);
    let report = discover(
        &n1.client,
        &AnnotationKeys::default(),
        &[kustomization_resource(), cm_resource],
        &scope,
        Some(&lease_cfg),
        &clock,
    )
    .await
    .unwrap();

    let found_lease = report.lease.expect("lease listed");
    assert_eq!(found_lease.holder, Some(owner.holder.to_string()));
    assert_eq!(found_lease.epoch, owner.epoch.0);
    assert!(found_lease.release_patch.is_some());

    assert_eq!(report.fences.len(), 4, "{:#?}", report.fences);
    let names: Vec<_> = report
        .fences
        .iter()
        .map(|f| (f.object.namespace.clone(), f.object.name.clone()))
        .collect();
    assert!(names.contains(&(n3.name.clone(), "bad".into())));
    let malformed: Vec<_> = report
        .fences
        .iter()
        .filter(|f| matches!(f.state, FoundState::Malformed { .. }))
        .collect();
    assert_eq!(malformed.len(), 1);
    assert_eq!(malformed[0].object.name, "bad");

    for (ns, original) in [(&n1, &originals[0]), (&n2, &originals[1])] {
        let found = report
            .fences
            .iter()
            .find(|f| f.object.namespace == ns.name && f.object.name == "apps")
            .unwrap();
        let FoundState::Fence {
            owner: o,
            age,
            release: ReleasePlan::Patch(patch),
            ..
        } = &found.state
        else {
            panic!("{found:?}");
        };
        assert_eq!(o, &owner);
        assert_eq!(*age, Duration::from_secs(90));
        // The printed patch is a CAS that restores the object exactly.
        let patch: json_patch::Patch = serde_json::from_str(patch).unwrap();
        let api = ks_api(ns);
        api.patch(
            "apps",
            &PatchParams::default(),
            &Patch::Json::<()>(patch.clone()),
        )
        .await
        .unwrap();
        let after = get_json(&api, "apps").await;
        assert_eq!(after["spec"], original["spec"]);
        assert_eq!(annotations(&after), annotations(original));
        // Applying it again fails: the owner test no longer holds.
        let err = api
            .patch("apps", &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
            .unwrap_err();
        assert!(
            matches!(err, kube::Error::Api(ref s) if s.code == 422),
            "{err}"
        );
    }
    let _ = lease.release().await.unwrap();
}

#[tokio::test]
async fn discovery_over_all_namespaces_finds_our_fence_and_withholds_a_release_after_a_moved_mark()
{
    let ns = TestNs::new("disc-all").await.unwrap();
    create_ks(&ns, "apps").await;
    let owner = owner(5);
    let f = fencer(&ns, &owner);
    let AcquireOutcome::Acquired(g) = f
        .acquire(&ks_ref(&ns, "apps"), flux_marks("n"), None)
        .await
        .unwrap()
    else {
        panic!("acquire");
    };
    drop(g);
    // More than a resume (which alone is released keeping it): `reconcile` changed too.
    merge(
        &ks_api(&ns),
        "apps",
        json!({ "spec": { "suspend": false }, "metadata": { "annotations": { RECONCILE: "enabled" } } }),
    )
    .await;

    let report = discover(
        &ns.client,
        &AnnotationKeys::default(),
        &[kustomization_resource()],
        &Scope::All,
        None,
        &SystemClock,
    )
    .await
    .unwrap();
    assert!(report.lease.is_none());
    let found = report
        .fences
        .iter()
        .find(|f| f.object.namespace == ns.name)
        .expect("our fence");
    let FoundState::Fence { release, .. } = &found.state else {
        panic!("{found:?}")
    };
    assert!(
        matches!(release, ReleasePlan::Withheld { .. }),
        "{release:?}"
    );
}

#[test]
fn inspect_ignores_unfenced_objects_and_reports_malformed_prior() {
    let keys = AnnotationKeys::default();
    let now = Timestamp::now();
    let ar = kustomization_resource();
    let plain = json!({ "metadata": { "name": "a", "namespace": "n", "uid": "u", "annotations": { "x": "y" } } });
    assert!(inspect(&plain, &ar, &keys, now).is_none());
    let bad_prior = json!({ "metadata": { "name": "a", "namespace": "n", "uid": "u", "annotations": {
        "flux-handoff.io/owner": "gh1.1-abcdef;1", "flux-handoff.io/prior": "{oops" } } });
    let found = inspect(&bad_prior, &ar, &keys, now).unwrap();
    assert!(
        matches!(found.state, FoundState::Malformed { ref owner_annotation, .. } if owner_annotation == "gh1.1-abcdef;1")
    );
}
