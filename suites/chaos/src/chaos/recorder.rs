//! An ordered request log in front of the fault-injecting proxy.
//!
//! [`fault_proxy::Proxy`] counts requests by kind but keeps no order; the chaos scenarios need
//! the order (the mutation points of a clean run, and "no write repeated without a re-read in
//! between"). The recorder is a plain-HTTP pass-through on loopback: CLI -> recorder -> proxy ->
//! API server. A response the proxy dropped is dropped here too (the connection is closed).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use hyper::Request;
use hyper::body::Incoming;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// One request as the CLI sent it, in arrival order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `verb resource[/subresource]` as [`fault_proxy::classify`] names it.
    pub kind: String,
    /// The request path (identifies the object for named requests).
    pub path: String,
    /// POST, PUT, PATCH or DELETE.
    pub mutating: bool,
    /// The status returned, or `None` when the response was lost.
    pub status: Option<u16>,
    /// A write the server applies only at the version it names
    /// ([`fault_proxy::precondition::on_version`]).
    pub conditional: bool,
}

/// Decides, for an arriving request and the log before it, whether to hold it.
pub type HoldRule = Box<dyn Fn(&[Entry], &Entry) -> bool + Send + Sync>;

/// A one-shot hold armed by [`Recorder::hold_once`]: the first request its rule picks waits
/// (before it is forwarded) until [`Hold::release`] or until the `Hold` is dropped.
#[derive(Debug)]
pub struct Hold {
    engaged: watch::Receiver<bool>,
    release: watch::Sender<bool>,
}

impl Hold {
    /// Waits until a request is held; `false` if none ever will be (the recorder is gone).
    pub async fn engaged(&mut self) -> bool {
        self.engaged.wait_for(|e| *e).await.is_ok()
    }

    /// Lets the held request (or the one still to come) through.
    pub fn release(&self) {
        self.release.send_replace(true);
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.release();
    }
}

struct Armed {
    rule: HoldRule,
    engaged: watch::Sender<bool>,
    release: watch::Receiver<bool>,
}

impl std::fmt::Debug for Armed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Armed").finish_non_exhaustive()
    }
}

type ArmedSlot = Arc<Mutex<Option<Armed>>>;

/// A running recorder; stops when dropped.
#[derive(Debug)]
pub struct Recorder {
    addr: SocketAddr,
    log: Arc<Mutex<Vec<Entry>>>,
    armed: ArmedSlot,
    task: JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Shared {
    upstream: String,
    client: reqwest::Client,
    log: Arc<Mutex<Vec<Entry>>>,
    armed: ArmedSlot,
}

impl Recorder {
    /// Starts a recorder forwarding to `upstream` (`http://127.0.0.1:<port>`).
    pub async fn start(upstream: &str) -> anyhow::Result<Self> {
        let log = Arc::new(Mutex::new(Vec::new()));
        let armed: ArmedSlot = Arc::new(Mutex::new(None));
        let shared = Arc::new(Shared {
            upstream: upstream.trim_end_matches('/').to_string(),
            client: reqwest::Client::builder().build()?,
            log: log.clone(),
            armed: armed.clone(),
        });
        let (addr, task) =
            fault_proxy::pass::serve_loopback(move |req| handle(shared.clone(), req)).await?;
        Ok(Self {
            addr,
            log,
            armed,
            task,
        })
    }

    /// Arms a one-shot hold (replacing any armed one): the first later request for which
    /// `rule(log before it, it)` is true is recorded, then waits before it is forwarded until
    /// the returned [`Hold`] releases it. Lets a scenario order its own writes against the
    /// CLI's requests without timing.
    #[must_use]
    pub fn hold_once(&self, rule: HoldRule) -> Hold {
        let (engaged_tx, engaged_rx) = watch::channel(false);
        let (release_tx, release_rx) = watch::channel(false);
        *self.armed.lock().unwrap_or_else(PoisonError::into_inner) = Some(Armed {
            rule,
            engaged: engaged_tx,
            release: release_rx,
        });
        Hold {
            engaged: engaged_rx,
            release: release_tx,
        }
    }

