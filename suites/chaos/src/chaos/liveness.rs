//! The liveness checker (issue 48, deliverable 8): every deploy job that did not deploy (did
//! not run its command to success) is classified from the recorded history, not from its exit
//! code, as *warranted* or *unwarranted*.
//!
//! The history is the Lease as the recorder saw it, in the server's order (resourceVersion),
//! each version stamped with the moment the recorder received it (milliseconds from one
//! origin), and the fences of the chain. A holder *renews* when a version of the Lease
//! naming it carries a new `renewTime` (or first names it); it is *live* at a moment when its
//! last renewal is at most its duration before that moment.
//!
//! Warranted, in this order: the runner cancelled the job; the harness killed it; its deploy
//! script failed; a person broke its pause (a member under its fence with `spec.suspend`
//! false); it held the Lease and a fault struck while it ran (safety before liveness); it left
//! while a deliberate pause (a parked Lease, until its `resume` ended) held the Lease; it
//! spent its whole wait budget while another holder held the Lease and was live when it left;
//! or it spent its budget behind a holder that had stopped renewing which it had no way to
//! prove finished (no `recover-finished-runs` source). Everything else is unwarranted: leaving
//! before the budget was spent, leaving while the Lease was free, leaving behind a silent
//! holder it could have recovered, leaving behind a pause its resume left parked.
//!
//! Receive stamps lag the server's writes by the watch's delivery (milliseconds; longer
//! around an API server restart, when the watch resumes). A late stamp makes a renewal look
//! later and a release look later, so the lag only ever makes a departure look *more*
//! warranted: the checker may miss an ejection, never invent one.

use std::collections::BTreeMap;

/// One version of the Lease, as the recorder received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSeen {
    pub rv: u64,
    /// When the recorder received it (ms from the origin of the jobs' spans).
    pub at_ms: u64,
    /// `holderIdentity` (`None`: free or deleted).
    pub holder: Option<String>,
    /// `renewTime`, as written.
    pub renew: Option<String>,
    /// The parked annotation is on it (a deliberate pause).
    pub parked: bool,
    /// The holder's duration (ms): its own duration annotation, or `leaseDurationSeconds`.
    pub duration_ms: u64,
}

/// What the checker needs of one job that did not deploy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Its holder name (empty when it never got as far as naming one).
    pub holder: String,
    /// When it started and when it left (ms from the origin).
    pub started_ms: u64,
    pub left_ms: u64,
    /// Its `--wait-lease` budget (ms).
    pub budget_ms: u64,
    /// How it ended, as far as the harness knows.
    pub end: End,
    /// A fault was injected while it ran.
    pub faulted: bool,
    /// It could prove a silent holder finished (`recover-finished-runs` with a source).
    pub recovers: bool,
}

/// How a job that did not deploy ended, as far as the harness knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// It left on its own (whatever its exit code).
    Left,
    /// The runner's cancel reached it before it ended.
    Cancelled,
    /// The harness killed it (the nemesis's SIGKILL).
    Killed,
    /// Its deploy script ran and failed.
    ScriptFailed,
}

/// Why a job that did not deploy was warranted not to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Warranted {
    Cancelled,
    Killed,
    ScriptFailed,
    PauseBroken,
    FaultWhileHolding,
    Parked,
    LiveHolder,
    SilentUnprovable,
}

impl Warranted {
    /// Its name in the figures.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Cancelled => "cancelled",
            Self::Killed => "killed",
            Self::ScriptFailed => "script_failed",
            Self::PauseBroken => "pause_broken",
            Self::FaultWhileHolding => "fault_while_holding",
            Self::Parked => "parked_pause",
            Self::LiveHolder => "live_holder",
            Self::SilentUnprovable => "silent_holder_unprovable",
        }
    }
}

/// The Lease at one moment, as far as a waiter's departure is judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAt {
    Free,
    Parked(String),
    /// Held by a holder whose last renewal was `silent_ms` before the moment.
    Held {
        holder: String,
        silent_ms: u64,
        duration_ms: u64,
    },
}

impl LeaseAt {
    fn live(&self) -> bool {
        matches!(self, Self::Held { silent_ms, duration_ms, .. } if silent_ms <= duration_ms)
    }
}

