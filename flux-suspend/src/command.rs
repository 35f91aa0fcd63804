//! Running a program while the chain is paused, as a deploy step does (`helm upgrade`,
//! `kubectl apply`): in its own process group, with the pause in its environment, and stopped
//! when the session is cancelled, loses its Lease or finds its pause broken — and nothing it
//! started outlives it: when it exits or is stopped, every process it left behind (in the
//! background, in another group or session) is ended and reaped before this returns, so
//! before the session releases anything.
//!
//! # The process becomes a child subreaper (Linux)
//! The first call makes the whole process a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`),
//! for the rest of its life: an orphan of any of its descendants is re-parented to it instead
//! of init. Each call ends and reaps only its own command's processes (see the `contain`
//! module: found by parent links and a per-run mark in the environment), so several commands
//! may run at once; but an orphan of another subprocess of an embedder (not started here) now
//! becomes the embedder's zombie until the embedder reaps it. Off Linux there is no subreaper:
//! only the command's process group is signalled, and a process that left it may outlive it.

use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::Command;

use crate::cancel::Cancel;
use crate::session::Paused;

mod contain;

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
    /// The session was cancelled, lost its Lease or found its pause broken: the program's
    /// group and everything it started got SIGTERM, then SIGKILL after the grace (at once when
    /// hurried), and all of it is gone.
    Stopped,
}

/// Runs `cmd` while `paused` holds: in its own process group, with [`HOLDER_ENV`],
/// [`PROOF_ENV`], [`TARGETS_ENV`] and [`RUN_ENV`] set. When `paused.cancel` stops, the group
/// and every process the program started get SIGTERM, then SIGKILL once `grace` passed or the
/// session is hurried. When the program exits by itself, whatever it left running gets the
/// same. Returns only once all of it is gone and reaped (see the module docs: the process
/// becomes a child subreaper).
///
/// # Errors
///
/// The program could not be started, or waiting for it failed (then what it started was
/// still ended).
pub async fn run_while_paused(
    paused: &Paused,
    mut cmd: Command,
    grace: Duration,
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
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    tree.set_leader(child.id());
    let cancel = &paused.cancel;
    // SIGKILL for what is left once this passed: one grace from the first SIGTERM.
    let mut kill_at = None;
    let ended = loop {
        tokio::select! {
            s = child.wait() => break s.map(Ended::Exited),
            () = cancel.stopped() => {
                let at = tokio::time::Instant::now() + grace;
                kill_at = Some(at);
                stop_group(&mut child, &mut tree, at, cancel).await;
                break Ok(Ended::Stopped);
            }
            () = tokio::time::sleep(contain::TRACK_EVERY) => {
                tree.walk();
            }
        }
    };
    let kill_at = kill_at.unwrap_or_else(|| tokio::time::Instant::now() + grace);
    let left = tree
        .end(kill_at, cancel.is_hurried(), cancel.hurried())
        .await;
    if left > 0 {
        tracing::warn!(
            processes = left,
            "the command left processes running; they were ended before the release"
        );
    }
    ended
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

/// SIGTERM to the program's group and to everything it started, then SIGKILL at `kill_at`
/// or the session is hurried (at once when it already is); waits until the program
/// is gone (what it left is ended by [`contain::Tree::end`] next).
async fn stop_group(
    child: &mut tokio::process::Child,
    tree: &mut contain::Tree,
    kill_at: tokio::time::Instant,
    cancel: &Cancel,
) {
    use rustix::process::{Pid, Signal, kill_process_group};
    let Some(group) = child
        .id()
        .and_then(|id| Pid::from_raw(i32::try_from(id).ok()?))
    else {
        return;
    };
    if !cancel.is_hurried() {
        let _ = kill_process_group(group, Signal::TERM);
        contain::signal(&tree.walk(), Signal::TERM);
        tokio::select! {
            _ = child.wait() => return,
            () = tokio::time::sleep_until(kill_at) => {}
            () = cancel.hurried() => {}
        }
    }
    let _ = kill_process_group(group, Signal::KILL);
    contain::signal(&tree.walk(), Signal::KILL);
    let _ = child.wait().await;
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
