//! Tier 2: a release whose response is lost without being applied (a 500, a reset connection)
//! is re-read and sent again as a CAS, so resume still gives everything back.

mod common;

use common::*;
use fault_proxy::{Fault, Proxy};
use flux_fence::{AnnotationKeys, Fencer};
use flux_suspend::handoff::Handoff;
use flux_suspend::handoff::PauseOutcome;
use flux_suspend::retire::Strategy;

#[tokio::test]
async fn resume_releases_after_a_500_and_a_reset_on_the_release_patches() {
    let w = World::new("sus-rel-lost").await;
    let (p0, t0) = (w.get(PARENT).await, w.get(TARGET).await);
    let proxy = Proxy::start().await.unwrap();
    let client = proxy.client().unwrap();
    let fencer = Fencer::new(client.clone(), AnnotationKeys::default(), w.lease.owner())
        .with_lease(w.lease.handle());
    let mut h = Handoff::new(client, fencer);
    assert!(matches!(
        h.pause(&w.chain(), &w.opts(Strategy::Ack), &mut |_| {})
            .await
            .unwrap(),
        PauseOutcome::Proven(_)
    ));
    let patches = proxy.counts()["patch kustomizations"];
    // The target's release is answered 500 without reaching the server; its second try goes
    // through; the parent's release then meets a reset connection.
    let status = Fault::Status {
        code: 500,
        retry_after: None,
    };
    proxy.arm_on("patch kustomizations", patches + 1, status);
    proxy.arm_on("patch kustomizations", patches + 3, Fault::Reset);
    let report = h.resume(None).await.unwrap();
    assert_eq!(report.released.len(), 2, "{report:?}");
    assert!(!h.holds_anything());
    for (name, before) in [(PARENT, &p0), (TARGET, &t0)] {
        let now = w.get(name).await;
        assert!(
            now.pointer("/metadata/annotations")
                .and_then(|a| a.get(OWNER_KEY))
                .is_none(),
            "{name} still fenced: {now}"
        );
        assert_eq!(now["spec"], before["spec"], "{name}");
    }
    // Each lost release was followed by a read before the write went again, and only the
    // second try of each reached the server.
    let log: Vec<_> = proxy
        .log()
        .into_iter()
        .skip_while(|s| s.kind != "patch kustomizations")
        .collect();
    let releases: Vec<_> = log
        .iter()
        .enumerate()
        .filter(|(_, s)| s.kind == "patch kustomizations")
        .map(|(i, s)| (i, s.forwarded))
        .collect();
    let tail = &releases[releases.len() - 4..];
    assert_eq!(
        tail.iter().map(|(_, f)| *f).collect::<Vec<_>>(),
        [false, true, false, true],
        "{log:?}"
    );
    for pair in [(tail[0].0, tail[1].0), (tail[2].0, tail[3].0)] {
        assert!(
            log[pair.0 + 1..pair.1]
                .iter()
                .any(|s| s.kind == "get kustomizations" && s.forwarded),
            "no re-read between the lost release and its retry: {log:?}"
        );
    }
}
