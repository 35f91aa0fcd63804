//! Scenario 4, retirement strategies: the time from the start of the pause (its first write is
//! the parent's suspend patch, after one Lease assertion and one read) to the proven pause,
//! with `ack`, `restart` and `none`, while the parent is mid-reconcile (a new source revision
//! was just picked up) and every model phase takes [`Settings::phase`].

use std::time::Instant;

use anyhow::bail;
use flux_fence::{AnnotationKeys, Fencer};
use flux_suspend::io::{ControllerRef, Timing};
use flux_suspend::object::kustomization;
use flux_suspend::retire::Strategy;
use flux_suspend::{Chain, Handoff, PauseOptions, PauseOutcome};

use super::handoff::{BUDGET, target};
use super::{Settings, ms, setup};
use fault_proxy::Proxy;
use flux_model::model::Phase;
use flux_model::model::seed::PARENT;

/// The strategies compared, in report order.
pub const STRATEGIES: [(&str, Strategy); 3] = [
    ("ack", Strategy::Ack),
    ("restart", Strategy::Restart),
    ("none", Strategy::None),
];

/// Pauses once with `strategy`; returns milliseconds to the proven pause and the requests.
pub async fn run_once(
    admin: &kube::Client,
    s: &Settings,
    strategy: Strategy,
) -> anyhow::Result<(f64, u64)> {
    let tree = setup::seeded(admin, "bench-ret", s).await?;
    let proxy = Proxy::start().await?;
    let client = proxy.client()?;
    let lease = setup::lease(&client, &tree.ns).await?;
    let fencer = Fencer::new(client.clone(), AnnotationKeys::default(), lease.owner())
        .with_lease(lease.handle());
    let mut handoff = Handoff::new(client.clone(), fencer);
    let chain = Chain {
        parent: Some(kustomization(&tree.ns, PARENT)),
        target: kustomization(&tree.ns, target()),
    };
    let opts = PauseOptions {
        strategy,
        quiesce: false,
        controller: ControllerRef {
            namespace: tree.ns.clone(),
            name: "kustomize-controller".into(),
        },
        timing: Timing::new(s.interval, BUDGET),
        reason: Some("flux-bench retire".into()),
    };
    // The parent is mid-reconcile when the pause begins, as in the incident.
    let mark = tree.model.mark();
    let _ = tree.model.bump_source_revision(PARENT);
    tree.model.wait_phase(PARENT, Phase::Fetch, mark).await?;
    let before = proxy.total();
    let start = Instant::now();
    let outcome = handoff.pause(&[chain], &opts, &mut |_| {}).await;
    let took = start.elapsed();
    let requests = proxy.total() - before;
    let resumed = handoff.resume(None).await;
    let released = lease.release().await;
    tree.model.shutdown().await;
    match outcome? {
        PauseOutcome::Proven(_) => {}
        PauseOutcome::Refused { object, why } => bail!("refused: {object}: {why}"),
    }
    resumed?;
    released?;
    Ok((ms(took), requests))
}