/// The Lease at `at_ms`: the last version received by then (`lease` in any order).
#[must_use]
pub fn lease_at(lease: &[LeaseSeen], at_ms: u64) -> LeaseAt {
    let mut seen: Vec<&LeaseSeen> = lease.iter().collect();
    seen.sort_by_key(|l| l.rv);
    seen.dedup_by_key(|l| l.rv);
    // The last renewal of the holder of each version: a new renewTime or a new holder.
    let mut renewed_at: Option<u64> = None;
    let mut state = LeaseAt::Free;
    let mut prev: Option<&LeaseSeen> = None;
    for l in seen.into_iter().take_while(|l| l.at_ms <= at_ms) {
        let same_holder = prev.is_some_and(|p| p.holder == l.holder);
        let renewed = !same_holder || prev.is_some_and(|p| p.renew != l.renew);
        if renewed {
            renewed_at = Some(l.at_ms);
        }
        state = match &l.holder {
            None => LeaseAt::Free,
            Some(h) if l.parked => LeaseAt::Parked(h.clone()),
            Some(h) => LeaseAt::Held {
                holder: h.clone(),
                silent_ms: at_ms - renewed_at.unwrap_or(l.at_ms),
                duration_ms: l.duration_ms,
            },
        };
        prev = Some(l);
    }
    state
}

/// Whether `holder` ever held the Lease.
#[must_use]
pub fn held(lease: &[LeaseSeen], holder: &str) -> bool {
    !holder.is_empty() && lease.iter().any(|l| l.holder.as_deref() == Some(holder))
}

/// `Ok(why)` or `Err(why not)` for one job that did not deploy; `broken` says whether a
/// person broke a pause under its fence (see [`broken_by`]). As [`classify_finished`] with no
/// run known to have finished.
pub fn classify(j: &Job, lease: &[LeaseSeen], broken: bool) -> Result<Warranted, String> {
    classify_finished(j, lease, broken, &BTreeMap::new())
}

/// How long after a holder's run finished a waiter with a liveness source must have
/// recovered it: the tool asks once the Lease stood unwritten for the holder's duration and
/// again at most once per duration, so two durations, and a margin for the asking itself.
#[must_use]
pub fn recovery_due_ms(duration_ms: u64) -> u64 {
    2 * duration_ms + 5_000
}

/// As [`classify`], where `finished` maps the holders whose GitHub run the liveness source
/// reported `completed` to the moment it began to (ms from the origin): a job with
/// `recovers` that left behind a silent one of them, [`recovery_due_ms`] after it finished,
/// could have recovered it and is unwarranted; behind any other silent holder it had no way
/// to prove finished, its departure at the end of its budget is warranted.
pub fn classify_finished(
    j: &Job,
    lease: &[LeaseSeen],
    broken: bool,
    finished: &BTreeMap<String, u64>,
) -> Result<Warranted, String> {
    classify_among(j, lease, broken, finished, &BTreeMap::new())
}

/// How long after a person's `resume` ended a job may still have read the Lease parked by
/// that pause before it was released (its read, then its refusal): the resume releases
/// before it waits for Ready, so this only covers a refusal in flight.
pub const RESUMED_MARGIN_MS: u64 = 2_000;

