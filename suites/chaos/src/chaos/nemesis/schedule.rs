//! One seed's schedule, drawn from `StdRng::seed_from_u64(seed)` alone: the same seed always
//! gives the same actors and the same faults at the same offsets. What the processes then do
//! in those windows is up to the real system (timing is not replayed, only the schedule).

use std::fmt;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Requests a hang or a reset may hit (`verb resource`, as the proxy names them).
const CUT: [&str; 5] = [
    "get kustomizations",
    "patch kustomizations",
    "get leases",
    "update leases",
    "create leases",
];
/// Writes a gateway may answer 504 and apply later.
const LATE: [&str; 2] = ["patch kustomizations", "update leases"];

/// What one actor does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// `flux-handoff run --wait-lease ... -- <work>` (queued on the cell's Lease).
    Run,
    /// `flux-handoff pause --wait-lease ...`, the work, then `resume --holder` after `hold_ms`.
    PauseResume { hold_ms: u64 },
    /// A deploy job through the GitHub Action: `node action/main.js` (`command: run`,
    /// `--wait-lease`), the runner's cancel sequence `cancel_ms` after it started when drawn,
    /// then `node action/post.js` (the soak's job, `soak/job.rs`). Its command exits 42 after
    /// its writes when `fails`.
    Action { cancel_ms: Option<u64>, fails: bool },
    /// `flux-handoff fences recover --yes`, straight to the API server.
    Janitor,
    /// The mutant: one work write naming the first actor's holder before anything is fenced.
    Rogue,
}

/// One actor: its role, when it starts, how many work writes its command makes, and whether
/// its clock runs two minutes ahead (libfaketime).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub role: Role,
    pub at_ms: u64,
    pub writes: u32,
    pub skewed: bool,
}

/// One fault and its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The `nth` request of this kind gets no answer and no error.
    Hang { request: &'static str, nth: u64 },
    /// The `nth` write of this kind is answered 504 at once and applied `after_ms` later.
    Late {
        request: &'static str,
        nth: u64,
        after_ms: u64,
    },
    /// The `nth` request of this kind is reset (TCP RST), not forwarded.
    Reset { request: &'static str, nth: u64 },
    /// The proxy closes every connection and refuses new ones for `ms`.
    Refuse { ms: u64 },
    /// SIGKILL of a live holder (`victim` modulo those alive then).
    Kill { victim: usize },
    /// SIGSTOP of a live holder, SIGCONT `ms` later.
    Stop { victim: usize, ms: u64 },
    /// A person's `flux resume`: `spec.suspend=false` on a fenced member (0 parent, 1 target).
    FluxResume { member: usize },
    /// Flux Operator's resume: `spec.suspend` removed from a fenced member.
    OperatorResume { member: usize },
    /// A person shortens a held Lease's `leaseDurationSeconds` to `seconds` ("to speed up
    /// recovery"): no path may take it over before the holder's own duration.
    LeaseEdit { seconds: i32 },
    /// The API server is stopped and started again after `down_ms` (same data, address, CA).
    Restart { down_ms: u64 },
}

impl Fault {
    /// The kind's name, as the figures count them.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Hang { .. } => "hang",
            Self::Late { .. } => "late_504",
            Self::Reset { .. } => "reset",
            Self::Refuse { .. } => "refuse",
            Self::Kill { .. } => "sigkill",
            Self::Stop { .. } => "sigstop",
            Self::FluxResume { .. } => "flux_resume",
            Self::OperatorResume { .. } => "operator_resume",
            Self::LeaseEdit { .. } => "lease_edit",
            Self::Restart { .. } => "restart",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Hang { request, nth } | Self::Reset { request, nth } => {
                write!(f, "{} {request}#{nth}", self.kind())
            }
            Self::Late {
                request,
                nth,
                after_ms,
            } => write!(f, "late_504 {request}#{nth} +{after_ms}ms"),
            Self::Refuse { ms } => write!(f, "refuse {ms}ms"),
            Self::Kill { victim } => write!(f, "sigkill victim {victim}"),
            Self::Stop { victim, ms } => write!(f, "sigstop victim {victim} for {ms}ms"),
            Self::FluxResume { member } => write!(f, "flux_resume member {member}"),
            Self::OperatorResume { member } => write!(f, "operator_resume member {member}"),
            Self::LeaseEdit { seconds } => write!(f, "lease_edit duration {seconds}s"),
            Self::Restart { down_ms } => write!(f, "restart down {down_ms}ms"),
        }
    }
}

