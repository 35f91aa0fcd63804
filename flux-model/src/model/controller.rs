//! One controller "process": a list+watch feeding a work queue that runs at most one reconcile
//! per key, with a dirty flag for events that arrive meanwhile (facts 1 and 2). Dropping the
//! future (abort) drops the `JoinSet` and so kills every reconcile and timer it started.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams, WatchEvent, WatchParams};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};

use super::Inner;
use super::reconcile::{Requeue, reconcile};
use super::status::REQUESTED_AT;

/// Pause before relisting after a watch error.
const RELIST_BACKOFF: Duration = Duration::from_secs(1);
/// Server-side timeout of one watch request.
const WATCH_TIMEOUT_SECS: u32 = 290;

/// What the predicates compare between two versions of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    pub generation: i64,
    pub requested_at: Option<String>,
    /// Every annotation, for Flux Operator's `AnnotationChangedPredicate`.
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// The trigger predicate: Flux's own controllers `GenerationChanged OR ReconcileRequested`;
/// Flux Operator's (`any_annotation`) `GenerationChanged OR AnnotationChanged` (flux-operator
/// `internal/controller/resourceset_manager.go`, `fluxinstance_manager.go`). A new object
/// always passes, as a create event does.
pub(crate) fn should_queue(old: Option<&Observed>, new: &Observed, any_annotation: bool) -> bool {
    old.is_none_or(|o| {
        o.generation != new.generation
            || o.requested_at != new.requested_at
            || (any_annotation && o.annotations != new.annotations)
    })
}

#[derive(Debug)]
enum Change {
    Upsert(String, Observed),
    Delete(String),
}

#[derive(Debug, Default)]
struct KeyState {
    running: bool,
    dirty: bool,
    timer: Option<AbortHandle>,
}

pub(crate) async fn run(inner: Arc<Inner>, mut commands: mpsc::UnboundedReceiver<String>) {
    let mut tasks: JoinSet<()> = JoinSet::new();
    let (change_tx, mut changes) = mpsc::unbounded_channel();
    let (done_tx, mut done) = mpsc::unbounded_channel::<(String, Requeue)>();
    let (timer_tx, mut timers) = mpsc::unbounded_channel::<String>();
    tasks.spawn(watch(inner.clone(), change_tx));
    let mut seen: HashMap<String, Observed> = HashMap::new();
    let mut keys: HashMap<String, KeyState> = HashMap::new();

    let start = |key: String, keys: &mut HashMap<String, KeyState>, tasks: &mut JoinSet<()>| {
        let state = keys.entry(key.clone()).or_default();
        if state.running {
            state.dirty = true;
            return;
        }
        state.running = true;
        let inner = inner.clone();
        let done_tx = done_tx.clone();
        tasks.spawn(async move {
            let requeue = reconcile(&inner, &key).await;
            let _ = done_tx.send((key, requeue));
        });
    };

    loop {
        while tasks.try_join_next().is_some() {}
        tokio::select! {
            Some(key) = commands.recv() => start(key, &mut keys, &mut tasks),
            Some(key) = timers.recv() => start(key, &mut keys, &mut tasks),
            Some(change) = changes.recv() => match change {
                Change::Upsert(key, new) => {
                    let any = inner.config.controller.is_operator();
                    if should_queue(seen.get(&key), &new, any) {
                        start(key.clone(), &mut keys, &mut tasks);
                    }
                    seen.insert(key, new);
                }
                Change::Delete(key) => {
                    seen.remove(&key);
                }
            },
            Some((key, requeue)) = done.recv() => {
                let state = keys.entry(key.clone()).or_default();
                state.running = false;
                if let Some(t) = state.timer.take() {
                    t.abort();
                }
                match requeue {
                    Requeue::No => {}
                    Requeue::Now => state.dirty = true,
                    Requeue::After(d) => {
                        let tx = timer_tx.clone();
                        let k = key.clone();
                        state.timer = Some(tasks.spawn(async move {
                            tokio::time::sleep(d).await;
                            let _ = tx.send(k);
                        }));
                    }
                }
                if std::mem::take(&mut state.dirty) {
                    start(key, &mut keys, &mut tasks);
                }
            }
        }
    }
}

