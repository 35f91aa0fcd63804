//! The thin I/O layer of recovery: read the Lease, watch it, discover the fences, ask
//! [`super::plan_recover`], then take the Lease (CAS on the watched version) before any fence
//! is released, release children before parents, and release the Lease.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ApiResource};

use super::assess::{ChildMark, LeaseView, Row, assess};
use super::ci::{CiAsk, ask_ci};
use super::plan::{
    HolderEvidence, PlanOptions, RecoverPlan, Subject, needs_watch, plan_recover, recorded_hold,
};
use super::watch::{WatchProgress, WatchTiming, watch_lease};
use crate::api::{error, get_retrying};
use crate::discover::{self, FenceReport, Listing, Scope};
use crate::engine::{Member, Rules, Settled, Skip, release_members};
use crate::lease::ChainRecord;
use crate::lease::LeaseRecover;
use crate::lease::LeaseRelease;
use crate::lease::RecordedMember;
use crate::lease::RecoverRefusal;
use crate::lease::{merge_found, read_members};
use crate::liveness::LivenessSource;
use crate::{
    AnnotationKeys, Clock, Epoch, FenceError, Fencer, Holder, Lease, LeaseAcquire, LeaseConfig,
    LeaseGuard, ObjectRef, OwnerValue, SystemClock,
};

/// Recovery of fences and a Lease left by gone holders. Build it, then [`Recovery::plan`]
/// (reads and watches only) and [`Recovery::execute`] (writes).
#[derive(Clone)]
pub struct Recovery {
    pub(super) client: Client,
    pub(super) keys: AnnotationKeys,
    pub(super) lease: LeaseConfig,
    pub(super) kinds: Vec<ApiResource>,
    /// The kinds a chain record's members are read as, each by a GET of its own name
    /// ([`Recovery::recorded_kinds`]; default: `kinds`).
    pub(super) recorded: Vec<ApiResource>,
    pub(super) child: ChildMark,
    pub(super) scope: Scope,
    pub(super) listing: Listing,
    opts: PlanOptions,
    pub(super) clock: Arc<dyn Clock>,
    holder: Holder,
    timing: WatchTiming,
    ci: Option<(Arc<dyn LivenessSource>, Option<Duration>)>,
    /// The caller attests that the holder named to `fences release` has exited.
    pub(super) holder_exited: bool,
}

/// One look at the cluster: every fence and the Lease.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Snapshot {
    /// What discovery found.
    pub report: FenceReport,
    /// The Lease, if it exists.
    pub lease: Option<LeaseView>,
    /// When it was taken, by the injected clock (for ages only).
    pub now: Timestamp,
    /// The chain record on the Lease, if any. Every member of it that carries a fence is in
    /// `report`, wherever it lives (read by name, whatever the scope).
    pub record: Option<ChainRecord>,
    /// Members of the record of a kind this recovery does not know: never read or touched.
    pub(crate) record_unknown: Vec<RecordedMember>,
}

/// What [`Recovery::plan`] found and decided.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Planned {
    /// The look at the cluster the plan is made on (taken after the watch).
    pub snapshot: Snapshot,
    /// Every fence, judged.
    pub(crate) rows: Vec<Row>,
    /// The evidence about the Lease holder.
    pub evidence: HolderEvidence,
    /// The plan.
    pub plan: RecoverPlan,
}

/// The outcome of [`Recovery::execute`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[must_use = "a kept or refused fence is a value: report it"]
pub enum RecoverOutcome {
    /// The Lease takeover (a CAS on the watched version) did not land: its holder renewed or
    /// another party wrote it after the evidence. No fence was touched.
    LeaseRaceLost {
        /// The holder the evidence was about.
        gone: String,
        /// Why the takeover was refused, in words.
        why: String,
    },
    /// The plan ran.
    Done(RecoverReport),
}

/// What a recovery did.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
#[must_use = "what recovery left held is in the report"]
pub struct RecoverReport {
    /// The epoch at which we took the Lease over, if we did.
    pub lease_taken: Option<Epoch>,
    /// The fences released, in the order released.
    pub released: Vec<ObjectRef>,
    /// Whether the Lease taken over was released again.
    pub lease_released: bool,
    /// What could not be done, in words.
    pub problems: Vec<(Subject, String)>,
    /// Fences found off their gone holder when their release came (the object deleted, or
    /// released or fenced anew by another party first: a second waiter recovering the same
    /// holder), in words: nothing of the gone holder is left there, so nothing was to do.
    pub moved_on: Vec<(ObjectRef, String)>,
}

