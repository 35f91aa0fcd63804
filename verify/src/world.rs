//! The API server's objects as compact, hashable model state, and their rendering to the JSON
//! and `Lease` values the production decision functions take.
//!
//! Strings (annotation keys and values) are interned into [`Sym`]s, so a state is a few small
//! integers; a write renders the object, applies the real JSON Patch (RFC 6902 `test`
//! semantics included, via `json-patch`) and reads the result back.

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};

use k8s_openapi::api::coordination::v1::{Lease as KubeLease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};

/// An interned string.
pub type Sym = u16;

#[derive(Default)]
struct Table {
    texts: Vec<&'static str>,
    ids: HashMap<&'static str, Sym>,
}

fn table() -> &'static RwLock<Table> {
    static T: OnceLock<RwLock<Table>> = OnceLock::new();
    T.get_or_init(RwLock::default)
}

/// Interns `s`. The same text always yields the same symbol within one process.
#[must_use]
pub fn sym(s: &str) -> Sym {
    if let Some(id) = table().read().expect("symbol table").ids.get(s) {
        return *id;
    }
    let mut t = table().write().expect("symbol table");
    if let Some(id) = t.ids.get(s) {
        return *id;
    }
    let id = Sym::try_from(t.texts.len()).expect("fewer than 65536 distinct strings");
    let leaked: &'static str = Box::leak(s.to_string().into_boxed_str());
    t.texts.push(leaked);
    t.ids.insert(leaked, id);
    id
}

/// The text of a symbol.
#[must_use]
pub fn text(id: Sym) -> &'static str {
    table().read().expect("symbol table").texts[usize::from(id)]
}

/// The model's wall clock origin; model time advances in whole lease durations and more.
#[must_use]
pub fn t0() -> Timestamp {
    static T0: OnceLock<Timestamp> = OnceLock::new();
    *T0.get_or_init(|| "2026-12-01T00:00:00Z".parse().expect("valid timestamp"))
}

/// Model time `tick` (each tick is longer than a lease duration).
#[must_use]
pub fn at(tick: u8) -> Timestamp {
    t0() + SignedDuration::from_secs(120 * i64::from(tick))
}

fn tick_of(t: Timestamp) -> u8 {
    u8::try_from(t.duration_since(t0()).as_secs() / 120).unwrap_or(u8::MAX)
}

/// A write the API server refused: a failed JSON Patch `test` (422) or a resourceVersion
/// conflict (409).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused;

/// A Flux object (Kustomization) as the API server holds it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Obj {
    pub uid: &'static str,
    pub rv: u16,
    /// Annotations, sorted by key.
    pub ann: Vec<(Sym, Sym)>,
    /// `spec.suspend` (absent: `None`).
    pub suspend: Option<bool>,
    /// `status.lastHandledReconcileAt`.
    pub handled: Option<Sym>,
    /// `status.conditions` carries `Reconciling=True`.
    pub reconciling: bool,
}

impl Obj {
    #[must_use]
    pub fn new(uid: &'static str) -> Self {
        Self {
            uid,
            rv: 1,
            ann: Vec::new(),
            suspend: None,
            handled: None,
            reconciling: false,
        }
    }

