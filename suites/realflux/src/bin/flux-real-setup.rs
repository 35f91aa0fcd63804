//! `flux-real-setup`: the kube- and registry-speaking steps of `cargo xtask cluster up --flux
//! real` (xtask itself only runs processes).
//!
//! ```text
//! flux-real-setup registry                               # env FLUX_REAL_REGISTRY_PASSWORD
//! flux-real-setup seed --kubeconfig PATH --host HOST     # env FLUX_REAL_REGISTRY_PASSWORD
//! ```
//!
//! 1. `registry` starts a local registry ([`testkit::registry`]) with htpasswd auth for the
//!    pull user, pushes the seeded tree as a Flux OCI artifact
//!    ([`testkit::real_flux::tree_files`]), prints one `registry ready host=<h> url=oci://<h>/
//!    <repo> digest=<d>` line, and runs until SIGTERM or SIGINT.
//! 2. `seed` creates the pull Secret, the `OCIRepository` and the parent `Kustomization` in
//!    `flux-system` and waits (bounded) until the real controllers report the tree Ready; it
//!    prints `setup: seeded ...` or exits non-zero with one `setup: error: ...` line.

use anyhow::Context;
use testkit::real_flux::{self, PASSWORD_ENV, REPO, TAG, USER};
use testkit::registry::LocalRegistry;
use tokio::signal::unix::{SignalKind, signal};

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
    let command = <Command as clap::Parser>::parse();
    let password =
        std::env::var(PASSWORD_ENV).with_context(|| format!("{PASSWORD_ENV} is not set"))?;
    match command {
        Command::Registry => registry(&password).await,
        Command::Seed { kubeconfig, host } => {
            let client = testkit::client_for(Some(&kubeconfig)).await?;
            real_flux::seed(&client, &host, &password).await?;
            println!(
                "setup: seeded flux-system from oci://{host}/{REPO}:{TAG}; the parent and both \
                 children are Ready"
            );
            Ok(())
        }
    }
}

/// The steps of the real-Flux control plane's setup (the registry password comes from
/// `FLUX_REAL_REGISTRY_PASSWORD`).
#[derive(Debug, clap::Parser)]
#[command(name = "flux-real-setup")]
enum Command {
    /// Run the registry with the tree as a Flux OCI artifact.
    Registry,
    /// Create the pull Secret, the `OCIRepository` and the parent, and wait until Ready.
    Seed {
        /// Kubeconfig file of the control plane.
        #[arg(long, value_name = "PATH")]
        kubeconfig: String,
        /// The registry's `host:port`.
        #[arg(long, value_name = "HOST:PORT")]
        host: String,
    },
}

/// Runs the registry with the artifact until SIGTERM or SIGINT.
async fn registry(password: &str) -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let registry = LocalRegistry::start(&[(USER, password)])
        .await
        .context("starting the registry")?;
    let layer = real_flux::tarball(&real_flux::tree_files())?;
    let digest = registry
        .push_artifact(USER, password, REPO, TAG, &layer)
        .await
        .context("pushing the artifact")?;
    let host = &registry.host;
    println!("registry ready host={host} url=oci://{host}/{REPO} digest={digest}");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    drop(registry);
    Ok(())
}
