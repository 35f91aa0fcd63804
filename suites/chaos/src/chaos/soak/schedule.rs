//! The soak's schedule, drawn from the seed alone: the same `(seed, jobs)` always gives the
//! same groups, jobs, cancels and faults at the same offsets. Group sizes come from
//! `StdRng::seed_from_u64(seed)`; each group's contents from a generator of its own
//! ([`group_rng`]), so a group can be replayed alone (`--group G`) and is the same as in the
//! whole run. What the processes then do in those windows is up to the real system.

use std::fmt;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Requests a hung connection may hit (`verb resource`, as the fault proxy names them).
const HANG: [&str; 4] = [
    "get kustomizations",
    "patch kustomizations",
    "get leases",
    "update leases",
];

/// The command a deploy job's step runs exits with this when the plan says it fails.
pub const COMMAND_FAILS_WITH: u8 = 42;

/// One emulated deploy job of the merge queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Index over the whole soak (0-based); the job's run id derives from it.
    pub index: usize,
    /// When its main step starts, from the group's start.
    pub at_ms: u64,
    /// Work writes its command makes.
    pub writes: u32,
    /// The command exits [`COMMAND_FAILS_WITH`] after its writes (a failing deploy).
    pub fails: bool,
    /// The runner cancels the job this long after its main step started.
    pub cancel_ms: Option<u64>,
    /// The runner is preempted this long after the job acquired the Lease (if it ends
    /// first, nothing happens): every process of the job is killed with SIGKILL at once and the post
    /// step never runs; GitHub then reports the run `completed`, and the next jobs must
    /// recover its Lease and fences (issue 48, 8).
    pub preempt_ms: Option<u64>,
    /// What it pauses besides the chain's target.
    pub extra: Extra,
}

/// A job's target besides `infrastructure` (issue 48, deliverable 8; issue 49, deliverable 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extra {
    None,
    /// A Flux Operator `ResourceSet` (`rset/NS/tenants`), paused by its reconcile annotation.
    Operator,
    /// A replicas gate (`deploy/NS/web=0`) of a Deployment the chain's Kustomization applies;
    /// with `scale_ms`, a person runs `kubectl scale` that long after the gate is proven (0
    /// Pods left) while the job holds it: a broken pause.
    Gate {
        scale_ms: Option<u64>,
    },
}

impl fmt::Display for Extra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => Ok(()),
            Self::Operator => write!(f, " +rset"),
            Self::Gate { scale_ms: None } => write!(f, " +gate"),
            Self::Gate { scale_ms: Some(ms) } => write!(f, " +gate scale@{ms}ms"),
        }
    }
}

/// A fault of the group's window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The API server is stopped and started again after `down_ms` (same data, same address).
    Restart { down_ms: u64 },
    /// The `nth` request of this kind (from the fault's moment) gets no answer and no error.
    Hang { request: &'static str, nth: u64 },
    /// A person's `flux resume`: `spec.suspend=false` on a fenced member (0 parent, 1 target).
    FluxResume { member: usize },
    /// Once the Lease is held (the group's other jobs queue behind it), the proxy closes
    /// every connection and refuses new ones for `ms`: a managed control plane restarting its
    /// API server, a load balancer reset, while jobs wait.
    Refuse { ms: u64 },
}

impl Fault {
    /// The kind's name, as the figures count them.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Restart { .. } => "restart",
            Self::Hang { .. } => "hang",
            Self::FluxResume { .. } => "flux_resume",
            Self::Refuse { .. } => "refuse",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Restart { down_ms } => write!(f, "restart down {down_ms}ms"),
            Self::Hang { request, nth } => write!(f, "hang {request}#{nth}"),
            Self::FluxResume { member } => write!(f, "flux_resume member {member}"),
            Self::Refuse { ms } => write!(f, "refuse {ms}ms once the lease is held"),
        }
    }
}

/// A fault and when it is injected, from the group's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timed {
    pub at_ms: u64,
    pub fault: Fault,
}

/// A person's maintenance among the queue (issue 48, deliverable 8): `pause apps --reason
/// ... --wait-lease`, held for `hold_ms`, then `resume apps --timeout` (which waits for
/// Ready after releasing). When `ready_fails`, the controller model fails every reconcile of
/// `apps` until the resume has ended: the resume must exit 10 (released, not Ready) and
/// leave no Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    /// When the pause starts, from the group's start.
    pub at_ms: u64,
    /// How long the pause is held once it was taken.
    pub hold_ms: u64,
    pub ready_fails: bool,
}

/// The `--timeout` of a person's `resume apps` (its Ready wait), in seconds.
pub const RESUME_TIMEOUT_S: u64 = 3;

