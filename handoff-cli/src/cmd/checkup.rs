//! What `doctor` checks and `rbac` grants: the [`Checkup`] the flags and the config file
//! configure (targets, Lease, controller, fence scope) and its GHCR plan. Exit 2 for bad
//! input; no cluster call.

use flux_fence::discover::Scope;
use ghcr_auth::reassert::Consumers;
use handoff_app::doctor::Checkup;
use handoff_app::rights::{EsoRights, Ghcr, Source};

use super::ghcr::{FanoutArgs, SecretArgs, layer};
use crate::args::{FindArgs, Global, TargetArgs};
use crate::failure::Failure;
use crate::settings;
use handoff_app::config::{self, FileConfig};

/// What these flags and the config file configure (`doctor` checks it, `rbac` grants it);
/// exit 2 for bad input. No target named: only the objects of the default namespace.
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
        ghcr: ghcr_plan(secrets, fanout, &file, &global.namespace)?,
        keys: s.keys,
    })
}

/// What `ghcr reassert` would write and drive with these flags over `[ghcr]`; `None` when
/// neither names anything.
pub(crate) fn ghcr_plan(
    args: &SecretArgs,
    fanout: &FanoutArgs,
    file: &FileConfig,
    default_ns: &str,
) -> Result<Option<Ghcr>, Failure> {
    let named = !args.namespace_list.is_empty()
        || args.namespace_selector.is_some()
        || args.root_secret.is_some()
        || !args.source.is_empty()
        || args.secret_name.is_some()
        || !fanout.secret_key.is_empty()
        || fanout.push_secret.is_some()
        || fanout.external_secret.is_some();
    if !named && file.ghcr.is_none() {
        return Ok(None);
    }
    let mut flags = handoff_app::settings::Flags::new(default_ns);
    flags.ghcr = layer(None, Some((args, fanout)));
    let (route, sources) =
        handoff_app::settings::ghcr_route(&flags, &file.tables()).map_err(Failure::usage)?;
    let spec = route.direct;
    let namespaces = |c: Consumers| match c {
        Consumers::Namespaces(l) => (l, false),
        // A selector, or a way to name consumers this CLI does not know yet: the rights to
        // list namespaces, the broader grant.
        _ => (Vec::new(), true),
    };
    let (consumers, mut selector) = namespaces(spec.consumers);
    let eso = match route.eso {
        Some(e) => {
            let (consumers, by_label) = namespaces(e.consumers);
            selector |= by_label;
            Some(EsoRights {
                push_secret: (e.push_secret.namespace, e.push_secret.name),
                external_secret: e.external_secret,
                consumers,
            })
        }
        None => None,
    };
    Ok(Some(Ghcr {
        secret_name: spec.secret_name,
        consumers,
        selector,
        root: spec.root.map(|r| (r.namespace, r.name)),
        staged: route
            .keys
            .into_iter()
            .map(|k| (k.secret.namespace, k.secret.name))
            .collect(),
        eso,
        sources: sources
            .into_iter()
            .map(|s| Source {
                resource: if s.resource.plural == "helmrepositories" {
                    "helmrepositories"
                } else {
                    "ocirepositories"
                },
                namespace: s.namespace,
                name: s.name,
            })
            .collect(),
    }))
}
