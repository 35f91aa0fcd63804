//! Tier 2: the fault-injecting proxy in front of the real API server.

use fault_proxy::{Fault, Proxy};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use testkit::TestNs;

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

/// Sends one raw HTTP request to the proxy and reads until the connection ends.
async fn raw_request(url: &str, request: &str) -> std::io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(url.trim_start_matches("http://")).await?;
    s.write_all(request.as_bytes()).await?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    Ok(out)
}

#[tokio::test]
async fn proxy_reset_fault_sends_rst_and_never_forwards() {
    let ns = TestNs::new("proxy-reset").await.unwrap();
    let proxy = Proxy::start().await.unwrap();
    proxy.arm(1, Fault::Reset);
    let body = serde_json::to_string(&cm("raw")).unwrap();
    let err = raw_request(
        &proxy.url(),
        &format!(
            "POST /api/v1/namespaces/{}/configmaps HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            ns.name,
            body.len()
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
    // Through a kube client: a transport error, and the server never saw the write.
    let api: Api<ConfigMap> = Api::namespaced(proxy.client().unwrap(), &ns.name);
    proxy.arm(2, Fault::Reset);
    let err = api
        .create(&PostParams::default(), &cm("never"))
        .await
        .unwrap_err();
    assert!(!matches!(err, kube::Error::Api(_)), "{err}");
    let ns_api = ns.api::<ConfigMap>();
    for name in ["raw", "never"] {
        assert!(ns_api.get_opt(name).await.unwrap().is_none(), "{name}");
    }
    let log = proxy.log();
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log.iter().all(|s| s.mutating && !s.forwarded), "{log:?}");
}

#[tokio::test]
async fn proxy_refuses_connects_for_a_while_then_accepts_on_the_same_port() {
    let ns = TestNs::new("proxy-refuse").await.unwrap();
    let proxy = Proxy::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(proxy.client().unwrap(), &ns.name);
    api.create(&PostParams::default(), &cm("before"))
        .await
        .unwrap();
    let addr = proxy.url().trim_start_matches("http://").to_string();
    let open = tokio::net::TcpStream::connect(&addr).await.unwrap();
    proxy
        .refuse_for(std::time::Duration::from_secs(2))
        .await
        .unwrap();
    let err = tokio::net::TcpStream::connect(&addr).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    // The connection opened before was closed too.
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        open.readable().await?;
        open.try_read(&mut buf)
    })
    .await
    .expect("the open connection was not closed");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    // Accepting again on the same port, polled with a bound.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while tokio::net::TcpStream::connect(&addr).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "still refusing");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    api.create(&PostParams::default(), &cm("after"))
        .await
        .unwrap();
    assert!(
        ns.api::<ConfigMap>()
            .get_opt("after")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn proxy_refuse_fault_cuts_the_request_without_forwarding_it() {
    let ns = TestNs::new("proxy-refuse-k").await.unwrap();
    let proxy = Proxy::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(proxy.client().unwrap(), &ns.name);
    proxy.arm(1, Fault::Refuse(std::time::Duration::from_secs(1)));
    api.create(&PostParams::default(), &cm("cut"))
        .await
        .unwrap_err();
    assert!(
        ns.api::<ConfigMap>()
            .get_opt("cut")
            .await
            .unwrap()
            .is_none()
    );
    assert!(!proxy.log()[0].forwarded);
}

#[tokio::test]
async fn proxy_status_fault_carries_retry_after() {
    let ns = TestNs::new("proxy-retry-after").await.unwrap();
    let proxy = Proxy::start().await.unwrap();
    proxy.arm_on(
        "get configmaps",
        1,
        Fault::Status {
            code: 429,
            retry_after: Some(1),
        },
    );
    let resp = reqwest::get(format!(
        "{}/api/v1/namespaces/{}/configmaps/x",
        proxy.url(),
        ns.name
    ))
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert!(!proxy.log()[0].forwarded);
}

#[tokio::test]
async fn proxy_hang_reads_hangs_gets_on_a_path_until_lifted() {
    let ns = TestNs::new("proxy-hang-reads").await.unwrap();
    let proxy = Proxy::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(proxy.client().unwrap(), &ns.name);
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    api.create(&PostParams::default(), &cm("b")).await.unwrap();
    proxy.hang_reads("/configmaps/a");
    // A read of `a` gets no answer: the client's own bound is all that ends it.
    let hung = tokio::time::timeout(std::time::Duration::from_secs(2), api.get("a")).await;
    assert!(hung.is_err(), "the read was answered: {hung:?}");
    // Other reads, and writes to `a` itself, pass.
    api.get("b").await.unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { "k": "w" } })),
    )
    .await
    .unwrap();
    let log = proxy.log();
    let reads: Vec<_> = log.iter().filter(|r| r.kind == "get configmaps").collect();
    assert_eq!(reads.len(), 2, "{log:?}");
    assert!(!reads[0].forwarded && reads[0].path.ends_with("/configmaps/a"));
    assert!(reads[1].forwarded && reads[1].path.ends_with("/configmaps/b"));
    // Lifted: `a` is read again, and holds the patch.
    proxy.unhang_reads("/configmaps/a");
    assert_eq!(api.get("a").await.unwrap().data.unwrap()["k"], "w");
}
