//! The handoff against the real Flux Operator v0.59.0 (`cmd/operator` of
//! `github.com/controlplaneio-fluxcd/flux-operator`, built from the Go module proxy), running
//! beside the real Flux controllers: `cargo xtask ci operator`, or `cargo xtask cluster up
//! --flux real --operator --detach` and then these tests (docs/real-flux.md, "Flux Operator").
//!
//! The operator reconciles `ResourceSet`s in every namespace and the one `FluxInstance`
//! `flux-system/flux` (its `RUNTIME_NAMESPACE`); its `--storage-path` is empty, so a
//! `FluxInstance` stops at the preflight check and installs nothing over the plane's Flux.
//! `flux-handoff` is `$FLUX_HANDOFF_BIN` (xtask builds it), else built here with cargo. The
//! `rset_parent_` tests (`rset_parent/`) take a Kustomization a `ResourceSet` generates as the
//! target: frozen in its set, the set itself never paused.

mod real;
mod rset_parent;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use real::{OWNER_KEY, REQUESTED_AT, annotation, real_client, status_of};
use serde_json::{Value, json};

const DISABLE: &str = "fluxcd.controlplane.io/reconcile";
const FINALIZER: &str = "fluxcd.controlplane.io/finalizer";
const NAME: &str = "tenants";
/// Bound of every wait here (the operator's first reconcile included).
const WAIT: Duration = Duration::from_secs(90);

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "fluxcd.controlplane.io".into(),
        version: "v1".into(),
        api_version: "fluxcd.controlplane.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn resourcesets() -> ApiResource {
    resource("ResourceSet", "resourcesets")
}

fn fluxinstances() -> ApiResource {
    resource("FluxInstance", "fluxinstances")
}

fn pp() -> PatchParams {
    PatchParams {
        field_manager: Some("flux-handoff-test".into()),
        ..PatchParams::default()
    }
}

/// The real-Flux plane's client; panics unless it runs the operator.
async fn operator_client() -> Client {
    let state = testkit::real_flux::state_dir().expect("the real-Flux control plane");
    assert!(
        state.join("flux-operator.pid").is_file(),
        "the real-Flux plane in {} runs no flux-operator: `cargo xtask ci operator`, or `cargo \
         xtask cluster down` and `cargo xtask cluster up --flux real --operator --detach`",
        state.display()
    );
    real_client().await
}

/// A fresh namespace for one test.
async fn namespace(client: &Client, prefix: &str) -> String {
    use k8s_openapi::api::core::v1::Namespace;
    let name = format!("{prefix}-{}", testkit::random_suffix(6));
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    name
}

/// `ResourceSet` `tenants` in `ns`: one input, one `ConfigMap` `tenant-a` whose `value` comes
/// from the input (offline: it only applies to this API server).
fn resourceset(ns: &str, value: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet",
        "metadata": { "name": NAME, "namespace": ns },
        "spec": {
            "inputs": [{ "tenant": "a", "value": value }],
            "resources": [{
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": "tenant-<< inputs.tenant >>", "namespace": ns },
                "data": { "value": "<< inputs.value >>" },
            }],
        },
    }))
    .unwrap()
}

