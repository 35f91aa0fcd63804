//! A fault-injecting proxy between a client and the local API server.
//!
//! It listens on plain HTTP on loopback and forwards every request over TLS to the real
//! kube-apiserver, so faults are injected from outside, as in production — no hooks in product
//! code. It counts requests by verb and resource, and on command fails the k-th mutating
//! request (POST, PUT, PATCH, DELETE) counted from the start:
//! - [`Fault::DropResponse`]: the request reaches the server and is applied, then the
//!   connection is closed without a response (an ambiguous, lost response);
//! - [`Fault::Status`]: the request is not forwarded; the client gets that status (e.g. 503,
//!   429 with `Retry-After`);
//! - [`Fault::Delay`]: the response is held back for a while;
//! - [`Fault::Reset`]: the request is not forwarded; the connection is reset (TCP RST);
//! - [`Fault::Refuse`]: the request is not forwarded; the proxy closes every connection and
//!   refuses new ones for a while, then listens again on the same port (also on demand:
//!   [`Proxy::refuse_for`]);
//! - [`Fault::Hang`]: the request is not forwarded and gets no answer and no error; its
//!   connection stays open (a wedged load balancer).
//!
//! [`Proxy::hang_reads`] hangs every read (GET: get, list, watch) whose path holds a given
//! text, as [`Fault::Hang`] does, until [`Proxy::unhang_reads`]; other requests pass (a Lease
//! read stuck behind a wedged connection while everything else moves).
//!
//! [`Proxy::freeze`] hangs every request from then on, and every response not yet sent (watch
//! streams stall too), until [`Proxy::thaw`]: connections stay open, nothing moves.
//! [`Proxy::hold_on`] holds one request until the test forwards it ([`Held::forward`]) — after
//! its client gave up on it, a late write.
//!
//! [`Proxy::log`] keeps every request in arrival order with whether it was forwarded, so a
//! caller can tell a request the server saw from one the proxy answered (or cut) on its own.
//!
//! [`pass`] holds the plain pass-through pieces the proxy shares with its neighbours (an
//! ordered recorder, a token-adding [`pass::Forwarder`] for `kubectl`).

mod classify;
mod hold;
mod listen;
pub mod pass;
pub mod precondition;

pub use classify::classify;
pub use hold::Held;
use hold::{HoldSlot, hold};
use listen::{bind, serve};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};

use kube::config::Kubeconfig;
use secrecy::ExposeSecret;
use tokio::net::TcpSocket;
use tokio::task::JoinHandle;

/// What to do to an armed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Forward and apply, then close the connection without a response.
    DropResponse,
    /// Answer with this status (and `Retry-After` seconds) without forwarding.
    Status { code: u16, retry_after: Option<u32> },
    /// Forward, then hold the response back this long.
    Delay(Duration),
    /// Do not forward; reset the connection (TCP RST) before any response.
    Reset,
    /// Do not forward; close every connection and refuse connects for this long.
    Refuse(Duration),
    /// Do not forward, never answer, keep the connection open.
    Hang,
}

/// One request as the proxy saw it, in arrival order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// `verb resource[/subresource]`, as [`classify`] names it.
    pub kind: String,
    /// The request path.
    pub path: String,
    /// POST, PUT, PATCH or DELETE.
    pub mutating: bool,
    /// Sent on to the API server (it may have applied it even if its response was lost).
    pub forwarded: bool,
    /// A write the server applies only at the version it names ([`precondition::on_version`]).
    pub conditional: bool,
    /// When it arrived, since the proxy started.
    pub at: Duration,
    /// How long the server took to answer (until the response's headers), when forwarded and
    /// answered.
    pub took: Option<Duration>,
}

/// A request to stop accepting: for how long, and who to tell once the listener is closed.
type RefuseCmd = (Duration, Option<tokio::sync::oneshot::Sender<()>>);

#[derive(Debug)]
struct State {
    upstream: reqwest::Client,
    base: String,
    counts: Mutex<BTreeMap<String, u64>>,
    mutations: AtomicU64,
    armed: Mutex<BTreeMap<u64, Fault>>,
    armed_on: Mutex<BTreeMap<(String, u64), Fault>>,
    hung_reads: Mutex<Vec<String>>,
    log: Mutex<Vec<Received>>,
    holds: Mutex<BTreeMap<(String, u64), Held>>,
    frozen: tokio::sync::watch::Sender<bool>,
    started: std::time::Instant,
    refuse: tokio::sync::mpsc::UnboundedSender<RefuseCmd>,
}