/// A fault and when it is injected, from the seed's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timed {
    pub at_ms: u64,
    pub fault: Fault,
}

/// Everything one seed does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub seed: u64,
    pub actors: Vec<Actor>,
    pub faults: Vec<Timed>,
}

/// The fault kinds a plan may draw, in the order they are counted.
pub const KINDS: [&str; 11] = [
    "hang",
    "late_504",
    "reset",
    "refuse",
    "sigkill",
    "sigstop",
    "flux_resume",
    "operator_resume",
    "lease_edit",
    "restart",
    "clock_skew",
];

/// The schedule of `seed`; with `rogue`, the mutant actor comes first.
#[must_use]
pub fn plan(seed: u64, rogue: bool) -> Plan {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = rng.random_range(2..=4usize);
    let mut actors = Vec::with_capacity(n + 1);
    if rogue {
        actors.push(Actor {
            role: Role::Rogue,
            at_ms: 0,
            writes: 1,
            skewed: false,
        });
    }
    // Clock skew on at most one run per seed.
    let skew_one = rng.random_bool(0.3);
    for i in 0..n {
        let role = match rng.random_range(0..8u8) {
            // The first actor always holds something, so every seed has work to judge.
            _ if i == 0 => Role::Run,
            0..=2 => Role::Run,
            3 | 4 => Role::PauseResume {
                hold_ms: rng.random_range(200..1500),
            },
            5 | 6 => Role::Action {
                cancel_ms: rng.random_bool(0.35).then(|| rng.random_range(500..6000)),
                fails: rng.random_bool(0.15),
            },
            _ => Role::Janitor,
        };
        let skewed = skew_one && role == Role::Run && !actors.iter().any(|a| a.skewed);
        actors.push(Actor {
            role,
            at_ms: rng.random_range(0..3000),
            writes: rng.random_range(2..=5),
            skewed,
        });
    }
    let m = rng.random_range(1..=3usize);
    let faults = (0..m)
        .map(|_| Timed {
            at_ms: rng.random_range(0..6000),
            fault: fault(&mut rng),
        })
        .collect();
    Plan {
        seed,
        actors,
        faults,
    }
}

