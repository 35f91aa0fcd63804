//! The thin async layer of owner fences: read, ask [`crate::decide`], write one CAS patch.

use std::sync::Arc;

use kube::Client;
use kube::api::{Api, DynamicObject, Patch};
use serde_json::Value;

use crate::api::{CallFailure, classify, error, get_retrying};
use crate::decide::{annotation, held_from_annotations};
use crate::guard::{FenceGuard, ObjectRef};
use crate::lease::handle::LeaseHandle;
use crate::mark::MarkAt;
use crate::remark::{RemarkDecision, decide_remark};
use crate::{AnnotationKeys, Clock, FenceError, OwnerValue, SystemClock};

mod acquire;
mod release;

pub(crate) use acquire::{Dry, Round, lease_mark};

use crate::api::{MAX_ATTEMPTS, READ_RETRY_BUDGET};

/// Takes and releases owner fences for one owner value.
#[derive(Clone)]
pub struct Fencer {
    client: Client,
    keys: AnnotationKeys,
    owner: OwnerValue,
    clock: Arc<dyn Clock>,
    lease: Option<LeaseHandle>,
    events: bool,
    /// Why the releases happen, when it is not the plain end of the work (shared by clones).
    release_note: Arc<std::sync::Mutex<Option<String>>>,
}

impl std::fmt::Debug for Fencer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fencer")
            .field("keys", &self.keys)
            .field("owner", &self.owner)
            .field("lease", &self.lease.as_ref().map(LeaseHandle::epoch))
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

impl Fencer {
    /// A fencer writing `owner` under `keys`, with the system clock, Events on, no Lease.
    #[must_use]
    pub fn new(client: Client, keys: AnnotationKeys, owner: OwnerValue) -> Self {
        Self {
            client,
            keys,
            owner,
            clock: Arc::new(SystemClock),
            lease: None,
            events: true,
            release_note: Arc::default(),
        }
    }

    /// Says why the releases from now on happen (e.g. `the run was cancelled`); the
    /// `HandoffReleased` Event carries it after the reason, so `kubectl describe` tells a
    /// cancelled or failed run from a finished one. Shared by every clone of this fencer.
    /// Fixed caller text: never a secret.
    pub fn note_releases(&self, note: &str) {
        *self
            .release_note
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(note.to_string());
    }

    /// Uses `clock` for the fence timestamp (the `since` of the prior annotation).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Asserts this Lease (renew and read back) before every acquire write.
    #[must_use]
    pub fn with_lease(mut self, lease: LeaseHandle) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Turns Event recording on or off.
    #[must_use]
    pub fn with_events(mut self, on: bool) -> Self {
        self.events = on;
        self
    }

    /// This fencer, writing `owner` instead (same client, keys, clock and Events; no Lease:
    /// the release engine asserts its own).
    pub(crate) fn for_owner(&self, owner: OwnerValue) -> Self {
        let mut f = self.clone();
        f.owner = owner;
        f.lease = None;
        f
    }

    /// The client every fence read and write of this fencer goes through: a caller's read of
    /// an object it is about to fence goes through it too, so the first compare-and-swap can
    /// start from that read on the same connection (no second read).
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The owner value this fencer writes.
    #[must_use]
    pub fn owner(&self) -> &OwnerValue {
        &self.owner
    }

    /// The annotation keys.
    #[must_use]
    pub fn keys(&self) -> &AnnotationKeys {
        &self.keys
    }

    /// The Lease this fencer asserts before each acquire write ([`Fencer::with_lease`]), for
    /// callers guarding their own protected writes with the same Lease.
    #[must_use]
    pub fn lease(&self) -> Option<&LeaseHandle> {
        self.lease.as_ref()
    }

    /// Moves the mark at `at` of a fence we hold to `value` (e.g. a fresh `requestedAt` nonce):
    /// ONE JSON Patch that tests uid, resourceVersion and our owner, sets the mark and rewrites
    /// the prior annotation with the new value and the same prior (the pure
    /// `remark::decide_remark`). The guard follows, so the release still restores the pre-fence
    /// value. `Ok(false)`: the object is gone or not ours any more; nothing was written.
    ///
    /// # Guarantees
    /// With [`Fencer::with_lease`], the Lease is asserted before each write; 409/422 re-read
    /// and decide again (at most `MAX_ATTEMPTS` rounds); a lost response is judged by a
    /// re-read showing exactly the new mark and prior.
    ///
    /// # Errors
    /// [`FenceError::LeaseLost`], [`FenceError::InvalidMark`] (no mark at `at`),
    /// [`FenceError::Contended`], API failures.
    pub async fn remark(
        &self,
        guard: &mut FenceGuard,
        at: &MarkAt,
        value: Value,
    ) -> Result<bool, FenceError> {
        let obj = guard.object.clone();
        for _ in 0..MAX_ATTEMPTS {
            let read = self.read(&obj).await?;
            let read_rv = resource_version(read.as_ref());
            let (patch, held) =
                match decide_remark(read.as_ref(), &self.keys, &guard.held, at, &value)? {
                    RemarkDecision::Patch { patch, held } => (patch, held),
                    RemarkDecision::NotOurs => return Ok(false),
                };
            if let Some(lease) = &self.lease {
                lease.assert().await?;
            }
            let sent = self
                .api(&obj)
                .patch(
                    &obj.name,
                    &crate::api::patch_params(),
                    &Patch::Json::<()>(patch),
                )
                .await;
            match sent {
                Ok(_) => {
                    guard.held = held;
                    return Ok(true);
                }
                Err(e) => match classify(&e) {
                    CallFailure::Conflict | CallFailure::NotFound => {}
                    CallFailure::Invalid => {
                        if !self.moved_since(&obj, &read_rv).await? {
                            return Err(rejected(&obj, e));
                        }
                    }
                    CallFailure::Unknown => {
                        tracing::warn!(object = %obj, error = %e, "remark response lost; re-reading");
                        let again = self.read(&obj).await?;
                        if again.is_some_and(|o| {
                            held_from_annotations(&o, &self.keys).is_ok_and(|(h, _)| h == held)
                                && o.pointer(&at.pointer()) == Some(&value)
                        }) {
                            guard.held = held;
                            return Ok(true);
                        }
                    }
                    CallFailure::Forbidden | CallFailure::Other => {
                        return Err(error("patch", obj.resource_name(), obj.target(), e));
                    }
                },
            }
        }
        Err(FenceError::Contended {
            what: "moving a fence mark",
        })
    }

