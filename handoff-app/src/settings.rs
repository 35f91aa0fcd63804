//! Session settings in layers: a caller's flags over a config file's tables over the defaults,
//! resolved into [`SessionOptions`] before any request, so bad input fails with one line and
//! nothing touched. [`plan`] resolves everything a handoff command takes (the options, the
//! holder, the max-hold, the evidence of `--recover-finished-runs`, the Lease wait) at once;
//! [`resolve`] is its part for the targets, Lease and fence keys alone, and [`ghcr_plan`] adds
//! the GHCR credential, route and sources (`[ghcr]`) of `ghcr reassert`.
//!
//! The tables are the `[lease]`, `[fence]`, `[controller]` and `[[targets]]` tables of the
//! `flux-handoff` config file (deserialise them with serde from any format); a program that
//! embeds the session can read the same file and get the same options as the CLI.
//!
//! ```
//! use handoff_app::settings::{Flags, Tables, TargetTable, resolve};
//!
//! let targets = [TargetTable::new("apps")];
//! let file = Tables { targets: &targets, ..Tables::default() };
//! let mut flags = Flags::new("flux-system");
//! flags.retire = Some("ack".into());
//! let opts = resolve(&flags, &file).unwrap();
//! assert_eq!(opts.targets[0].object.to_string(), "Kustomization flux-system/apps");
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use flux_fence::liveness::{LivenessSource, RecoveryTable};
use flux_fence::{AnnotationKeys, LeaseConfig, ObjectRef};
use ghcr_auth::GhcrSettings;
use serde::Deserialize;

use crate::names::{kind_resource, parse_target, split_namespaced};
use flux_suspend::io::ControllerRef;
use flux_suspend::object::kustomization_resource;
use flux_suspend::retire::Strategy;
use flux_suspend::{LeaseWait, ParentSpec, SessionOptions, TargetSpec};

/// The longest duration accepted anywhere (7 days). Every wait adds its duration to the clock;
/// a value beyond this is a typo, and one like `99999999999999h` would overflow that addition.
pub const MAX_DURATION: Duration = Duration::from_hours(7 * 24);

/// `[lease]`: where the coordination Lease lives and how long it lasts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct LeaseTable {
    /// Default `flux-system`.
    pub namespace: Option<String>,
    /// Default `flux-handoff`.
    pub name: Option<String>,
    /// A duration such as `60s` (default 60 s, at least 2 s).
    pub duration: Option<String>,
    /// How long `run`, `pause` and `ghcr reassert` wait while another live holder has the
    /// Lease, e.g. `2m` (default `0`: refuse at once); see `session::LeaseWait`.
    pub wait: Option<String>,
    /// How long a handoff means to hold its pause, e.g. `2h` (`--max-hold`; default none):
    /// recorded on the Lease and each fence; `fences` and `doctor` name a pause held longer.
    pub max_hold: Option<String>,
}

/// `[fence]`: the fence keys and how in-flight reconciles are retired.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct FenceTable {
    /// The annotation prefix (default `flux-handoff.io`).
    pub annotation_prefix: Option<String>,
    /// `ack` (default), `restart` or `none`.
    pub retire: Option<String>,
    /// Wait for targets to be quiet before fencing them.
    pub quiesce: Option<bool>,
}

/// `[controller]`: the Deployment `retire = "restart"` restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ControllerTable {
    /// Default `flux-system`.
    pub namespace: Option<String>,
    /// Default `kustomize-controller`.
    pub name: Option<String>,
}

/// `[[targets]]`: one object to pause.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TargetTable {
    /// `Kustomization` (default) or `HelmRelease` (or `ks`, `hr`).
    #[serde(default = "default_kind")]
    pub kind: String,
    /// Default: the caller's default namespace.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
    /// The parent, `[namespace/]name`, or `none` (default: from the target's labels).
    pub parent: Option<String>,
}

fn default_kind() -> String {
    "Kustomization".into()
}

impl TargetTable {
    /// A Kustomization target named `name`, in the default namespace, parent from its labels.
    #[must_use]
    pub fn new(name: &str) -> Self {
        Self {
            kind: default_kind(),
            namespace: None,
            name: name.into(),
            parent: None,
        }
    }
}