fn fault(rng: &mut StdRng) -> Fault {
    let pick = |rng: &mut StdRng, from: &[&'static str]| from[rng.random_range(0..from.len())];
    match rng.random_range(0..10u8) {
        0 => Fault::Hang {
            request: pick(rng, &CUT),
            nth: rng.random_range(1..=4),
        },
        1 => Fault::Late {
            request: pick(rng, &LATE),
            nth: rng.random_range(1..=4),
            after_ms: rng.random_range(200..4000),
        },
        2 => Fault::Reset {
            request: pick(rng, &CUT),
            nth: rng.random_range(1..=4),
        },
        3 => Fault::Refuse {
            ms: rng.random_range(500..3000),
        },
        4 => Fault::Kill {
            victim: rng.random_range(0..4),
        },
        5 => Fault::Stop {
            victim: rng.random_range(0..4),
            ms: rng.random_range(1000..8000),
        },
        6 => Fault::FluxResume {
            member: rng.random_range(0..2),
        },
        7 => Fault::OperatorResume {
            member: rng.random_range(0..2),
        },
        8 => Fault::LeaseEdit {
            seconds: rng.random_range(1..=3),
        },
        _ => Fault::Restart {
            down_ms: rng.random_range(0..3000),
        },
    }
}

/// Whether the Action job of actor `index` of `seed` is preempted, and how long after it
/// acquired the Lease (the soak's preemption, `soak/job.rs`): a third of the jobs the runner
/// does not cancel. Drawn from a generator of its own, so every plan is what it was before.
#[must_use]
pub fn preempt_of(seed: u64, index: usize, cancel_ms: Option<u64>) -> Option<u64> {
    let mut rng =
        StdRng::seed_from_u64(seed.wrapping_mul(8_191).wrapping_add(index as u64) ^ 0x5052);
    (cancel_ms.is_none() && rng.random_bool(0.33)).then(|| rng.random_range(100..1_500))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nemesis_a_seed_reproduces_its_schedule() {
        for seed in 0..50 {
            assert_eq!(plan(seed, false), plan(seed, false));
            let p = plan(seed, false);
            assert!((2..=4).contains(&p.actors.len()), "{p:?}");
            assert_eq!(p.actors[0].role, Role::Run);
            assert!((1..=3).contains(&p.faults.len()));
            assert!(p.actors.iter().filter(|a| a.skewed).count() <= 1);
        }
        assert_ne!(plan(1, false), plan(2, false));
    }

    #[test]
    fn nemesis_the_ci_seeds_plan_every_fault_kind_and_an_action_job() {
        // xtask's NEMESIS_CI_FIRST and NEMESIS_CI_SEEDS: seeds 24..=35.
        let plans: Vec<Plan> = (24..36).map(|s| plan(s, false)).collect();
        let mut kinds: Vec<&str> = plans
            .iter()
            .flat_map(|p| p.faults.iter().map(|t| t.fault.kind()))
            .collect();
        if plans.iter().any(|p| p.actors.iter().any(|a| a.skewed)) {
            kinds.push("clock_skew");
        }
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), KINDS.len(), "{kinds:?}");
        assert!(plans.iter().any(|p| {
            p.actors
                .iter()
                .any(|a| matches!(a.role, Role::Action { .. }))
        }));
    }

    #[test]
    fn nemesis_some_action_jobs_are_preempted_never_cancelled_ones() {
        let drawn: Vec<Option<u64>> = (0..300).map(|i| preempt_of(1, i, None)).collect();
        let n = drawn.iter().filter(|p| p.is_some()).count();
        assert!((60..140).contains(&n), "{n}");
        assert_eq!(
            drawn,
            (0..300).map(|i| preempt_of(1, i, None)).collect::<Vec<_>>()
        );
        assert!((0..300).all(|i| preempt_of(1, i, Some(500)).is_none()));
    }

    #[test]
    fn nemesis_the_rogue_mutant_comes_first_and_changes_nothing_else() {
        let (p, m) = (plan(7, false), plan(7, true));
        assert_eq!(m.actors[0].role, Role::Rogue);
        assert_eq!(&m.actors[1..], &p.actors[..]);
        assert_eq!(m.faults, p.faults);
    }

    #[test]
    fn nemesis_every_fault_kind_is_drawn_within_a_hundred_seeds() {
        let mut seen: Vec<&str> = (0..100)
            .flat_map(|s| plan(s, false).faults)
            .map(|t| t.fault.kind())
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 10, "{seen:?}");
        assert!(seen.iter().all(|k| KINDS.contains(k)));
        assert!((0..100).any(|s| plan(s, false).actors.iter().any(|a| a.skewed)));
        let actions: Vec<Role> = (0..100)
            .flat_map(|s| plan(s, false).actors)
            .map(|a| a.role)
            .filter(|r| matches!(r, Role::Action { .. }))
            .collect();
        assert!(actions.iter().any(|r| matches!(
            r,
            Role::Action {
                cancel_ms: Some(_),
                ..
            }
        )));
        assert!(actions.iter().any(|r| matches!(
            r,
            Role::Action {
                cancel_ms: None,
                ..
            }
        )));
    }
}
