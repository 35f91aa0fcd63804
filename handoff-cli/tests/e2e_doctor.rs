//! End to end: `doctor` as the admin and as a `ServiceAccount` without permissions.

mod common;
mod sa;

use common::*;

fn doctor_args(c: &Cluster) -> Vec<String> {
    let ns = &c.ns.name;
    vec![
        "doctor".into(),
        "--target".into(),
        TARGET.into(),
        "--lease".into(),
        format!("{ns}/flux-handoff"),
        "--controller".into(),
        format!("{ns}/kustomize-controller"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_passes_every_check_on_the_admin_kubeconfig() {
    let c = Cluster::seeded("doctor-admin").await;
    let rv = c.get(TARGET).await["metadata"]["resourceVersion"].clone();
    let args = doctor_args(&c);
    let out = c
        .run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    for want in [
        "ok   API reachable: Kubernetes v1.36.3",
        "ok   Flux CRD kustomizations (kustomize.toolkit.fluxcd.io/v1) served",
        "ok   Flux CRD helmreleases (helm.toolkit.fluxcd.io/v2) served",
        "ok   Flux CRD ocirepositories (source.toolkit.fluxcd.io/v1) served",
        &format!("ok   target Kustomization {}/{TARGET} exists", c.ns.name),
        &format!("ok   parent Kustomization {}/{PARENT} exists", c.ns.name),
        &format!(
            "ok   controller Deployment {}/kustomize-controller exists",
            c.ns.name
        ),
        &format!("ok   Lease namespace {} exists", c.ns.name),
        &format!(
            "ok   may patch kustomizations.kustomize.toolkit.fluxcd.io in {}",
            c.ns.name
        ),
        &format!(
            "ok   may list helmreleases.helm.toolkit.fluxcd.io in {} (resume and fences find \
             fences by label)",
            c.ns.name
        ),
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    assert!(!text.contains("FAIL"), "{text}");
    // Read-only: nothing changed, no Lease was created.
    assert_eq!(c.get(TARGET).await["metadata"]["resourceVersion"], rv);
    let leases = c.ns.api::<k8s_openapi::api::coordination::v1::Lease>();
    assert!(leases.get_opt("flux-handoff").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_each_missing_permission_and_its_fix_for_a_bare_service_account() {
    let c = Cluster::seeded("doctor-sa").await;
    let kc = sa::kubeconfig_for(&c.ns, "bare").await;
    let mut args = doctor_args(&c);
    args.extend(["--retire".into(), "restart".into()]);
    let out = sa::run_as(
        &c,
        &kc,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(code(&out), 6, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    let ns = &c.ns.name;
    assert!(text.contains("ok   API reachable"), "{text}");
    for want in [
        format!(
            "FAIL may update leases.coordination.k8s.io flux-handoff in {ns} (the coordination \
             Lease): the coordination Lease needs it; add this rule to the Role bound in \
             namespace {ns} (`flux-handoff rbac` prints the whole manifest):\n  - apiGroups: \
             [\"coordination.k8s.io\"]\n    resources: [\"leases\"]\n    resourceNames: \
             [\"flux-handoff\"]\n    verbs: [\"update\"]\n"
        ),
        format!("FAIL may patch kustomizations.kustomize.toolkit.fluxcd.io in {ns}"),
        format!("FAIL may patch deployments.apps kustomize-controller in {ns} (--retire restart)"),
        format!("FAIL may list kustomizations.kustomize.toolkit.fluxcd.io in {ns}"),
    ] {
        assert!(text.contains(&want), "missing {want:?} in\n{text}");
    }
    assert_eq!(
        stderr(&out).trim(),
        "error: doctor: 4 check(s) failed".replace('4', &text.matches("FAIL").count().to_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_output_json_is_one_document_with_every_check() {
    let c = Cluster::seeded("doctor-json").await;
    let mut args = doctor_args(&c);
    args.extend(["--output".into(), "json".into()]);
    let out = c
        .run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let checks = doc["facts"]["checks"].as_array().unwrap();
    assert!(checks.len() > 10);
    assert!(checks.iter().all(|c| c["ok"] == true), "{checks:?}");
}
