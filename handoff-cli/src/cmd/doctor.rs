//! `flux-handoff doctor`: a read-only preflight against any cluster (`handoff_app::doctor`
//! makes the checks). Each line is `ok <check>` or `FAIL <check>: <fix>`; exit 0 when all
//! pass, 6 otherwise.

use clap::Args;
use handoff_app::doctor::{Finding, doctor};
use serde_json::json;

use super::ghcr::{FanoutArgs, SecretArgs};
use crate::args::{FindArgs, Global, TargetArgs};
use crate::failure::Failure;
use crate::output::Output;
use crate::{client, exit};

/// `doctor`: the same targets, Lease, controller and config as `pause`; the same fence scope
/// as `fences`; the same Secrets and sources as `ghcr reassert`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub targets: TargetArgs,
    #[command(flatten)]
    pub find: FindArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
    #[command(flatten)]
    pub fanout: FanoutArgs,
}

/// Runs every check, printing each as it is made; exit 0 when all pass, 6 otherwise.
pub async fn run(global: &Global, args: &DoctorArgs, out: &mut Output) -> Result<u8, Failure> {
    let checkup = super::checkup::checkup(
        global,
        &args.targets,
        &args.find,
        &args.secrets,
        &args.fanout,
    )?;
    let client = client::client(global).await?;
    let text = !out.is_json();
    let findings = doctor(&client, &checkup, &mut |f| {
        if text {
            println!("{}", handoff_app::render::plain::plain(&f.to_string()));
        }
    })
    .await;
    let checks: Vec<_> = findings.iter().map(Finding::to_json).collect();
    out.fact("checks", json!(checks));
    match findings.iter().filter(|f| !f.is_ok()).count() {
        0 => Ok(exit::SUCCESS),
        failed => Err(Failure::new(
            exit::KUBE_API,
            format!("doctor: {failed} check(s) failed"),
        )),
    }
}