/// A running proxy; stops when dropped.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<State>,
    token: String,
    task: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// Starts a proxy in front of the shared control plane on a free loopback port.
    pub async fn start() -> anyhow::Result<Self> {
        let config = testkit::admin_config().await?;
        let token = config
            .auth_info
            .token
            .as_ref()
            .context("the admin kubeconfig has no token")?
            .expose_secret()
            .to_string();
        let ca = kubeconfig_ca()?;
        let upstream = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(&ca)?])
            .build()?;
        let base = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string();
        let (refuse, commands) = tokio::sync::mpsc::unbounded_channel();
        let state = Arc::new(State {
            upstream,
            base,
            counts: Mutex::default(),
            mutations: AtomicU64::new(0),
            armed: Mutex::default(),
            armed_on: Mutex::default(),
            hung_reads: Mutex::default(),
            log: Mutex::default(),
            holds: Mutex::default(),
            frozen: tokio::sync::watch::Sender::new(false),
            started: std::time::Instant::now(),
            refuse,
        });
        let listener = bind("127.0.0.1:0".parse()?)?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(serve(state.clone(), listener, commands));
        Ok(Self {
            addr,
            state,
            token,
            task,
        })
    }

    /// `http://127.0.0.1:<port>`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Arms `fault` for the `nth` mutating request (1-based, counted since the start).
    pub fn arm(&self, nth: u64, fault: Fault) {
        lock(&self.state.armed).insert(nth, fault);
    }

    /// Arms `fault` for the `nth` request (1-based) of kind `key` (`verb resource`, as
    /// [`classify`] names it, e.g. `patch kustomizations`), whatever came in between.
    pub fn arm_on(&self, key: &str, nth: u64, fault: Fault) {
        lock(&self.state.armed_on).insert((key.to_string(), nth), fault);
    }

    /// Holds the `nth` request (1-based) of kind `key` (as [`Proxy::arm_on`]) unforwarded
    /// until [`Held::forward`]; then it is sent on even if its client gave up on it.
    #[must_use]
    pub fn hold_on(&self, key: &str, nth: u64) -> Held {
        self.hold_slot(key, nth, None)
    }

    /// As [`Proxy::hold_on`], but the client is answered at once with `code` (a 504 from a
    /// gateway: the write "may still be processing"); the request itself is sent on only at
    /// [`Held::forward`] — an unknown outcome that commits late.
    #[must_use]
    pub fn hold_answering(&self, key: &str, nth: u64, code: u16) -> Held {
        self.hold_slot(key, nth, Some(code))
    }

    fn hold_slot(&self, key: &str, nth: u64, answer: Option<u16>) -> Held {
        let held = Held(Arc::new(HoldSlot {
            arrived: tokio::sync::watch::Sender::new(false),
            go: tokio::sync::watch::Sender::new(false),
            status: tokio::sync::watch::Sender::new(None),
            answer,
        }));
        lock(&self.state.holds).insert((key.to_string(), nth), held.clone());
        held
    }

    /// From now on every GET (get, list, watch) whose path contains `path` (e.g.
    /// `/leases/flux-handoff`) is not forwarded and gets no answer and no error; its
    /// connection stays open. Other requests pass. Until [`Proxy::unhang_reads`].
    pub fn hang_reads(&self, path: &str) {
        lock(&self.state.hung_reads).push(path.to_string());
    }

    /// Lets GETs on `path` through again (those already hung stay hung).
    pub fn unhang_reads(&self, path: &str) {
        lock(&self.state.hung_reads).retain(|p| p != path);
    }

    /// From now on every request, and every response not yet sent, hangs: no answer, no
    /// error, connections stay open (a wedged load balancer, a half-open connection).
    pub fn freeze(&self) {
        self.state.frozen.send_replace(true);
    }

    /// Lets new requests through again (those already hung stay hung).
    pub fn thaw(&self) {
        self.state.frozen.send_replace(false);
    }

    /// Mutating requests seen so far.
    #[must_use]
    pub fn mutations(&self) -> u64 {
        self.state.mutations.load(Ordering::SeqCst)
    }

    /// Requests by `verb resource[/subresource]`, e.g. `patch kustomizations`.
    #[must_use]
    pub fn counts(&self) -> BTreeMap<String, u64> {
        lock(&self.state.counts).clone()
    }

    /// Every request so far, in arrival order, with whether it was forwarded.
    #[must_use]
    pub fn log(&self) -> Vec<Received> {
        lock(&self.state.log).clone()
    }

    /// Closes the listener and every open connection, so connects are refused, and listens
    /// again on the same port after `d`. Returns once the listener is closed.
    pub async fn refuse_for(&self, d: Duration) -> anyhow::Result<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.state
            .refuse
            .send((d, Some(tx)))
            .map_err(|_| anyhow::anyhow!("the proxy has stopped"))?;
        rx.await.context("the proxy has stopped")
    }

    /// All requests seen so far.
    #[must_use]
    pub fn total(&self) -> u64 {
        lock(&self.state.counts).values().sum()
    }

    /// An admin client that talks through the proxy.
    pub fn client(&self) -> anyhow::Result<kube::Client> {
        let mut config = kube::Config::new(self.url().parse()?);
        config.auth_info.token = Some(self.token.clone().into());
        Ok(kube::Client::try_from(config)?)
    }

    /// A client through the proxy without kube's retry layer: a 5xx reaches the caller at
    /// once (the library's own handling of an unknown outcome, seen without retries).
    pub fn client_without_retry(&self) -> anyhow::Result<kube::Client> {
        let mut config = kube::Config::new(self.url().parse()?);
        config.auth_info.token = Some(self.token.clone().into());
        config.default_retry = false;
        Ok(kube::Client::try_from(config)?)
    }

    /// Writes a kubeconfig for CLI processes that talk through the proxy.
    pub fn write_kubeconfig(&self, path: &Path) -> anyhow::Result<()> {
        let doc = serde_json::json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "proxy",
            "clusters": [{ "name": "proxy", "cluster": { "server": self.url() } }],
            "users": [{ "name": "admin", "user": { "token": self.token } }],
            "contexts": [{ "name": "proxy", "context": { "cluster": "proxy", "user": "admin" } }],
        });
        std::fs::write(path, serde_json::to_vec(&doc)?)?;
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The CA of the shared control plane, from its kubeconfig.
fn kubeconfig_ca() -> anyhow::Result<Vec<u8>> {
    let path = testkit::plane::kubeconfig()?;
    let kc = Kubeconfig::read_from(&path)?;
    let cluster = kc
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .context("kubeconfig without a cluster")?;
    let ca_path = cluster
        .certificate_authority
        .as_ref()
        .context("kubeconfig without a CA path")?;
    Ok(std::fs::read(ca_path)?)
}

