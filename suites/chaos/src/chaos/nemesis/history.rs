//! The recorded history: one watch per resource of the cell (its Kustomizations, its Lease,
//! the work `ConfigMap`), each from the resourceVersion of a list made before anything ran, every
//! event kept with its resourceVersion (straight to the API server, never through the proxy).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, WatchEvent, WatchParams};
use serde_json::Value;
use tokio::task::JoinHandle;

use super::checker::{Event, Object};
use crate::chaos::liveness::LeaseSeen;

/// The `ConfigMap` every work write updates.
pub const WORK: &str = "nemesis-work";
/// The owner annotation of a fence.
const OWNER: &str = "flux-handoff.io/owner";
/// The Lease annotation of a parked pause, and of the holder's own duration.
const PARKED: &str = "flux-handoff.io/parked";
const DURATION: &str = "flux-handoff.io/duration";
/// Bound of each request of a watch (starting it, each event, a relist): the server ends a
/// watch after 10 s, so a longer silence is a connection a restart cut without a FIN.
const BOUND: Duration = Duration::from_secs(12);
/// How long [`Recorder::catch_up`] waits: two bounds, so a watch stuck on a dead connection
/// when it starts is restarted and delivers within it.
const CATCH_UP: Duration = Duration::from_secs(30);

/// Watches running; [`Recorder::events`] is what they saw so far.
pub struct Recorder {
    events: Arc<Mutex<Vec<Event>>>,
    /// Every version of the Lease, stamped when received (for the liveness checker).
    leases: Arc<Mutex<Vec<(Instant, LeaseSeen)>>>,
    /// Times a watch was answered 410 Gone and its resource listed again: the history may
    /// miss what was written before the list, so [`Recorder::catch_up`] refuses to hand it on.
    gaps: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
}

/// Where a watch keeps what it sees.
#[derive(Clone)]
struct Sink {
    events: Arc<Mutex<Vec<Event>>>,
    leases: Arc<Mutex<Vec<(Instant, LeaseSeen)>>>,
    gaps: Arc<AtomicUsize>,
    members: Arc<Vec<String>>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Recorder {
    /// Lists each resource in `ns` (its objects are the first events) and watches it from
    /// the list's resourceVersion; of the Kustomizations, only the chain's `members`.
    pub async fn start(client: &Client, ns: &str, members: &[&str]) -> anyhow::Result<Self> {
        let members: Arc<Vec<String>> =
            Arc::new(members.iter().map(|m| (*m).to_string()).collect());
        let events = Arc::new(Mutex::new(Vec::new()));
        let leases = Arc::new(Mutex::new(Vec::new()));
        let gaps = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for (ar, object) in [
            (testkit::fixtures::kustomization_resource(), None::<Object>),
            (ApiResource::erase::<Lease>(&()), Some(Object::Lease)),
            (ApiResource::erase::<ConfigMap>(&()), Some(Object::Work)),
        ] {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
            let list = api.list(&ListParams::default()).await?;
            let to = Sink {
                events: events.clone(),
                leases: leases.clone(),
                gaps: gaps.clone(),
                members: members.clone(),
            };
            for o in &list.items {
                push(&to, object.as_ref(), o, false);
            }
            let rv = list.metadata.resource_version.unwrap_or_default();
            tasks.push(tokio::spawn(follow(api, rv, object, to)));
        }
        Ok(Self {
            events,
            leases,
            gaps,
            tasks,
        })
    }

    /// Every event so far.
    #[must_use]
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every version of the Lease so far, its receive stamp as milliseconds from `origin`
    /// (0 for one received before it).
    #[must_use]
    pub fn leases(&self, origin: Instant) -> Vec<LeaseSeen> {
        self.leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(at, l)| LeaseSeen {
                at_ms: since(origin, *at),
                ..l.clone()
            })
            .collect()
    }

