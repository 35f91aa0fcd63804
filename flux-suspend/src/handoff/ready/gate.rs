//! After a release, a replicas gate's Deployment is "Ready" when it is available again at
//! the count given back: its status, for the current generation, reports every replica
//! updated and available. A Deployment has no Flux Ready condition and no reconcile request:
//! it is only read.

use std::fmt::Write as _;

use flux_fence::ObjectRef;
use kube::Client;
use serde_json::Value;

use super::{NotReady, ReadyWait};
use crate::cancel::Cancel;
use crate::io::{self, Timing};
use crate::object;

/// What one read of a released gate's Deployment says, decided by [`gate_available`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Available {
    /// Available at its count: done.
    Yes,
    /// Not yet: the words for a [`NotReady`] if it stays so.
    Not(String),
    /// Not ours to wait for (gone, recreated, or fenced by another run since the release).
    Skip(&'static str),
}

/// Pure: the Deployment as read now (`None`: gone), released by us at `uid`, against the
/// owner annotation `owner_key` (any value is another run's: ours was just removed).
/// Available when its status is for the current generation (`observedGeneration >=
/// generation`) and reports `spec.replicas` replicas both updated and available.
pub(crate) fn gate_available(dep: Option<&Value>, uid: &str, owner_key: &str) -> Available {
    let Some(dep) = dep else {
        return Available::Skip("gone");
    };
    if dep.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid) {
        return Available::Skip("recreated");
    }
    if crate::flux::annotation(dep, owner_key).is_some() {
        return Available::Skip("fenced by another run since the release");
    }
    let int = |p: &str| dep.pointer(p).and_then(Value::as_i64);
    // The API server defaults an absent spec.replicas to 1; absent status counts are 0.
    let want = int("/spec/replicas").unwrap_or(1);
    let generation = int("/metadata/generation").unwrap_or(1);
    let observed = int("/status/observedGeneration").unwrap_or(0);
    let updated = int("/status/updatedReplicas").unwrap_or(0);
    let available = int("/status/availableReplicas").unwrap_or(0);
    if observed >= generation && updated == want && available == want {
        return Available::Yes;
    }
    let mut words = format!("{available} of {want} replica(s) available, {updated} updated");
    if observed < generation {
        let _ = write!(
            words,
            "; its status is for generation {observed}, not {generation}"
        );
    }
    Available::Not(words)
}

/// Waits until each released gate (`(Deployment, uid)`) is available again at its count
/// ([`gate_available`]), reading them once per poll within `timing.timeout`. A stop of
/// `cancel` ends the wait at once.
pub(crate) async fn wait_available(
    client: &Client,
    gates: &[(ObjectRef, String)],
    owner_key: &str,
    timing: Timing,
    cancel: &Cancel,
) -> ReadyWait {
    if gates.is_empty() {
        return ReadyWait::Ready;
    }
    let pending = std::sync::Mutex::new(gates.to_vec());
    let last = std::sync::Mutex::new(Vec::<(ObjectRef, String)>::new());
    let poll = io::poll_soon(timing, || async {
        let now: Vec<_> = io::lock(&pending).clone();
        let mut still = Vec::new();
        let mut seen = Vec::new();
        for (obj, uid) in now {
            let read = match object::get_json(client, &obj).await {
                Ok(v) => Ok(Some(v)),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
                Err(e) => Err(format!("not read: {}", flux_fence::one_line(&e))),
            };
            let words = match read.map(|v| gate_available(v.as_ref(), &uid, owner_key)) {
                Ok(Available::Yes) => continue,
                Ok(Available::Skip(why)) => {
                    tracing::info!(object = %obj, why, "not waiting for it to be available");
                    continue;
                }
                Ok(Available::Not(words)) | Err(words) => words,
            };
            seen.push((obj.clone(), words));
            still.push((obj, uid));
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
    let last = io::lock(&last).clone();
    let failed: Vec<NotReady> = io::lock(&pending)
        .iter()
        .map(|(obj, _)| NotReady {
            object: obj.clone(),
            last: last
                .iter()
                .find(|(o, _)| o == obj)
                .map_or_else(|| "not read in time".to_string(), |(_, w)| w.clone()),
        })
        .collect();
    if failed.is_empty() {
        ReadyWait::Ready
    } else {
        ReadyWait::NotReady(failed)
    }
}

/// The outcome of both waits, the Flux objects' and the gates': stopped when either was
/// (what neither saw Ready is listed), else every object not Ready in time, else Ready.
pub(crate) fn both(flux: ReadyWait, gates: ReadyWait) -> ReadyWait {
    let listed = |w: &ReadyWait| match w {
        ReadyWait::Stopped(objects) => objects.clone(),
        ReadyWait::NotReady(objects) => objects.iter().map(|n| n.object.clone()).collect(),
        _ => Vec::new(),
    };
    match (&flux, &gates) {
        (ReadyWait::Stopped(_), _) | (_, ReadyWait::Stopped(_)) => {
            ReadyWait::Stopped([listed(&flux), listed(&gates)].concat())
        }
        (ReadyWait::NotReady(a), ReadyWait::NotReady(b)) => {
            ReadyWait::NotReady([a.clone(), b.clone()].concat())
        }
        (ReadyWait::NotReady(_), _) => flux,
        _ => gates,
    }
}

#[cfg(test)]
mod tests;
