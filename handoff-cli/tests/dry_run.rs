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
    // What the server holds first: every object as it was, and no Lease.
    assert_eq!(states(&c).await, before, "a dry run changed an object");
    lease_absent(&c).await;
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

    // `-o name`: the objects the real run would fence, parents first, in the form commands
    // take back; not the Lease.
    let mut args = vec!["-o", "name", "pause", "--dry-run=server", TARGET];
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!("ks/{ns}/{PARENT}\nks/{ns}/{TARGET}\n")
    );
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

const USER: &str = "robot";
const PASS: &str = "dry-run-registry-password-1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_ghcr_reassert_leaves_the_secrets_and_never_prints_the_token() {
    use k8s_openapi::api::core::v1::Secret;
    testkit::install_crypto();
    let reg = testkit::registry::LocalRegistry::start(&[(USER, PASS)])
        .await
        .unwrap();
    reg.push_image(USER, PASS, "team/app", "v1").await.unwrap();
    let c = Cluster::seeded("dry-ghcr").await;
    let consumer = testkit::TestNs::new("dry-ghcr-c").await.unwrap();
    // The root Secret holds a stale credential: the real run would patch it.
    let stale = ghcr_auth::credential::DockerConfig::from_token(
        &reg.host,
        USER,
        secrecy::SecretString::from("old-token"),
    )
    .unwrap();
    let root = ghcr_auth::plan::SecretTarget::new(&c.ns.name, "flux-pull");
    ghcr_auth::reassert::Reasserter::new(c.ns.client.clone())
        .reassert_one(&stale, &root)
        .await
        .unwrap();
    let secrets = c.ns.api::<Secret>();
    let root_before = secrets.get("flux-pull").await.unwrap();
    let before = states(&c).await;
    let image = format!("{}/team/app:v1", reg.host);
    let root_flag = format!("{}/flux-pull", c.ns.name);
    let mut args = vec![
        "ghcr",
        "reassert",
        "--dry-run=server",
        TARGET,
        "--credential-env",
        "REGISTRY_TOKEN",
        "--username",
        USER,
        "--image",
        image.as_str(),
        "--insecure-http-host",
        reg.host.as_str(),
        "--secret-name",
        "pull",
        "--namespace-list",
        consumer.name.as_str(),
        "--root-secret",
        root_flag.as_str(),
    ];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let mut cmd = c.cli();
    cmd.env("REGISTRY_TOKEN", PASS).args(&args);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    let ns = &c.ns.name;
    for line in [
        format!("✔ would patch Kustomization {ns}/{TARGET} (fence (target))"),
        format!(
            "✔ would create Secret {}/pull (secret (consumer))",
            consumer.name
        ),
        format!("✔ would patch Secret {ns}/flux-pull (secret (root))"),
        "dry run: 5 writes would pass, 0 denied or refused; nothing was changed".into(),
    ] {
        assert!(err.contains(&line), "missing {line:?} in:\n{err}");
    }
    assert!(!err.contains(PASS) && !stdout(&out).contains(PASS));
    let root_after = secrets.get("flux-pull").await.unwrap();
    assert_eq!(
        root_after.metadata.resource_version,
        root_before.metadata.resource_version
    );
    assert_eq!(root_after.data, root_before.data);
    let pull = consumer.api::<Secret>().get_opt("pull").await.unwrap();
    assert!(pull.is_none(), "a dry run created the consumer's Secret");
    assert_eq!(states(&c).await, before, "a dry run changed an object");
    lease_absent(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_is_refused_with_exit_3_while_another_holder_has_the_lease() {
    let c = Cluster::seeded("dry-held").await;
    let flags = c.handoff_flags();
    let mut args = vec!["pause", TARGET];
    args.extend(flags.iter().map(String::as_str));
    let first = c.run(&args).await;
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let held = states(&c).await;
    let lease_rv = c.ns.api::<Lease>().get("flux-handoff").await.unwrap();
    let mut args = vec!["pause", "--dry-run=server", TARGET];
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("is held by"), "{}", stderr(&out));
    assert_eq!(
        states(&c).await,
        held,
        "the dry run changed a fenced object"
    );
    let lease = c.ns.api::<Lease>().get("flux-handoff").await.unwrap();
    assert_eq!(
        lease.metadata.resource_version,
        lease_rv.metadata.resource_version
    );
    let holder = stdout(&first).trim().to_string();
    let mut args = vec!["resume", "--holder", holder.as_str()];
    args.extend(flags.iter().map(String::as_str));
    assert_eq!(code(&c.run(&args).await), 0);
}

