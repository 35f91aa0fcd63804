//! `flux-handoff fences release <kind>/<ns>/<name> --holder H`: release one fence found on the
//! cluster, showing what was observed and the CAS patch sent.

use std::str::FromStr;

use clap::Args;
use flux_fence::recovery::short_ref;
use flux_fence::{FenceError, Holder};
use serde_json::json;

use super::Context;
use crate::args::Global;
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
    /// When the release is withheld because another writer changed a mark (a person's `flux
    /// resume` set spec.suspend to false mid-pause): keep that writer's value as found,
    /// restore every other mark (e.g. `kustomize.toolkit.fluxcd.io/reconcile`), and remove the
    /// fence — one CAS patch, printed before it is sent.
    #[arg(long)]
    pub keep_moved: bool,
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
        Ok(Err(_)) if args.keep_moved => return keep_moved(ctx, &obj, &holder, out).await,
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

/// `--keep-moved`: reads the object, prints what the settling patch keeps and restores, and
/// sends it ([`super::settle`]); a patch whose tests fail (the object moved again) is a
/// refusal, nothing changed.
async fn keep_moved(
    ctx: &Context,
    obj: &flux_fence::ObjectRef,
    holder: &Holder,
    out: &mut Output,
) -> Result<u8, Failure> {
    use kube::api::{Api, DynamicObject, Patch};
    let name = short_ref(obj);
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &obj.namespace, &obj.resource);
    let read = api.get(&obj.name).await.map_err(|e| {
        Failure::new(
            exit::KUBE_API,
            format!("get {name}: {}", crate::failure::chain(&e)),
        )
    })?;
    let value =
        serde_json::to_value(&read).map_err(|e| Failure::new(exit::INTERNAL, e.to_string()))?;
    let settle = super::settle::settle(&value, &ctx.keys, holder)
        .map_err(|why| Failure::new(exit::REFUSED, format!("{name}: {why}; nothing changed")))?;
    out.note(&format!(
        "{name}: keeping {} as another writer set it; restoring {}; removing the fence",
        settle.kept.join(", "),
        if settle.restored.is_empty() {
            "nothing".into()
        } else {
            settle.restored.join(", ")
        }
    ));
    out.note(&format!("patch: {}", settle.patch));
    out.fact("patch", settle.patch.clone());
    let patch: json_patch::Patch = serde_json::from_value(settle.patch)
        .map_err(|e| Failure::new(exit::INTERNAL, e.to_string()))?;
    match api
        .patch(
            &obj.name,
            &flux_fence::api::patch_params(),
            &Patch::<()>::Json(patch),
        )
        .await
    {
        Ok(o) => {
            let rv = o.metadata.resource_version.unwrap_or_default();
            out.fact("resource_version", json!(rv));
            out.phase(&format!("settled: {name} (resourceVersion {rv})"));
            out.list(std::slice::from_ref(&name));
            Ok(exit::SUCCESS)
        }
        Err(kube::Error::Api(s)) if matches!(s.code, 409 | 422) => Err(Failure::new(
            exit::REFUSED,
            format!(
                "{name} changed since it was read ({}); nothing changed",
                s.message
            ),
        )),
        Err(e) => Err(Failure::new(
            exit::KUBE_API,
            format!("patch {name}: {}", crate::failure::chain(&e)),
        )),
    }
}
