//! After a release, the Ready wait: request a reconcile of each released object (a JSON patch
//! that tests only its uid and that no other run fenced it), then wait until each is Ready for
//! its generation with that request handled. Everything was handed back before this starts:
//! its outcome is a report ([`ReadyWait`]), never a failure to release.

use std::time::Duration;

use flux_fence::{ErrorClass, ObjectRef};
use kube::Client;
use kube::api::Patch;
use serde_json::{Value, json};

use super::new_nonce;
use crate::cancel::Cancel;
use crate::flux::{self, REQUESTED_AT_ANNOTATION};
use crate::io::{self, Timing};
use crate::object;
use crate::readiness::{Readiness, readiness};

/// How many times a reconcile request is sent at most (each after a read of the object).
const REQUEST_ATTEMPTS: u32 = 6;
/// The pause before the second request; doubled before each later one, up to
/// [`REQUEST_BACKOFF_MAX`].
const REQUEST_BACKOFF_START: Duration = Duration::from_millis(100);
/// The longest pause between two requests.
const REQUEST_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// What the Ready wait after a release came to. Everything was handed back before it began.
#[derive(Debug, Clone, PartialEq)]
#[must_use = "an object that is not Ready is in the report"]
#[non_exhaustive]
pub enum ReadyWait {
    /// Every released object is Ready (or no wait was asked for, or nothing needed one).
    Ready,
    /// These were not Ready within the budget, each with its last condition as read.
    NotReady(Vec<NotReady>),
    /// The caller's cancel stopped the wait; these were not seen Ready yet.
    Stopped(Vec<ObjectRef>),
}

impl ReadyWait {
    /// The kind of this outcome when it is not [`ReadyWait::Ready`]:
    /// [`ErrorClass::NotReady`] or [`ErrorClass::Cancelled`].
    #[must_use]
    pub fn class(&self) -> Option<ErrorClass> {
        match self {
            Self::Ready => None,
            Self::NotReady(_) => Some(ErrorClass::NotReady),
            Self::Stopped(_) => Some(ErrorClass::Cancelled),
        }
    }
}

/// A released object that was not Ready in time, and why as last read.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NotReady {
    /// The object.
    pub object: ObjectRef,
    /// Its last condition, in words (`Ready=False (HealthCheckFailed)`, `no Ready condition`,
    /// `the reconcile request failed: ...`).
    pub last: String,
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.object, self.last)
    }
}

/// Whether (and how) to request a reconcile of a released object as read now.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ReconcileRequest {
    /// Send this JSON patch.
    Send(Value),
    /// Do not: the object is gone, was recreated, or another run fenced it since.
    Skip(&'static str),
}

/// `key` as one JSON Pointer token (RFC 6901: `~` is `~0`, `/` is `~1`).
fn token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Decides the reconcile request after our release of the object of `uid`, on the object as
/// read now (`None`: gone). Any owner annotation is another run's: ours was just removed.
///
/// The request is a JSON patch that tests only what it must: the uid (a recreated object is
/// not ours to poke), and that no owner annotation is there (another run that fenced it since
/// keeps its own `requestedAt`: its mark). No resourceVersion: the controller's status writes
/// cannot make it fail. "No owner annotation" is a `test` for `null`: it can never pass on an
/// object carrying one (a string); on a missing key the API server's JSON patch passes it.
/// Without any annotation the map itself is tested absent and added whole.
pub(crate) fn decide_reconcile_request(
    read: Option<&Value>,
    uid: &str,
    owner_key: &str,
    nonce: &str,
) -> ReconcileRequest {
    let Some(v) = read else {
        return ReconcileRequest::Skip("gone");
    };
    if v.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid) {
        return ReconcileRequest::Skip("recreated");
    }
    let annotations = v
        .pointer("/metadata/annotations")
        .and_then(Value::as_object);
    if annotations.is_some_and(|a| a.contains_key(owner_key)) {
        return ReconcileRequest::Skip("fenced by another run since the release");
    }
    let uid_test = json!({ "op": "test", "path": "/metadata/uid", "value": uid });
    let ops = if annotations.is_some() {
        let owner = format!("/metadata/annotations/{}", token(owner_key));
        let at = format!("/metadata/annotations/{}", token(REQUESTED_AT_ANNOTATION));
        json!([
            uid_test,
            { "op": "test", "path": owner, "value": null },
            { "op": "add", "path": at, "value": nonce },
        ])
    } else {
        json!([
            uid_test,
            { "op": "test", "path": "/metadata/annotations", "value": null },
            { "op": "add", "path": "/metadata/annotations",
              "value": { REQUESTED_AT_ANNOTATION: nonce } },
        ])
    };
    ReconcileRequest::Send(ops)
}

