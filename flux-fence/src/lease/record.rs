//! The chain on record: what a holder has fenced, kept on its Lease.
//!
//! Before each fence is written, its object (kind, namespace, name) is added to the annotation
//! `<prefix>/chain` on the Lease ([`crate::AnnotationKeys::chain`]), in the same Lease update
//! as the assertion that precedes the fence write: a CAS on the Lease as the server last
//! answered us, so the record is on the server before the fence can be. Whoever later acts for
//! the holder — `resume --holder`, `fences`, `fences recover`, `fences release`, a CI post step
//! — reads this one object to find every fence of the holder, whatever namespaces it scans.
//!
//! # Rules
//!
//! - The record names one owner (`holder;epoch`) and lists members only ever added.
//! - A holder writes its record only over an absent one, its own, or one of an older epoch
//!   (`decide_stamp`): a Lease taken free that still carries a record of a dead epoch. The
//!   session's preflight refuses such a Lease while any member of that record is still fenced
//!   by its owner, so only a record whose fences are all gone is replaced. Anything else (a
//!   malformed record, a record of a newer epoch) refuses the fence write.
//! - The record is cleared only by the release of the Lease, and only when its owner is the
//!   releasing holder or an owner the releaser settled ([`crate::LeaseHandle::settle_record`]) after
//!   releasing every recorded member (`clears_on_release`). A park keeps it; so does
//!   [`crate::LeaseGuard::leave_held`].
//!
//! The pure decisions are `decide_stamp` and `clears_on_release`; the rest reads and
//! parses.

use std::sync::{Mutex, PoisonError};

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use serde::{Deserialize, Serialize};

use crate::api::{error, get_retrying};
use crate::discover::{FoundFence, inspect};
use crate::lease::config::LeaseConfig;
use crate::lease::decide::LeaseReleaseDecision;
use crate::{AnnotationKeys, FenceError, ObjectRef, OwnerValue};

/// One recorded member: enough to read it back by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RecordedMember {
    /// `group/version` (or `version` for the core group) as fenced.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl RecordedMember {
    /// The record of `obj`.
    #[must_use]
    pub fn of(obj: &ObjectRef) -> Self {
        Self {
            api_version: obj.resource.api_version.clone(),
            kind: obj.resource.kind.clone(),
            namespace: obj.namespace.clone(),
            name: obj.name.clone(),
        }
    }

    fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    /// The object, when its group and kind are among `kinds` (read with the reader's version
    /// of that kind); `None` for any other kind, which a reader never touches.
    #[must_use]
    pub fn resolve(&self, kinds: &[ApiResource]) -> Option<ObjectRef> {
        let ar = kinds
            .iter()
            .find(|k| k.kind == self.kind && k.group == self.group())?;
        Some(ObjectRef::new(ar.clone(), &self.namespace, &self.name))
    }

    /// Whether this records `obj` (same group, kind, namespace and name; any version).
    #[must_use]
    pub fn is(&self, obj: &ObjectRef) -> bool {
        self.kind == obj.resource.kind
            && self.group() == obj.resource.group
            && self.namespace == obj.namespace
            && self.name == obj.name
    }
}

/// `Kind namespace/name`.
impl std::fmt::Display for RecordedMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// The content of `<prefix>/chain` on the Lease, compact JSON:
/// `{"owner":"h;3","members":[{"apiVersion":"kustomize.toolkit.fluxcd.io/v1",
/// "kind":"Kustomization","namespace":"flux-system","name":"apps"}]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChainRecord {
    /// The owner value (`holder;epoch`) whose fences these are.
    pub owner: String,
    /// Every object the owner fenced or was about to fence, in the order recorded.
    pub members: Vec<RecordedMember>,
}

impl ChainRecord {
    /// Compact JSON for the annotation.
    ///
    /// # Errors
    /// [`FenceError::Json`] (not expected).
    pub fn render(&self) -> Result<String, FenceError> {
        serde_json::to_string(self).map_err(|source| FenceError::Json {
            what: "chain record",
            source,
        })
    }

    /// Parses the annotation value.
    ///
    /// # Errors
    /// [`FenceError::Malformed`] for anything that is not a record with a valid owner value.
    pub fn parse(text: &str) -> Result<Self, FenceError> {
        let record: Self =
            serde_json::from_str(text).map_err(|_| FenceError::malformed("chain record", text))?;
        record.owner_value()?;
        Ok(record)
    }

