//! [`ModelHandle`]: the knobs and await hooks of a running model.

use std::sync::atomic::Ordering;
use std::time::Duration;

use std::sync::Arc;

use serde_json::Value;

use super::events::{ModelEvent, Outcome};
use super::knobs::{ArmedTouch, Touch};
use super::{Inner, Phase};

/// Controls and observes a running model. Dropping it stops the model.
///
/// Names are bare object names in the configured namespace, or `namespace/name` keys (needed
/// for a model watching all namespaces). Every `wait_*` hook scans the event log from a mark
/// (see [`Self::mark`]), so an event that happened before the wait began is still seen.
///
/// # Errors
/// Every `wait_*` hook fails when the awaited event does not come within
/// [`super::ModelConfig::wait_timeout`]; knobs never fail.
#[derive(Debug)]
pub struct ModelHandle {
    pub(super) inner: Arc<Inner>,
}

impl ModelHandle {
    /// Everything the model did so far, in order.
    #[must_use]
    pub fn events(&self) -> Vec<ModelEvent> {
        self.inner.events.snapshot()
    }

    /// A position in the event log: pass it to [`Self::wait_for`] to see only later events.
    #[must_use]
    pub fn mark(&self) -> usize {
        self.inner.events.len()
    }

    /// Waits (bounded by `wait_timeout`) for the first event after `since` matching `pred`.
    pub async fn wait_for(
        &self,
        since: usize,
        pred: impl FnMut(&ModelEvent) -> bool,
    ) -> anyhow::Result<ModelEvent> {
        let (_, e) = self
            .inner
            .events
            .wait_for(since, self.inner.config.wait_timeout, pred)
            .await?;
        Ok(e)
    }

    /// Waits for a reconcile of `name` that finished after `since`; returns its outcome.
    pub async fn wait_finished(&self, name: &str, since: usize) -> anyhow::Result<Outcome> {
        let key = self.inner.key(name);
        match self
            .wait_for(
                since,
                |e| matches!(e, ModelEvent::Finished { key: k, .. } if *k == key),
            )
            .await?
        {
            ModelEvent::Finished { outcome, .. } => Ok(outcome),
            _ => unreachable!("the predicate only matches Finished"),
        }
    }

    /// Waits until a reconcile of `name` that finished after `since` ended settled
    /// (`Succeeded`, `Failed` or `Suspended`), skipping the finalizer-adding first run.
    pub async fn wait_settled(&self, name: &str, since: usize) -> anyhow::Result<Outcome> {
        let key = self.inner.key(name);
        match self
            .wait_for(since, |e| {
                matches!(e, ModelEvent::Finished { key: k, outcome, .. } if *k == key
                    && matches!(outcome, Outcome::Succeeded | Outcome::Failed | Outcome::Suspended))
            })
            .await?
        {
            ModelEvent::Finished { outcome, .. } => Ok(outcome),
            _ => unreachable!("the predicate only matches Finished"),
        }
    }

    /// Waits for the first reconcile of `name` after `since` that read `requestedAt == nonce`
    /// and returns how it ended.
    pub async fn wait_run_seeing(
        &self,
        name: &str,
        nonce: &str,
        since: usize,
    ) -> anyhow::Result<Outcome> {
        let key = self.inner.key(name);
        let started = self
            .wait_for(since, |e| {
                matches!(e, ModelEvent::Started { key: k, requested_at: Some(r), .. } if *k == key && r == nonce)
            })
            .await?;
        let ModelEvent::Started { run, .. } = started else {
            unreachable!("matched Started")
        };
        match self
            .wait_for(
                since,
                |e| matches!(e, ModelEvent::Finished { run: r, .. } if *r == run),
            )
            .await?
        {
            ModelEvent::Finished { outcome, .. } => Ok(outcome),
            _ => unreachable!("the predicate only matches Finished"),
        }
    }

    /// Waits until a reconcile of `name` reached `phase` after `since` (its status write done).
    pub async fn wait_phase(
        &self,
        name: &str,
        phase: Phase,
        since: usize,
    ) -> anyhow::Result<ModelEvent> {
        let key = self.inner.key(name);
        self.wait_for(
            since,
            |e| matches!(e, ModelEvent::Phase { key: k, phase: p, .. } if *k == key && *p == phase),
        )
        .await
    }

