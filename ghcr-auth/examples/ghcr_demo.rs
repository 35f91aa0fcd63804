//! Demo: validate a credential, prove it against a registry, reassert it into Secrets.
//!
//! ```sh
//! # a local registry (see ghcr-auth/tests/support/registry.rs) or ghcr.io
//! export GHCR_DOCKER_CONFIG='{"auths":{"127.0.0.1:5000":{"username":"robot","password":"..."}}}'
//! cargo run -p ghcr-auth --example ghcr_demo -- \
//!     --image 127.0.0.1:5000/team/app:v1 --insecure-loopback \
//!     --secret ghcr-pull --namespace apps --namespace infra --root flux-system/ghcr-auth
//! ```
//!
//! The credential is read from the environment variable `GHCR_DOCKER_CONFIG` (a Docker config)
//! or, with `--token-env NAME --username USER --registry HOST`, from a bare token in `NAME`;
//! never from the command line. The kubeconfig comes from `FLUX_HANDOFF_KUBECONFIG` or
//! `KUBECONFIG`. Exit codes: 0 done, 2 usage, 3 invalid credential, 4 registry refused,
//! 5 reassertion incomplete, 1 anything else.

use std::process::ExitCode;

use anyhow::{Context, bail};
use ghcr_auth::credential::CredentialFormat;
use ghcr_auth::credential::CredentialSource;
use ghcr_auth::credential::DockerConfig;
use ghcr_auth::image::ImageRef;
use ghcr_auth::plan::SecretTarget;
use ghcr_auth::reassert::{Consumers, Reasserter, TargetSpec};
use ghcr_auth::registry::{ProverOptions, RegistryProver};
use ghcr_auth::{GhcrError, mask_in_github_actions};
use kube::config::{KubeConfigOptions, Kubeconfig};

#[derive(Debug, Default)]
struct Args {
    images: Vec<ImageRef>,
    namespaces: Vec<String>,
    secret: Option<String>,
    root: Option<SecretTarget>,
    insecure_loopback: bool,
    token_env: Option<String>,
    username: Option<String>,
    registry: Option<String>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--image" => args.images.push(value()?.parse()?),
            "--namespace" => args.namespaces.push(value()?),
            "--secret" => args.secret = Some(value()?),
            "--root" => {
                let v = value()?;
                let (ns, name) = v.split_once('/').context("--root is namespace/name")?;
                args.root = Some(SecretTarget::new(ns, name));
            }
            "--insecure-loopback" => args.insecure_loopback = true,
            "--token-env" => args.token_env = Some(value()?),
            "--username" => args.username = Some(value()?),
            "--registry" => args.registry = Some(value()?),
            other => bail!("unknown flag {other}"),
        }
    }
    if args.images.is_empty() || args.secret.is_none() {
        bail!("usage: ghcr_demo --image REF... --secret NAME [--namespace NS]... [--root NS/NAME]");
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_writer(std::io::stderr)
        .init();
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e:#}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    // 1. Read and validate; mask in GitHub Actions before any other output.
    let (source, format) = match (&args.token_env, &args.username, &args.registry) {
        (Some(env), Some(user), Some(reg)) => (
            CredentialSource::Env(env.clone()),
            CredentialFormat::Token {
                registry: reg.clone(),
                username: user.clone(),
            },
        ),
        _ => (
            CredentialSource::Env("GHCR_DOCKER_CONFIG".into()),
            CredentialFormat::DockerConfig,
        ),
    };
    let config = match DockerConfig::load(&source, &format) {
        Ok(c) => c,
        Err(e @ GhcrError::InvalidCredential(_)) => {
            eprintln!("{:#}", anyhow::Error::from(e));
            return Ok(ExitCode::from(3));
        }
        Err(e) => return Err(e.into()),
    };
    mask_in_github_actions(&config, &mut std::io::stdout())?;

    // 2. Prove against the registry before touching the cluster.
    let prover = RegistryProver::new(
        ProverOptions::default().with_insecure_loopback(args.insecure_loopback),
    )?;
    for (image, outcome) in prover.prove_all(&config, &args.images).await? {
        println!("registry {image}: {outcome}");
        if !outcome.is_proven() {
            return Ok(ExitCode::from(4));
        }
    }

    // 3. Reassert: consumers first, root last.
    let path = std::env::var_os("FLUX_HANDOFF_KUBECONFIG")
        .or_else(|| std::env::var_os("KUBECONFIG"))
        .context("set FLUX_HANDOFF_KUBECONFIG or KUBECONFIG")?;
    let kc = Kubeconfig::read_from(&path)?;
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?,
    )?;
    let mut spec = TargetSpec::new(
        args.secret.clone().unwrap_or_default(),
        Consumers::Namespaces(args.namespaces),
    );
    spec.root = args.root;
    let report = Reasserter::new(client).reassert(&config, &spec).await?;
    print!("{report}");
    Ok(if report.is_complete() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(5)
    })
}
