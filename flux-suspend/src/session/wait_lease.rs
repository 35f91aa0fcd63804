//! A bounded wait for the Lease (`--wait-lease`): two runs that overlap (a merge queue
//! building two groups, a manual deploy during a queued one) run one after the other instead
//! of the second being refused at once.
//!
//! [`Session::start_waiting`] reads the Lease; while a live holder has it, it watches the
//! Lease (each watch bounded by the report interval, then a check read), reports who holds it
//! and since when about every [`LeaseWait::every`], and starts the session — which takes the
//! Lease by compare-and-swap as always — the moment it is free. It never takes over a held
//! Lease: it only ever starts a session, whose acquire refuses a held one. A parked pause
//! (`flux-handoff pause`) is not waited for: it lasts until someone resumes it, so the wait is
//! refused at once with the resume command. What to do on each read is [`decide_wait`].

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, WatchEvent, WatchParams};

use super::{Session, SessionError, SessionOptions};
use crate::cancel::Cancel;
use flux_fence::lease::holder_duration;
use flux_fence::{AnnotationKeys, Holder};

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
        format!(
            "waiting for lease {}: held by {}{since} (waited {} of {})",
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

/// The decision on one read of the Lease: `me` is this run's holder, `keys` name the
/// annotations a parked pause and the holder's own duration carry, `unchanged_for` how long this run has seen the Lease at
/// the version just read (from the return of the first read of that version to the sending
/// of this one, on its own monotonic clock), `spent` whether the wait's budget is used up.
///
/// No wall clock is read: a holder's `renewTime` compared with a clock that runs ahead would
/// make a live holder look gone, and the session would then refuse (or a race end) at once.
/// A holder is judged gone only when its Lease stays unwritten for a full duration of its
/// own ([`holder_duration`]) while watched, as `fences recover` judges it.
#[must_use]
pub fn decide_wait(
    read: Option<&KubeLease>,
    me: &Holder,
    keys: &AnnotationKeys,
    unchanged_for: Duration,
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
    let since = spec.acquire_time.as_ref().map(|t| t.0);
    if !spent {
        // Even a holder silent for its whole duration is waited for while the budget lasts:
        // a slow one (its requests hung) comes back, and a gone one's post step or a
        // `fences recover` frees the Lease. Refusing here ejected queued jobs behind a live
        // holder (the soak, seed 2).
        return WaitDecision::Wait { holder, since };
    }
    if unchanged_for >= holder_duration(lease, keys) {
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
    /// A start that loses a race while the budget lasts — the Lease taken first by another
    /// waiter, or a target found fenced by the holder waited for or by the one that now has
    /// the Lease — is not a refusal: the run waits again.
    ///
    /// # Errors
    ///
    /// As [`Session::start`]; a parked pause is [`SessionError::Refused`] at once (with the
    /// resume command), a holder that keeps the Lease past the budget is
    /// [`SessionError::Refused`] naming it, or, when it also left the Lease unwritten for a
    /// full duration of its own, [`SessionError::LeaseHeld`] (`expired`: `fences recover`
    /// releases it). Nothing was changed in any of these cases.
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
        let mut said: Option<Instant> = None;
        // The version last seen, and when the first read of it returned.
        let mut seen: Option<(String, Instant)> = None;
        // Every holder this run waited for: a fence of theirs met at start is a race.
        let mut waited_for: Vec<String> = Vec::new();
        let stopped = || SessionError::Cancelled {
            during: "while waiting for the lease: nothing was changed".into(),
            changed: false,
        };
        loop {
            let asked = Instant::now();
            let read = cancel
                .unless_stopped(api.get_opt(&opts.lease.name))
                .await
                .ok_or_else(stopped)?;
            // A failed read is the session's to report: it reads the Lease again.
            let Ok(read) = read else {
                return Self::start(client, opts, cancel).await;
            };
            let version = read
                .as_ref()
                .and_then(|l| l.metadata.resource_version.clone())
                .unwrap_or_default();
            let unchanged_for = match &seen {
                Some((v, since)) if *v == version => asked.saturating_duration_since(*since),
                _ => {
                    seen = Some((version.clone(), Instant::now()));
                    Duration::ZERO
                }
            };
            let spent = started.elapsed() >= wait.budget;
            let decision = decide_wait(read.as_ref(), &me, &opts.keys, unchanged_for, spent);
            let slice = wait
                .budget
                .saturating_sub(started.elapsed())
                .min(wait.every)
                .max(Duration::from_secs(1));
            match decision {
                WaitDecision::Start => {
                    // Boxed: a session's start is a large future, and this one waits around it.
                    let r =
                        Box::pin(Self::start(client.clone(), opts.clone(), cancel.clone())).await;
                    let again = match &r {
                        // Its one read is bounded by the slice and ends at a stop; one that
                        // does not answer leaves the refusal as it stands.
                        Err(e) if started.elapsed() < wait.budget => cancel
                            .unless_stopped(tokio::time::timeout(
                                slice,
                                lost_a_race(e, &waited_for, &api, &opts.lease.name),
                            ))
                            .await
                            .ok_or_else(stopped)?
                            .unwrap_or(false),
                        _ => false,
                    };
                    if !again {
                        return r;
                    }
                    // Nothing was changed: wait for the Lease to move, then read it again.
                    cancel
                        .unless_stopped(changed(&api, &opts.lease.name, &version, slice))
                        .await
                        .ok_or_else(stopped)?;
                }
                WaitDecision::Parked { .. } => return Err(parked(&client, &opts, read).await),
                WaitDecision::Gone { holder } => {
                    return Err(SessionError::LeaseHeld {
                        lease,
                        holder,
                        expired: true,
                    });
                }
                WaitDecision::GiveUp { holder, since } => {
                    return Err(still_held(&lease, holder, since, wait.budget));
                }
                WaitDecision::Wait { holder, since } => {
                    if !waited_for.contains(&holder) {
                        waited_for.push(holder.clone());
                    }
                    if said.is_none_or(|t| t.elapsed() >= wait.every) {
                        said = Some(Instant::now());
                        waiting(&LeaseWaiting {
                            lease: lease.clone(),
                            holder,
                            since,
                            waited: started.elapsed(),
                            budget: wait.budget,
                        });
                    }
                    cancel
                        .unless_stopped(changed(&api, &opts.lease.name, &version, slice))
                        .await
                        .ok_or_else(stopped)?;
                }
            }
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

/// Whether a start that failed with `e` lost a race a waiting run must wait out; for a
/// fence's refusal the Lease's holder is read once more ([`waits_again`] decides).
async fn lost_a_race(
    e: &SessionError,
    waited_for: &[String],
    api: &Api<KubeLease>,
    name: &str,
) -> bool {
    let holder_now = match e {
        SessionError::Refused { why, .. } if fence_holder(why).is_some() => api
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity),
        _ => None,
    };
    waits_again(e, waited_for, holder_now.as_deref())
}

/// Whether a start that failed with `e` lost a race: the Lease was taken first (by another
/// waiter; or still held, as the session judged it on its own; or written between the
/// session's read and its write), or a target was fenced by a
/// holder this run waited for or by `holder_now`, the Lease's holder read after the refusal.
/// Any other refusal or error stands.
pub(super) fn waits_again(
    e: &SessionError,
    waited_for: &[String],
    holder_now: Option<&str>,
) -> bool {
    match e {
        SessionError::LeaseHeld { .. }
        | SessionError::Refused {
            why: super::Refusal::LeaseContended,
            ..
        } => true,
        SessionError::Refused { why, .. } => fence_holder(why)
            .is_some_and(|by| waited_for.contains(&by) || holder_now.is_some_and(|h| h == by)),
        _ => false,
    }
}

/// The holder of the fence a refusal names, if it is a fence of another holder.
fn fence_holder(why: &super::Refusal) -> Option<String> {
    match why {
        super::Refusal::FencedBy { holder } => Some(
            holder
                .parse::<flux_fence::OwnerValue>()
                .map_or_else(|_| holder.clone(), |o| o.holder.to_string()),
        ),
        _ => None,
    }
}

/// Returns when the Lease changed after `version` (a watch event), or after `slice` at the
/// latest; the caller reads it again either way. A watch that cannot be opened waits out a
/// short slice instead (the caller's read is the check).
async fn changed(api: &Api<KubeLease>, name: &str, version: &str, slice: Duration) {
    let secs = u32::try_from(slice.as_secs()).unwrap_or(u32::MAX).max(1);
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(secs);
    let Ok(stream) = api.watch(&params, version).await else {
        tokio::time::sleep(slice.min(Duration::from_secs(1))).await;
        return;
    };
    let mut stream = std::pin::pin!(stream);
    let _ = tokio::time::timeout(slice + Duration::from_secs(1), async {
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Bookmark(_)) => {}
                _ => return,
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests;
