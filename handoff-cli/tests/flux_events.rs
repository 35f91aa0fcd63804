//! `flux_events_`: `--events-addr` against the real notification-controller (v1.9.3, built from
//! Go modules) of the real-Flux plane (`cargo xtask cluster up --flux real`, started on first
//! use, or `$FLUX_HANDOFF_REAL_KUBECONFIG`; `cargo xtask ci real` runs this binary).
//!
//! Each test has a namespace of its own with one Kustomization `child` (no parent) reconciled
//! by the real kustomize-controller, its own Lease, and a holder of its own, so the plane's
//! other tests are never disturbed and notification-controller's duplicate filter (same object
//! and message within 5 min) never drops an event of another run.

#[path = "common/events.rs"]
mod events;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};
use testkit::fenced::{OWNER_KEY, annotation, suspended};
use testkit::fixtures::kustomization_resource;
use testkit::real_flux::{FLUX_NS, SOURCE};

use events::Receiver;

/// Bound of every wait here (the real controllers' first reconcile included).
const WAIT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(200);
const REASON: &str = "rotate the pull secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_events_the_real_notification_controller_forwards_paused_and_resumed() {
    let w = World::new("fe-fwd").await;
    let mut receiver = Receiver::start().await;
    w.alert_to(&receiver.url).await;
    let nc = testkit::real_flux::events_addr().unwrap();
    let out = w.run(&nc).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("flux event not delivered"),
        "{}",
        stderr(&out)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["facts"]["events"],
        json!({ "sent": 2, "failed": 0 }),
        "{doc}"
    );
    // notification-controller dispatches each event on its own: either may come first.
    let mut got: Vec<Value> = Vec::new();
    while !(has(&got, "HandoffPaused") && has(&got, "HandoffResumed")) {
        let next = tokio::time::timeout(WAIT, receiver.bodies.recv()).await;
        let event = next
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("the receiver got only {got:?}"));
        got.push(event);
    }
    let paused = find(&got, "HandoffPaused");
    eprintln!(
        "the receiver's copy of the paused event: {}",
        serde_json::to_string_pretty(paused).unwrap()
    );
    for (event, message) in [
        (paused, format!("paused by {} for {REASON}", w.holder)),
        (
            find(&got, "HandoffResumed"),
            format!("resumed by {}", w.holder),
        ),
    ] {
        let o = &event["involvedObject"];
        assert_eq!(o["kind"], "Kustomization", "{event}");
        assert_eq!(o["namespace"], w.ns.as_str(), "{event}");
        assert_eq!(o["name"], "child", "{event}");
        assert_eq!(o["apiVersion"], "kustomize.toolkit.fluxcd.io/v1", "{event}");
        assert_eq!(event["message"], message.as_str(), "{event}");
        assert_eq!(event["severity"], "info", "{event}");
        assert_eq!(event["reportingController"], "flux-handoff", "{event}");
        // notification-controller kept the keys of the object's group, without the prefix.
        assert_eq!(event["metadata"]["holder"], w.holder.as_str(), "{event}");
        assert_eq!(event["metadata"]["reason"], REASON, "{event}");
    }
    w.assert_released().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_events_an_events_address_that_never_answers_costs_one_bounded_attempt_per_event() {
    let w = World::new("fe-down").await;
    // Accepts connections (the kernel's backlog) and never answers one: the slowest failure.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", silent.local_addr().unwrap());
    let out = w.run(&url).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let failed: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("flux event not delivered"))
        .collect();
    assert_eq!(failed.len(), 2, "one line per event:\n{err}");
    for l in &failed {
        assert!(l.contains("one attempt within 2s, no retry"), "{l}");
        assert!(!l.contains(&url), "the URL is not logged: {l}");
    }
    assert!(failed.iter().any(|l| l.contains("HandoffPaused")), "{err}");
    assert!(failed.iter().any(|l| l.contains("HandoffResumed")), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["facts"]["events"],
        json!({ "sent": 0, "failed": 2 }),
        "{doc}"
    );
    // Every connection the run made is still queued: exactly one per event, no retry.
    silent.set_nonblocking(true).unwrap();
    let mut attempts = 0;
    while silent.accept().is_ok() {
        attempts += 1;
    }
    assert_eq!(attempts, 2, "connections made");
    w.assert_released().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_events_a_broken_pause_and_the_fence_it_keeps_are_error_events() {
    let w = World::new("fe-broken").await;
    let mut receiver = Receiver::start().await;
    w.alert_to(&receiver.url).await;
    let nc = testkit::real_flux::events_addr().unwrap();
    // The command runs until the pause breaks (the session stops it then).
    let mut run = w.cli(&nc, &["sleep", "300"]);
    let mut child = run.stderr(Stdio::piped()).spawn().unwrap();
    let lines = lines_of(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.contains("running sleep")) {
        let line = lines.recv_timeout(WAIT);
        seen.push(line.unwrap_or_else(|_| panic!("the run never got to its command: {seen:?}")));
    }
    // A person's `kubectl patch` unsuspends the paused object and re-enables reconciling: more
    // than a `flux resume` alone (which the release would keep, issue 35), so the fence stays.
    let pp = kube::api::PatchParams {
        field_manager: Some("kubectl-patch".into()),
        ..kube::api::PatchParams::default()
    };
    let unsuspend = json!({
        "spec": { "suspend": false },
        "metadata": { "annotations": { "kustomize.toolkit.fluxcd.io/reconcile": "enabled" } }
    });
    w.api(&kustomization_resource())
        .patch("child", &pp, &kube::api::Patch::Merge(&unsuspend))
        .await
        .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    let rest: Vec<String> = lines.into_iter().collect();
    assert_eq!(status.code(), Some(8), "{seen:?} {rest:?}");
    let mut got: Vec<Value> = Vec::new();
    while !(has(&got, "HandoffPauseBroken") && has(&got, "HandoffCleanupFailed")) {
        let next = tokio::time::timeout(WAIT, receiver.bodies.recv()).await;
        let event = next
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("the receiver got only {got:?}"));
        got.push(event);
    }
    let broken = find(&got, "HandoffPauseBroken");
    assert_eq!(
        broken["message"],
        format!(
            "pause by {} broken: spec.suspend was set to false by field manager \"kubectl-patch\"",
            w.holder
        )
        .as_str(),
        "{broken}"
    );
    let kept = find(&got, "HandoffCleanupFailed");
    let message = kept["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("cleanup by {} failed: ", w.holder))
            && message.ends_with("; the fence is still held"),
        "{kept}"
    );
    for event in [broken, kept] {
        assert_eq!(event["severity"], "error", "{event}");
        assert_eq!(event["involvedObject"]["name"], "child", "{event}");
        assert_eq!(
            event["involvedObject"]["namespace"],
            w.ns.as_str(),
            "{event}"
        );
        assert_eq!(event["metadata"]["holder"], w.holder.as_str(), "{event}");
    }
}

