//! The wait's reads of the Lease: one read bounded by the wait (not only by kube's request
//! timeout), and a watch for its next change bounded by the slice.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::api::{Api, WatchEvent, WatchParams};

use super::stopped;
use crate::cancel::Cancel;
use crate::session::SessionError;

/// The least time one read of the Lease is given, even with the budget spent: the read that
/// decides the wait's end gets an answer from a server that is merely slow.
const READ_FLOOR: Duration = Duration::from_secs(1);

/// How long one read of the Lease may take (`left`: what is left of the budget, `every`: the
/// wait's read interval): the lesser of the two, at least [`READ_FLOOR`]. A read that hangs
/// (a wedged connection) is then a transient failure, not a wait past the budget: kube's own
/// request timeout knows nothing of the wait.
#[must_use]
pub(super) fn read_limit(left: Duration, every: Duration) -> Duration {
    left.min(every).max(READ_FLOOR)
}

/// What reading the Lease came to.
#[derive(Debug)]
pub(super) enum LeaseRead {
    /// Read (the Lease, or none), and when the read that answered was sent.
    Got(Box<Option<KubeLease>>, Instant),
    /// No answer within its limit, which took what was left of the budget.
    Hung,
    /// Any other failure, or a transient one with the budget spent.
    Failed,
}

/// How a read of the Lease failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    /// No answer within its limit (a hung connection).
    NoAnswer,
    /// Refused, broken, 429 or 5xx.
    Transient,
    /// Anything else (403, a bad answer).
    Other,
}

/// What a failed read comes to, `left` of the budget when it was sent and `limit` given to it:
/// `None` to read again while the budget lasts (a hang or a transient failure); a hang that
/// took the rest of the budget is [`LeaseRead::Hung`]; anything else is the session's to
/// report ([`LeaseRead::Failed`]).
#[must_use]
pub(super) fn after_failure(
    failure: Failure,
    left: Duration,
    limit: Duration,
) -> Option<LeaseRead> {
    match failure {
        Failure::NoAnswer if left <= limit => Some(LeaseRead::Hung),
        Failure::NoAnswer => None,
        Failure::Transient if !left.is_zero() => None,
        Failure::Transient | Failure::Other => Some(LeaseRead::Failed),
    }
}

/// The wait's reads of one Lease.
pub(super) struct LeaseReader<'a> {
    pub(super) api: &'a Api<KubeLease>,
    pub(super) name: &'a str,
    pub(super) cancel: &'a Cancel,
    /// The wait's read interval: no read is given longer.
    pub(super) every: Duration,
}

impl LeaseReader<'_> {
    /// Reads the Lease, each read given [`read_limit`] to answer (`left`: what is left of the
    /// budget), again after a hang or a transient failure while the budget lasts, each time
    /// after a backoff — an API server restarting or a connection hung must not eject a
    /// queued run. `Err` at a stop.
    pub(super) async fn read(
        &self,
        left: impl Fn() -> Duration,
    ) -> Result<LeaseRead, SessionError> {
        let mut failed = 0;
        loop {
            let (sent, left) = (Instant::now(), left());
            let limit = read_limit(left, self.every);
            let read = self
                .cancel
                .unless_stopped(tokio::time::timeout(limit, self.api.get_opt(self.name)))
                .await
                .ok_or_else(stopped)?;
            let failure = match read {
                Ok(Ok(read)) => return Ok(LeaseRead::Got(Box::new(read), sent)),
                Err(_) => Failure::NoAnswer,
                Ok(Err(e)) if flux_fence::api::transient_read(&e) => {
                    tracing::warn!(lease = self.name, error = %e, "reading the lease failed");
                    Failure::Transient
                }
                Ok(Err(_)) => Failure::Other,
            };
            if let Some(end) = after_failure(failure, left, limit) {
                return Ok(end);
            }
            if failure == Failure::NoAnswer {
                tracing::warn!(lease = self.name, limit = ?limit, "reading the lease got no answer in time; reading it again");
            }
            let pause = flux_fence::api::read_backoff(failed).min(left);
            failed += 1;
            self.cancel
                .unless_stopped(tokio::time::sleep(pause))
                .await
                .ok_or_else(stopped)?;
        }
    }
}

/// Returns when the Lease changed after `version` (a watch event), or after `slice` at the
/// latest; the caller reads it again either way. A watch that cannot be opened waits out a
/// short slice instead (the caller's read is the check).
pub(super) async fn changed(api: &Api<KubeLease>, name: &str, version: &str, slice: Duration) {
    // Opening the watch is bounded too: a hung request must not outlast the slice.
    let _ = tokio::time::timeout(
        slice + Duration::from_secs(1),
        watch_once(api, name, version, slice),
    )
    .await;
}

/// [`changed`]'s watch, unbounded by itself but for the server's `timeoutSeconds`.
async fn watch_once(api: &Api<KubeLease>, name: &str, version: &str, slice: Duration) {
    let secs = u32::try_from(slice.as_secs()).unwrap_or(u32::MAX).max(1);
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(secs);
    let Ok(stream) = api.watch(&params, version).await else {
        tokio::time::sleep(slice.min(Duration::from_secs(1))).await;
        return;
    };
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(WatchEvent::Bookmark(_)) => {}
            _ => return,
        }
    }
}