/// What to do after a reconcile request was answered with `status` (`None`: no answer, a
/// transport error) on attempt `attempt` (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterRequest {
    /// Read the object again, decide again, and send after this pause.
    Again(Duration),
    /// The object is gone: nothing to request.
    Gone,
    /// Give up: the request is reported as failed.
    GiveUp,
}

/// The decision after a failed reconcile request: a failed `test` (422: recreated, fenced, or
/// its annotations appeared), a conflict, throttling, a server error or no answer are read
/// again after a bounded, doubling pause; 404 is gone; anything else (403, a bad request)
/// gives up, as does the last attempt.
pub(crate) fn after_request(status: Option<u16>, attempt: u32) -> AfterRequest {
    if status == Some(404) {
        return AfterRequest::Gone;
    }
    let again = match status {
        None | Some(409 | 422 | 429) => true,
        Some(s) => s >= 500,
    };
    if !again || attempt >= REQUEST_ATTEMPTS {
        return AfterRequest::GiveUp;
    }
    let doubled = REQUEST_BACKOFF_START.saturating_mul(1 << (attempt - 1).min(16));
    AfterRequest::Again(doubled.min(REQUEST_BACKOFF_MAX))
}

/// The last condition of `obj` in words, for a [`NotReady`].
pub(crate) fn last_condition(obj: &Value, nonce: &str) -> String {
    if flux::suspended(obj) {
        return "still suspended".into();
    }
    let conds = flux::conditions(obj);
    let mut words = match flux::condition(&conds, "Ready") {
        Some(c) if c.reason.is_empty() => format!("Ready={}", c.status),
        Some(c) => format!("Ready={} ({})", c.status, c.reason),
        None => "no Ready condition".into(),
    };
    if flux::last_handled(obj) != Some(nonce) {
        words.push_str("; the reconcile request not handled yet");
    }
    words
}

