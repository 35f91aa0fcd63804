//! Fence discovery: every object of the given kinds and the Lease carrying our annotations,
//! with holder, epoch, age and the exact CAS release patch each would need. Fenced objects
//! are selected server-side by the fenced label ([`Listing::Labelled`]); a full scan
//! ([`Listing::FullScan`]) also finds fences written without it.
//!
//! Age is measured from the `since` timestamp of the prior annotation (`<prefix>/prior`),
//! written by the fencer's clock at acquire time; the owner annotation stays `holder;epoch`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde_json::{Value, json};

use crate::api::{error, resource_name};
use crate::decide::{ReleaseDecision, annotation, held_from_annotations};
use crate::lease::decide::{is_expired, transitions};
use crate::mark::MarkAt;
use crate::mark::RecordedMark;
use crate::release::decide_release;
use crate::{AnnotationKeys, Clock, FenceError, LeaseConfig, ObjectRef, OwnerValue};

/// Where to look.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scope {
    /// Every namespace (needs cluster-wide `list`).
    All,
    /// These namespaces only.
    Namespaces(Vec<String>),
}

impl Scope {
    /// These namespaces, each once in the order given; every name must be a DNS label (it
    /// ends up in a request path).
    ///
    /// # Errors
    ///
    /// The first name that is not a namespace name.
    pub fn namespaces<'a>(names: impl IntoIterator<Item = &'a String>) -> Result<Self, String> {
        let mut out: Vec<String> = Vec::new();
        for ns in names {
            if !crate::keys::is_dns_label(ns) {
                return Err(ns.clone());
            }
            if !out.contains(ns) {
                out.push(ns.clone());
            }
        }
        Ok(Self::Namespaces(out))
    }
}

/// How objects are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Listing {
    /// Only objects carrying the fenced label ([`AnnotationKeys::fenced_selector`]), selected
    /// by the API server: nothing else is read.
    #[default]
    Labelled,
    /// Every object of each kind, filtered here: also finds fences written by a version that
    /// wrote no label. Slower, and reads every object's spec.
    FullScan,
}

/// Everything discovery found.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FenceReport {
    /// The Lease, if it exists.
    pub lease: Option<FoundLease>,
    /// Every object carrying an owner annotation, well-formed or not, sorted by resource,
    /// namespace and name.
    pub fences: Vec<FoundFence>,
}

/// One object carrying an owner annotation.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FoundFence {
    /// The object.
    pub object: ObjectRef,
    /// What the annotations say.
    pub state: FoundState,
}

/// What an object's fence annotations say.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FoundState {
    /// A well-formed fence.
    Fence {
        /// `holder;epoch`.
        owner: OwnerValue,
        /// When it was taken (the prior annotation's `since`).
        since: Timestamp,
        /// `now - since` (zero if `since` lies in the future).
        age: Duration,
        /// The recorded marks with their prior values.
        marks: Vec<RecordedMark>,
        /// The CAS release it would need, or why one is withheld.
        release: ReleasePlan,
        /// The Lease (`namespace/name`) the fence was taken under
        /// ([`AnnotationKeys::lease`]); `None` for a fence an older version wrote.
        lease: Option<String>,
        /// How long its holder meant to hold it ([`AnnotationKeys::max_hold`], `--max-hold`);
        /// `None` when none was given, or the value does not read as a duration above zero.
        max_hold: Option<Duration>,
        /// The reason recorded with it ([`AnnotationKeys::reason`]), if any.
        reason: Option<String>,
    },
    /// The owner or prior annotation does not parse: listed, never skipped.
    Malformed {
        /// The owner annotation value as found.
        owner_annotation: String,
        /// What is wrong.
        problem: String,
    },
}

/// A release as discovery would perform it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleasePlan {
    /// This JSON Patch (compact JSON), a CAS on the object as just observed.
    Patch(String),
    /// An exact mark was changed by another writer: a release cannot restore it safely.
    Withheld {
        /// The moved mark.
        at: MarkAt,
    },
}

