//! The explicit, deterministic knobs a test turns: phase durations, hangs, failures, restarts
//! at a phase, a competing writer, the Git manifests of parents and source revisions.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::Phase;

/// What the competing writer does to an object (field manager [`COMPETING_WRITER`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touch {
    /// Sets an annotation (no generation change, no reconcile unless it is `requestedAt`).
    Annotate { key: String, value: String },
    /// Sets `spec.suspend` (a generation change).
    SetSuspend(bool),
    /// Moves `resourceVersion` only: rewrites the annotation [`BUMP_ANNOTATION`].
    BumpResourceVersion,
}

/// Field manager of the competing writer.
pub const COMPETING_WRITER: &str = "competing-writer";
/// Annotation the competing writer rewrites to move a resourceVersion.
pub const BUMP_ANNOTATION: &str = "testkit.flux-handoff.io/bump";

/// A touch armed to happen when the reconcile of `trigger` enters `phase`.
#[derive(Debug, Clone)]
pub(crate) struct ArmedTouch {
    pub trigger: String,
    pub phase: Phase,
    pub target: String,
    pub touch: Touch,
}

#[derive(Debug, Default)]
pub(crate) struct Knobs {
    pub durations: HashMap<Phase, Duration>,
    /// key -> (phase, released flag, event-log length when armed). A reconcile entering the
    /// phase waits until released.
    pub hangs: HashMap<String, (Phase, watch::Sender<bool>, usize)>,
    /// key -> phase at which every reconcile fails until healed.
    pub failing: HashMap<String, Phase>,
    /// key -> phase at which the next reconcile restarts the controller (one shot).
    pub restart_at: HashMap<String, Phase>,
    pub touches: Vec<ArmedTouch>,
    /// parent key -> child Kustomization manifests its Git path holds.
    pub git: HashMap<String, Vec<Value>>,
    /// key -> source revision (default from the config).
    pub revisions: HashMap<String, String>,
}

impl Knobs {
    /// Takes the touches armed for `key` at `phase` (each fires once).
    pub(crate) fn take_touches(&mut self, key: &str, phase: Phase) -> Vec<ArmedTouch> {
        let (fire, keep) = std::mem::take(&mut self.touches)
            .into_iter()
            .partition(|t| t.trigger == key && t.phase == phase);
        self.touches = keep;
        fire
    }

    /// The release receiver when `key` is armed to hang at `phase`.
    pub(crate) fn hang(&self, key: &str, phase: Phase) -> Option<watch::Receiver<bool>> {
        self.hangs
            .get(key)
            .filter(|(p, _, _)| *p == phase)
            .map(|(_, tx, _)| tx.subscribe())
    }
}
