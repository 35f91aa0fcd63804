//! A model of Flux source-controller for `OCIRepository` (docs/design/flux-model.md,
//! "source-controller"), for tests and the demo.
//!
//! 1. Every 50 ms it lists the `OCIRepository` objects of its namespace and reconciles those
//!    whose `metadata.generation` or `reconcile.fluxcd.io/requestedAt` annotation changed since
//!    it last handled them (like the real controller's predicates).
//! 2. A reconcile records the `requestedAt` nonce as `status.lastHandledReconcileAt`. A
//!    suspended object gets nothing else.
//! 3. Otherwise it reads `spec.secretRef` (a `kubernetes.io/dockerconfigjson` Secret), really
//!    fetches `spec.url:spec.ref.tag`'s manifest from the registry with Basic auth from that
//!    Secret, and sets `Ready`: `True`/`Succeeded` with `artifact.revision` = `<tag>@<digest>`,
//!    or `False` with `AuthenticationFailed` (no Secret, no entry, 401/403) or
//!    `OCIArtifactPullFailed` (anything else).
//!
//! It is independent of the code under test (its own Docker config parsing and HTTP), so a
//! `Ready=True` is evidence that the Secret on the server really works.
//!
//! # Caveats
//! Basic auth only (what `docker-registry` with htpasswd speaks), no Bearer token exchange.
//! Plain HTTP is used only when `spec.insecure` is true and the host is loopback or listed in
//! [`SourceModelOptions::insecure_http_hosts`]; otherwise HTTPS.

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// The annotation Flux reads reconcile requests from.
pub const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";
/// The data key of a dockerconfigjson Secret.
const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";
/// How often the model lists its objects.
const POLL: Duration = Duration::from_millis(50);

/// What the model may do beyond the defaults.
#[derive(Debug, Clone, Default)]
pub struct SourceModelOptions {
    /// `host:port` registries reached over plain HTTP when `spec.insecure` is true (loopback
    /// hosts always are).
    pub insecure_http_hosts: Vec<String>,
}

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

/// The `OCIRepository` resource (`source.toolkit.fluxcd.io/v1`).
#[must_use]
pub fn oci_repository_resource() -> ApiResource {
    testkit::fixtures::ocirepository_resource()
}

/// An insecure (plain HTTP allowed) `OCIRepository` for `url:tag` pulling with Secret `secret`.
///
/// # Panics
/// Never in practice: the JSON is a valid object.
#[must_use]
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
    .expect("a literal OCIRepository")
}

impl SourceModel {
    /// Starts reconciling every `OCIRepository` in `ns` with default options. Call it inside a
    /// Tokio runtime, after a crypto provider is installed.
    #[must_use]
    pub fn start(client: Client, ns: &str) -> Self {
        Self::start_with(client, ns, SourceModelOptions::default())
    }

    /// Starts reconciling every `OCIRepository` in `ns`.
    #[must_use]
    pub fn start_with(client: Client, ns: &str, options: SourceModelOptions) -> Self {
        testkit::install_crypto();
        let ns = ns.to_string();
        let task = tokio::spawn(async move {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &oci_repository_resource());
            let http = reqwest::Client::new();
            let puller = Puller {
                client,
                http,
                options,
            };
            // uid -> (generation, requestedAt) last handled
            let mut handled: HashMap<String, (i64, Option<String>)> = HashMap::new();
            loop {
                if let Ok(list) = api.list(&ListParams::default()).await {
                    for obj in list {
                        let key = obj.metadata.uid.clone().unwrap_or_default();
                        let requested = obj
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(REQUESTED_AT).cloned());
                        let trigger = (obj.metadata.generation.unwrap_or(0), requested.clone());
                        if handled.get(&key) == Some(&trigger) {
                            continue;
                        }
                        if reconcile(&api, &puller, &obj, requested).await {
                            handled.insert(key, trigger);
                        }
                    }
                }
                tokio::time::sleep(POLL).await;
            }
        });
        Self { task }
    }
}

struct Puller {
    client: Client,
    http: reqwest::Client,
    options: SourceModelOptions,
}

