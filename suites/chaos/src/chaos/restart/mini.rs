//! What `Cell` is, on the restart scenario's own plane (a `Cell` is bound to the shared chaos
//! plane): a seeded namespace, the controller model, and a [`Site`] for the CLI and the checks.

use anyhow::Context;
use flux_model::model::{FluxModel, ModelHandle, seed_tree};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::plane::Plane;
use crate::chaos::Settings;
use crate::chaos::cell::{PARENT, Site, TARGET};
use crate::chaos::{Finding, Kind};

/// What `Cell` is, on the restartable plane: a seeded namespace, its model and a [`Site`].
pub(crate) struct Mini {
    pub(crate) model: ModelHandle,
    site: Site,
}

impl std::ops::Deref for Mini {
    type Target = Site;

    fn deref(&self) -> &Site {
        &self.site
    }
}

impl Mini {
    pub(crate) async fn new(s: &Settings, plane: &Plane, client: &Client) -> anyhow::Result<Self> {
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
            .await
            .context("creating the namespace")?;
        let tree = seed_tree(client, &ns).await?;
        let model = FluxModel::start(client.clone(), tree.model_config());
        for name in [PARENT, TARGET, "apps"] {
            model.wait_settled(name, 0).await?;
        }
        let site = Site::new(s, client.clone(), &ns, plane.kubeconfig.clone())?;
        Ok(Self { model, site })
    }

    /// Object `name` carries a fence (polled while the server is up).
    pub(crate) async fn fenced(&self, name: &str) -> anyhow::Result<bool> {
        let o = self.get(name).await?;
        Ok(o.pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .is_some_and(|m| m.keys().any(|k| k.ends_with("/owner"))))
    }

    /// The model still watches after the restart: a `requestedAt` written through the
    /// restarted server is reconciled.
    pub(crate) async fn model_alive(&self) -> Vec<Finding> {
        let mark = self.model.mark();
        let api = flux_suspend::object::api(
            &self.client,
            &flux_suspend::object::kustomization(&self.namespace, "apps"),
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
