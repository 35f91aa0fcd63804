//! End to end: `doctor` reads the controller Deployment's container arguments and says whether
//! Flux's feature gate `CancelHealthCheckOnNewRevision` is on, and what it would save for the
//! objects it checked (docs/bench.md).

mod common;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

/// A controller Deployment `name` in the test's namespace whose container has `args`.
async fn controller(c: &Cluster, name: &str, args: &[&str]) {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{ "name": "manager",
                    "image": "ghcr.io/fluxcd/kustomize-controller:v1.9.6", "args": args }] },
            },
        },
    }))
    .unwrap();
    c.ns.api::<Deployment>()
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
}

/// The parent waits on its children's health for up to 35 s.
async fn parent_waits(c: &Cluster) {
    let api = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        c.ns.client.clone(),
        &c.ns.name,
        &flux_suspend::object::kustomization_resource(),
    );
    api.patch(
        PARENT,
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "wait": true, "timeout": "35s" } })),
    )
    .await
    .unwrap();
}

async fn doctor(c: &Cluster, controller: &str) -> (i32, String) {
    doctor_with(c, controller, &[]).await
}

async fn doctor_with(c: &Cluster, controller: &str, extra: &[&str]) -> (i32, String) {
    let ns = &c.ns.name;
    let lease = format!("{ns}/flux-handoff");
    let controller = format!("{ns}/{controller}");
    let mut args = vec![
        "doctor",
        "--target",
        TARGET,
        "--lease",
        &lease,
        "--controller",
        &controller,
    ];
    args.extend(extra);
    let out = c.run(&args).await;
    (code(&out), format!("{}{}", stdout(&out), stderr(&out)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_gate_off_says_what_the_gate_would_save() {
    let c = Cluster::seeded("doctor-gate-off").await;
    controller(
        &c,
        "kc-plain",
        &["--watch-all-namespaces", "--log-level=info"],
    )
    .await;
    parent_waits(&c).await;
    let (code, text) = doctor(&c, "kc-plain").await;
    assert_eq!(code, 0, "{text}");
    let want = format!(
        "ok   feature gate CancelHealthCheckOnNewRevision of Deployment {ns}/kc-plain: off (the \
         default); an acknowledgement waits until an in-flight health check gives up, up to 35s \
         for Kustomization {ns}/{PARENT}, whose reconcile waits that long on a health check; \
         --feature-gates=CancelHealthCheckOnNewRevision=true on the controller saves that wait",
        ns = c.ns.name
    );
    assert!(text.contains(&want), "missing {want:?} in\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_gate_on_is_reported_from_the_deployment_args() {
    let c = Cluster::seeded("doctor-gate-on").await;
    controller(
        &c,
        "kc-gated",
        &[
            "--watch-all-namespaces",
            "--feature-gates=OOMWatch=true,CancelHealthCheckOnNewRevision=true",
        ],
    )
    .await;
    parent_waits(&c).await;
    let (code, text) = doctor(&c, "kc-gated").await;
    assert_eq!(code, 0, "{text}");
    let want = format!(
        "ok   feature gate CancelHealthCheckOnNewRevision of Deployment {}/kc-gated: on; a \
         suspend cancels an in-flight health check, so the acknowledgement does not wait for it",
        c.ns.name
    );
    assert!(text.contains(&want), "missing {want:?} in\n{text}");
    assert!(!text.contains(": off"), "{text}");
}

/// A controller Deployment `name` labelled as Flux Operator labels what a `FluxInstance` installs.
async fn operator_controller(c: &Cluster, name: &str) {
    controller(c, name, &["--watch-all-namespaces"]).await;
    c.ns.api::<Deployment>()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": {
                "app.kubernetes.io/managed-by": "flux-operator",
                "fluxcd.controlplane.io/name": "flux",
                "fluxcd.controlplane.io/namespace": "flux-system",
            } } })),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_kinds_doctor_names_the_flux_operator_and_refuses_restart_there() {
    let c = Cluster::seeded("doctor-operator").await;
    operator_controller(&c, "kc-operated").await;
    let ns = &c.ns.name;
    let check = format!(
        "controller Deployment {ns}/kc-operated is managed by Flux Operator (FluxInstance \
         flux-system/flux)"
    );
    let (ended, text) = doctor(&c, "kc-operated").await;
    assert_eq!(ended, 0, "{text}");
    let note = format!("ok   {check}: --retire restart would be reverted there");
    assert!(text.contains(&note), "missing {note:?} in\n{text}");

    let (ended, text) = doctor_with(&c, "kc-operated", &["--retire", "restart"]).await;
    let fail = format!("FAIL {check}: --retire restart is reverted there");
    assert!(text.contains(&fail), "missing {fail:?} in\n{text}");
    assert_ne!(ended, 0, "{text}");
}
