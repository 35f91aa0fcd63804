//! `flux-handoff run -- COMMAND`: pause, prove, run the command with the proof in its
//! environment, resume — whatever the command's outcome. Nothing the command started outlives
//! the pause nor its holder (a keeper process is its parent: see
//! [`flux_suspend::command`]). Ctrl-Z stops the command with the run; a command run from a
//! terminal gets no terminal (its standard input is /dev/null), and says so. Exits with the
//! command's status when the handoff itself succeeded.

use std::cell::RefCell;
use std::io::IsTerminal as _;
use std::time::Duration;

use flux_suspend::command::{self, Ended};
use flux_suspend::{Cancel, Paused};
use serde_json::json;

use crate::args::{Global, RunArgs};
use crate::failure::Failure;
use crate::output::Output;
use crate::{exit, session, settings};
use handoff_app::config;
use handoff_app::next::Hints;

pub async fn run(
    global: &Global,
    args: &RunArgs,
    out: &mut Output,
    cancel: Cancel,
) -> Result<u8, Failure> {
    let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
    crate::notify::configure(out, &args.events, file.events_addr.as_deref())?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::usage("run: no command after --"))?;
    let named = args.targets.with(&args.positional);
    let (mut plan, client) =
        settings::prepare(global, (&args.select, &named, &args.holder), &file, out).await?;
    // The holder's deadline stops the command this long before it must be gone.
    plan.options.kill_grace = args.grace;
    plan.options.allow_autoscaler = args.allow_autoscaler;
    let hints = Hints::of("run", &plan.options);
    if args.dry_run.is_some() {
        return super::dry_run::run(client, plan, cancel, out, &hints, Some(program)).await;
    }
    let started = session::start(client, plan, cancel, out, &hints).await?;
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
    crate::notify::ended(out, &outcome.result, &outcome.cleanup);
    session::finish(
        session::result(outcome.result, &hints),
        outcome.cleanup,
        out,
    )
}

/// Runs the command ([`flux_suspend::command::run_while_paused`]) until it exits, or until
/// the session is cancelled, loses its Lease or finds its pause broken: then it is stopped
/// (SIGTERM to its group and everything it started, SIGKILL after `grace`, at once when
/// hurried). Either way, whatever it left running is ended and reaped before this returns, so
/// before the first release. A stop for a broken pause is reported by the session (exit 8),
/// not as an interruption.
async fn command(
    program: &str,
    rest: &[String],
    paused: Paused,
    grace: Duration,
    out: &RefCell<&mut Output>,
) -> Result<u8, Failure> {
    let (passes, counters) = (paused.proof.passes(), paused.proof.counters().to_string());
    out.borrow_mut()
        .fact("proof", json!({ "passes": passes, "counters": counters }));
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(rest);
    out.borrow_mut().stage("work");
    out.borrow_mut().phase(&format!("running {program}"));
    if std::io::stdin().is_terminal() {
        // The command runs in a process group of its own, not the terminal's foreground one:
        // reading the terminal would stop it (SIGTTIN) until the run's budget ran out. It
        // reads end-of-file instead, and a question it asks fails at once.
        cmd.stdin(std::process::Stdio::null());
        out.borrow_mut().phase(&format!(
            "{program} gets no terminal: its standard input is /dev/null (answer its questions \
             with flags, e.g. -auto-approve, or pipe them in)"
        ));
    }
    let opts = command::RunOptions::new(grace).with_job_control(true);
    let ended = command::run_with(&paused, cmd, opts)
        .await
        .map_err(|e| Failure::usage(format!("run: cannot start {program:?}: {e}")))?;
    let Ended::Exited(status) = ended else {
        return Err(Failure::new(
            exit::INTERRUPTED,
            format!("interrupted while {program} was running; it was stopped"),
        ));
    };
    let code = command::exit_code(status).unwrap_or(exit::INTERNAL);
    out.borrow_mut()
        .phase(&format!("{program} exited with {code}"));
    out.borrow_mut().fact("command_exit_code", json!(code));
    Ok(code)
}
