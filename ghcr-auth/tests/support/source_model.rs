//! A test-only model of Flux source-controller for `OCIRepository` (`flux-model.md`,
//! "source-controller"): on each reconcile it reads `spec.secretRef` (a dockerconfigjson
//! Secret), really pulls the manifest from the registry with it (using this crate's prover),
//! and finalises status like Flux: `lastHandledReconcileAt` = the `requestedAt` nonce, `Ready`
//! True with `artifact.revision`, or False with an auth reason; a suspended object only records
//! the nonce. Triggered by generation or `requestedAt` changes, like the real controller.

use std::collections::HashMap;
use std::time::Duration;

use ghcr_auth::DockerConfig;
use ghcr_auth::credential::SECRET_KEY;
use ghcr_auth::image::ImageRef;
use ghcr_auth::registry::{ProofOutcome, ProverOptions, RegistryProver};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// A running model; stops on drop.
#[derive(Debug)]
pub struct SourceModel {
    task: JoinHandle<()>,
}

impl Drop for SourceModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn oci_repository_resource() -> ApiResource {
    testkit::fixtures::ocirepository_resource()
}

/// An `OCIRepository` pointing at `image` with pull Secret `secret`.
pub fn oci_repository(name: &str, ns: &str, url: &str, tag: &str, secret: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "OCIRepository",
        "metadata": { "name": name, "namespace": ns },
        "spec": {
            "interval": "10m",
            "url": url,
            "ref": { "tag": tag },
            "secretRef": { "name": secret },
            "insecure": true,
        },
    }))
    .unwrap()
}

impl SourceModel {
    /// Starts reconciling every `OCIRepository` in `ns`.
    pub fn start(client: Client, ns: &str) -> Self {
        let ns = ns.to_string();
        let task = tokio::spawn(async move {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &oci_repository_resource());
            let prover = RegistryProver::new(ProverOptions {
                allow_insecure_loopback: true,
                ..Default::default()
            })
            .expect("prover");
            // (uid) -> (generation, requestedAt) last handled
            let mut handled: HashMap<String, (i64, Option<String>)> = HashMap::new();
            loop {
                if let Ok(list) = api.list(&ListParams::default()).await {
                    for obj in list {
                        let key = obj.metadata.uid.clone().unwrap_or_default();
                        let requested = obj
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get("reconcile.fluxcd.io/requestedAt").cloned());
                        let trigger = (obj.metadata.generation.unwrap_or(0), requested.clone());
                        if handled.get(&key) == Some(&trigger) {
                            continue;
                        }
                        reconcile(&client, &api, &prover, &obj, requested).await;
                        handled.insert(key, trigger);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Self { task }
    }
}

async fn reconcile(
    client: &Client,
    api: &Api<DynamicObject>,
    prover: &RegistryProver,
    obj: &DynamicObject,
    requested: Option<String>,
) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let ns = obj.metadata.namespace.clone().unwrap_or_default();
    let generation = obj.metadata.generation.unwrap_or(0);
    let mut status = serde_json::Map::new();
    if let Some(r) = requested {
        status.insert("lastHandledReconcileAt".into(), json!(r));
    }
    if obj.data.pointer("/spec/suspend").and_then(Value::as_bool) != Some(true) {
        let (ready, reason, revision) = pull(client, prover, obj, &ns).await;
        let condition = json!({
            "type": "Ready",
            "status": if ready { "True" } else { "False" },
            "reason": reason,
            "message": "model",
            "observedGeneration": generation,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        });
        status.insert("conditions".into(), json!([condition]));
        if ready {
            status.insert("observedGeneration".into(), json!(generation));
            status.insert("artifact".into(), json!({ "revision": revision }));
        }
    }
    if status.is_empty() {
        return;
    }
    let _ = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await;
}

async fn pull(
    client: &Client,
    prover: &RegistryProver,
    obj: &DynamicObject,
    ns: &str,
) -> (bool, &'static str, String) {
    let url = obj
        .data
        .pointer("/spec/url")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let tag = obj
        .data
        .pointer("/spec/ref/tag")
        .and_then(Value::as_str)
        .unwrap_or("latest");
    let Ok(image) = format!("{url}:{tag}").parse::<ImageRef>() else {
        return (false, "URLInvalid", String::new());
    };
    let Some(secret_name) = obj
        .data
        .pointer("/spec/secretRef/name")
        .and_then(Value::as_str)
    else {
        return (false, "AuthenticationFailed", String::new());
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let Ok(Some(secret)) = secrets.get_opt(secret_name).await else {
        return (false, "AuthenticationFailed", String::new());
    };
    let Some(config) = secret
        .data
        .as_ref()
        .and_then(|d| d.get(SECRET_KEY))
        .and_then(|b| std::str::from_utf8(&b.0).ok())
        .and_then(|t| DockerConfig::parse(t).ok())
    else {
        return (false, "AuthenticationFailed", String::new());
    };
    match prover.prove(&config, &image).await {
        Ok(ProofOutcome::Proven { digest }) => (
            true,
            "Succeeded",
            format!("{tag}@{}", digest.unwrap_or_default()),
        ),
        Ok(
            ProofOutcome::Unauthorized { .. }
            | ProofOutcome::Forbidden { .. }
            | ProofOutcome::NoCredential,
        ) => (false, "AuthenticationFailed", String::new()),
        _ => (false, "OCIArtifactPullFailed", String::new()),
    }
}