    /// Waits (bounded) until the history holds the current version of each named object,
    /// so nothing written before this call is missing. A history with a gap (a watch that
    /// had to list again) is refused: it may miss a release or a fence, and a checker judging
    /// it could pass what it never saw. The campaign's control plane serves watches from etcd
    /// (`--no-watch-cache`), so a watch resumed after a restart has no gap.
    pub async fn catch_up(
        &self,
        client: &Client,
        ns: &str,
        members: &[&str],
    ) -> anyhow::Result<()> {
        let k = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            ns,
            &testkit::fixtures::kustomization_resource(),
        );
        let mut want = Vec::new();
        for m in members {
            want.push(rv_of(k.get_opt(m).await?.as_ref()));
        }
        let leases = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            ns,
            &ApiResource::erase::<Lease>(&()),
        );
        for o in leases.list(&ListParams::default()).await? {
            want.push(rv_of(Some(&o)));
        }
        let cms = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            ns,
            &ApiResource::erase::<ConfigMap>(&()),
        );
        want.push(rv_of(cms.get_opt(WORK).await?.as_ref()));
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        loop {
            let gaps = self.gaps.load(Ordering::SeqCst);
            if gaps > 0 {
                anyhow::bail!(
                    "the history has a gap: a watch was answered 410 Gone {gaps} time(s) and \
                     listed again, so writes before the list may be missing"
                );
            }
            let seen = self.events();
            if want
                .iter()
                .flatten()
                .all(|rv| seen.iter().any(|e| e.rv == *rv))
            {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                let missing: Vec<u64> = want
                    .iter()
                    .flatten()
                    .filter(|rv| !seen.iter().any(|e| e.rv == **rv))
                    .copied()
                    .collect();
                let last = seen.iter().map(|e| e.rv).max().unwrap_or_default();
                anyhow::bail!(
                    "the watches did not catch up with the server within {CATCH_UP:?}: versions \
                     {missing:?} not seen (the newest seen is {last})"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn rv_of(o: Option<&DynamicObject>) -> Option<u64> {
    o?.metadata.resource_version.as_deref()?.parse().ok()
}

/// Watches `api` from `rv` for ever, again from the last version seen when a watch ends.
async fn follow(api: Api<DynamicObject>, mut rv: String, object: Option<Object>, sink: Sink) {
    loop {
        let wp = WatchParams::default().timeout(10);
        // Bounded: a request sent on a connection a restart left half open gets no answer,
        // and a watch never started would hold the history still (a soak's catch-up then
        // waits for versions nothing delivers).
        let started = tokio::time::timeout(BOUND, api.watch(&wp, &rv)).await;
        let stream = match started {
            Ok(Ok(s)) => s,
            Ok(Err(kube::Error::Api(s))) if s.code == 410 => {
                relist(&api, &mut rv, object.as_ref(), &sink).await;
                continue;
            }
            Ok(Err(_)) | Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let mut stream = std::pin::pin!(stream);
        // Bounded on this side too (the server ends a watch after 10 s): a connection cut by
        // a restart without a FIN would otherwise hold the history still.
        while let Ok(Some(item)) = tokio::time::timeout(BOUND, stream.next()).await {
            let e = match item {
                Ok(e) => e,
                Err(kube::Error::Api(s)) if s.code == 410 => {
                    relist(&api, &mut rv, object.as_ref(), &sink).await;
                    break;
                }
                Err(_) => break,
            };
            let (o, deleted) = match e {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => (o, false),
                WatchEvent::Deleted(o) => (o, true),
                WatchEvent::Bookmark(b) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                WatchEvent::Error(e) if e.code == 410 => {
                    relist(&api, &mut rv, object.as_ref(), &sink).await;
                    break;
                }
                WatchEvent::Error(_) => break,
            };
            if let Some(v) = &o.metadata.resource_version {
                rv.clone_from(v);
            }
            push(&sink, object.as_ref(), &o, deleted);
        }
    }
}

/// After "too old resource version" (410): what a restarted API server with a watch cache
/// answers (the cache starts at the restart's revision), or etcd after a compaction. The
/// objects as a list shows them now continue the history and the watch goes on from the
/// list's version, but whatever was written between the last event seen and the list is
/// missing: counted as a gap.
async fn relist(api: &Api<DynamicObject>, rv: &mut String, object: Option<&Object>, sink: &Sink) {
    sink.gaps.fetch_add(1, Ordering::SeqCst);
    match tokio::time::timeout(BOUND, api.list(&ListParams::default())).await {
        Ok(Ok(list)) => {
            for o in &list.items {
                push(sink, object, o, false);
            }
            *rv = list.metadata.resource_version.unwrap_or_default();
        }
        Ok(Err(_)) | Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
    }
}

/// Turns one object into an event of the history (a Kustomization outside the chain, a
/// `ConfigMap` other than the work one, or an object without a numeric resourceVersion, is left
/// out).
fn push(sink: &Sink, object: Option<&Object>, o: &DynamicObject, deleted: bool) {
    let members = &sink.members;
    let Some(rv) = o
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
    else {
        return;
    };
    let name = o.metadata.name.clone().unwrap_or_default();
    let object = match object {
        None if !members.contains(&name) => return,
        None => Object::Member(name),
        Some(Object::Work) if name != WORK => return,
        Some(other) => other.clone(),
    };
    let text = |p: &str| {
        o.data
            .pointer(p)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let holder = match object {
        Object::Lease => text("/spec/holderIdentity"),
        Object::Work => text("/data/holder"),
        Object::Member(_) => None,
    };
    let event = Event {
        rv,
        object,
        deleted,
        owner: o
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(OWNER))
            .cloned(),
        suspend: o.data.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true),
        holder,
    };
    if event.object == Object::Lease {
        let seen = lease_seen(&event, o);
        sink.leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((Instant::now(), seen));
    }
    sink.events
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(event);
}

/// Milliseconds from `origin` to `at` (0 when `at` is earlier).
#[must_use]
pub fn since(origin: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(origin).as_millis()).unwrap_or(u64::MAX)
}

/// The liveness checker's view of one Lease version (its stamp is set by the caller).
fn lease_seen(e: &Event, o: &DynamicObject) -> LeaseSeen {
    let annotation = |k: &str| o.metadata.annotations.as_ref().and_then(|a| a.get(k));
    let spec = o
        .data
        .pointer("/spec/leaseDurationSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    // The holder's own duration, when the Lease carries it (`15s` or seconds).
    let own = annotation(DURATION)
        .and_then(|d| d.trim_end_matches('s').parse::<u64>().ok())
        .unwrap_or(0);
    LeaseSeen {
        rv: e.rv,
        at_ms: 0,
        holder: if e.deleted { None } else { e.holder.clone() },
        renew: o
            .data
            .pointer("/spec/renewTime")
            .and_then(Value::as_str)
            .map(str::to_string),
        parked: !e.deleted && annotation(PARKED).is_some(),
        duration_ms: spec.max(own) * 1_000,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(annotations: &serde_json::Value, spec: &serde_json::Value) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": { "name": "l", "resourceVersion": "7", "annotations": annotations },
            "spec": spec,
        }))
        .unwrap()
    }

    fn event(holder: Option<&str>, deleted: bool) -> Event {
        Event {
            rv: 7,
            object: Object::Lease,
            deleted,
            owner: None,
            suspend: false,
            holder: holder.map(str::to_string),
        }
    }

    #[test]
    fn liveness_a_lease_version_keeps_its_renewal_parked_mark_and_longest_duration() {
        let spec = serde_json::json!({
            "holderIdentity": "A",
            "leaseDurationSeconds": 2,
            "renewTime": "2026-12-07T20:00:00.000000Z",
        });
        let own = serde_json::json!({ DURATION: "4", PARKED: "maint" });
        let l = lease_seen(&event(Some("A"), false), &lease(&own, &spec));
        assert_eq!(l.holder.as_deref(), Some("A"));
        assert_eq!(l.renew.as_deref(), Some("2026-12-07T20:00:00.000000Z"));
        assert!(l.parked);
        assert_eq!(
            l.duration_ms, 4_000,
            "the holder's own duration over an edited one"
        );
        let plain = lease_seen(
            &event(Some("A"), false),
            &lease(&serde_json::json!({}), &spec),
        );
        assert!(!plain.parked);
        assert_eq!(plain.duration_ms, 2_000);
        let gone = lease_seen(
            &event(Some("A"), true),
            &lease(&own, &serde_json::json!({})),
        );
        assert_eq!(gone.holder, None, "a deleted Lease holds nothing");
        assert!(!gone.parked);
    }

    #[test]
    fn liveness_stamps_are_milliseconds_from_the_origin() {
        let t = Instant::now();
        assert_eq!(since(t, t + Duration::from_millis(1_250)), 1_250);
        assert_eq!(since(t + Duration::from_secs(1), t), 0);
    }
}
