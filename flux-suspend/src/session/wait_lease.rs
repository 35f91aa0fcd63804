//! A bounded wait for the Lease (`--wait-lease`): two runs that overlap (a merge queue
//! building two groups, a manual deploy during a queued one) run one after the other instead
//! of the second being refused at once.
//!
//! [`Session::start_waiting`] reads the Lease; while a live holder has it, it watches the
//! Lease (each watch bounded by the report interval, then a check read), reports who holds it
//! and since when about every [`LeaseWait::every`], and starts the session — which takes the
//! Lease by compare-and-swap as always — the moment it is free. It never takes over a held
//! Lease itself: it only ever starts a session, whose acquire refuses a held one. A parked
//! pause (`flux-handoff pause`) is not waited for: it lasts until someone resumes it, so the
//! wait is refused at once with the resume command. What to do on each read is
//! [`decide_wait`].
//!
//! The wait keeps the run's place in the queue (issue 48): with
//! [`SessionOptions::recover_finished_runs`], once the Lease has stood unchanged for its
//! holder's own duration the session is started — its preflight asks the liveness source and
//! recovers a finished holder — and a holder not proved finished is waited for again (asked
//! again at most once per duration). A transient failure (a read refused, reset or answered
//! 429/5xx; a start that failed on such a read or on a holder's fence, or lost a race) is read
//! again within the budget. A waiter leaves only on a stop, a parked pause, a budget spent
//! behind a holder, or a failure that waiting cannot mend.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::Api;

use super::{Session, SessionError, SessionOptions};
use crate::cancel::Cancel;
use flux_fence::lease::holder_duration;
use flux_fence::{AnnotationKeys, Holder};
#[cfg(test)]
use read::{Failure, after_failure, read_limit};
use read::{LeaseRead, LeaseReader, changed};
use seen::{Seen, acquired, next_ask};

/// How long to wait for the Lease and how often to say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseWait {
    /// The whole wait; zero refuses at once (no wait).
    pub budget: Duration,
    /// How often a wait that goes on is reported.
    pub every: Duration,
}

impl LeaseWait {
    /// A wait of `budget`, reported every 10 s.
    #[must_use]
    pub fn new(budget: Duration) -> Self {
        Self {
            budget,
            every: Duration::from_secs(10),
        }
    }
}

/// A wait that goes on: who holds the Lease, since when, and how long we waited.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseWaiting {
    /// The Lease, `namespace/name`.
    pub lease: String,
    /// Its holder.
    pub holder: String,
    /// Its `acquireTime`, when set.
    pub since: Option<Timestamp>,
    /// How long this run has waited.
    pub waited: Duration,
    /// The budget of the wait.
    pub budget: Duration,
    /// With `--recover-finished-runs`: why the holder was not recovered when last asked (its
    /// run not proved finished), one line.
    pub not_finished: Option<String>,
}

impl LeaseWaiting {
    /// One line for people, e.g. `waiting for lease ns/l: held by gh1.1-abc since
    /// 2026-12-01T20:00:00Z (waited 10s of 2m)`.
    #[must_use]
    pub fn line(&self) -> String {
        let since = self
            .since
            .map(|t| format!(" since {}", t.strftime("%Y-%m-%dT%H:%M:%SZ")))
            .unwrap_or_default();
        let asked = self
            .not_finished
            .as_ref()
            .map(|why| format!("; not recovered: {why}"))
            .unwrap_or_default();
        format!(
            "waiting for lease {}: held by {}{since} (waited {} of {}{asked})",
            self.lease,
            self.holder,
            humantime::format_duration(Duration::from_secs(self.waited.as_secs())),
            humantime::format_duration(self.budget),
        )
    }
}

