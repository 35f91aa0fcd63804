//! The real External Secrets Operator in the loop (the `eso_fanout_` tests).
//!
//! 1. [`kubeconfig`] finds (or starts, under a lock) a control plane of its own for the ESO
//!    tests (`target/flux-handoff/eso-cluster`, or `$FLUX_HANDOFF_ESO_KUBECONFIG` under
//!    `cargo xtask ci`): ESO's CRDs are installed there and never on the shared plane, whose
//!    tests prove the route refuses without them.
//! 2. [`install_crds`] installs upstream's CRDs (from `cargo xtask eso prepare`, or
//!    `$FLUX_HANDOFF_ESO_CRDS`) and waits until they are Established.
//! 3. [`Eso::start`] runs the ESO binary (built from Go modules, `$FLUX_HANDOFF_ESO_BIN` or
//!    `cargo xtask eso prepare`) against that plane with a controller class of the test's own,
//!    so parallel tests never reconcile each other's stores. Killed on drop.
//! 4. [`Layout`] creates the original tool's layout across fresh namespaces: the staging Secret
//!    and the root Secret in `<p>-flux`, a store namespace served by ESO's Kubernetes provider
//!    (service-account auth through the `TokenRequest` API), a `PushSecret`, and an
//!    `ExternalSecret` `ghcr-auth` per consumer namespace templating a
//!    `kubernetes.io/dockerconfigjson` Secret.

use std::fs::{self, File};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::config::Kubeconfig;
use serde_json::{Value, json};

/// Environment variable naming the kubeconfig of the ESO tests' control plane.
pub const KUBECONFIG_ENV: &str = "FLUX_HANDOFF_ESO_KUBECONFIG";
/// Environment variable naming the ESO binary.
pub const BIN_ENV: &str = "FLUX_HANDOFF_ESO_BIN";
/// Environment variable naming the directory of ESO's CRDs.
pub const CRDS_ENV: &str = "FLUX_HANDOFF_ESO_CRDS";
/// The data key the original tool stages the credential in.
pub const STAGED_KEY: &str = "ghcr_dockerconfigjson";
/// The store's Secret the `PushSecret` writes and the `ExternalSecret`s read.
pub const REMOTE_KEY: &str = "ghcr-seed";
const START: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(250);

/// The kubeconfig of the ESO tests' control plane (memoised per process).
///
/// # Errors
/// Starting it failed.
pub fn kubeconfig() -> anyhow::Result<PathBuf> {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    crate::plane::Shared {
        env: KUBECONFIG_ENV,
        lock: "eso-cluster.lock",
        up: &["cluster", "up", "--detach"],
        dir: Some("target/flux-handoff/eso-cluster"),
    }
    .kubeconfig(&PATH)
}

/// An admin client of the ESO tests' control plane.
///
/// # Errors
/// The plane cannot be found or started.
pub async fn client() -> anyhow::Result<Client> {
    Ok(Client::try_from(crate::config_from(&kubeconfig()?).await?)?)
}

/// `(binary, CRD directory)`: from the environment, else `cargo xtask eso prepare` (which
/// builds the binary once, cached, under a lock).
///
/// # Errors
/// The build failed.
pub fn prepared() -> anyhow::Result<(PathBuf, PathBuf)> {
    static PREPARED: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    if let Some(p) = PREPARED.get() {
        return Ok(p.clone());
    }
    let found = if let (Some(b), Some(c)) = (std::env::var_os(BIN_ENV), std::env::var_os(CRDS_ENV))
    {
        (PathBuf::from(b), PathBuf::from(c))
    } else {
        prepare_by_xtask()?
    };
    Ok(PREPARED.get_or_init(|| found).clone())
}

