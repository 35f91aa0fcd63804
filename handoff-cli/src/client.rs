//! The Kubernetes client: one per process, one HTTP/2 connection.

use kube::Client;

use crate::args::Global;
use crate::exit;
use crate::failure::Failure;

/// Builds the client from `--kubeconfig`/`--context`, else `$KUBECONFIG`, `~/.kube/config` or
/// the in-cluster configuration ([`handoff_app::kubeconfig::client`]: bounded reads, errors
/// that never quote the file). Nothing is sent to the API server yet.
///
/// # Errors
/// A kubeconfig that is missing, unreadable, malformed or names an unknown context is a
/// configuration error: exit 2 (usage), one line.
pub async fn client(global: &Global) -> Result<Client, Failure> {
    handoff_app::kubeconfig::client(global.kubeconfig.as_deref(), global.context.as_deref())
        .await
        .map_err(|e| Failure::new(exit::USAGE, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_kubeconfig_that_cannot_be_used_is_a_configuration_error() {
        use clap::Parser;
        for args in [
            &[
                "flux-handoff",
                "--kubeconfig",
                "/nonexistent/kubeconfig",
                "fences",
            ][..],
            &["flux-handoff", "--kubeconfig", "/dev/zero", "fences"][..],
        ] {
            let cli = crate::cli::Cli::try_parse_from(args).unwrap();
            let Err(f) = client(&cli.global).await else {
                panic!("a client from {args:?}");
            };
            assert_eq!(f.code, exit::USAGE, "{args:?}: {}", f.message);
            assert!(f.message.starts_with("kubeconfig "), "{}", f.message);
        }
    }
}
