//! The thin async layer of owner fences: read, ask [`crate::decide`], write one CAS patch.

use std::sync::Arc;

use kube::Client;
use kube::api::{Api, DynamicObject, Patch};
use serde_json::Value;

use crate::api::{CallFailure, classify, error, get_retrying};
use crate::decide::{
    AcquireDecision, AcquirePlan, LostWrite, Refusal, annotation, decide_acquire,
    held_from_annotations, lost_write,
};
use crate::events::{self, EventKind};
use crate::guard::{FenceGuard, ObjectRef};
use crate::lease::handle::LeaseHandle;
use crate::mark::MarkAt;
use crate::outcome::{AcquireOutcome, Applied, LostAcquire};
use crate::remark::{RemarkDecision, decide_remark};
use crate::{AnnotationKeys, Clock, FenceError, Mark, OwnerValue, SystemClock};

mod release;

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

    /// The client.
    pub(crate) fn client(&self) -> &Client {
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

    /// Fences `obj`: one CAS patch adding the owner, prior and reason annotations and `marks`.
    ///
    /// # Guarantees
    /// - Every write tests the uid and resourceVersion just read; a 409/422 re-reads and
    ///   decides again (at most `MAX_ATTEMPTS` rounds), never retries blindly.
    /// - An object with another owner is never written ([`AcquireOutcome::Refused`]).
    /// - A lost response is resolved by a re-read: adopted only on exactly our post-state,
    ///   else [`AcquireOutcome::Ambiguous`] keeps the guard-equivalent.
    /// - With [`Fencer::with_lease`], the Lease is asserted before each write.
    ///
    /// # Errors
    /// [`FenceError::Forbidden`] naming verb and resource on 403, [`FenceError::LeaseLost`],
    /// invalid marks or reason, and other API failures.
    ///
    /// # Caveats
    /// `reason` is stored in an annotation and an Event: never pass secrets.
    pub async fn acquire(
        &self,
        obj: &ObjectRef,
        marks: Vec<Mark>,
        reason: Option<&str>,
    ) -> Result<AcquireOutcome, FenceError> {
        self.acquire_on(obj, None, marks, reason).await
    }

    /// [`Fencer::acquire`] whose first round decides on `read`, the object as the caller read
    /// it (e.g. in a preflight), instead of reading it again. The patch tests that read's uid
    /// and resourceVersion, so if the object changed since, the server refuses it and the next
    /// round reads afresh, as after any lost race.
    ///
    /// # Errors
    /// As [`Fencer::acquire`].
    pub async fn acquire_on(
        &self,
        obj: &ObjectRef,
        mut read: Option<Value>,
        marks: Vec<Mark>,
        reason: Option<&str>,
    ) -> Result<AcquireOutcome, FenceError> {
        let marks = self.with_lease_mark(marks);
        for _ in 0..MAX_ATTEMPTS {
            let decided = match read.take() {
                Some(known) => decide_acquire(
                    Some(&known),
                    &self.keys,
                    &self.owner,
                    &marks,
                    reason,
                    self.clock.now(),
                )?,
                None => self.plan_acquire(obj, &marks, reason).await?,
            };
            let plan = match decided {
                AcquireDecision::Patch(plan) => plan,
                AcquireDecision::NotFound => return Ok(AcquireOutcome::NotFound),
                AcquireDecision::Refuse(r) => return Ok(refused(r)),
                AcquireDecision::AlreadyOurs {
                    held,
                    resource_version,
                } => {
                    let guard = FenceGuard::new(
                        obj.clone(),
                        held,
                        reason.map(str::to_string),
                        Some(resource_version),
                        true,
                    );
                    return Ok(AcquireOutcome::Acquired(guard));
                }
            };
            match self.apply_acquire(obj, plan, reason).await? {
                Applied::Acquired(guard) => return Ok(AcquireOutcome::Acquired(guard)),
                Applied::Moved => {}
                Applied::Gone => return Ok(AcquireOutcome::NotFound),
                Applied::Ambiguous { guard, why } => {
                    return Ok(AcquireOutcome::Ambiguous { guard, why });
                }
            }
        }
        Ok(AcquireOutcome::Contended)
    }

    /// `marks` and, with a Lease, the mark naming it (`<prefix>/lease` = `namespace/name`),
    /// so whoever finds the fence judges it by the Lease it was taken under, and the holder's
    /// max-hold (`<prefix>/max-hold`) when it has one. Restored like any mark (removed on
    /// release); a changed value does not keep the fence.
    fn with_lease_mark(&self, marks: Vec<Mark>) -> Vec<Mark> {
        let name = self.lease.as_ref().map(LeaseHandle::lease_name);
        let max_hold = self.lease.as_ref().and_then(LeaseHandle::max_hold);
        lease_mark(&self.keys, marks, name.as_deref(), max_hold)
    }

    /// Reads `obj` and decides an acquire (no write).
    ///
    /// # Errors
    /// As [`Fencer::acquire`].
    pub async fn plan_acquire(
        &self,
        obj: &ObjectRef,
        marks: &[Mark],
        reason: Option<&str>,
    ) -> Result<AcquireDecision, FenceError> {
        let read = self.read(obj).await?;
        decide_acquire(
            read.as_ref(),
            &self.keys,
            &self.owner,
            marks,
            reason,
            self.clock.now(),
        )
    }

    /// Sends one planned acquire patch and classifies the answer. A lost response is resolved
    /// with [`Fencer::resolve_lost_acquire`].
    ///
    /// # Errors
    /// As [`Fencer::acquire`].
    pub async fn apply_acquire(
        &self,
        obj: &ObjectRef,
        plan: AcquirePlan,
        reason: Option<&str>,
    ) -> Result<Applied, FenceError> {
        if let Some(lease) = &self.lease {
            // The chain on record: the object is on the Lease before its fence can be.
            lease.record(&self.keys.chain, obj).await?;
        }
        let reason = reason.map(str::to_string);
        match self
            .api(obj)
            .patch(
                &obj.name,
                &crate::api::patch_params(),
                &Patch::Json::<()>(plan.patch.clone()),
            )
            .await
        {
            Ok(written) => {
                let rv = written.metadata.resource_version.clone();
                tracing::info!(object = %obj, owner = %self.owner, "fenced");
                if self.events {
                    let msg = events::message("fenced by", &self.owner, reason.as_deref());
                    events::record(&self.client, obj, &plan.held.uid, EventKind::Fenced, &msg)
                        .await;
                }
                Ok(Applied::Acquired(FenceGuard::new(
                    obj.clone(),
                    plan.held,
                    reason,
                    rv,
                    true,
                )))
            }
            Err(e) => match classify(&e) {
                CallFailure::Conflict => Ok(Applied::Moved),
                CallFailure::Invalid => {
                    if self.moved_since(obj, &plan.read_resource_version).await? {
                        Ok(Applied::Moved)
                    } else {
                        Err(rejected(obj, e))
                    }
                }
                CallFailure::NotFound => Ok(Applied::Gone),
                CallFailure::Unknown => {
                    tracing::warn!(object = %obj, error = %e, "acquire response lost; re-reading");
                    Ok(
                        match self
                            .resolve_lost_acquire(obj, plan, reason.as_deref())
                            .await?
                        {
                            LostAcquire::Landed(guard) => Applied::Acquired(guard),
                            LostAcquire::NotApplied => Applied::Moved,
                            LostAcquire::Unresolved { guard, why } => {
                                Applied::Ambiguous { guard, why }
                            }
                        },
                    )
                }
                CallFailure::Forbidden | CallFailure::Other => {
                    Err(error("patch", obj.resource_name(), obj.target(), e))
                }
            },
        }
    }

    /// Resolves an acquire write whose response was lost: re-reads `obj` and adopts only if it
    /// shows exactly the post-state of `plan`. An object that shows the write not applied is
    /// first moved on by a CAS of ours ([`Fencer::settle_unheld`]), so the lost request cannot
    /// commit later: only then is it judged not applied.
    ///
    /// # Errors
    /// A failed re-read.
    pub async fn resolve_lost_acquire(
        &self,
        obj: &ObjectRef,
        plan: AcquirePlan,
        reason: Option<&str>,
    ) -> Result<LostAcquire, FenceError> {
        let read = self.read(obj).await?;
        let reason = reason.map(str::to_string);
        Ok(match lost_write(read.as_ref(), &self.keys, &plan) {
            LostWrite::Landed { resource_version } => {
                tracing::info!(object = %obj, owner = %self.owner, "adopted fence after lost response");
                LostAcquire::Landed(FenceGuard::new(
                    obj.clone(),
                    plan.held,
                    reason,
                    Some(resource_version),
                    true,
                ))
            }
            // Unchanged on one read is "not applied *yet*": the request may still commit (a
            // gateway's 504 while the server works on). Move the object on with a CAS of our
            // own first, so its precondition fails whenever it arrives; then decide.
            LostWrite::NotApplied => match self.settle_unheld(obj).await? {
                Some(guard) => {
                    tracing::info!(object = %obj, owner = %self.owner, "adopted fence after lost response");
                    LostAcquire::Landed(guard)
                }
                None => LostAcquire::NotApplied,
            },
            LostWrite::Unclear(why) => {
                tracing::error!(object = %obj, owner = %self.owner, ?why, "fence outcome unknown; keeping it for cleanup");
                LostAcquire::Unresolved {
                    guard: FenceGuard::new(obj.clone(), plan.held, reason, None, false),
                    why,
                }
            }
        })
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

/// `marks` and, with a Lease named `lease` (`namespace/name`), the mark naming it, and with
/// a `max_hold` the mark recording it (also what a dry-run fence adds: `crate::dry_run`).
/// Both are restored only if unchanged: the release removes them, and a value someone
/// changed does not keep the fence.
pub(crate) fn lease_mark(
    keys: &AnnotationKeys,
    mut marks: Vec<Mark>,
    lease: Option<&str>,
    max_hold: Option<std::time::Duration>,
) -> Vec<Mark> {
    let max_hold = max_hold.map(crate::lease::decide::format_max_hold);
    for (key, value) in [
        (&keys.lease, lease.map(str::to_string)),
        (&keys.max_hold, max_hold),
    ] {
        if let Some(value) = value
            && !marks
                .iter()
                .any(|m| m.at == MarkAt::Annotation(key.clone()))
        {
            marks.push(
                Mark::annotation(key.clone(), value).restore(crate::mark::Restore::IfUnchanged),
            );
        }
    }
    marks
}

fn refused(r: Refusal) -> AcquireOutcome {
    match r {
        Refusal::Owned { holder } => AcquireOutcome::Refused { holder },
        Refusal::OursDiffers => AcquireOutcome::OursDiffers,
        Refusal::AlreadyMarked { at } => AcquireOutcome::AlreadyMarked { at },
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
