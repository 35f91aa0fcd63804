//! What the model did, in order: the record tests await instead of sleeping.

use std::sync::Mutex;
use std::time::Duration;

use anyhow::bail;
use tokio::sync::watch;

use super::Phase;

/// How one reconcile ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Working path ended `Ready=True`.
    Succeeded,
    /// Working path ended `Ready=False` (a fail knob or an API error).
    Failed,
    /// Suspended early return: finalisation only.
    Suspended,
    /// First reconcile of the object: the finalizer was added, a requeue follows.
    FinalizerAdded,
    /// The object is being deleted: the finalizer was removed.
    Deleted,
    /// The object no longer exists.
    Gone,
    /// Something broke talking to the API server; the message says what.
    Error(String),
}

/// One thing the model did. `key` is `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelEvent {
    /// A reconcile read the object and began. `run` is unique per model.
    Started {
        key: String,
        run: u64,
        generation: i64,
        requested_at: Option<String>,
        suspended: bool,
    },
    /// A working-path phase wrote its `Reconciling` message (at `resource_version`) and did its
    /// opening work (the apply phase has read the children).
    Phase {
        key: String,
        run: u64,
        phase: Phase,
        resource_version: String,
    },
    /// The reconcile is parked at `phase` until [`super::ModelHandle::release`].
    Hanging { key: String, run: u64, phase: Phase },
    /// The reconcile returned (its deferred finalisation is done).
    Finished {
        key: String,
        run: u64,
        outcome: Outcome,
    },
    /// A parent applied a child manifest with server-side apply.
    ChildApplied { parent: String, child: String },
    /// A parent skipped a child annotated `kustomize.toolkit.fluxcd.io/reconcile: disabled`.
    ChildSkipped { parent: String, child: String },
    /// The competing writer touched `target`.
    Touched { target: String },
    /// The controller process restarted; every in-flight reconcile was killed. `count` starts
    /// at 1.
    Restarted { count: u64 },
    /// The controller Deployment rolled out: the new Pods are Ready, the old ones are
    /// terminating.
    RolledOut { restarted_at: String },
}

impl ModelEvent {
    /// The object key the event is about, if any.
    #[must_use]
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Started { key, .. }
            | Self::Phase { key, .. }
            | Self::Hanging { key, .. }
            | Self::Finished { key, .. } => Some(key),
            _ => None,
        }
    }
}

/// An append-only event log with change notification.
#[derive(Debug)]
pub(crate) struct EventLog {
    events: Mutex<Vec<ModelEvent>>,
    len: watch::Sender<usize>,
}

impl EventLog {
    pub(crate) fn new() -> Self {
        Self {
            events: Mutex::new(Vec::new()),
            len: watch::Sender::new(0),
        }
    }

    pub(crate) fn push(&self, event: ModelEvent) {
        tracing::debug!(?event, "flux model");
        let len = {
            let mut events = self.events.lock().expect("event log lock");
            events.push(event);
            events.len()
        };
        self.len.send_replace(len);
    }

    pub(crate) fn snapshot(&self) -> Vec<ModelEvent> {
        self.events.lock().expect("event log lock").clone()
    }

    /// Waits for the first event at index >= `from` matching `pred`; returns its index and a
    /// copy. Fails after `timeout`.
    pub(crate) async fn wait_for(
        &self,
        from: usize,
        timeout: Duration,
        mut pred: impl FnMut(&ModelEvent) -> bool,
    ) -> anyhow::Result<(usize, ModelEvent)> {
        let mut rx = self.len.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut scanned = from;
        loop {
            // Mark first, then scan: an event pushed after the scan still wakes us.
            rx.mark_unchanged();
            {
                let events = self.events.lock().expect("event log lock");
                for (i, e) in events.iter().enumerate().skip(scanned) {
                    if pred(e) {
                        return Ok((i, e.clone()));
                    }
                }
                scanned = scanned.max(events.len());
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                bail!("the model did not reach the awaited event within {timeout:?}");
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.events.lock().expect("event log lock").len()
    }
}
