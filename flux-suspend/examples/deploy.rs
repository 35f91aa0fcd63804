//! A deploy step for merge-group runs, built only on `flux-suspend`'s public API: pause a Flux
//! chain, apply something while Flux provably leaves it alone, and hand it back — on success,
//! on failure and on Ctrl-C (SIGINT/SIGTERM) alike.
//!
//! ```sh
//! cargo xtask cluster up --detach       # prints the kubeconfig path
//! KUBECONFIG=<path> cargo run -p flux-suspend --example deploy -- \
//!     flux-system infrastructure release-info v1.2.3
//! ```
//!
//! Arguments: `<namespace> <target> <configmap> <version>`. The target's parent is read from
//! its labels; the coordination Lease is `<namespace>/flux-handoff`. While paused it applies
//! the `ConfigMap` `<configmap>` with `version: <version>` (server-side apply, field manager
//! `deploy-example`). A first signal stops and releases; a second skips every wait and still
//! releases. Exit codes: 0 deployed, 1 failed (everything released), 3 refused (nothing
//! changed), 7 something is still held (the line names it), 130 interrupted.

use std::time::Duration;

use flux_suspend::object::kustomization;
use flux_suspend::{Cancel, Event, Session, SessionError, SessionOptions, TargetSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    match deploy().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err((code, line)) => {
            eprintln!("deploy: {line}");
            std::process::ExitCode::from(code)
        }
    }
}

async fn deploy() -> Result<(), (u8, String)> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [ns, target, configmap, version] = args.as_slice() else {
        return Err((
            2,
            "usage: deploy <namespace> <target> <configmap> <version>".into(),
        ));
    };
    let client = kube::Client::try_default()
        .await
        .map_err(|e| (2, format!("kubeconfig: {e}")))?;

    let mut opts = SessionOptions::new(vec![TargetSpec::new(kustomization(ns, target))]);
    opts.lease.namespace.clone_from(ns);
    opts.interval = Duration::from_millis(500);
    opts.timeout = Duration::from_mins(1);
    opts.reason = Some(format!("deploy {version}"));

    let cancel = Cancel::new();
    tokio::spawn(on_signals(cancel.clone()));

    let session = Session::start(client.clone(), opts, cancel)
        .await
        .map_err(|e| code_and_line(&e))?;
    let outcome = session
        .run_paused(
            |event: Event| eprintln!("deploy: {event:?}"),
            |paused| async move {
                eprintln!("deploy: paused after {} passes", paused.proof.passes());
                // Every protected write asserts the Lease first.
                paused.lease.assert().await?;
                let cm = serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": { "name": configmap, "namespace": ns },
                    "data": { "version": version },
                });
                let api: Api<ConfigMap> = Api::namespaced(client, ns);
                api.patch(
                    configmap,
                    &PatchParams::apply("deploy-example"),
                    &Patch::Apply(cm),
                )
                .await?;
                eprintln!("deploy: applied {ns}/{configmap} version={version}");
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            },
        )
        .await;
    eprintln!("deploy: released {:?}", outcome.released);
    outcome.into_result().map_err(|e| code_and_line(&e))
}

/// The first signal stops and releases; a second skips every wait, still releasing.
async fn on_signals(cancel: Cancel) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    for first in [true, false] {
        tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
        if first {
            cancel.stop();
        } else {
            cancel.hurry();
        }
    }
}

fn code_and_line(e: &SessionError) -> (u8, String) {
    let code = match e {
        SessionError::Refused { .. } => 3,
        SessionError::Cancelled { .. } => 130,
        SessionError::Cleanup { .. } | SessionError::StartCutShort { .. } => 7,
        _ => 1,
    };
    (code, flux_fence::one_line(e))
}
