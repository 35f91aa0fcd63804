//! The real Flux controllers in the loop: what `cargo xtask cluster up --flux real` seeds, and
//! how tests reach that control plane.
//!
//! 1. [`tree_files`] is the content of the OCI artifact pushed into the local registry: the
//!    `flux-system` tree (a parent applying `infrastructure` and `apps`, the same shape as the
//!    model's [`crate::model::seed`]) and fixtures the `real_flux_` tests build their own trees
//!    from (`fixtures/parent` takes `${NS}`, `${CHILD_PATH}` and `${CHILD_WAIT}` by post-build
//!    substitution).
//! 2. [`seed`] creates the pull Secret, the `OCIRepository` (with `spec.secretRef`) and the
//!    parent `Kustomization` in `flux-system`, and waits (bounded) until the real controllers
//!    report all three Kustomizations `Ready=True`.
//! 3. [`kubeconfig`] finds (or starts, under a lock) the real-Flux control plane the test
//!    binary shares, the way [`crate::plane`] does for the model's.

use std::fs::{self, File};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, DynamicObject, ObjectMeta, PostParams};
use serde_json::{Value, json};

use crate::fixtures::{kustomization_resource, ocirepository_resource};

/// Namespace of the seeded tree, the source and the pull Secret.
pub const FLUX_NS: &str = "flux-system";
/// Name of the `OCIRepository` (and of the parent Kustomization) of the seeded tree.
pub const SOURCE: &str = "flux-system";
/// The pull Secret `spec.secretRef` names.
pub const PULL_SECRET: &str = "registry-auth";
/// Repository and tag of the artifact in the local registry.
pub const REPO: &str = "flux-system/manifests";
pub const TAG: &str = "latest";
/// The registry user of the artifact.
pub const USER: &str = "flux-pull";
/// Environment variable of the registry password (never argv).
pub const PASSWORD_ENV: &str = "FLUX_REAL_REGISTRY_PASSWORD";
/// Environment variable naming the kubeconfig of a running real-Flux control plane.
pub const KUBECONFIG_ENV: &str = "FLUX_HANDOFF_REAL_KUBECONFIG";
/// The field manager of the real kustomize-controller (status, finalizers, applied objects).
pub const KUSTOMIZE_MANAGER: &str = "gotk-kustomize-controller";
/// How long [`seed`] waits for the tree to be Ready.
const SEED_WAIT: Duration = Duration::from_secs(150);
const POLL: Duration = Duration::from_millis(250);

/// The artifact's files: `(path, content)`.
#[must_use]
pub fn tree_files() -> Vec<(String, String)> {
    let child = |name: &str, extra: &str| {
        format!(
            "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  \
             name: {name}\n  namespace: {FLUX_NS}\nspec:\n  interval: 10m\n  path: ./{name}\n  \
             prune: true\n  suspend: false\n  targetNamespace: {name}\n  sourceRef:\n    kind: OCIRepository\n    \
             name: {SOURCE}\n{extra}"
        )
    };
    let marker = |name: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}-marker\ndata:\n  seeded: \"true\"\n"
        )
    };
    vec![
        (
            "clusters/local/children.yaml".into(),
            format!(
                "{}---\n{}",
                child("infrastructure", ""),
                child("apps", "  dependsOn:\n    - name: infrastructure\n")
            ),
        ),
        ("infrastructure/marker.yaml".into(), marker("infrastructure")),
        ("apps/marker.yaml".into(), marker("apps")),
        (
            "fixtures/parent/child.yaml".into(),
            format!(
                "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  \
                 name: child\n  namespace: ${{NS}}\nspec:\n  interval: 10m\n  \
                 path: ${{CHILD_PATH:=./fixtures/configmap}}\n  prune: true\n  \
                 wait: ${{CHILD_WAIT:=false}}\n  timeout: 20s\n  targetNamespace: ${{NS}}\n  \
                 sourceRef:\n    kind: OCIRepository\n    name: {SOURCE}\n    namespace: {FLUX_NS}\n"
            ),
        ),
        ("fixtures/configmap/marker.yaml".into(), marker("fixture")),
        (
            "fixtures/deployment/deployment.yaml".into(),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: never-ready\nspec:\n  \
             replicas: 1\n  selector:\n    matchLabels:\n      app: never-ready\n  template:\n    \
             metadata:\n      labels:\n        app: never-ready\n    spec:\n      containers:\n        \
             - name: app\n          image: registry.invalid/never:1\n"
                .into(),
        ),
    ]
}