type Body = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

/// A whole response body.
fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

async fn handle(
    st: Arc<State>,
    socket: Arc<TcpSocket>,
    req: Request<Incoming>,
) -> Result<Response<Body>, std::io::Error> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let key = classify(&method, &path, &query);
    let mutating = matches!(method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE");
    let Some((headers, body)) = pass::split(req).await else {
        return Ok(bad_gateway());
    };
    let content_type = pass::content_type(&headers);
    let slot = {
        let mut log = lock(&st.log);
        log.push(Received {
            kind: key.clone(),
            path: path.clone(),
            mutating,
            forwarded: false,
            conditional: mutating && precondition::on_version(&method, content_type, &body),
            at: st.started.elapsed(),
            took: None,
        });
        log.len() - 1
    };
    let nth_of_key = {
        let mut counts = lock(&st.counts);
        let c = counts.entry(key.clone()).or_default();
        *c += 1;
        *c
    };
    if *st.frozen.borrow() {
        return std::future::pending().await;
    }
    if method == "GET"
        && lock(&st.hung_reads)
            .iter()
            .any(|p| path.contains(p.as_str()))
    {
        return std::future::pending().await;
    }
    let held = lock(&st.holds).remove(&(key.clone(), nth_of_key));
    if let Some(held) = held {
        return Ok(hold(st, held, slot, headers, body, (method, path, query)).await);
    }
    let fault = if mutating {
        let n = st.mutations.fetch_add(1, Ordering::SeqCst) + 1;
        lock(&st.armed).remove(&n)
    } else {
        None
    };
    let fault = fault.or_else(|| lock(&st.armed_on).remove(&(key, nth_of_key)));
    if let Some(Fault::Status { code, retry_after }) = &fault {
        return Ok(status_response(*code, *retry_after));
    }
    match &fault {
        Some(Fault::Reset) => {
            // The connection ends when this error reaches hyper; with a zero linger the
            // last close sends RST.
            socket.set_zero_linger()?;
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "connection reset by the test proxy",
            ));
        }
        Some(Fault::Refuse(d)) => {
            let _ = st.refuse.send((*d, None));
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the test proxy stopped accepting",
            ));
        }
        Some(Fault::Hang) => return std::future::pending().await,
        _ => {}
    }
    if let Some(e) = lock(&st.log).get_mut(slot) {
        e.forwarded = true;
    }
    let resp = forward(&st, &headers, body, &method, &path, &query).await;
    if let Some(e) = lock(&st.log).get_mut(slot) {
        e.took = Some(st.started.elapsed().saturating_sub(e.at));
    }
    if *st.frozen.borrow() {
        return std::future::pending().await;
    }
    match fault {
        Some(Fault::DropResponse) => Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "response dropped by the test proxy",
        )),
        Some(Fault::Delay(d)) => {
            tokio::time::sleep(d).await;
            Ok(resp)
        }
        _ => Ok(resp),
    }
}

