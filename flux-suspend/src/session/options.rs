//! What a session will do, checked before any request.

use std::sync::Arc;
use std::time::Duration;

use flux_fence::liveness::LivenessSource;
use flux_fence::{AnnotationKeys, Holder, LeaseConfig, ObjectRef};

use crate::io::ControllerRef;
use crate::retire::Strategy;
use crate::session::SessionError;

/// A target, and where its parent comes from.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TargetSpec {
    /// The Flux object to pause.
    pub object: ObjectRef,
    /// The object that applies it.
    pub parent: ParentSpec,
    /// A replicas gate ([`TargetSpec::scaled`]): the count a Deployment target is scaled to
    /// while the pause holds. `None` for a Flux object.
    pub replicas: Option<i32>,
}

impl TargetSpec {
    /// A target whose parent is read from the labels of the Flux object that applies it
    /// ([`ParentSpec::FromLabels`]; none when it has no such labels).
    #[must_use]
    pub fn new(object: ObjectRef) -> Self {
        Self {
            object,
            parent: ParentSpec::FromLabels,
            replicas: None,
        }
    }

    /// A replicas gate: Deployment `object` scaled to `replicas` under the pause of the
    /// Kustomization or `HelmRelease` that applies it (its labels; [`ParentSpec::FromLabels`]), its prior count kept in the fence's record
    /// and restored exactly on release (a count someone else changed meanwhile is withheld,
    /// the fence kept). The pause is proven once the Flux chain is and the Deployment reports
    /// that count with no Pod of any other left.
    ///
    /// ```
    /// use flux_suspend::object::deployment;
    /// use flux_suspend::{SessionOptions, TargetSpec};
    ///
    /// let gate = TargetSpec::scaled(deployment("kube-system", "cluster-autoscaler"), 0);
    /// assert!(SessionOptions::new(vec![gate]).validate().is_ok());
    /// let negative = TargetSpec::scaled(deployment("kube-system", "cluster-autoscaler"), -1);
    /// assert!(SessionOptions::new(vec![negative]).validate().is_err());
    /// ```
    #[must_use]
    pub fn scaled(object: ObjectRef, replicas: i32) -> Self {
        Self {
            replicas: Some(replicas),
            ..Self::new(object)
        }
    }

    /// This target with its parent given.
    #[must_use]
    pub fn with_parent(mut self, parent: ParentSpec) -> Self {
        self.parent = parent;
        self
    }
}

/// Where a target's parent comes from.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ParentSpec {
    /// Read the labels of whichever Flux object applies the target
    /// ([`crate::flux::owner_of`]): a Kustomization's or a `HelmRelease`'s
    /// (`kustomize.toolkit.fluxcd.io/name|namespace`, `helm.toolkit.fluxcd.io/name|namespace`)
    /// make it the parent, paused above the target; a `ResourceSet`'s
    /// (`resourceset.fluxcd.controlplane.io/name|namespace`) pause no parent: the target's fence
    /// freezes it in the set instead. No such labels: a top-level Flux object has no parent; a
    /// replicas gate is refused (accept it with [`ParentSpec::TopLevel`]).
    FromLabels,
    /// A top-level object: no parent (`--parent none`; for a replicas gate no Flux object
    /// applies, what accepts it knowingly).
    TopLevel,
    /// This object.
    Explicit(ObjectRef),
}