/// The Lease as found.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FoundLease {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The holder, if any.
    pub holder: Option<String>,
    /// `leaseTransitions`.
    pub epoch: u64,
    /// `acquireTime`.
    pub(crate) acquired: Option<Timestamp>,
    /// `renewTime` (liveness evidence).
    pub(crate) renewed: Option<Timestamp>,
    /// Whether it looks expired by the caller's clock.
    pub expired: bool,
    /// The holder that parked it deliberately (`<prefix>/parked`), if that is its current
    /// holder: a pause meant to outlive its process, not a crashed run.
    pub parked: bool,
    /// A CAS JSON Patch clearing the holder (only when held).
    pub release_patch: Option<String>,
}

/// Lists fences of `kinds` in `scope` and the Lease `lease` with a full scan
/// ([`Listing::FullScan`]); see [`discover_listed`].
///
/// # Errors
/// As [`discover_listed`].
pub async fn discover(
    client: &Client,
    keys: &AnnotationKeys,
    kinds: &[ApiResource],
    scope: &Scope,
    lease: Option<&LeaseConfig>,
    clock: &dyn Clock,
) -> Result<FenceReport, FenceError> {
    discover_listed(client, keys, kinds, scope, lease, clock, Listing::FullScan).await
}

/// Lists fences of `kinds` in `scope` and the Lease `lease`, selecting objects as `listing`
/// says.
///
/// # Guarantees
/// Read-only. Objects with a malformed owner or prior annotation are reported as
/// [`FoundState::Malformed`], never skipped.
///
/// # Errors
/// [`FenceError::Forbidden`] naming `list` and the resource; other API failures.
///
/// # Caveats
/// [`Listing::Labelled`] misses a fence whose label was removed or never written (an older
/// version): [`Listing::FullScan`] finds those. Ages come from the fencing process's clock.
pub async fn discover_listed(
    client: &Client,
    keys: &AnnotationKeys,
    kinds: &[ApiResource],
    scope: &Scope,
    lease: Option<&LeaseConfig>,
    clock: &dyn Clock,
    listing: Listing,
) -> Result<FenceReport, FenceError> {
    let now = clock.now();
    let params = match listing {
        Listing::Labelled => ListParams::default().labels(&keys.fenced_selector()),
        Listing::FullScan => ListParams::default(),
    };
    let mut fences = Vec::new();
    for ar in kinds {
        let apis: Vec<(Api<DynamicObject>, String)> = match scope {
            Scope::All => vec![(Api::all_with(client.clone(), ar), "all namespaces".into())],
            Scope::Namespaces(nss) => nss
                .iter()
                .map(|ns| (Api::namespaced_with(client.clone(), ns, ar), ns.clone()))
                .collect(),
        };
        for (api, where_) in apis {
            let list = api
                .list(&params)
                .await
                .map_err(|e| error("list", resource_name(ar), where_, e))?;
            for item in list.items {
                let value = serde_json::to_value(&item).map_err(|source| FenceError::Json {
                    what: "object",
                    source,
                })?;
                if let Some(found) = inspect(&value, ar, keys, now) {
                    fences.push(found);
                }
            }
        }
    }
    sort_found(&mut fences);
    let lease = match lease {
        None => None,
        Some(cfg) => {
            let api: Api<KubeLease> = Api::namespaced(client.clone(), &cfg.namespace);
            let read = api.get_opt(&cfg.name).await.map_err(|e| {
                error(
                    "get",
                    "leases.coordination.k8s.io".into(),
                    format!("{}/{}", cfg.namespace, cfg.name),
                    e,
                )
            })?;
            read.as_ref()
                .map(|l| inspect_lease(l, keys, now))
                .transpose()?
        }
    };
    Ok(FenceReport { lease, fences })
}

