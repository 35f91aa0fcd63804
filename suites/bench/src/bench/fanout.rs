//! Scenario 3, fan-out: the Lease-gated reassertion into `n` labelled namespaces (selected by
//! label, created beforehand and not timed), through the proxy.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::bail;
use ghcr_auth::reassert::{Consumers, TargetSpec};
use serde::Serialize;

use super::handoff::{SECRET, gated};
use super::{ms, setup};
use fault_proxy::Proxy;

/// One measured run at one size.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub n: usize,
    pub ms: f64,
    pub requests: u64,
    pub by_verb: BTreeMap<String, u64>,
}

/// Runs the fan-out into `n` fresh namespaces once.
pub async fn run_once(admin: &kube::Client, n: usize) -> anyhow::Result<Run> {
    let lease_ns = setup::fresh_namespace(admin, "bench-fan").await?;
    let selector_value = testkit::random_suffix(8);
    let labels = BTreeMap::from([("bench-fanout".to_string(), selector_value.clone())]);
    let names: Vec<String> = (0..n).map(|i| format!("{lease_ns}-{i}")).collect();
    setup::create_namespaces(admin, &names, &labels).await?;
    let config = setup::credential()?;

    let proxy = Proxy::start().await?;
    let client = proxy.client()?;
    let lease = setup::lease(&client, &lease_ns).await?;
    let before = proxy.counts();
    let spec = TargetSpec::new(
        SECRET,
        Consumers::Selector(format!("bench-fanout={selector_value}")),
    );
    let start = Instant::now();
    let report = gated(&client, lease.handle())
        .reassert(&config, &spec)
        .await?;
    let took = start.elapsed();
    let after = proxy.counts();
    let _ = lease.release().await?;
    if !report.is_complete() || report.results.len() != n {
        bail!("fan-out into {n} namespaces incomplete:\n{report}");
    }
    let by_verb: BTreeMap<String, u64> = after
        .into_iter()
        .map(|(k, v)| {
            let d = v - before.get(&k).copied().unwrap_or(0);
            (k, d)
        })
        .filter(|(_, v)| *v > 0)
        .collect();
    Ok(Run {
        n,
        ms: ms(took),
        requests: by_verb.values().sum(),
        by_verb,
    })
}
