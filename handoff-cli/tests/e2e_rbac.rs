//! End to end, as a `ServiceAccount` bound only to the shipped manifests — `deploy/rbac.yaml`
//! (which is `flux-handoff rbac --root-secret flux-system/ghcr-auth` output) or what
//! `flux-handoff rbac` prints for consumer namespaces and sources: every documented command
//! works (pause, fences, fences recover, doctor, resume, ghcr reassert with a Flux source), and
//! access reviews over a list of sensitive resources say no to everything no feature needs.

mod common;
mod rbac;
mod sa;

use std::time::Duration;

use common::*;
use flux_model::source_model::{SourceModel, oci_repository, oci_repository_resource};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::TestNs;
use testkit::rbac::Access;
use testkit::registry::LocalRegistry;

const SA: &str = "flux-handoff";
const FENCED: &str = "flux-handoff.io/fenced";
const USER: &str = "robot";
const PASS: &str = "rbac-registry-password-1";

/// deploy/rbac.yaml adapted to the test namespace, applied; returns the SA's kubeconfig.
async fn shipped(c: &Cluster) -> std::path::PathBuf {
    let ns = c.ns.name.clone();
    rbac::apply(&c.ns.client, &ns, &rbac::documents(&ns)).await;
    sa_ready(c).await
}

/// `flux-handoff rbac ARGS` for the test namespace and its Lease, applied; returns the SA's
/// kubeconfig.
async fn generated(c: &Cluster, args: &[&str]) -> std::path::PathBuf {
    let lease = format!("{}/flux-handoff", c.ns.name);
    let mut all = vec!["rbac", "--lease", lease.as_str()];
    all.extend(args);
    let out = c.run(&all).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    rbac::apply(&c.ns.client, &c.ns.name, &rbac::parse(&stdout(&out))).await;
    sa_ready(c).await
}

/// The SA's kubeconfig, once the authorizer has seen its Role.
async fn sa_ready(c: &Cluster) -> std::path::PathBuf {
    let kc = sa::kubeconfig_for(&c.ns, SA).await;
    let client = sa::client_from(&kc).await;
    let ns = &c.ns.name;
    rbac::await_may(&client, "create", "coordination.k8s.io", "leases", ns, true).await;
    kc
}

fn lease_flag(c: &Cluster) -> String {
    format!("{}/flux-handoff", c.ns.name)
}

async fn pause_as(c: &Cluster, kc: &std::path::Path, extra: &[&str]) -> String {
    let flags = c.handoff_flags();
    let mut args: Vec<&str> = extra.to_vec();
    args.extend(["pause", "--target", TARGET]);
    args.extend(flags.iter().map(String::as_str));
    let out = sa::run_as(c, kc, &args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out).trim().to_string()
}

/// Polls (bounded) until the Lease's renewTime + duration lies in the past by the server's
/// record, so its holder's renew has provably stopped.
async fn await_lease_expiry(c: &Cluster) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let spec =
            c.ns.api::<Lease>()
                .get("flux-handoff")
                .await
                .unwrap()
                .spec
                .unwrap();
        let secs = i64::from(spec.lease_duration_seconds.unwrap());
        let expiry = spec
            .renew_time
            .unwrap()
            .0
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(secs))
            .unwrap();
        if k8s_openapi::jiff::Timestamp::now() > expiry {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn label(obj: &Value) -> Option<&str> {
    obj["metadata"]["labels"][FENCED].as_str()
}

#[test]
fn rbac_the_shipped_manifest_is_what_the_rbac_command_prints_and_grants_secrets_by_name() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flux-handoff"))
        .args(["rbac", "--root-secret", "flux-system/ghcr-auth"])
        .env_remove("FLUX_HANDOFF_CONFIG")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        rbac::YAML.ends_with(&stdout(&out)),
        "deploy/rbac.yaml is not the output of `flux-handoff rbac --root-secret \
         flux-system/ghcr-auth`; regenerate it:\n{}",
        stdout(&out)
    );
    let docs = rbac::documents("flux-system");
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ServiceAccount", "Role", "RoleBinding"]);
    assert_eq!(docs[2]["subjects"][0]["name"], SA);
    for rule in docs[1]["rules"].as_array().unwrap() {
        let verbs = rule["verbs"].as_array().unwrap();
        assert!(!verbs.contains(&json!("*")), "{rule}");
        assert!(!rule["resources"].as_array().unwrap().contains(&json!("*")));
        if rule["resources"] == json!(["secrets"]) {
            assert_eq!(rule["resourceNames"], json!(["ghcr-auth"]), "{rule}");
            assert_eq!(rule["verbs"], json!(["get", "patch"]), "{rule}");
        }
    }
}

