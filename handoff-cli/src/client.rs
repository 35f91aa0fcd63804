//! The Kubernetes client: one per process, one HTTP/2 connection.

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::cli::Global;
use crate::exit;
use crate::failure::Failure;

/// The most a kubeconfig may hold (embedded certificates for many clusters fit easily).
const MAX_KUBECONFIG_BYTES: u64 = 16 * 1024 * 1024;

/// Builds the client from `--kubeconfig`/`--context`, else `$KUBECONFIG`, `~/.kube/config` or
/// the in-cluster configuration. Nothing is sent to the API server yet.
///
/// # Errors
/// A kubeconfig that is missing, unreadable, malformed or names an unknown context is a
/// configuration error: exit 2 (usage), one line.
pub async fn client(global: &Global) -> Result<Client, Failure> {
    build(global)
        .await
        .map_err(|m| Failure::new(exit::USAGE, m))
}

async fn build(global: &Global) -> Result<Client, String> {
    let opts = KubeConfigOptions {
        context: global.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match (&global.kubeconfig, &global.context) {
        (Some(path), _) => {
            // Bounded first: `Kubeconfig::read_from` reads to the end, forever on `/dev/zero`.
            crate::config::read_bounded(path, MAX_KUBECONFIG_BYTES)
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| format!("kubeconfig {}: {}", path.display(), first_line(&e)))?;
            Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|e| format!("kubeconfig {}: {}", path.display(), first_line(&e)))?
        }
        (None, Some(_)) => Config::from_kubeconfig(&opts)
            .await
            .map_err(|e| format!("kubeconfig: {}", first_line(&e)))?,
        (None, None) => Config::infer()
            .await
            .map_err(|e| format!("no Kubernetes configuration found: {}", first_line(&e)))?,
    };
    Client::try_from(config).map_err(|e| format!("Kubernetes client: {}", first_line(&e)))
}

/// The first line of an error: a kubeconfig parse error goes on with a snippet of the file
/// around the fault, which can be the line holding a token or a client key.
fn first_line(e: &dyn std::fmt::Display) -> String {
    e.to_string()
        .lines()
        .next()
        .unwrap_or_default()
        .trim_end()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_endless_kubeconfig_fails_at_the_bound() {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from([
            "flux-handoff",
            "--kubeconfig",
            "/dev/zero",
            "fences",
        ])
        .unwrap();
        let Err(err) = build(&cli.global).await else {
            panic!("a client from /dev/zero");
        };
        assert_eq!(err, "kubeconfig /dev/zero: more than 16777216 bytes");
    }

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

    #[test]
    fn a_malformed_kubeconfig_is_one_line_without_the_text_around_the_fault() {
        let dir = std::env::temp_dir().join(format!("fh-kc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nusers: [{name: u, user: {token: \"tok-do-not-print}}]\n",
        )
        .unwrap();
        let e = Kubeconfig::read_from(&path).unwrap_err();
        assert!(
            e.to_string().contains("tok-do-not-print"),
            "the parser quotes the file: {e}"
        );
        let line = first_line(&e);
        assert!(!line.contains("tok-do-not-print"), "{line}");
        assert!(line.contains("line 3"), "{line}");
        assert_eq!(line.lines().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
