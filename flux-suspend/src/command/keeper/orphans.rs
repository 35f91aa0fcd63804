//! The work of a holder whose keeper is gone too (`pkill -9 flux-handoff` kills the holder and
//! its keeper at once, the keeper being a fork of the same binary): the command dies with its
//! keeper (its parent-death signal), but what it left in the background is re-parented to no
//! process of ours and runs on. It is still in the command's cgroup, which is named after the
//! holder (`cgroup::dir_name`): `resume --holder-exited` on this machine finds it there and
//! ends it with `cgroup.kill` (or SIGKILL to each of its processes on a kernel without it),
//! or refuses while it cannot empty it.
//!
//! Where the holder could make no cgroup (no cgroup v2, no write access to its own), nothing
//! of this sees the orphans: only a living keeper ends them (`--holder-exited`'s help says so).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cgroup;

/// How deep below the cgroup v2 mount the holder's cgroups are looked for, and how many
/// directories at most are read (a systemd machine has a few hundred).
const MAX_DEPTH: usize = 12;
const MAX_DIRS: usize = 20_000;

/// How often a cgroup being ended is looked at again.
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// What is seen of one of the holder's cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seen {
    /// It still holds processes (`populated 1` in `cgroup.events`; unreadable counts as so).
    pub populated: bool,
    /// Where `cgroup.kill` stands.
    pub kill: Kill,
    /// The bound of the wait has passed.
    pub past_bound: bool,
}

/// `cgroup.kill` (Linux 5.14+): not offered by the kernel, not written yet, or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kill {
    Unavailable,
    NotYet,
    Written,
}

/// What to do next with one of the holder's cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Empty: remove it; done.
    Remove,
    /// Write `cgroup.kill`: SIGKILL to every process in it, none escapes.
    Kill,
    /// No `cgroup.kill`: SIGKILL to each pid of `cgroup.procs`, again on each look (a process
    /// may fork between the read and the signal).
    SignalEach,
    /// Killed: look again shortly.
    Wait,
    /// Still populated once the bound passed: its work may run on; refuse to release.
    Refuse,
}

/// The decision, pure.
pub(super) const fn step(s: Seen) -> Step {
    match s {
        Seen {
            populated: false, ..
        } => Step::Remove,
        Seen {
            past_bound: true, ..
        } => Step::Refuse,
        Seen {
            kill: Kill::NotYet, ..
        } => Step::Kill,
        Seen {
            kill: Kill::Written,
            ..
        } => Step::Wait,
        Seen {
            kill: Kill::Unavailable,
            ..
        } => Step::SignalEach,
    }
}

/// Ends what is left in every cgroup of `holder`'s commands on this machine, waiting up to
/// `bound`. Returns the cgroups that still held processes and were emptied.
///
/// # Errors
/// The cgroup that still held processes after `bound`.
pub(super) fn end_holders(holder: &str, bound: Duration) -> Result<Vec<PathBuf>, PathBuf> {
    let until = Instant::now() + bound;
    let mut ended = Vec::new();
    for dir in holders_cgroups(holder) {
        match end(&dir, until) {
            Ok(true) => ended.push(dir),
            Ok(false) => {}
            Err(()) => return Err(dir),
        }
    }
    Ok(ended)
}

/// Every directory below the cgroup v2 mount named as one of `holder`'s command cgroups.
fn holders_cgroups(holder: &str) -> Vec<PathBuf> {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let Some(root) = cgroup::v2_mount(&mounts) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut todo = vec![(PathBuf::from(root), 0usize)];
    let mut read = 0usize;
    while let Some((dir, depth)) = todo.pop() {
        read += 1;
        if read > MAX_DIRS {
            tracing::warn!(
                "the cgroup tree is larger than {MAX_DIRS} directories: the holder's command cgroups were looked for in part of it"
            );
            break;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name();
            if cgroup::is_holders(&name.to_string_lossy(), holder) {
                found.push(e.path());
            } else if depth < MAX_DEPTH {
                todo.push((e.path(), depth + 1));
            }
        }
    }
    found
}

