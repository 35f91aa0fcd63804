//! One isolated playground per scenario point: a fresh namespace with the seeded Flux tree,
//! the controller model playing it in-process, a config file with a short Lease, and the
//! fault-injecting proxy (+ ordered recorder) the CLI under test talks through.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use fault_proxy::Proxy;
use flux_model::model::{FluxModel, ModelHandle, seed_tree};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use serde_json::Value;
use testkit::TestNs;
use tokio::process::Command;

use super::Settings;
use super::recorder::Recorder;

/// The seeded parent Kustomization.
pub const PARENT: &str = "flux-system";
/// The target every scenario pauses.
pub const TARGET: &str = "infrastructure";
/// The Lease each cell uses (in the cell's namespace).
pub const LEASE: &str = "flux-handoff";

/// A seeded namespace, its model, and the way in for the CLI. The CLI commands and the
/// checks live on its [`Site`] (reached through `Deref`).
pub struct Cell {
    pub ns: TestNs,
    pub model: ModelHandle,
    pub proxy: Proxy,
    pub recorder: Recorder,
    /// Kubeconfig through recorder -> proxy -> API server.
    pub through_proxy: PathBuf,
    site: Site,
}

impl std::ops::Deref for Cell {
    type Target = Site;

    fn deref(&self) -> &Site {
        &self.site
    }
}

impl Cell {
    /// A fresh seeded namespace `<prefix>-<random>`, settled.
    pub async fn new(s: &Settings, prefix: &str) -> anyhow::Result<Self> {
        let ns = TestNs::new(prefix).await?;
        let tree = seed_tree(&ns.client, &ns.name).await?;
        let model = FluxModel::start(ns.client.clone(), tree.model_config());
        for name in [PARENT, TARGET, "apps"] {
            model.wait_settled(name, 0).await?;
        }
        let site = Site::new(
            s,
            ns.client.clone(),
            &ns.name,
            testkit::plane::kubeconfig()?,
        )?;
        let proxy = Proxy::start().await?;
        let recorder = Recorder::start(&proxy.url()).await?;
        // The CLI talks to the recorder, which forwards to the proxy: rewrite the proxy's
        // kubeconfig to point at the recorder.
        let through_proxy = site.dir.join("kubeconfig-proxy");
        proxy.write_kubeconfig(&through_proxy)?;
        let text = std::fs::read_to_string(&through_proxy)?.replace(&proxy.url(), &recorder.url());
        std::fs::write(&through_proxy, text)?;
        Ok(Self {
            ns,
            model,
            proxy,
            recorder,
            through_proxy,
            site,
        })
    }

    /// `flux-handoff run --target infrastructure -- true` through the proxy (not started).
    pub fn run_cmd(&self) -> Command {
        let mut c = self.cli(&self.through_proxy);
        c.args(["run", "--target", TARGET, "--", "true"]);
        c
    }

    /// Stops the model; the namespace stays for inspection.
    pub async fn shutdown(self) {
        self.model.shutdown().await;
    }
}

/// Where a scenario point runs on some control plane: a namespace, an admin client to it, a
/// scratch directory with a `flux-handoff.toml` (this namespace's short Lease and controller),
/// and the CLI commands and checks against it.
pub struct Site {
    pub client: Client,
    pub namespace: String,
    /// This point's scratch directory.
    pub dir: PathBuf,
    /// `flux-handoff.toml` with this namespace's Lease (short duration) and controller.
    pub config: PathBuf,
    /// Kubeconfig straight to the API server (for `fences`, recovery and checks).
    pub direct: PathBuf,
    bin: PathBuf,
}

impl Site {
    /// Writes the config file into `<scratch>/<namespace>/`.
    pub fn new(
        s: &Settings,
        client: Client,
        namespace: &str,
        direct: PathBuf,
    ) -> anyhow::Result<Self> {
        let dir = s.scratch.join(namespace);
        std::fs::create_dir_all(&dir)?;
        let config = dir.join("flux-handoff.toml");
        std::fs::write(
            &config,
            format!(
                "[lease]\nnamespace = \"{namespace}\"\nname = \"{LEASE}\"\nduration = \"{d}s\"\n\n\
                 [controller]\nnamespace = \"{namespace}\"\nname = \"kustomize-controller\"\n",
                d = s.lease_seconds
            ),
        )?;
        Ok(Self {
            client,
            namespace: namespace.to_string(),
            dir,
            config,
            direct,
            bin: s.bin.clone(),
        })
    }