/// A gzipped tarball of `files` (made with `tar`, which the machine has).
///
/// # Errors
/// I/O, or `tar` failed.
pub fn tarball(files: &[(String, String)]) -> anyhow::Result<Vec<u8>> {
    let dir = std::env::temp_dir().join(format!("flux-artifact-{}", crate::random_suffix(8)));
    let result = (|| {
        let mut tops: Vec<String> = Vec::new();
        for (path, content) in files {
            let file = dir.join(path);
            fs::create_dir_all(file.parent().context("file without parent")?)?;
            fs::write(&file, content)?;
            let top = path.split('/').next().unwrap_or_default().to_string();
            if !tops.contains(&top) {
                tops.push(top);
            }
        }
        let out = Command::new("tar")
            .arg("-czf")
            .arg("-")
            .arg("-C")
            .arg(&dir)
            .args(&tops)
            .stderr(Stdio::inherit())
            .output()
            .context("running tar")?;
        if !out.status.success() {
            bail!("tar failed ({})", out.status);
        }
        Ok(out.stdout)
    })();
    let _ = fs::remove_dir_all(&dir);
    result
}

/// A `kubernetes.io/dockerconfigjson` Secret for `host` with `user`/`password`.
#[must_use]
pub fn pull_secret(name: &str, ns: &str, host: &str, user: &str, password: &str) -> Secret {
    let b64 = base64::engine::general_purpose::STANDARD;
    let auth = b64.encode(format!("{user}:{password}"));
    let config =
        json!({ "auths": { host: { "username": user, "password": password, "auth": auth } } });
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/dockerconfigjson".into()),
        string_data: Some([(".dockerconfigjson".to_string(), config.to_string())].into()),
        ..Secret::default()
    }
}

