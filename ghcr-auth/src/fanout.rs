//! The fan-out of a credential beyond plain pull Secrets, and its pure decisions: which steps
//! run in which order, whether the fan-out is complete enough to start, and whether an
//! External Secrets object has synced after our request.
//!
//! A [`Route`] has up to four parts, written in this order:
//! 1. **direct** consumer pull Secrets (`kubernetes.io/dockerconfigjson`, as before);
//! 2. **staged keys**: one data key of any Secret (`namespace/name:key`, [`crate::stage`]);
//! 3. **External Secrets** ([`EsoRoute`]): a `PushSecret` that pushes a staged key to the
//!    secret store, force-synced and awaited; then an `ExternalSecret` of one name in every
//!    consumer namespace, each force-synced, awaited, and its target Secret read back until it
//!    holds the proven Docker config. The tool never writes those ESO-managed Secrets;
//! 4. the **root** Secret Flux pulls with, last, by CAS.
//!
//! [`decide`] refuses an *incomplete* fan-out (a CRD, the `PushSecret`, a consumer's
//! `ExternalSecret` or a staging Secret missing, or a `PushSecret` that does not read the staged
//! key) before any write, unless the caller allows it (bootstrap): then root, staging, root.

use std::fmt;

use crate::plan::SecretTarget;
use crate::reassert::{Consumers, TargetSpec};
use crate::stage::KeyTarget;

/// The External Secrets part of a route.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EsoRoute {
    /// The `PushSecret` to force-sync, e.g. `flux-system/seed-ghcr`.
    pub push_secret: SecretTarget,
    /// The `ExternalSecret`'s name in every consumer namespace, e.g. `ghcr-auth`.
    pub external_secret: String,
    /// The consumer namespaces.
    pub consumers: Consumers,
}

impl EsoRoute {
    /// Force-sync `push_secret`, then wait for the `ExternalSecret` `external_secret` in each
    /// of `consumers`.
    #[must_use]
    pub fn new(
        push_secret: SecretTarget,
        external_secret: impl Into<String>,
        consumers: Consumers,
    ) -> Self {
        Self {
            push_secret,
            external_secret: external_secret.into(),
            consumers,
        }
    }
}

/// Everything one reassertion writes or drives.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Route {
    /// Direct consumer pull Secrets and the root Secret (the root is written last).
    pub direct: TargetSpec,
    /// Staged data keys.
    pub keys: Vec<KeyTarget>,
    /// The External Secrets route, if any.
    pub eso: Option<EsoRoute>,
    /// Bootstrap: an incomplete fan-out runs root, staging, root instead of refusing (the
    /// caller runs it without a Flux pause).
    pub allow_incomplete: bool,
}

impl Route {
    /// The direct consumer and root Secrets of `direct` only: no staged key, no External
    /// Secrets, an incomplete fan-out refused. Add the rest with the `with_` methods.
    #[must_use]
    pub fn new(direct: TargetSpec) -> Self {
        Self {
            direct,
            keys: Vec::new(),
            eso: None,
            allow_incomplete: false,
        }
    }

    /// Whether this is the plain route: the direct consumer and root Secrets only (no staged
    /// key, no External Secrets, no bootstrap).
    #[must_use]
    pub fn is_plain(&self) -> bool {
        self.keys.is_empty() && self.eso.is_none() && !self.allow_incomplete
    }

    /// The staged data keys, written after the root Secret.
    #[must_use]
    pub fn with_keys(mut self, keys: Vec<KeyTarget>) -> Self {
        self.keys = keys;
        self
    }

    /// The External Secrets route.
    #[must_use]
    pub fn with_eso(mut self, eso: EsoRoute) -> Self {
        self.eso = Some(eso);
        self
    }

    /// Bootstrap: run an incomplete fan-out (root, staging, root) instead of refusing it; the
    /// caller runs it without a Flux pause.
    #[must_use]
    pub fn with_allow_incomplete(mut self, allow: bool) -> Self {
        self.allow_incomplete = allow;
        self
    }
}

/// What a `PushSecret` reads, as observed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PushView {
    /// `spec.selector.secret.name` (in the `PushSecret`'s namespace).
    pub source_secret: Option<String>,
    /// `spec.data[].match.secretKey` (an empty one pushes the whole Secret).
    pub keys: Vec<String>,
}