/// What to do with the Lease as read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitDecision {
    /// Absent, free or ours: start the session, which takes it or refuses as without a wait.
    Start,
    /// Another holder has it and the budget is not spent: wait.
    Wait {
        /// The holder.
        holder: String,
        /// Its `acquireTime`.
        since: Option<Timestamp>,
    },
    /// With `--recover-finished-runs`, the Lease stood unchanged for its holder's whole
    /// duration and the liveness source was not asked within that long: start the session,
    /// whose preflight asks it and recovers a finished holder (a holder not proved finished
    /// is waited for again).
    Recover {
        /// The holder.
        holder: String,
    },
    /// A parked pause holds it: refuse at once (it lasts until resumed).
    Parked {
        /// The holder that parked it.
        holder: String,
    },
    /// The budget is spent and its holder left it unwritten for a full duration of its own
    /// while this run watched: it looks gone, and only `fences recover` may take it over.
    /// Refuse, naming it.
    Gone {
        /// The holder.
        holder: String,
    },
    /// Another holder still has it and the budget is spent.
    GiveUp {
        /// The holder.
        holder: String,
        /// Its `acquireTime`.
        since: Option<Timestamp>,
    },
}

/// With `--recover-finished-runs`, when the liveness source was last asked about the holder
/// now read (`None`: never, or `--recover-finished-runs` is off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Asked {
    /// Recovery is off: the liveness source is never asked.
    Off,
    /// Never asked about this holder.
    Never,
    /// Asked this long ago (on this run's monotonic clock).
    Ago(Duration),
}

/// The decision on one read of the Lease: `me` is this run's holder, `keys` name the
/// annotations a parked pause and the holder's own duration carry, `unchanged_for` how long
/// this run has seen the Lease at the version just read (from the return of the first read of
/// that version to the sending of this one, on its own monotonic clock), `asked` when the
/// liveness source was last asked about this holder, `spent` whether the wait's budget is used
/// up.
///
/// No wall clock is read: a holder's `renewTime` compared with a clock that runs ahead would
/// make a live holder look gone, and the session would then refuse (or a race end) at once.
/// A holder is judged silent only when its Lease stays unwritten for a full duration of its
/// own ([`holder_duration`]) while watched, as `fences recover` judges it; only then is the
/// liveness source asked (at most once per duration), and — budget spent — is it named gone.
#[must_use]
pub fn decide_wait(
    read: Option<&KubeLease>,
    me: &Holder,
    keys: &AnnotationKeys,
    unchanged_for: Duration,
    asked: Asked,
    spent: bool,
) -> WaitDecision {
    let Some(lease) = read else {
        return WaitDecision::Start;
    };
    let Some(spec) = lease.spec.as_ref() else {
        return WaitDecision::Start;
    };
    let holder = match spec.holder_identity.as_deref() {
        Some(h) if !h.is_empty() && h != me.as_str() => h.to_string(),
        _ => return WaitDecision::Start,
    };
    let parked = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(&keys.parked))
        .is_some_and(|p| *p == holder);
    if parked {
        return WaitDecision::Parked { holder };
    }
    let duration = holder_duration(lease, keys);
    let silent = unchanged_for >= duration;
    let ask = match asked {
        Asked::Off => false,
        Asked::Never => true,
        Asked::Ago(ago) => ago >= duration,
    };
    if silent && ask {
        // A CI run that finished without its post step (a preempted runner) leaves its Lease
        // unwritten: ask, and recover it, instead of waiting the budget out behind it.
        return WaitDecision::Recover { holder };
    }
    let since = spec.acquire_time.as_ref().map(|t| t.0);
    if !spent {
        // Even a holder silent for its whole duration is waited for while the budget lasts:
        // a slow one (its requests hung) comes back, and a gone one's post step or a
        // `fences recover` frees the Lease. Refusing here ejected queued jobs behind a live
        // holder (the soak, seed 2).
        return WaitDecision::Wait { holder, since };
    }
    if silent {
        WaitDecision::Gone { holder }
    } else {
        WaitDecision::GiveUp { holder, since }
    }
}