    /// The owner as an [`OwnerValue`].
    ///
    /// # Errors
    /// [`FenceError::Malformed`].
    pub fn owner_value(&self) -> Result<OwnerValue, FenceError> {
        self.owner.parse()
    }

    /// The record on `lease` under `keys.chain`, if any.
    ///
    /// # Errors
    /// [`FenceError::Malformed`] when the annotation does not parse.
    pub fn on_lease(lease: &KubeLease, keys: &AnnotationKeys) -> Result<Option<Self>, FenceError> {
        lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(&keys.chain))
            .map(|t| Self::parse(t))
            .transpose()
    }
}

/// The answer of `decide_stamp`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Stamp {
    /// The Lease already records every member: write it as it is.
    Keep,
    /// Write this annotation value.
    Write(String),
    /// The Lease carries a record this holder may not replace (another owner of our epoch or
    /// a newer one, or a malformed record): no fence may be written.
    Foreign {
        /// The record's owner, or the text found when it does not parse.
        owner: String,
    },
}

/// Decides the record a renewal by `ours` writes, given the annotation found (`current`) and
/// the members this holder has recorded so far. Pure.
///
/// # Guarantees
/// Members are only ever added; a record of our owner keeps every member it lists. A record
/// of another owner is replaced only when its epoch is older than ours (see the module docs).
///
/// # Errors
/// [`FenceError::Json`] (not expected).
pub(crate) fn decide_stamp(
    current: Option<&str>,
    ours: &OwnerValue,
    members: &[RecordedMember],
) -> Result<Stamp, FenceError> {
    if members.is_empty() {
        return Ok(Stamp::Keep);
    }
    let fresh = |members: Vec<RecordedMember>| {
        ChainRecord {
            owner: ours.to_string(),
            members,
        }
        .render()
        .map(Stamp::Write)
    };
    let Some(text) = current else {
        return fresh(members.to_vec());
    };
    let Ok(found) = ChainRecord::parse(text) else {
        return Ok(Stamp::Foreign {
            owner: text.chars().take(80).collect(),
        });
    };
    let owner = found.owner_value()?;
    if owner == *ours {
        let mut all = found.members.clone();
        for m in members {
            if !all.contains(m) {
                all.push(m.clone());
            }
        }
        return if all == found.members {
            Ok(Stamp::Keep)
        } else {
            fresh(all)
        };
    }
    if owner.epoch < ours.epoch {
        return fresh(members.to_vec());
    }
    Ok(Stamp::Foreign { owner: found.owner })
}

/// Whether the release of the Lease by `ours` removes the record found (`current`): only a
/// record of `ours` or of an owner in `settled`. Pure.
#[must_use]
pub(crate) fn clears_on_release(
    current: Option<&str>,
    ours: &OwnerValue,
    settled: &[String],
) -> bool {
    let Some(found) = current.and_then(|t| ChainRecord::parse(t).ok()) else {
        return false;
    };
    found.owner == ours.to_string() || settled.contains(&found.owner)
}

/// What a held Lease has recorded (kept in the handle, stamped on every renewal).
#[derive(Debug, Default)]
pub(crate) struct Pending(Mutex<PendingInner>);

#[derive(Debug, Default)]
struct PendingInner {
    /// The annotation key (set by the first record or settle).
    key: Option<String>,
    members: Vec<RecordedMember>,
    /// Owners whose recorded members the holder released: their record may be cleared.
    settled: Vec<String>,
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, PendingInner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `m` to the record under `key` (the first key given stays); whether it was new.
    pub(crate) fn add(&self, key: &str, m: &RecordedMember) -> bool {
        let mut inner = self.lock();
        inner.key.get_or_insert_with(|| key.to_string());
        let added = !inner.members.contains(m);
        if added {
            inner.members.push(m.clone());
        }
        added
    }

    /// Takes `m` out of the record again (it was never recorded on the server).
    pub(crate) fn forget(&self, m: &RecordedMember) {
        self.lock().members.retain(|x| x != m);
    }

    /// Notes that every member recorded under `owner` is released: the release of the Lease
    /// may clear that record.
    pub(crate) fn settle(&self, key: &str, owner: &str) {
        let mut inner = self.lock();
        inner.key.get_or_insert_with(|| key.to_string());
        if !inner.settled.iter().any(|s| s == owner) {
            inner.settled.push(owner.to_string());
        }
    }

