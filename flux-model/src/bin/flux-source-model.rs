//! `flux-source-model`: runs the `OCIRepository` source-controller model
//! ([`flux_model::source_model`]) against a control plane, for the demo.
//!
//! ```text
//! flux-source-model [--kubeconfig PATH] [--namespace NS]... [--insecure-http-host HOST:PORT]...
//! ```
//!
//! 1. Connects with `--kubeconfig` (else `KUBECONFIG` / in-cluster inference).
//! 2. Starts one model per `--namespace` (default `flux-system`); `--insecure-http-host` lets
//!    `spec.insecure` sources on that non-loopback host be pulled over plain HTTP.
//! 3. Prints exactly one `source model ready` line on stdout, then runs until SIGINT or SIGTERM.

use anyhow::{Context, bail};
use flux_model::source_model::{SourceModel, SourceModelOptions};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Default)]
struct Args {
    kubeconfig: Option<String>,
    namespaces: Vec<String>,
    insecure_http_hosts: Vec<String>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match a.as_str() {
            "--kubeconfig" => args.kubeconfig = Some(value("--kubeconfig")?),
            "--namespace" | "-n" => args.namespaces.push(value("--namespace")?),
            "--insecure-http-host" => args
                .insecure_http_hosts
                .push(value("--insecure-http-host")?),
            "--help" | "-h" => {
                println!(
                    "flux-source-model [--kubeconfig PATH] [--namespace NS]... \
                     [--insecure-http-host HOST:PORT]..."
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}"),
        }
    }
    if args.namespaces.is_empty() {
        args.namespaces.push("flux-system".into());
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let client = testkit::client_for(args.kubeconfig.as_deref()).await?;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let options = SourceModelOptions {
        insecure_http_hosts: args.insecure_http_hosts.clone(),
    };
    let models: Vec<SourceModel> = args
        .namespaces
        .iter()
        .map(|ns| SourceModel::start_with(client.clone(), ns, options.clone()))
        .collect();
    println!("source model ready");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    drop(models);
    Ok(())
}
