//! Running a program while the chain is paused, as a deploy step does (`helm upgrade`,
//! `kubectl apply`): under a *keeper*, with the pause in its environment, and stopped when the
//! session is cancelled, loses its Lease or finds its pause broken — and nothing it started
//! outlives it, nor its holder: when it exits or is stopped, every process it left behind (in
//! the background, in another group or session) is ended before this returns, so before the
//! session releases anything; and when the holder itself is killed, stopped or suspended past
//! its deadline, the keeper ends them without it.
//!
//! # The keeper (Linux)
//! The process spawned is a small keeper forked from this one (the `keeper` module); it forks
//! the command, is its child subreaper, puts it in a cgroup v2 of its own where it can, and
//! ends the whole tree — SIGTERM, then SIGKILL after the grace — when the holder stops or
//! hurries it, when this process's end of a pipe closes (any death of the holder, SIGKILL
//! included), when the holder's deadline on `CLOCK_BOOTTIME` passes without a renewal moving
//! it, or when `resume --holder-exited` on this machine asks ([`end_holders_work`]). The
//! keeper exits with the command's status once all of it is gone.
//!
//! What each platform guarantees: with a writable cgroup v2 (root; a delegated systemd scope)
//! no process of the tree escapes (`cgroup.kill`). Without one, the keeper walks the process
//! table for its descendants: complete while it lives (every orphan of the tree is
//! re-parented to it), but a pid may be reused between the walk and the signal. A keeper that
//! is itself killed (SIGKILL) takes the command with it (`PR_SET_PDEATHSIG`); the command's orphans
//! then come to this process, which is a child subreaper too and ends what it finds of them
//! (by their cgroup, or by a mark in their environment). A keeper killed together with the holder
//! leaves the command's background processes to nobody: they are still in the command's cgroup,
//! named after the holder, where [`end_holders_work`] (`resume --holder-exited`) ends them;
//! without a cgroup they are not found. Off Linux nothing of this exists.

use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::Command;

use crate::session::Paused;

mod contain;
mod jobs;
mod keeper;

pub use keeper::{KILL_WAIT, WorkStillRunning, end_holders_work};

pub use contain::RUN_ENV;

/// The holder of the pause, in the program's environment.
pub const HOLDER_ENV: &str = "FLUX_HANDOFF_HOLDER";
/// The proof (`passes=N <counters>`), in the program's environment.
pub const PROOF_ENV: &str = "FLUX_HANDOFF_PROOF";
/// The paused targets, comma-separated, in the program's environment.
pub const TARGETS_ENV: &str = "FLUX_HANDOFF_TARGETS";

/// How the program ended.
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "how the program ended decides the exit code"]
pub enum Ended {
    /// It exited by itself (or was ended by a signal it did not get from us). Whatever it
    /// left running was ended (SIGTERM, SIGKILL after the grace) and is gone.
    Exited(ExitStatus),
    /// The session was cancelled, lost its Lease (the keeper's stop at the holder's deadline
    /// counts, [`flux_fence::LeaseHandle::fence_self`]) or found its pause broken: the program's
    /// group and everything it started got SIGTERM, then SIGKILL after the grace (at once when
    /// hurried), and all of it is gone.
    Stopped,
}

/// How [`run_with`] runs the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunOptions {
    /// Between SIGTERM and SIGKILL when the program is stopped.
    pub grace: Duration,
    /// Job control as a shell does it: SIGTSTP to this process (Ctrl-Z) stops the program's
    /// process group too, then this process; SIGCONT continues both. Installing it replaces
    /// the process's default SIGTSTP action for the rest of its life, so it is off by default
    /// (a CLI turns it on). The holder's deadline still holds while stopped: stopped past it,
    /// the keeper ends the program.
    pub job_control: bool,
}

impl RunOptions {
    /// `grace` between SIGTERM and SIGKILL, no job control.
    #[must_use]
    pub fn new(grace: Duration) -> Self {
        Self {
            grace,
            job_control: false,
        }
    }

    /// With `on`, job control (see the field).
    #[must_use]
    pub fn with_job_control(mut self, on: bool) -> Self {
        self.job_control = on;
        self
    }
}

/// Runs `cmd` while `paused` holds: under a keeper (see the module docs), in its own process
/// group, with [`HOLDER_ENV`], [`PROOF_ENV`], [`TARGETS_ENV`] and [`RUN_ENV`] set and
/// [`flux_fence::liveness::TOKEN_ENV`] removed (a token meant for flux-handoff alone). When
/// `paused.cancel` stops, the program and everything it started get SIGTERM, then SIGKILL once
/// `grace` passed or the session is hurried. When the program exits by itself, whatever it
/// left running gets the same. Returns only once all of it is gone.
///
/// # Errors
///
/// The program could not be started, or waiting for it failed (then what it started was
/// still ended).
pub async fn run_while_paused(
    paused: &Paused,
    cmd: Command,
    grace: Duration,
) -> std::io::Result<Ended> {
    run_with(paused, cmd, RunOptions::new(grace)).await
}