impl Session {
    /// [`Session::start`], waiting up to `wait.budget` while another holder has the Lease
    /// (see the module). `waiting` gets a report about every `wait.every`. With a zero budget
    /// this is `Session::start`.
    ///
    /// A start that fails in a way waiting can mend while the budget lasts — the Lease taken
    /// first by another waiter, a target found fenced by another holder, a holder not proved
    /// finished, a read refused or answered 5xx (`waits_again`) — is not a refusal: the run
    /// waits again. A failed read of the Lease is read again, with a backoff.
    ///
    /// # Errors
    ///
    /// As [`Session::start`]; a parked pause is [`SessionError::Refused`] at once (with the
    /// resume command), a holder that keeps the Lease past the budget is
    /// [`SessionError::Refused`] naming it, or, when it also left the Lease unwritten for a
    /// full duration of its own, [`SessionError::LeaseHeld`] (`expired`). Nothing was changed
    /// in any of these cases.
    pub async fn start_waiting(
        client: Client,
        mut opts: SessionOptions,
        cancel: Cancel,
        wait: LeaseWait,
        mut waiting: impl FnMut(&LeaseWaiting),
    ) -> Result<Self, SessionError> {
        if wait.budget.is_zero() {
            return Self::start(client, opts, cancel).await;
        }
        opts.validate()?;
        // One holder across attempts: a Lease it already holds is its own.
        let me = opts.holder.clone().unwrap_or_else(Holder::generate);
        opts.holder = Some(me.clone());
        let api: Api<KubeLease> = Api::namespaced(client.clone(), &opts.lease.namespace);
        let lease = opts.lease.to_string();
        let started = Instant::now();
        let left = || wait.budget.saturating_sub(started.elapsed());
        let mut said: Option<Instant> = None;
        let mut seen = Seen::default();
        let reader = LeaseReader {
            api: &api,
            name: &opts.lease.name,
            cancel: &cancel,
            every: wait.every,
        };
        // The holder last waited for, and since when: named when the budget ends on a hung read.
        let mut last: Option<(String, Option<Timestamp>)> = None;
        loop {
            let (read, asked_at) = match reader.read(left).await? {
                LeaseRead::Got(read, sent) => (*read, sent),
                end => {
                    if let (LeaseRead::Hung, Some((holder, since))) = (end, last) {
                        return Err(still_held(&lease, holder, since, wait.budget));
                    }
                    // Anything else (or the budget spent) is the session's to report: it
                    // reads the Lease again, with its own bounded retries.
                    return Self::start(client, opts, cancel).await;
                }
            };
            let (version, unchanged_for, asked) = seen.update(
                read.as_ref(),
                asked_at,
                opts.recover_finished_runs.is_some(),
            );
            let decision = decide_wait(
                read.as_ref(),
                &me,
                &opts.keys,
                unchanged_for,
                asked,
                left().is_zero(),
            );
            // With recovery, read again when the holder can next be asked about, not later.
            let ask_in = read.as_ref().map_or(Duration::MAX, |l| {
                next_ask(holder_duration(l, &opts.keys), unchanged_for, asked)
            });
            let slice = left()
                .min(wait.every)
                .min(ask_in)
                .max(Duration::from_secs(1));
            // A waiting line to give: the holder and since when.
            let mut report = None;
            match decision {
                WaitDecision::Start | WaitDecision::Recover { .. } => {
                    if let WaitDecision::Recover { holder } = &decision {
                        tracing::info!(lease = %lease, holder = %holder, "the lease stood unwritten for its holder's duration: asking whether its run finished");
                        seen.asked = Some((holder.clone(), Instant::now(), None));
                    }
                    // Boxed: a session's start is a large future, and this one waits around it.
                    let r =
                        Box::pin(Self::start(client.clone(), opts.clone(), cancel.clone())).await;
                    let e = match r {
                        Err(e) if !left().is_zero() && waits_again(&e) => e,
                        r => return r,
                    };
                    tracing::info!(lease = %lease, error = %e, "the start can wait: waiting again");
                    if let Some((holder, _, why)) = seen.asked.as_mut() {
                        *why = not_finished(&e).or(why.take());
                        if matches!(decision, WaitDecision::Recover { .. }) && why.is_some() {
                            // Say at once why the holder waited for was not recovered.
                            said = None;
                            report = Some((holder.clone(), acquired(read.as_ref())));
                        }
                    }
                }
                WaitDecision::Wait { holder, since } => report = Some((holder, since)),
                WaitDecision::Parked { .. } => return Err(parked(&client, &opts, read).await),
                WaitDecision::Gone { holder } => return Err(gone(lease, holder)),
                WaitDecision::GiveUp { holder, since } => {
                    return Err(still_held(&lease, holder, since, wait.budget));
                }
            }
            last = report.clone().or(last);
            if let Some((holder, since)) = report
                && said.is_none_or(|t| t.elapsed() >= wait.every)
            {
                said = Some(Instant::now());
                waiting(&LeaseWaiting {
                    lease: lease.clone(),
                    not_finished: seen.not_finished(&holder),
                    holder,
                    since,
                    waited: started.elapsed(),
                    budget: wait.budget,
                });
            }
            // Nothing was changed: wait for the Lease to move, then read it again.
            cancel
                .unless_stopped(changed(&api, &opts.lease.name, &version, slice))
                .await
                .ok_or_else(stopped)?;
        }
    }
}

