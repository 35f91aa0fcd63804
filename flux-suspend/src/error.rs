//! The crate's error type: each variant names the step that failed.

use flux_fence::{ErrorClass, ObjectRef};
use std::time::Duration;

use crate::quiesce::Blocker;
use crate::report::Counters;

/// What broke. Expected outcomes (a pending proof, a refused fence) are values elsewhere;
/// these are the ends of a phase that could not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SuspendError {
    /// The stable-pause proof did not settle in time. Display is the redacted timeout line:
    /// fixed counter names and counts only.
    #[error("stable pause not proven within {}s: {counters}", waited.as_secs())]
    ProofTimeout {
        waited: Duration,
        counters: Counters,
        /// Who else changed a member while it was judged ([`OtherWriter`]), not in the line:
        /// a change no retirement of reconciles ends. Empty when every change was a status
        /// write (a reconcile in flight).
        writers: Vec<OtherWriter>,
    },
    /// A member read during the proof no longer held the pause (another writer resumed it,
    /// removed its `reconcile: disabled`, took or removed its fence, or recreated it): the
    /// proof stops at once instead of waiting out its deadline (`managedFields` on the
    /// object names who changed it).
    #[error(
        "the pause was broken during the stable-pause proof: {object}: {why}; no later pass \
         can mend that, so the proof stopped"
    )]
    BrokenDuringProof {
        object: Box<ObjectRef>,
        why: crate::judge::Broken,
    },
    /// An object did not acknowledge its `requestedAt` nonce in time (its controller may be
    /// down, or still running a long reconcile that began before the suspend).
    #[error("{object} did not acknowledge the suspend within {}s", waited.as_secs())]
    AckTimeout {
        object: Box<ObjectRef>,
        waited: Duration,
    },
    /// The controller restart did not finish in time.
    #[error(
        "controller restart not finished within {}s: {old} old pod(s) remain, {ready}/{want} replacement(s) ready",
        waited.as_secs()
    )]
    RestartTimeout {
        waited: Duration,
        old: usize,
        ready: usize,
        want: usize,
    },
    /// The target did not become quiet in time; the blockers explain the pre-existing state.
    #[error("{object} not quiet within {}s: {}", waited.as_secs(), join(blockers))]
    QuiesceTimeout {
        object: Box<ObjectRef>,
        waited: Duration,
        blockers: Vec<Blocker>,
    },
    /// A replicas gate's Deployment did not reach its count in time: `replicas` is what its
    /// status last reported, `pods` how many Pods matching its selector were left (terminating
    /// ones included).
    #[error(
        "{object} not scaled to {want} within {}s: its status reports {replicas} replica(s), {pods} Pod(s) left",
        waited.as_secs()
    )]
    ScaleTimeout {
        object: Box<ObjectRef>,
        waited: Duration,
        want: i32,
        replicas: i64,
        pods: usize,
    },
    /// An object the handoff needs is not there or not what it should be.
    #[error("{step}: {detail}")]
    Invalid { step: &'static str, detail: String },
    /// A release withheld: another writer changed `at` on `object` since the fence, a mark
    /// other than the pause alone (a person's `flux resume` by itself is kept by the release),
    /// so a plain release cannot restore it. The fence stays.
    #[error(
        "releasing: release of {} withheld: {at} was changed by another writer",
        flux_fence::recovery::short_ref(object)
    )]
    Withheld {
        object: Box<flux_fence::ObjectRef>,
        at: flux_fence::mark::MarkAt,
    },
    /// A fence operation failed.
    #[error("{step}")]
    Fence {
        step: &'static str,
        #[source]
        source: flux_fence::FenceError,
    },
    /// Stopped by [`crate::Cancel`] during (or before) `step`; what was fenced stays held
    /// for the caller's release.
    #[error("stopped while {}", crate::steps::describe(*step))]
    Cancelled { step: crate::steps::Step },
    /// A Kubernetes API call failed.
    #[error("{step}")]
    Kube {
        step: &'static str,
        #[source]
        source: kube::Error,
    },
}

fn join(blockers: &[Blocker]) -> String {
    blockers
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Another writer that changed a member of the chain during the proof: the object, the field
/// manager its newest change names (printable, at most 64 characters), and how many passes saw
/// a change of theirs.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OtherWriter {
    pub object: ObjectRef,
    pub manager: String,
    pub changes: u32,
}

impl OtherWriter {
    /// `manager` changed `object`, seen by `changes` passes.
    #[must_use]
    pub fn new(object: ObjectRef, manager: impl Into<String>, changes: u32) -> Self {
        Self {
            object,
            manager: manager.into(),
            changes,
        }
    }
}

impl SuspendError {
    /// The kind of this failure ([`ErrorClass`]).
    #[must_use]
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::ProofTimeout { .. }
            | Self::AckTimeout { .. }
            | Self::RestartTimeout { .. }
            | Self::QuiesceTimeout { .. }
            | Self::ScaleTimeout { .. } => ErrorClass::Timeout,
            Self::BrokenDuringProof { .. } => ErrorClass::PauseBroken,
            Self::Fence { source, .. } => source.class(),
            Self::Cancelled { .. } => ErrorClass::Cancelled,
            _ => ErrorClass::KubeApi,
        }
    }

    pub(crate) fn kube(step: &'static str) -> impl FnOnce(kube::Error) -> Self {
        move |source| Self::Kube { step, source }
    }
}