impl std::fmt::Debug for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recovery")
            .field("lease", &self.lease)
            .field("scope", &self.scope)
            .field("opts", &self.opts)
            .field("holder", &self.holder)
            .field("ci", &self.ci)
            .finish_non_exhaustive()
    }
}

impl Recovery {
    /// A recovery of fences on objects of `kinds` (in the namespace scope `Scope::All` unless
    /// set) and of the Lease `lease`, recognising children by `child`.
    #[must_use]
    pub fn new(
        client: Client,
        keys: AnnotationKeys,
        lease: LeaseConfig,
        kinds: Vec<ApiResource>,
        child: ChildMark,
    ) -> Self {
        let lease = lease.with_keys(&keys);
        Self {
            client,
            keys,
            lease,
            recorded: kinds.clone(),
            kinds,
            child,
            scope: Scope::All,
            listing: Listing::Labelled,
            opts: PlanOptions::default(),
            clock: Arc::new(SystemClock),
            holder: Holder::generate(),
            timing: WatchTiming {
                poll_every: Duration::from_secs(1),
                progress_every: Duration::from_secs(10),
            },
            ci: None,
            holder_exited: false,
        }
    }

    /// Judges the Lease holder on evidence from its CI system instead of watching the Lease:
    /// `source` is asked about the holder's exact run attempt, again every poll interval
    /// while it answers "still running", for at most `wait` (default: the Lease's duration).
    /// The holder counts as gone only on a finished attempt with the Lease unchanged since it
    /// was read; every other answer keeps it with one line why ([`super::KeepReason::NotProved`]).
    #[must_use]
    pub fn ci_evidence(mut self, source: Arc<dyn LivenessSource>, wait: Option<Duration>) -> Self {
        self.ci = Some((source, wait));
        self
    }

    /// The kinds a chain record's members may be, read each by a GET of its own name and never
    /// listed (default: the kinds listed). A fence on a kind beyond the listed ones (a Flux
    /// Operator object, a replicas gate's Deployment) is then found through the record of the
    /// Lease it was taken under, and released like the others; a recorded member of a kind
    /// in neither list is left alone and keeps the Lease held.
    #[must_use]
    pub fn recorded_kinds(mut self, kinds: Vec<ApiResource>) -> Self {
        self.recorded = kinds;
        self
    }

    /// Where to look for fences (default: every namespace).
    #[must_use]
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// How fenced objects are listed (default: by the fenced label, server-side).
    #[must_use]
    pub fn listing(mut self, listing: Listing) -> Self {
        self.listing = listing;
        self
    }

    /// Also release deliberate pauses (parked Lease), once proved unrenewed (default off).
    #[must_use]
    pub fn include_paused(mut self, on: bool) -> Self {
        self.opts = self.opts.include_paused(on);
        self
    }

    /// The wall clock, used for ages and to stamp our own Lease times only; never to judge a
    /// holder gone (default: the system clock).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The holder identity the Lease is taken over with (default: generated).
    #[must_use]
    pub fn holder(mut self, holder: Holder) -> Self {
        self.holder = holder;
        self
    }

    /// How often the watch reads the Lease (default 1 s) and reports progress (default 10 s).
    #[must_use]
    pub fn watch_timing(mut self, poll_every: Duration, progress_every: Duration) -> Self {
        self.timing = WatchTiming {
            poll_every: poll_every.max(Duration::from_millis(50)),
            progress_every: progress_every.max(Duration::from_millis(50)),
        };
        self
    }

    /// Discovery and the Lease, as read now. Read-only.
    ///
    /// The chain record's members are read after the Lease, so a run that took the Lease in
    /// between and fenced a member would look like an orphan of a free (or gone) Lease. The
    /// Lease is therefore read once more after the members, and the whole look is taken again
    /// when it moved, up to 5 times.
    ///
    /// # Errors
    /// API failures ([`FenceError::Forbidden`] naming the verb on 403);
    /// [`FenceError::Contended`] when the Lease moved during every look.
    pub async fn snapshot(&self) -> Result<Snapshot, FenceError> {
        for _ in 0..SNAPSHOT_TRIES {
            let snap = self.look().await?;
            if snap.record.is_none() {
                return Ok(snap);
            }
            let again = self.read_lease().await?;
            let then = snap.lease.as_ref().map(|l| l.resource_version.clone());
            let now = again.map(|l| l.metadata.resource_version);
            if decide_stable(then.as_ref(), now.as_ref()) {
                return Ok(snap);
            }
            tracing::info!(lease = %self.target(), "the Lease moved while its record's members were read: looking again");
        }
        Err(FenceError::Contended {
            what: "a stable look at the Lease and its recorded members",
        })
    }

