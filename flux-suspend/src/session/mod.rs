//! The whole handoff as one value: validation, the read-only preflight, the Lease, fencing,
//! retirement, the proof, then either the caller's work under the pause
//! ([`Session::run_paused`]) or a parked pause ([`Session::park`]) — and cleanup in order on
//! every path: error, panic inside the work, cancellation, a lost Lease.
//!
//! # Guarantees
//! - No request is sent before [`SessionOptions::validate`] passed; a refusal found by the
//!   preflight changed nothing.
//! - Cleanup releases targets, then parents, then the Lease; the Lease is never released
//!   while a fence may still be held. A fence whose write was in flight when the session was
//!   hurried, or whose answer was lost when the pause failed, is settled before the Lease is
//!   let go: the object is moved on with a CAS of ours
//!   (so the abandoned request's own precondition fails whenever it arrives), then judged by
//!   what it shows; if it cannot be settled, the cleanup error names it and the Lease stays
//!   held.
//! - Cleanup is bounded once the session is stopped: 10 s after the stop, cut to 2 s after a
//!   hurry (a second signal: a CI runner's SIGKILL follows its SIGTERM by 2.5 s), one Lease
//!   duration after a self-fence. Cut short, it names every member as perhaps still held and
//!   leaves the Lease held, so nobody takes over before the holder's full duration.
//! - While the work runs the Lease is watched: when it is lost, the work's [`Cancel`] is
//!   stopped and the session ends with [`SessionError::LeaseLost`]. When no renewal succeeds
//!   in time the holder fences itself on its own monotonic clock
//!   ([`flux_fence::LossReason::SelfFenced`]): the work is stopped
//!   [`SessionOptions::kill_grace`] before, and hurried before, the holder's deadline
//!   (flux-fence's `lease::deadline`), whatever requests are pending.
//! - While the work runs every member is watched too: when the pause breaks (a fence removed,
//!   an owner changed, an object deleted or recreated, `spec.suspend` no longer true), the
//!   work's [`Cancel`] is stopped and the session ends with [`SessionError::PauseBroken`],
//!   naming the object, the change and the field manager ([`what_broke`]).

pub mod autoscaler;
mod by_object;
pub mod dry_run;
mod error;
mod fence_lease;
mod guard;
mod held;
mod lines;
mod options;
mod preflight;
mod recover;
mod resume;
mod settle;
mod wait_lease;
mod watch;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use flux_fence::lease::LeaseRelease;
use flux_fence::{Fencer, Holder, Lease, LeaseAcquire, LeaseGuard, LeaseHandle, ObjectRef};
use futures::FutureExt;
use kube::Client;
use tracing::Instrument;

pub use crate::refusal::{ParkedPause, Refusal, field_manager};
pub use by_object::{ObjectFence, decide_holder, holder_of};
pub use error::{CleanupError, SessionError, Subject};
pub use guard::WriteRefused;
pub use lines::Members;
pub use options::{ParentSpec, SessionOptions, TargetSpec};
pub use recover::Recovered;
pub use resume::{ResumeError, ResumeOptions, Resumed, resume_holder};
pub use wait_lease::{Asked, LeaseWait, LeaseWaiting, WaitDecision, decide_wait};
pub use watch::{BrokenPause, Change, what_broke};

use crate::cancel::Cancel;
use crate::handoff::{Chain, Handoff, PauseOptions, PauseOutcome};
use crate::io::Timing;
use crate::judge::Proof;
use crate::steps::Step;

/// How long a write that was in flight when the session was stopped may still take before it
/// is treated as hurried (abandoned, then settled by a re-read). A hung API server must not
/// keep a cancelled run alive for the client's read timeout.
pub const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Something a session reports while it runs, for progress lines.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// A step of the pause finished.
    Step(Step),
    /// An object was released (targets first).
    Released(ObjectRef),
    /// An object was released keeping the `spec.suspend: false` another writer set while it
    /// was paused (a person's `flux resume`): they asked for Flux back, so the release kept
    /// their value, restored the other marks and went on with the chain.
    ReleasedKeepingResume(ObjectRef),
    /// The Lease was released.
    LeaseReleased,
    /// The Lease was parked (a pause left in place).
    LeaseParked,
    /// A wait still goes on (about every [`crate::steps::WAITING_EVERY`]).
    Waiting(crate::steps::Waiting),
}