    /// The members recorded, in order.
    pub(crate) fn members(&self) -> Vec<RecordedMember> {
        self.lock().members.clone()
    }

    /// Writes the record onto `lease` (the renewal about to be sent), as `decide_stamp` says.
    pub(crate) fn stamp(
        &self,
        lease: &mut KubeLease,
        ours: &OwnerValue,
        lease_name: &str,
    ) -> Result<(), FenceError> {
        let inner = self.lock();
        let Some(key) = inner.key.as_deref() else {
            return Ok(());
        };
        let current = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str);
        match decide_stamp(current, ours, &inner.members)? {
            Stamp::Keep => Ok(()),
            Stamp::Write(text) => {
                lease
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(key.to_string(), text);
                Ok(())
            }
            Stamp::Foreign { owner } => Err(FenceError::ChainRecorded {
                lease: lease_name.to_string(),
                owner,
            }),
        }
    }

    /// The release decision with the record removed when `clears_on_release` allows it.
    pub(crate) fn on_release(
        &self,
        decision: LeaseReleaseDecision,
        ours: &OwnerValue,
    ) -> LeaseReleaseDecision {
        let LeaseReleaseDecision::Update(mut lease) = decision else {
            return decision;
        };
        let inner = self.lock();
        if let Some(key) = inner.key.as_deref()
            && let Some(a) = lease.metadata.annotations.as_mut()
            && clears_on_release(a.get(key).map(String::as_str), ours, &inner.settled)
        {
            a.remove(key);
            if a.is_empty() {
                lease.metadata.annotations = None;
            }
        }
        LeaseReleaseDecision::Update(lease)
    }
}

/// Reads the record on the Lease `cfg` (`None`: no Lease, or no record).
///
/// # Errors
/// API failures; [`FenceError::Malformed`] for a record that does not parse.
pub async fn read_record(
    client: &Client,
    keys: &AnnotationKeys,
    cfg: &LeaseConfig,
) -> Result<Option<ChainRecord>, FenceError> {
    let api: Api<KubeLease> = Api::namespaced(client.clone(), &cfg.namespace);
    let target = cfg.to_string();
    let read = get_retrying(&api, &cfg.name, &target, crate::api::READ_RETRY_BUDGET)
        .await
        .map_err(|e| error("get", crate::api::LEASE_RESOURCE.into(), target.clone(), e))?;
    match read {
        None => Ok(None),
        Some(lease) => ChainRecord::on_lease(&lease, keys),
    }
}

/// What reading a record's members found.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct RecordedFences {
    /// Every member that carries a fence (of any owner), as discovery describes it.
    pub found: Vec<FoundFence>,
    /// Members of a kind not among the reader's kinds: never read, never touched.
    pub unknown: Vec<RecordedMember>,
}

/// Reads every member of `record` by name (no list rights needed) and describes each that
/// carries a fence, as [`crate::discover::inspect`] does. Read-only.
///
/// # Errors
/// API failures of a read ([`FenceError::Forbidden`] naming the object on 403).
pub async fn read_members(
    client: &Client,
    keys: &AnnotationKeys,
    kinds: &[ApiResource],
    record: &ChainRecord,
    now: Timestamp,
) -> Result<RecordedFences, FenceError> {
    let mut out = RecordedFences::default();
    for m in &record.members {
        let Some(obj) = m.resolve(kinds) else {
            out.unknown.push(m.clone());
            continue;
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &obj.namespace, &obj.resource);
        let read = get_retrying(&api, &obj.name, &obj, crate::api::READ_RETRY_BUDGET)
            .await
            .map_err(|e| error("get", obj.resource_name(), obj.target(), e))?;
        let Some(read) = read else { continue };
        let value = serde_json::to_value(read).map_err(|source| FenceError::Json {
            what: "object",
            source,
        })?;
        if let Some(found) = inspect(&value, &obj.resource, keys, now) {
            out.found.push(found);
        }
    }
    Ok(out)
}

/// `found` plus every fence in `more` on an object `found` does not already list, sorted as
/// discovery sorts.
pub fn merge_found(found: &mut Vec<FoundFence>, more: Vec<FoundFence>) {
    for f in more {
        if !found.iter().any(|g| g.object == f.object) {
            found.push(f);
        }
    }
    crate::discover::sort_found(found);
}

#[cfg(test)]
mod tests;
