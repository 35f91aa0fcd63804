//! The holder's second line behind the keeper (`super::keeper`): the keeper ends the command's
//! tree; should the keeper itself be killed, the command dies with it (its parent-death
//! signal) and the command's orphans come here, because this process is a child subreaper
//! too (Linux `prctl(PR_SET_CHILD_SUBREAPER)`). This module finds them, ends and reaps them
//! once the keeper has exited.
//!
//! # Which processes are the command's
//! The run's *tree*: the leader and its descendants, found by walking `/proc/*/stat` parent
//! links from this process. A process re-parented to us has lost its link to the leader, so a
//! direct child of ours is part of the tree only when it was seen in the tree before (by pid
//! and start time) or carries this run's [`RUN_ENV`] value in its environment (inherited from the leader; a process that was
//! forked and orphaned between two checks is found this way). So an embedder's other children,
//! and other commands' trees, are never touched.
//!
//! # Reaping
//! Orphans re-parented to us would stay zombies: this module reaps each one it identified as
//! the tree's, by pid (`waitid(P_PID, pid, WEXITED|WNOHANG)`). It never waits for any other
//! pid, so it does not take the exit status of a child that tokio (the leader) or the embedder
//! waits for itself.
//!
//! # Elsewhere and limits
//! Off Linux there is no subreaper and no `/proc`: only the leader's process group is signalled.
//! A process of the tree that both cleared its environment and was orphaned between two checks,
//! or that runs as another user, is not found; one that survives SIGKILL for `KILL_WAIT`
//! (another user's, stuck in the kernel) is given up on with an error log.

use std::collections::HashSet;
use std::time::Duration;

/// The environment variable that marks every process of one run's tree.
pub const RUN_ENV: &str = "FLUX_HANDOFF_RUN";

/// How long processes that got SIGKILL may take to be gone before the sweep gives up on them
/// (one that runs as another user cannot be signalled; one in uninterruptible sleep dies
/// late). With the keeper's own wait this stays inside the session's stop grace
/// ([`crate::session::STOP_GRACE`]).
const KILL_WAIT: Duration = Duration::from_secs(2);

/// How often the tree is walked while it is being ended.
const SWEEP_EVERY: Duration = Duration::from_millis(10);

/// One run's tree. See the module docs.
#[derive(Debug)]
pub(super) struct Tree {
    /// The value of [`RUN_ENV`] for this run.
    token: String,
    /// The leader's pid while tokio has not reaped it.
    leader: Option<i32>,
    /// Every (pid, start time) seen in the tree.
    known: HashSet<(i32, u64)>,
}

/// A process as `/proc/PID/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stat {
    pub pid: i32,
    pub ppid: i32,
    /// `R`, `S`, `D`, `T`, `Z` (a zombie: it ended, its status is not collected yet), ...
    pub state: char,
    /// Clock ticks after boot: with the pid, it names one process (pids are reused).
    pub start: u64,
}

/// Parses one `/proc/PID/stat` line; the command name (field 2) may hold spaces and
/// parentheses, so the fields after it are found from its last `)`.
pub(super) fn parse_stat(line: &str) -> Option<Stat> {
    let (head, rest) = line.rsplit_once(')')?;
    let own = head.split_once(' ')?.0.trim().parse().ok()?;
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let parent = f.next()?.parse().ok()?;
    // Field 22 (starttime) is the 20th after the name.
    let start = f.nth(17)?.parse().ok()?;
    Some(Stat {
        pid: own,
        ppid: parent,
        state,
        start,
    })
}

/// The members of the tree among `procs`: the leader, the direct children of `me` that are
/// known or `marked`, and everything below them. Pure; the I/O is in [`Tree::walk`].
pub(super) fn members(
    procs: &[Stat],
    me: i32,
    leader: Option<i32>,
    known: &HashSet<(i32, u64)>,
    marked: &dyn Fn(i32) -> bool,
) -> Vec<Stat> {
    let mut out: Vec<Stat> = procs
        .iter()
        .filter(|p| p.ppid == me)
        .filter(|p| Some(p.pid) == leader || known.contains(&(p.pid, p.start)) || marked(p.pid))
        .copied()
        .collect();
    let mut i = 0;
    while i < out.len() {
        let parent = out[i].pid;
        out.extend(
            procs
                .iter()
                .filter(|p| p.ppid == parent && p.pid != me)
                .copied(),
        );
        i += 1;
    }
    out
}

impl Tree {
    /// A tree for one run; makes the process a subreaper (once, for the rest of its life).
    pub(super) fn new() -> Self {
        static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        subreaper();
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self {
            token: format!("{}.{n}", std::process::id()),
            leader: None,
            known: HashSet::new(),
        }
    }

    /// The value of [`RUN_ENV`] to give the leader.
    pub(super) fn token(&self) -> &str {
        &self.token
    }

    pub(super) fn set_leader(&mut self, pid: Option<u32>) {
        self.leader = pid.and_then(|p| i32::try_from(p).ok());
    }