/// 2–4 jobs queued on one Lease at once, and the faults of their window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub index: usize,
    pub jobs: Vec<Job>,
    pub faults: Vec<Timed>,
    /// A person's pause and resume among the jobs.
    pub person: Option<Person>,
}

/// The whole soak.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub seed: u64,
    pub groups: Vec<Group>,
}

/// The generator of group `g`'s contents.
fn group_rng(seed: u64, g: usize) -> StdRng {
    StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(g as u64 + 1))
}

/// Group sizes summing to `jobs`: 2–4 each (a single job is a group of one only when
/// `jobs` is 1).
#[must_use]
pub fn sizes(seed: u64, jobs: usize) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut left = jobs;
    let mut out = Vec::new();
    while left > 0 {
        let mut n = if left <= 4 {
            left
        } else {
            rng.random_range(2..=4)
        };
        if left - n == 1 {
            n -= 1;
        }
        out.push(n);
        left -= n;
    }
    out
}

/// The schedule of `jobs` jobs from `seed`; with `actors`, a person's pause and resume,
/// replicas gates with a person's scale and Flux Operator targets among them (`--actors`).
#[cfg(test)]
#[must_use]
pub fn plan(seed: u64, jobs: usize) -> Plan {
    plan_with(seed, jobs, true)
}

/// [`plan`], the people and extra targets drawn only with `actors` (`cargo xtask soak
/// --actors`): off in `cargo xtask ci` until the defects they found are fixed (docs/chaos.md).
#[must_use]
pub fn plan_with(seed: u64, jobs: usize, actors: bool) -> Plan {
    let mut groups = Vec::new();
    let mut index = 0;
    for (g, n) in sizes(seed, jobs).into_iter().enumerate() {
        let mut rng = group_rng(seed, g);
        let jobs = (0..n)
            .map(|k| Job {
                index: index + k,
                at_ms: rng.random_range(0..2000),
                writes: rng.random_range(2..=5),
                fails: rng.random_bool(0.1),
                cancel_ms: rng.random_bool(0.2).then(|| rng.random_range(300..8000)),
                preempt_ms: None,
                extra: Extra::None,
            })
            .collect::<Vec<Job>>();
        let jobs = preempt(seed, g, jobs);
        let jobs = if actors { extras(seed, g, jobs) } else { jobs };
        index += n;
        let m = match rng.random_range(0..10u8) {
            0..=3 => 0,
            4..=8 => 1,
            _ => 2,
        };
        let mut faults: Vec<Timed> = (0..m)
            .map(|_| Timed {
                at_ms: rng.random_range(500..8000),
                fault: fault(&mut rng),
            })
            .collect();
        faults.extend(refuse(seed, g));
        groups.push(Group {
            index: g,
            jobs,
            faults,
            person: person(seed, g).filter(|_| actors),
        });
    }
    Plan { seed, groups }
}

/// Group `g`'s refused connections, if it has them: drawn from a generator of their own, so
/// the rest of every plan is what it was before they existed (issue 48, deliverable 8). Late
/// enough that every job of the group has started, so some wait while the proxy refuses.
fn refuse(seed: u64, g: usize) -> Option<Timed> {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(7_919).wrapping_add(g as u64) ^ 0x4e46);
    rng.random_bool(0.3).then(|| Timed {
        at_ms: rng.random_range(2_200..4_000),
        fault: Fault::Refuse {
            ms: rng.random_range(2_000..4_000),
        },
    })
}

/// Group `g`'s person, if it has one: from a generator of its own, as [`refuse`]. The pause
/// starts while the group's jobs arrive, so some queue behind it and some come after it.
fn person(seed: u64, g: usize) -> Option<Person> {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(4_201).wrapping_add(g as u64) ^ 0x5045);
    rng.random_bool(0.25).then(|| Person {
        at_ms: rng.random_range(0..2_500),
        hold_ms: rng.random_range(500..2_500),
        ready_fails: rng.random_bool(0.5),
    })
}

/// Group `g`'s jobs with their extra targets drawn, from a generator of their own (the rest
/// of every plan is what it was before they existed): a fifth of the jobs pause a Flux
/// Operator object too, a fifth a replicas gate; at most one gate job of a group, one the
/// runner neither cancels nor preempts, meets a person's `kubectl scale`.
fn extras(seed: u64, g: usize, mut jobs: Vec<Job>) -> Vec<Job> {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(5_303).wrapping_add(g as u64) ^ 0x4558);
    let mut scaled = false;
    for j in &mut jobs {
        j.extra = match rng.random_range(0..10u8) {
            0 | 1 => Extra::Operator,
            2 | 3 => {
                let calm = j.cancel_ms.is_none() && j.preempt_ms.is_none();
                let scale = calm && !scaled && rng.random_bool(0.4);
                scaled |= scale;
                Extra::Gate {
                    scale_ms: scale.then(|| rng.random_range(100..800)),
                }
            }
            _ => Extra::None,
        };
    }
    jobs
}