/// Everything a [`crate::Session`] needs. Start from [`SessionOptions::new`] (or `Default`)
/// and set what differs; [`SessionOptions::validate`] runs before any request.
///
/// ```
/// use std::time::Duration;
/// use flux_suspend::object::kustomization;
/// use flux_suspend::{SessionOptions, TargetSpec};
///
/// let mut opts = SessionOptions::new(vec![TargetSpec::new(kustomization("flux-system", "apps"))]);
/// opts.timeout = Duration::from_secs(120);
/// opts.reason = Some("rotate the pull secret".into());
/// assert!(opts.validate().is_ok());
/// opts.interval = Duration::from_secs(90);
/// assert!(opts.validate().is_err()); // no room for the proof's two passes
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SessionOptions {
    /// What to pause.
    pub targets: Vec<TargetSpec>,
    /// The transaction's identity; `None` generates one ([`Holder::generate`]).
    pub holder: Option<Holder>,
    /// The coordination Lease.
    pub lease: LeaseConfig,
    /// The fence annotation keys.
    pub keys: AnnotationKeys,
    /// How in-flight reconciles are retired.
    pub strategy: Strategy,
    /// Wait for targets to be quiet before fencing them (implied by [`Strategy::QuietWindow`]).
    pub quiesce: bool,
    /// The controller Deployment [`Strategy::Restart`] restarts.
    pub controller: ControllerRef,
    /// The spacing of the proof's passes and of every poll.
    pub interval: Duration,
    /// The budget of the whole pause: its waits share this one deadline.
    pub timeout: Duration,
    /// A cap on each single wait (`None`: whatever is left of `timeout`).
    pub wait_timeout: Option<Duration>,
    /// Why; recorded on each fenced object (annotation and Event). Never a secret.
    pub reason: Option<String>,
    /// When set, a Lease or fence of the chain held by a CI holder whose run attempt this
    /// source proves finished is recovered before the preflight judges the chain
    /// ([`crate::session::Recovered`]); any other answer refuses as without it.
    pub recover_finished_runs: Option<Arc<dyn LivenessSource>>,
    /// How long the work needs between SIGTERM and SIGKILL (`run --grace`): when no renewal
    /// of the Lease succeeds in time, the work is stopped this long (at most a quarter of the
    /// time left) before it is hurried, and hurried before the holder's own deadline
    /// (flux-fence's `lease::deadline`).
    pub kill_grace: Duration,
    /// Gate a Deployment that a `HorizontalPodAutoscaler` or a KEDA `ScaledObject` targets
    /// (`--allow-autoscaler`): without it the preflight refuses such a replicas gate before
    /// any write, naming the autoscaler and its fix ([`crate::autoscaler`]).
    pub allow_autoscaler: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            targets: Vec::new(),
            holder: None,
            lease: LeaseConfig::default(),
            keys: AnnotationKeys::default(),
            strategy: Strategy::Ack,
            quiesce: false,
            controller: ControllerRef::default(),
            interval: Duration::from_secs(2),
            timeout: Duration::from_mins(5),
            wait_timeout: None,
            reason: None,
            recover_finished_runs: None,
            kill_grace: Duration::from_secs(5),
            allow_autoscaler: false,
        }
    }
}

impl SessionOptions {
    /// The defaults with these targets.
    #[must_use]
    pub fn new(targets: Vec<TargetSpec>) -> Self {
        Self {
            targets,
            ..Self::default()
        }
    }

    /// Checks everything that needs no cluster.
    ///
    /// # Errors
    /// [`SessionError::Invalid`] with one line naming the option.
    pub fn validate(&self) -> Result<(), SessionError> {
        let invalid = |s: String| Err(SessionError::Invalid(s));
        if self.targets.is_empty() {
            return invalid("no target to pause".into());
        }
        if self.interval.is_zero() {
            return invalid("the interval must be above zero".into());
        }
        // The proof needs two passes spaced by the interval, and room for one reset.
        match self.interval.checked_mul(2) {
            Some(two) if two <= self.timeout => {}
            _ => {
                return invalid(format!(
                    "the interval ({}s) leaves no room for the proof's two passes within the \
                     timeout ({}s): the timeout must be at least twice the interval",
                    self.interval.as_secs_f64(),
                    self.timeout.as_secs_f64()
                ));
            }
        }
        if let Some(cap) = self.wait_timeout
            && self.interval.checked_mul(2).is_none_or(|two| two > cap)
        {
            return invalid(format!(
                "the wait timeout ({}s) must be at least twice the interval ({}s)",
                cap.as_secs_f64(),
                self.interval.as_secs_f64()
            ));
        }
        if let Some(r) = &self.reason {
            flux_fence::decide::validate_reason(r)
                .map_err(|e| SessionError::Invalid(format!("reason: {e}")))?;
        }
        self.restart_fits_targets().map_err(SessionError::Invalid)?;
        if self.lease.renew_every.is_zero() || self.lease.renew_every >= self.lease.duration {
            return invalid("the Lease must be renewed more often than its duration".into());
        }
        if self.lease.max_hold.is_some_and(|d| d.is_zero()) {
            return invalid("the max-hold must be above zero".into());
        }
        for t in &self.targets {
            let gate = crate::object::is_gate_kind(&t.object.resource);
            match t.replicas {
                Some(n) if n < 0 => {
                    return invalid(format!("{}: a replica count cannot be negative", t.object));
                }
                Some(_) if !gate => {
                    return invalid(format!(
                        "{}: only a Deployment takes a replica count",
                        t.object
                    ));
                }
                None if gate => {
                    return invalid(format!(
                        "{}: a Deployment is a target only with the count to scale it to \
                         (deploy/NS/NAME=N)",
                        t.object
                    ));
                }
                _ => {}
            }
            let is_parent = self
                .targets
                .iter()
                .any(|o| o.parent == ParentSpec::Explicit(t.object.clone()));
            if is_parent {
                return invalid(format!("{} is both a target and a parent", t.object));
            }
        }
        Ok(())
    }
}