/// Sorts fences by resource, namespace and name, as discovery reports them.
pub(crate) fn sort_found(fences: &mut [FoundFence]) {
    fences.sort_by(|a, b| {
        let key = |f: &FoundFence| {
            (
                resource_name(&f.object.resource),
                f.object.namespace.clone(),
                f.object.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
}

/// Classifies one object as read: `None` when it carries no owner annotation.
#[must_use]
pub fn inspect(
    obj: &Value,
    resource: &ApiResource,
    keys: &AnnotationKeys,
    now: Timestamp,
) -> Option<FoundFence> {
    let raw = obj.pointer(crate::pointer::ANNOTATIONS)?.get(&keys.owner)?;
    let object = ObjectRef::new(
        resource.clone(),
        obj.pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        obj.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default(),
    );
    let owner_annotation = raw.as_str().map_or_else(|| raw.to_string(), str::to_string);
    let malformed = |problem: String| FoundFence {
        object: object.clone(),
        state: FoundState::Malformed {
            owner_annotation: owner_annotation.clone(),
            problem,
        },
    };
    let (held, since) = match held_from_annotations(obj, keys) {
        Ok(x) => x,
        Err(e) => return Some(malformed(e.to_string())),
    };
    let release = match decide_release(Some(obj), keys, &held) {
        Ok(ReleaseDecision::Patch(p)) => {
            ReleasePlan::Patch(serde_json::to_string(&p).unwrap_or_default())
        }
        Ok(ReleaseDecision::MarkMoved { at }) => ReleasePlan::Withheld { at },
        Ok(other) => return Some(malformed(format!("unexpected release decision {other:?}"))),
        Err(e) => return Some(malformed(e.to_string())),
    };
    let age = Duration::try_from(now.duration_since(since)).unwrap_or_default();
    Some(FoundFence {
        object,
        state: FoundState::Fence {
            owner: held.owner,
            since,
            age,
            marks: held.marks,
            release,
            lease: annotation(obj, &keys.lease).map(str::to_string),
            max_hold: annotation(obj, &keys.max_hold)
                .and_then(crate::lease::decide::parse_max_hold),
            reason: annotation(obj, &keys.reason).map(str::to_string),
        },
    })
}

/// Describes the Lease as read.
///
/// # Errors
/// [`FenceError::Malformed`] for a negative `leaseTransitions`.
pub(crate) fn inspect_lease(
    lease: &KubeLease,
    keys: &AnnotationKeys,
    now: Timestamp,
) -> Result<FoundLease, FenceError> {
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let parked_by = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(&keys.parked));
    let parked = holder.is_some() && parked_by == holder.as_ref();
    let rv = lease.metadata.resource_version.clone().unwrap_or_default();
    let release_patch = holder.as_ref().map(|h| {
        json!([
            { "op": "test", "path": "/metadata/resourceVersion", "value": rv },
            { "op": "test", "path": "/spec/holderIdentity", "value": h },
            { "op": "remove", "path": "/spec/holderIdentity" },
        ])
        .to_string()
    });
    Ok(FoundLease {
        namespace: lease.metadata.namespace.clone().unwrap_or_default(),
        name: lease.metadata.name.clone().unwrap_or_default(),
        epoch: transitions(&spec)?,
        acquired: spec.acquire_time.as_ref().map(|MicroTime(t)| *t),
        renewed: spec.renew_time.as_ref().map(|MicroTime(t)| *t),
        expired: holder.is_some() && is_expired(&spec, now),
        parked,
        holder,
        release_patch,
    })
}

/// The owner annotation value of an object, if any (for callers filtering by holder).
#[must_use]
pub(crate) fn owner_of<'a>(obj: &'a Value, keys: &AnnotationKeys) -> Option<&'a str> {
    annotation(obj, keys.owner.as_str())
}

#[cfg(test)]
mod tests {
    use super::Scope;

    #[test]
    fn a_scope_of_namespaces_keeps_each_once_and_refuses_what_is_not_a_name() {
        let names = ["a", "b", "a"].map(String::from);
        assert_eq!(
            Scope::namespaces(&names),
            Ok(Scope::Namespaces(vec!["a".into(), "b".into()]))
        );
        for bad in ["", "..", "A", "a/b", "-a"] {
            assert_eq!(Scope::namespaces(&[bad.to_string()]), Err(bad.to_string()));
        }
    }
}
