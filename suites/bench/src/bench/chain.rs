//! Scenario 5, many targets: one handoff of `n` targets under one parent (`--target` repeated),
//! through the libraries: Lease, fence the parent, its acknowledgement, fence the `n` targets,
//! their acknowledgements, the proof over all `n + 1`, resume, release. The tree is seeded
//! with `n` children and played by the model with short phases (untimed).

use std::time::Instant;

use anyhow::{Context, bail};
use flux_fence::{AnnotationKeys, Fencer};
use flux_suspend::handoff::Chain;
use flux_suspend::handoff::Handoff;
use flux_suspend::handoff::PauseOptions;
use flux_suspend::handoff::PauseOutcome;
use flux_suspend::io::{ControllerRef, Timing};
use flux_suspend::object::{kustomization, kustomization_resource};
use flux_suspend::retire::Strategy;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde_json::json;

use super::handoff::BUDGET;
use super::{Settings, ms, setup};
use fault_proxy::Proxy;
use flux_model::model::seed::{PARENT, child_manifest};
use flux_model::model::{
    FIELD_MANAGER, FluxModel, ModelConfig, PARENT_NAME_LABEL, PARENT_NAMESPACE_LABEL,
};

/// One measured handoff of `n` targets.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub n: usize,
    /// Lease acquire to Lease release.
    pub ms: f64,
    pub requests: u64,
}

/// Seeds a parent with `n` children in a fresh namespace, starts the model on it, and runs
/// one handoff of all `n` children.
pub async fn run_once(admin: &Client, s: &Settings, n: usize) -> anyhow::Result<Run> {
    let ns = setup::fresh_namespace(admin, "bench-chain").await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &ns, &kustomization_resource());
    let parent: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": { "name": PARENT, "namespace": ns },
        "spec": {
            "interval": "10m", "path": "./clusters/local", "prune": true, "suspend": false,
            "sourceRef": { "kind": "GitRepository", "name": PARENT },
        },
    }))?;
    api.create(&PostParams::default(), &parent).await?;
    let names: Vec<String> = (0..n).map(|i| format!("t{i:03}")).collect();
    let git: Vec<serde_json::Value> = names.iter().map(|c| child_manifest(&ns, c, &ns)).collect();
    for manifest in &git {
        let mut m = manifest.clone();
        m["metadata"]["labels"] = json!({ PARENT_NAME_LABEL: PARENT, PARENT_NAMESPACE_LABEL: ns });
        let name = m["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&m),
        )
        .await
        .with_context(|| format!("seeding {name}"))?;
    }
    let model = FluxModel::start(
        admin.clone(),
        ModelConfig::namespaced(&ns).with_git(PARENT, git),
    );
    for name in std::iter::once(PARENT).chain(names.iter().map(String::as_str)) {
        model
            .wait_settled(name, 0)
            .await
            .with_context(|| format!("waiting for {ns}/{name} to settle"))?;
    }

    let proxy = Proxy::start().await?;
    let client = proxy.client()?;
    let start = Instant::now();
    let done = handoff(&client, &ns, &names, s).await;
    let took = start.elapsed();
    model.shutdown().await;
    done?;
    Ok(Run {
        n,
        ms: ms(took),
        requests: proxy.total(),
    })
}

async fn handoff(client: &Client, ns: &str, names: &[String], s: &Settings) -> anyhow::Result<()> {
    let lease = setup::lease(client, ns).await?;
    let fencer = Fencer::new(client.clone(), AnnotationKeys::default(), lease.owner())
        .with_lease(lease.handle());
    let mut handoff = Handoff::new(client.clone(), fencer);
    let chains: Vec<Chain> = names
        .iter()
        .map(|t| Chain::new(Some(kustomization(ns, PARENT)), kustomization(ns, t)))
        .collect();
    let opts = PauseOptions::new(Strategy::Ack, Timing::new(s.interval, BUDGET))
        .with_controller(ControllerRef {
            namespace: ns.to_string(),
            name: "kustomize-controller".into(),
        })
        .with_reason("flux-bench chain");
    let paused = handoff.pause(&chains, &opts, &mut |_| {}).await;
    let resumed = handoff.resume(None).await;
    let released = lease.release().await;
    match paused? {
        PauseOutcome::Proven(_) => {}
        PauseOutcome::Refused { object, why } => bail!("refused: {object}: {why}"),
        other => bail!("the pause was not proven: {other:?}"),
    }
    let _ = resumed.context("resuming")?;
    let _ = released.context("releasing the Lease")?;
    Ok(())
}