/// Polls `name` until `pred` holds (bounded; panics with its last state).
async fn wait(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let got = api.get_opt(name).await.unwrap();
        let v = got.map_or(Value::Null, |o| serde_json::to_value(o).unwrap());
        if pred(&v) {
            return v;
        }
        assert!(
            start.elapsed() < WAIT,
            "{name} never {what} within {WAIT:?}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn acked(v: &Value, nonce: &str) -> bool {
    v.pointer("/status/lastHandledReconcileAt")
        .and_then(Value::as_str)
        == Some(nonce)
}

fn ready(v: &Value) -> Option<String> {
    status_of(v, "Ready")
}

async fn configmap_value(client: &Client, ns: &str) -> Option<String> {
    use k8s_openapi::api::core::v1::ConfigMap;
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt("tenant-a")
        .await
        .unwrap()
        .and_then(|c| c.data)
        .and_then(|d| d.get("value").cloned())
}

/// A Ready `ResourceSet` in a fresh namespace, its `ConfigMap` applied with `value` `v1`.
async fn ready_resourceset(client: &Client, prefix: &str) -> (String, Api<DynamicObject>) {
    let ns = namespace(client, prefix).await;
    let api = Api::namespaced_with(client.clone(), &ns, &resourcesets());
    api.create(&PostParams::default(), &resourceset(&ns, "v1"))
        .await
        .unwrap();
    wait(&api, NAME, "became Ready", |v| {
        ready(v).as_deref() == Some("True")
    })
    .await;
    assert_eq!(configmap_value(client, &ns).await.as_deref(), Some("v1"));
    (ns, api)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_kinds_real_a_disabled_resourceset_acknowledges_a_fresh_requested_at() {
    let client = operator_client().await;
    let (ns, api) = ready_resourceset(&client, "op-ack").await;
    // The fence's shape: the pause and a nonce in one patch.
    let body =
        json!({ "metadata": { "annotations": { DISABLE: "disabled", REQUESTED_AT: "n1" } } });
    api.patch(NAME, &pp(), &Patch::Merge(&body)).await.unwrap();
    let held = wait(&api, NAME, "acknowledged n1", |v| acked(v, "n1")).await;
    assert_eq!(annotation(&held, DISABLE), Some("disabled"));
    // Still disabled: a spec change (generation bump) and a fresh nonce. The nonce is
    // acknowledged, the spec is not applied.
    let body = json!({
        "metadata": { "annotations": { REQUESTED_AT: "n2" } },
        "spec": { "inputs": [{ "tenant": "a", "value": "v2" }] },
    });
    api.patch(NAME, &pp(), &Patch::Merge(&body)).await.unwrap();
    let held = wait(&api, NAME, "acknowledged n2", |v| acked(v, "n2")).await;
    assert_eq!(
        configmap_value(&client, &ns).await.as_deref(),
        Some("v1"),
        "applied while disabled: {held}"
    );
    assert!(
        held.pointer("/status/observedGeneration").is_none(),
        "a top-level observedGeneration: {held}"
    );
    // Enabled again with a third nonce: reconciled, the spec applied.
    let body = json!({ "metadata": { "annotations": { DISABLE: "enabled", REQUESTED_AT: "n3" } } });
    api.patch(NAME, &pp(), &Patch::Merge(&body)).await.unwrap();
    wait(&api, NAME, "acknowledged n3 Ready", |v| {
        acked(v, "n3") && ready(v).as_deref() == Some("True")
    })
    .await;
    assert_eq!(configmap_value(&client, &ns).await.as_deref(), Some("v2"));
}

/// `flux-handoff` (`$FLUX_HANDOFF_BIN`, else `cargo build -p handoff-cli --bin flux-handoff`).
fn flux_handoff() -> PathBuf {
    if let Some(bin) = std::env::var_os("FLUX_HANDOFF_BIN") {
        return PathBuf::from(bin);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "-p",
            "handoff-cli",
            "--bin",
            "flux-handoff",
        ])
        .current_dir(&root)
        .status()
        .unwrap();
    assert!(status.success(), "building flux-handoff failed");
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), |d| root.join(d))
        .join("debug")
        .join("flux-handoff")
}

/// The command the handoff runs: records that it ran, then waits (bounded, 20 s) for the go
/// file, so the test can look at the server while the work runs.
const WORKS: &str = "echo $$ > \"$MARKER\"; i=0; while [ ! -e \"$GO\" ] && [ $i -lt 200 ]; \
                     do sleep 0.1; i=$((i+1)); done";

/// `flux-handoff run --target <target> -- sh -c WORKS` against the plane; while the command
/// runs, `during` gets the object; returns the exit code, stderr and that object.
async fn run_handoff(
    api: &Api<DynamicObject>,
    target: &str,
    lease_ns: &str,
) -> (i32, String, Value) {
    let kubeconfig = testkit::real_flux::kubeconfig().unwrap();
    let tmp = std::env::temp_dir().join(format!("flux-handoff-op-{}", testkit::random_suffix(8)));
    let (marker, go) = (tmp.with_extension("runs"), tmp.with_extension("go"));
    let child = Command::new(flux_handoff())
        .env_remove("GITHUB_ACTIONS")
        .env_remove("FLUX_HANDOFF_CONFIG")
        .env_remove("FLUX_HANDOFF_HOLDER")
        .env("MARKER", &marker)
        .env("GO", &go)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--namespace",
            lease_ns,
            "--interval",
            "200ms",
            "--timeout",
            "60s",
        ])
        .args(["run", "--target", target])
        .args(["--lease", &format!("{lease_ns}/flux-handoff-operator-test")])
        .args(["--", "sh", "-c", WORKS])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !marker.exists() {
        assert!(
            start.elapsed() < WAIT,
            "the command never ran (the pause never proven)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let name = target.rsplit('/').next().unwrap();
    let during = serde_json::to_value(api.get(name).await.unwrap()).unwrap();
    std::fs::write(&go, "").unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let _ = std::fs::remove_file(&marker);
    let _ = std::fs::remove_file(&go);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), err, during)
}

