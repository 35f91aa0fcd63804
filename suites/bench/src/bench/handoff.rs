//! Scenario 1, the full handoff through the libraries in-process: Lease, two-level fence
//! (`flux-system` -> `infrastructure`), `ack` retirement, proof, GHCR reassertion into 10
//! consumer Secrets and the root (ghcr-auth `Reasserter`, gated by the Lease assertion),
//! resume, release.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flux_fence::{AnnotationKeys, Fencer, LeaseHandle};
use flux_suspend::handoff::Chain;
use flux_suspend::handoff::Handoff;
use flux_suspend::handoff::PauseOptions;
use flux_suspend::handoff::PauseOutcome;
use flux_suspend::io::{ControllerRef, Timing};
use flux_suspend::judge::REQUIRED_PASSES;
use flux_suspend::object::kustomization;
use flux_suspend::retire::Strategy;
use ghcr_auth::BoxError;
use ghcr_auth::credential::DockerConfig;
use ghcr_auth::plan::SecretTarget;
use ghcr_auth::reassert::{Consumers, Reasserter, TargetSpec};
use kube::Client;
use serde::Serialize;

use super::{Settings, ms, setup};
use fault_proxy::Proxy;
use flux_model::model::seed::{CHILDREN, PARENT};

/// Consumer namespaces of the full handoff.
pub const CONSUMERS: usize = 10;
/// Name of the consumer Secrets.
pub const SECRET: &str = "ghcr-pull";
/// Name of the root Secret (in the tree's namespace).
pub const ROOT_SECRET: &str = "ghcr-auth";
/// Budget of each bounded wait.
pub const BUDGET: Duration = Duration::from_mins(1);

/// One measured run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub wall_ms: f64,
    /// Wall time minus the mandated quiet time ([`mandated_quiet`]).
    pub overhead_ms: f64,
    pub requests: u64,
    pub by_verb: BTreeMap<String, u64>,
    /// Every request in order, `kind path`: where the requests go.
    pub log: Vec<String>,
}

/// The quiet time the protocol mandates: the sleeps between the required proof passes.
#[must_use]
pub fn mandated_quiet(interval: Duration) -> Duration {
    interval * (REQUIRED_PASSES - 1)
}

/// The target of the two-level chain.
#[must_use]
pub fn target() -> &'static str {
    CHILDREN[0]
}

/// A seeded tree plus its consumer namespaces, ready for one handoff.
pub async fn prepare(
    admin: &Client,
    s: &Settings,
    prefix: &str,
) -> anyhow::Result<(setup::Tree, Vec<String>)> {
    let tree = setup::seeded(admin, prefix, s).await?;
    let consumers: Vec<String> = (0..CONSUMERS)
        .map(|i| format!("{}-c{i}", tree.ns))
        .collect();
    setup::create_namespaces(admin, &consumers, &BTreeMap::new()).await?;
    Ok((tree, consumers))
}

/// Runs scenario 1 once.
pub async fn run_once(admin: &Client, s: &Settings) -> anyhow::Result<Run> {
    let (tree, consumers) = prepare(admin, s, "bench-lib").await?;
    let proxy = Proxy::start().await?;
    let client = proxy.client()?;
    let config = setup::credential()?;
    let start = Instant::now();
    handoff(&client, &tree.ns, Some((&consumers, &config)), s.interval).await?;
    let wall = start.elapsed();
    tree.model.shutdown().await;
    Ok(Run {
        wall_ms: ms(wall),
        overhead_ms: ms(wall.saturating_sub(mandated_quiet(s.interval))),
        requests: proxy.total(),
        by_verb: proxy.counts(),
        log: proxy
            .log()
            .into_iter()
            .map(|r| {
                format!(
                    "{:>7.1} ms {:>5.1} ms {} {}",
                    ms(r.at),
                    r.took.map_or(f64::NAN, ms),
                    r.kind,
                    r.path
                )
            })
            .collect(),
    })
}

/// The handoff itself, as a program using the libraries would run it: pause, reassert
/// `config` into `consumers` and the root Secret when given (else no work), resume, release.
pub async fn handoff(
    client: &Client,
    ns: &str,
    work: Option<(&[String], &DockerConfig)>,
    interval: Duration,
) -> anyhow::Result<()> {
    let lease = setup::lease(client, ns).await?;
    let fencer = Fencer::new(client.clone(), AnnotationKeys::default(), lease.owner())
        .with_lease(lease.handle());
    let mut handoff = Handoff::new(client.clone(), fencer);
    let chain = Chain::new(Some(kustomization(ns, PARENT)), kustomization(ns, target()));
    let opts = PauseOptions::new(Strategy::Ack, Timing::new(interval, BUDGET))
        .with_controller(ControllerRef {
            namespace: ns.to_string(),
            name: "kustomize-controller".into(),
        })
        .with_reason("flux-bench");
    // Boxed: the pause's future is larger than clippy's large_futures bound.
    let paused = Box::pin(handoff.pause(&[chain], &opts, &mut |_| {})).await;
    let worked = match paused {
        Ok(PauseOutcome::Proven(_)) => match work {
            Some((consumers, config)) => reassert(client, lease.handle(), ns, consumers, config)
                .await
                .context("reasserting the credential"),
            None => Ok(()),
        },
        Ok(PauseOutcome::Refused { object, why }) => {
            Err(anyhow::anyhow!("refused: {object}: {why}"))
        }
        Ok(other) => Err(anyhow::anyhow!("the pause was not proven: {other:?}")),
        Err(e) => Err(anyhow::Error::new(e).context("pausing")),
    };
    let resumed = Box::pin(handoff.resume(None)).await;
    let released = lease.release().await;
    worked?;
    let _ = resumed.context("resuming")?;
    let _ = released.context("releasing the Lease")?;
    Ok(())
}

/// Reasserts into the consumers and the root Secret, asserting the Lease before every write.
pub async fn reassert(
    client: &Client,
    lease: LeaseHandle,
    ns: &str,
    consumers: &[String],
    config: &DockerConfig,
) -> anyhow::Result<()> {
    let spec = TargetSpec::new(SECRET, Consumers::Namespaces(consumers.to_vec()))
        .with_root(SecretTarget::new(ns, ROOT_SECRET));
    let report = gated(client, lease).reassert(config, &spec).await?;
    if !report.is_complete() {
        bail!("the reassertion did not complete:\n{report}");
    }
    Ok(())
}

/// A reasserter whose gate asserts `lease`.
#[must_use]
pub fn gated(client: &Client, lease: LeaseHandle) -> Reasserter {
    Reasserter::new(client.clone()).with_gate(move || {
        let lease = lease.clone();
        async move { lease.assert().await.map_err(|e| Box::new(e) as BoxError) }
    })
}