/// List then watch, relisting on any error; every object version becomes a [`Change`].
async fn watch(inner: Arc<Inner>, tx: mpsc::UnboundedSender<Change>) {
    let api: Api<DynamicObject> = match inner.config.namespace.as_deref() {
        Some(ns) => Api::namespaced_with(inner.client.clone(), ns, &inner.resource()),
        None => Api::all_with(inner.client.clone(), &inner.resource()),
    };
    loop {
        let list = match api.list(&ListParams::default()).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "model list failed");
                tokio::time::sleep(RELIST_BACKOFF).await;
                continue;
            }
        };
        let mut listed = Vec::new();
        for o in &list.items {
            let (key, s) = seen_of(o);
            listed.push(key.clone());
            let _ = tx.send(Change::Upsert(key, s));
        }
        let mut rv = list.metadata.resource_version.unwrap_or_default();
        'watch: loop {
            let wp = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
            let mut stream = match api.watch(&wp, &rv).await {
                Ok(s) => s.boxed(),
                Err(e) => {
                    tracing::warn!(error = %e, "model watch failed");
                    break 'watch;
                }
            };
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => {
                        rv = o.metadata.resource_version.clone().unwrap_or(rv);
                        let (key, s) = seen_of(&o);
                        let _ = tx.send(Change::Upsert(key, s));
                    }
                    Ok(WatchEvent::Deleted(o)) => {
                        rv = o.metadata.resource_version.clone().unwrap_or(rv);
                        let (key, _) = seen_of(&o);
                        let _ = tx.send(Change::Delete(key));
                    }
                    Ok(WatchEvent::Bookmark(b)) => rv = b.metadata.resource_version,
                    Ok(WatchEvent::Error(_)) | Err(_) => break 'watch,
                }
            }
        }
        tokio::time::sleep(RELIST_BACKOFF).await;
    }
}

fn seen_of(o: &DynamicObject) -> (String, Observed) {
    let key = format!(
        "{}/{}",
        o.metadata.namespace.as_deref().unwrap_or_default(),
        o.metadata.name.as_deref().unwrap_or_default()
    );
    let annotations = o.metadata.annotations.clone().unwrap_or_default();
    let seen = Observed {
        generation: o.metadata.generation.unwrap_or(0),
        requested_at: annotations.get(REQUESTED_AT).cloned(),
        annotations,
    };
    (key, seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(generation: i64, requested_at: Option<&str>) -> Observed {
        let mut annotations = std::collections::BTreeMap::new();
        if let Some(r) = requested_at {
            annotations.insert(REQUESTED_AT.to_string(), r.to_string());
        }
        Observed {
            generation,
            requested_at: requested_at.map(str::to_string),
            annotations,
        }
    }

    #[test]
    fn predicates_queue_new_generation_and_requested_at_only() {
        for any in [false, true] {
            assert!(should_queue(None, &s(1, None), any));
            assert!(should_queue(Some(&s(1, None)), &s(2, None), any));
            assert!(should_queue(Some(&s(1, None)), &s(1, Some("n")), any));
            assert!(should_queue(Some(&s(1, Some("a"))), &s(1, Some("b")), any));
            assert!(!should_queue(Some(&s(1, Some("a"))), &s(1, Some("a")), any));
        }
    }

    #[test]
    fn operator_kinds_any_annotation_change_queues_an_operator_object_only() {
        let mut disabled = s(1, Some("a"));
        disabled
            .annotations
            .insert("fluxcd.controlplane.io/reconcile".into(), "disabled".into());
        assert!(should_queue(Some(&s(1, Some("a"))), &disabled, true));
        assert!(!should_queue(Some(&s(1, Some("a"))), &disabled, false));
        assert!(!should_queue(Some(&disabled), &disabled.clone(), true));
    }
}