    /// `flux-handoff` with this site's global flags, talking through `kubeconfig`.
    pub fn cli(&self, kubeconfig: &Path) -> Command {
        let mut c = Command::new(&self.bin);
        c.env_remove("GITHUB_ACTIONS")
            .env_remove("FLUX_HANDOFF_CONFIG")
            .env_remove("FLUX_HANDOFF_HOLDER")
            .env_remove("KUBECONFIG")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--config")
            .arg(&self.config)
            .args([
                "--namespace",
                &self.namespace,
                "--interval",
                "200ms",
                "--timeout",
                "30s",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }

    /// Runs a CLI command straight to the API server; (exit code, stdout, stderr).
    pub async fn direct(&self, args: &[&str]) -> anyhow::Result<(i32, String, String)> {
        let out = self.cli(&self.direct).args(args).output().await?;
        Ok(super::outputs(&out))
    }

    /// The facts of `fences --output json` (`lease`, `fences`, `scope`).
    pub async fn fences(&self) -> anyhow::Result<Value> {
        let (code, out, err) = self.direct(&["fences", "--output", "json"]).await?;
        if code != 0 {
            bail!("fences exited {code}: {}", err.trim());
        }
        let doc: Value =
            serde_json::from_str(out.trim()).with_context(|| format!("fences output: {out}"))?;
        Ok(doc["facts"].clone())
    }

    /// Kustomization `name` in this namespace, as JSON.
    pub async fn get(&self, name: &str) -> anyhow::Result<Value> {
        Ok(flux_suspend::object::get_json(
            &self.client,
            &flux_suspend::object::kustomization(&self.namespace, name),
        )
        .await?)
    }

    /// What the server holds now: spec and annotations of parent and target, and the Lease.
    pub async fn state(&self) -> anyhow::Result<State> {
        let mut objects = BTreeMap::new();
        for name in [PARENT, TARGET] {
            let o = self.get(name).await?;
            let annotations: BTreeMap<String, String> = o
                .pointer("/metadata/annotations")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            objects.insert(
                name.to_string(),
                Obj {
                    spec: o.get("spec").cloned().unwrap_or(Value::Null),
                    annotations,
                },
            );
        }
        let lease_holder = Api::<Lease>::namespaced(self.client.clone(), &self.namespace)
            .get_opt(LEASE)
            .await?
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty());
        Ok(State {
            objects,
            lease_holder,
        })
    }

    /// After a seed or a soak group: whatever is still fenced or held is recovered (`fences
    /// recover --yes --include-paused`, straight to the API server). Returns what is left
    /// afterwards (`… still fenced after recovery`, `Lease still held …`, and with `before` an
    /// object whose spec is not as it was then), and whether the recovery had to run.
    ///
    /// It does not wait for `fences` to call the Lease expired: that reads the holder's
    /// `renewTime`, two minutes ahead after a skewed run. Recovery watches the Lease for a
    /// duration on its own monotonic clock.
    pub async fn recover_rest(
        &self,
        before: Option<&State>,
    ) -> anyhow::Result<(Vec<String>, bool)> {
        let mut after = self.state().await?;
        let mut recovery = None;
        if !after.fenced().is_empty() || after.lease_holder.is_some() {
            let (code, _, err) = self
                .direct(&["fences", "recover", "--yes", "--include-paused"])
                .await?;
            recovery = Some((code, err));
            after = self.state().await?;
        }
        let mut left: Vec<String> = after
            .fenced()
            .into_iter()
            .map(|n| format!("{n} still fenced after recovery"))
            .collect();
        left.extend(
            after
                .lease_holder
                .as_ref()
                .map(|h| format!("Lease still held by {h} after recovery")),
        );
        if let Some(before) = before {
            left.extend(
                after
                    .objects
                    .iter()
                    .filter(|(n, o)| {
                        before
                            .objects
                            .get(*n)
                            .is_some_and(|b| unpaused(&b.spec) != unpaused(&o.spec))
                    })
                    .map(|(n, _)| format!("{n}: spec not as before")),
            );
        }
        let ran = recovery.is_some();
        if let Some((code, err)) = recovery
            && code != 0
            && !left.is_empty()
        {
            left.push(format!(
                "fences recover exited {code}: {}",
                super::last_line(&err)
            ));
        }
        Ok((left, ran))
    }

    /// Polls `fences` until the Lease is free, absent, or expired (bounded).
    pub async fn wait_lease_expired(&self, bound: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let f = self.fences().await?;
            let lease = &f["lease"];
            if lease["exists"] == Value::Bool(false)
                || lease["holder"].is_null()
                || lease["expired"] == Value::Bool(true)
            {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("the Lease did not expire within {bound:?}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Spec and annotations of one object.
#[derive(Debug, Clone, PartialEq)]
pub struct Obj {
    pub spec: Value,
    pub annotations: BTreeMap<String, String>,
}

/// Parent and target as the server holds them, and the Lease holder.
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    pub objects: BTreeMap<String, Obj>,
    pub lease_holder: Option<String>,
}

impl State {
    /// What differs from `before`, ignoring annotation keys in `allowed` (what a clean run is
    /// meant to change): `object: spec` / `object: annotation KEY` / `lease held by H`.
    #[must_use]
    pub fn diff(&self, before: &State, allowed: &[String]) -> Vec<String> {
        let mut d = Vec::new();
        for (name, b) in &before.objects {
            let Some(a) = self.objects.get(name) else {
                d.push(format!("{name}: gone"));
                continue;
            };
            if a.spec != b.spec {
                d.push(format!("{name}: spec"));
            }
            let keys: std::collections::BTreeSet<&String> =
                a.annotations.keys().chain(b.annotations.keys()).collect();
            for k in keys {
                if a.annotations.get(k) != b.annotations.get(k) && !allowed.contains(k) {
                    d.push(format!("{name}: annotation {k}"));
                }
            }
        }
        if let Some(h) = &self.lease_holder {
            d.push(format!("lease held by {h}"));
        }
        d
    }

    /// Objects that carry a fence (an annotation whose key ends in `/owner`).
    #[must_use]
    pub fn fenced(&self) -> Vec<String> {
        self.objects
            .iter()
            .filter(|(_, o)| o.annotations.keys().any(|k| k.ends_with("/owner")))
            .map(|(n, _)| n.clone())
            .collect()
    }
}

/// Names (`metadata.name`) of the objects `fences --output json` lists.
#[must_use]
pub fn listed(fences: &Value) -> Vec<String> {
    fences["fences"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(|r| r["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `spec` with `suspend: false` dropped: a removed pause (Flux Operator's resume, kept by the
/// release) is the same spec as one set back to false.
fn unpaused(spec: &Value) -> Value {
    let mut s = spec.clone();
    if s.get("suspend") == Some(&Value::Bool(false))
        && let Some(m) = s.as_object_mut()
    {
        m.remove("suspend");
    }
    s
}