    /// One look: discovery, the Lease, then the members its record names.
    async fn look(&self) -> Result<Snapshot, FenceError> {
        let clock = Arc::clone(&self.clock);
        let report = discover::discover_listed(
            &self.client,
            &self.keys,
            &self.kinds,
            &self.scope,
            None,
            &*clock,
            self.listing,
        )
        .await?;
        let mut report = report;
        let now = self.clock.now();
        let read = self.read_lease().await?;
        let lease = read
            .as_ref()
            .map(|l| LeaseView::from_lease(l, &self.keys, now))
            .transpose()?;
        let record = read
            .as_ref()
            .map(|l| ChainRecord::on_lease(l, &self.keys))
            .transpose()?
            .flatten();
        let mut record_unknown = Vec::new();
        if let Some(r) = &record {
            let members = read_members(&self.client, &self.keys, &self.recorded, r, now).await?;
            merge_found(&mut report.fences, members.found);
            record_unknown = members.unknown;
        }
        Ok(Snapshot {
            report,
            lease,
            now,
            record,
            record_unknown,
        })
    }

    /// Watches the Lease when a recovery needs evidence about its holder (it is held, and not
    /// a parked pause left out): returns [`HolderEvidence::Unchanged`] once its
    /// `resourceVersion` stayed the same for the holder's full duration on our monotonic clock
    /// (the longer of `leaseDurationSeconds` and the holder's own record,
    /// [`crate::lease::holder_duration`]: an edited field cannot shorten the watch), [`HolderEvidence::Changed`] as soon as it changes, [`HolderEvidence::None`] when
    /// no watch is needed. `progress` is called about every 10 s of the wait. Read-only.
    ///
    /// # Errors
    /// API failures.
    pub(crate) async fn watch(
        &self,
        lease: Option<&LeaseView>,
        progress: &mut (dyn FnMut(&WatchProgress) + Send),
    ) -> Result<HolderEvidence, FenceError> {
        let Some(watched) = needs_watch(lease, &self.opts) else {
            return Ok(HolderEvidence::None);
        };
        let duration = lease
            .and_then(|l| l.duration)
            .unwrap_or(self.lease.duration)
            .max(Duration::from_secs(1));
        if let Some((source, wait)) = &self.ci {
            let ask = CiAsk {
                api: &self.api(),
                name: &self.lease.name,
                target: &self.target(),
                source,
                wait: wait.unwrap_or(duration),
                poll_every: self.timing.poll_every,
            };
            return ask_ci(&ask, watched, duration, self.timing, progress).await;
        }
        watch_lease(
            &self.api(),
            &self.lease.name,
            &self.target(),
            watched,
            duration,
            self.timing,
            progress,
        )
        .await
    }

    /// Reads the Lease, watches it if needed, then discovers the fences and plans. Read-only.
    ///
    /// # Errors
    /// API failures.
    pub async fn plan(
        &self,
        progress: &mut (dyn FnMut(&WatchProgress) + Send),
    ) -> Result<Planned, FenceError> {
        let now = self.clock.now();
        let first = self
            .read_lease()
            .await?
            .map(|l| LeaseView::from_lease(&l, &self.keys, now))
            .transpose()?;
        let evidence = self.watch(first.as_ref(), progress).await?;
        let snapshot = self.snapshot().await?;
        let rows = assess(
            &snapshot.report,
            &self.target(),
            snapshot.lease.as_ref(),
            &self.child,
        );
        let record = snapshot
            .record
            .as_ref()
            .map(|r| recorded_hold(r, &snapshot.report, &snapshot.record_unknown));
        let plan =
            plan_recover(&rows, snapshot.lease.as_ref(), &evidence, &self.opts).with_record(record);
        Ok(Planned {
            snapshot,
            rows,
            evidence,
            plan,
        })
    }

