//! What `Cell` is, on the restart scenario's own plane (a `Cell` is bound to the shared chaos
//! plane): a seeded namespace, the controller model, and a [`Site`] for the CLI and the checks.

use anyhow::Context;
use flux_model::model::{FluxModel, ModelHandle, seed_tree};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{
    Api, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
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
        Self::named(s, plane, client, "chaos-restart").await
    }

    /// As [`Mini::new`], in a namespace `<prefix>-<random>`.
    pub(crate) async fn named(
        s: &Settings,
        plane: &Plane,
        client: &Client,
        prefix: &str,
    ) -> anyhow::Result<Self> {
        let ns = format!("{prefix}-{}", testkit::random_suffix(6));
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

    /// The version of the namespace's Kustomizations now: where a watch resumes from.
    pub(crate) async fn version(&self) -> anyhow::Result<String> {
        let api = Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &testkit::fixtures::kustomization_resource(),
        );
        let list = api.list(&ListParams::default().limit(1)).await?;
        Ok(list.metadata.resource_version.unwrap_or_default())
    }

    /// A watch resumed after the restart from `since`, a version read before it, gets the
    /// writes made since (the plane serves watches from etcd), not 410 Gone, which a watch
    /// cache starting at the restart's revision answers and which leaves a history recorder a
    /// gap (docs/chaos.md, "Restarts leave no gap").
    pub(crate) async fn watch_resumes(&self, since: &str) -> Vec<Finding> {
        let api = Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &testkit::fixtures::kustomization_resource(),
        );
        let first = async {
            let stream = api.watch(&WatchParams::default().timeout(5), since).await?;
            let mut stream = std::pin::pin!(stream);
            stream.next().await.transpose().map_err(anyhow::Error::from)
        };
        let problem = match tokio::time::timeout(Duration::from_secs(10), first).await {
            Ok(Ok(Some(
                WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_),
            ))) => {
                return Vec::new();
            }
            Ok(Ok(Some(WatchEvent::Error(e)))) => format!("{} {}", e.code, e.message),
            Ok(Ok(other)) => format!("{other:?}"),
            Ok(Err(e)) => format!("{e:#}"),
            Err(_) => "no event within 10 s".into(),
        };
        vec![Finding::new(
            Kind::Other,
            format!(
                "a watch resumed after the restart from version {since} (before it) got no \
                 event of the writes since: {problem}"
            ),
        )]
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
