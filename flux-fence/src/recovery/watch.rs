//! Watching the Lease on our own monotonic clock: a holder is judged gone only when the
//! Lease's `resourceVersion` stays the same for a full lease duration while we look. No wall
//! clock is compared with the holder's `renewTime`, so a recovering machine whose clock runs
//! ahead cannot mistake a live holder for a gone one.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::Api;

use super::plan::HolderEvidence;
use crate::FenceError;
use crate::api::{error, get_retrying};

/// One step of the watch, decided from the version first seen and the one just read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum WatchStep {
    /// Unchanged, but not yet for a full duration: read again.
    Continue,
    /// The Lease changed (another version, another holder, or deleted).
    Changed,
    /// Unchanged by a read sent a full duration after the first read returned.
    Unchanged,
}

/// Decides one watch step. `sent_after` is how long after the first read *returned* this
/// read was *sent* (both on a monotonic clock): the Lease then provably kept `first` for at
/// least that long, as resource versions never go back.
#[must_use]
pub(crate) fn watch_step(
    first: &str,
    now: Option<&str>,
    sent_after: Duration,
    duration: Duration,
) -> WatchStep {
    match now {
        Some(rv) if rv == first && sent_after >= duration => WatchStep::Unchanged,
        Some(rv) if rv == first => WatchStep::Continue,
        _ => WatchStep::Changed,
    }
}

/// Progress of a watch, reported about every `progress_every`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchProgress {
    /// The Lease holder watched.
    pub holder: String,
    /// The version watched.
    pub resource_version: String,
    /// How long it has stayed unchanged so far.
    pub unchanged_for: Duration,
    /// How long it must stay unchanged (the Lease's duration).
    pub duration: Duration,
}

/// How a watch reads and reports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WatchTiming {
    pub poll_every: Duration,
    pub progress_every: Duration,
}

/// Watches the Lease held by `holder` at `resource_version` for `duration`.
pub(crate) async fn watch_lease(
    api: &Api<KubeLease>,
    name: &str,
    target: &str,
    (holder, resource_version): (String, String),
    duration: Duration,
    timing: WatchTiming,
    progress: &mut (dyn FnMut(&WatchProgress) + Send),
) -> Result<HolderEvidence, FenceError> {
    let start = tokio::time::Instant::now();
    let mut next_progress = start + timing.progress_every;
    loop {
        let deadline = start + duration;
        let wake = (tokio::time::Instant::now() + timing.poll_every).min(deadline);
        tokio::time::sleep_until(wake.max(tokio::time::Instant::now())).await;
        let sent = tokio::time::Instant::now();
        let read = get_retrying(api, name, &target, crate::api::READ_RETRY_BUDGET)
            .await
            .map_err(|e| error("get", "leases.coordination.k8s.io".into(), target.into(), e))?;
        let now_rv = read
            .as_ref()
            .and_then(|l| l.metadata.resource_version.as_deref());
        match watch_step(&resource_version, now_rv, sent - start, duration) {
            WatchStep::Changed => {
                return Ok(HolderEvidence::Changed {
                    holder,
                    after: start.elapsed(),
                });
            }
            WatchStep::Unchanged => {
                return Ok(HolderEvidence::Unchanged {
                    holder,
                    resource_version,
                    watched: sent - start,
                });
            }
            WatchStep::Continue => {}
        }
        if sent >= next_progress {
            next_progress += timing.progress_every;
            progress(&WatchProgress {
                holder: holder.clone(),
                resource_version: resource_version.clone(),
                unchanged_for: sent - start,
                duration,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gone_only_after_a_full_duration_at_the_same_version() {
        let d = Duration::from_mins(1);
        let s = Duration::from_secs;
        let table = [
            ("7", Some("7"), s(0), WatchStep::Continue),
            ("7", Some("7"), s(59), WatchStep::Continue),
            ("7", Some("7"), s(60), WatchStep::Unchanged),
            ("7", Some("7"), s(3600), WatchStep::Unchanged),
            ("7", Some("8"), s(1), WatchStep::Changed),
            ("7", Some("8"), s(60), WatchStep::Changed),
            ("7", None, s(60), WatchStep::Changed),
        ];
        for (first, now, after, want) in table {
            assert_eq!(
                watch_step(first, now, after, d),
                want,
                "{first} -> {now:?} after {after:?}"
            );
        }
    }
}