/// Creates the seeded tree in `flux-system` pulling from registry `host`, and waits until the
/// real controllers report the parent and both children `Ready=True`.
///
/// # Errors
/// An API error, or the tree not Ready within the bound (the error names the last reason).
pub async fn seed(client: &Client, host: &str, password: &str) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in [FLUX_NS, "infrastructure", "apps"] {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        ignore_exists(namespaces.create(&post_params(), &ns).await)?;
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), FLUX_NS);
    let secret = pull_secret(PULL_SECRET, FLUX_NS, host, USER, password);
    ignore_exists(secrets.create(&post_params(), &secret).await)?;
    let sources: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), FLUX_NS, &ocirepository_resource());
    let source: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "OCIRepository",
        "metadata": { "name": SOURCE, "namespace": FLUX_NS },
        "spec": {
            "interval": "1m",
            "url": format!("oci://{host}/{REPO}"),
            "ref": { "tag": TAG },
            "secretRef": { "name": PULL_SECRET },
            "insecure": true,
        },
    }))?;
    ignore_exists(sources.create(&post_params(), &source).await)?;
    let ks: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), FLUX_NS, &kustomization_resource());
    let parent: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": { "name": SOURCE, "namespace": FLUX_NS },
        "spec": {
            "interval": "10m",
            "path": "./clusters/local",
            "prune": true,
            "sourceRef": { "kind": "OCIRepository", "name": SOURCE },
        },
    }))?;
    ignore_exists(ks.create(&post_params(), &parent).await)?;
    let start = Instant::now();
    loop {
        let mut waiting = Vec::new();
        for name in [SOURCE, "infrastructure", "apps"] {
            let obj = ks.get_opt(name).await?;
            let ready = obj.as_ref().and_then(|o| ready_condition(&o.data));
            if ready.as_ref().is_none_or(|(status, _)| status != "True") {
                let why = ready.map_or_else(|| "no Ready condition".into(), |(_, m)| m);
                waiting.push(format!("{name}: {why}"));
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        if start.elapsed() > SEED_WAIT {
            let src = sources.get_opt(SOURCE).await?;
            let src_why = src
                .as_ref()
                .and_then(|o| ready_condition(&o.data))
                .map_or_else(|| "no Ready condition".into(), |(s, m)| format!("{s} {m}"));
            bail!(
                "the seeded tree was not Ready within {SEED_WAIT:?}: {}; OCIRepository: {src_why}",
                waiting.join("; ")
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `(status, message)` of the `Ready` condition in an object's JSON.
#[must_use]
pub fn ready_condition(data: &Value) -> Option<(String, String)> {
    let c = data
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?;
    Some((
        c["status"].as_str().unwrap_or_default().to_string(),
        c["message"].as_str().unwrap_or_default().to_string(),
    ))
}

/// Every object the seed creates names its field manager.
fn post_params() -> PostParams {
    PostParams {
        field_manager: Some("flux-real-setup".into()),
        ..PostParams::default()
    }
}

fn ignore_exists<T>(r: Result<T, kube::Error>) -> anyhow::Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The kubeconfig of the real-Flux control plane (memoised per process): `$`[`KUBECONFIG_ENV`],
/// else the one in `target/flux-handoff/real-cluster`, started with `cargo xtask cluster up
/// --flux real --detach` under a lock file when it is not running.
///
/// # Errors
/// Starting it failed (the error carries xtask's output).
pub fn kubeconfig() -> anyhow::Result<PathBuf> {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    crate::plane::Shared {
        env: KUBECONFIG_ENV,
        lock: "real-cluster.lock",
        up: &["cluster", "up", "--flux", "real", "--detach"],
        dir: Some("target/flux-handoff/real-cluster"),
    }
    .kubeconfig(&PATH)
}

/// The label kustomize-controller shards on (`--watch-label-selector`).
pub const SHARD_KEY: &str = "sharding.fluxcd.io/key";
/// How long a [`Shard`] may take to start its workers.
const SHARD_START: Duration = Duration::from_secs(90);

/// The state directory of the real-Flux control plane: two levels above its kubeconfig.
///
/// # Errors
/// The control plane could not be found or started ([`kubeconfig`]).
pub fn state_dir() -> anyhow::Result<PathBuf> {
    let kubeconfig = kubeconfig()?;
    kubeconfig
        .parent()
        .and_then(std::path::Path::parent)
        .map(std::path::Path::to_path_buf)
        .context("the kubeconfig lies inside <state>/envtest")
}

/// The URL of the real-Flux plane's notification-controller event server (what
/// `flux-handoff --events-addr` takes), as `cargo xtask cluster up --flux real` recorded it.
///
/// # Errors
/// The control plane could not be found or started, or it runs no notification-controller
/// (started by an older xtask: `cargo xtask cluster down`, then up again).
pub fn events_addr() -> anyhow::Result<String> {
    let path = state_dir()?.join("notification-controller.events");
    let url = fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (a plane from before notification-controller? `cargo xtask cluster \
             down` and start it again)",
            path.display()
        )
    })?;
    Ok(url.trim().to_string())
}

/// A kustomize-controller of a test's own (the plane's binary), reconciling only objects
/// labelled [`SHARD_KEY`]`=<key>`; its JSON log is kept in a file. Killed on drop.
#[derive(Debug)]
pub struct Shard {
    child: std::process::Child,
    key: String,
    dir: PathBuf,
}

impl Shard {
    /// Starts the shard and waits (bounded) until its workers run.
    ///
    /// # Panics
    /// The plane records no binary, or the shard does not start within the bound.
    pub async fn start(key: &str) -> Self {
        Self::start_with_args(key, &[]).await
    }

    /// [`Shard::start`] with more arguments, e.g.
    /// `--feature-gates=CancelHealthCheckOnNewRevision=true` (a feature gate is read once, at
    /// start: a gate on and a gate off are two processes).
    ///
    /// # Panics
    /// As [`Shard::start`].
    pub async fn start_with_args(key: &str, extra: &[&str]) -> Self {
        let state = state_dir().expect("the real-Flux control plane");
        let bin = fs::read_to_string(state.join("kustomize-controller.bin"))
            .expect("the real-Flux control plane records its kustomize-controller binary");
        let dir = std::env::temp_dir().join(format!("rf-shard-{key}"));
        fs::create_dir_all(&dir).expect("shard directory");
        let log = File::create(dir.join("log")).expect("shard log");
        let child = Command::new(bin.trim())
            .args(["--metrics-addr=0", "--health-addr=0"])
            .arg(format!("--watch-label-selector={SHARD_KEY}={key}"))
            .args(extra)
            .env("KUBECONFIG", state.join("envtest").join("kubeconfig"))
            .env("TMPDIR", &dir)
            .env("RUNTIME_NAMESPACE", FLUX_NS)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting the shard controller");
        let shard = Self {
            child,
            key: key.into(),
            dir,
        };
        let start = Instant::now();
        while !shard.log().contains("Starting workers") {
            assert!(
                start.elapsed() < SHARD_START,
                "the shard controller did not start: {}",
                shard.log()
            );
            tokio::time::sleep(POLL).await;
        }
        shard
    }

    /// Everything the controller logged so far (JSON lines).
    #[must_use]
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// SIGKILL, as a node loss or OOM kill would; returns the key for a restart.
    #[must_use]
    pub fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::mem::take(&mut self.key)
    }

    /// A new process for the same shard key (as after a Pod restart).
    pub async fn start_again(key: String) -> Self {
        Self::start(&key).await
    }
}

impl Drop for Shard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_artifact_holds_the_seeded_tree_and_the_fixtures() {
        let files = tree_files();
        let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        for p in [
            "clusters/local/children.yaml",
            "infrastructure/marker.yaml",
            "apps/marker.yaml",
            "fixtures/parent/child.yaml",
            "fixtures/configmap/marker.yaml",
            "fixtures/deployment/deployment.yaml",
        ] {
            assert!(paths.contains(&p), "{p} missing");
        }
        let children = &files[0].1;
        assert!(children.contains("name: infrastructure") && children.contains("name: apps"));
        assert!(children.contains("dependsOn"));
    }

    #[test]
    fn the_pull_secret_carries_the_credential_only_in_its_data() {
        let s = pull_secret("s", "ns", "127.0.0.1:5000", "u", "hunter2");
        assert_eq!(s.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
        let data = &s.string_data.as_ref().unwrap()[".dockerconfigjson"];
        let doc: Value = serde_json::from_str(data).unwrap();
        assert_eq!(doc["auths"]["127.0.0.1:5000"]["password"], "hunter2");
        assert!(s.metadata.annotations.is_none() && s.metadata.labels.is_none());
    }
}
