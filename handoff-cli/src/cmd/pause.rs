//! `flux-handoff pause`: Lease, fence the chain, retire in-flight reconciles, prove the stable
//! pause, and leave it paused for `flux-handoff resume --holder`.

use flux_fence::Holder;
use serde_json::json;

use crate::cli::{Global, PauseArgs};
use crate::failure::Failure;
use crate::output::Output;
use crate::session::Session;
use crate::signals::Interrupt;
use crate::{client, config, exit, settings};

pub async fn run(
    global: &Global,
    args: &PauseArgs,
    out: &mut Output,
    mut interrupt: Interrupt,
) -> Result<u8, Failure> {
    let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
    let settings = settings::resolve(global, &args.targets, &file).map_err(Failure::usage)?;
    let client = client::client(global).await?;
    let holder = Holder::generate();
    let mut session = Session::start(client, settings, holder, out, &mut interrupt).await?;
    match session.pause(out, &mut interrupt).await {
        Ok(proof) => {
            out.fact(
                "proof",
                json!({ "passes": proof.passes(), "counters": proof.counters().to_string() }),
            );
            let holder = session.holder.to_string();
            let lease = session.settings.lease.clone();
            let held = session.leave_paused().await?;
            out.fact("holder", json!(holder));
            out.fact("fences_held", json!(held));
            out.note(&format!("paused by {holder}; fenced: {}", held.join(", ")));
            let lease_flag = if lease.namespace == "flux-system" && lease.name == "flux-handoff" {
                String::new()
            } else {
                format!(" --lease {}/{}", lease.namespace, lease.name)
            };
            out.note(&format!(
                "resume with: flux-handoff resume --holder {holder}{lease_flag}"
            ));
            println_if_text(out, &holder);
            Ok(exit::SUCCESS)
        }
        Err(failure) => {
            // Give back whatever was taken; the pause's error code wins over a cleanup error.
            if let Err(c) = session.cleanup(out).await {
                out.note(&c.message);
            }
            Err(failure)
        }
    }
}

/// In text mode, stdout carries only the holder (so scripts can capture it).
fn println_if_text(out: &Output, holder: &str) {
    if !out.is_json() {
        println!("{holder}");
    }
}