/// [`run_while_paused`] with [`RunOptions`].
///
/// # Errors
///
/// As [`run_while_paused`].
pub async fn run_with(
    paused: &Paused,
    mut cmd: Command,
    opts: RunOptions,
) -> std::io::Result<Ended> {
    let proof = format!(
        "passes={} {}",
        paused.proof.passes(),
        paused.proof.counters()
    );
    let mut tree = contain::Tree::new();
    cmd.env(HOLDER_ENV, paused.holder.to_string())
        .env(PROOF_ENV, proof)
        .env(TARGETS_ENV, paused.targets.join(","))
        .env(RUN_ENV, tree.token())
        // A token given to flux-handoff alone (the Action's) is not the command's to have.
        .env_remove(flux_fence::liveness::TOKEN_ENV)
        .process_group(0);
    let deadline = |d: flux_fence::lease::Deadline| {
        (keeper::boot_ns(d.stop_work), keeper::boot_ns(d.kill_work))
    };
    // Job control is in place before the command exists: a SIGTSTP that came between the spawn
    // and the handlers would stop this process by default and leave the command running.
    let mut jobs = if opts.job_control {
        Some(jobs::JobControl::install()?)
    } else {
        None
    };
    let mut renewals = paused.lease.renewals();
    let keeper = keeper::Keeper::prepare(
        &mut cmd,
        &paused.holder,
        opts.grace,
        Some(deadline(paused.lease.deadline())),
    )?;
    let spawned = cmd.spawn();
    // The keeper's ends of its pipes live in `cmd`'s hook: closed here, in this process.
    drop(cmd);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            keeper.cleanup();
            return Err(e);
        }
    };
    tree.set_leader(child.id());
    let group = child
        .id()
        .and_then(|id| rustix::process::Pid::from_raw(i32::try_from(id).ok()?));
    let cancel = &paused.cancel;
    let (mut stopped, mut hurried) = (false, false);
    let status = loop {
        tokio::select! {
            s = child.wait() => break s,
            () = cancel.stopped(), if !stopped => {
                stopped = true;
                let kill_at = tokio::time::Instant::now() + opts.grace;
                keeper.tell(keeper::Event::Stop { kill_at: keeper::boot_ns(kill_at) });
            }
            () = cancel.hurried(), if !hurried => {
                hurried = true;
                keeper.tell(keeper::Event::Hurry);
            }
            changed = renewals.changed() => {
                if changed.is_ok() {
                    let (term_at, kill_at) = deadline(paused.lease.deadline());
                    keeper.tell(keeper::Event::Deadline { term_at, kill_at });
                }
            }
            () = jobs::next(jobs.as_mut(), group) => {}
        }
    };
    let at_deadline = keeper.ended_at_deadline();
    // A keeper that was itself killed leaves the command's orphans to this process.
    keeper.cleanup();
    let kill_at = tokio::time::Instant::now() + opts.grace;
    let left = tree
        .end(kill_at, cancel.is_hurried(), cancel.hurried())
        .await;
    if left > 0 {
        tracing::warn!(
            processes = left,
            "the command's keeper left processes running; they were ended before the release"
        );
    }
    if stopped {
        let _ = status?;
        return Ok(Ended::Stopped);
    }
    if at_deadline {
        // The keeper stopped the work at the holder's deadline, which this process's own
        // timer may not have counted yet (or a renewal answered just after it moved since):
        // the holder fenced itself all the same, and the session reports the lost Lease.
        let _ = status?;
        paused.lease.fence_self();
        return Ok(Ended::Stopped);
    }
    status.map(Ended::Exited)
}

/// The exit code of a finished program: its own, or 128+N when signal N ended it (as a shell
/// reports it); `None` when neither is known.
#[must_use]
pub fn exit_code(status: ExitStatus) -> Option<u8> {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c).ok(),
        (None, Some(sig)) => u8::try_from(128 + sig).ok(),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::exit_code;

    #[test]
    fn a_program_ended_by_a_signal_exits_128_plus_the_signal() {
        // Raw wait statuses: exit code 3 is 3 << 8; killed by SIGTERM (15) is 15.
        assert_eq!(
            exit_code(std::process::ExitStatus::from_raw(3 << 8)),
            Some(3)
        );
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(15)), Some(143));
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(9)), Some(137));
    }
}
