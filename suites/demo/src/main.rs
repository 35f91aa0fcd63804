//! `flux-demo-setup`: the kube-speaking steps of `cargo xtask demo` (xtask itself only runs
//! processes).
//!
//! ```text
//! flux-demo-setup registry                      # env FLUX_DEMO_USER, FLUX_DEMO_TOKEN
//! flux-demo-setup seed   --kubeconfig PATH --image HOST/REPO:TAG
//! flux-demo-setup freeze --kubeconfig PATH
//! flux-demo-setup eso-seed  --kubeconfig PATH --image HOST/REPO:TAG   # env FLUX_HANDOFF_ESO_CRDS
//! flux-demo-setup eso-synced --kubeconfig PATH --image HOST/REPO:TAG
//! flux-demo-setup eso-check --kubeconfig PATH --image HOST/REPO:TAG   # env FLUX_DEMO_TOKEN
//! ```
//!
//! 1. `registry` starts a local registry ([`testkit::registry`]) accepting the demo user and
//!    token (read from the environment, never argv), pushes `demo/podinfo:6.9.2`, prints one
//!    `registry ready host=<h> image=<h>/demo/podinfo:6.9.2` line, and runs until SIGTERM or
//!    SIGINT (then the registry and its directory are removed).
//! 2. `seed` (after `flux-model --seed` made the `flux-system` tree) waits until the seeded
//!    Kustomizations are Ready, writes a *stale* pull Secret `ghcr-auth` (an expired token) into
//!    the consumer namespace `apps` and as the root Secret `flux-system/ghcr-auth`, creates the
//!    `OCIRepository` `flux-system/podinfo` pulling `--image` with that root Secret, and waits
//!    until the source model reports it `Ready=False` (the registry refuses the stale token):
//!    the state a credential rotation leaves behind.
//! 3. `freeze` waits until the parent `flux-system/flux-system` is Ready and then gives it the
//!    status of the original incident: `Reconciling=True`, `Ready=Unknown`, as a reconcile
//!    interrupted mid-flight leaves it (see [`freeze`] for why a status write is faithful).
//! 4. `eso-seed`, `eso-synced` and `eso-check` (`cargo xtask demo --fanout eso`, module [`eso`]): the original
//!    tool's External Secrets layout, the stale credential synced by ESO into each consumer;
//!    after the rotation, the read-back of every consumer and the root. With `--fanout eso`,
//!    `seed --no-consumer-secret` leaves the consumers to ESO.
//!
//! Every step prints `setup: ...` lines and exits non-zero with one line on failure.

mod eso;

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flux_model::model::seed::{CHILDREN, PARENT};
use flux_model::source_model::{oci_repository, oci_repository_resource};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::fixtures::kustomization_resource;
use testkit::registry::LocalRegistry;
use tokio::signal::unix::{SignalKind, signal};

/// The namespace of the seeded tree and of the root Secret.
pub(crate) const FLUX_NS: &str = "flux-system";
/// The pull Secret's name, in consumers and as the root Secret.
pub(crate) const SECRET: &str = "ghcr-auth";
/// The consumer namespace that starts with a stale Secret (`infrastructure` starts with none).
const STALE_CONSUMER: &str = "apps";
/// The `OCIRepository` the source model serves.
const SOURCE: &str = "podinfo";
/// The image pushed into the demo registry.
const REPO: &str = "demo/podinfo";
const TAG: &str = "6.9.2";
/// How long each wait of the setup may take.
const WAIT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(250);

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("setup: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    testkit::install_crypto();
    match <Command as clap::Parser>::parse() {
        Command::Registry => registry().await,
        Command::Seed {
            kubeconfig,
            image,
            no_consumer_secret,
        } => {
            let client = testkit::client_for(kubeconfig.as_deref()).await?;
            seed(&client, &image, !no_consumer_secret).await
        }
        Command::EsoSeed { kubeconfig, image } => {
            let client = testkit::client_for(Some(&kubeconfig)).await?;
            eso::seed(&client, &kubeconfig, registry_host(&image)?).await
        }
        Command::EsoSynced { kubeconfig, image } => {
            let client = testkit::client_for(Some(&kubeconfig)).await?;
            eso::synced(&client, registry_host(&image)?).await
        }
        Command::EsoCheck { kubeconfig, image } => {
            let token = std::env::var("FLUX_DEMO_TOKEN").context("FLUX_DEMO_TOKEN is not set")?;
            let client = testkit::client_for(Some(&kubeconfig)).await?;
            eso::check(&client, registry_host(&image)?, &token).await
        }
        Command::Freeze { kubeconfig } => {
            freeze(&testkit::client_for(kubeconfig.as_deref()).await?).await
        }
    }
}

