//! `flux-handoff fences release <kind>/<ns>/<name> --holder H`: release one fence found on the
//! cluster, showing what was observed and the CAS patch sent.

use std::str::FromStr;

use clap::Args;
use flux_fence::discover::{self, FoundState, ReleasePlan};
use flux_fence::{Clock, Fencer, Holder, ReleaseOutcome, SystemClock};
use flux_suspend::object::get_json;
use serde_json::json;

use super::Context;
use super::render::{self, short_ref};
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

pub async fn run(
    global: &Global,
    ctx: &Context,
    args: &ReleaseArgs,
    out: &mut Output,
) -> Result<u8, Failure> {
    let obj = settings::parse_target(&args.object, &global.namespace).map_err(Failure::usage)?;
    let holder =
        Holder::from_str(&args.holder).map_err(|e| Failure::usage(format!("--holder: {e}")))?;
    let name = short_ref(&obj);
    let read = read_object(ctx, &obj, &name).await?;
    let now = SystemClock.now();
    let Some(found) = discover::inspect(&read, &obj.resource, &ctx.keys, now) else {
        return Err(Failure::new(
            exit::REFUSED,
            format!("{name} carries no fence; nothing to release"),
        ));
    };
    let FoundState::Fence {
        owner,
        age,
        marks,
        release,
        ..
    } = &found.state
    else {
        return Err(Failure::new(
            exit::REFUSED,
            format!("{name}: malformed fence annotations; inspect it and fix by hand"),
        ));
    };
    if owner.holder != holder {
        return Err(Failure::new(
            exit::REFUSED,
            format!(
                "{name} is fenced by {}, not {holder}; nothing changed",
                owner.holder
            ),
        ));
    }
    let patch = match release {
        ReleasePlan::Patch(p) => p.clone(),
        ReleasePlan::Withheld { at } => {
            return Err(Failure::new(
                exit::REFUSED,
                format!(
                    "{name}: {}; nothing changed",
                    render::withhold(&flux_fence::recovery::Withhold::MarkMoved(at.clone()))
                ),
            ));
        }
        _ => {
            return Err(Failure::new(
                exit::REFUSED,
                format!("{name}: unknown release plan; nothing changed"),
            ));
        }
    };
    if !render::child_mark().is_child(marks) {
        refuse_while_children_held(ctx, &holder, &found, &name).await?;
    }

    let rv = read
        .pointer("/metadata/resourceVersion")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let lease_holder = ctx.snapshot_lease_holder().await;
    out.note(&format!(
        "observed: {name} fenced by {owner} {} ago, resourceVersion {rv}",
        render::age(*age)
    ));
    for m in marks {
        let prior = m
            .prior
            .as_ref()
            .map_or_else(|| "absent".to_string(), ToString::to_string);
        out.note(&format!("  mark {}: {} (prior {prior})", m.at, m.value));
    }
    if lease_holder.as_deref() == Some(holder.as_str()) {
        out.note(&format!(
            "note: {holder} still holds the Lease {}; release it afterwards with `flux-handoff resume --holder {holder} --lease {}` (add --holder-exited unless it was parked by `pause`)",
            ctx.lease_name(),
            ctx.lease_name()
        ));
    }
    out.note(&format!("patch: {patch}"));
    out.fact("object", json!(name));
    out.fact("owner", json!(owner.to_string()));
    out.fact("observed_resource_version", json!(rv));
    out.fact(
        "patch",
        serde_json::from_str(&patch).unwrap_or_else(|_| json!(patch)),
    );

    let fencer = Fencer::new(ctx.client.clone(), ctx.keys.clone(), owner.clone());
    let Some(guard) = fencer.adopt_recorded(&obj, owner).await? else {
        return Err(Failure::new(
            exit::REFUSED,
            format!("{name} changed hands since it was read; nothing changed"),
        ));
    };
    outcome(&name, fencer.release(guard).await?, out)
}

/// A parent waits for its children: refuses while `holder` holds any target anywhere.
async fn refuse_while_children_held(
    ctx: &Context,
    holder: &Holder,
    found: &flux_fence::discover::FoundFence,
    name: &str,
) -> Result<(), Failure> {
    // A parent waits for its children: look wherever this command looks (-A: everywhere).
    let all = discover::discover_listed(
        &ctx.client,
        &ctx.keys,
        &[
            flux_suspend::object::kustomization_resource(),
            flux_suspend::object::helmrelease_resource(),
        ],
        &ctx.scope,
        None,
        &SystemClock,
        ctx.listing,
    )
    .await?;
    let children: Vec<String> = flux_fence::recovery::held_children(
        holder.as_str(),
        found,
        &all.fences,
        &render::child_mark(),
    )
    .iter()
    .map(short_ref)
    .collect();
    if !children.is_empty() {
        return Err(Failure::new(
            exit::REFUSED,
            format!(
                "{name} is a parent whose child is still held by {holder}: release {} first; nothing changed",
                children.join(", ")
            ),
        ));
    }
    Ok(())
}

fn outcome(name: &str, released: ReleaseOutcome, out: &mut Output) -> Result<u8, Failure> {
    match released {
        ReleaseOutcome::Released { resource_version } => {
            out.fact("resource_version", json!(resource_version));
            out.phase(&format!(
                "released: {name} (resourceVersion {})",
                resource_version.as_deref().unwrap_or("unknown")
            ));
            Ok(exit::SUCCESS)
        }
        ReleaseOutcome::Gone | ReleaseOutcome::Recreated => Err(Failure::new(
            exit::REFUSED,
            format!("{name} is gone or was recreated; nothing changed"),
        )),
        ReleaseOutcome::NotOurs { holder: h } => Err(Failure::new(
            exit::REFUSED,
            format!(
                "{name} is now fenced by {}; nothing changed",
                h.as_deref().unwrap_or("nobody")
            ),
        )),
        ReleaseOutcome::Kept { guard, why } => {
            (*guard).leave_in_place();
            Err(Failure::new(
                exit::REFUSED,
                format!("{name} kept: {why:?}; nothing changed"),
            ))
        }
        _ => Err(Failure::new(
            exit::INTERNAL,
            format!("{name}: unexpected release outcome"),
        )),
    }
}

/// Reads the object; a missing one is a refusal (nothing to release).
async fn read_object(
    ctx: &Context,
    obj: &flux_fence::ObjectRef,
    name: &str,
) -> Result<serde_json::Value, Failure> {
    match get_json(&ctx.client, obj).await {
        Ok(v) => Ok(v),
        Err(kube::Error::Api(s)) if s.code == 404 => Err(Failure::new(
            exit::REFUSED,
            format!("{name} not found; nothing to release"),
        )),
        Err(e) => Err(Failure::new(
            exit::KUBE_API,
            super::kube_line("get", &obj.resource.plural, name, &e),
        )),
    }
}
