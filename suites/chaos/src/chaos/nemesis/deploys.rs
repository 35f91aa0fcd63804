//! The seed's deploys (its `run` actors and Action jobs) judged by the liveness checker
//! ([`crate::chaos::liveness`]): each that did not run its command to success is warranted
//! or unwarranted, from the recorded history.

use std::time::Instant;

use super::checker::{Event, Object};
use super::history::since;
use crate::chaos::liveness::{self, End, LeaseSeen, Warranted};
use crate::chaos::soak::group::member_versions;

/// How one deploy went, as the checker needs it.
#[derive(Debug, Clone)]
pub struct Deploy {
    pub holder: String,
    pub started: Instant,
    pub left: Instant,
    pub cancelled: bool,
    /// The nemesis killed it with SIGKILL.
    pub killed: bool,
    /// How its command ended: an Action job's deploy script writes its exit code; a `run`'s
    /// work is judged by its writes in the history (all of them: it ran; some: it failed).
    pub ended: Ended,
}

/// What is known of a deploy's command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The deploy script's exit code, if it reached its end.
    Script(Option<i32>),
    /// The number of work writes its command makes.
    Writes(u32),
}

/// The verdict of each deploy that did not deploy, by holder.
#[must_use]
pub fn judge(
    deploys: &[Deploy],
    history: &[Event],
    lease: &[LeaseSeen],
    origin: Instant,
    budget_ms: u64,
    fired: &[&str],
) -> Vec<(String, Result<Warranted, String>)> {
    // Any fault of the seed but a skewed clock (the nemesis records no fault's window).
    let faulted = fired.iter().any(|k| *k != "clock_skew");
    let broken = liveness::broken_by(&member_versions(history));
    let mut out = Vec::new();
    for d in deploys {
        let (deployed, script_failed) = match d.ended {
            Ended::Script(c) => (c == Some(0), c.is_some_and(|c| c != 0)),
            Ended::Writes(n) => {
                let mut rvs: Vec<u64> = history
                    .iter()
                    .filter(|e| e.object == Object::Work && e.holder.as_ref() == Some(&d.holder))
                    .map(|e| e.rv)
                    .collect();
                rvs.sort_unstable();
                rvs.dedup();
                let w = u32::try_from(rvs.len()).unwrap_or(u32::MAX);
                (w >= n, w > 0 && w < n)
            }
        };
        if deployed {
            continue;
        }
        let end = if d.cancelled {
            End::Cancelled
        } else if d.killed {
            End::Killed
        } else if script_failed {
            End::ScriptFailed
        } else {
            End::Left
        };
        let job = liveness::Job {
            holder: d.holder.clone(),
            started_ms: since(origin, d.started),
            left_ms: since(origin, d.left),
            budget_ms,
            end,
            faulted,
            recovers: false,
        };
        let verdict = liveness::classify(&job, lease, broken.contains(&d.holder));
        out.push((d.holder.clone(), verdict));
    }
    out
}