/// One consumer's `ExternalSecret`, as observed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ExternalView {
    /// `spec.refreshPolicy` is `CreatedOnce`: ESO never refreshes it again, so it cannot be
    /// force-synced.
    pub created_once: bool,
}

/// What the fan-out found before any write.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Observed {
    /// The `externalsecrets.external-secrets.io` CRD serves the version used.
    pub external_secret_crd: bool,
    /// The `pushsecrets.external-secrets.io` CRD serves the version used.
    pub push_secret_crd: bool,
    /// The `PushSecret` (`None`: absent, or not looked up because its CRD is missing).
    pub push: Option<PushView>,
    /// Each consumer's `ExternalSecret`, `namespace/name` (`None`: absent).
    pub externals: Vec<(SecretTarget, Option<ExternalView>)>,
    /// Each staged key's Secret and whether it exists.
    pub staging: Vec<(KeyTarget, bool)>,
}

/// One thing that makes the fan-out incomplete.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missing {
    /// A CRD does not serve the version used, e.g. `externalsecrets.external-secrets.io/v1`.
    Crd(&'static str),
    /// The `PushSecret` does not exist.
    PushSecret(SecretTarget),
    /// A consumer's `ExternalSecret` does not exist.
    ExternalSecret(SecretTarget),
    /// A consumer's `ExternalSecret` has `refreshPolicy: CreatedOnce` (never re-synced).
    CreatedOnce(SecretTarget),
    /// A staged key's Secret does not exist (it is never created here).
    StagingSecret(SecretTarget),
    /// The `PushSecret` does not push any staged key.
    PushReadsNoStagedKey(SecretTarget),
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Crd(crd) => write!(f, "CRD {crd}"),
            Self::PushSecret(t) => write!(f, "PushSecret {t}"),
            Self::ExternalSecret(t) => write!(f, "ExternalSecret {t}"),
            Self::CreatedOnce(t) => write!(f, "ExternalSecret {t} (refreshPolicy CreatedOnce)"),
            Self::StagingSecret(t) => write!(f, "staging Secret {t}"),
            Self::PushReadsNoStagedKey(t) => {
                write!(f, "PushSecret {t} pushing a staged key (it reads none)")
            }
        }
    }
}

/// One step of a run, in the order [`decide`] returns them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// Write the direct consumer Secrets.
    Direct,
    /// Stage these keys.
    Stage(Vec<KeyTarget>),
    /// Force-sync the `PushSecret` and wait until it reports synced after the request.
    Push,
    /// Force-sync every consumer's `ExternalSecret` and wait until each reports synced after the
    /// request and its target Secret holds the credential.
    Pull,
    /// Write the root Secret (CAS; with the pause recheck when paused).
    Root,
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run these steps in order.
    Run {
        /// The steps.
        steps: Vec<Step>,
        /// Whether this is the bootstrap order for an incomplete fan-out.
        bootstrap: bool,
        /// What is missing (empty unless bootstrap).
        missing: Vec<Missing>,
    },
    /// Refuse before any write: the fan-out is incomplete.
    Incomplete(Vec<Missing>),
}

/// The one line of an incomplete fan-out.
#[must_use]
pub fn incomplete_line(missing: &[Missing]) -> String {
    let list: Vec<String> = missing.iter().map(ToString::to_string).collect();
    format!(
        "fan-out incomplete, nothing written: missing {} (pass --allow-incomplete-fanout to \
         bootstrap: root, staging, root, without a Flux pause)",
        list.join(", ")
    )
}