/// As [`classify_finished`], where `resumed` maps the holders of deliberate pauses (a person's
/// `pause`) to the moment their `resume` ended (ms from the origin): a pause is deliberate
/// until its resume has ended; a job refused by a Lease still parked by it
/// [`RESUMED_MARGIN_MS`] later was refused by what the resume left behind, which no one
/// holds on purpose, and is unwarranted.
pub fn classify_among(
    j: &Job,
    lease: &[LeaseSeen],
    broken: bool,
    finished: &BTreeMap<String, u64>,
    resumed: &BTreeMap<String, u64>,
) -> Result<Warranted, String> {
    match j.end {
        End::Cancelled => return Ok(Warranted::Cancelled),
        End::Killed => return Ok(Warranted::Killed),
        End::ScriptFailed => return Ok(Warranted::ScriptFailed),
        End::Left => {}
    }
    if broken {
        return Ok(Warranted::PauseBroken);
    }
    if j.faulted && held(lease, &j.holder) {
        return Ok(Warranted::FaultWhileHolding);
    }
    let waited = j.left_ms.saturating_sub(j.started_ms);
    let spent = waited >= j.budget_ms;
    let s = |ms: u64| format!("{}.{}s", ms / 1_000, ms % 1_000 / 100);
    let when = format!("left after {} of its {} budget", s(waited), s(j.budget_ms));
    let left_behind = |h: &String| {
        resumed
            .get(h)
            .filter(|end| j.left_ms > *end + RESUMED_MARGIN_MS)
            .map(|end| s(j.left_ms - end))
    };
    // A refusal read while a pause parked the Lease, exited just after its release.
    let parked_before = matches!(
        lease_at(lease, j.left_ms.saturating_sub(RESUMED_MARGIN_MS)),
        LeaseAt::Parked(ref h) if *h != j.holder
    );
    match lease_at(lease, j.left_ms) {
        LeaseAt::Free if parked_before => Ok(Warranted::Parked),
        LeaseAt::Parked(h) if h != j.holder => match left_behind(&h) {
            None => Ok(Warranted::Parked),
            Some(ago) => Err(format!(
                "{when} while the Lease was still parked by {h}, whose resume ended {ago} before"
            )),
        },
        at @ LeaseAt::Held { .. } if at.live() && spent => Ok(Warranted::LiveHolder),
        LeaseAt::Held {
            ref holder,
            duration_ms,
            ..
        } if spent
            && *holder != j.holder
            && !(j.recovers
                && finished
                    .get(holder)
                    .is_some_and(|f| j.left_ms >= f + recovery_due_ms(duration_ms))) =>
        {
            Ok(Warranted::SilentUnprovable)
        }
        LeaseAt::Free => Err(format!("{when} while the Lease was free")),
        LeaseAt::Parked(h) => Err(format!("{when} while it held the Lease parked ({h})")),
        LeaseAt::Held {
            holder,
            silent_ms,
            duration_ms,
        } => {
            let who = if holder == j.holder {
                "itself".to_string()
            } else {
                holder.clone()
            };
            let how = if silent_ms <= duration_ms {
                format!("live, renewed {} before", s(silent_ms))
            } else {
                let done = finished.get(&holder).map_or(String::new(), |f| {
                    format!(
                        ", its run completed {} before",
                        s(j.left_ms.saturating_sub(*f))
                    )
                });
                format!(
                    "silent for {} of a {} duration{done}",
                    s(silent_ms),
                    s(duration_ms)
                )
            };
            Err(format!("{when} while the Lease was held by {who} ({how})"))
        }
    }
}

/// Holders under whose fence a person set `spec.suspend` false (or removed it): `members`
/// are (rv, owner annotation, suspend) of every member version, in any order.
#[must_use]
pub fn broken_by(members: &[(u64, Option<String>, bool)]) -> Vec<String> {
    let mut out: Vec<String> = members
        .iter()
        .filter(|(_, owner, suspend)| owner.is_some() && !suspend)
        .filter_map(|(_, owner, _)| owner.as_deref()?.split(';').next().map(str::to_string))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A `--wait-lease` value of the suites (`30s`, `4m`) in ms; 0 when it is neither.
#[must_use]
pub fn budget_ms(wait: &str) -> u64 {
    let (n, unit) = wait.split_at(wait.len().saturating_sub(1));
    let n: u64 = n.parse().unwrap_or(0);
    match unit {
        "s" => n * 1_000,
        "m" => n * 60_000,
        _ => 0,
    }
}

/// Counts of a run's classified jobs: unwarranted, and warranted by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub unwarranted: usize,
    pub warranted: BTreeMap<&'static str, usize>,
}

impl Tally {
    pub fn add(&mut self, r: &Result<Warranted, String>) {
        match r {
            Ok(w) => *self.warranted.entry(w.name()).or_default() += 1,
            Err(_) => self.unwarranted += 1,
        }
    }

    /// `warranted: live_holder=2 script_failed=1` (empty map: `warranted: none`).
    #[must_use]
    pub fn line(&self) -> String {
        if self.warranted.is_empty() {
            return "warranted: none".into();
        }
        let by: Vec<String> = self
            .warranted
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        format!("warranted: {}", by.join(" "))
    }
}

#[cfg(test)]
mod tests;