/// The config file's session tables (all optional).
#[derive(Debug, Clone, Copy, Default)]
pub struct Tables<'a> {
    /// `[lease]`.
    pub lease: Option<&'a LeaseTable>,
    /// `[fence]`.
    pub fence: Option<&'a FenceTable>,
    /// `[controller]`.
    pub controller: Option<&'a ControllerTable>,
    /// `[[targets]]`, used when no target flag is given.
    pub targets: &'a [TargetTable],
    /// `[recovery]` ([`plan`] only).
    pub recovery: Option<&'a RecoveryTable>,
    /// `[ghcr]` ([`ghcr_plan`], [`ghcr_credential`] and [`ghcr_route`] only).
    pub ghcr: Option<&'a GhcrSettings>,
}

/// The caller's layer (flags), over the tables.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Flags {
    /// The namespace of names given without one.
    pub namespace: String,
    /// Targets, `[kind/][namespace/]name`; when empty, the tables' targets.
    pub targets: Vec<String>,
    /// The parent of every target, `[namespace/]name` or `none`.
    pub parent: Option<String>,
    /// `ack`, `restart` or `none`.
    pub retire: Option<String>,
    /// Wait for targets to be quiet before fencing them.
    pub quiesce: bool,
    /// The Lease, `[namespace/]name`.
    pub lease: Option<String>,
    /// The controller Deployment, `[namespace/]name`.
    pub controller: Option<String>,
    /// Why; recorded on each fenced object.
    pub reason: Option<String>,
    /// The budget of the whole pause.
    pub timeout: Duration,
    /// A cap on each single wait.
    pub wait_timeout: Option<Duration>,
    /// The spacing of the proof's passes and of every poll.
    pub interval: Duration,
    /// The holder identity instead of a generated one ([`plan`] only).
    pub holder: Option<String>,
    /// How long the pause is meant to last, over `[lease] max_hold` ([`plan`] only).
    pub max_hold: Option<String>,
    /// How long to wait for a live holder's Lease, over `[lease] wait` ([`plan`] only).
    pub wait_lease: Option<Duration>,
    /// Recover a finished CI run's hold first, or `[recovery] recover_finished_runs = true`
    /// ([`plan`] only).
    pub recover_finished_runs: bool,
    /// The GitHub token file for `recover_finished_runs`, over `[recovery]
    /// github_token_file` ([`plan`] only).
    pub github_token_file: Option<PathBuf>,
    /// The GHCR flags, over `[ghcr]` ([`ghcr_plan`], [`ghcr_credential`] and [`ghcr_route`]
    /// only).
    pub ghcr: GhcrSettings,
}

impl Flags {
    /// No flag given, names defaulting to `namespace`, and the CLI's default timings (300 s
    /// budget, 2 s interval).
    #[must_use]
    pub fn new(namespace: &str) -> Self {
        Self {
            namespace: namespace.into(),
            targets: Vec::new(),
            parent: None,
            retire: None,
            quiesce: false,
            lease: None,
            controller: None,
            reason: None,
            timeout: Duration::from_mins(5),
            wait_timeout: None,
            interval: Duration::from_secs(2),
            holder: None,
            max_hold: None,
            wait_lease: None,
            recover_finished_runs: false,
            github_token_file: None,
            ghcr: GhcrSettings::default(),
        }
    }
}

/// What a handoff command does, resolved once by [`plan`] before any request.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Plan {
    /// Targets, Lease (with its max-hold), holder, budgets, fence keys and the evidence of
    /// `recover_finished_runs`; [`SessionOptions::validate`] passed.
    pub options: SessionOptions,
    /// How long to wait for a live holder's Lease: the flag, else `[lease] wait`, else none.
    pub lease_wait: LeaseWait,
}

