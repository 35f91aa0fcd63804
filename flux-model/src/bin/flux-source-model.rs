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

use anyhow::Context;
use flux_model::source_model::{SourceModel, SourceModelOptions};
use tokio::signal::unix::{SignalKind, signal};

/// The `OCIRepository` source-controller model against a control plane.
#[derive(Debug, clap::Parser)]
#[command(name = "flux-source-model")]
struct Args {
    /// Kubeconfig file (default: `KUBECONFIG` or in-cluster inference).
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<String>,
    /// A namespace to run one model in (repeatable; default `flux-system`).
    #[arg(long = "namespace", short = 'n', value_name = "NS")]
    namespaces: Vec<String>,
    /// A non-loopback registry that `spec.insecure` sources may pull from over plain HTTP
    /// (repeatable).
    #[arg(long = "insecure-http-host", value_name = "HOST:PORT")]
    insecure_http_hosts: Vec<String>,
}

fn parse_args() -> Args {
    let mut args = <Args as clap::Parser>::parse();
    if args.namespaces.is_empty() {
        args.namespaces.push("flux-system".into());
    }
    args
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args();
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
