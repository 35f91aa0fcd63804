//! `flux-handoff fences release <kind>/<ns>/<name> --holder H`: release one fence found on the
//! cluster, showing what was observed and the CAS patch sent.

use std::str::FromStr;

use clap::Args;
use flux_fence::recovery::{Refused, ReleaseRefusal, Withhold, short_ref};
use flux_fence::{FenceError, Holder};
use serde_json::json;

use super::Context;
use crate::args::Global;
use crate::exit;
use crate::failure::Failure;
use crate::output::Output;

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
    /// When the release is withheld because another writer changed a mark (e.g. removed
    /// `kustomize.toolkit.fluxcd.io/reconcile: disabled` by hand): keep every value other
    /// writers moved as found, restore every other mark, and remove the fence — one CAS patch,
    /// printed before it is sent. A person's `flux resume` alone (spec.suspend set to false)
    /// needs no flag: every release keeps it and releases.
    #[arg(long)]
    pub keep_moved: bool,
    /// Attest that the holder's process has exited (its CI job or shell ended): without it, a
    /// fence whose holder still holds the Lease the fence names (and did not park it with
    /// `pause`) is refused, exit 3, because its work may still run. A holder that is gone
    /// without having exited cleanly is `fences recover`'s to release, after its full Lease
    /// duration.
    #[arg(long)]
    pub holder_exited: bool,
}

pub(super) async fn run(
    global: &Global,
    ctx: &Context,
    args: &ReleaseArgs,
    out: &mut Output,
) -> Result<u8, Failure> {
    let obj = handoff_app::names::parse_object(&args.object, &global.namespace)
        .map_err(Failure::usage)?;
    let holder =
        Holder::from_str(&args.holder).map_err(|e| Failure::usage(format!("--holder: {e}")))?;
    let name = short_ref(&obj);
    let ready = match ctx.recovery.prepare_release(&obj, &holder).await {
        Ok(Ok(ready)) => ready,
        // Only a moved mark is settled this way: any other refusal stands.
        Ok(Err(Refused {
            reason: ReleaseRefusal::Withheld(Withhold::MarkMoved(_)),
            ..
        })) if args.keep_moved => return keep_moved(ctx, &obj, &holder, out).await,
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
    for l in ready.lines(&ctx.lease, &|c| ctx.spell(c)) {
        out.note(&l);
    }
    for (key, value) in ready.facts() {
        out.fact(key, value);
    }
    match ctx.recovery.release_prepared(&ready).await? {
        Ok(rv) => {
            out.fact("resource_version", json!(rv));
            let rv = rv.as_deref().unwrap_or("unknown");
            out.phase(&format!("released: {name} (resourceVersion {rv})"));
            out.list_names(std::slice::from_ref(&name));
            Ok(exit::SUCCESS)
        }
        Err(refused) => Err(Failure::new(exit::REFUSED, refused.to_string())),
    }
}

/// `--keep-moved`: the library reads the object and decides the settling patch
/// ([`flux_fence::keep_moved`]); this prints what it keeps and restores and the patch, then has
/// it sent as decided. A patch whose tests fail (the object moved again) is a refusal, nothing
/// changed.
async fn keep_moved(
    ctx: &Context,
    obj: &flux_fence::ObjectRef,
    holder: &Holder,
    out: &mut Output,
) -> Result<u8, Failure> {
    let name = short_ref(obj);
    let plan = match ctx.recovery.prepare_keep_moved(obj, holder).await? {
        Ok(plan) => plan,
        Err(refused) => return Err(Failure::new(exit::REFUSED, refused.to_string())),
    };
    let pointers = |marks: &[flux_fence::mark::MarkAt]| {
        marks
            .iter()
            .map(flux_fence::mark::MarkAt::pointer)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let restored = match pointers(&plan.marks.restored) {
        none if none.is_empty() => "nothing".to_string(),
        some => some,
    };
    out.note(&format!(
        "{name}: keeping {} as another writer set it; restoring {restored}; removing the fence",
        pointers(&plan.marks.kept),
    ));
    let patch = serde_json::to_value(&plan.patch)
        .map_err(|e| Failure::new(exit::INTERNAL, e.to_string()))?;
    out.note(&format!("patch: {patch}"));
    out.fact("patch", patch);
    match ctx.recovery.release_keeping_moved(obj, &plan).await? {
        Ok(rv) => {
            out.fact("resource_version", json!(rv));
            let rv = rv.as_deref().unwrap_or("unknown");
            out.phase(&format!("settled: {name} (resourceVersion {rv})"));
            out.list_names(std::slice::from_ref(&name));
            Ok(exit::SUCCESS)
        }
        Err(refused) => Err(Failure::new(exit::REFUSED, refused.to_string())),
    }
}
