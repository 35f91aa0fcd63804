//! `flux-handoff run -- COMMAND`: pause, prove, run the command with the proof in its
//! environment, resume — whatever the command's outcome. Exits with the command's status when
//! the handoff itself succeeded.

use flux_fence::Holder;
use serde_json::json;

use crate::cli::{Global, RunArgs};
use crate::failure::Failure;
use crate::output::Output;
use crate::session::Session;
use crate::signals::Interrupt;
use crate::{client, config, exit, settings};

pub async fn run(
    global: &Global,
    args: &RunArgs,
    out: &mut Output,
    mut interrupt: Interrupt,
) -> Result<u8, Failure> {
    let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
    let settings = settings::resolve(global, &args.targets, &file).map_err(Failure::usage)?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::usage("run: no command after --"))?;
    let client = client::client(global).await?;
    let holder = Holder::generate();
    let mut session = Session::start(client, settings, holder, out, &mut interrupt).await?;

    let outcome = match session.pause(out, &mut interrupt).await {
        Err(f) => Err(f),
        Ok(proof) => {
            out.fact(
                "proof",
                json!({ "passes": proof.passes(), "counters": proof.counters().to_string() }),
            );
            let targets: Vec<String> = session
                .chains
                .iter()
                .map(|c| c.target.to_string())
                .collect();
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(rest)
                .env("FLUX_HANDOFF_HOLDER", session.holder.to_string())
                .env(
                    "FLUX_HANDOFF_PROOF",
                    format!("passes={} {}", proof.passes(), proof.counters()),
                )
                .env("FLUX_HANDOFF_TARGETS", targets.join(","))
                // Its own process group, so an interrupt reaches everything it started.
                .process_group(0)
                .kill_on_drop(true);
            match cmd.spawn() {
                Err(e) => Err(Failure::usage(format!(
                    "run: cannot start {program:?}: {e}"
                ))),
                Ok(mut child) => {
                    out.phase(&format!("running {program}"));
                    let status = tokio::select! {
                        s = child.wait() => Some(s),
                        () = interrupt.wait() => None,
                    };
                    match status {
                        None => {
                            stop_group(&mut child).await;
                            Err(Failure::new(
                                exit::INTERRUPTED,
                                format!("interrupted while {program} was running"),
                            ))
                        }
                        Some(Err(e)) => Err(Failure::new(
                            exit::INTERNAL,
                            format!("waiting for {program}: {e}"),
                        )),
                        Some(Ok(s)) => {
                            let code = s.code().map_or(exit::INTERNAL, |c| {
                                u8::try_from(c).unwrap_or(exit::INTERNAL)
                            });
                            out.phase(&format!("{program} exited with {code}"));
                            out.fact("command_exit_code", json!(code));
                            Ok(code)
                        }
                    }
                }
            }
        }
    };
    // Resume whatever happened; a cleanup failure turns success into failure, but an earlier
    // failure's code wins.
    let cleanup = session.cleanup(out).await;
    match (outcome, cleanup) {
        (Ok(code), Ok(())) => Ok(code),
        (Ok(_), Err(c)) => Err(c),
        (Err(f), Ok(())) => Err(f),
        (Err(f), Err(c)) => {
            out.note(&c.message);
            Err(f)
        }
    }
}

/// How long the command's process group gets between SIGTERM and SIGKILL.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Sends SIGTERM to the command's process group, then SIGKILL if it is still there after
/// [`STOP_GRACE`]. Signals go through `kill(1)`: this crate forbids unsafe code, and this is
/// the interrupt path, not a hot one.
async fn stop_group(child: &mut tokio::process::Child) {
    let Some(pid) = child.id() else { return };
    let group = format!("-{pid}");
    let send = |sig: &str| {
        let _ = std::process::Command::new("kill")
            .args([sig, "--", &group])
            .status();
    };
    send("-TERM");
    if tokio::time::timeout(STOP_GRACE, child.wait())
        .await
        .is_err()
    {
        send("-KILL");
        let _ = child.wait().await;
    }
}