    /// Takes over the release of a fence found on the cluster (e.g. left by a crashed run, as
    /// `fences release` does): reads `obj` and, if its owner annotation equals `owner`, builds
    /// a guard from the recorded prior annotation. `None` when the object is gone or not fenced
    /// by `owner`.
    ///
    /// # Errors
    /// A failed read, or [`FenceError::Malformed`] when the prior annotation does not parse.
    pub async fn adopt_recorded(
        &self,
        obj: &ObjectRef,
        owner: &OwnerValue,
    ) -> Result<Option<FenceGuard>, FenceError> {
        let Some(read) = self.read(obj).await? else {
            return Ok(None);
        };
        if annotation(&read, &self.keys.owner) != Some(owner.to_string().as_str()) {
            return Ok(None);
        }
        let (held, _) = held_from_annotations(&read, &self.keys)?;
        let reason = annotation(&read, &self.keys.reason).map(str::to_string);
        let rv = read
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok(Some(FenceGuard::new(obj.clone(), held, reason, rv, true)))
    }

    /// Re-reads the object: is the fence still ours (same uid, our owner value)?
    ///
    /// # Errors
    /// A failed read (404 is `Ok(false)`).
    pub async fn prove(&self, guard: &FenceGuard) -> Result<bool, FenceError> {
        let read = self.read(&guard.object).await?;
        Ok(read.is_some_and(|o| {
            o.pointer("/metadata/uid").and_then(Value::as_str) == Some(guard.uid())
                && annotation(&o, &self.keys.owner) == Some(guard.owner().to_string().as_str())
        }))
    }

    /// Reads `obj` as JSON (`None` on 404).
    ///
    /// # Guarantees
    /// A read that fails transiently (connection refused or broken, 429, 5xx: an API server
    /// restarting or overloaded) is sent again with backoff for up to [`READ_RETRY_BUDGET`];
    /// acquire, release and prove all read through here, so one refused connection does not
    /// leave a fence held. Writes are never retried this way.
    ///
    /// # Errors
    /// [`FenceError::Forbidden`] or another API failure; a transient one once the budget is
    /// spent.
    pub async fn read(&self, obj: &ObjectRef) -> Result<Option<Value>, FenceError> {
        let got = get_retrying(&self.api(obj), &obj.name, obj, READ_RETRY_BUDGET)
            .await
            .map_err(|e| error("get", obj.resource_name(), obj.target(), e))?;
        got.map(|o| {
            serde_json::to_value(o).map_err(|source| FenceError::Json {
                what: "object",
                source,
            })
        })
        .transpose()
    }

    /// Whether `obj` is gone or has another resourceVersion than `read_rv`. After a 422 this
    /// tells a lost race (moved: re-read and decide again) from an invalid request (not moved).
    pub(crate) async fn moved_since(
        &self,
        obj: &ObjectRef,
        read_rv: &str,
    ) -> Result<bool, FenceError> {
        let read = self.read(obj).await?;
        Ok(read
            .as_ref()
            .and_then(|o| o.pointer("/metadata/resourceVersion"))
            .and_then(Value::as_str)
            != Some(read_rv))
    }

    pub(crate) fn api(&self, obj: &ObjectRef) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &obj.namespace, &obj.resource)
    }
}

/// The `resourceVersion` of an object as read (empty when absent).
pub(super) fn resource_version(read: Option<&Value>) -> String {
    read.and_then(|o| o.pointer("/metadata/resourceVersion"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

pub(super) fn rejected(obj: &ObjectRef, e: kube::Error) -> FenceError {
    FenceError::Rejected {
        verb: "patch",
        resource: obj.resource_name(),
        target: obj.target(),
        source: Box::new(e),
    }
}