/// What the work gets while the chain is provably paused.
#[derive(Debug)]
#[non_exhaustive]
pub struct Paused {
    /// The proof of the stable pause.
    pub proof: Proof,
    /// The Lease. [`Paused::write`] asserts it before a protected write; assert it yourself
    /// only for a write that cannot go through `write`.
    pub lease: LeaseHandle,
    /// The session's holder.
    pub holder: Holder,
    /// The paused targets.
    pub targets: Vec<String>,
    /// Stopped when the session is cancelled, the Lease is lost or the pause breaks: finish
    /// soon. Once hurried, the work has [`STOP_GRACE`] to end before the session drops it.
    pub cancel: Cancel,
    /// Rechecks the pause (one read per member). [`Paused::write`] calls it before a protected
    /// write, so a person's `spec.suspend=false` after the proof stops the write.
    pub check: crate::io::PauseCheck,
}

/// A pause left in place by [`Session::park`]: resume it later by holder.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Parked {
    /// The holder to resume.
    pub holder: Holder,
    /// The objects left fenced, targets first.
    pub held: Vec<ObjectRef>,
    /// The proof of the pause left in place.
    pub proof: Proof,
}

/// How a [`Session`] ended: the result, and what its cleanup did. Fold it with
/// [`Outcome::into_result`] unless the details matter.
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "the work's result and what cleanup left held are in the outcome"]
pub struct Outcome<T> {
    /// The work's value, or why the session did not complete.
    pub result: Result<T, SessionError>,
    /// Objects released, in release order.
    pub released: Vec<ObjectRef>,
    /// Whether the Lease was released.
    pub lease_released: bool,
    /// What could not be given back.
    pub cleanup: Result<(), CleanupError>,
}

impl<T> Outcome<T> {
    /// The result, with a cleanup failure folded in ([`SessionError::Cleanup`], keeping the
    /// earlier error as `after`).
    ///
    /// # Errors
    /// As described.
    pub fn into_result(self) -> Result<T, SessionError> {
        match (self.result, self.cleanup) {
            (r, Ok(())) => r,
            (Ok(_), Err(cleanup)) => Err(SessionError::Cleanup {
                cleanup,
                after: None,
            }),
            (Err(e), Err(cleanup)) => Err(SessionError::Cleanup {
                cleanup,
                after: Some(Box::new(e)),
            }),
        }
    }
}

/// One handoff from its Lease to its cleanup. See the module docs.
///
/// ```no_run
/// use flux_suspend::object::kustomization;
/// use flux_suspend::{Cancel, Session, SessionOptions, TargetSpec};
///
/// # async fn deploy(client: kube::Client) -> Result<(), flux_suspend::SessionError> {
/// let opts = SessionOptions::new(vec![TargetSpec::new(kustomization("flux-system", "apps"))]);
/// let cancel = Cancel::new(); // stop() it from a signal handler
/// let session = Session::start(client, opts, cancel).await?;
/// let outcome = session
///     .run_paused(|event| println!("{event:?}"), |paused| async move {
///         println!("paused after {} passes; applying", paused.proof.passes());
///         Ok::<_, std::io::Error>(())
///     })
///     .await;
/// outcome.into_result()
/// # }
/// ```
pub struct Session {
    opts: SessionOptions,
    holder: Holder,
    chains: Vec<Chain>,
    lease: Option<LeaseGuard>,
    handoff: Option<Handoff>,
    cancel: Cancel,
    waiting: tokio::sync::mpsc::UnboundedReceiver<crate::steps::Waiting>,
    recovered: Vec<Recovered>,
    /// A bound on releasing the fences in cleanup (set when the holder fenced itself).
    cleanup_budget: Option<std::time::Duration>,
    /// The pause was abandoned with a write perhaps in flight: cleanup settles every member it
    /// does not hold with a CAS of its own before judging it.
    abandoned: bool,
    /// `handoff_session` (holder, lease, targets): every phase's span is its child.
    span: tracing::Span,
}

