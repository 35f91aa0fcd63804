//! `flux-handoff run -- COMMAND`: pause, prove, run the command with the proof in its
//! environment, resume — whatever the command's outcome. Exits with the command's status when
//! the handoff itself succeeded.

use std::cell::RefCell;
use std::time::Duration;

use flux_suspend::{Cancel, Paused};
use serde_json::json;

use crate::cli::{Global, RunArgs};
use crate::failure::Failure;
use crate::output::Output;
use crate::{client, config, exit, session, settings};

pub async fn run(
    global: &Global,
    args: &RunArgs,
    out: &mut Output,
    cancel: Cancel,
) -> Result<u8, Failure> {
    let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
    let settings = settings::resolve(global, &args.targets, &file).map_err(Failure::usage)?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::usage("run: no command after --"))?;
    let mut opts = session::options(settings, session::holder(&args.holder)?)?;
    session::recover_finished_runs(&mut opts, &args.holder, &file)?;
    let client = client::client(global).await?;
    let started = session::start(client, opts, cancel, out).await?;
    let members = started.members();
    let out = RefCell::new(out);
    let outcome = started
        .run_paused(
            |e| session::report(&mut out.borrow_mut(), &e, &members),
            |paused| async {
                let r = command(program, rest, paused, args.grace, &out).await;
                Ok::<_, std::convert::Infallible>(r)
            },
        )
        .await;
    let out = out.into_inner();
    session::finish(session::result(outcome.result), outcome.cleanup, out)
}

/// Runs the command in its own process group until it exits, or until the session is
/// cancelled or loses its Lease: then SIGTERM to the group, SIGKILL after `grace` (at once
/// when hurried).
async fn command(
    program: &str,
    rest: &[String],
    paused: Paused,
    grace: Duration,
    out: &RefCell<&mut Output>,
) -> Result<u8, Failure> {
    let proof = format!(
        "passes={} {}",
        paused.proof.passes(),
        paused.proof.counters()
    );
    out.borrow_mut().fact(
        "proof",
        json!({ "passes": paused.proof.passes(), "counters": paused.proof.counters().to_string() }),
    );
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(rest)
        .env("FLUX_HANDOFF_HOLDER", paused.holder.to_string())
        .env("FLUX_HANDOFF_PROOF", proof)
        .env("FLUX_HANDOFF_TARGETS", paused.targets.join(","))
        // Its own process group, so a stop reaches everything it started.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::usage(format!("run: cannot start {program:?}: {e}")))?;
    out.borrow_mut().phase(&format!("running {program}"));
    let status = tokio::select! {
        s = child.wait() => s,
        () = paused.cancel.stopped() => {
            stop_group(&mut child, grace, &paused.cancel).await;
            return Err(Failure::new(
                exit::INTERRUPTED,
                format!("interrupted while {program} was running; it was stopped"),
            ));
        }
    };
    let status =
        status.map_err(|e| Failure::new(exit::INTERNAL, format!("waiting for {program}: {e}")))?;
    let code = exit_code(status);
    out.borrow_mut()
        .phase(&format!("{program} exited with {code}"));
    out.borrow_mut().fact("command_exit_code", json!(code));
    Ok(code)
}

/// The exit code of a finished command: its own, or 128+N when signal N ended it.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c).unwrap_or(exit::INTERNAL),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(exit::INTERNAL),
        (None, None) => exit::INTERNAL,
    }
}

/// SIGTERM to the command's process group, then SIGKILL once `grace` passed or the session is
/// hurried (at once when it already is); waits until the command is gone.
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
    fn a_command_ended_by_a_signal_exits_128_plus_the_signal() {
        // Raw wait statuses: exit code 3 is 3 << 8; killed by SIGTERM (15) is 15.
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(15)), 143);
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(9)), 137);
    }
}