/// While the work ran: fenced by the operator's pause, the fence's nonce acknowledged by the
/// operator, no `spec.suspend` written.
fn assert_paused_and_proven(during: &Value, err: &str) {
    assert!(
        annotation(during, OWNER_KEY).is_some(),
        "not fenced: {during}\n{err}"
    );
    assert_eq!(annotation(during, DISABLE), Some("disabled"), "{during}");
    let nonce = annotation(during, REQUESTED_AT).expect("a nonce");
    assert!(
        acked(during, nonce),
        "the work ran before the operator acknowledged {nonce}: {during}"
    );
    assert!(
        during["spec"].get("suspend").is_none(),
        "spec.suspend written: {during}"
    );
    assert!(err.contains("pause proven"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_kinds_real_run_pauses_a_resourceset_with_proof_and_releases_it_exactly() {
    let client = operator_client().await;
    let (ns, api) = ready_resourceset(&client, "op-run").await;
    let before = serde_json::to_value(api.get(NAME).await.unwrap()).unwrap();
    let (code, err, during) = run_handoff(&api, &format!("rset/{ns}/{NAME}"), &ns).await;
    assert_paused_and_proven(&during, &err);
    assert_eq!(code, 0, "{err}");
    // Released exactly: the annotations as before (no fence, no pause, no nonce left), the
    // spec untouched.
    let after = serde_json::to_value(api.get(NAME).await.unwrap()).unwrap();
    assert_eq!(
        after["metadata"]["annotations"], before["metadata"]["annotations"],
        "{err}"
    );
    assert_eq!(after["spec"], before["spec"]);
    assert_eq!(annotation(&after, DISABLE), None);
    // Handed back: the operator reconciles on request again.
    let body = json!({ "metadata": { "annotations": { REQUESTED_AT: "after-release" } } });
    api.patch(NAME, &pp(), &Patch::Merge(&body)).await.unwrap();
    wait(&api, NAME, "acknowledged after-release Ready", |v| {
        acked(v, "after-release") && ready(v).as_deref() == Some("True")
    })
    .await;
}

/// `FluxInstance` `flux-system/flux` (the only one the operator reconciles). Its storage path
/// is empty, so the reconcile stops at the preflight check (nothing is fetched or installed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_kinds_real_run_pauses_a_fluxinstance_with_proof_and_releases_it_exactly() {
    let client = operator_client().await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "flux-system", &fluxinstances());
    // A leftover of an earlier run on a long-lived plane goes first (the operator's finalizer).
    if api.get_opt("flux").await.unwrap().is_some() {
        let _ = api.delete("flux", &DeleteParams::default()).await;
        wait(&api, "flux", "was deleted", Value::is_null).await;
    }
    let fi: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "fluxcd.controlplane.io/v1", "kind": "FluxInstance",
        "metadata": { "name": "flux", "namespace": "flux-system" },
        "spec": { "distribution": { "version": "2.x", "registry": "ghcr.io/fluxcd" } },
    }))
    .unwrap();
    api.create(&PostParams::default(), &fi).await.unwrap();
    let settled = wait(&api, "flux", "was reconciled", |v| {
        v.pointer("/metadata/finalizers")
            .is_some_and(|f| f.to_string().contains(FINALIZER))
            && ready(v).as_deref() == Some("False")
    })
    .await;
    eprintln!("the FluxInstance before the handoff: {}", settled["status"]);
    let before = settled;
    let (code, err, during) = run_handoff(&api, "fi/flux-system/flux", "flux-system").await;
    assert_paused_and_proven(&during, &err);
    assert_eq!(code, 0, "{err}");
    let after = serde_json::to_value(api.get("flux").await.unwrap()).unwrap();
    assert_eq!(
        after["metadata"]["annotations"], before["metadata"]["annotations"],
        "{err}"
    );
    assert_eq!(after["spec"], before["spec"]);
    api.delete("flux", &DeleteParams::default()).await.unwrap();
    wait(&api, "flux", "was deleted", Value::is_null).await;
}