impl SessionOptions {
    /// [`Strategy::Restart`] restarts ONE controller, so it must be the one that reconciles the
    /// targets: a `HelmRelease` target needs a controller whose name contains
    /// `helm-controller`, a Kustomization target one whose name does not; targets of both
    /// kinds cannot share one restart. Refused before any request, rather than restarting a
    /// controller that retires nothing.
    fn restart_fits_targets(&self) -> Result<(), String> {
        if self.strategy != Strategy::Restart {
            return Ok(());
        }
        let helm = self
            .targets
            .iter()
            .filter(|t| t.object.resource.kind == "HelmRelease")
            .count();
        let controller = &self.controller;
        let helm_controller = controller.name.contains("helm-controller");
        if helm > 0 && helm < self.targets.len() {
            return Err(
                "--retire restart: HelmRelease and Kustomization targets are reconciled \
                 by different controllers; use --retire ack or pause them separately"
                    .into(),
            );
        }
        if helm > 0 && !helm_controller {
            return Err(format!(
                "--retire restart with a HelmRelease target must restart helm-controller, not \
                 {controller}: pass --controller <namespace>/helm-controller, or use --retire ack"
            ));
        }
        if helm == 0 && helm_controller {
            return Err(format!(
                "--retire restart with a Kustomization target must restart \
                 kustomize-controller, not {controller}"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{helm_release, kustomization};

    fn opts() -> SessionOptions {
        SessionOptions::new(vec![TargetSpec::new(kustomization("flux-system", "apps"))])
    }

    type Change = Box<dyn Fn(&mut SessionOptions)>;

    #[test]
    fn each_invalid_option_is_refused_with_its_own_line() {
        let table: Vec<(&str, Change)> = vec![
            ("no target", Box::new(|o| o.targets.clear())),
            ("above zero", Box::new(|o| o.interval = Duration::ZERO)),
            ("twice the interval", Box::new(|o| o.interval = o.timeout)),
            (
                "twice the interval",
                Box::new(|o| o.interval = Duration::MAX),
            ),
            ("reason", Box::new(|o| o.reason = Some("a\nb".into()))),
            (
                "wait timeout",
                Box::new(|o| o.wait_timeout = Some(o.interval)),
            ),
            (
                "renewed more often",
                Box::new(|o| o.lease.renew_every = o.lease.duration),
            ),
            (
                "max-hold must be above zero",
                Box::new(|o| o.lease.max_hold = Some(Duration::ZERO)),
            ),
            (
                "both a target and a parent",
                Box::new(|o| {
                    let apps = kustomization("flux-system", "apps");
                    o.targets.push(
                        TargetSpec::new(kustomization("flux-system", "b"))
                            .with_parent(ParentSpec::Explicit(apps)),
                    );
                }),
            ),
            (
                "must restart helm-controller",
                Box::new(|o| {
                    o.strategy = Strategy::Restart;
                    o.targets = vec![TargetSpec::new(helm_release("apps", "podinfo"))];
                }),
            ),
            (
                "different controllers",
                Box::new(|o| {
                    o.strategy = Strategy::Restart;
                    o.controller.name = "helm-controller".into();
                    o.targets
                        .push(TargetSpec::new(helm_release("apps", "podinfo")));
                }),
            ),
            (
                "must restart kustomize-controller",
                Box::new(|o| {
                    o.strategy = Strategy::Restart;
                    o.controller.name = "helm-controller".into();
                }),
            ),
        ];
        for (want, change) in table {
            let mut o = opts();
            change(&mut o);
            let err = o.validate().expect_err(want).to_string();
            assert!(err.contains(want), "{want}: {err}");
        }
        assert!(opts().validate().is_ok());
    }

    #[test]
    fn a_restart_of_the_controller_that_reconciles_the_targets_is_valid() {
        let mut helm = opts();
        helm.strategy = Strategy::Restart;
        helm.controller.name = "helm-controller".into();
        helm.targets = vec![TargetSpec::new(helm_release("apps", "podinfo"))];
        assert!(helm.validate().is_ok());
        let mut ks = opts();
        ks.strategy = Strategy::Restart;
        assert!(ks.validate().is_ok());
        let mut ack = helm.clone();
        ack.strategy = Strategy::Ack;
        ack.controller = ControllerRef::default();
        assert!(ack.validate().is_ok());
    }
}
