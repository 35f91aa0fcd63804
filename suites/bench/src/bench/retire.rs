//! Scenario 4, retirement strategies: the time from the start of the pause (its first write is
//! the parent's suspend patch, after one Lease assertion and one read) to the proven pause,
//! with `ack`, `restart` and `none`, while the parent is mid-reconcile (a new source revision
//! was just picked up) and every model phase takes [`Settings::phase`].

use std::time::Instant;

use anyhow::bail;
use flux_fence::{AnnotationKeys, Fencer};
use flux_suspend::handoff::Chain;
use flux_suspend::handoff::Handoff;
use flux_suspend::handoff::PauseOptions;
use flux_suspend::handoff::PauseOutcome;
use flux_suspend::io::{ControllerRef, Timing};
use flux_suspend::judge::REQUIRED_PASSES;
use flux_suspend::object::kustomization;
use flux_suspend::retire::Strategy;

use super::handoff::{BUDGET, mandated_quiet, target};
use super::{Settings, ms, setup};
use fault_proxy::Proxy;
use flux_model::model::seed::PARENT;
use flux_model::model::{ModelEvent, Outcome, Phase};

/// The strategies compared, in report order.
pub const STRATEGIES: [(&str, Strategy); 3] = [
    ("ack", Strategy::Ack),
    ("restart", Strategy::Restart),
    ("none", Strategy::QuietWindow),
];

/// One measured pause.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// Milliseconds from the start of the pause to the proven pause.
    pub ms: f64,
    /// Requests of the pause.
    pub requests: u64,
    /// `ack` only: the floor, i.e. milliseconds from the start of the pause until the
    /// controller (the model) finished the reconcile that acknowledged the target's nonce,
    /// plus the proof: its mandated spacing ([`mandated_quiet`]) and its
    /// [`REQUIRED_PASSES`] passes of reads, each costing one pass as measured right after
    /// the pause (the same reads, through the same proxy).
    pub floor_ms: Option<f64>,
}

/// Pauses once with `strategy`.
pub async fn run_once(
    admin: &kube::Client,
    s: &Settings,
    strategy: Strategy,
) -> anyhow::Result<Run> {
    let tree = setup::seeded(admin, "bench-ret", s).await?;
    let proxy = Proxy::start().await?;
    let client = proxy.client()?;
    let lease = setup::lease(&client, &tree.ns).await?;
    let fencer = Fencer::new(client.clone(), AnnotationKeys::default(), lease.owner())
        .with_lease(lease.handle());
    let mut handoff = Handoff::new(client.clone(), fencer);
    let chain = Chain::new(
        Some(kustomization(&tree.ns, PARENT)),
        kustomization(&tree.ns, target()),
    );
    let opts = PauseOptions::new(strategy, Timing::new(s.interval, BUDGET))
        .with_controller(ControllerRef {
            namespace: tree.ns.clone(),
            name: "kustomize-controller".into(),
        })
        .with_reason("flux-bench retire");
    // The parent is mid-reconcile when the pause begins, as in the incident.
    let mark = tree.model.mark();
    let _ = tree.model.bump_source_revision(PARENT);
    tree.model.wait_phase(PARENT, Phase::Fetch, mark).await?;
    let before = proxy.total();
    // The target's acknowledgement: the first suspended reconcile of it from here on (it is
    // not suspended before the pause). Seen through the model's event log, at once.
    let since = tree.model.mark();
    let key = format!("{}/{}", tree.ns, target());
    let acked = tree.model.wait_for(since, move |e| {
        matches!(e, ModelEvent::Finished { key: k, outcome: Outcome::Suspended, .. } if *k == key)
    });
    let chains = [chain];
    let mut progress = |_| {};
    let start = Instant::now();
    let pause = handoff.pause(&chains, &opts, &mut progress);
    let (outcome, ack_at) = if strategy == Strategy::Ack {
        let (outcome, acked) =
            tokio::join!(pause, async { acked.await.ok().map(|_| Instant::now()) });
        (outcome, acked)
    } else {
        drop(acked);
        (pause.await, None)
    };
    let took = start.elapsed();
    let requests = proxy.total() - before;
    let pass = if ack_at.is_some() {
        Some(pass_ms(&client, &tree.ns).await)
    } else {
        None
    };
    let resumed = handoff.resume(None).await;
    let released = lease.release().await;
    tree.model.shutdown().await;
    match outcome? {
        PauseOutcome::Proven(_) => {}
        PauseOutcome::Refused { object, why } => bail!("refused: {object}: {why}"),
        other => bail!("the pause was not proven: {other:?}"),
    }
    let _ = resumed?;
    let _ = released?;
    Ok(Run {
        ms: ms(took),
        requests,
        floor_ms: ack_at.zip(pass).map(|(at, pass)| {
            ms(at.duration_since(start))
                + ms(mandated_quiet(s.interval))
                + f64::from(REQUIRED_PASSES) * pass
        }),
    })
}

/// The median of a few proof passes' worth of reads (both members at once, as the proof
/// reads them), in milliseconds.
async fn pass_ms(client: &kube::Client, ns: &str) -> f64 {
    let members = [kustomization(ns, PARENT), kustomization(ns, target())];
    let mut took = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let _ = futures::future::join_all(
            members
                .iter()
                .map(|m| flux_suspend::object::get_json(client, m)),
        )
        .await;
        took.push(ms(t.elapsed()));
    }
    took.sort_by(f64::total_cmp);
    took[took.len() / 2]
}
