//! End to end: autoscalers are named before anything is written (issue 49, deliverable 4). A
//! replicas gate whose Deployment a `HorizontalPodAutoscaler` or a KEDA `ScaledObject` targets
//! is refused by the preflight (exit 2, one line with the fix): no fence, no annotation, no
//! Lease. A `ScaledObject` paused at the gate's count by its own annotation, and any
//! autoscaler with `--allow-autoscaler`, let the gate run. No HPA controller or KEDA runs here:
//! the objects are only what the preflight reads; a minimal `ScaledObject` CRD is installed.

mod common;

use std::time::{Duration, Instant};

use common::gate::GATED;
use common::{Cluster, OWNER_KEY, TARGET, annotation, code, stderr, suspended};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

const PAUSED_REPLICAS: &str = "autoscaling.keda.sh/paused-replicas";

/// Installs a minimal `ScaledObject` CRD (keda.sh/v1alpha1, any spec) and waits until it is
/// Established.
async fn install_scaledobject_crd(client: &kube::Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": { "name": "scaledobjects.keda.sh" },
        "spec": {
            "group": "keda.sh",
            "scope": "Namespaced",
            "names": { "plural": "scaledobjects", "singular": "scaledobject",
                       "kind": "ScaledObject", "listKind": "ScaledObjectList" },
            "versions": [{ "name": "v1alpha1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true } } }],
        },
    }))
    .unwrap();
    match api.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating the ScaledObject CRD: {e}"),
    }
    let give_up = Instant::now() + Duration::from_mins(1);
    loop {
        let crd = api.get("scaledobjects.keda.sh").await.unwrap();
        let established = crd.status.and_then(|s| s.conditions).is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
        if established {
            return;
        }
        assert!(Instant::now() < give_up, "the CRD was not Established");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

async fn create(c: &Cluster, ar: &ApiResource, obj: Value) {
    let api: Api<DynamicObject> = Api::namespaced_with(c.ns.client.clone(), &c.ns.name, ar);
    let obj: DynamicObject = serde_json::from_value(obj).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

fn hpa() -> ApiResource {
    resource(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
    )
}

fn scaled_object() -> ApiResource {
    resource("keda.sh", "v1alpha1", "ScaledObject", "scaledobjects")
}

/// `run deploy/NS/cluster-autoscaler=0 [extra] -- true`: its exit code and stderr.
async fn run_gate(c: &Cluster, extra: &[&str]) -> (i32, String) {
    let target = format!("deploy/{}/{GATED}=0", c.ns.name);
    let mut args = vec!["run", "--target", &target, "--timeout", "20s"];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    args.extend(extra);
    args.extend(["--", "true"]);
    let out = c.run(&args).await;
    (code(&out), stderr(&out))
}

/// What the server holds after a refusal: the Deployment at its count, unfenced and not
/// marked; the parent neither fenced nor suspended; no Lease.
async fn assert_untouched(c: &Cluster, err: &str) {
    let deps: Api<Deployment> = Api::namespaced(c.ns.client.clone(), &c.ns.name);
    let dep = serde_json::to_value(deps.get(GATED).await.unwrap()).unwrap();
    assert_eq!(dep["spec"]["replicas"], json!(2), "{err}");
    assert!(annotation(&dep, OWNER_KEY).is_none(), "fenced: {err}");
    assert_eq!(
        annotation(&dep, "kustomize.toolkit.fluxcd.io/reconcile"),
        None,
        "{err}"
    );
    let parent = c.get(TARGET).await;
    assert!(
        annotation(&parent, OWNER_KEY).is_none(),
        "parent fenced: {err}"
    );
    assert!(!suspended(&parent), "parent suspended: {err}");
    let leases: Api<Lease> = Api::namespaced(c.ns.client.clone(), &c.ns.name);
    let lease = leases.get_opt("flux-handoff").await.unwrap();
    assert!(lease.is_none(), "the Lease was written: {lease:?}; {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autoscaler_an_hpa_is_named_before_any_write_and_allowed_knowingly() {
    let c = common::gate::cluster("autoscaler-hpa").await;
    create(
        &c,
        &hpa(),
        json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": { "name": "ca-hpa" },
            "spec": {
                "scaleTargetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": GATED },
                "minReplicas": 1, "maxReplicas": 3,
            },
        }),
    )
    .await;
    let (code, err) = run_gate(&c, &[]).await;
    assert_eq!(code, 2, "{err}");
    let want = format!("HorizontalPodAutoscaler {}/ca-hpa", c.ns.name);
    assert!(err.contains(&want), "{err}");
    assert!(
        err.contains("HPAScaleToZero") && err.contains("--allow-autoscaler"),
        "{err}"
    );
    assert_untouched(&c, &err).await;
    // doctor names it too, with the same fix.
    let target = format!("deploy/{}/{GATED}=0", c.ns.name);
    let mut args = vec!["doctor", "--target", &target];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    let text = format!("{}{}", common::stdout(&out), stderr(&out));
    let line = text
        .lines()
        .find(|l| l.contains("no autoscaler scales replicas gate"))
        .unwrap_or_default();
    assert!(line.starts_with("FAIL") && line.contains(&want), "{text}");

    // Accepted knowingly: the gate runs and gives the count back.
    let (code, err) = run_gate(&c, &["--allow-autoscaler"]).await;
    assert_eq!(code, 0, "{err}");
    let deps: Api<Deployment> = Api::namespaced(c.ns.client.clone(), &c.ns.name);
    let dep = serde_json::to_value(deps.get(GATED).await.unwrap()).unwrap();
    assert_eq!(dep["spec"]["replicas"], json!(2), "{err}");
    assert!(annotation(&dep, OWNER_KEY).is_none(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autoscaler_a_scaledobject_is_named_before_any_write_until_paused_at_the_count() {
    let c = common::gate::cluster("autoscaler-keda").await;
    install_scaledobject_crd(&c.ns.client).await;
    create(
        &c,
        &scaled_object(),
        json!({
            "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": { "name": "ca-keda" },
            "spec": { "scaleTargetRef": { "name": GATED }, "minReplicaCount": 0,
                      "triggers": [{ "type": "cron", "metadata": {} }] },
        }),
    )
    .await;
    let (code, err) = run_gate(&c, &[]).await;
    assert_eq!(code, 2, "{err}");
    let want = format!(
        "kubectl -n {} annotate scaledobject ca-keda {PAUSED_REPLICAS}=0",
        c.ns.name
    );
    assert!(err.contains(&want), "{err}");
    assert_untouched(&c, &err).await;

    // KEDA's own pause at the gate's count, as the refusal said: the gate runs.
    let api: Api<DynamicObject> =
        Api::namespaced_with(c.ns.client.clone(), &c.ns.name, &scaled_object());
    let paused = json!({ "metadata": { "annotations": { PAUSED_REPLICAS: "0" } } });
    let pp = PatchParams {
        field_manager: Some("e2e-person".into()),
        ..PatchParams::default()
    };
    api.patch("ca-keda", &pp, &Patch::Merge(paused))
        .await
        .unwrap();
    let (code, err) = run_gate(&c, &[]).await;
    assert_eq!(code, 0, "{err}");
}
