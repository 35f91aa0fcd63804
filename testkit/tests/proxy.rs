//! Tier 2: the fault-injecting proxy in front of the real API server.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use testkit::TestNs;
use testkit::proxy::{Fault, Proxy};

fn cm(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some([("k".to_string(), "v".to_string())].into()),
        ..ConfigMap::default()
    }
}

#[tokio::test]
async fn proxy_counts_requests_by_verb_and_resource() {
    let ns = TestNs::new("proxy-count").await.unwrap();
    let proxy = Proxy::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(proxy.client().unwrap(), &ns.name);
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    api.get("a").await.unwrap();
    api.list(&ListParams::default()).await.unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { "k": "w" } })),
    )
    .await
    .unwrap();
    let counts = proxy.counts();
    for key in [
        "create configmaps",
        "get configmaps",
        "list configmaps",
        "patch configmaps",
    ] {
        assert_eq!(counts.get(key), Some(&1), "{key}: {counts:?}");
    }
    assert_eq!(proxy.mutations(), 2);
    assert_eq!(
        ns.api::<ConfigMap>().get("a").await.unwrap().data.unwrap()["k"],
        "w"
    );
}

#[tokio::test]
async fn proxy_dropped_response_leaves_the_write_applied_and_the_client_in_doubt() {
    let ns = TestNs::new("proxy-drop").await.unwrap();
    let proxy = Proxy::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(proxy.client().unwrap(), &ns.name);
    proxy.arm(1, Fault::DropResponse);
    let err = api
        .create(&PostParams::default(), &cm("applied"))
        .await
        .unwrap_err();
    assert!(
        !matches!(err, kube::Error::Api(_)),
        "a transport error, not an answer: {err}"
    );
    // The server applied it.
    assert!(
        ns.api::<ConfigMap>()
            .get_opt("applied")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn proxy_status_fault_is_answered_without_forwarding() {
    let ns = TestNs::new("proxy-500").await.unwrap();
    let proxy = Proxy::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(proxy.client().unwrap(), &ns.name);
    proxy.arm(
        1,
        Fault::Status {
            code: 500,
            retry_after: None,
        },
    );
    let err = api
        .create(&PostParams::default(), &cm("never"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 500),
        "{err}"
    );
    assert!(
        ns.api::<ConfigMap>()
            .get_opt("never")
            .await
            .unwrap()
            .is_none()
    );
    // The next mutation passes.
    api.create(&PostParams::default(), &cm("later"))
        .await
        .unwrap();
}

#[tokio::test]
async fn proxy_503_is_retried_by_the_kube_client_and_applied_once() {
    let ns = TestNs::new("proxy-503").await.unwrap();
    let proxy = Proxy::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(proxy.client().unwrap(), &ns.name);
    proxy.arm(
        1,
        Fault::Status {
            code: 503,
            retry_after: Some(1),
        },
    );
    api.create(&PostParams::default(), &cm("once"))
        .await
        .unwrap();
    assert_eq!(
        proxy.counts().get("create configmaps"),
        Some(&2),
        "kube retried the 503"
    );
    assert!(
        ns.api::<ConfigMap>()
            .get_opt("once")
            .await
            .unwrap()
            .is_some()
    );
}