/// The lines of a child's stderr, as they come.
fn lines_of(stderr: std::process::ChildStderr) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead as _;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

#[test]
fn flux_events_a_bad_events_address_is_exit_2_before_any_request() {
    // A kubeconfig that does not exist: reaching the cluster step would fail otherwise.
    let out = Command::new(env!("CARGO_BIN_EXE_flux-handoff"))
        .env_remove("FLUX_HANDOFF_CONFIG")
        .args(["--kubeconfig", "/nonexistent/kubeconfig", "pause", "apps"])
        .args(["--events-addr", "http://flux:hunter2@nc.example/"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim(),
        "error: --events-addr: credentials in the URL are not accepted"
    );
    assert!(!stderr(&out).contains("hunter2"));
}

/// One test's namespace on the real-Flux plane, with Kustomization `child` Ready.
struct World {
    client: Client,
    kubeconfig: PathBuf,
    ns: String,
    holder: String,
}

impl World {
    async fn new(prefix: &str) -> Self {
        let kubeconfig = testkit::real_flux::kubeconfig().expect("the real-Flux control plane");
        let config = testkit::config_from(&kubeconfig).await.unwrap();
        let client = Client::try_from(config).unwrap();
        let suffix = testkit::random_suffix(6);
        let ns = format!("{prefix}-{suffix}");
        let namespace =
            json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": ns } });
        let ns_resource = ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
        Api::<DynamicObject>::all_with(client.clone(), &ns_resource)
            .create(&post(), &serde_json::from_value(namespace).unwrap())
            .await
            .unwrap();
        let child = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": { "name": "child", "namespace": ns },
            "spec": {
                "interval": "10m",
                "path": "./fixtures/configmap",
                "prune": true,
                "targetNamespace": ns,
                "sourceRef": { "kind": "OCIRepository", "name": SOURCE, "namespace": FLUX_NS },
            },
        });
        let w = Self {
            client,
            kubeconfig,
            holder: format!("{prefix}-{suffix}"),
            ns,
        };
        w.api(&kustomization_resource())
            .create(&post(), &serde_json::from_value(child).unwrap())
            .await
            .unwrap();
        w.wait_until(&kustomization_resource(), "child", |o| {
            ready(o) == Some("True")
        })
        .await;
        w
    }

    fn api(&self, resource: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, resource)
    }

    /// Polls `name` until `pred` holds (bounded; panics with its last state).
    async fn wait_until(&self, r: &ApiResource, name: &str, pred: impl Fn(&Value) -> bool) {
        let start = Instant::now();
        loop {
            let obj = self.api(r).get_opt(name).await.unwrap();
            let v = obj.map(|o| serde_json::to_value(o).unwrap());
            if v.as_ref().is_some_and(&pred) {
                return;
            }
            assert!(start.elapsed() < WAIT, "{name} never got there: {v:?}");
            tokio::time::sleep(POLL).await;
        }
    }

    /// A `generic` Provider posting to `url` and an Alert selecting `child`, both in
    /// notification-controller's cache once this returns: the Provider has the finalizer its
    /// reconciler adds, and the Alert lost the one its reconciler removes (nc
    /// `internal/controller/{provider,alert}_controller.go`); both read from the same cache as
    /// the event server (`mgr.GetClient()`).
    async fn alert_to(&self, url: &str) {
        let provider = json!({
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Provider",
            "metadata": { "name": "receiver", "namespace": self.ns },
            "spec": { "type": "generic", "address": url },
        });
        let alert = json!({
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Alert",
            "metadata": { "name": "handoff", "namespace": self.ns,
                          "finalizers": [NC_FINALIZER] },
            "spec": {
                "providerRef": { "name": "receiver" },
                "eventSeverity": "info",
                "eventSources": [{ "kind": "Kustomization", "name": "child" }],
            },
        });
        let (providers, alerts) = (notification("Provider"), notification("Alert"));
        for (r, obj) in [(&providers, provider), (&alerts, alert)] {
            self.api(r)
                .create(&post(), &serde_json::from_value(obj).unwrap())
                .await
                .unwrap();
        }
        self.wait_until(&providers, "receiver", |o| {
            finalizers(o).contains(&NC_FINALIZER)
        })
        .await;
        self.wait_until(&alerts, "handoff", |o| finalizers(o).is_empty())
            .await;
    }

    /// `flux-handoff run ks/<ns>/child -- true` with `--events-addr url` and `-o json`.
    async fn run(&self, url: &str) -> Output {
        let mut c = self.cli(url, &["true"]);
        tokio::task::spawn_blocking(move || c.output().unwrap())
            .await
            .unwrap()
    }

    /// `flux-handoff run ks/<ns>/child -- COMMAND` with `--events-addr url` and `-o json`.
    fn cli(&self, url: &str, command: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_flux-handoff"));
        c.env_remove("GITHUB_ACTIONS")
            .env_remove("FLUX_HANDOFF_CONFIG")
            .env_remove("FLUX_HANDOFF_HOLDER")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--interval", "250ms", "--timeout", "90s", "-o", "json"])
            .args(["--reason", REASON, "run", &format!("ks/{}/child", self.ns)])
            .args(["--parent", "none", "--holder", &self.holder])
            .args(["--lease", &format!("{}/flux-handoff", self.ns)])
            .args(["--events-addr", url, "--"])
            .args(command)
            .stdin(Stdio::null());
        c
    }

    /// What the server holds afterwards: `child` handed back, unsuspended, unfenced.
    async fn assert_released(&self) {
        let child = self
            .api(&kustomization_resource())
            .get("child")
            .await
            .unwrap();
        let v = serde_json::to_value(child).unwrap();
        assert!(!suspended(&v), "{v}");
        assert!(annotation(&v, OWNER_KEY).is_none(), "{v}");
    }
}

/// notification-controller's finalizer (`apiv1.NotificationFinalizer`).
const NC_FINALIZER: &str = "finalizers.fluxcd.io";

fn notification(kind: &str) -> ApiResource {
    ApiResource {
        group: "notification.toolkit.fluxcd.io".into(),
        version: "v1beta3".into(),
        api_version: "notification.toolkit.fluxcd.io/v1beta3".into(),
        kind: kind.into(),
        plural: format!("{}s", kind.to_ascii_lowercase()),
    }
}

fn finalizers(o: &Value) -> Vec<&str> {
    o.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn ready(o: &Value) -> Option<&str> {
    o.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?["status"]
        .as_str()
}

fn post() -> PostParams {
    PostParams {
        field_manager: Some("flux-handoff-test".into()),
        ..PostParams::default()
    }
}

fn has(events: &[Value], reason: &str) -> bool {
    events.iter().any(|e| e["reason"] == reason)
}

fn find<'a>(events: &'a [Value], reason: &str) -> &'a Value {
    events.iter().find(|e| e["reason"] == reason).unwrap()
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
