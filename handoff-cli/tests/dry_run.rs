//! End to end: `--dry-run=server` of `pause` and `run` against the real kube-apiserver (RBAC
//! on): every write is answered by the server and nothing is stored — the objects and the
//! Lease are read afterwards to prove it.

mod common;
mod rbac;
mod sa;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::{Value, json};

/// What a dry run must leave exactly as it was: resourceVersion, spec.suspend, annotations.
fn state(v: &Value) -> Value {
    json!({
        "rv": v["metadata"]["resourceVersion"],
        "suspend": v["spec"]["suspend"],
        "annotations": v["metadata"]["annotations"],
    })
}

async fn states(c: &Cluster) -> Vec<Value> {
    let mut out = Vec::new();
    for name in [PARENT, TARGET] {
        out.push(state(&c.get(name).await));
    }
    out
}

async fn lease_absent(c: &Cluster) {
    let lease = c.ns.api::<Lease>().get_opt("flux-handoff").await.unwrap();
    assert!(lease.is_none(), "a dry run left a Lease: {lease:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_pause_changes_nothing_on_the_server() {
    let c = Cluster::seeded("dry-pause").await;
    let before = states(&c).await;
    let flags = c.handoff_flags();
    let mut args = vec!["pause", "--dry-run=server", TARGET];
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    let ns = &c.ns.name;
    for line in [
        format!("✔ would create Lease {ns}/flux-handoff (lease)"),
        format!("✔ would patch Kustomization {ns}/{PARENT} (fence (parent))"),
        format!("✔ would patch Kustomization {ns}/{TARGET} (fence (target))"),
        "dry run: 3 writes would pass, 0 denied or refused; nothing was changed".into(),
    ] {
        assert!(err.contains(&line), "missing {line:?} in:\n{err}");
    }
    assert_eq!(stdout(&out), "", "no holder is printed: nothing is paused");
    assert_eq!(states(&c).await, before, "a dry run changed an object");
    lease_absent(&c).await;

    // The same as one JSON document.
    let mut args = vec!["-o", "json", "pause", "--dry-run=server", TARGET];
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let writes: Vec<(String, String, String)> = doc["facts"]["dry_run"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["verb"].as_str().unwrap().to_string(),
                w["name"].as_str().unwrap().to_string(),
                w["answer"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let pass = |verb: &str, name: &str| (verb.into(), name.into(), "would_pass".into());
    assert_eq!(
        writes,
        [
            pass("create", "flux-handoff"),
            pass("patch", PARENT),
            pass("patch", TARGET)
        ]
    );
    assert_eq!(doc["facts"]["changed"], json!(false));
    assert_eq!(states(&c).await, before, "a dry run changed an object");
    lease_absent(&c).await;
}

/// A `ServiceAccount` that may read everything a pause reads and write the Lease, but may patch
/// only the parent Kustomization: the target's fence is denied by RBAC.
async fn parent_only(c: &Cluster) -> std::path::PathBuf {
    const SA: &str = "dry-run-parent-only";
    let ns = c.ns.name.clone();
    let kc = sa::kubeconfig_for(&c.ns, SA).await;
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": SA, "namespace": ns},
        "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "verbs": ["get", "create", "update"]},
            {"apiGroups": ["kustomize.toolkit.fluxcd.io"], "resources": ["kustomizations"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["kustomize.toolkit.fluxcd.io"], "resources": ["kustomizations"],
             "verbs": ["patch"], "resourceNames": [PARENT]},
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
        ],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": SA, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SA},
        "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": ns}],
    });
    rbac::apply(&c.ns.client, &ns, &[role, binding]).await;
    let client = sa::client_from(&kc).await;
    rbac::await_may(
        &client,
        "create",
        "coordination.k8s.io",
        "leases",
        &ns,
        true,
    )
    .await;
    kc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_a_denied_write_is_reported_as_denied() {
    let c = Cluster::seeded("dry-denied").await;
    let kc = parent_only(&c).await;
    let before = states(&c).await;
    let flags = c.handoff_flags();
    let mut args = vec!["pause", "--dry-run=server", TARGET];
    args.extend(flags.iter().map(String::as_str));
    let out = sa::run_as(&c, &kc, &args).await;
    let err = stderr(&out);
    assert_eq!(code(&out), 6, "{err}");
    let ns = &c.ns.name;
    for line in [
        format!("✔ would create Lease {ns}/flux-handoff (lease)"),
        format!("✔ would patch Kustomization {ns}/{PARENT} (fence (parent))"),
        format!("✗ patch Kustomization {ns}/{TARGET} (fence (target)) denied: "),
        "cannot patch resource \"kustomizations\"".into(),
        "dry run: 2 writes would pass, 1 denied or refused; nothing was changed".into(),
        "next: flux-handoff rbac -t ".into(),
    ] {
        assert!(err.contains(&line), "missing {line:?} in:\n{err}");
    }
    assert_eq!(states(&c).await, before, "a dry run changed an object");
    lease_absent(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_run_does_not_run_the_command() {
    let c = Cluster::seeded("dry-run").await;
    let before = states(&c).await;
    let dir = std::env::temp_dir().join(format!("fh-dry-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let ran = dir.join("ran");
    let script = format!("touch {}", ran.display());
    let flags = c.handoff_flags();
    let mut args = vec!["run", "--dry-run=server", TARGET];
    args.extend(flags.iter().map(String::as_str));
    args.extend(["--", "sh", "-c", script.as_str()]);
    let out = c.run(&args).await;
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert!(err.contains("dry run: sh was not run"), "{err}");
    assert!(
        err.contains("3 writes would pass, 0 denied or refused"),
        "{err}"
    );
    assert!(!ran.exists(), "the command ran in a dry run");
    assert_eq!(states(&c).await, before, "a dry run changed an object");
    lease_absent(&c).await;
}