    /// `http://127.0.0.1:<port>`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Everything recorded so far, in order.
    #[must_use]
    pub fn entries(&self) -> Vec<Entry> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The mutating requests so far, in order.
    #[must_use]
    pub fn mutations(&self) -> Vec<Entry> {
        self.entries().into_iter().filter(|e| e.mutating).collect()
    }
}

async fn handle(
    sh: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<hyper::Response<fault_proxy::pass::PassBody>, std::io::Error> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let mutating = matches!(method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE");
    let (headers, body) = fault_proxy::pass::split(req)
        .await
        .ok_or_else(|| std::io::Error::other("the request body broke off"))?;
    let content_type = fault_proxy::pass::content_type(&headers);
    let (slot, held) = {
        let mut log = sh.log.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = Entry {
            kind: fault_proxy::classify(&method, &path, &query),
            path: path.clone(),
            mutating,
            status: None,
            conditional: mutating
                && fault_proxy::precondition::on_version(&method, content_type, &body),
        };
        let mut armed = sh.armed.lock().unwrap_or_else(PoisonError::into_inner);
        let held = if armed.as_ref().is_some_and(|a| (a.rule)(&log, &entry)) {
            armed.take().map(|a| {
                a.engaged.send_replace(true);
                a.release
            })
        } else {
            None
        };
        log.push(entry);
        (log.len() - 1, held)
    };
    if let Some(mut release) = held {
        // Released, or the Hold is gone: either way the request goes on.
        let _ = release.wait_for(|r| *r).await;
    }
    let url = if query.is_empty() {
        format!("{}{path}", sh.upstream)
    } else {
        format!("{}{path}?{query}", sh.upstream)
    };
    let out = fault_proxy::pass::upstream_request(&sh.client, url, &method, &headers, body, &[])
        .ok_or_else(|| std::io::Error::other(format!("method {method}")))?;
    // A lost upstream response stays lost: closing our connection is what the CLI sees.
    let resp = out.send().await.map_err(std::io::Error::other)?;
    let status = resp.status().as_u16();
    let mut b = hyper::Response::builder().status(status);
    for (k, v) in resp.headers() {
        if k != "content-length" && k != "transfer-encoding" && k != "connection" {
            b = b.header(k.as_str(), v.as_bytes());
        }
    }
    if let Some(e) = sh
        .log
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_mut(slot)
    {
        e.status = Some(status);
    }
    // A watch streams: buffered, its events would wait for the watch's timeout.
    let watch = query.contains("watch=true") || query.contains("watch=1");
    let body = fault_proxy::pass::pass_body(resp, watch).await?;
    b.body(body).map_err(std::io::Error::other)
}

/// Writes that were sent again to the same object without a read of it (or a list or watch of
/// its kind) in between, where the repeat was unconditional: `verb resource path` of each.
///
/// A repeat conditional on the object's version is not blind: if the first copy landed (its
/// answer lost), the version moved and the server refuses the repeat with 409, which the
/// caller must then read and judge. An unconditional repeat would apply on top of it.
#[must_use]
pub fn blind_repeats(log: &[Entry]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, e) in log.iter().enumerate() {
        if !e.mutating || e.kind.starts_with("create") {
            continue;
        }
        let verb = e.kind.split(' ').next().unwrap_or_default();
        let resource = e.kind.split(' ').nth(1).unwrap_or_default();
        for later in &log[i + 1..] {
            let reread = !later.mutating
                && (later.path == e.path
                    || later.kind == format!("list {resource}")
                    || later.kind == format!("watch {resource}"));
            if reread {
                break;
            }
            if later.mutating && later.path == e.path && later.kind.starts_with(verb) {
                if later.conditional {
                    break;
                }
                found.push(format!("{} {}", e.kind, e.path));
                break;
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::{Entry, blind_repeats};

    fn e(kind: &str, path: &str, mutating: bool) -> Entry {
        Entry {
            kind: kind.into(),
            path: path.into(),
            mutating,
            status: Some(200),
            conditional: false,
        }
    }

    fn at_version(kind: &str, path: &str) -> Entry {
        Entry {
            conditional: true,
            ..e(kind, path, true)
        }
    }

    #[test]
    fn a_write_repeated_after_a_read_is_not_blind() {
        let log = [
            e("patch k", "/k/a", true),
            e("get k", "/k/a", false),
            e("patch k", "/k/a", true),
        ];
        assert!(blind_repeats(&log).is_empty());
    }

    #[test]
    fn a_write_repeated_without_a_read_is_blind() {
        let log = [
            e("patch k", "/k/a", true),
            e("get k", "/k/b", false),
            e("patch k", "/k/a", true),
        ];
        assert_eq!(blind_repeats(&log), vec!["patch k /k/a".to_string()]);
    }

    #[test]
    fn a_repeat_at_a_version_is_not_blind_but_an_unconditional_one_after_it_is() {
        // A Lease renewal whose answer was lost, then the next renewal at the version of the
        // last answer: refused by the server if the first landed.
        let renewals = [
            at_version("update leases", "/l/x"),
            at_version("update leases", "/l/x"),
            e("get leases", "/l/x", false),
        ];
        assert!(blind_repeats(&renewals).is_empty());
        let then_blind = [
            at_version("update leases", "/l/x"),
            e("update leases", "/l/x", true),
        ];
        assert_eq!(
            blind_repeats(&then_blind),
            vec!["update leases /l/x".to_string()]
        );
    }
}
