//! A walk through flux-fence against the local control plane.
//!
//! ```text
//! cargo xtask cluster up --detach      # or any cluster with the Flux CRDs
//! FLUX_HANDOFF_KUBECONFIG=target/flux-handoff/kubeconfig cargo run -p flux-fence --example fence_demo
//! ```
//!
//! The kubeconfig comes from `FLUX_HANDOFF_KUBECONFIG`, else `KUBECONFIG` (kube's usual
//! inference). It creates a scratch namespace `fence-demo-<random>`, a Kustomization in it, a
//! Lease in it, fences the Kustomization, lists the fences, releases everything and deletes
//! the namespace.

use std::sync::Arc;

use anyhow::{Context, bail};
use flux_fence::discover::{FoundState, ReleasePlan, Scope, discover};
use flux_fence::mark::Restore;
use flux_fence::outcome::AcquireOutcome;
use flux_fence::outcome::ReleaseOutcome;
use flux_fence::{
    AnnotationKeys, Fencer, Holder, Lease, LeaseAcquire, LeaseConfig, Mark, ObjectRef, SystemClock,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ObjectMeta, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_env_filter("flux_fence=info")
        .init();
    let client = client().await?;

    let ns = format!("fence-demo-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let meta = ObjectMeta {
        name: Some(ns.clone()),
        ..ObjectMeta::default()
    };
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: meta,
                ..Namespace::default()
            },
        )
        .await
        .context("creating the demo namespace")?;
    let result = demo(&client, &ns).await;
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .context("deleting the demo namespace")?;
    result
}

async fn demo(client: &Client, ns: &str) -> anyhow::Result<()> {
    let kustomizations = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &kustomizations);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": { "name": "infrastructure" },
        "spec": { "interval": "10m", "path": "./infrastructure", "prune": true, "suspend": false,
                  "sourceRef": { "kind": "GitRepository", "name": "flux-system" } },
    }))?;
    api.create(&PostParams::default(), &obj)
        .await
        .context("creating the Kustomization")?;

    // 1. The Lease (here in the scratch namespace, so the demo never disturbs a real one).
    let cfg = LeaseConfig::new(ns, LeaseConfig::default().name);
    let lease = match Lease::acquire(
        client.clone(),
        cfg.clone(),
        Holder::generate(),
        Arc::new(SystemClock),
    )
    .await?
    {
        LeaseAcquire::Acquired(guard) => guard,
        other => bail!("lease not acquired: {other:?}"),
    };
    println!("lease acquired: owner {}", lease.owner());

    // 2. Fence the Kustomization: suspend it, stop its parent applying it, request a reconcile.
    let fencer = Fencer::new(client.clone(), AnnotationKeys::default(), lease.owner())
        .with_lease(lease.handle());
    let target = ObjectRef::new(kustomizations.clone(), ns, "infrastructure");
    let marks = vec![
        Mark::field("/spec/suspend", json!(true)).exclusive(),
        Mark::annotation("kustomize.toolkit.fluxcd.io/reconcile", "disabled"),
        Mark::annotation("reconcile.fluxcd.io/requestedAt", "demo-nonce")
            .restore(Restore::IfUnchanged),
    ];
    let guard = match fencer.acquire(&target, marks, Some("fence demo")).await? {
        AcquireOutcome::Acquired(guard) => guard,
        other => bail!("not fenced: {other:?}"),
    };
    let held = api.get("infrastructure").await?;
    println!(
        "fenced: spec.suspend={} annotations:",
        held.data["spec"]["suspend"]
    );
    for (k, v) in held.metadata.annotations.unwrap_or_default() {
        println!("  {k} = {v}");
    }
    println!("still ours: {}", fencer.prove(&guard).await?);

    // 3. What `fences` would print.
    let report = discover(
        client,
        &AnnotationKeys::default(),
        &[kustomizations],
        &Scope::Namespaces(vec![ns.into()]),
        Some(&cfg),
        &SystemClock,
    )
    .await?;
    if let Some(l) = &report.lease {
        println!(
            "lease {}/{}: holder {:?} epoch {} expired {}",
            l.namespace, l.name, l.holder, l.epoch, l.expired
        );
    }
    for f in &report.fences {
        match &f.state {
            FoundState::Fence {
                owner,
                age,
                release: ReleasePlan::Patch(patch),
                ..
            } => {
                println!(
                    "{}: owner {owner}, age {}s\n  release: {patch}",
                    f.object,
                    age.as_secs()
                );
            }
            other => println!("{}: {other:?}", f.object),
        }
    }

    // 4. Release the fence (restores every prior value), then the Lease.
    match fencer.release(guard).await? {
        ReleaseOutcome::Released { .. } => println!("fence released"),
        other => bail!("fence not released: {other:?}"),
    }
    let after = api.get("infrastructure").await?;
    println!(
        "after release: spec.suspend={} annotations={:?}",
        after.data["spec"]["suspend"], after.metadata.annotations
    );
    println!("lease: {:?}", lease.release().await?);
    Ok(())
}

async fn client() -> anyhow::Result<Client> {
    let config = match std::env::var_os("FLUX_HANDOFF_KUBECONFIG") {
        Some(path) => {
            let kc = Kubeconfig::read_from(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?
        }
        None => Config::infer()
            .await
            .context("no FLUX_HANDOFF_KUBECONFIG; inferring from KUBECONFIG")?,
    };
    Ok(Client::try_from(config)?)
}
