//! Tier 2 (issue 25, item 5): a session stopped while a fence write hangs abandons it after the
//! grace and settles it in cleanup. The proxy forwards the abandoned write only after cleanup
//! ended: it must not land (before: cleanup's one re-read concluded "not applied", released the
//! Lease, and the late write then fenced the parent under a free Lease).

mod common;

use std::time::Duration;

use common::{OWNER_KEY, PARENT, TARGET, annotation, suspended};
use fault_proxy::Proxy;
use flux_model::model::start_seeded;
use flux_suspend::object::{get_json, kustomization};
use flux_suspend::{Cancel, Session, SessionError, SessionOptions, TargetSpec};
use k8s_openapi::api::coordination::v1::Lease;
use testkit::TestNs;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_write_an_abandoned_fence_write_forwarded_after_cleanup_does_not_land() {
    let ns = TestNs::new("late-session").await.unwrap();
    let _model = start_seeded(&ns.client, &ns.name, |c| c).await.unwrap();
    let mut opts = SessionOptions::new(vec![TargetSpec::new(kustomization(&ns.name, TARGET))]);
    opts.lease.namespace.clone_from(&ns.name);
    opts.interval = Duration::from_millis(100);
    opts.timeout = Duration::from_secs(30);

    let proxy = Proxy::start().await.unwrap();
    // The first fence write of the pause (the parent's) is held, unforwarded.
    let held = proxy.hold_on("patch kustomizations", 1);
    let cancel = Cancel::new();
    let session = Session::start(proxy.client().unwrap(), opts, cancel.clone())
        .await
        .unwrap();
    let run = session.run_paused(|_| {}, |_| async { Ok::<_, std::io::Error>(()) });
    let hurry = async {
        tokio::time::timeout(Duration::from_mins(1), held.arrived())
            .await
            .expect("the parent's fence write never came");
        // A second signal: the write in flight is abandoned at once.
        cancel.hurry();
    };
    let (outcome, ()) = tokio::join!(run, hurry);
    assert!(
        matches!(outcome.result, Err(SessionError::Cancelled { .. })),
        "{:?}",
        outcome.result
    );
    assert_eq!(outcome.cleanup, Ok(()));
    assert!(outcome.lease_released);
    let lease = ns.api::<Lease>().get("flux-handoff").await.unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity,
        None,
        "the Lease is free"
    );

    // Now the abandoned write reaches the server.
    held.forward();
    let status = held.answered().await;
    let parent = get_json(&ns.client, &kustomization(&ns.name, PARENT))
        .await
        .unwrap();
    assert_eq!(
        annotation(&parent, OWNER_KEY),
        None,
        "the abandoned fence write landed after cleanup, under a free Lease (answered {status})"
    );
    assert!(!suspended(&parent), "{parent}");
    assert_ne!(status, 200);
    assert_eq!(
        parent.pointer("/metadata/annotations/flux-handoff.io~1settling"),
        None,
        "the settlement leaves no mark"
    );
    let target = get_json(&ns.client, &kustomization(&ns.name, TARGET))
        .await
        .unwrap();
    assert_eq!(annotation(&target, OWNER_KEY), None);
    assert!(!suspended(&target));
}
