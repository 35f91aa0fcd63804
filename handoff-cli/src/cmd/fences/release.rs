//! `flux-handoff fences release <kind>/<ns>/<name> --holder H`: release one fence found on the
//! cluster, showing what was observed and the CAS patch sent.

use std::str::FromStr;

use clap::Args;
use flux_fence::recovery::short_ref;
use flux_fence::{FenceError, Holder};
use serde_json::json;

use super::Context;
use crate::cli::Global;
use crate::failure::Failure;
use crate::output::Output;
use crate::{exit, settings};

/// `fences release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The fenced object, `[kind/][namespace/]name` with kind `ks` (Kustomization, default) or
    /// `hr` (`HelmRelease`); `fences` prints the exact form.
    #[arg(value_name = "OBJECT")]
    pub object: String,
    /// The holder whose fence this is (the owner annotation's `holder` part). Required: a
    /// fence is only released for the holder named here.
    #[arg(long, value_name = "HOLDER")]
    pub holder: String,
}

pub(super) async fn run(
    global: &Global,
    ctx: &Context,
    args: &ReleaseArgs,
    out: &mut Output,
) -> Result<u8, Failure> {
    let obj = settings::parse_target(&args.object, &global.namespace).map_err(Failure::usage)?;
    let holder =
        Holder::from_str(&args.holder).map_err(|e| Failure::usage(format!("--holder: {e}")))?;
    let name = short_ref(&obj);
    let ready = match ctx.recovery.prepare_release(&obj, &holder).await {
        Ok(Ok(ready)) => ready,
        Ok(Err(refused)) => return Err(Failure::new(exit::REFUSED, refused.to_string())),
        // The object could not be read: `verb resource target: cause`, 403 as "forbidden to".
        Err(
            FenceError::Forbidden {
                verb: "get",
                source,
                ..
            }
            | FenceError::Api {
                verb: "get",
                source,
                ..
            },
        ) => {
            let plural = &obj.resource.plural;
            let line = match *source {
                kube::Error::Api(s) if s.code == 403 => {
                    format!("forbidden to get {plural} {name}: {}", s.message)
                }
                e => format!("get {plural} {name}: {}", crate::failure::chain(&e)),
            };
            return Err(Failure::new(exit::KUBE_API, line));
        }
        Err(e) => return Err(e.into()),
    };
    ready.lines(&ctx.lease).iter().for_each(|l| out.note(l));
    for (key, value) in ready.facts() {
        out.fact(key, value);
    }
    match ctx.recovery.release_prepared(&ready).await? {
        Ok(rv) => {
            out.fact("resource_version", json!(rv));
            let rv = rv.as_deref().unwrap_or("unknown");
            out.phase(&format!("released: {name} (resourceVersion {rv})"));
            out.list(std::slice::from_ref(&name));
            Ok(exit::SUCCESS)
        }
        Err(refused) => Err(Failure::new(exit::REFUSED, refused.to_string())),
    }
}