    /// Walks the tree, records its members, reaps its orphans that ended; returns the members
    /// that still run (not zombies).
    pub(super) fn walk(&mut self) -> Vec<Stat> {
        let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        let procs = procs();
        let token = format!("{RUN_ENV}={}", self.token);
        let found = members(&procs, me, self.leader, &self.known, &|pid| {
            marked(pid, &token)
        });
        // Kept across walks (a pid with another start time is another process), so an orphan
        // missed by one walk's listing is still known by the next.
        self.known.extend(found.iter().map(|p| (p.pid, p.start)));
        for p in &found {
            if p.state == 'Z' && p.ppid == me && Some(p.pid) != self.leader {
                reap(p.pid);
            }
        }
        found.into_iter().filter(|p| p.state != 'Z').collect()
    }

    /// After the leader is gone (exited, or stopped and reaped): every process left in the tree
    /// gets SIGTERM (and SIGCONT, so a stopped one can act on it), then SIGKILL at `kill_at` or
    /// once `hurried` resolves (at once when `hurry_now`); returns, with every one of them
    /// ended and its orphans reaped, the number that had to be ended.
    pub(super) async fn end(
        &mut self,
        kill_at: tokio::time::Instant,
        hurry_now: bool,
        hurried: impl Future<Output = ()>,
    ) -> usize {
        self.leader = None;
        let left = self.walk();
        let count = left.len();
        if left.is_empty() {
            return 0;
        }
        let mut hurried = std::pin::pin!(hurried);
        if !hurry_now {
            signal(&left, rustix::process::Signal::TERM);
            signal(&left, rustix::process::Signal::CONT);
            loop {
                tokio::select! {
                    () = tokio::time::sleep(SWEEP_EVERY) => {}
                    () = &mut hurried => break,
                }
                if self.walk().is_empty() {
                    return count;
                }
                if tokio::time::Instant::now() >= kill_at {
                    break;
                }
            }
        }
        let give_up = tokio::time::Instant::now() + KILL_WAIT;
        loop {
            let left = self.walk();
            if left.is_empty() {
                return count;
            }
            if tokio::time::Instant::now() >= give_up {
                let pids: Vec<i32> = left.iter().map(|p| p.pid).collect();
                tracing::error!(
                    ?pids,
                    "processes of the command survived SIGKILL (another user's, or stuck in the kernel); going on without them"
                );
                return count;
            }
            signal(&left, rustix::process::Signal::KILL);
            tokio::time::sleep(SWEEP_EVERY).await;
        }
    }
}

fn signal(procs: &[Stat], sig: rustix::process::Signal) {
    for p in procs {
        if let Some(pid) = rustix::process::Pid::from_raw(p.pid) {
            let _ = rustix::process::kill_process(pid, sig);
        }
    }
}

#[cfg(target_os = "linux")]
fn subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let me = rustix::process::getpid();
        if let Err(e) = rustix::process::set_child_subreaper(Some(me)) {
            tracing::warn!(error = %e, "cannot become a child subreaper: processes that leave the command's tree may outlive it");
        }
    });
}

#[cfg(not(target_os = "linux"))]
fn subreaper() {}

#[cfg(target_os = "linux")]
fn procs() -> Vec<Stat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|line| parse_stat(&line))
        .collect()
}

#[cfg(not(target_os = "linux"))]
fn procs() -> Vec<Stat> {
    Vec::new()
}

/// Whether `pid`'s environment holds `entry` (`NAME=value`); a zombie's is empty.
fn marked(pid: i32, entry: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == entry.as_bytes()))
}

/// Collects the exit status of `pid` (one of the tree's orphans), without waiting.
#[cfg(target_os = "linux")]
fn reap(pid: i32) {
    use rustix::process::{Pid, WaitId, WaitIdOptions, waitid};
    if let Some(pid) = Pid::from_raw(pid) {
        let _ = waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn reap(_pid: i32) {}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::{Stat, members, parse_stat};

    fn p(id: i32, parent: i32, state: char, start: u64) -> Stat {
        Stat {
            pid: id,
            ppid: parent,
            state,
            start,
        }
    }

    #[test]
    fn contain_a_stat_line_parses_whatever_the_command_name_holds() {
        let line = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(parse_stat(line), Some(p(4242, 1, 'S', 987_654)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn contain_the_tree_is_the_leader_known_or_marked_orphans_and_below() {
        let me = 100;
        let procs = [
            p(101, me, 'S', 1),  // the leader
            p(102, 101, 'S', 2), // its child
            p(103, me, 'S', 3),  // an orphan seen in the tree before
            p(104, 103, 'S', 4), // below it
            p(105, me, 'S', 5),  // an orphan carrying the run's mark
            p(106, me, 'S', 6),  // the embedder's own child: never ours
            p(107, 106, 'S', 7), // below it
            p(108, me, 'S', 99), // pid 108 was ours with start 8: reused, not ours
            p(109, 1, 'S', 9),   // someone else's
        ];
        let known: HashSet<_> = [(103, 3), (108, 8)].into_iter().collect();
        let marked = |pid: i32| pid == 105;
        let mut got: Vec<i32> = members(&procs, me, Some(101), &known, &marked)
            .iter()
            .map(|s| s.pid)
            .collect();
        got.sort_unstable();
        assert_eq!(got, vec![101, 102, 103, 104, 105]);
        // With the leader gone, its orphans are found by what was known and marked alone.
        let after = [p(102, me, 'S', 2), p(106, me, 'S', 6)];
        let known: HashSet<_> = [(102, 2)].into_iter().collect();
        let got: Vec<i32> = members(&after, me, None, &known, &|_| false)
            .iter()
            .map(|s| s.pid)
            .collect();
        assert_eq!(got, vec![102]);
    }
}