/// Resolves `flags` over `file` (the config file's tables) over the defaults into one
/// validated [`Plan`]: the options
/// of [`resolve`], then the holder, the max-hold, the evidence of `recover_finished_runs`,
/// [`SessionOptions::validate`], and the Lease wait.
///
/// The environment enters through `github`, called only when `recover_finished_runs` (the
/// flag or `[recovery]`) asks for it, with the token file flag and `[recovery]`: it builds
/// the GitHub Actions evidence source (a program passes `RecoveryTable::github` of
/// flux-fence's `github` feature, which reads `GITHUB_REPOSITORY` and the token; a test
/// passes a stub). The function itself reads nothing.
///
/// # Errors
///
/// One line naming the flag or the table key, for a usage error.
pub fn plan<G>(flags: &Flags, file: &Tables<'_>, github: G) -> Result<Plan, String>
where
    G: FnOnce(Option<&Path>, &RecoveryTable) -> Result<Arc<dyn LivenessSource>, String>,
{
    let mut opts = resolve(flags, file)?;
    if let Some(h) = &flags.holder {
        opts.holder = Some(h.parse().map_err(|e| format!("--holder: {e}"))?);
    }
    if let Some(text) = &flags.max_hold {
        let d = parse_max_hold(text).map_err(|e| format!("--max-hold: {e}"))?;
        opts.lease.max_hold = Some(d);
    }
    let recovery = file.recovery.cloned().unwrap_or_default();
    if flags.recover_finished_runs || recovery.recover_finished_runs == Some(true) {
        let source = github(flags.github_token_file.as_deref(), &recovery)
            .map_err(|e| format!("--recover-finished-runs: {e}"))?;
        opts.recover_finished_runs = Some(source);
    }
    opts.validate().map_err(|e| e.to_string())?;
    let wait = file.lease.and_then(|l| l.wait.as_deref());
    let budget = match (flags.wait_lease, wait) {
        (Some(d), _) => d,
        (None, Some(text)) => {
            parse_duration(text).map_err(|e| format!("config: lease.wait: {e}"))?
        }
        (None, None) => Duration::ZERO,
    };
    Ok(Plan {
        options: opts,
        lease_wait: LeaseWait::new(budget),
    })
}

/// Parses a duration such as `300s`, `5m`, `1m30s`, `1.5s` or `250ms` (the `humantime`
/// forms); a bare number is seconds. Anything above [`MAX_DURATION`] (including values that
/// overflow) is refused with one line.
///
/// # Errors
///
/// One line naming the text.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let too_large = || {
        format!(
            "duration {text:?} is too large (at most {}h)",
            MAX_DURATION.as_secs() / 3600
        )
    };
    let d = if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse()
            .map(Duration::from_secs)
            .map_err(|_| too_large())?
    } else {
        humantime::parse_duration(s).map_err(|e| match e {
            humantime::DurationError::NumberOverflow => too_large(),
            _ if s.is_empty() => "empty duration".into(),
            _ => format!("invalid duration {text:?} (use e.g. 500ms, 30s, 5m, 1h)"),
        })?
    };
    if d > MAX_DURATION {
        return Err(too_large());
    }
    Ok(d)
}

/// Parses a max-hold (`--max-hold`, `[lease] max_hold`): a duration as [`parse_duration`]
/// reads it, above zero. One line naming the text otherwise.
fn parse_max_hold(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err(format!(
            "max-hold {text:?} must be above zero (e.g. 30m, 2h); leave it out for no limit"
        ));
    }
    Ok(d)
}

/// Resolves `flags` over `file` into checked options: the targets, Lease, controller, fence
/// keys and budgets, the part of [`plan`] that needs no holder and no environment
/// ([`SessionOptions::validate`] is the caller's).
///
/// # Errors
///
/// One line naming the flag or the table key, for a usage error.
pub fn resolve(flags: &Flags, file: &Tables<'_>) -> Result<SessionOptions, String> {
    let ns = flags.namespace.as_str();
    let mut targets = Vec::new();
    if flags.targets.is_empty() {
        for t in file.targets {
            let kind = kind_resource(&t.kind).ok_or_else(|| {
                format!(
                    "config: target {:?}: unknown kind {:?} (Kustomization, HelmRelease, \
                     ResourceSet, FluxInstance)",
                    t.name, t.kind
                )
            })?;
            let tns = t.namespace.clone().unwrap_or_else(|| ns.to_string());
            let (_, name) = split_namespaced(&t.name, &tns).map_err(|e| e.to_string())?;
            let parent = parent_spec(t.parent.as_deref().or(flags.parent.as_deref()), &tns)?;
            targets.push(TargetSpec::new(ObjectRef::new(kind, tns, name)).with_parent(parent));
        }
    } else {
        for t in &flags.targets {
            let (object, replicas) = parse_target(t, ns).map_err(|e| format!("--target: {e}"))?;
            let parent = parent_spec(flags.parent.as_deref(), &object.namespace)?;
            let spec = match replicas {
                Some(n) => TargetSpec::scaled(object, n),
                None => TargetSpec::new(object),
            };
            targets.push(spec.with_parent(parent));
        }
    }
    if targets.is_empty() {
        return Err(
            "no target: pass --target [kind/][namespace/]name or add [[targets]] to the config"
                .into(),
        );
    }
    let fence = file.fence;
    let strategy = match flags
        .retire
        .as_deref()
        .or_else(|| fence.and_then(|f| f.retire.as_deref()))
    {
        Some(s) => s.parse::<Strategy>()?,
        None => Strategy::Ack,
    };
    let keys = match fence.and_then(|f| f.annotation_prefix.as_deref()) {
        Some(p) => AnnotationKeys::checked(p).map_err(|e| format!("config: fence.{e}"))?,
        None => AnnotationKeys::default(),
    };
    if let Some(r) = &flags.reason {
        flux_fence::decide::validate_reason(r).map_err(|e| format!("--reason: {e}"))?;
    }
    if flags.interval.is_zero() || flags.interval > flags.timeout {
        return Err("--interval must be above zero and not above --timeout".into());
    }
    let mut opts = SessionOptions::new(targets);
    opts.strategy = strategy;
    opts.quiesce = flags.quiesce || fence.and_then(|f| f.quiesce).unwrap_or(false);
    opts.lease = lease_config(flags, file.lease)?;
    opts.controller = controller_ref(flags, file.controller)?;
    // The Lease's parked and duration marks live under the same prefix as the fences.
    opts.lease = opts.lease.with_keys(&keys);
    opts.keys = keys;
    opts.reason.clone_from(&flags.reason);
    opts.timeout = flags.timeout;
    opts.wait_timeout = flags.wait_timeout;
    opts.interval = flags.interval;
    Ok(opts)
}