/// The refusal of a parked pause: it lasts until resumed, so it is never waited for. It names
/// the pause (holder, reason, since when) as every refusal by a parked Lease does.
async fn parked(client: &Client, opts: &SessionOptions, read: Option<KubeLease>) -> SessionError {
    if let Some(lease) = &read
        && let Some(e) = super::held::parked(client, opts, lease, None).await
    {
        return e;
    }
    let holder = read.and_then(|l| l.spec?.holder_identity);
    super::held::parked_unread(opts, holder.unwrap_or_default())
}

/// A stop while waiting: nothing was changed.
fn stopped() -> SessionError {
    SessionError::Cancelled {
        during: "while waiting for the lease: nothing was changed".into(),
        changed: false,
    }
}

/// The refusal of a holder that left the Lease unwritten for its whole duration, the budget
/// spent.
fn gone(lease: String, holder: String) -> SessionError {
    SessionError::LeaseHeld {
        lease,
        holder,
        expired: true,
    }
}

/// The refusal of a holder that kept the Lease past the budget.
fn still_held(
    lease: &str,
    holder: String,
    since: Option<Timestamp>,
    waited: Duration,
) -> SessionError {
    SessionError::Refused {
        object: super::Subject::lease(lease),
        why: super::Refusal::LeaseStillHeld {
            holder,
            since: since.map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
            waited,
        },
    }
}

/// Whether a start that failed with `e` can be mended by waiting, so a queued run waits again
/// instead of leaving the queue: the Lease taken first (by another waiter; or still held, as
/// the session judged it on its own; or written between the session's read and its write), a
/// target fenced by another holder (it ends with that holder's run), a holder not proved
/// finished or a takeover that lost its race (`--recover-finished-runs`: asked again later),
/// or a read that failed transiently (refused, reset, 429, 5xx) before anything was changed.
/// Any other refusal or error stands: a foreign suspend, a parked pause, a missing object,
/// bad input, a cleanup that left something held.
#[must_use]
pub(super) fn waits_again(e: &SessionError) -> bool {
    use super::Refusal as R;
    match e {
        SessionError::LeaseHeld { .. } => true,
        SessionError::Refused { why, .. } => matches!(
            why,
            R::LeaseContended
                | R::FencedBy { .. }
                | R::NotProvedFinished { .. }
                | R::TakeoverLost { .. }
        ),
        SessionError::Read { source, .. } => flux_fence::api::transient_read(source),
        SessionError::Lease(flux_fence::FenceError::Api { source, .. }) => {
            flux_fence::api::transient_read(source)
        }
        _ => false,
    }
}

/// Why a start with recovery did not recover the holder, when that is why it failed.
fn not_finished(e: &SessionError) -> Option<String> {
    match e {
        SessionError::Refused {
            why: super::Refusal::NotProvedFinished { why, .. },
            ..
        } => Some(why.clone()),
        _ => None,
    }
}

mod read;
mod seen;
#[cfg(test)]
mod tests;