/// The steps of the demo's setup.
#[derive(Debug, clap::Parser)]
#[command(name = "flux-demo-setup")]
enum Command {
    /// Run the demo registry (user and token from `FLUX_DEMO_USER`, `FLUX_DEMO_TOKEN`).
    Registry,
    /// Wait for the seeded tree, write the stale Secrets and the `OCIRepository`.
    Seed {
        /// Kubeconfig file (default: `KUBECONFIG` or in-cluster inference).
        #[arg(long, value_name = "PATH")]
        kubeconfig: Option<String>,
        /// The image the `OCIRepository` pulls.
        #[arg(long, value_name = "HOST/REPO:TAG")]
        image: String,
        /// No stale Secret in the consumer namespace: ESO writes the consumers (`--fanout eso`).
        #[arg(long)]
        no_consumer_secret: bool,
    },
    /// Install ESO's CRDs (from `FLUX_HANDOFF_ESO_CRDS`) and create the External Secrets layout.
    EsoSeed {
        /// Kubeconfig file of the demo's plane.
        #[arg(long, value_name = "PATH")]
        kubeconfig: String,
        /// The image whose registry host the credential is for.
        #[arg(long, value_name = "HOST/REPO:TAG")]
        image: String,
    },
    /// Wait until ESO's first sync put the stale credential into every consumer.
    EsoSynced {
        /// Kubeconfig file of the demo's plane.
        #[arg(long, value_name = "PATH")]
        kubeconfig: String,
        /// The image whose registry host the credential is for.
        #[arg(long, value_name = "HOST/REPO:TAG")]
        image: String,
    },
    /// Read every consumer and the root back after the rotation (token from `FLUX_DEMO_TOKEN`).
    EsoCheck {
        /// Kubeconfig file of the demo's plane.
        #[arg(long, value_name = "PATH")]
        kubeconfig: String,
        /// The image whose registry host the credential is for.
        #[arg(long, value_name = "HOST/REPO:TAG")]
        image: String,
    },
    /// Give the parent the status of the original incident.
    Freeze {
        /// Kubeconfig file (default: `KUBECONFIG` or in-cluster inference).
        #[arg(long, value_name = "PATH")]
        kubeconfig: Option<String>,
    },
}

/// Runs the demo registry until SIGTERM or SIGINT.
async fn registry() -> anyhow::Result<()> {
    let user = std::env::var("FLUX_DEMO_USER").context("FLUX_DEMO_USER is not set")?;
    let token = std::env::var("FLUX_DEMO_TOKEN").context("FLUX_DEMO_TOKEN is not set")?;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let registry = LocalRegistry::start(&[(&user, &token)])
        .await
        .context("starting the registry")?;
    let digest = registry
        .push_image(&user, &token, REPO, TAG)
        .await
        .context("pushing the demo image")?;
    let host = &registry.host;
    println!("registry ready host={host} image={host}/{REPO}:{TAG} digest={digest}");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    drop(registry);
    Ok(())
}

/// Seeds the state a credential rotation leaves behind (see the crate docs, step 2).
async fn seed(client: &Client, image: &str, consumer_secret: bool) -> anyhow::Result<()> {
    let ks: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), FLUX_NS, &kustomization_resource());
    for name in std::iter::once(PARENT).chain(CHILDREN) {
        wait_for(&format!("Kustomization {FLUX_NS}/{name} Ready=True"), || {
            let ks = ks.clone();
            async move { Ok(ready_status(&ks.get(name).await?.data).as_deref() == Some("True")) }
        })
        .await?;
    }
    println!(
        "setup: Kustomizations {PARENT}, {} Ready",
        CHILDREN.join(", ")
    );
    let (host, rest) = image
        .split_once('/')
        .context("--image needs HOST/REPO:TAG")?;
    let (repo, tag) = rest.rsplit_once(':').context("--image needs a :TAG")?;
    if consumer_secret {
        stale_secret(client, STALE_CONSUMER, host).await?;
        println!(
            "setup: stale Secret {SECRET} (an expired token) in {STALE_CONSUMER}; none in \
             infrastructure"
        );
    }
    stale_secret(client, FLUX_NS, host).await?;
    println!("setup: stale root Secret {FLUX_NS}/{SECRET} (an expired token)");
    let sources: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), FLUX_NS, &oci_repository_resource());
    let url = format!("oci://{host}/{repo}");
    let source = oci_repository(SOURCE, FLUX_NS, &url, tag, SECRET);
    match sources.create(&PostParams::default(), &source).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e).context("creating the OCIRepository"),
    }
    wait_for(
        &format!("OCIRepository {FLUX_NS}/{SOURCE} Ready=False"),
        || {
            let sources = sources.clone();
            async move {
                Ok(ready_status(&sources.get(SOURCE).await?.data).as_deref() == Some("False"))
            }
        },
    )
    .await?;
    let obj = sources.get(SOURCE).await?;
    let reason = ready_field(&obj.data, "reason").unwrap_or_default();
    println!(
        "setup: OCIRepository {FLUX_NS}/{SOURCE} ({url}:{tag}) Ready=False reason={reason}: \
         the registry refuses the stale token"
    );
    Ok(())
}