async fn forward(
    st: &Arc<State>,
    headers: &hyper::HeaderMap,
    body: Bytes,
    method: &str,
    path: &str,
    query: &str,
) -> Response<Body> {
    let url = if query.is_empty() {
        format!("{}{path}", st.base)
    } else {
        format!("{}{path}?{query}", st.base)
    };
    // The response goes back without its Content-Encoding, so ask upstream for identity.
    let Some(out) = pass::upstream_request(
        &st.upstream,
        url,
        method,
        headers,
        body,
        &["accept-encoding"],
    ) else {
        return bad_gateway();
    };
    let Ok(resp) = out.send().await else {
        return bad_gateway();
    };
    let status = resp.status().as_u16();
    let ctype = resp.headers().get("content-type").cloned();
    let mut b = Response::builder().status(status);
    if let Some(c) = ctype {
        b = b.header("content-type", c.as_bytes());
    }
    if query.contains("watch=true") || query.contains("watch=1") {
        // A watch streams its events as they come: pass each chunk on at once (none while
        // the proxy is frozen).
        let frozen = st.frozen.subscribe();
        let chunks = futures::stream::unfold(Some(resp), move |resp| {
            let frozen = frozen.clone();
            async move {
                let mut resp = resp?;
                let next = resp.chunk().await;
                if *frozen.borrow() {
                    return std::future::pending().await;
                }
                match next {
                    Ok(Some(c)) => Some((Ok(hyper::body::Frame::data(c)), Some(resp))),
                    Ok(None) => None,
                    Err(e) => Some((Err(std::io::Error::other(e)), None)),
                }
            }
        });
        return b
            .body(http_body_util::StreamBody::new(chunks).boxed())
            .unwrap_or_else(|_| bad_gateway());
    }
    let Ok(bytes) = resp.bytes().await else {
        return bad_gateway();
    };
    b.body(full(bytes)).unwrap_or_else(|_| bad_gateway())
}

/// An injected answer: `code` with a Kubernetes `Status` body (and `Retry-After` seconds).
pub(crate) fn status_response(code: u16, retry_after: Option<u32>) -> Response<Body> {
    let mut resp = Response::builder()
        .status(code)
        .header("content-type", "application/json");
    if let Some(s) = retry_after {
        resp = resp.header("retry-after", s.to_string());
    }
    let body = format!(
        r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected by the test proxy","code":{code}}}"#
    );
    resp.body(full(Bytes::from(body)))
        .unwrap_or_else(|_| bad_gateway())
}

fn bad_gateway() -> Response<Body> {
    let mut r = Response::new(full(Bytes::from_static(b"upstream failed")));
    *r.status_mut() = StatusCode::BAD_GATEWAY;
    r
}