    /// Runs `plan` through the release engine ([`crate::engine::release_members`]): holds the
    /// Lease for the whole release — takes it over first when planned (ONE CAS on the version
    /// the evidence was judged on; if it does not land, nothing else is touched), or acquires
    /// it when it is free — then releases the fences, children before parents, asserting the
    /// Lease before each (a parent is kept when a member of its holder was not released),
    /// then releases the Lease.
    ///
    /// A Lease that another holder holds cannot be held for the release: the orphans of other
    /// holders are then released without it (each an exact-epoch CAS; the other holder's
    /// fences are never planned). A Lease that the holder of a planned fence holds again is a
    /// lost race: nothing is touched.
    ///
    /// # Errors
    /// API failures of the Lease takeover. Failures of single releases are reported in
    /// [`RecoverReport::problems`].
    pub async fn execute(&self, plan: &RecoverPlan) -> Result<RecoverOutcome, FenceError> {
        let mut report = RecoverReport::default();
        let guard = match &plan.take_lease {
            None if plan.release.is_empty() => None,
            None => match self.hold_free_lease(plan).await? {
                Ok(g) => g,
                Err(lost) => return Ok(lost),
            },
            Some(gone) => {
                let taken = Lease::recover(
                    self.client.clone(),
                    self.lease.clone(),
                    self.holder.clone(),
                    Arc::clone(&self.clock),
                    gone.clone(),
                )
                .await?;
                match taken {
                    LeaseRecover::Recovered(g) => {
                        report.lease_taken = Some(g.epoch());
                        Some(g)
                    }
                    LeaseRecover::Refused(r) => {
                        return Ok(RecoverOutcome::LeaseRaceLost {
                            gone: gone.holder.clone(),
                            why: refusal_words(&r),
                        });
                    }
                    _ => {
                        return Ok(RecoverOutcome::LeaseRaceLost {
                            gone: gone.holder.clone(),
                            why: "another party changed it on every attempt".into(),
                        });
                    }
                }
            }
        };
        let members = plan
            .release
            .iter()
            .map(|p| {
                Member::judged(p.object.clone(), p.holder.clone(), p.epoch, p.child)
                    .recovered(p.why.to_string())
            })
            .collect();
        let template = Fencer::new(
            self.client.clone(),
            self.keys.clone(),
            OwnerValue::new(self.holder.clone(), Epoch(0)),
        )
        .with_clock(Arc::clone(&self.clock));
        let settled =
            release_members(&template, members, guard.as_ref(), Rules::many_holders()).await;
        for one in settled {
            note_settled(&mut report, one, plan);
        }
        if let Some(g) = guard {
            let taken_over = plan.take_lease.is_some();
            // A Lease taken over goes only when no recorded member may still be fenced; then
            // its record goes with it. A free Lease held for the release goes back as found.
            let off: Vec<ObjectRef> = report
                .released
                .iter()
                .chain(report.moved_on.iter().map(|(o, _)| o))
                .cloned()
                .collect();
            let unsettled = plan.record.as_ref().and_then(|r| r.unsettled(&off));
            if let (true, Some(still)) = (taken_over, unsettled) {
                g.leave_held();
                report.problems.push((
                    Subject::Lease,
                    format!("kept held: recorded fences may still be held ({still})"),
                ));
                return Ok(RecoverOutcome::Done(report));
            }
            if let (true, Some(r)) = (taken_over, &plan.record) {
                g.handle().settle_record(&self.keys.chain, &r.owner);
            }
            match g.release().await {
                Ok(LeaseRelease::Released | LeaseRelease::Gone) => {
                    report.lease_released = taken_over;
                }
                Ok(other) => report
                    .problems
                    .push((Subject::Lease, format!("not released: {other}"))),
                Err(e) => report
                    .problems
                    .push((Subject::Lease, format!("not released: {}", words(&e)))),
            }
        }
        Ok(RecoverOutcome::Done(report))
    }

    /// Acquires the Lease for a release of orphans when it is free or absent. `Ok(Ok(None))`:
    /// another holder has it (its fences are not planned; the orphans go without the Lease).
    /// `Ok(Err(lost))`: the holder of a planned fence holds it again, or the Lease moved on
    /// every attempt; nothing is touched.
    async fn hold_free_lease(
        &self,
        plan: &RecoverPlan,
    ) -> Result<Result<Option<LeaseGuard>, RecoverOutcome>, FenceError> {
        let acquired = Lease::acquire(
            self.client.clone(),
            self.lease.clone(),
            self.holder.clone(),
            Arc::clone(&self.clock),
        )
        .await?;
        Ok(match acquired {
            LeaseAcquire::Acquired(g) => Ok(Some(g)),
            LeaseAcquire::Held { holder, .. } => {
                match plan.release.iter().find(|p| p.holder == holder) {
                    Some(p) => Err(RecoverOutcome::LeaseRaceLost {
                        gone: p.holder.clone(),
                        why: format!("the Lease is now held by {holder}"),
                    }),
                    None => Ok(None),
                }
            }
            _ => Err(RecoverOutcome::LeaseRaceLost {
                gone: String::new(),
                why: "another party changed the Lease on every attempt".into(),
            }),
        })
    }

