//! Flags over config over defaults: what a handoff command will do, resolved before any
//! cluster call, so bad input fails with exit code 2 and nothing touched.

use std::time::Duration;

use flux_fence::{AnnotationKeys, LeaseConfig, ObjectRef};
use flux_suspend::io::ControllerRef;
use flux_suspend::object::kustomization_resource;
use flux_suspend::retire::Strategy;

use crate::cli::{Global, TargetArgs};
use crate::config::{FileConfig, split_ref};

/// A target as named, with its parent when given explicitly.
#[derive(Debug, Clone)]
pub struct TargetSpec {
    pub object: ObjectRef,
    pub parent: ParentSpec,
}

/// Where the parent comes from.
#[derive(Debug, Clone)]
pub enum ParentSpec {
    /// Read the target's `kustomize.toolkit.fluxcd.io/name|namespace` labels.
    FromLabels,
    /// A top-level object: no parent.
    None,
    /// This Kustomization.
    Explicit(ObjectRef),
}

/// Everything a pause/resume/run needs, resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    pub targets: Vec<TargetSpec>,
    pub strategy: Strategy,
    pub quiesce: bool,
    pub lease: LeaseConfig,
    pub controller: ControllerRef,
    pub keys: AnnotationKeys,
    pub reason: Option<String>,
    pub timeout: Duration,
    pub wait_timeout: Option<Duration>,
    pub interval: Duration,
}

/// Resolves flags over the config file. Errors are one line, for exit code 2.
pub fn resolve(global: &Global, args: &TargetArgs, file: &FileConfig) -> Result<Settings, String> {
    let ns = global.namespace.as_str();
    let mut targets = Vec::new();
    if args.target.is_empty() {
        for t in &file.targets {
            let kind = flux_suspend::names::kind_resource(&t.kind).ok_or_else(|| {
                format!(
                    "config: target {:?}: unknown kind {:?} (Kustomization, HelmRelease)",
                    t.name, t.kind
                )
            })?;
            let tns = t.namespace.clone().unwrap_or_else(|| ns.to_string());
            let (_, name) = split_ref(&t.name, &tns)?;
            let parent = parent_spec(t.parent.as_deref().or(args.parent.as_deref()), &tns)?;
            targets.push(TargetSpec {
                object: ObjectRef::new(kind, tns, name),
                parent,
            });
        }
    } else {
        for t in &args.target {
            let object = parse_target(t, ns)?;
            let parent = parent_spec(args.parent.as_deref(), &object.namespace)?;
            targets.push(TargetSpec { object, parent });
        }
    }
    if targets.is_empty() {
        return Err(
            "no target: pass --target [kind/][namespace/]name or add [[targets]] to the config"
                .into(),
        );
    }

    let fence = file.fence.as_ref();
    let strategy_text = args
        .retire
        .clone()
        .or_else(|| fence.and_then(|f| f.retire.clone()));
    let strategy = match strategy_text {
        Some(s) => s.parse::<Strategy>()?,
        None => Strategy::Ack,
    };
    let quiesce = args.quiesce || fence.and_then(|f| f.quiesce).unwrap_or(false);

    let lease = lease_config(file, args)?;
    let controller = controller_ref(file, args)?;

    let keys = match fence.and_then(|f| f.annotation_prefix.as_deref()) {
        Some(p) => AnnotationKeys::checked(p).map_err(|e| format!("config: fence.{e}"))?,
        None => AnnotationKeys::default(),
    };
    if let Some(r) = &global.reason {
        flux_fence::decide::validate_reason(r).map_err(|e| format!("--reason: {e}"))?;
    }
    if global.interval.is_zero() || global.interval > global.timeout {
        return Err("--interval must be above zero and not above --timeout".into());
    }
    Ok(Settings {
        targets,
        strategy,
        quiesce,
        lease,
        controller,
        keys,
        reason: global.reason.clone(),
        timeout: global.timeout,
        wait_timeout: global.wait_timeout,
        interval: global.interval,
    })
}

/// Parses `--target`'s `[kind/][namespace/]name`.
pub fn parse_target(text: &str, default_ns: &str) -> Result<ObjectRef, String> {
    flux_suspend::names::parse_object(text, default_ns).map_err(|e| format!("--target: {e}"))
}

fn parent_spec(text: Option<&str>, default_ns: &str) -> Result<ParentSpec, String> {
    match text {
        None => Ok(ParentSpec::FromLabels),
        Some("none") => Ok(ParentSpec::None),
        Some(p) => {
            let (ns, name) = split_ref(p, default_ns).map_err(|e| format!("--parent: {e}"))?;
            Ok(ParentSpec::Explicit(ObjectRef::new(
                kustomization_resource(),
                ns,
                name,
            )))
        }
    }
}

fn lease_config(file: &FileConfig, args: &TargetArgs) -> Result<LeaseConfig, String> {
    let mut lease = LeaseConfig::default();
    if let Some(l) = &file.lease {
        if let Some(n) = &l.namespace {
            lease.namespace.clone_from(n);
        }
        if let Some(n) = &l.name {
            lease.name.clone_from(n);
        }
        if let Some(d) = &l.duration {
            lease.duration =
                crate::duration::parse(d).map_err(|e| format!("config: lease.duration: {e}"))?;
        }
    }
    if let Some(l) = &args.lease {
        let (lns, name) = split_ref(l, &lease.namespace)?;
        lease.namespace = lns;
        lease.name = name;
    }
    if lease.duration < Duration::from_secs(2) {
        return Err("lease duration must be at least 2s".into());
    }
    lease.renew_every = (lease.duration / 4).max(Duration::from_millis(500));
    Ok(lease)
}

fn controller_ref(file: &FileConfig, args: &TargetArgs) -> Result<ControllerRef, String> {
    let mut controller = ControllerRef::default();
    if let Some(c) = &file.controller {
        if let Some(n) = &c.namespace {
            controller.namespace.clone_from(n);
        }
        if let Some(n) = &c.name {
            controller.name.clone_from(n);
        }
    }
    if let Some(c) = &args.controller {
        let (cns, name) = split_ref(c, &controller.namespace)?;
        controller = ControllerRef {
            namespace: cns,
            name,
        };
    }
    Ok(controller)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_args(args: &[&str], file: &FileConfig) -> Result<Settings, String> {
        use clap::Parser;
        let words = ["flux-handoff", "pause"].iter().chain(args).copied();
        let cli = crate::cli::Cli::try_parse_from(words).unwrap();
        let crate::cli::Command::Pause(p) = &cli.command else {
            panic!("pause");
        };
        resolve(&cli.global, &p.targets, file)
    }

    #[test]
    fn a_malformed_annotation_prefix_is_a_usage_error() {
        for bad in ["", "Flux.io", "a/b", "-x.io", "a..b", "a b"] {
            let file =
                crate::config::parse(&format!("[fence]\nannotation_prefix = {bad:?}\n")).unwrap();
            let err = resolve_args(&["-t", "apps"], &file).unwrap_err();
            assert!(
                err.starts_with("config: fence.annotation prefix"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_reason_that_is_not_one_line_is_a_usage_error_before_any_io() {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from([
            "flux-handoff",
            "--reason",
            "deploy\n::add-mask::x",
            "pause",
            "--target",
            "apps",
        ])
        .unwrap();
        let crate::cli::Command::Pause(p) = &cli.command else {
            panic!("pause");
        };
        let err = resolve(&cli.global, &p.targets, &FileConfig::default()).unwrap_err();
        assert_eq!(
            err,
            "--reason: invalid reason text: contains control characters"
        );
    }
}
