//! A preempted runner (issue 48, deliverable 8): the machine under the job is gone, so every
//! process of the job dies at the same instant (node, flux-handoff, its keeper, the deploy
//! script) and no post step runs. The job's processes are the ones whose environment names
//! its scratch directory (`SOAK_DIR`, which every step and what it starts inherit); they are
//! all stopped first (none can fork, renew or write any more), found again until no new one
//! appears, then killed with SIGKILL together.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Child;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Every process whose environment holds `SOAK_DIR=<dir>`.
fn of_job(dir: &Path) -> BTreeSet<u32> {
    let marker = format!("SOAK_DIR={}", dir.display());
    let own = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != own)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == marker.as_bytes()))
        })
        .collect()
}

/// Stops every process of the job in `dir`, then SIGKILLs them all; how many there were (a
/// process that ended meanwhile is no error).
pub fn kill_job(dir: &Path) -> usize {
    let mut stopped = BTreeSet::new();
    loop {
        let found = of_job(dir);
        let new: Vec<u32> = found.difference(&stopped).copied().collect();
        if new.is_empty() {
            break;
        }
        for pid in new {
            let _ = testkit::signal::to_process(pid, "STOP");
            stopped.insert(pid);
        }
    }
    for pid in &stopped {
        let _ = testkit::signal::to_process(*pid, "KILL");
    }
    stopped.len()
}

/// Waits for `child`'s exit, or until it has held the Lease for `d` (its `lease acquired`
/// line, polled every 20 ms), within `bound`: its status if it exited first.
///
/// # Errors
/// The child's status could not be read.
pub async fn held_for(
    child: &mut Child,
    lines: &Mutex<Vec<(Instant, String)>>,
    d: Duration,
    bound: Duration,
) -> anyhow::Result<Option<std::process::ExitStatus>> {
    let bound = Instant::now() + bound;
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(Some(st));
        }
        let acquired = lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|(_, l)| l.contains("lease acquired"))
            .map(|(t, _)| *t);
        let now = Instant::now();
        if acquired.is_some_and(|t| now >= t + d) || now >= bound {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soak_preempt_kills_every_process_of_the_job_and_no_other() {
        let dir = std::env::temp_dir().join(format!("soak-preempt-{}", std::process::id()));
        let other = dir.with_extension("other");
        let spawn = |d: &Path| {
            std::process::Command::new("sh")
                .args(["-c", "sleep 60 & sleep 60 & wait"])
                .env("SOAK_DIR", d)
                .spawn()
                .unwrap()
        };
        let mut mine = spawn(&dir);
        let mut theirs = spawn(&other);
        // Until the shell has started both children (they inherit its environment).
        while of_job(&dir).len() < 3 {
            std::thread::yield_now();
        }
        assert_eq!(kill_job(&dir), 3);
        assert!(mine.wait().unwrap().code().is_none(), "killed by a signal");
        while !of_job(&dir).is_empty() {
            std::thread::yield_now();
        }
        assert_eq!(of_job(&other).len(), 3, "another job's processes live on");
        assert!(kill_job(&other) == 3);
        let _ = theirs.wait();
    }
}