    async fn read_lease(&self) -> Result<Option<KubeLease>, FenceError> {
        get_retrying(
            &self.api(),
            &self.lease.name,
            &self.target(),
            crate::api::READ_RETRY_BUDGET,
        )
        .await
        .map_err(|e| error("get", "leases.coordination.k8s.io".into(), self.target(), e))
    }

    fn api(&self) -> Api<KubeLease> {
        Api::namespaced(self.client.clone(), &self.lease.namespace)
    }

    pub(super) fn target(&self) -> String {
        format!("{}/{}", self.lease.namespace, self.lease.name)
    }
}

/// How many times [`Recovery::snapshot`] looks before it gives up on a Lease that keeps moving.
const SNAPSHOT_TRIES: usize = 5;

/// Whether a look is stable: the Lease's `resourceVersion` read after the recorded members
/// (`now`) is the one the look was judged on (`then`); `None` is an absent Lease (an inner
/// `None`, a version the server did not give, is never stable). Pure.
fn decide_stable(then: Option<&Option<String>>, now: Option<&Option<String>>) -> bool {
    match (then, now) {
        (None, None) => true,
        (Some(Some(a)), Some(Some(b))) => a == b,
        _ => false,
    }
}

/// Whether a member the engine did not release is off its gone holder (`holder`) all the same:
/// the object is gone, or it carries no fence of that holder any more — another party released
/// it first (a second waiter recovering the same finished run) or fenced it anew. Such a member
/// is no problem of the recovery, and its record entry is settled. Pure.
fn moved_on(s: &Settled, holder: Option<&str>) -> bool {
    match s {
        Settled::Gone { .. } | Settled::NotOurs { found: None, .. } => true,
        Settled::NotOurs {
            found: Some(found), ..
        } => {
            let found = found
                .parse::<OwnerValue>()
                .ok()
                .map(|o| o.holder.to_string());
            matches!((found, holder), (Some(f), Some(h)) if f != h)
        }
        _ => false,
    }
}

/// Notes one member as the engine settled it: released, off its gone holder all the same
/// ([`moved_on`]), or a problem.
fn note_settled(report: &mut RecoverReport, one: Settled, plan: &RecoverPlan) {
    if let Settled::Released { object, .. } = one {
        report.released.push(object);
        return;
    }
    let holder = plan
        .release
        .iter()
        .find(|p| Some(&p.object) == settled_object(&one))
        .map(|p| p.holder.as_str());
    let off = moved_on(&one, holder);
    let (object, why) = settled_words(one);
    if off {
        report.moved_on.push((object, why));
    } else {
        report.problems.push((Subject::Fence(object), why));
    }
}

/// The object of a settled member the engine names directly.
fn settled_object(s: &Settled) -> Option<&ObjectRef> {
    match s {
        Settled::Gone { object } | Settled::NotOurs { object, .. } => Some(object),
        _ => None,
    }
}

/// A member the engine did not release, in words.
fn settled_words(s: Settled) -> (ObjectRef, String) {
    match s {
        Settled::Released { object, .. } => (object, "released".into()),
        Settled::Gone { object } => (object, "not released: the object is gone".into()),
        Settled::NotOurs { object, found } => (
            object,
            match found {
                Some(f) => format!("not released: now fenced by {f}; nothing changed"),
                None => "not released: no longer fenced; nothing changed".into(),
            },
        ),
        Settled::Kept { guard, why } => {
            let object = guard.object().clone();
            (*guard).leave_in_place();
            (object, format!("kept: {why:?}"))
        }
        Settled::Skipped { member, why } => {
            let object = member.source.object().clone();
            let why = match why {
                Skip::ChildKept { holder } => {
                    format!("kept because a child of {holder} was not released")
                }
                Skip::LeaseLost(e) => format!("not released: {e}"),
                _ => "not released: the release stopped".into(),
            };
            (object, why)
        }
        Settled::Failed { object, error } => (object, format!("not released: {}", words(&error))),
        Settled::NotApplied { object, .. } => {
            (object, "not released: the patch did not apply".into())
        }
    }
}

/// A refused takeover, in words.
fn refusal_words(r: &RecoverRefusal) -> String {
    match r {
        RecoverRefusal::Missing => "the Lease was deleted".into(),
        RecoverRefusal::Free => "the Lease was released".into(),
        RecoverRefusal::OtherHolder { holder } => format!("the Lease is now held by {holder}"),
        RecoverRefusal::Moved { holder } if holder.is_empty() => {
            "the Lease changed after the watch".into()
        }
        RecoverRefusal::Moved { holder } => {
            format!("the Lease changed after the watch (held by {holder})")
        }
    }
}

pub(super) use crate::error::words;

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
