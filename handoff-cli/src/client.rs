//! The Kubernetes client: one per process, one HTTP/2 connection.

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::cli::Global;

/// Builds the client from `--kubeconfig`/`--context`, else `$KUBECONFIG`, `~/.kube/config` or
/// the in-cluster configuration.
pub async fn client(global: &Global) -> Result<Client, String> {
    let opts = KubeConfigOptions {
        context: global.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match (&global.kubeconfig, &global.context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
            Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        (None, Some(_)) => Config::from_kubeconfig(&opts)
            .await
            .map_err(|e| format!("kubeconfig: {e}"))?,
        (None, None) => Config::infer()
            .await
            .map_err(|e| format!("no Kubernetes configuration found: {e}"))?,
    };
    Client::try_from(config).map_err(|e| format!("Kubernetes client: {e}"))
}
