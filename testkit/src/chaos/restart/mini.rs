//! What `Cell` is, on the restart scenario's own plane (a `Cell` is bound to the shared chaos
//! plane): a seeded namespace, the controller model, a config file, and the checks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::model::{FluxModel, ModelHandle, seed_tree};
use tokio::process::Command;

use super::plane::Plane;
use crate::chaos::cell::{LEASE, Obj, PARENT, State, TARGET, listed};
use crate::chaos::discover::Baseline;
use crate::chaos::{Finding, Kind, Settings, outputs};

/// What `Cell` is, on the restartable plane: a seeded namespace, its model and a config file.
pub(super) struct Mini {
    client: Client,
    ns: String,
    pub(super) model: ModelHandle,
    pub(super) dir: PathBuf,
    config: PathBuf,
    kubeconfig: PathBuf,
    bin: PathBuf,
}

impl Mini {
    pub(super) async fn new(s: &Settings, plane: &Plane, client: &Client) -> anyhow::Result<Self> {
        let ns = format!("chaos-restart-{}", testkit::random_suffix(6));
        let meta = ObjectMeta {
            name: Some(ns.clone()),
            ..ObjectMeta::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: meta,
                    ..Namespace::default()
                },
            )
            .await?;
        let tree = seed_tree(client, &ns).await?;
        let model = FluxModel::start(client.clone(), tree.model_config());
        for name in [PARENT, TARGET, "apps"] {
            model.wait_settled(name, 0).await?;
        }
        let dir = s.scratch.join(&ns);
        std::fs::create_dir_all(&dir)?;
        let config = dir.join("flux-handoff.toml");
        std::fs::write(
            &config,
            format!(
                "[lease]\nnamespace = \"{ns}\"\nname = \"{LEASE}\"\nduration = \"{d}s\"\n\n\
                 [controller]\nnamespace = \"{ns}\"\nname = \"kustomize-controller\"\n",
                d = s.lease_seconds
            ),
        )?;
        Ok(Self {
            client: client.clone(),
            ns,
            model,
            dir,
            config,
            kubeconfig: plane.kubeconfig.clone(),
            bin: s.bin.clone(),
        })
    }

    pub(super) fn cli(&self, kubeconfig: &Path) -> Command {
        let mut c = Command::new(&self.bin);
        c.env_remove("GITHUB_ACTIONS")
            .env_remove("FLUX_HANDOFF_CONFIG")
            .env_remove("FLUX_HANDOFF_HOLDER")
            .env_remove("KUBECONFIG")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--config")
            .arg(&self.config)
            .args(["--namespace", &self.ns, "--interval", "200ms"])
            .args(["--timeout", "30s"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }

    pub(super) async fn direct(&self, args: &[&str]) -> anyhow::Result<(i32, String, String)> {
        let out = self.cli(&self.kubeconfig).args(args).output().await?;
        Ok(outputs(&out))
    }

    pub(super) async fn fences(&self) -> anyhow::Result<Value> {
        let (code, out, err) = self.direct(&["fences", "--output", "json"]).await?;
        if code != 0 {
            bail!("fences exited {code}: {}", err.trim());
        }
        let doc: Value = serde_json::from_str(out.trim()).context("fences output")?;
        Ok(doc["facts"].clone())
    }

    pub(super) async fn get(&self, name: &str) -> anyhow::Result<Value> {
        Ok(flux_suspend::object::get_json(
            &self.client,
            &flux_suspend::object::kustomization(&self.ns, name),
        )
        .await?)
    }

    /// Object `name` carries a fence (polled while the server is up).
    pub(super) async fn fenced(&self, name: &str) -> anyhow::Result<bool> {
        let o = self.get(name).await?;
        Ok(o.pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .is_some_and(|m| m.keys().any(|k| k.ends_with("/owner"))))
    }

    pub(super) async fn state(&self) -> anyhow::Result<State> {
        let mut objects = BTreeMap::new();
        for name in [PARENT, TARGET] {
            let o = self.get(name).await?;
            let annotations = o
                .pointer("/metadata/annotations")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            let spec = o.get("spec").cloned().unwrap_or(Value::Null);
            objects.insert(name.to_string(), Obj { spec, annotations });
        }
        let lease_holder = Api::<Lease>::namespaced(self.client.clone(), &self.ns)
            .get_opt(LEASE)
            .await?
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty());
        Ok(State {
            objects,
            lease_holder,
        })
    }

    /// `crash::check_and_recover` against this plane: every fence and a held Lease listed;
    /// after the Lease expired, `fences recover` restores the pre-run state.
    pub(super) async fn check_and_recover(
        &self,
        before: &State,
        base: &Baseline,
    ) -> anyhow::Result<Vec<Finding>> {
        let mut problems = Vec::new();
        let left = self.state().await?;
        let report = self.fences().await?;
        let shown = listed(&report);
        for name in left.fenced() {
            if !shown.contains(&name) {
                problems.push(Finding::new(
                    Kind::LeakedFence,
                    format!("fence on {name} not listed by fences"),
                ));
            }
        }
        if let Some(h) = &left.lease_holder
            && report["lease"]["holder"].as_str() != Some(h)
        {
            problems.push(Finding::new(
                Kind::LeakedFence,
                format!("Lease held by {h} not shown by fences"),
            ));
        }
        let deadline = tokio::time::Instant::now() + Duration::from_mins(1);
        loop {
            let lease = &self.fences().await?["lease"];
            if lease["exists"] == Value::Bool(false)
                || lease["holder"].is_null()
                || lease["expired"] == Value::Bool(true)
            {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                bail!("the Lease did not expire within a minute");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let (code, _, err) = self
            .direct(&["fences", "recover", "--yes", "--include-paused"])
            .await?;
        if code != 0 {
            problems.push(Finding::new(
                Kind::LeakedFence,
                format!("fences recover exited {code}: {}", err.trim()),
            ));
        }
        for d in self.state().await?.diff(before, &base.allowed) {
            problems.push(Finding::new(
                Kind::UnexpectedChange,
                format!("after recovery: {d}"),
            ));
        }
        Ok(problems)
    }

    /// The model still watches after the restart: a `requestedAt` written through the
    /// restarted server is reconciled.
    pub(super) async fn model_alive(&self) -> Vec<Finding> {
        let mark = self.model.mark();
        let api = flux_suspend::object::api(
            &self.client,
            &flux_suspend::object::kustomization(&self.ns, "apps"),
        );
        let patch = json!({ "metadata": { "annotations": {
            "reconcile.fluxcd.io/requestedAt": format!("restart-check-{mark}") } } });
        let res = match api
            .patch("apps", &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => self.model.wait_finished("apps", mark).await.map(|_| ()),
            Err(e) => Err(e.into()),
        };
        res.err()
            .map(|e| {
                Finding::new(
                    Kind::Other,
                    format!("the controller model did not reconcile after the restart: {e:#}"),
                )
            })
            .into_iter()
            .collect()
    }
}