#[test]
fn rbac_generates_a_role_per_consumer_namespace_and_refuses_a_selector_with_exit_2() {
    let rbac_cmd = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_flux-handoff"))
            .arg("rbac")
            .args(args)
            .env_remove("FLUX_HANDOFF_CONFIG")
            .output()
            .unwrap()
    };
    let out = rbac_cmd(&[
        "--namespace-list",
        "apps,web",
        "--secret-name",
        "pull",
        "--source",
        "helm/infra/charts",
        "--in",
        "apps",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let docs = rbac::parse(&stdout(&out));
    let roles: Vec<(&str, &str)> = docs
        .iter()
        .filter(|d| d["kind"] == "Role")
        .map(|d| {
            (
                d["metadata"]["namespace"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        roles,
        [
            ("flux-system", SA),
            ("apps", SA),
            ("web", SA),
            ("infra", SA)
        ]
    );
    let web = docs
        .iter()
        .find(|d| d["kind"] == "Role" && d["metadata"]["namespace"] == "web")
        .unwrap();
    assert_eq!(
        web["rules"],
        json!([{ "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["pull"],
                 "verbs": ["get", "patch"] },
               { "apiGroups": [""], "resources": ["secrets"], "verbs": ["create"] }])
    );
    let text = stdout(&out);
    assert!(text.contains("resources: [\"helmrepositories\"]\n    resourceNames: [\"charts\"]"));
    assert!(!text.contains("ClusterRole"), "{text}");

    let out = rbac_cmd(&["--namespace-selector", "team=a", "--secret-name", "pull"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim(),
        "error: rbac grants Secrets by namespace: pass --namespace-list instead of a selector"
    );
    assert!(stdout(&out).is_empty());
}

#[test]
fn rbac_fanout_the_external_secrets_layout_gets_its_rules_and_no_write_on_consumer_secrets() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flux-handoff"))
        .args([
            "rbac",
            "--secret-key",
            "flux-system/variables-base:ghcr_dockerconfigjson",
            "--push-secret",
            "flux-system/seed-ghcr",
            "--external-secret",
            "ghcr-auth",
            "--namespace-list",
            "apps",
            "--root-secret",
            "flux-system/ghcr-auth",
        ])
        .env_remove("FLUX_HANDOFF_CONFIG")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let docs = rbac::parse(&stdout(&out));
    let role = |ns: &str| {
        docs.iter()
            .find(|d| d["kind"] == "Role" && d["metadata"]["namespace"] == ns)
            .unwrap()["rules"]
            .clone()
    };
    assert_eq!(
        role("apps"),
        json!([{ "apiGroups": ["external-secrets.io"], "resources": ["externalsecrets"],
                 "resourceNames": ["ghcr-auth"], "verbs": ["get", "patch"] },
               { "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["ghcr-auth"],
                 "verbs": ["get"] }])
    );
    let flux = role("flux-system").to_string();
    for rule in [
        r#"{"apiGroups":["external-secrets.io"],"resourceNames":["seed-ghcr"],"resources":["pushsecrets"],"verbs":["get","patch"]}"#,
        r#"{"apiGroups":[""],"resourceNames":["variables-base"],"resources":["secrets"],"verbs":["get","patch"]}"#,
    ] {
        assert!(flux.contains(rule), "{rule} not in {flux}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_pause_fences_doctor_and_resume_as_the_shipped_service_account() {
    let c = Cluster::seeded("rbac-ok").await;
    let kc = shipped(&c).await;
    let holder = pause_as(&c, &kc, &[]).await;
    for name in [TARGET, PARENT] {
        let obj = c.get(name).await;
        assert!(suspended(&obj), "{name}");
        assert!(annotation(&obj, OWNER_KEY).unwrap().starts_with(&holder));
        assert_eq!(label(&obj), Some("true"), "{name}: the fenced label");
    }

    let lease = lease_flag(&c);
    let out = sa::run_as(&c, &kc, &["fences", "--lease", &lease]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains(&holder), "{}", stdout(&out));
    let controller = format!("{}/kustomize-controller", c.ns.name);
    let args = [
        "doctor",
        "--target",
        TARGET,
        "--lease",
        &lease,
        "--controller",
        &controller,
    ];
    let out = sa::run_as(&c, &kc, &args).await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));

    let flags = c.handoff_flags();
    let mut args = vec!["resume", "--holder", holder.as_str()];
    args.extend(flags.iter().map(String::as_str));
    let out = sa::run_as(&c, &kc, &args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for name in [TARGET, PARENT] {
        let obj = c.get(name).await;
        assert!(!suspended(&obj), "{name}");
        assert_eq!(annotation(&obj, OWNER_KEY), None);
        assert_eq!(label(&obj), None, "{name}: the label goes with the fence");
    }
}

/// A replicas gate as the SA bound to what `flux-handoff rbac` prints for it: the Deployment
/// by name and the Pods of its namespace are granted, and pause and resume work with nothing
/// more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_a_replicas_gate_pauses_and_resumes_as_the_generated_service_account() {
    let c = common::gate::cluster("rbac-gate").await;
    let gate = format!("deploy/{}/{}=0", c.ns.name, common::gate::GATED);
    let kc = generated(&c, &["--target", &gate]).await;
    let flags = c.handoff_flags();
    let mut args = vec!["pause", "--target", gate.as_str()];
    args.extend(flags.iter().map(String::as_str));
    let out = sa::run_as(&c, &kc, &args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let holder = stdout(&out).trim().to_string();
    let deps: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(c.ns.client.clone(), &c.ns.name);
    let replicas = |d: k8s_openapi::api::apps::v1::Deployment| d.spec.and_then(|s| s.replicas);
    assert_eq!(
        replicas(deps.get(common::gate::GATED).await.unwrap()),
        Some(0)
    );

    let mut args = vec!["resume", "--holder", holder.as_str()];
    args.extend(flags.iter().map(String::as_str));
    let out = sa::run_as(&c, &kc, &args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        replicas(deps.get(common::gate::GATED).await.unwrap()),
        Some(2)
    );
    assert!(!suspended(&c.get(TARGET).await));
}

/// Under the shipped Role each acknowledgement is watched, not polled: the library reports
/// the path it took per object (debug), and the watch is never refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_the_shipped_role_lets_pause_watch_each_acknowledgement() {
    let c = Cluster::seeded("rbac-watch").await;
    let kc = shipped(&c).await;
    let mut cmd = sa::cli_as(&c, &kc);
    cmd.env("FLUX_HANDOFF_LOG", "flux_suspend=debug")
        .args(["pause", "--target", TARGET])
        .args(c.handoff_flags());
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(!err.contains("acknowledgement watch refused"), "{err}");
    for name in [PARENT, TARGET] {
        let watched = err
            .lines()
            .filter(|l| l.contains("acknowledgement seen on the watch"))
            // The object is the line's last field (the session span's fields name the
            // targets on every line).
            .filter(|l| l.trim_end().ends_with(&format!("/{name}")))
            .count();
        assert_eq!(watched, 1, "{name}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_without_patch_on_kustomizations_pause_fails_and_doctor_prints_the_rule() {
    let c = Cluster::seeded("rbac-nopatch").await;
    let ns = c.ns.name.clone();
    let kc = shipped(&c).await;
    // Remove exactly one verb: patch on kustomizations.
    let roles = c.ns.api::<Role>();
    let mut role = roles.get(SA).await.unwrap();
    let mut removed = 0;
    for rule in role.rules.as_mut().unwrap() {
        if rule
            .resources
            .as_ref()
            .is_some_and(|r| r.iter().any(|x| x == "kustomizations"))
        {
            let before = rule.verbs.len();
            rule.verbs.retain(|v| v != "patch");
            removed += before - rule.verbs.len();
        }
    }
    assert_eq!(
        removed, 1,
        "the manifest grants patch on kustomizations once"
    );
    roles
        .replace(SA, &PostParams::default(), &role)
        .await
        .unwrap();
    let sa_client = sa::client_from(&kc).await;
    let (group, resource) = ("kustomize.toolkit.fluxcd.io", "kustomizations");
    rbac::await_may(&sa_client, "patch", group, resource, &ns, false).await;

    let (t_before, p_before) = (c.get(TARGET).await, c.get(PARENT).await);
    let flags = c.handoff_flags();
    let mut args = vec!["pause", "--target", TARGET];
    args.extend(flags.iter().map(String::as_str));
    let out = sa::run_as(&c, &kc, &args).await;
    assert_eq!(code(&out), 6, "{}", stderr(&out));
    let err = stderr(&out);
    let last = err.trim().lines().last().unwrap();
    assert!(
        last.starts_with("error: ") && last.contains("forbidden to patch kustomizations"),
        "{err}"
    );
    let rv = |o: &Value| o["metadata"]["resourceVersion"].clone();
    assert_eq!(rv(&c.get(TARGET).await), rv(&t_before));
    assert_eq!(rv(&c.get(PARENT).await), rv(&p_before));
    if let Some(l) = c.ns.api::<Lease>().get_opt("flux-handoff").await.unwrap() {
        assert_eq!(l.spec.unwrap().holder_identity, None);
    }
    // doctor names the missing right, the feature that needs it and the rule to add.
    let lease = lease_flag(&c);
    let out = sa::run_as(&c, &kc, &["doctor", "--target", TARGET, "--lease", &lease]).await;
    assert_eq!(code(&out), 6, "{}", stdout(&out));
    let text = stdout(&out);
    let want = format!(
        "FAIL may patch kustomizations.kustomize.toolkit.fluxcd.io in {ns} (fencing targets and \
         parents): fencing targets and parents needs it; add this rule to the Role bound in \
         namespace {ns} (`flux-handoff rbac` prints the whole manifest):\n  - apiGroups: \
         [\"kustomize.toolkit.fluxcd.io\"]\n    resources: [\"kustomizations\"]\n    verbs: \
         [\"patch\"]\n"
    );
    assert!(text.contains(&want), "{text}");
    assert_eq!(text.matches("FAIL").count(), 1, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_fences_recover_releases_an_expired_pause_as_the_shipped_service_account() {
    let c = Cluster::seeded("rbac-recover").await;
    let kc = shipped(&c).await;
    let dir = std::env::temp_dir().join(format!("fh-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("flux-handoff.toml");
    std::fs::write(&cfg, "[lease]\nduration = \"2s\"\n").unwrap();
    let cfg = cfg.to_str().unwrap();
    pause_as(&c, &kc, &["--config", cfg]).await;
    await_lease_expiry(&c).await;
    let lease = lease_flag(&c);
    let args = [
        "--config",
        cfg,
        "fences",
        "--lease",
        &lease,
        "recover",
        "--yes",
        "--include-paused",
    ];
    let out = sa::run_as(&c, &kc, &args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for name in [TARGET, PARENT] {
        let obj = c.get(name).await;
        assert!(!suspended(&obj), "{name}: {}", stderr(&out));
        assert_eq!(annotation(&obj, OWNER_KEY), None);
        assert_eq!(label(&obj), None);
    }
    let l = c.ns.api::<Lease>().get("flux-handoff").await.unwrap();
    assert_eq!(l.spec.unwrap().holder_identity, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_a_fence_without_the_label_is_found_only_by_a_full_scan() {
    let c = Cluster::seeded("rbac-scan").await;
    let kc = shipped(&c).await;
    let holder = pause_as(&c, &kc, &[]).await;
    // As an older version left it: the owner annotation without the label.
    let api: Api<DynamicObject> = Api::namespaced_with(
        c.ns.client.clone(),
        &c.ns.name,
        &flux_suspend::object::kustomization_resource(),
    );
    let unlabel = json!({ "metadata": { "labels": { FENCED: null } } });
    for name in [TARGET, PARENT] {
        api.patch(name, &PatchParams::default(), &Patch::Merge(&unlabel))
            .await
            .unwrap();
        assert_eq!(label(&c.get(name).await), None);
    }
    // An older version also wrote no chain record on the Lease (by which the fences would
    // be found by name, label or not).
    let unrecord = json!({ "metadata": { "annotations": { "flux-handoff.io/chain": null } } });
    c.ns.api::<Lease>()
        .patch(
            "flux-handoff",
            &PatchParams::default(),
            &Patch::Merge(&unrecord),
        )
        .await
        .unwrap();
    let lease = lease_flag(&c);
    let out = sa::run_as(&c, &kc, &["fences", "--lease", &lease]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("--full-scan"), "{}", stdout(&out));
    let out = sa::run_as(&c, &kc, &["fences", "--lease", &lease, "--full-scan"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains(TARGET), "{}", stdout(&out));

    let flags = c.handoff_flags();
    let mut args = vec!["resume", "--holder", holder.as_str(), "--full-scan"];
    args.extend(flags.iter().map(String::as_str));
    let out = sa::run_as(&c, &kc, &args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for name in [TARGET, PARENT] {
        let obj = c.get(name).await;
        assert!(!suspended(&obj), "{name}");
        assert_eq!(annotation(&obj, OWNER_KEY), None, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_ghcr_reassert_with_consumer_namespaces_and_a_flux_source_as_the_generated_sa() {
    testkit::install_crypto();
    let reg = LocalRegistry::start(&[(USER, PASS)]).await.unwrap();
    let digest = reg.push_image(USER, PASS, "team/app", "v2").await.unwrap();
    let c = Cluster::seeded("rbac-ghcr").await;
    let ns = c.ns.name.clone();
    let (a, b) = (
        TestNs::new("rbac-ca").await.unwrap(),
        TestNs::new("rbac-cb").await.unwrap(),
    );
    // The root Secret exists (Flux bootstrap made it), with a stale credential.
    let stale = ghcr_auth::credential::DockerConfig::from_token(
        &reg.host,
        USER,
        secrecy::SecretString::from("old-token"),
    )
    .unwrap();
    let root = ghcr_auth::plan::SecretTarget::new(&ns, "flux-pull");
    ghcr_auth::reassert::Reasserter::new(c.ns.client.clone())
        .reassert_one(&stale, &root)
        .await
        .unwrap();
    let url = format!("oci://{}/team/app", reg.host);
    Api::<DynamicObject>::namespaced_with(c.ns.client.clone(), &ns, &oci_repository_resource())
        .create(
            &PostParams::default(),
            &oci_repository("app", &ns, &url, "v2", "flux-pull"),
        )
        .await
        .unwrap();
    let _model = SourceModel::start(c.ns.client.clone(), &ns);
    let consumers = format!("{},{}", a.name, b.name);
    let root_ref = format!("{ns}/flux-pull");
    let source = format!("{ns}/app");
    let ghcr_flags = [
        "--secret-name",
        "pull",
        "--namespace-list",
        &consumers,
        "--root-secret",
        &root_ref,
        "--source",
        &source,
    ];
    let kc = generated(&c, &ghcr_flags).await;
    let sa_client = sa::client_from(&kc).await;
    rbac::await_may(&sa_client, "create", "", "secrets", &b.name, true).await;

    let mut args = vec![
        "ghcr",
        "reassert",
        "--credential-env",
        "REGISTRY_TOKEN",
        "--username",
        USER,
        "--insecure-http-host",
        &reg.host,
        "--target",
        TARGET,
    ];
    let image = format!("{}/team/app:v2", reg.host);
    args.extend(["--image", &image]);
    args.extend(ghcr_flags);
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let mut cmd = sa::cli_as(&c, &kc);
    cmd.env("REGISTRY_TOKEN", PASS).args(&args);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "flux source proven: OCIRepository {ns}/app ready at v2@{digest}"
        )),
        "{}",
        stderr(&out)
    );
    for n in [&a.name, &b.name] {
        let s = Api::<Secret>::namespaced(c.ns.client.clone(), n)
            .get_opt("pull")
            .await
            .unwrap();
        assert!(s.is_some(), "{n}: the pull Secret");
    }
    assert!(!suspended(&c.get(TARGET).await));

    // doctor, as the same ServiceAccount with the same flags, finds every right.
    let lease = lease_flag(&c);
    let mut args = vec!["doctor", "--target", TARGET, "--lease", &lease];
    args.extend(ghcr_flags);
    let out = sa::run_as(&c, &kc, &args).await;
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!("ok   may get secrets pull in {}", a.name)),
        "{}",
        stdout(&out)
    );
}

/// Everything the shipped `ServiceAccount` must not be able to do: no feature needs it.
fn sensitive(ns: &str, consumer: &str) -> Vec<Access> {
    let core = |verb: &str, res: &str| Access::new(verb, "", res);
    let hr = |verb: &str| Access::new(verb, "helm.toolkit.fluxcd.io", "helmreleases");
    let ks = |verb: &str| Access::new(verb, "kustomize.toolkit.fluxcd.io", "kustomizations");
    let rbac_api = |verb: &str, res: &str| Access::new(verb, "rbac.authorization.k8s.io", res);
    vec![
        // Other Secrets in the Flux namespace: deploy keys, SOPS keys.
        core("get", "secrets").namespace(ns).name("flux-system"),
        core("get", "secrets").namespace(ns).name("sops-gpg"),
        core("get", "secrets").namespace(ns),
        core("list", "secrets").namespace(ns),
        core("watch", "secrets").namespace(ns),
        core("create", "secrets").namespace(ns),
        core("update", "secrets").namespace(ns).name("ghcr-auth"),
        core("delete", "secrets").namespace(ns).name("ghcr-auth"),
        core("patch", "secrets").namespace(ns).name("flux-system"),
        // Secrets anywhere else.
        core("list", "secrets"),
        core("get", "secrets").namespace(consumer).name("ghcr-auth"),
        // HelmReleases (spec.values) outside its namespace, and cluster-wide lists.
        hr("list").namespace(consumer),
        hr("get").namespace(consumer),
        hr("list"),
        ks("list"),
        ks("patch").namespace(consumer),
        // Writes no feature makes.
        ks("update").namespace(ns),
        ks("delete").namespace(ns),
        hr("delete").namespace(ns),
        Access::new("delete", "coordination.k8s.io", "leases")
            .namespace(ns)
            .name("flux-handoff"),
        Access::new("update", "coordination.k8s.io", "leases")
            .namespace(ns)
            .name("other"),
        Access::new("patch", "apps", "deployments")
            .namespace(ns)
            .name("kustomize-controller"),
        Access::new("patch", "source.toolkit.fluxcd.io", "ocirepositories").namespace(ns),
        Access::new("patch", "source.toolkit.fluxcd.io", "gitrepositories").namespace(ns),
        core("get", "configmaps").namespace(ns),
        core("create", "pods").namespace(ns),
        core("create", "pods").namespace(ns).subresource("exec"),
        core("create", "serviceaccounts")
            .namespace(ns)
            .subresource("token"),
        core("patch", "namespaces").name(ns),
        core("list", "namespaces"),
        core("impersonate", "users"),
        core("impersonate", "serviceaccounts"),
        rbac_api("create", "roles").namespace(ns),
        rbac_api("patch", "roles").namespace(ns).name(SA),
        rbac_api("create", "rolebindings").namespace(ns),
        rbac_api("create", "clusterrolebindings"),
        rbac_api("bind", "clusterroles"),
        rbac_api("escalate", "roles").namespace(ns),
    ]
}

/// The accesses of `list` the API server allows `client`.
async fn allowed(client: &kube::Client, list: &[Access]) -> Vec<String> {
    let mut out = Vec::new();
    for a in list {
        if rbac::may_on(client, a).await {
            out.push(a.to_string());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_the_shipped_service_account_may_do_nothing_no_feature_needs() {
    let c = Cluster::seeded("rbac-deny").await;
    let ns = c.ns.name.clone();
    let consumer = TestNs::new("rbac-other").await.unwrap();
    let kc = shipped(&c).await;
    let sa_client = sa::client_from(&kc).await;
    let list = sensitive(&ns, &consumer.name);
    assert_eq!(allowed(&sa_client, &list).await, Vec::<String>::new());
    // What the features need stays allowed (the reviews are not vacuous).
    for a in [
        Access::new("get", "", "secrets")
            .namespace(&ns)
            .name("ghcr-auth"),
        Access::new("patch", "", "secrets")
            .namespace(&ns)
            .name("ghcr-auth"),
        Access::new("list", "helm.toolkit.fluxcd.io", "helmreleases").namespace(&ns),
    ] {
        assert!(rbac::may_on(&sa_client, &a).await, "{a}");
    }

    // A broadened grant (read every Secret in the namespace) fails the same check.
    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": "broadened" },
        "rules": [{ "apiGroups": [""], "resources": ["secrets"], "verbs": ["get"] }],
    }))
    .unwrap();
    c.ns.api::<Role>()
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "broadened" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "broadened" },
        "subjects": [{ "kind": "ServiceAccount", "name": SA, "namespace": ns }],
    }))
    .unwrap();
    c.ns.api::<RoleBinding>()
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    rbac::await_may(&sa_client, "get", "", "secrets", &ns, true).await;
    assert_eq!(
        allowed(&sa_client, &list).await,
        [
            format!("get secrets flux-system in {ns}"),
            format!("get secrets sops-gpg in {ns}"),
            format!("get secrets in {ns}"),
        ]
    );
}
