//! End to end: Flux Operator kinds as targets — `run rset/NS/NAME` and `run fi/NS/NAME` against
//! the API server with the model playing Flux Operator. The fence is the object's
//! `fluxcd.controlplane.io/reconcile: disabled` (it has no `spec.suspend`), proven by the
//! requestedAt acknowledgement, and released exactly; a person's resume during the work ends
//! the run with exit 8 and the release keeps their resume; one already disabled by someone is
//! refused (exit 3) untouched.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{OWNER_KEY, ended};
use flux_model::model::{Controller, FluxModel, ModelConfig, ModelHandle, Outcome};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::TestNs;
use testkit::fenced::annotation;
use testkit::fixtures::{fluxinstance_resource, operator_object, resourceset_resource};

const OPERATOR: &str = "fluxcd.controlplane.io/reconcile";
const RECONCILE: &str = "kustomize.toolkit.fluxcd.io/reconcile";
const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";
const NAME: &str = "tenants";

/// The command: announces it runs, then waits for the go file (bounded: 20 s, so a run that
/// does not stop it ends by itself and the test fails on its exit code).
const WORKS: &str = "echo $$ > \"$MARKER\"; i=0; while [ ! -e \"$GO\" ] && [ $i -lt 200 ]; \
                     do sleep 0.1; i=$((i+1)); done";

struct Plane {
    ns: TestNs,
    model: ModelHandle,
    api: Api<DynamicObject>,
    short: &'static str,
    kind: &'static str,
    marker: PathBuf,
    go: PathBuf,
}

impl Plane {
    /// A fresh namespace with one operator object of `resource`, the model playing its
    /// controller, settled (finalizer added, Ready).
    async fn new(prefix: &str, controller: Controller, resource: &ApiResource) -> Self {
        let ns = TestNs::new(prefix).await.unwrap();
        let api = Api::namespaced_with(ns.client.clone(), &ns.name, resource);
        let model = FluxModel::start(
            ns.client.clone(),
            ModelConfig::namespaced(&ns.name).playing(controller),
        );
        let spec = json!({ "inputs": [{ "tenant": "a" }] });
        api.create(
            &PostParams::default(),
            &operator_object(resource, &ns.name, NAME, &spec),
        )
        .await
        .unwrap();
        assert_eq!(
            model.wait_settled(NAME, 0).await.unwrap(),
            Outcome::Succeeded
        );
        let (short, kind) = match controller {
            Controller::FluxInstance => ("fi", "FluxInstance"),
            _ => ("rset", "ResourceSet"),
        };
        let tmp = std::env::temp_dir();
        Self {
            marker: tmp.join(format!("flux-handoff-{}.op-runs", ns.name)),
            go: tmp.join(format!("flux-handoff-{}.op-go", ns.name)),
            ns,
            model,
            api,
            short,
            kind,
        }
    }

    fn target(&self) -> String {
        format!("{}/{}/{NAME}", self.short, self.ns.name)
    }

    /// `flux-handoff` against this namespace, its Lease flag to add after the subcommand.
    fn cli(&self) -> (Command, [String; 2]) {
        let kubeconfig = testkit::plane::kubeconfig().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flux-handoff"));
        cmd.env_remove("GITHUB_ACTIONS")
            .env_remove("FLUX_HANDOFF_CONFIG")
            .env_remove("FLUX_HANDOFF_HOLDER")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--namespace", &self.ns.name, "--interval", "200ms"])
            .args(["--timeout", "30s"])
            .stdin(Stdio::null());
        let lease = ["--lease".into(), format!("{}/flux-handoff", self.ns.name)];
        (cmd, lease)
    }

    /// Runs `flux-handoff ARGS... --lease L` to completion: exit code and stderr.
    async fn call(&self, args: &[&str]) -> (i32, String) {
        let (mut cmd, lease) = self.cli();
        cmd.args(args).args(lease);
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code().unwrap_or(-1), err)
    }

    fn run(&self) -> Child {
        let (mut cmd, lease) = self.cli();
        cmd.args(["run", "--target", &self.target()])
            .args(lease)
            .args(["--", "sh", "-c", WORKS])
            .env("MARKER", &self.marker)
            .env("GO", &self.go)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd.spawn().unwrap()
    }

    async fn get(&self) -> Value {
        serde_json::to_value(self.api.get(NAME).await.unwrap()).unwrap()
    }

    fn cleanup(&self) {
        let _ = std::fs::remove_file(&self.marker);
        let _ = std::fs::remove_file(&self.go);
    }
}

