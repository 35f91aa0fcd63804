//! Holding one request until the test forwards it ([`crate::Proxy::hold_on`]): a late write,
//! sent on after its client gave up.

use std::sync::Arc;

use bytes::Bytes;
use hyper::Response;

use crate::{Body, State, bad_gateway, forward, lock};

/// A request held by [`Proxy::hold_on`]: it waits, unforwarded, until [`Held::forward`].
#[derive(Debug, Clone)]
pub struct Held(pub(crate) Arc<HoldSlot>);

#[derive(Debug)]
pub(crate) struct HoldSlot {
    pub(crate) arrived: tokio::sync::watch::Sender<bool>,
    pub(crate) go: tokio::sync::watch::Sender<bool>,
    pub(crate) status: tokio::sync::watch::Sender<Option<u16>>,
    /// Answer the client at once with this status ([`crate::Proxy::hold_answering`]).
    pub(crate) answer: Option<u16>,
}

impl Held {
    /// Resolves once the held request has arrived at the proxy.
    pub async fn arrived(&self) {
        let mut rx = self.0.arrived.subscribe();
        let _ = rx.wait_for(|a| *a).await;
    }

    /// Whether it has arrived.
    #[must_use]
    pub fn has_arrived(&self) -> bool {
        *self.0.arrived.borrow()
    }

    /// Sends it on to the API server now, whether or not its client still waits for it.
    pub fn forward(&self) {
        self.0.go.send_replace(true);
    }

    /// The status the API server answered the forwarded request with (502 when it could not
    /// be reached).
    pub async fn answered(&self) -> u16 {
        let mut rx = self.0.status.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(s) => s.unwrap_or(502),
            Err(_) => 502,
        }
    }
}

/// Waits for the test to forward a held request, then forwards it from a task of its own (so
/// it reaches the server even if its client hung up meanwhile) and answers what came back.
pub(crate) async fn hold(
    st: Arc<State>,
    held: Held,
    slot: usize,
    headers: hyper::HeaderMap,
    body: Bytes,
    (method, path, query): (String, String, String),
) -> Response<Body> {
    held.0.arrived.send_replace(true);
    let answer = held.0.answer;
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut go = held.0.go.subscribe();
        let _ = go.wait_for(|g| *g).await;
        if let Some(e) = lock(&st.log).get_mut(slot) {
            e.forwarded = true;
        }
        let resp = forward(&st, &headers, body, &method, &path, &query).await;
        held.0.status.send_replace(Some(resp.status().as_u16()));
        let _ = tx.send(resp);
    });
    match answer {
        // The client is told now (a gateway's 504: "may still be processing"); the request
        // goes on later, from the task above, when the test says so.
        Some(code) => crate::status_response(code, None),
        None => rx.await.unwrap_or_else(|_| bad_gateway()),
    }
}