    /// Waits until a reconcile of `name` is parked at the phase armed by [`Self::hang_at`]
    /// (only hangs after that call count).
    pub async fn wait_hanging(&self, name: &str) -> anyhow::Result<ModelEvent> {
        let key = self.inner.key(name);
        let since = self
            .inner
            .knobs()
            .hangs
            .get(&key)
            .map_or(0, |(_, _, since)| *since);
        self.wait_for(
            since,
            |e| matches!(e, ModelEvent::Hanging { key: k, .. } if *k == key),
        )
        .await
    }

    /// The number of reconciles of `name` that started so far.
    #[must_use]
    pub fn reconcile_count(&self, name: &str) -> usize {
        let key = self.inner.key(name);
        self.events()
            .iter()
            .filter(|e| matches!(e, ModelEvent::Started { key: k, .. } if *k == key))
            .count()
    }

    /// Sets how long `phase` takes in every later reconcile.
    pub fn set_phase_duration(&self, phase: Phase, duration: Duration) {
        self.inner.knobs().durations.insert(phase, duration);
    }

    /// Every reconcile of `name` that reaches `phase` parks there until [`Self::release`].
    pub fn hang_at(&self, name: &str, phase: Phase) {
        let (tx, _) = tokio::sync::watch::channel(false);
        let since = self.inner.events.len();
        self.inner
            .knobs()
            .hangs
            .insert(self.inner.key(name), (phase, tx, since));
    }

    /// Releases reconciles of `name` parked by [`Self::hang_at`] and disarms the hang.
    pub fn release(&self, name: &str) {
        if let Some((_, tx, _)) = self.inner.knobs().hangs.remove(&self.inner.key(name)) {
            tx.send_replace(true);
        }
    }

    /// Every reconcile of `name` fails at `phase` (`Ready=False`) until [`Self::heal`].
    pub fn fail_at(&self, name: &str, phase: Phase) {
        self.inner
            .knobs()
            .failing
            .insert(self.inner.key(name), phase);
    }

    /// Stops the failures armed by [`Self::fail_at`].
    pub fn heal(&self, name: &str) {
        self.inner.knobs().failing.remove(&self.inner.key(name));
    }

    /// The next reconcile of `name` that reaches `phase` restarts the controller (one shot).
    pub fn restart_at(&self, name: &str, phase: Phase) {
        self.inner
            .knobs()
            .restart_at
            .insert(self.inner.key(name), phase);
    }

    /// When the next reconcile of `trigger` reaches `phase`, the competing writer applies
    /// `touch` to `target` (one shot), before any armed hang.
    pub fn touch_at(&self, trigger: &str, phase: Phase, target: &str, touch: Touch) {
        let armed = ArmedTouch {
            trigger: self.inner.key(trigger),
            phase,
            target: self.inner.key(target),
            touch,
        };
        self.inner.knobs().touches.push(armed);
    }

    /// The competing writer applies `touch` to `target` now.
    pub async fn touch_now(&self, target: &str, touch: &Touch) -> anyhow::Result<()> {
        self.inner.touch(&self.inner.key(target), touch).await
    }

    /// Replaces the child manifests of `parent`'s Git path.
    pub fn set_git(&self, parent: &str, children: Vec<Value>) {
        self.inner
            .knobs()
            .git
            .insert(self.inner.key(parent), children);
    }

    /// Bumps the source revision of `name` and queues it, as a new artifact would; returns the
    /// new revision.
    #[must_use]
    pub fn bump_source_revision(&self, name: &str) -> String {
        let key = self.inner.key(name);
        let revision = format!(
            "main@sha1:{:040x}",
            self.inner.runs.load(Ordering::SeqCst) + 2
        );
        self.inner
            .knobs()
            .revisions
            .insert(key.clone(), revision.clone());
        self.inner.enqueue(key);
        revision
    }

    /// Kills the controller process (every in-flight reconcile, wherever it is) and starts a
    /// fresh one, which lists and reconciles everything again.
    pub async fn restart(&self) {
        self.inner.clone().restart().await;
    }

    /// Stops the model; in-flight reconciles are aborted.
    pub async fn shutdown(self) {
        let task = self.inner.stop();
        if let Some(t) = task {
            t.abort();
            let _ = t.await;
        }
        let deps =
            std::mem::take(&mut *self.inner.deployment_tasks.lock().expect("deployment lock"));
        for t in deps {
            t.abort();
            let _ = t.await;
        }
    }
}

impl Drop for ModelHandle {
    fn drop(&mut self) {
        if let Some(t) = self.inner.stop() {
            t.abort();
        }
        for t in self
            .inner
            .deployment_tasks
            .lock()
            .expect("deployment lock")
            .drain(..)
        {
            t.abort();
        }
    }
}
