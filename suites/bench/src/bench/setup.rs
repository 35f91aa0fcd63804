//! Untimed setup through the admin client: namespaces, the seeded Flux tree with its
//! controller model, the Lease of a run, the credential.

use anyhow::{Context, bail};
use flux_fence::{Holder, Lease, LeaseAcquire, LeaseConfig, LeaseGuard, SystemClock};
use futures::{StreamExt, TryStreamExt};
use ghcr_auth::credential::DockerConfig;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use secrecy::SecretString;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::Settings;
use flux_model::model::seed::{CHILDREN, PARENT};
use flux_model::model::{FluxModel, ModelHandle, Phase, seed_tree};

/// How many namespaces are created at once.
const CREATE_CONCURRENCY: usize = 16;

/// A seeded tree in its own namespace, with a controller model playing it.
#[derive(Debug)]
pub struct Tree {
    pub ns: String,
    pub model: ModelHandle,
}

/// Creates a namespace `<prefix>-<random>` and returns its name.
pub async fn fresh_namespace(admin: &Client, prefix: &str) -> anyhow::Result<String> {
    let name = format!("{prefix}-{}", testkit::random_suffix(6));
    create_namespaces(admin, std::slice::from_ref(&name), &BTreeMap::new()).await?;
    Ok(name)
}

/// Creates `names` with `labels`, a bounded number at a time.
pub async fn create_namespaces(
    admin: &Client,
    names: &[String],
    labels: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(admin.clone());
    futures::stream::iter(names.iter().map(|name| {
        let api = api.clone();
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(labels.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        async move {
            api.create(&PostParams::default(), &ns)
                .await
                .with_context(|| format!("creating namespace {name}"))
        }
    }))
    .buffer_unordered(CREATE_CONCURRENCY)
    .try_collect::<Vec<_>>()
    .await?;
    Ok(())
}

/// A fresh namespace with the seeded tree, a model with [`Settings::phase`] per phase and
/// [`Settings::termination_grace`] for old controller Pods, every object settled once.
pub async fn seeded(admin: &Client, prefix: &str, s: &Settings) -> anyhow::Result<Tree> {
    let ns = fresh_namespace(admin, prefix).await?;
    let tree = seed_tree(admin, &ns).await?;
    let mut config = tree.model_config();
    if let Some(d) = config.deployment.as_mut() {
        d.termination_grace = s.termination_grace;
    }
    let model = FluxModel::start(admin.clone(), config);
    for p in Phase::ALL {
        model.set_phase_duration(p, s.phase);
    }
    for name in std::iter::once(PARENT).chain(CHILDREN) {
        model
            .wait_settled(name, 0)
            .await
            .with_context(|| format!("waiting for {ns}/{name} to settle"))?;
    }
    Ok(Tree { ns, model })
}

/// Acquires the Lease `flux-handoff` in `namespace` for a fresh holder.
pub async fn lease(client: &Client, namespace: &str) -> anyhow::Result<LeaseGuard> {
    let cfg = LeaseConfig::new(namespace, LeaseConfig::default().name);
    match Lease::acquire(
        client.clone(),
        cfg,
        Holder::generate(),
        Arc::new(SystemClock),
    )
    .await?
    {
        LeaseAcquire::Acquired(guard) => Ok(guard),
        _ => bail!("the Lease in {namespace} is held by someone else"),
    }
}

/// The bench credential: a random token for `ghcr.io` (never proven against a registry: the
/// bench measures the cluster side).
pub fn credential() -> anyhow::Result<DockerConfig> {
    let token = SecretString::from(format!("ghp_{}", testkit::random_suffix(36)));
    DockerConfig::from_token("ghcr.io", "bench-bot", token)
        .map_err(|e| anyhow::anyhow!("building the bench credential: {e}"))
}