/// The span of one session: the holder, the Lease and the targets (`kind ns/name`, comma
/// separated) as fields; the phases (`start`, `pause`, `work`, `cleanup`, `park`) are its
/// children, so a subscriber sees every line of a session under one span, as kube-runtime
/// gives one span per object.
fn session_span(holder: &Holder, lease: &str) -> tracing::Span {
    tracing::info_span!(
        "handoff_session",
        holder = %holder,
        lease = %lease,
        targets = tracing::field::Empty,
    )
}

/// `kind ns/name` of each target, comma separated, for the session span.
fn targets_field(chains: &[Chain]) -> String {
    let targets: Vec<String> = chains.iter().map(|c| c.target.to_string()).collect();
    targets.join(",")
}

impl Session {
    /// Validates the options, runs the read-only preflight, and takes the Lease.
    ///
    /// # Errors
    /// [`SessionError::Invalid`] before any request; [`SessionError::Refused`],
    /// [`SessionError::NotFound`] or [`SessionError::Read`] with nothing changed;
    /// [`SessionError::Cancelled`] (nothing changed) when stopped during the reads;
    /// [`SessionError::StartCutShort`] when stopped while the Lease write hung;
    /// [`SessionError::Lease`] for an API failure of the Lease.
    pub async fn start(
        client: Client,
        opts: SessionOptions,
        cancel: Cancel,
    ) -> Result<Self, SessionError> {
        opts.validate()?;
        let holder = opts.holder.clone().unwrap_or_else(Holder::generate);
        let span = session_span(&holder, &opts.lease.to_string());
        let start = tracing::info_span!(parent: &span, "start");
        let before_start = || SessionError::Cancelled {
            during: "before anything was taken: nothing was changed".into(),
            changed: false,
        };
        let (chains, recovered, reads) = cancel
            .unless_stopped(preflight::preflight(&client, &opts, &holder))
            .instrument(start.clone())
            .await
            .ok_or_else(before_start)??;
        if cancel.is_stopped() {
            return Err(before_start());
        }
        span.record("targets", targets_field(&chains));
        // The parked mark the release clears is the one `park` writes, and the duration mark
        // readers trust lives under the same prefix.
        let lease_cfg = opts.lease.clone().with_keys(&opts.keys);
        let acquire = Lease::acquire(
            client.clone(),
            lease_cfg,
            holder.clone(),
            Arc::new(flux_fence::SystemClock),
        );
        let acquired = cancel
            .settle(STOP_GRACE, acquire)
            .instrument(start)
            .await
            .ok_or_else(|| SessionError::StartCutShort {
                holder: holder.to_string(),
            })?
            .map_err(SessionError::Lease)?;
        let lease_name = opts.lease.to_string();
        let lease = match acquired {
            LeaseAcquire::Acquired(g) => g,
            LeaseAcquire::Held { holder, expired } => {
                return Err(held::refusal(&client, &opts, holder, expired).await);
            }
            _ => {
                return Err(SessionError::Refused {
                    object: Subject::lease(&lease_name),
                    why: Refusal::LeaseContended,
                });
            }
        };
        lease.handle().set_kill_grace(opts.kill_grace);
        let fencer = Fencer::new(client.clone(), opts.keys.clone(), lease.owner())
            .with_lease(lease.handle());
        let (waiting_tx, waiting) = tokio::sync::mpsc::unbounded_channel();
        let mut handoff = Handoff::new(client.clone(), fencer)
            .with_cancel(cancel.clone())
            .with_waiting(waiting_tx)
            .with_reads(reads);
        if let Some(cap) = opts.wait_timeout {
            handoff = handoff.with_wait_budget(cap);
        }
        Ok(Self {
            opts,
            holder,
            chains,
            lease: Some(lease),
            handoff: Some(handoff),
            cancel,
            waiting,
            recovered,
            cleanup_budget: None,
            abandoned: false,
            span,
        })
    }

    /// What `--recover-finished-runs` recovered before the preflight, and on what evidence.
    #[must_use]
    pub fn recovered(&self) -> &[Recovered] {
        &self.recovered
    }

    /// The holder of this session.
    #[must_use]
    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    /// The chains the preflight resolved (target and parent).
    #[must_use]
    pub fn chains(&self) -> &[Chain] {
        &self.chains
    }

