//! `flux-model`: runs the Flux controller model against a control plane, for people and the
//! demo.
//!
//! ```text
//! flux-model [--kubeconfig PATH] [--namespace NS]... [--all-namespaces] [--seed]
//!            [--phase-ms N] [--quiet]
//! ```
//!
//! 1. Connects with `--kubeconfig` (else `KUBECONFIG` / in-cluster inference).
//! 2. With `--seed`, creates each namespace if missing and seeds the tree there (a
//!    `flux-system` parent applying `infrastructure` and `apps`, the controller Deployment,
//!    consumer namespaces); the model then plays that Deployment too.
//! 3. Starts one model per `--namespace` (default `flux-system`), or with `--all-namespaces`
//!    one model for every namespace (playing the Deployment of the first seeded namespace).
//! 4. Prints exactly one `model ready ...` line on stdout, then one line per model event on
//!    stderr (unless `--quiet`), until SIGINT or SIGTERM.

use std::time::Duration;

use anyhow::Context;
use flux_model::model::seed::PARENT;
use flux_model::model::{FluxModel, ModelConfig, ModelHandle, seed_tree};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

/// How often new model events are printed.
const EVENT_PRINT_INTERVAL: Duration = Duration::from_millis(200);

/// The Flux controller model against a control plane, until SIGINT or SIGTERM.
#[derive(Debug, clap::Parser)]
#[command(name = "flux-model")]
struct Args {
    /// Kubeconfig file (default: `KUBECONFIG` or in-cluster inference).
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<String>,
    /// A namespace whose objects the model reconciles (repeatable; default `flux-system`).
    #[arg(long = "namespace", short = 'n', value_name = "NS")]
    namespaces: Vec<String>,
    /// Reconcile the objects of every namespace.
    #[arg(long, short = 'A')]
    all_namespaces: bool,
    /// Seed the `flux-system` tree first.
    #[arg(long)]
    seed: bool,
    /// How long each reconcile phase takes, in milliseconds.
    #[arg(long, value_name = "N")]
    phase_ms: Option<u64>,
    /// Print no model events.
    #[arg(long, short)]
    quiet: bool,
}

fn parse_args() -> Args {
    let mut args = <Args as clap::Parser>::parse();
    if args.namespaces.is_empty() {
        args.namespaces.push("flux-system".into());
    }
    args
}

async fn ensure_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args();
    let client = testkit::client_for(args.kubeconfig.as_deref()).await?;
    let mut configs: Vec<ModelConfig> = Vec::new();
    let mut all = ModelConfig::all_namespaces();
    for ns in &args.namespaces {
        let config = if args.seed {
            ensure_namespace(&client, ns).await?;
            let tree = seed_tree(&client, ns)
                .await
                .with_context(|| format!("seeding {ns}"))?;
            all = all.with_git(&format!("{ns}/{PARENT}"), tree.git.clone());
            tree.model_config()
        } else {
            ModelConfig::namespaced(ns)
        };
        configs.push(config);
    }
    if args.all_namespaces {
        // One model for every namespace; it plays the Deployment of the first seeded namespace.
        if let Some(dep) = configs.first().and_then(|c| c.deployment.clone()) {
            all = all.with_deployment(dep);
        }
        configs = vec![all];
    }
    let models: Vec<ModelHandle> = configs
        .into_iter()
        .map(|mut c| {
            if let Some(ms) = args.phase_ms {
                c.phase_duration = Duration::from_millis(ms);
            }
            FluxModel::start(client.clone(), c)
        })
        .collect();
    let scope = if args.all_namespaces {
        "*".to_string()
    } else {
        args.namespaces.join(",")
    };
    println!("model ready namespaces={scope} seeded={}", args.seed);

    let mut printed = vec![0usize; models.len()];
    let mut tick = tokio::time::interval(EVENT_PRINT_INTERVAL);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = tick.tick() => {
                if args.quiet {
                    continue;
                }
                for (m, seen) in models.iter().zip(printed.iter_mut()) {
                    let events = m.events();
                    for e in &events[*seen..] {
                        eprintln!("{e:?}");
                    }
                    *seen = events.len();
                }
            }
        }
    }
    for m in models {
        m.shutdown().await;
    }
    Ok(())
}
