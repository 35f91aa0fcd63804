//! Evidence from the CI system: ask a [`LivenessSource`] about the Lease holder, and count
//! its "finished" only when the Lease kept the version read before the question (no renewal
//! since) and then stays unwritten for a full duration, as without evidence: CI evidence tells
//! "gone" from "slow", it never shortens the wait (GitHub reports an attempt completed when its
//! runner lost GitHub but not the cluster, and the holder may still renew). While the source
//! says the run is still going, ask again until `wait` is spent.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::Api;

use super::plan::HolderEvidence;
use super::watch::{WatchProgress, WatchTiming, watch_lease};
use crate::FenceError;
use crate::api::{error, get_retrying};
use crate::liveness::{LivenessSource, Verdict};

/// Where and how long to ask.
pub(crate) struct CiAsk<'a> {
    pub api: &'a Api<KubeLease>,
    pub name: &'a str,
    pub target: &'a str,
    pub source: &'a Arc<dyn LivenessSource>,
    pub wait: Duration,
    pub poll_every: Duration,
}

/// Asks about `holder`, whose Lease was read at `resource_version`; a "finished" answer is
/// [`HolderEvidence::Reported`] only once the Lease then stayed unwritten for `duration`.
pub(crate) async fn ask_ci(
    ask: &CiAsk<'_>,
    watched: (String, String),
    duration: Duration,
    timing: WatchTiming,
    progress: &mut (dyn FnMut(&WatchProgress) + Send),
) -> Result<HolderEvidence, FenceError> {
    let answer = ask_once(ask, watched, progress).await?;
    let HolderEvidence::Reported {
        holder,
        resource_version,
        evidence,
    } = answer
    else {
        return Ok(answer);
    };
    let watched = (holder, resource_version);
    Ok(
        match watch_lease(
            ask.api, ask.name, ask.target, watched, duration, timing, progress,
        )
        .await?
        {
            HolderEvidence::Unchanged {
                holder,
                resource_version,
                ..
            } => HolderEvidence::Reported {
                holder,
                resource_version,
                evidence,
            },
            other => other,
        },
    )
}

/// Asks until the source answers for good (or `ask.wait` is spent).
async fn ask_once(
    ask: &CiAsk<'_>,
    (holder, resource_version): (String, String),
    progress: &mut (dyn FnMut(&WatchProgress) + Send),
) -> Result<HolderEvidence, FenceError> {
    let start = tokio::time::Instant::now();
    loop {
        let verdict = ask.source.check(&holder).await;
        let read = get_retrying(
            ask.api,
            ask.name,
            &ask.target,
            crate::api::READ_RETRY_BUDGET,
        )
        .await
        .map_err(|e| {
            error(
                "get",
                "leases.coordination.k8s.io".into(),
                ask.target.into(),
                e,
            )
        })?;
        if read
            .as_ref()
            .and_then(|l| l.metadata.resource_version.as_deref())
            != Some(resource_version.as_str())
        {
            return Ok(HolderEvidence::Changed {
                holder,
                after: start.elapsed(),
            });
        }
        match verdict {
            Verdict::Finished(e) => {
                return Ok(HolderEvidence::Reported {
                    evidence: format!(
                        "{e}, and lease unchanged (resourceVersion {resource_version}) since"
                    ),
                    holder,
                    resource_version,
                });
            }
            Verdict::NotProved {
                may_change: true,
                why,
            } if start.elapsed() + ask.poll_every < ask.wait => {
                progress(&WatchProgress {
                    holder: holder.clone(),
                    resource_version: resource_version.clone(),
                    unchanged_for: start.elapsed(),
                    duration: ask.wait,
                });
                tracing::debug!(%holder, %why, "CI run not finished yet; asking again");
                tokio::time::sleep(ask.poll_every).await;
            }
            Verdict::NotProved { why, .. } => return Ok(HolderEvidence::NotProved { holder, why }),
        }
    }
}