/// Group `g`'s jobs with their preemptions drawn, from a generator of their own (the rest of
/// every plan is what it was before they existed): at most one job of a group, one the runner
/// does not cancel, late enough that it may hold the Lease.
fn preempt(seed: u64, g: usize, mut jobs: Vec<Job>) -> Vec<Job> {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(6_151).wrapping_add(g as u64) ^ 0x5052);
    if rng.random_bool(0.35) {
        let k = rng.random_range(0..jobs.len());
        let at = rng.random_range(100..1_500);
        if jobs[k].cancel_ms.is_none() {
            jobs[k].preempt_ms = Some(at);
        }
    }
    jobs
}

fn fault(rng: &mut StdRng) -> Fault {
    match rng.random_range(0..3u8) {
        0 => Fault::Restart {
            down_ms: rng.random_range(0..2500),
        },
        1 => Fault::Hang {
            request: HANG[rng.random_range(0..HANG.len())],
            nth: rng.random_range(1..=3),
        },
        _ => Fault::FluxResume {
            member: rng.random_range(0..2),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soak_a_seed_reproduces_its_schedule() {
        for seed in 0..20 {
            assert_eq!(plan(seed, 200), plan(seed, 200));
        }
        assert_ne!(plan(1, 200), plan(2, 200));
    }

    #[test]
    fn soak_groups_hold_two_to_four_jobs_numbered_in_order() {
        for seed in 0..50 {
            for jobs in [2, 3, 5, 20, 21, 200] {
                let p = plan(seed, jobs);
                let sizes: Vec<usize> = p.groups.iter().map(|g| g.jobs.len()).collect();
                assert_eq!(sizes.iter().sum::<usize>(), jobs, "{sizes:?}");
                assert!(sizes.iter().all(|n| (2..=4).contains(n)), "{sizes:?}");
                let idx: Vec<usize> = p
                    .groups
                    .iter()
                    .flat_map(|g| &g.jobs)
                    .map(|j| j.index)
                    .collect();
                assert_eq!(idx, (0..jobs).collect::<Vec<_>>());
            }
        }
        assert_eq!(sizes(9, 1), [1]);
    }

    #[test]
    fn soak_two_hundred_jobs_draw_cancels_failures_and_every_fault_kind() {
        let p = plan(1, 200);
        let without = plan_with(1, 200, false);
        assert!(without.groups.iter().all(|g| g.person.is_none()));
        assert!(
            without
                .groups
                .iter()
                .flat_map(|g| &g.jobs)
                .all(|j| j.extra == Extra::None)
        );
        let jobs: Vec<&Job> = p.groups.iter().flat_map(|g| &g.jobs).collect();
        let cancels = jobs.iter().filter(|j| j.cancel_ms.is_some()).count();
        assert!((20..80).contains(&cancels), "{cancels}");
        assert!(jobs.iter().any(|j| j.fails));
        let preempted = jobs.iter().filter(|j| j.preempt_ms.is_some()).count();
        assert!((5..30).contains(&preempted), "{preempted}");
        assert!(
            jobs.iter()
                .all(|j| j.preempt_ms.is_none() || j.cancel_ms.is_none())
        );
        let mut kinds: Vec<&str> = p
            .groups
            .iter()
            .flat_map(|g| &g.faults)
            .map(|t| t.fault.kind())
            .collect();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds, ["flux_resume", "hang", "refuse", "restart"]);
        let persons: Vec<&Person> = p.groups.iter().filter_map(|g| g.person.as_ref()).collect();
        assert!((5..40).contains(&persons.len()), "{}", persons.len());
        assert!(persons.iter().any(|p| p.ready_fails));
        assert!(persons.iter().any(|p| !p.ready_fails));
        let count = |f: fn(&Extra) -> bool| jobs.iter().filter(|j| f(&j.extra)).count();
        assert!((20..70).contains(&count(|e| *e == Extra::Operator)));
        assert!((20..70).contains(&count(|e| matches!(e, Extra::Gate { .. }))));
        let scaled = count(|e| matches!(e, Extra::Gate { scale_ms: Some(_) }));
        assert!((5..30).contains(&scaled), "{scaled}");
        for g in &p.groups {
            let n = g
                .jobs
                .iter()
                .filter(|j| matches!(j.extra, Extra::Gate { scale_ms: Some(_) }))
                .count();
            assert!(n <= 1);
        }
    }
}
