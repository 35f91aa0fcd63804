//! The sender of Flux-format events: one HTTP client, one background POST per event within
//! [`BOUND`], no retry (see [`super`]).

use std::time::{Duration, SystemTime};

use flux_fence::ObjectRef;
use tokio::task::JoinSet;

use super::event::{Involved, Kind, Notice};

/// The bound of one POST: to connect, and to receive the answer.
pub const BOUND: Duration = Duration::from_secs(2);

/// Sends the events of one run (see the module docs).
#[derive(Debug)]
pub struct Notifier {
    url: reqwest::Url,
    http: reqwest::Client,
    holder: Option<String>,
    reason: Option<String>,
    pending: JoinSet<Delivery>,
}

/// How one POST ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    Accepted,
    /// `429`: notification-controller already had this object and message (its rate limit).
    Duplicate,
    Failed,
}

impl Notifier {
    /// A notifier posting to `url`, with its one HTTP client.
    pub fn new(url: reqwest::Url) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .connect_timeout(BOUND)
            .timeout(BOUND)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("flux-handoff/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("HTTP client: {}", flux_fence::one_line(&e)))?;
        Ok(Self {
            url,
            http,
            holder: None,
            reason: None,
            pending: JoinSet::new(),
        })
    }

    /// The holder and reason every later event names.
    pub fn session(&mut self, holder: &str, reason: Option<&str>) {
        self.holder = Some(holder.to_string());
        self.reason = reason.map(str::to_string);
    }

    /// Sends one event about `object` in the background. Objects that are not Flux objects,
    /// and events before the holder is known, are not sent.
    pub fn send(&mut self, kind: Kind, object: &ObjectRef, detail: Option<&str>) {
        let Some(holder) = self.holder.clone() else {
            tracing::debug!("flux event {} for {object} not sent", kind.reason());
            return;
        };
        let reason = self.reason.clone();
        self.send_for(kind, object, &holder, reason.as_deref(), detail);
    }

    /// Sends one event about `object` naming `holder` and `reason` (an event about another
    /// run's pause, as `fences --overdue` sends), in the background. Objects that are not Flux
    /// objects are not sent.
    pub fn send_for(
        &mut self,
        kind: Kind,
        object: &ObjectRef,
        holder: &str,
        reason: Option<&str>,
        detail: Option<&str>,
    ) {
        let Some(involved) = Involved::of(object) else {
            tracing::debug!("flux event {} for {object} not sent", kind.reason());
            return;
        };
        let notice = Notice {
            kind,
            object: &involved,
            holder,
            reason,
            detail,
        };
        let body = notice.to_json(SystemTime::now());
        let what = format!("{} for {object}", kind.reason());
        let post = self
            .http
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send();
        self.pending
            .spawn(async move { delivered(&what, post.await) });
    }

    /// Waits for the POSTs in flight (each within [`BOUND`]); returns (accepted, failed).
    pub async fn flush(mut self) -> (usize, usize) {
        let (mut accepted, mut failed) = (0, 0);
        // Each POST ends within its bound; this outer one only guards against a stuck task.
        let all = async {
            while let Some(done) = self.pending.join_next().await {
                match done {
                    Ok(Delivery::Accepted | Delivery::Duplicate) => accepted += 1,
                    _ => failed += 1,
                }
            }
        };
        if tokio::time::timeout(BOUND * 2, all).await.is_err() {
            failed += self.pending.len();
            self.pending.abort_all();
        }
        (accepted, failed)
    }
}

/// Logs how a POST ended; the URL is never part of the line.
fn delivered(what: &str, r: Result<reqwest::Response, reqwest::Error>) -> Delivery {
    match r {
        Ok(resp) if resp.status().is_success() => {
            tracing::debug!("flux event {what} delivered ({})", resp.status());
            Delivery::Accepted
        }
        Ok(resp) if resp.status() == reqwest::StatusCode::TOO_MANY_REQUESTS => {
            tracing::info!("flux event {what} dropped by notification-controller as a duplicate");
            Delivery::Duplicate
        }
        Ok(resp) => {
            tracing::warn!(
                "flux event not delivered ({what}): the events address answered {}; one \
                 attempt, no retry",
                resp.status()
            );
            Delivery::Failed
        }
        Err(e) => {
            tracing::warn!(
                "flux event not delivered ({what}): {}; one attempt within {}s, no retry",
                flux_fence::one_line(&e.without_url()),
                BOUND.as_secs()
            );
            Delivery::Failed
        }
    }
}