/// Ends one cgroup's processes and removes it: `Ok(true)` when it held some, `Ok(false)`
/// when it was empty, `Err` when it still held some at `until`.
fn end(dir: &Path, until: Instant) -> Result<bool, ()> {
    let mut kill = if dir.join("cgroup.kill").exists() {
        Kill::NotYet
    } else {
        Kill::Unavailable
    };
    let mut held = false;
    loop {
        let populated = match std::fs::read_to_string(dir.join("cgroup.events")) {
            Ok(e) => e.contains("populated 1"),
            // Removed meanwhile (its keeper's last act) is empty.
            Err(_) => dir.exists(),
        };
        held |= populated;
        match step(Seen {
            populated,
            kill,
            past_bound: Instant::now() >= until,
        }) {
            Step::Remove => {
                let _ = std::fs::remove_dir(dir);
                return Ok(held);
            }
            Step::Refuse => return Err(()),
            Step::Kill => {
                if std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
                    kill = Kill::Written;
                }
            }
            Step::SignalEach => signal_each(dir),
            Step::Wait => {}
        }
        std::thread::sleep(LOOK_EVERY);
    }
}

fn signal_each(dir: &Path) {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.lines().filter_map(|l| l.trim().parse().ok()) {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Kill::{NotYet, Unavailable, Written};
    use super::{Seen, Step, step};

    /// The I/O around `step`, on this machine's cgroup v2 where one can be made (root): a
    /// process left in a holder's command cgroup is killed, the cgroup removed; another
    /// holder's is not touched.
    #[test]
    fn keeper_orphan_a_leftover_cgroup_is_emptied_and_removed_another_holders_kept() {
        use std::os::unix::process::ExitStatusExt;
        let Some(parent) = std::fs::read_to_string("/proc/self/mountinfo")
            .ok()
            .zip(std::fs::read_to_string("/proc/self/cgroup").ok())
            .and_then(|(m, c)| super::cgroup::parent_dir(&m, &c))
        else {
            eprintln!("skipped: no cgroup v2 here");
            return;
        };
        let holder = format!("orphan-unit-{}", std::process::id());
        let (ours, other) = (
            parent.join(super::cgroup::dir_name(&holder, 1, 0)),
            parent.join(super::cgroup::dir_name(&format!("{holder}-x"), 1, 0)),
        );
        if std::fs::create_dir(&ours).is_err() {
            eprintln!("skipped: no cgroup can be made below {}", parent.display());
            return;
        }
        std::fs::create_dir(&other).unwrap();
        let mut sleeper = std::process::Command::new("sleep")
            .arg("1000")
            .spawn()
            .unwrap();
        std::fs::write(ours.join("cgroup.procs"), sleeper.id().to_string()).unwrap();
        let ended = super::end_holders(&holder, std::time::Duration::from_secs(5));
        assert_eq!(ended, Ok(vec![ours.clone()]));
        assert!(!ours.exists(), "the emptied cgroup is removed");
        assert!(other.exists(), "another holder's cgroup is not touched");
        assert_eq!(sleeper.wait().unwrap().signal(), Some(libc::SIGKILL));
        std::fs::remove_dir(&other).unwrap();
    }

    #[test]
    fn keeper_orphan_a_cgroup_is_killed_waited_for_then_removed_or_refused() {
        let s = |populated, kill, past_bound| Seen {
            populated,
            kill,
            past_bound,
        };
        let table = [
            // (populated, cgroup.kill, past bound) -> step
            (s(false, NotYet, false), Step::Remove),
            (s(false, Written, true), Step::Remove),
            (s(false, Unavailable, true), Step::Remove),
            (s(true, NotYet, false), Step::Kill),
            (s(true, Written, false), Step::Wait),
            (s(true, Unavailable, false), Step::SignalEach),
            (s(true, NotYet, true), Step::Refuse),
            (s(true, Written, true), Step::Refuse),
            (s(true, Unavailable, true), Step::Refuse),
        ];
        for (seen, want) in table {
            assert_eq!(step(seen), want, "{seen:?}");
        }
    }
}
