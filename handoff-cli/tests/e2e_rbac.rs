//! End to end: `deploy/rbac.yaml` is enough to pause and resume as its `ServiceAccount`, and
//! removing one verb (patch on kustomizations) makes the pause fail with exit 6 and one line,
//! with nothing changed on the server.

mod common;
mod rbac;
mod sa;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, PostParams};

const SA: &str = "flux-handoff";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rbac_manifest_is_enough_to_pause_and_resume_as_its_service_account() {
    let c = Cluster::seeded("rbac-ok").await;
    let ns = c.ns.name.clone();
    let docs = rbac::documents(&ns);
    rbac::apply(&c.ns.client, &ns, &docs).await;
    let kc = sa::kubeconfig_for(&c.ns, SA).await;
    let sa_client = sa::client_from(&kc).await;
    rbac::await_may(
        &sa_client,
        "patch",
        "kustomize.toolkit.fluxcd.io",
        "kustomizations",
        &ns,
        true,
    )
    .await;
    rbac::await_may(
        &sa_client,
        "create",
        "coordination.k8s.io",
        "leases",
        &ns,
        true,
    )
    .await;

    let flags = c.handoff_flags();
    let mut args = vec!["pause", "--target", TARGET];
    args.extend(flags.iter().map(String::as_str));
    let out = sa::run_as(&c, &kc, &args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let holder = stdout(&out).trim().to_string();
    assert!(suspended(&c.get(TARGET).await));
    assert!(
        annotation(&c.get(TARGET).await, OWNER_KEY)
            .unwrap()
            .starts_with(&holder)
    );

    // fences and doctor work with the same rights.
    let lease = format!("{ns}/flux-handoff");
    let out = sa::run_as(&c, &kc, &["fences", "--lease", &lease]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = sa::run_as(
        &c,
        &kc,
        &[
            "doctor",
            "--target",
            TARGET,
            "--lease",
            &lease,
            "--controller",
            &format!("{ns}/kustomize-controller"),
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));

    let mut args = vec!["resume", "--holder", holder.as_str()];
    args.extend(flags.iter().map(String::as_str));
    let out = sa::run_as(&c, &kc, &args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!suspended(&c.get(TARGET).await));
    assert!(!suspended(&c.get(PARENT).await));
    assert_eq!(annotation(&c.get(TARGET).await, OWNER_KEY), None);
    rbac::remove_cluster_scoped(&c.ns.client, &docs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_patch_on_kustomizations_pause_fails_with_exit_6_and_changes_nothing() {
    let c = Cluster::seeded("rbac-nopatch").await;
    let ns = c.ns.name.clone();
    let docs = rbac::documents(&ns);
    rbac::apply(&c.ns.client, &ns, &docs).await;
    // Remove exactly one verb: patch on kustomizations.
    let name = format!("flux-handoff-objects-{ns}");
    let roles: Api<ClusterRole> = Api::all(c.ns.client.clone());
    let mut role = roles.get(&name).await.unwrap();
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
        "the manifest grants patch on kustomizations exactly once"
    );
    roles
        .replace(&name, &PostParams::default(), &role)
        .await
        .unwrap();
    let kc = sa::kubeconfig_for(&c.ns, SA).await;
    let sa_client = sa::client_from(&kc).await;
    rbac::await_may(
        &sa_client,
        "patch",
        "kustomize.toolkit.fluxcd.io",
        "kustomizations",
        &ns,
        false,
    )
    .await;
    rbac::await_may(
        &sa_client,
        "get",
        "kustomize.toolkit.fluxcd.io",
        "kustomizations",
        &ns,
        true,
    )
    .await;

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
    // Nothing changed on the Flux objects; the Lease is left without a holder.
    let (t_after, p_after) = (c.get(TARGET).await, c.get(PARENT).await);
    assert_eq!(
        t_after["metadata"]["resourceVersion"],
        t_before["metadata"]["resourceVersion"]
    );
    assert_eq!(
        p_after["metadata"]["resourceVersion"],
        p_before["metadata"]["resourceVersion"]
    );
    if let Some(l) = c.ns.api::<Lease>().get_opt("flux-handoff").await.unwrap() {
        assert_eq!(l.spec.unwrap().holder_identity, None);
    }
    // doctor names the missing permission and the rule to add.
    let lease = format!("{ns}/flux-handoff");
    let out = sa::run_as(&c, &kc, &["doctor", "--target", TARGET, "--lease", &lease]).await;
    assert_eq!(code(&out), 6, "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!(
            "FAIL may patch kustomizations.kustomize.toolkit.fluxcd.io in {ns}"
        )),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("verbs: [\"patch\"]"),
        "{}",
        stdout(&out)
    );
    rbac::remove_cluster_scoped(&c.ns.client, &docs).await;
}

#[test]
fn the_manifest_parses_and_binds_every_role_to_the_service_account() {
    let docs = rbac::documents("flux-system");
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "ClusterRole",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding"
        ]
    );
    for d in docs
        .iter()
        .filter(|d| d["kind"].as_str().unwrap().ends_with("Binding"))
    {
        assert_eq!(d["subjects"][0]["name"], SA);
    }
    // No write is granted cluster-wide: the cluster-wide binding's role only lists.
    let discover = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRoleBinding")
        .unwrap();
    let role_name = discover["roleRef"]["name"].as_str().unwrap();
    let role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == role_name)
        .unwrap();
    for rule in role["rules"].as_array().unwrap() {
        assert_eq!(rule["verbs"], serde_json::json!(["list"]), "{rule}");
    }
}
