//! The `ReplicaSets` of a played Deployment, as kube-controller-manager keeps them: one per pod
//! template, named `<deployment>-<template hash>`, controlled by the Deployment
//! (`ownerReferences` with `controller: true`), and the Pods it plays controlled by the
//! `ReplicaSet` of their template. Pods that are not (another workload's with the same labels)
//! and Pods that have ended (`Failed`, e.g. evicted, or `Succeeded`) are none of its replicas:
//! a `ReplicaSet` controller neither counts nor deletes them.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use super::TEMPLATE_HASH_LABEL;

/// A controller `ownerReference` to `kind` `name` with `uid`.
fn controller_ref(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!({ "apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            "controller": true, "blockOwnerDeletion": true })
}

/// The uid of the controller named by `refs`, if any.
fn controller_uid(refs: Option<&Vec<OwnerReference>>) -> Option<&str> {
    refs?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

/// Ensures the `ReplicaSet` of template `hash` exists, controlled by `dep`; returns its
/// `ownerReference` for the Pods it is to control.
pub(super) async fn ensure(
    client: &Client,
    dep: &Deployment,
    template: &Value,
    selector: &Value,
    hash: &str,
    replicas: i32,
) -> anyhow::Result<Value> {
    let ns = dep.metadata.namespace.clone().unwrap_or_default();
    let dep_name = dep.metadata.name.clone().unwrap_or_default();
    let dep_uid = dep.metadata.uid.clone().unwrap_or_default();
    let name = format!("{dep_name}-{hash}");
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let rs = if let Some(rs) = api.get_opt(&name).await? {
        rs
    } else {
        let mut template = template.clone();
        template["metadata"]["labels"][TEMPLATE_HASH_LABEL] = json!(hash);
        let mut selector = selector.clone();
        selector["matchLabels"][TEMPLATE_HASH_LABEL] = json!(hash);
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": template["metadata"]["labels"],
                "ownerReferences": [controller_ref("apps/v1", "Deployment", &dep_name, &dep_uid)],
            },
            "spec": { "replicas": replicas, "selector": selector, "template": template },
        }))?;
        match api.create(&PostParams::default(), &rs).await {
            Ok(rs) => rs,
            Err(kube::Error::Api(s)) if s.code == 409 => api.get(&name).await?,
            Err(e) => return Err(e.into()),
        }
    };
    let uid = rs.metadata.uid.unwrap_or_default();
    Ok(controller_ref("apps/v1", "ReplicaSet", &name, &uid))
}

/// The Pods of `all` that are `dep`'s replicas: controlled by a `ReplicaSet` it controls, and
/// not ended (`Failed` or `Succeeded`).
pub(super) async fn replicas_of<'p>(
    client: &Client,
    dep: &Deployment,
    selector: &str,
    all: &'p [Pod],
) -> anyhow::Result<Vec<&'p Pod>> {
    let ns = dep.metadata.namespace.clone().unwrap_or_default();
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let sets = api
        .list(&ListParams::default().labels(selector))
        .await?
        .items;
    let dep_uid = dep.metadata.uid.as_deref();
    let owned: Vec<&str> = sets
        .iter()
        .filter(|rs| controller_uid(rs.metadata.owner_references.as_ref()) == dep_uid)
        .filter_map(|rs| rs.metadata.uid.as_deref())
        .collect();
    Ok(all
        .iter()
        .filter(|p| {
            controller_uid(p.metadata.owner_references.as_ref()).is_some_and(|u| owned.contains(&u))
        })
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Failed" | "Succeeded"))
        })
        .collect())
}