    /// The Lease's epoch (the fencing token).
    #[must_use]
    pub fn epoch(&self) -> flux_fence::Epoch {
        self.lease_handle().epoch()
    }

    fn lease_handle(&self) -> LeaseHandle {
        self.lease
            .as_ref()
            .map(LeaseGuard::handle)
            .expect("a started session holds its Lease until it ends")
    }

    /// Pauses, runs `work` under the proven pause, and releases — on success, error, a panic
    /// inside `work`, cancellation and a lost Lease alike. `progress` is told each step and
    /// each release; it is never called while `work` runs.
    pub async fn run_paused<P, F, Fut, T, E>(mut self, mut progress: P, work: F) -> Outcome<T>
    where
        P: FnMut(Event),
        F: FnOnce(Paused) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let pause = tracing::info_span!(parent: &self.span, "pause");
        let result = match Box::pin(self.pause(&mut progress).instrument(pause)).await {
            Err(e) => Err(e),
            Ok(proof) => {
                let span = tracing::info_span!(parent: &self.span, "work");
                self.work(proof, work).instrument(span).await
            }
        };
        self.note_releases(result.as_ref().err());
        if matches!(
            result,
            Err(SessionError::LeaseLost(flux_fence::LossReason::SelfFenced))
        ) {
            self.cleanup_budget = Some(self.opts.lease.duration);
        }
        let span = tracing::info_span!(parent: &self.span, "cleanup");
        let (released, lease_released, cleanup) =
            self.cleanup(&mut progress).instrument(span).await;
        Outcome {
            result,
            released,
            lease_released,
            cleanup,
        }
    }

    /// Pauses and leaves the pause in place: the fences stay and the Lease stays held by this
    /// holder, parked (marked as a deliberate pause, so recovery does not take it for a
    /// crashed run). A pause that fails is released as in [`Session::run_paused`].
    pub async fn park<P: FnMut(Event)>(mut self, mut progress: P) -> Outcome<Parked> {
        let pause = tracing::info_span!(parent: &self.span, "pause");
        let proof = match Box::pin(self.pause(&mut progress).instrument(pause)).await {
            Ok(p) => p,
            Err(e) => {
                self.note_releases(Some(&e));
                let span = tracing::info_span!(parent: &self.span, "cleanup");
                let (released, lease_released, cleanup) =
                    self.cleanup(&mut progress).instrument(span).await;
                return Outcome {
                    result: Err(e),
                    released,
                    lease_released,
                    cleanup,
                };
            }
        };
        let held = self
            .handoff
            .take()
            .map(Handoff::leave_paused)
            .unwrap_or_default();
        let lease_name = self.opts.lease.to_string();
        let parked = match self.lease.take() {
            None => Ok(()),
            Some(l) => match l
                .park(&self.opts.keys.parked)
                .instrument(tracing::info_span!(parent: &self.span, "park"))
                .await
            {
                Ok(LeaseRelease::Released) => {
                    progress(Event::LeaseParked);
                    Ok(())
                }
                Ok(other) => Err(other.to_string()),
                Err(e) => Err(e.to_string()),
            },
        };
        let result = match parked {
            Ok(()) => Ok(Parked {
                holder: self.holder.clone(),
                held,
                proof,
            }),
            Err(why) => Err(SessionError::NotParked {
                lease: lease_name,
                why,
            }),
        };
        Outcome {
            result,
            released: Vec::new(),
            lease_released: false,
            cleanup: Ok(()),
        }
    }

    /// Tells the release Events why the run ends early: cancelled, Lease lost, or failed.
    fn note_releases(&self, error: Option<&SessionError>) {
        let note = match error {
            _ if self.cancel.is_stopped() => "the run was cancelled",
            None => return,
            Some(SessionError::LeaseLost(_)) => "the run lost its Lease",
            Some(_) => "the run failed",
        };
        if let Some(h) = &self.handoff {
            h.fencer().note_releases(note);
        }
    }

    async fn pause(&mut self, progress: &mut impl FnMut(Event)) -> Result<Proof, SessionError> {
        let opts = PauseOptions {
            strategy: self.opts.strategy,
            quiesce: self.opts.quiesce,
            controller: self.opts.controller.clone(),
            timing: Timing::new(self.opts.interval, self.opts.timeout),
            reason: self.opts.reason.clone(),
        };
        let handoff = self
            .handoff
            .as_mut()
            .expect("a started session has a handoff");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut send = move |s: Step| {
            let _ = tx.send(s);
        };
        let chains = self.chains.clone();
        let result = {
            let pause = self
                .cancel
                .settle(STOP_GRACE, handoff.pause(&chains, &opts, &mut send));
            let mut pause = std::pin::pin!(pause);
            loop {
                tokio::select! {
                    biased;
                    Some(step) = rx.recv() => progress(Event::Step(step)),
                    Some(w) = self.waiting.recv() => progress(Event::Waiting(w)),
                    r = &mut pause => break r,
                }
            }
        };
        while let Ok(step) = rx.try_recv() {
            progress(Event::Step(step));
        }
        let changed = handoff.holds_anything();
        // Abandoned, or failed on a write whose answer was lost: cleanup settles first.
        if result
            .as_ref()
            .is_none_or(|r| r.as_ref().is_err_and(settle::may_leave_write_unsettled))
        {
            self.abandoned = true;
        }
        match result {
            None => Err(SessionError::Cancelled {
                during: "during the pause".into(),
                changed: true,
            }),
            Some(Ok(PauseOutcome::Proven(proof))) => Ok(proof),
            Some(Ok(PauseOutcome::Refused { object, why })) if changed => {
                Err(SessionError::RefusedAfterWrites {
                    object: Subject::Object(object),
                    why,
                })
            }
            Some(Ok(PauseOutcome::Refused { object, why })) => Err(SessionError::Refused {
                object: Subject::Object(object),
                why,
            }),
            Some(Err(crate::handoff::SuspendError::Cancelled { step })) => {
                Err(SessionError::Cancelled {
                    during: format!("while {}", crate::steps::describe(step)),
                    changed: true,
                })
            }
            Some(Err(e)) => Err(e.into()),
        }
    }

    async fn work<F, Fut, T, E>(&mut self, proof: Proof, work: F) -> Result<T, SessionError>
    where
        F: FnOnce(Paused) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let lease = self.lease_handle();
        let cancel = self.cancel.child();
        let paused = Paused {
            proof,
            lease: lease.clone(),
            holder: self.holder.clone(),
            targets: self.chains.iter().map(|c| c.target.to_string()).collect(),
            cancel: cancel.clone(),
            check: self
                .handoff
                .as_ref()
                .expect("a proven session has its handoff")
                .pause_check(),
        };
        let watched = paused.check.clone();
        let run = AssertUnwindSafe(work(paused)).catch_unwind();
        let mut run = std::pin::pin!(run);
        let mut lost = None;
        let mut broken = None;
        let ended = tokio::select! {
            r = &mut run => Some(r),
            b = watch::until_broken(&watched) => {
                // A broken pause is never success: stop the work and wait for it to end.
                tracing::error!(%b, "stopping the work");
                broken = Some(b);
                cancel.stop();
                None
            }
            reason = lease.wait_lost() => {
                // Stop the work, and wait for it to end: it must not write without the Lease.
                tracing::error!(%reason, "lease lost while the work runs; stopping it");
                lost = Some(reason);
                cancel.stop();
                None
            }
            () = cancel.hurried() => None,
        };
        // A stopped work is hurried (SIGKILL) in time to be gone before the holder's deadline.
        let ended = if ended.is_some() {
            ended
        } else {
            let kill = tokio::time::sleep_until(lease.deadline().kill_work);
            tokio::select! {
                r = &mut run => Some(r),
                () = kill => { cancel.hurry(); None }
                () = cancel.hurried() => None,
            }
        };
        // Hurried: the work has STOP_GRACE to end (a command's SIGKILL is reaped well within
        // it), and never past the holder's deadline; then it is dropped, so a work that ignores
        // its Cancel cannot keep the session from releasing what it holds.
        let ended = if ended.is_some() {
            ended
        } else {
            let give_up = (tokio::time::Instant::now() + STOP_GRACE).min(lease.deadline().ends);
            tokio::select! {
                r = &mut run => Some(r),
                () = tokio::time::sleep_until(give_up) => {
                    tracing::warn!(grace = ?STOP_GRACE, "the hurried work did not end: abandoned");
                    None
                }
            }
        };
        if lost.is_none() {
            // The Lease counted lost as the work ended (its keeper stopped it at the holder's
            // deadline, [`flux_fence::LeaseHandle::fence_self`]): it did not end by itself.
            lost = lease.lost();
        }
        if broken.is_none() && lost.is_none() && !cancel.is_stopped() {
            // The work ended by itself: a change the watch had not delivered yet still counts.
            broken = watch::recheck(&watched).await;
        }
        if let Some(b) = broken {
            return Err(SessionError::PauseBroken(b));
        }
        match (ended, lost) {
            (_, Some(reason)) => Err(SessionError::LeaseLost(reason)),
            (None, None) => Err(SessionError::Cancelled {
                during: "while the work ran (hurried, it was abandoned)".into(),
                changed: true,
            }),
            (Some(Ok(Ok(v))), None) => Ok(v),
            (Some(Ok(Err(e))), None) => Err(SessionError::Work(e.into())),
            (Some(Err(panic)), None) => Err(SessionError::WorkPanicked(panic_text(panic.as_ref()))),
        }
    }

    /// Releases everything — targets, then parents, then the Lease — including a fence whose
    /// write was in flight when the pause was abandoned (found by our owner value on the
    /// chain's objects).
    async fn cleanup(
        &mut self,
        progress: &mut impl FnMut(Event),
    ) -> (Vec<ObjectRef>, bool, Result<(), CleanupError>) {
        // Cleanup's bound: after a self-fence the API server is not answering, so cleanup
        // tries for one Lease duration (recovery takes over after that much anyway); after a
        // stop it has CLEANUP_AFTER_STOP, and a hurry (a second signal) cuts it to
        // CLEANUP_AFTER_HURRY. Cut, it says which fences may still be held.
        let cut = settle::cleanup_cut(self.cancel.clone(), self.cleanup_budget);
        let mut cut = std::pin::pin!(cut);
        let settled = match self.handoff.take() {
            None => settle::Settlement::default(),
            Some(h) => {
                let release = settle::release_fences(h, &self.chains, self.abandoned, progress);
                tokio::select! {
                    r = release => r,
                    why = &mut cut => settle::cut_short(&self.chains, why),
                }
            }
        };
        let settle::Settlement {
            released,
            mut problems,
            held,
            withheld,
            unsettled,
        } = settled;
        let lease_name = self.opts.lease.to_string();
        let mut lease_left = None;
        let mut lease_released = false;
        if let Some(lease) = self.lease.take() {
            if problems.is_empty() {
                // Cut during its write, the Lease may or may not have been released: every
                // fence was, so either is safe; it is reported as perhaps still held.
                let released = tokio::select! {
                    r = lease.release() => r.map_err(|e| flux_fence::one_line(&e)),
                    why = &mut cut => Err(why),
                };
                match released {
                    Ok(LeaseRelease::Released | LeaseRelease::Gone) => {
                        progress(Event::LeaseReleased);
                        lease_released = true;
                    }
                    // Lost to another holder: nothing of ours is left to keep out.
                    Ok(LeaseRelease::NotOurs { .. }) => {}
                    Ok(other) => {
                        problems.push(format!("lease not released: {other}"));
                        lease_left = Some(lease_name);
                    }
                    Err(e) => {
                        problems.push(format!("lease not released: {e}"));
                        lease_left = Some(lease_name);
                    }
                }
            } else {
                // Never release the Lease while a fence may be held: it keeps others out.
                lease.leave_held();
                lease_left = Some(lease_name);
            }
        }
        let cleanup = if problems.is_empty() {
            Ok(())
        } else {
            Err(CleanupError {
                held,
                lease: lease_left,
                why: problems.join("; "),
                withheld,
                unsettled: !unsettled.is_empty(),
            })
        };
        (released, lease_released, cleanup)
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("holder", &self.holder)
            .field("chains", &self.chains)
            .field("handoff", &self.handoff)
            .finish_non_exhaustive()
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(ToString::to_string)
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic".into())
}