/// What is missing for `route` given `observed`. Pure.
#[must_use]
pub fn missing(route: &Route, observed: &Observed) -> Vec<Missing> {
    let mut out = Vec::new();
    for (key, exists) in &observed.staging {
        if !exists {
            out.push(Missing::StagingSecret(key.secret.clone()));
        }
    }
    let Some(eso) = &route.eso else {
        return out;
    };
    if !observed.external_secret_crd {
        out.push(Missing::Crd("externalsecrets.external-secrets.io/v1"));
    }
    if !observed.push_secret_crd {
        out.push(Missing::Crd("pushsecrets.external-secrets.io/v1alpha1"));
    }
    if observed.push_secret_crd {
        match &observed.push {
            None => out.push(Missing::PushSecret(eso.push_secret.clone())),
            Some(view) => {
                let reads_staged = route.keys.iter().any(|k| {
                    k.secret.namespace == eso.push_secret.namespace
                        && view.source_secret.as_deref() == Some(k.secret.name.as_str())
                        && view.keys.iter().any(|x| x.is_empty() || *x == k.key)
                });
                if !reads_staged {
                    out.push(Missing::PushReadsNoStagedKey(eso.push_secret.clone()));
                }
            }
        }
    }
    if observed.external_secret_crd {
        for (target, view) in &observed.externals {
            match view {
                None => out.push(Missing::ExternalSecret(target.clone())),
                Some(v) if v.created_once => out.push(Missing::CreatedOnce(target.clone())),
                Some(_) => {}
            }
        }
    }
    out
}

/// The steps of `route` given what was observed before any write. Pure.
///
/// # Guarantees
/// - Complete: direct consumers, staged keys, push, pull, and the root last; a step only when
///   the route has that part.
/// - Incomplete and not allowed: [`Decision::Incomplete`], nothing runs.
/// - Incomplete and allowed (bootstrap): root, the staged keys whose Secret exists, the direct
///   consumers, root again; no ESO step.
#[must_use]
pub fn decide(route: &Route, observed: &Observed) -> Decision {
    let missing = missing(route, observed);
    let has_root = route.direct.root.is_some();
    let has_direct = !matches!(&route.direct.consumers, Consumers::Namespaces(l) if l.is_empty());
    if missing.is_empty() {
        let mut steps = Vec::new();
        if has_direct {
            steps.push(Step::Direct);
        }
        if !route.keys.is_empty() {
            steps.push(Step::Stage(route.keys.clone()));
        }
        if route.eso.is_some() {
            steps.extend([Step::Push, Step::Pull]);
        }
        if has_root {
            steps.push(Step::Root);
        }
        return Decision::Run {
            steps,
            bootstrap: false,
            missing,
        };
    }
    if !route.allow_incomplete {
        return Decision::Incomplete(missing);
    }
    let present: Vec<KeyTarget> = route
        .keys
        .iter()
        .filter(|k| !missing.contains(&Missing::StagingSecret(k.secret.clone())))
        .cloned()
        .collect();
    let mut steps = Vec::new();
    if has_root {
        steps.push(Step::Root);
    }
    if !present.is_empty() {
        steps.push(Step::Stage(present));
    }
    if has_direct {
        steps.push(Step::Direct);
    }
    if has_root {
        steps.push(Step::Root);
    }
    Decision::Run {
        steps,
        bootstrap: true,
        missing,
    }
}

/// An ESO object's sync status, as read (`status.syncedResourceVersion`, the `Ready`
/// condition, `metadata.generation`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SyncStatus {
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.syncedResourceVersion`: ESO sets it to `<generation>-<hash of annotations and
    /// labels>` of the object it synced, on success only.
    pub synced_resource_version: Option<String>,
    /// The `Ready` condition's status (`True`/`False`), if any.
    pub ready: Option<String>,
    /// The `Ready` condition's reason, e.g. `SecretSynced`, `SecretSyncedError`, `Errored`.
    pub reason: Option<String>,
}

/// Whether ESO reports the object synced **after our force-sync request**: `Ready=True` and a
/// `syncedResourceVersion` of the current generation that differs from the one read before our
/// request. Our request changes the object's annotations (a fresh nonce), so every sync of it
/// records a new value (ESO v0.16: `GetResourceVersion` in pkg/controllers/util). Pure.
///
/// # Caveats
/// A sync of an older, unsynced change by someone else that finishes just after our request
/// also records a new value; the target Secret's read-back (for `ExternalSecrets`) is what proves
/// the credential arrived.
#[must_use]
pub fn synced_since(before: Option<&str>, now: &SyncStatus) -> bool {
    let Some(rv) = now.synced_resource_version.as_deref() else {
        return false;
    };
    now.ready.as_deref() == Some("True")
        && Some(rv) != before
        && rv
            .split_once('-')
            .is_some_and(|(g, _)| g == now.generation.to_string())
}

#[cfg(test)]
mod tests;
