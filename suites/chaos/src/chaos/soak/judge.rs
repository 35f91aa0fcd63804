//! The soak's pure judgements: whether a job was ejected by the tool (by its exit codes; the
//! liveness checker, `crate::chaos::liveness`, judges the same jobs from the history), the
//! overhead percentiles, and the report line.
//!
//! An ejection is a job the merge queue would lose to the tool: exit 3 while the Lease was
//! only busy (with `--wait-lease` a busy Lease is waited for), or any exit of the main step
//! that is neither the command's own, nor a cancel's, nor a documented failure of a fault
//! injected while the step ran (README, "Exit codes"), or a post step that failed without
//! such a fault.

use std::collections::BTreeSet;

use crate::chaos::liveness::Warranted;

/// How the runner's cancel went, as far as it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cancel {
    /// SIGINT only: the step ended within 7.5 s.
    Int,
    /// SIGINT, then SIGTERM 7.5 s later.
    Term,
    /// SIGINT, SIGTERM, then SIGKILL 2.5 s later.
    Kill,
}

/// What one job did, as the judge needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// The main step's exit code (node mirrors flux-handoff's); `None` when it was killed by a
    /// signal.
    pub main: Option<i32>,
    /// The exit code the command itself was planned to end with, when not 0.
    pub command: Option<i32>,
    /// The runner's cancel, if one was sent before the main step ended.
    pub cancel: Option<Cancel>,
    /// Fault kinds injected while the main step ran (`restart`, `hang`, `flux_resume`).
    pub faults: BTreeSet<&'static str>,
    /// A fault fired anywhere in the group before the main step ended.
    pub group_faulted: bool,
    /// The main step's error line says the Lease is held by another holder.
    pub lease_busy: bool,
    /// The post step's exit code (`None`: killed or did not finish within its bound).
    pub post: Option<i32>,
    /// Fault kinds injected while the post step ran.
    pub post_faults: BTreeSet<&'static str>,
    /// The runner was preempted (every process of the job killed with SIGKILL, no post step).
    pub preempted: bool,
}

/// Exit codes a fault of `kind` may cause, as documented (README, "Exit codes"): an API
/// server restart or a hung connection: 3 (a refusal found after a lost answer, nothing
/// changed), 4 (a bounded wait did not settle), 6 (API error, Lease lost), 7 (cleanup
/// failed); a person's `flux resume`: 8 (pause broken while the command ran), 4 (before the
/// command: the stable-pause proof cannot settle on an unsuspended member), 7.
#[must_use]
pub fn documented(kind: &str) -> &'static [i32] {
    match kind {
        "restart" | "hang" | "refuse" => &[3, 4, 6, 7],
        "flux_resume" => &[4, 7, 8],
        _ => &[],
    }
}

/// `Ok(why the job was not lost to the tool)` or `Err(why it was)`.
pub fn classify(f: &Facts) -> Result<&'static str, String> {
    if f.preempted {
        // Lost to the runner, not to the tool; what it left is the next jobs' to recover.
        return Ok("preempted: the runner died, no post step");
    }
    let main = main(f)?;
    match f.post {
        Some(0) => Ok(main),
        Some(p) if f.post_faults.iter().any(|k| documented(k).contains(&p)) => Ok(main),
        Some(p) => Err(format!(
            "the post step exited {p} ({})",
            faults(&f.post_faults)
        )),
        None => Err("the post step did not finish".into()),
    }
}

fn main(f: &Facts) -> Result<&'static str, String> {
    let Some(code) = f.main else {
        return if f.cancel == Some(Cancel::Kill) {
            Ok("cancelled: the runner killed the step")
        } else {
            Err("the main step was killed by a signal nobody sent".into())
        };
    };
    if code == 0 {
        return Ok("succeeded");
    }
    if Some(code) == f.command {
        return Ok("the command's own exit");
    }
    if f.cancel.is_some() && code >= 128 {
        // 130: cancelled after releasing; 128+N: the command was ended by signal N.
        return Ok("cancelled");
    }
    if code == 3 && f.lease_busy {
        return Err("exit 3 while the Lease was only busy (--wait-lease waits for it)".into());
    }
    if f.faults.iter().any(|k| documented(k).contains(&code)) {
        return Ok("a documented failure of an injected fault");
    }
    if code == 3 && f.group_faulted {
        // A fault earlier in the group left a holder's fence its post step had to release.
        return Ok("refused after a fault in the group");
    }
    Err(format!("exit {code} ({})", faults(&f.faults)))
}

fn faults(k: &BTreeSet<&'static str>) -> String {
    if k.is_empty() {
        "no fault injected meanwhile".into()
    } else {
        format!(
            "faults meanwhile: {}",
            k.iter().copied().collect::<Vec<_>>().join(",")
        )
    }
}

/// The exit-code verdict of a job, corrected by the server's history: a job the exit-code
/// judge calls an ejection whose departure the history warrants — a person broke its pause
/// (`broken`: a person's `kubectl scale` answered with its fence on the gate; whatever it
/// exited, 7 withheld or 8 stopped), or, with its post step passed, a person's pause held on
/// purpose, a broken member, a live holder for its whole budget — was not lost to the tool
/// (a refusal by a parked Lease is an exit 3 that reads like a busy Lease).
pub fn by_history(
    verdict: Result<&'static str, String>,
    liveness: Option<&Result<Warranted, String>>,
    broken: bool,
    post_ok: bool,
) -> Result<&'static str, String> {
    if verdict.is_ok() {
        return verdict;
    }
    if broken {
        return Ok("a person broke the pause (scaled the gate)");
    }
    match liveness {
        Some(Ok(w @ (Warranted::Parked | Warranted::PauseBroken | Warranted::LiveHolder)))
            if post_ok =>
        {
            Ok(w.name())
        }
        _ => verdict,
    }
}

/// Nearest-rank percentile `q` (0–100) of `values` (any order); 0 when empty.
#[must_use]
pub fn percentile(values: &[u64], q: u32) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = (u64::from(q) * v.len() as u64).div_ceil(100).max(1);
    v[usize::try_from(rank).unwrap_or(usize::MAX).min(v.len()) - 1]
}

/// The soak's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Figures {
    pub jobs: usize,
    pub ejections: usize,
    /// Jobs that did not deploy and had no warrant in the history (`crate::chaos::liveness`).
    pub unwarranted: usize,
    pub leaked_fences: usize,
    pub work_outside_pause: usize,
    pub overhead_p50_ms: u64,
    pub overhead_p99_ms: u64,
}

impl Figures {
    /// The one line the soak ends with.
    #[must_use]
    pub fn line(&self) -> String {
        format!(
            "soak: jobs={} ejections={} unwarranted={} leaked_fences={} work_outside_pause={} overhead_p50_ms={} overhead_p99_ms={}",
            self.jobs,
            self.ejections,
            self.unwarranted,
            self.leaked_fences,
            self.work_outside_pause,
            self.overhead_p50_ms,
            self.overhead_p99_ms
        )
    }

    /// Whether the soak passed.
    #[must_use]
    pub fn passed(&self) -> bool {
        self.ejections == 0
            && self.unwarranted == 0
            && self.leaked_fences == 0
            && self.work_outside_pause == 0
    }
}

/// The step's overhead over the bare command: its wall time less the command's own and the
/// time it queued for the Lease (ms), saturating at 0.
#[must_use]
pub fn overhead_ms(step_ms: u64, command_ms: u64, queued_ms: u64) -> u64 {
    step_ms.saturating_sub(command_ms).saturating_sub(queued_ms)
}

#[cfg(test)]
mod tests;
