//! A loopback forwarder in front of the counting proxy for `kubectl`: kubectl sends no bearer
//! token to a plain-`http` server, so this adds the admin token the proxy's kubeconfig names,
//! and drops `Accept-Encoding` (the proxy does not pass `Content-Encoding` back, so a gzipped
//! answer would reach kubectl as undecodable bytes). Every request still passes the proxy once,
//! so the proxy's counts are kubectl's requests.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A running forwarder; stops when dropped.
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
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let st = state.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| forward(st.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self { addr, task })
    }

    /// `http://127.0.0.1:<port>`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// The token of a kubeconfig written by `Proxy::write_kubeconfig`.
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
    let headers = req.headers().clone();
    let Ok(body) = req
        .into_body()
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
    else {
        return Ok(bad_gateway());
    };
    let Ok(m) = reqwest::Method::from_bytes(method.as_bytes()) else {
        return Ok(bad_gateway());
    };
    let mut out = st
        .client
        .request(m, format!("{}{path_q}", st.upstream))
        .header("authorization", &st.authorization)
        .body(body);
    for (k, v) in &headers {
        if !matches!(
            k.as_str(),
            "host" | "content-length" | "accept-encoding" | "authorization"
        ) {
            out = out.header(k.as_str(), v.as_bytes());
        }
    }
    let Ok(resp) = out.send().await else {
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