/// Requests a reconcile of each released object (`(object, uid)`), then waits until each is
/// Ready for its current generation with that request handled, all within `timing.timeout`.
/// An object another run fenced since the release, or that is gone or recreated, is not
/// waited for. A stop of `cancel` ends the wait at once.
pub(super) async fn wait_ready_after_release(
    client: &Client,
    released: &[(ObjectRef, String)],
    owner_key: &str,
    timing: Timing,
    cancel: &Cancel,
) -> ReadyWait {
    let deadline = tokio::time::Instant::now() + timing.timeout;
    let mut waiting: Vec<(ObjectRef, String)> = Vec::new();
    let mut failed = Vec::new();
    for (obj, uid) in released {
        if cancel.is_stopped() {
            break;
        }
        let nonce = new_nonce();
        let sent = cancel
            .unless_stopped(request(client, obj, uid, owner_key, &nonce, deadline))
            .await;
        match sent {
            None => break,
            Some(Ok(true)) => waiting.push((obj.clone(), nonce)),
            Some(Ok(false)) => {}
            Some(Err(last)) => failed.push(NotReady {
                object: obj.clone(),
                last,
            }),
        }
    }
    if cancel.is_stopped() {
        return ReadyWait::Stopped(released.iter().map(|(o, _)| o.clone()).collect());
    }
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let last = std::sync::Mutex::new(Vec::<(ObjectRef, String)>::new());
    let pending = std::sync::Mutex::new(waiting.clone());
    let poll = io::poll_soon(Timing::new(timing.interval, left), || async {
        let now: Vec<_> = io::lock(&pending).clone();
        let mut still = Vec::new();
        let mut seen = Vec::new();
        for (obj, nonce) in now {
            match object::get_json(client, &obj).await {
                Ok(v) if readiness(&v, Some(&nonce)) == Readiness::Ready => {}
                Ok(v) => {
                    seen.push((obj.clone(), last_condition(&v, &nonce)));
                    still.push((obj, nonce));
                }
                Err(e) => {
                    seen.push((
                        obj.clone(),
                        format!("not read: {}", flux_fence::one_line(&e)),
                    ));
                    still.push((obj, nonce));
                }
            }
        }
        let done = still.is_empty();
        *io::lock(&pending) = still;
        *io::lock(&last) = seen;
        done.then_some(())
    });
    if cancel.unless_stopped(poll).await.is_none() {
        let left = io::lock(&pending).iter().map(|(o, _)| o.clone()).collect();
        return ReadyWait::Stopped(left);
    }
    let pending = pending
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let last = last
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for (obj, _) in pending {
        let why = last
            .iter()
            .find(|(o, _)| *o == obj)
            .map_or_else(|| "not read in time".to_string(), |(_, w)| w.clone());
        failed.push(NotReady {
            object: obj,
            last: why,
        });
    }
    if failed.is_empty() {
        ReadyWait::Ready
    } else {
        ReadyWait::NotReady(failed)
    }
}

/// Sends the reconcile request of `obj` ([`decide_reconcile_request`], [`after_request`]):
/// `Ok(true)` sent, `Ok(false)` not to be sent (gone, recreated, fenced by another run), or
/// why it failed.
async fn request(
    client: &Client,
    obj: &ObjectRef,
    uid: &str,
    owner_key: &str,
    nonce: &str,
    deadline: tokio::time::Instant,
) -> Result<bool, String> {
    let api = object::api(client, obj);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let read = object::get_json(client, obj).await;
        let read = match read {
            Ok(v) => Some(v),
            Err(kube::Error::Api(e)) if e.code == 404 => None,
            Err(e) => {
                let status = match &e {
                    kube::Error::Api(s) => Some(s.code),
                    _ => None,
                };
                match after_request(status, attempt) {
                    AfterRequest::Again(pause)
                        if tokio::time::Instant::now() + pause < deadline =>
                    {
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                    _ => return Err(format!("not read: {}", flux_fence::one_line(&e))),
                }
            }
        };
        let patch = match decide_reconcile_request(read.as_ref(), uid, owner_key, nonce) {
            ReconcileRequest::Send(p) => p,
            ReconcileRequest::Skip(why) => {
                tracing::info!(object = %obj, why, "no reconcile requested after resume");
                return Ok(false);
            }
        };
        let sent = api
            .patch(
                &obj.name,
                &flux_fence::api::patch_params(),
                &Patch::<()>::Json(serde_json::from_value(patch).map_err(|e| e.to_string())?),
            )
            .await;
        let Err(e) = sent else {
            return Ok(true);
        };
        let status = match &e {
            kube::Error::Api(s) => Some(s.code),
            _ => None,
        };
        match after_request(status, attempt) {
            AfterRequest::Gone => return Ok(false),
            AfterRequest::Again(pause) if tokio::time::Instant::now() + pause < deadline => {
                tracing::debug!(object = %obj, attempt, "the reconcile request is sent again");
                tokio::time::sleep(pause).await;
            }
            _ => {
                return Err(format!(
                    "the reconcile request failed: {}",
                    flux_fence::one_line(&e)
                ));
            }
        }
    }
}

mod gate;
pub(super) use gate::{both, wait_available};

#[cfg(test)]
mod tests;