/// Reconciles one object; false when the status write failed (retried next round).
async fn reconcile(
    api: &Api<DynamicObject>,
    puller: &Puller,
    obj: &DynamicObject,
    requested: Option<String>,
) -> bool {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let ns = obj.metadata.namespace.clone().unwrap_or_default();
    let generation = obj.metadata.generation.unwrap_or(0);
    let mut status = serde_json::Map::new();
    if let Some(r) = requested {
        status.insert("lastHandledReconcileAt".into(), json!(r));
    }
    if obj.data.pointer("/spec/suspend").and_then(Value::as_bool) != Some(true) {
        let fetched = puller.pull(obj, &ns).await;
        let (ready, reason) = match &fetched {
            Ok(_) => ("True", "Succeeded"),
            Err(reason) => ("False", *reason),
        };
        tracing::debug!(%ns, %name, reason, "source model reconciled");
        let condition = json!({
            "type": "Ready",
            "status": ready,
            "reason": reason,
            "message": "source model",
            "observedGeneration": generation,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        });
        status.insert("conditions".into(), json!([condition]));
        if let Ok(revision) = fetched {
            status.insert("observedGeneration".into(), json!(generation));
            status.insert("artifact".into(), json!({ "revision": revision }));
        }
    }
    if status.is_empty() {
        return true;
    }
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .is_ok()
}

impl Puller {
    /// The artifact revision, or the failure reason.
    async fn pull(&self, obj: &DynamicObject, ns: &str) -> Result<String, &'static str> {
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
        let insecure = obj.data.pointer("/spec/insecure").and_then(Value::as_bool) == Some(true);
        let Some((host, repo)) = url
            .strip_prefix("oci://")
            .and_then(|rest| rest.split_once('/'))
        else {
            return Err("URLInvalid");
        };
        let secret_name = obj
            .data
            .pointer("/spec/secretRef/name")
            .and_then(Value::as_str)
            .ok_or("AuthenticationFailed")?;
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), ns);
        let secret = secrets
            .get_opt(secret_name)
            .await
            .ok()
            .flatten()
            .ok_or("AuthenticationFailed")?;
        let (user, pass) = secret
            .data
            .as_ref()
            .and_then(|d| d.get(DOCKER_CONFIG_KEY))
            .and_then(|b| basic_for(&b.0, host))
            .ok_or("AuthenticationFailed")?;
        let loopback = host.starts_with("127.") || host.starts_with("localhost:");
        let plain =
            insecure && (loopback || self.options.insecure_http_hosts.iter().any(|h| h == host));
        let scheme = if plain { "http" } else { "https" };
        let response = self
            .http
            .get(format!("{scheme}://{host}/v2/{repo}/manifests/{tag}"))
            .header(
                "accept",
                "application/vnd.oci.image.manifest.v1+json, \
                 application/vnd.docker.distribution.manifest.v2+json",
            )
            .basic_auth(user, Some(pass))
            .send()
            .await
            .map_err(|_| "OCIArtifactPullFailed")?;
        match response.status().as_u16() {
            200 => {
                let digest = response
                    .headers()
                    .get("docker-content-digest")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                Ok(format!("{tag}@{digest}"))
            }
            401 | 403 => Err("AuthenticationFailed"),
            _ => Err("OCIArtifactPullFailed"),
        }
    }
}

/// The `(user, password)` for `host` from dockerconfigjson bytes.
fn basic_for(config: &[u8], host: &str) -> Option<(String, String)> {
    let config: Value = serde_json::from_slice(config).ok()?;
    let entry = config.get("auths")?.get(host)?;
    if let Some(auth) = entry.get("auth").and_then(Value::as_str) {
        let decoded = String::from_utf8(STANDARD.decode(auth).ok()?).ok()?;
        let (user, pass) = decoded.split_once(':')?;
        return Some((user.to_string(), pass.to_string()));
    }
    let user = entry.get("username")?.as_str()?;
    let pass = entry.get("password")?.as_str()?;
    Some((user.to_string(), pass.to_string()))
}

#[cfg(test)]
mod tests {
    use super::basic_for;

    #[test]
    fn basic_comes_from_the_auth_field_or_username_and_password() {
        let auth = br#"{"auths":{"127.0.0.1:5000":{"auth":"dTpw"}}}"#;
        assert_eq!(
            basic_for(auth, "127.0.0.1:5000"),
            Some(("u".into(), "p".into()))
        );
        let split = br#"{"auths":{"r":{"username":"a","password":"b"}}}"#;
        assert_eq!(basic_for(split, "r"), Some(("a".into(), "b".into())));
        assert_eq!(basic_for(split, "other"), None);
    }
}