    /// The value of annotation `key`.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&'static str> {
        let k = sym(key);
        self.ann
            .iter()
            .find(|(a, _)| *a == k)
            .map(|(_, v)| text(*v))
    }

    /// Sets (or with `None` removes) annotation `key`, without touching the resourceVersion.
    pub fn set(&mut self, key: &str, value: Option<&str>) {
        let k = sym(key);
        self.ann.retain(|(a, _)| *a != k);
        if let Some(v) = value {
            self.ann.push((k, sym(v)));
            self.ann.sort_unstable();
        }
    }

    /// The object as the API server would return it.
    #[must_use]
    pub fn render(&self) -> Value {
        let mut meta = json!({ "uid": self.uid, "resourceVersion": self.rv.to_string() });
        if !self.ann.is_empty() {
            let ann: Map<String, Value> = self
                .ann
                .iter()
                .map(|(k, v)| (text(*k).to_string(), json!(text(*v))))
                .collect();
            meta["annotations"] = Value::Object(ann);
        }
        let mut spec = json!({});
        if let Some(s) = self.suspend {
            spec["suspend"] = json!(s);
        }
        let mut status = json!({});
        if let Some(h) = self.handled {
            status["lastHandledReconcileAt"] = json!(text(h));
        }
        if self.reconciling {
            status["conditions"] = json!([{ "type": "Reconciling", "status": "True" }]);
        }
        json!({ "metadata": meta, "spec": spec, "status": status })
    }

    /// Applies a JSON Patch the way the API server does: all operations or none (a failed
    /// `test` is HTTP 422); the resourceVersion moves only when something changed. Patches
    /// never touch status here.
    ///
    /// # Errors
    /// [`Refused`] when the patch does not apply (422).
    pub fn patched(&self, patch: &json_patch::Patch) -> Result<Self, Refused> {
        let mut doc = self.render();
        json_patch::patch(&mut doc, patch).map_err(|_| Refused)?;
        let mut next = self.clone();
        next.ann = doc
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (sym(k), sym(v.as_str().unwrap_or("<non-string>"))))
                    .collect()
            })
            .unwrap_or_default();
        next.ann.sort_unstable();
        next.suspend = doc.pointer("/spec/suspend").and_then(Value::as_bool);
        Ok(next.bumped_from(self))
    }

    /// `self` with the resourceVersion after a write from `before` (moved only on a change).
    #[must_use]
    pub fn bumped_from(mut self, before: &Self) -> Self {
        self.rv = before.rv;
        if self != *before {
            self.rv = before.rv + 1;
        }
        self
    }
}

/// The coordination Lease as the API server holds it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseObj {
    pub rv: u16,
    pub holder: Option<Sym>,
    pub transitions: u8,
    /// The tick of the last renewal (`renewTime`).
    pub renewed: u8,
    /// The `parked` annotation's value (the holder that parked it).
    pub parked: Option<Sym>,
}

/// The Lease's name, namespace and duration, as in production (60 s, shorter than a tick).
#[must_use]
pub fn lease_config() -> flux_fence::LeaseConfig {
    flux_fence::LeaseConfig::default()
}

impl LeaseObj {
    /// The Lease as the API server would return it.
    #[must_use]
    pub fn render(&self, parked_key: &str) -> KubeLease {
        let cfg = lease_config();
        let annotations = self
            .parked
            .map(|h| std::iter::once((parked_key.to_string(), text(h).to_string())).collect());
        KubeLease {
            metadata: ObjectMeta {
                name: Some(cfg.name.clone()),
                namespace: Some(cfg.namespace.clone()),
                resource_version: Some(self.rv.to_string()),
                annotations,
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: self.holder.map(|h| text(h).to_string()),
                lease_duration_seconds: Some(cfg.duration_seconds()),
                renew_time: Some(MicroTime(at(self.renewed))),
                acquire_time: Some(MicroTime(at(self.renewed))),
                lease_transitions: Some(i32::from(self.transitions)),
                ..LeaseSpec::default()
            }),
        }
    }

    /// Whether the Lease is a parked pause: its `parked` annotation names its current holder
    /// (production's reading, `discover` and `recovery::decide_adopt`). Releases, takes and
    /// recoveries remove the annotation, so it never names an earlier holder.
    #[must_use]
    pub fn is_parked(&self) -> bool {
        self.holder.is_some() && self.parked == self.holder
    }

    /// An update carrying the read resourceVersion: applies only if nobody moved the Lease.
    ///
    /// # Errors
    /// [`Refused`] on a resourceVersion conflict (409).
    pub fn updated(&self, next: &KubeLease, parked_key: &str) -> Result<Self, Refused> {
        if next.metadata.resource_version.as_deref() != Some(self.rv.to_string().as_str()) {
            return Err(Refused);
        }
        Ok(Self::parse(next, parked_key, self.rv + 1))
    }

    /// Reads a rendered Lease back.
    #[must_use]
    pub fn parse(l: &KubeLease, parked_key: &str, rv: u16) -> Self {
        let spec = l.spec.clone().unwrap_or_default();
        Self {
            rv,
            holder: spec
                .holder_identity
                .as_deref()
                .filter(|h| !h.is_empty())
                .map(sym),
            transitions: u8::try_from(spec.lease_transitions.unwrap_or(0)).unwrap_or(u8::MAX),
            renewed: spec.renew_time.map_or(0, |MicroTime(t)| tick_of(t)),
            parked: l
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(parked_key))
                .map(|h| sym(h)),
        }
    }
}