/// `cargo xtask eso prepare` under a lock: `(bin, crds)`.
fn prepare_by_xtask() -> anyhow::Result<(PathBuf, PathBuf)> {
    let scratch = crate::plane::root().join("target").join("flux-handoff");
    fs::create_dir_all(&scratch)?;
    let lock = File::create(scratch.join("eso-build.lock"))?;
    lock.lock().context("locking eso-build.lock")?;
    let out = Command::new(env!("CARGO"))
        .args(["xtask", "eso", "prepare"])
        .current_dir(crate::plane::root())
        .output()
        .context("running `cargo xtask eso prepare`")?;
    drop(lock);
    if !out.status.success() {
        bail!(
            "`cargo xtask eso prepare` failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |k: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .map(PathBuf::from)
            .with_context(|| format!("no {k} in `{text}`"))
    };
    Ok((field("bin=")?, field("crds=")?))
}

/// Installs ESO's CRDs into the plane of `client` (an existing one is kept) and waits until
/// each is Established.
///
/// # Errors
/// A manifest does not parse, or a CRD is not Established in time.
pub async fn install_crds(client: &Client) -> anyhow::Result<()> {
    let (_, dir) = prepared()?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter(|p| !p.ends_with("kustomization.yaml"))
        .collect();
    files.sort();
    for f in files {
        let text = fs::read_to_string(&f)?;
        let crd: CustomResourceDefinition =
            serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", f.display()))?;
        names.push(crd.metadata.name.clone().unwrap_or_default());
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating {}", f.display())),
        }
    }
    let start = Instant::now();
    for name in names {
        loop {
            let crd = api.get(&name).await?;
            let established = crd.status.and_then(|s| s.conditions).is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
            if established {
                break;
            }
            if start.elapsed() > START {
                bail!("CRD {name} not Established within {START:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }
    Ok(())
}

/// One ESO process with a controller class of its own, logging into a file. Killed on drop.
#[derive(Debug)]
pub struct Eso {
    child: std::process::Child,
    dir: PathBuf,
    /// The controller class its stores must name (`spec.controller`).
    pub class: String,
}

impl Eso {
    /// Starts ESO against the ESO tests' plane and waits (bounded) until its workers run.
    ///
    /// # Errors
    /// No binary, or it does not start in time.
    pub async fn start(class: &str) -> anyhow::Result<Self> {
        let (bin, _) = prepared()?;
        let dir = std::env::temp_dir().join(format!("eso-{class}"));
        fs::create_dir_all(&dir)?;
        let log = File::create(dir.join("log"))?;
        let child = Command::new(&bin)
            .args([
                "--metrics-addr=0",
                "--loglevel=info",
                "--enable-cluster-store-reconciler=false",
                "--enable-cluster-external-secret-reconciler=false",
                "--enable-cluster-push-secret-reconciler=false",
            ])
            .arg(format!("--controller-class={class}"))
            .env("KUBECONFIG", kubeconfig()?)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let eso = Self {
            child,
            dir,
            class: class.into(),
        };
        let start = Instant::now();
        while eso.log().matches("Starting workers").count() < 4 {
            if start.elapsed() > START {
                bail!("ESO did not start its workers: {}", eso.log());
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(eso)
    }

    /// Everything ESO logged so far.
    #[must_use]
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }
}

impl Drop for Eso {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// `external-secrets.io` resources by kind.
#[must_use]
pub fn resource(kind: &str) -> ApiResource {
    let (version, plural) = match kind {
        "PushSecret" => ("v1alpha1", "pushsecrets"),
        "ExternalSecret" => ("v1", "externalsecrets"),
        _ => ("v1", "secretstores"),
    };
    let gvk = GroupVersionKind::gvk("external-secrets.io", version, kind);
    ApiResource::from_gvk_with_plural(&gvk, plural)
}

/// Creates `obj` (a full manifest with `kind` and `metadata.namespace`).
///
/// # Errors
/// The create failed.
pub async fn create(client: &Client, obj: Value) -> anyhow::Result<()> {
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let o: DynamicObject = serde_json::from_value(obj)?;
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &resource(&kind))
        .create(&PostParams::default(), &o)
        .await
        .with_context(|| format!("creating {kind} in {ns}"))?;
    Ok(())
}

/// [`create`], keeping an object that exists already (a demo run again with `--keep`).
///
/// # Errors
/// The create failed otherwise.
pub async fn create_if_absent(client: &Client, obj: Value) -> anyhow::Result<()> {
    match create(client, obj).await {
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<kube::Error>()
                    .is_some_and(|k| matches!(k, kube::Error::Api(s) if s.code == 409))
            }) =>
        {
            Ok(())
        }
        other => other,
    }
}

/// The API server URL and base64 PEM CA of the ESO plane (for the Kubernetes provider).
///
/// # Errors
/// The kubeconfig cannot be read.
pub fn server_and_ca() -> anyhow::Result<(String, String)> {
    server_and_ca_of(&kubeconfig()?)
}

/// The API server URL and base64 PEM CA of the plane of kubeconfig `path` (the demo's).
///
/// # Errors
/// The kubeconfig cannot be read.
pub fn server_and_ca_of(path: &std::path::Path) -> anyhow::Result<(String, String)> {
    let kc = Kubeconfig::read_from(path)?;
    let cluster = kc
        .clusters
        .first()
        .and_then(|c| c.cluster.clone())
        .context("kubeconfig without a cluster")?;
    let ca = match (
        cluster.certificate_authority_data,
        cluster.certificate_authority,
    ) {
        (Some(data), _) => data,
        (None, Some(path)) => STANDARD.encode(fs::read(path)?),
        (None, None) => bail!("kubeconfig without a CA"),
    };
    Ok((cluster.server.context("cluster without server")?, ca))
}

/// A `SecretStore` `store` in `ns` for controller class `class`, serving Secrets of
/// `remote_ns` through ESO's Kubernetes provider as `ServiceAccount` `eso-store` of `ns`.
#[must_use]
pub fn store(ns: &str, class: &str, remote_ns: &str, server: &str, ca: &str) -> Value {
    json!({
        "apiVersion": "external-secrets.io/v1",
        "kind": "SecretStore",
        "metadata": { "name": "store", "namespace": ns },
        "spec": {
            "controller": class,
            "provider": { "kubernetes": {
                "remoteNamespace": remote_ns,
                "server": { "url": server, "caBundle": ca },
                "auth": { "serviceAccount": { "name": "eso-store" } },
            }},
        },
    })
}

/// The original tool's `PushSecret`: the staged key of `source` to `REMOTE_KEY` in the store.
#[must_use]
pub fn push_secret(ns: &str, name: &str, source: &str) -> Value {
    json!({
        "apiVersion": "external-secrets.io/v1alpha1",
        "kind": "PushSecret",
        "metadata": { "name": name, "namespace": ns },
        "spec": {
            "refreshInterval": "1h",
            "secretStoreRefs": [{ "name": "store", "kind": "SecretStore" }],
            "selector": { "secret": { "name": source } },
            "data": [{ "match": {
                "secretKey": STAGED_KEY,
                "remoteRef": { "remoteKey": REMOTE_KEY, "property": STAGED_KEY },
            }}],
        },
    })
}

/// The original tool's `ExternalSecret`: pulls `remote_key`'s staged key and templates a
/// `kubernetes.io/dockerconfigjson` Secret `name` (`.dockerconfigjson` = the key, base64-decoded).
#[must_use]
pub fn external_secret(ns: &str, name: &str, remote_key: &str) -> Value {
    json!({
        "apiVersion": "external-secrets.io/v1",
        "kind": "ExternalSecret",
        "metadata": { "name": name, "namespace": ns },
        "spec": {
            "refreshInterval": "1h",
            "secretStoreRef": { "name": "store", "kind": "SecretStore" },
            "target": {
                "name": name,
                "template": {
                    "type": "kubernetes.io/dockerconfigjson",
                    "data": { ".dockerconfigjson": format!("{{{{ .{STAGED_KEY} | b64dec }}}}") },
                },
            },
            "data": [{
                "secretKey": STAGED_KEY,
                "remoteRef": { "key": remote_key, "property": STAGED_KEY },
            }],
        },
    })
}