/// A `ValidatingAdmissionPolicy` (bound to the test namespace only) that refuses
/// `spec.suspend: true` on the target: the server's admission answers the dry run.
async fn refuse_suspending_the_target(c: &Cluster) -> String {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let name = format!("dry-run-{}", c.ns.name);
    let gvk = |kind| GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
    let policy = ApiResource::from_gvk_with_plural(
        &gvk("ValidatingAdmissionPolicy"),
        "validatingadmissionpolicies",
    );
    let binding = ApiResource::from_gvk_with_plural(
        &gvk("ValidatingAdmissionPolicyBinding"),
        "validatingadmissionpolicybindings",
    );
    let p: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["kustomize.toolkit.fluxcd.io"], "apiVersions": ["*"],
                "operations": ["UPDATE"], "resources": ["kustomizations"]}]},
            "validations": [{
                "expression": format!(
                    "object.metadata.name != '{TARGET}' || !has(object.spec.suspend) || \
                     !object.spec.suspend"),
                "message": "policy: this target may not be suspended"}],
        },
    }))
    .unwrap();
    let b: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": c.ns.name}}}},
    }))
    .unwrap();
    let client = c.ns.client.clone();
    Api::<DynamicObject>::all_with(client.clone(), &policy)
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
    Api::<DynamicObject>::all_with(client.clone(), &binding)
        .create(&PostParams::default(), &b)
        .await
        .unwrap();
    // The policy reaches admission asynchronously: poll (bounded) with a dry-run patch of our
    // own until the server refuses it.
    let ks = flux_suspend::object::kustomization(&c.ns.name, TARGET);
    let api: Api<DynamicObject> = Api::namespaced_with(client, &c.ns.name, &ks.resource);
    let patch = kube::api::Patch::Merge(json!({"spec": {"suspend": true}}));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while api
        .patch(TARGET, &flux_fence::dry_run::dry_patch_params(), &patch)
        .await
        .is_ok()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the policy never took effect"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    name
}

async fn remove_policy(c: &Cluster, name: &str) {
    use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind};
    for (kind, plural) in [
        (
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
        ),
        ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
    ] {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
            plural,
        );
        let _ = Api::<DynamicObject>::all_with(c.ns.client.clone(), &ar)
            .delete(name, &DeleteParams::default())
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_a_write_refused_by_admission_is_reported_with_the_servers_message() {
    let c = Cluster::seeded("dry-admission").await;
    let policy = refuse_suspending_the_target(&c).await;
    let before = states(&c).await;
    let flags = c.handoff_flags();
    let mut args = vec!["pause", "--dry-run=server", TARGET];
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    remove_policy(&c, &policy).await;
    let err = stderr(&out);
    assert_eq!(code(&out), 6, "{err}");
    let ns = &c.ns.name;
    for line in [
        format!("✔ would patch Kustomization {ns}/{PARENT} (fence (parent))"),
        format!("✗ patch Kustomization {ns}/{TARGET} (fence (target)) refused ("),
        "policy: this target may not be suspended".into(),
        "next: flux-handoff doctor".into(),
    ] {
        assert!(err.contains(&line), "missing {line:?} in:\n{err}");
    }
    assert_eq!(states(&c).await, before, "a dry run changed an object");
    lease_absent(&c).await;
}
