//! Plain-HTTP pass-throughs on loopback: what the proxy's neighbours share with it. The chaos
//! suite's ordered recorder and [`Forwarder`] (a bearer token for `kubectl`) sit in front of
//! [`crate::Proxy`] and forward with [`serve_loopback`] and [`upstream_request`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Accepts connections on a free loopback port and serves each (HTTP/1) with `handle`, until
/// the returned task is aborted. An `Err` from `handle` closes that connection without a
/// response (what a lost response looks like to the client).
pub async fn serve_loopback<H, F, B>(handle: H) -> anyhow::Result<(SocketAddr, JoinHandle<()>)>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<B>, std::io::Error>> + Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            // See the proxy's accept loop: no Nagle delay on small streamed writes.
            let _ = stream.set_nodelay(true);
            let handle = handle.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(handle);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((addr, task))
}

/// A pass-through's response body: buffered, or streamed for a watch.
pub type PassBody = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

/// The body of `resp` to pass on: a watch (`watch` true) streams its events chunk by chunk as
/// they come (buffering it would hold every event until the watch's timeout); anything else is
/// read whole.
///
/// # Errors
///
/// Reading a non-watch body failed.
pub async fn pass_body(resp: reqwest::Response, watch: bool) -> Result<PassBody, std::io::Error> {
    if watch {
        let chunks = futures::stream::unfold(Some(resp), |resp| async move {
            let mut resp = resp?;
            match resp.chunk().await {
                Ok(Some(c)) => Some((Ok(hyper::body::Frame::data(c)), Some(resp))),
                Ok(None) => None,
                Err(e) => Some((Err(std::io::Error::other(e)), None)),
            }
        });
        return Ok(http_body_util::StreamBody::new(chunks).boxed());
    }
    let bytes = resp.bytes().await.map_err(std::io::Error::other)?;
    Ok(Full::new(bytes).map_err(|never| match never {}).boxed())
}

/// A request's headers and whole body, the body collected; `None` when the client's body
/// broke off.
pub async fn split(req: Request<Incoming>) -> Option<(HeaderMap, Bytes)> {
    let headers = req.headers().clone();
    let body = req.into_body().collect().await.ok()?.to_bytes();
    Some((headers, body))
}

/// The request's `Content-Type`, or `""`.
#[must_use]
pub fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// The request to send upstream to `url`: `method`, `body`, and every header of `headers`
/// but `host`, `content-length` and those named in `skip` (lower case). `None` for a method
/// reqwest cannot express.
#[must_use]
pub fn upstream_request(
    client: &reqwest::Client,
    url: String,
    method: &str,
    headers: &HeaderMap,
    body: Bytes,
    skip: &[&str],
) -> Option<reqwest::RequestBuilder> {
    let m = reqwest::Method::from_bytes(method.as_bytes()).ok()?;
    let mut out = client.request(m, url).body(body);
    for (k, v) in headers {
        if !matches!(k.as_str(), "host" | "content-length") && !skip.contains(&k.as_str()) {
            out = out.header(k.as_str(), v.as_bytes());
        }
    }
    Some(out)
}

/// A loopback forwarder for `kubectl` in front of the counting proxy: kubectl sends no bearer
/// token to a plain-`http` server, so this adds the admin token the proxy's kubeconfig names,
/// and drops `Accept-Encoding` (the proxy does not pass `Content-Encoding` back, so a gzipped
/// answer would reach kubectl as undecodable bytes). Every request still passes the proxy
/// once, so the proxy's counts are kubectl's requests. Stops when dropped.
#[derive(Debug)]
pub struct Forwarder {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct State {
    client: reqwest::Client,
    upstream: String,
    authorization: String,
}

impl Forwarder {
    /// Forwards to `upstream` (`http://127.0.0.1:<port>`) adding `Bearer <token>`.
    pub async fn start(upstream: String, token: &str) -> anyhow::Result<Self> {
        let state = Arc::new(State {
            client: reqwest::Client::builder().build()?,
            upstream,
            authorization: format!("Bearer {token}"),
        });
        let (addr, task) = serve_loopback(move |req| forward(state.clone(), req)).await?;
        Ok(Self { addr, task })
    }

    /// `http://127.0.0.1:<port>`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// The token of a kubeconfig written by [`crate::Proxy::write_kubeconfig`].
pub fn token_of(kubeconfig: &std::path::Path) -> anyhow::Result<String> {
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(kubeconfig)?)?;
    doc.pointer("/users/0/user/token")
        .and_then(serde_json::Value::as_str)
        .map(str::to_string)
        .context("kubeconfig without a token")
}

async fn forward(
    st: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let path_q = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let method = req.method().as_str().to_string();
    let Some((headers, body)) = split(req).await else {
        return Ok(bad_gateway());
    };
    let Some(out) = upstream_request(
        &st.client,
        format!("{}{path_q}", st.upstream),
        &method,
        &headers,
        body,
        &["accept-encoding", "authorization"],
    ) else {
        return Ok(bad_gateway());
    };
    let Ok(resp) = out.header("authorization", &st.authorization).send().await else {
        return Ok(bad_gateway());
    };
    let mut b = Response::builder().status(resp.status().as_u16());
    if let Some(c) = resp.headers().get("content-type") {
        b = b.header("content-type", c.as_bytes());
    }
    let Ok(bytes) = resp.bytes().await else {
        return Ok(bad_gateway());
    };
    Ok(b.body(Full::new(bytes)).unwrap_or_else(|_| bad_gateway()))
}

fn bad_gateway() -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(b"forwarder failed")));
    *r.status_mut() = StatusCode::BAD_GATEWAY;
    r
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use hyper::header::{HeaderMap, HeaderValue};

    use super::upstream_request;

    #[test]
    fn upstream_requests_keep_the_headers_but_host_length_and_the_skipped_ones() {
        let mut headers = HeaderMap::new();
        for (k, v) in [
            ("host", "127.0.0.1:1"),
            ("content-length", "2"),
            ("accept-encoding", "gzip"),
            ("authorization", "Bearer client"),
            ("content-type", "application/json-patch+json"),
        ] {
            headers.insert(k, HeaderValue::from_static(v));
        }
        testkit::install_crypto();
        let client = reqwest::Client::new();
        let url = "http://127.0.0.1:2/api/v1/namespaces?limit=1".to_string();
        let req = upstream_request(
            &client,
            url.clone(),
            "PATCH",
            &headers,
            Bytes::from_static(b"[]"),
            &["accept-encoding"],
        )
        .unwrap()
        .build()
        .unwrap();
        assert_eq!(req.method(), reqwest::Method::PATCH);
        assert_eq!(req.url().as_str(), url);
        let names: Vec<&str> = req
            .headers()
            .keys()
            .map(hyper::header::HeaderName::as_str)
            .collect();
        assert_eq!(names, ["authorization", "content-type"]);
        assert!(
            upstream_request(&client, url, "NOT A METHOD", &headers, Bytes::new(), &[]).is_none()
        );
    }
}
