//! Running a program while the chain is paused, as a deploy step does (`helm upgrade`,
//! `kubectl apply`): in its own process group, with the pause in its environment, and stopped
//! when the session is cancelled or loses its Lease.

use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::Command;

use crate::cancel::Cancel;
use crate::session::Paused;

/// The holder of the pause, in the program's environment.
pub const HOLDER_ENV: &str = "FLUX_HANDOFF_HOLDER";
/// The proof (`passes=N <counters>`), in the program's environment.
pub const PROOF_ENV: &str = "FLUX_HANDOFF_PROOF";
/// The paused targets, comma-separated, in the program's environment.
pub const TARGETS_ENV: &str = "FLUX_HANDOFF_TARGETS";

/// How the program ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum Ended {
    /// It exited by itself (or was ended by a signal it did not get from us).
    Exited(ExitStatus),
    /// The session was cancelled or lost its Lease: the program's group got SIGTERM, then
    /// SIGKILL after the grace (at once when hurried), and it is gone.
    Stopped,
}

/// Runs `cmd` while `paused` holds: in its own process group (a stop reaches everything it
/// started), with [`HOLDER_ENV`], [`PROOF_ENV`] and [`TARGETS_ENV`] set. When `paused.cancel`
/// stops, the group gets SIGTERM, then SIGKILL once `grace` passed or the session is hurried.
///
/// # Errors
///
/// The program could not be started, or waiting for it failed.
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
    cmd.env(HOLDER_ENV, paused.holder.to_string())
        .env(PROOF_ENV, proof)
        .env(TARGETS_ENV, paused.targets.join(","))
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    tokio::select! {
        s = child.wait() => s.map(Ended::Exited),
        () = paused.cancel.stopped() => {
            stop_group(&mut child, grace, &paused.cancel).await;
            Ok(Ended::Stopped)
        }
    }
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

/// SIGTERM to the program's group, then SIGKILL once `grace` passed or the session is hurried
/// (at once when it already is); waits until the program is gone.
async fn stop_group(child: &mut tokio::process::Child, grace: Duration, cancel: &Cancel) {
    use rustix::process::{Pid, Signal, kill_process_group};
    let Some(group) = child
        .id()
        .and_then(|id| Pid::from_raw(i32::try_from(id).ok()?))
    else {
        return;
    };
    if !cancel.is_hurried() {
        let _ = kill_process_group(group, Signal::TERM);
        tokio::select! {
            _ = child.wait() => return,
            () = tokio::time::sleep(grace) => {}
            () = cancel.hurried() => {}
        }
    }
    let _ = kill_process_group(group, Signal::KILL);
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