/// A `kubernetes.io/dockerconfigjson` Secret holding an expired token for `host`.
/// The registry host of `HOST/REPO:TAG`.
fn registry_host(image: &str) -> anyhow::Result<&str> {
    image
        .split_once('/')
        .map(|(host, _)| host)
        .context("--image needs HOST/REPO:TAG")
}

/// The Docker config of the expired token for registry `host`.
pub(crate) fn stale_config(host: &str) -> Value {
    json!({ "auths": { host: {
        "username": "demo-bot",
        "password": "expired-demo-token",
        "auth": "ZGVtby1ib3Q6ZXhwaXJlZC1kZW1vLXRva2Vu",
    }}})
}

async fn stale_secret(client: &Client, ns: &str, host: &str) -> anyhow::Result<()> {
    let config = stale_config(host);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(SECRET.into()),
            namespace: Some(ns.into()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/dockerconfigjson".into()),
        string_data: Some([(".dockerconfigjson".to_string(), config.to_string())].into()),
        ..Secret::default()
    };
    match Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating Secret {ns}/{SECRET}")),
    }
}

/// Gives the parent the frozen status of the original incident.
///
/// Why a status write and not a hung reconcile: in the incident the parent began a reconcile
/// just before the suspend, the controller restart killed it, and the suspended parent kept
/// the `Reconciling=True, Ready=Unknown` that reconcile had written — Flux never clears it
/// while suspended (docs/design/flux-model.md, facts 3 and 9). The controller model runs in another
/// process here, so it cannot be hung on demand; writing exactly the status an interrupted
/// reconcile leaves is the same server state. It stays: status writes trigger no reconcile,
/// and the suspended path of the next reconcile (the handoff's own) only records its nonce
/// when `Ready` is not `True`. The parent's resume (generation change) clears it, as in Flux.
async fn freeze(client: &Client) -> anyhow::Result<()> {
    let ks: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), FLUX_NS, &kustomization_resource());
    wait_for(
        &format!("Kustomization {FLUX_NS}/{PARENT} Ready=True"),
        || {
            let ks = ks.clone();
            async move { Ok(ready_status(&ks.get(PARENT).await?.data).as_deref() == Some("True")) }
        },
    )
    .await?;
    let now = flux_model::model::status::now_rfc3339();
    let parent = ks.get(PARENT).await?;
    let generation = parent.metadata.generation.unwrap_or(1);
    let status = json!({ "status": { "conditions": [
        {
            "type": "Ready", "status": "Unknown", "reason": "Progressing",
            "message": "Reconciliation in progress",
            "observedGeneration": generation, "lastTransitionTime": now,
        },
        {
            "type": "Reconciling", "status": "True", "reason": "Progressing",
            "message": "Running health checks with a timeout of 5m0s",
            "observedGeneration": generation, "lastTransitionTime": now,
        },
    ]}});
    ks.patch_status(PARENT, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .context("writing the parent's status")?;
    let after = ks.get(PARENT).await?;
    if ready_status(&after.data).as_deref() != Some("Unknown") {
        bail!("the parent's status did not stay frozen (a reconcile overwrote it)");
    }
    println!(
        "setup: parent {FLUX_NS}/{PARENT} frozen at Reconciling=True, Ready=Unknown (a reconcile \
         interrupted mid-flight, as in the incident)"
    );
    Ok(())
}

fn ready_status(data: &Value) -> Option<String> {
    ready_field(data, "status")
}

fn ready_field(data: &Value, field: &str) -> Option<String> {
    data.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?
        .get(field)?
        .as_str()
        .map(str::to_string)
}

/// Polls `check` every 250 ms until it is true, for at most 90 s.
pub(crate) async fn wait_for<F, Fut>(what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let start = Instant::now();
    loop {
        let last = match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => None,
            Err(e) => Some(e),
        };
        if start.elapsed() > WAIT {
            let why = last
                .map(|e| format!(" (last error: {e:#})"))
                .unwrap_or_default();
            bail!("{what} did not hold within {WAIT:?}{why}");
        }
        tokio::time::sleep(POLL).await;
    }
}
