//! Retiring in-flight executions: the acknowledgement handshake and the controller restart,
//! judged from what was read.
//!
//! **ack**: a patch that sets `spec.suspend=true` together with a fresh
//! `reconcile.fluxcd.io/requestedAt` nonce is acknowledged when
//! `status.lastHandledReconcileAt == nonce`. Only a reconcile that *started after* the patch can
//! write that value, and the controller never runs two reconciles of one object at once
//! (docs/design/flux-model.md, facts 2 and 3), so the acknowledgement proves that no pre-suspension
//! execution of that object is still running — without restarting the controller.
//!
//! **restart**: after a rollout restart, every Pod that existed before it must be gone (a Pod
//! still terminating may still be reconciling) and the replacements must be Ready.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::flux;

/// How in-flight executions are retired before the proof starts counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Strategy {
    /// Wait for each fenced object's acknowledgement of its nonce (default).
    #[default]
    Ack,
    /// Rollout-restart the controller Deployment and wait until every old Pod is gone.
    Restart,
    /// Rely on a quiet window alone (weakest: a reconcile that began before the suspend and is
    /// still running is not detected). `none` on the command line.
    QuietWindow,
}

impl std::str::FromStr for Strategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ack" => Ok(Self::Ack),
            "restart" => Ok(Self::Restart),
            "none" => Ok(Self::QuietWindow),
            other => Err(format!(
                "unknown retirement strategy {other:?} (ack, restart, none)"
            )),
        }
    }
}

/// Whether `obj` acknowledged `nonce`.
#[must_use]
pub fn acknowledged(obj: &Value, nonce: &str) -> bool {
    flux::last_handled(obj) == Some(nonce)
}

/// What the restart proof needs of one Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PodView {
    pub uid: String,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// The `Ready` condition is `True`.
    pub ready: bool,
}

impl PodView {
    /// Reads the fields from a Pod's JSON.
    #[must_use]
    pub fn from_json(pod: &Value) -> Option<Self> {
        let uid = pod.pointer("/metadata/uid")?.as_str()?.to_string();
        let terminating = pod
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null());
        let ready = pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some("Ready")
                        && c.get("status").and_then(Value::as_str) == Some("True")
                })
            });
        Some(Self {
            uid,
            terminating,
            ready,
        })
    }
}

/// Progress of a controller restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RestartProgress {
    /// Every pre-restart Pod is gone and at least `want` replacements are Ready.
    Done,
    /// Still waiting: `old` pre-restart Pods remain (terminating ones included), `ready` of the
    /// `want` replacements are Ready.
    Pending {
        old: usize,
        ready: usize,
        want: usize,
    },
}

/// Judges a restart from the Pod UIDs seen before it and the Pods seen now.
#[must_use]
pub fn restart_progress(
    before: &BTreeSet<String>,
    now: &[PodView],
    want: usize,
) -> RestartProgress {
    let old = now.iter().filter(|p| before.contains(&p.uid)).count();
    let ready = now
        .iter()
        .filter(|p| !before.contains(&p.uid) && p.ready && !p.terminating)
        .count();
    if old == 0 && ready >= want.max(1) {
        RestartProgress::Done
    } else {
        RestartProgress::Pending {
            old,
            ready,
            want: want.max(1),
        }
    }
}
