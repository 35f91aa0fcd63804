//! `flux-handoff doctor`: a read-only preflight against any cluster (`handoff_app::doctor`
//! makes the checks). Each line is `ok <check>` or `FAIL <check>: <fix>`; exit 0 when all
//! pass, 6 otherwise.

use clap::Args;
use flux_fence::discover::Scope;
use handoff_app::doctor::{Checkup, Finding, doctor};
use serde_json::json;

use super::ghcr::{FanoutArgs, SecretArgs};
use crate::args::{FindArgs, Global, TargetArgs};
use crate::failure::Failure;
use crate::output::Output;
use crate::{client, config, exit, settings};

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
    let checkup = checkup(
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
            println!("{}", crate::output::plain::plain(&f.to_string()));
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

/// What these flags and the config file configure (shared with `rbac`); exit 2 for bad
/// input. No target named: only the objects of the default namespace.
pub(crate) fn checkup(
    global: &Global,
    targets: &TargetArgs,
    find: &FindArgs,
    secrets: &SecretArgs,
    fanout: &FanoutArgs,
) -> Result<Checkup, Failure> {
    let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
    let named = !(targets.target.is_empty() && file.targets.is_empty());
    let mut targets = targets.clone();
    if !named {
        targets.target.push("unused".into());
    }
    let s = settings::resolve(global, &targets, &file).map_err(Failure::usage)?;
    // -A widens the search; each --in still names a namespace whose objects are fenced.
    let named_in = FindArgs {
        all_namespaces: false,
        ..find.clone()
    };
    let also_in = match named_in.scope(&[]).map_err(Failure::usage)? {
        Scope::Namespaces(n) => n,
        // Every namespace, or a scope this CLI does not build: no named namespace to add.
        _ => Vec::new(),
    };
    Ok(Checkup {
        targets: if named { s.targets } else { Vec::new() },
        namespace: global.namespace.clone(),
        lease: s.lease,
        controller: s.controller,
        strategy: s.strategy,
        also_in,
        all_namespaces: find.all_namespaces,
        ghcr: super::rbac::ghcr_plan(secrets, fanout, &file, &global.namespace)?,
        keys: s.keys,
    })
}