/// The targets `objects`, already typed (a selection's, listed from the cluster), each with
/// the parent `parent` (the `--parent` flag) names, else the one its labels name.
///
/// # Errors
///
/// One line naming `--parent`, for a usage error.
pub fn targets_of(objects: &[ObjectRef], parent: Option<&str>) -> Result<Vec<TargetSpec>, String> {
    objects
        .iter()
        .map(|o| Ok(TargetSpec::new(o.clone()).with_parent(parent_spec(parent, &o.namespace)?)))
        .collect()
}

fn parent_spec(text: Option<&str>, default_ns: &str) -> Result<ParentSpec, String> {
    match text {
        None => Ok(ParentSpec::FromLabels),
        Some("none") => Ok(ParentSpec::TopLevel),
        Some(p) => {
            let (ns, name) =
                split_namespaced(p, default_ns).map_err(|e| format!("--parent: {e}"))?;
            Ok(ParentSpec::Explicit(ObjectRef::new(
                kustomization_resource(),
                ns,
                name,
            )))
        }
    }
}

fn lease_config(flags: &Flags, table: Option<&LeaseTable>) -> Result<LeaseConfig, String> {
    let mut lease = LeaseConfig::default();
    if let Some(l) = table {
        if let Some(n) = &l.namespace {
            lease.namespace.clone_from(n);
        }
        if let Some(n) = &l.name {
            lease.name.clone_from(n);
        }
        if let Some(d) = &l.duration {
            lease.duration =
                parse_duration(d).map_err(|e| format!("config: lease.duration: {e}"))?;
        }
        if let Some(d) = &l.max_hold {
            let d = parse_max_hold(d).map_err(|e| format!("config: lease.max_hold: {e}"))?;
            lease.max_hold = Some(d);
        }
    }
    if let Some(l) = &flags.lease {
        let (lns, name) = split_namespaced(l, &lease.namespace).map_err(|e| e.to_string())?;
        lease.namespace = lns;
        lease.name = name;
    }
    if lease.duration < Duration::from_secs(2) {
        return Err("lease duration must be at least 2s".into());
    }
    lease.renew_every = (lease.duration / 4).max(Duration::from_millis(500));
    Ok(lease)
}

fn controller_ref(flags: &Flags, table: Option<&ControllerTable>) -> Result<ControllerRef, String> {
    let mut controller = ControllerRef::default();
    if let Some(c) = table {
        if let Some(n) = &c.namespace {
            controller.namespace.clone_from(n);
        }
        if let Some(n) = &c.name {
            controller.name.clone_from(n);
        }
    }
    if let Some(c) = &flags.controller {
        let (namespace, name) =
            split_namespaced(c, &controller.namespace).map_err(|e| e.to_string())?;
        controller = ControllerRef { namespace, name };
    }
    Ok(controller)
}

mod ghcr;

pub use ghcr::{GhcrPlan, ghcr_credential, ghcr_plan, ghcr_route};

#[cfg(test)]
mod tests;