async fn command_runs(marker: &std::path::Path) {
    common::wait_for_file(marker, "the command to start (the pause proven)").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_kinds_run_pauses_a_resourceset_and_a_fluxinstance_with_proof_and_releases_them_exactly()
 {
    for (controller, resource) in [
        (Controller::ResourceSet, resourceset_resource()),
        (Controller::FluxInstance, fluxinstance_resource()),
    ] {
        let p = Plane::new("op-run", controller, &resource).await;
        let before = p.get().await;
        let child = p.run();
        command_runs(&p.marker).await;

        // While the work runs: fenced by the operator's pause, acknowledged, never spec.suspend.
        let during = p.get().await;
        let kind = p.kind;
        assert!(
            annotation(&during, OWNER_KEY).is_some(),
            "{kind}: not fenced"
        );
        assert_eq!(annotation(&during, OPERATOR), Some("disabled"), "{kind}");
        assert_eq!(annotation(&during, RECONCILE), Some("disabled"), "{kind}");
        let nonce = annotation(&during, REQUESTED_AT)
            .expect("a nonce")
            .to_string();
        assert_eq!(
            during["status"]["lastHandledReconcileAt"],
            json!(nonce),
            "{kind}: the work started before the operator acknowledged the pause"
        );
        assert!(
            during["spec"].get("suspend").is_none(),
            "{kind}: spec.suspend written"
        );
        assert!(
            p.ns.lease_holder().await.is_some(),
            "{kind}: Lease not held"
        );

        std::fs::write(&p.go, "").unwrap();
        let (code, err) = ended(child).await;
        p.cleanup();
        assert_eq!(code, 0, "{kind}: {err}");
        // Released exactly: every annotation as it was before, the Lease let go.
        let after = p.get().await;
        assert_eq!(
            after["metadata"]["annotations"], before["metadata"]["annotations"],
            "{kind}: {err}"
        );
        assert_eq!(after["spec"], before["spec"], "{kind}");
        assert!(
            p.ns.lease_holder().await.is_none(),
            "{kind}: Lease still held"
        );
        p.model.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_kinds_a_persons_resume_during_the_work_ends_the_run_with_exit_8_and_is_kept() {
    let resource = resourceset_resource();
    let p = Plane::new("op-broken", Controller::ResourceSet, &resource).await;
    let child = p.run();
    command_runs(&p.marker).await;
    // `flux-operator resume`: the annotation set to enabled, with a new request.
    let pp = PatchParams {
        field_manager: Some("flux-operator-cli".into()),
        ..PatchParams::default()
    };
    let body =
        json!({ "metadata": { "annotations": { OPERATOR: "enabled", REQUESTED_AT: "by-hand" } } });
    p.api.patch(NAME, &pp, &Patch::Merge(body)).await.unwrap();
    let (code, err) = ended(child).await;
    p.cleanup();
    assert_eq!(code, 8, "{err}");
    let line = format!(
        "ResourceSet {}/{NAME}: its fluxcd.controlplane.io/reconcile: disabled was removed or \
         changed by field manager \"flux-operator-cli\"",
        p.ns.name
    );
    assert!(err.contains(&line), "{err}");
    // Their resume kept, the rest of the fence given back, the Lease let go.
    let after = p.get().await;
    assert_eq!(annotation(&after, OPERATOR), Some("enabled"), "{err}");
    assert_eq!(annotation(&after, REQUESTED_AT), Some("by-hand"));
    assert_eq!(annotation(&after, OWNER_KEY), None, "{err}");
    assert_eq!(annotation(&after, RECONCILE), None, "{err}");
    assert!(p.ns.lease_holder().await.is_none(), "Lease still held");
    p.model.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_kinds_an_object_someone_already_disabled_is_refused_and_untouched() {
    let resource = resourceset_resource();
    let p = Plane::new("op-refused", Controller::ResourceSet, &resource).await;
    let pp = PatchParams {
        field_manager: Some("flux-operator-cli".into()),
        ..PatchParams::default()
    };
    let body = json!({ "metadata": { "annotations": { OPERATOR: "disabled" } } });
    p.api.patch(NAME, &pp, &Patch::Merge(body)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = p.get().await;
    let (code, err) = ended(p.run()).await;
    let ran = p.marker.exists();
    p.cleanup();
    assert_eq!(code, 3, "{err}");
    assert!(!ran, "the command ran: {err}");
    let line = format!(
        "ResourceSet {}/{NAME}: annotation {OPERATOR} already set by someone else; next: \
         kubectl -n {} get resourcesets.fluxcd.controlplane.io {NAME} --show-managed-fields -o \
         yaml (names who set it; `flux-operator resume` it if it should run)",
        p.ns.name, p.ns.name
    );
    assert!(err.contains(&line), "{err}");
    let after = p.get().await;
    assert_eq!(
        after["metadata"]["annotations"],
        before["metadata"]["annotations"]
    );
    assert!(!p.marker.exists(), "the command ran");
    p.model.shutdown().await;
}

/// Selectors list fences and objects of Flux's own kinds only: `--kind rset` is a usage error
/// before any request (exit 2), naming the kinds a selector takes.
#[test]
fn operator_kinds_a_selector_of_an_operator_kind_is_a_usage_error() {
    for kind in ["rset", "fi"] {
        let out = Command::new(env!("CARGO_BIN_EXE_flux-handoff"))
            .env_remove("FLUX_HANDOFF_CONFIG")
            .args([
                "--kubeconfig",
                "/nonexistent",
                "pause",
                "--all",
                "--kind",
                kind,
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{kind}: {err}");
        assert!(
            err.contains(&format!(
                "--kind \"{kind}\": not a kind a selector takes (ks, hr"
            )),
            "{kind}: {err}"
        );
    }
}

/// `pause` parks the fence; `resume --holder` finds the operator object through the chain on
/// the Lease (read by name: discovery lists Flux's own kinds only) and gives it back exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_kinds_a_parked_pause_is_resumed_by_its_holder_through_the_chain_record() {
    let resource = fluxinstance_resource();
    let p = Plane::new("op-park", Controller::FluxInstance, &resource).await;
    let before = p.get().await;
    let (code, err) = p.call(&["pause", "--target", &p.target()]).await;
    assert_eq!(code, 0, "{err}");
    let paused = p.get().await;
    assert_eq!(annotation(&paused, OPERATOR), Some("disabled"), "{err}");
    let owner = annotation(&paused, OWNER_KEY).expect("fenced").to_string();
    let holder = owner.split(';').next().unwrap().to_string();

    let (code, err) = p.call(&["resume", "--holder", &holder]).await;
    assert_eq!(code, 0, "{err}");
    let after = p.get().await;
    assert_eq!(
        after["metadata"]["annotations"], before["metadata"]["annotations"],
        "{err}"
    );
    assert!(
        p.ns.lease_holder().await.is_none(),
        "Lease still held: {err}"
    );
    p.model.shutdown().await;
}

/// `resume rset/NS/NAME`, as `flux resume`: finds the holder on the fence, releases it, asks
/// for a reconcile and waits for Ready — read from the Ready condition's `observedGeneration`,
/// the operator writing no top-level one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_kinds_resume_by_object_releases_and_waits_for_the_operators_ready() {
    let resource = resourceset_resource();
    let p = Plane::new("op-resume", Controller::ResourceSet, &resource).await;
    let (code, err) = p.call(&["pause", &p.target()]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(annotation(&p.get().await, OPERATOR), Some("disabled"));
    let started = std::time::Instant::now();
    let (code, err) = p.call(&["resume", &p.target()]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "waited {:?} for Ready: {err}",
        started.elapsed()
    );
    let after = p.get().await;
    assert_eq!(annotation(&after, OPERATOR), None, "{err}");
    assert_eq!(annotation(&after, OWNER_KEY), None, "{err}");
    let nonce = annotation(&after, REQUESTED_AT).expect("a reconcile requested");
    assert_eq!(
        after["status"]["lastHandledReconcileAt"],
        json!(nonce),
        "{err}"
    );
    assert!(
        p.ns.lease_holder().await.is_none(),
        "Lease still held: {err}"
    );
    p.model.shutdown().await;
}
