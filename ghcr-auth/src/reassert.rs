//! The thin I/O layer of reassertion: read each Secret, ask [`plan()`](crate::plan::plan), send the
//! one CAS write, judge the write's own response.
//!
//! # Fan-out
//!
//! Consumer Secrets are written at most [`FANOUT_CONCURRENCY`] at a time, starting with one
//! and allowing one more in flight for each that succeeded (a systematic failure, e.g. no
//! rights, costs one write, not a burst); the root Secret is written last, alone, and only
//! after every consumer holds the credential. The first consumer
//! that does not succeed (or a failing gate, or an API error) stops the fan-out: no write
//! starts after that is known; the writes already in flight finish, so their outcome is known
//! and reported (never abandoned mid-air); every consumer not started is
//! [`SecretOutcome::NotAttempted`], and so is the root.

use std::fmt;
use std::future::Future;

use flux_fence::LeaseHandle;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, ListParams, Patch};
use tracing::{info, warn};

use crate::credential::DockerConfig;
use crate::error::{BoxError, GhcrError};
use crate::plan::{
    Drift, Refusal, SecretPlan, SecretTarget, TargetRole, holds, order_targets, plan_stamped,
};

/// How many consumer Secrets a reassertion writes at once: enough to hide the round trip to
/// the API server, few enough that the writes of one run stay a small burst (the API server's
/// default in-flight limit for mutations is 200).
pub const FANOUT_CONCURRENCY: usize = 64;

/// A check run before every write, e.g. "assert the handoff Lease is still ours". One method,
/// implemented for async closures `Fn() -> impl Future<Output = Result<(), BoxError>>`.
///
/// Meant to be implemented. The contract: it fails closed — `Err` whenever it cannot tell that
/// the next write is allowed (a timeout included) — and its error text holds no secret.
pub trait WriteGate: Send + Sync {
    /// `Ok` to allow the next write; `Err` stops the reassertion before it writes.
    fn check(&self) -> BoxFuture<'_, Result<(), BoxError>>;
}

impl<F, Fut> WriteGate for F
where
    F: Fn() -> Fut + Send + Sync,
    Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    fn check(&self) -> BoxFuture<'_, Result<(), BoxError>> {
        Box::pin(self())
    }
}

/// The handoff Lease as a gate: [`LeaseHandle::assert`] (renew and read back) before each write;
/// a lost Lease fails with [`flux_fence::FenceError::LeaseLost`] as the gate error's source.
impl WriteGate for LeaseHandle {
    fn check(&self) -> BoxFuture<'_, Result<(), BoxError>> {
        Box::pin(async move { self.assert().await.map_err(|e| Box::new(e) as BoxError) })
    }
}

/// A gate that always allows (for callers without a Lease, and tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoGate;

impl WriteGate for NoGate {
    fn check(&self) -> BoxFuture<'_, Result<(), BoxError>> {
        Box::pin(async { Ok(()) })
    }
}

/// Which consumer namespaces get the Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Consumers {
    /// These namespaces, in this order.
    Namespaces(Vec<String>),
    /// Every namespace matching this label selector (sorted by name; terminating ones skipped).
    Selector(String),
}

/// What to reassert: the consumer Secrets (all named `secret_name`) and the root Secret.
/// Build it with [`TargetSpec::new`] and [`TargetSpec::with_root`]; it may grow fields.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TargetSpec {
    /// The Secret's name in every consumer namespace.
    pub secret_name: String,
    /// The consumer namespaces.
    pub consumers: Consumers,
    /// The Secret Flux itself pulls with, e.g. `flux-system/ghcr-auth`; written last.
    pub root: Option<SecretTarget>,
}

impl TargetSpec {
    /// The Secret `secret_name` in each of `consumers`, and no root Secret.
    #[must_use]
    pub fn new(secret_name: impl Into<String>, consumers: Consumers) -> Self {
        Self {
            secret_name: secret_name.into(),
            consumers,
            root: None,
        }
    }

    /// The Secret Flux itself pulls with, written after every consumer.
    #[must_use]
    pub fn with_root(mut self, root: SecretTarget) -> Self {
        self.root = Some(root);
        self
    }
}

/// What happened to one Secret. Every variant but the first four means "not done".
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecretOutcome {
    /// Created; the server's answer to the write holds the credential.
    Created {
        /// resourceVersion after the write.
        resource_version: String,
    },
    /// Patched (CAS); the server's answer to the write holds the credential.
    Updated {
        /// Why it was written.
        drift: Drift,
        /// resourceVersion after the write.
        resource_version: String,
    },
    /// Already held the credential; nothing written.
    Unchanged {
        /// resourceVersion read.
        resource_version: String,
    },
    /// The write's response was lost, and a re-read shows exactly the intended content.
    Adopted {
        /// resourceVersion re-read.
        resource_version: String,
    },
    /// Someone else changed (or created) it between our read and our write (409/422). Nothing
    /// was overwritten; re-run to decide again on a fresh read.
    Moved,
    /// The API server refused the verb for our identity (403).
    Forbidden {
        /// The verb that was refused.
        verb: &'static str,
    },
    /// The namespace does not exist.
    NamespaceMissing,
    /// Not written by policy.
    Refused(Refusal),
    /// Written, but the server's answer did not show the credential on the object read (a
    /// mutating admission changed it, or the object was replaced). The name is kept for
    /// compatibility: this was judged from a second read before.
    ReadBackDiffers,
    /// Not attempted: another target did not succeed before this one was started (for the
    /// root: any consumer did not succeed).
    NotAttempted,
}

impl SecretOutcome {
    /// A fixed word for the outcome (`created`, `namespace_missing`, ...): for logs, counters
    /// and JSON keys. It names no Secret and carries no value.
    #[must_use]
    pub fn word(&self) -> &'static str {
        match self {
            Self::Created { .. } => "created",
            Self::Updated { .. } => "updated",
            Self::Unchanged { .. } => "unchanged",
            Self::Adopted { .. } => "adopted",
            Self::Moved => "moved",
            Self::Forbidden { .. } => "forbidden",
            Self::NamespaceMissing => "namespace_missing",
            Self::Refused(_) => "refused",
            Self::ReadBackDiffers => "read_back_differs",
            Self::NotAttempted => "not_attempted",
        }
    }

    /// Whether the Secret now holds the credential.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        matches!(
            self,
            Self::Created { .. }
                | Self::Updated { .. }
                | Self::Unchanged { .. }
                | Self::Adopted { .. }
        )
    }
}

/// The result of one reassertion, in write order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a failed or moved Secret is in the report"]
#[non_exhaustive]
pub struct ReassertReport {
    /// Each target with its role and outcome.
    pub results: Vec<(TargetRole, SecretTarget, SecretOutcome)>,
}

impl ReassertReport {
    /// Whether every target holds the credential.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.results.iter().all(|(_, _, o)| o.is_ok())
    }

    /// How many Secrets were written (created, updated or adopted).
    #[must_use]
    pub fn writes(&self) -> usize {
        self.results
            .iter()
            .filter(|(_, _, o)| {
                matches!(
                    o,
                    SecretOutcome::Created { .. }
                        | SecretOutcome::Updated { .. }
                        | SecretOutcome::Adopted { .. }
                )
            })
            .count()
    }
}

impl fmt::Display for ReassertReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (role, target, outcome) in &self.results {
            let word = match outcome {
                SecretOutcome::Created { .. } => "created",
                SecretOutcome::Updated { .. } => "updated",
                SecretOutcome::Unchanged { .. } => "unchanged",
                SecretOutcome::Adopted { .. } => "adopted",
                SecretOutcome::Moved => "moved (changed by another writer; not overwritten)",
                SecretOutcome::Forbidden { verb } => {
                    writeln!(f, "{role:?} {target}: forbidden to {verb}")?;
                    continue;
                }
                SecretOutcome::NamespaceMissing => "namespace missing",
                SecretOutcome::Refused(Refusal::Immutable) => "refused (immutable)",
                SecretOutcome::Refused(Refusal::WrongType { .. }) => "refused (wrong type)",
                SecretOutcome::ReadBackDiffers => "read-back differs",
                SecretOutcome::NotAttempted => "not attempted",
            };
            writeln!(f, "{role:?} {target}: {word}")?;
        }
        Ok(())
    }
}

/// Reasserts a credential into Secrets.
pub struct Reasserter {
    client: Client,
    gate: Box<dyn WriteGate>,
    root_check: Option<Box<dyn WriteGate>>,
    revision: Option<String>,
    dry_run: bool,
}

impl fmt::Debug for Reasserter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reasserter").finish_non_exhaustive()
    }
}

impl Reasserter {
    /// A reasserter without a gate.
    #[must_use]
    pub fn new(client: Client) -> Self {
        Self {
            client,
            gate: Box::new(NoGate),
            root_check: None,
            revision: None,
            dry_run: false,
        }
    }

    /// Sends every Secret write with the server's `dryRun=All` (`--dry-run=server`): the same
    /// read, plan, CAS body and field manager, answered by RBAC and admission, stored nowhere.
    /// The outcomes then say what the writes would do (`Created`: would be created).
    #[must_use]
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// Guards every write with the handoff Lease: asserts it (renew and read back) before each
    /// write, and stamps each written Secret's [`crate::plan::REVISION_ANNOTATION`] with the
    /// Lease's `holder;epoch`. A lost Lease stops the reassertion before it writes
    /// ([`GhcrError::Gate`] whose source is [`flux_fence::FenceError::LeaseLost`]).
    #[must_use]
    pub fn with_lease(mut self, lease: LeaseHandle) -> Self {
        self.revision = Some(lease.owner().to_string());
        self.gate = Box::new(lease);
        self
    }

    /// The client it writes with.
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The gate run before every write; pass it to [`crate::source::prove_source`] so the
    /// reconcile requests are guarded by the same Lease.
    #[must_use]
    pub fn gate(&self) -> &dyn WriteGate {
        self.gate.as_ref()
    }

    /// Runs `gate` before every write (e.g. a Lease assertion).
    #[must_use]
    pub fn with_gate(mut self, gate: impl WriteGate + 'static) -> Self {
        self.gate = Box::new(gate);
        self
    }

    /// Runs `check` right before the root Secret write (after the gate), e.g. a recheck that
    /// the pause still holds (`flux_suspend::io::PauseCheck::still_holds`): the root is the
    /// write consumers follow, so a pause broken after the proof (a person's
    /// `spec.suspend=false`) stops it. One check per reassertion, not one per consumer.
    /// A failing check is [`GhcrError::PauseBroken`]; nothing more is written.
    #[must_use]
    pub fn with_root_check(mut self, check: impl WriteGate + 'static) -> Self {
        self.root_check = Some(Box::new(check));
        self
    }

    /// Resolves `spec` into ordered targets: consumers first, root last.
    ///
    /// # Errors
    /// [`GhcrError::InvalidSelector`] (before any request); [`GhcrError::Kube`] when namespaces
    /// cannot be listed.
    pub async fn resolve(
        &self,
        spec: &TargetSpec,
    ) -> Result<Vec<(TargetRole, SecretTarget)>, GhcrError> {
        let namespaces = match &spec.consumers {
            Consumers::Namespaces(list) => list.clone(),
            Consumers::Selector(selector) => {
                crate::selector::validate(selector).map_err(GhcrError::InvalidSelector)?;
                let list = Api::<Namespace>::all(self.client.clone())
                    .list(&ListParams::default().labels(selector))
                    .await
                    .map_err(|source| GhcrError::Kube {
                        verb: "listing",
                        what: format!("namespaces matching `{selector}`"),
                        source,
                    })?;
                let mut names: Vec<String> = list
                    .items
                    .into_iter()
                    .filter(|ns| {
                        ns.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating")
                    })
                    .filter_map(|ns| ns.metadata.name)
                    .collect();
                names.sort();
                names
            }
        };
        let consumers: Vec<SecretTarget> = namespaces
            .into_iter()
            .map(|ns| SecretTarget::new(ns, &spec.secret_name))
            .collect();
        Ok(order_targets(&consumers, spec.root.as_ref()))
    }

    /// Reasserts `config` into every target of `spec`, consumers first and the root last.
    ///
    /// # Guarantees
    /// - Every write is a CAS on what was read (create-if-absent, or a JSON Patch testing uid,
    ///   resourceVersion and type); a lost race is [`SecretOutcome::Moved`], never an overwrite
    ///   and never retried here.
    /// - A Secret already holding the credential (normalised comparison) is not written.
    /// - Every write is judged from the server's answer to it (the object as that write stored
    ///   it), compared without printing it.
    /// - The gate runs before every write (a Lease gate shares one assertion among the writes
    ///   that wait for it at once: see [`LeaseHandle::assert`]).
    /// - Consumers are written at most [`FANOUT_CONCURRENCY`] at a time (one at first, one
    ///   more for each that succeeded). Once one does not
    ///   succeed, no further write starts; the writes in flight finish and are reported; the
    ///   rest are [`SecretOutcome::NotAttempted`]. The root is written last, alone, only after
    ///   every consumer holds the credential.
    /// - No Secret data reaches logs, errors or the report.
    ///
    /// # Errors
    /// Listing namespaces, reading a Secret, an unexpected API error, or the gate failing; the
    /// writes in flight then still finish (each is logged) before the error is returned.
    ///
    /// # Caveats
    /// Concurrent reasserters with different credentials will see each other as `Moved` or
    /// `ReadBackDiffers`; serialise them with the handoff Lease (pass its assertion as gate).
    pub async fn reassert(
        &self,
        config: &DockerConfig,
        spec: &TargetSpec,
    ) -> Result<ReassertReport, GhcrError> {
        let targets = self.resolve(spec).await?;
        self.reassert_ordered(config, targets).await
    }

    /// [`Reasserter::reassert`] for an explicit, already ordered target list: every consumer
    /// before the root, whatever their place in the list.
    ///
    /// # Errors
    /// As [`Reasserter::reassert`].
    pub async fn reassert_ordered(
        &self,
        config: &DockerConfig,
        targets: Vec<(TargetRole, SecretTarget)>,
    ) -> Result<ReassertReport, GhcrError> {
        let mut outcomes: Vec<Option<SecretOutcome>> = vec![None; targets.len()];
        let consumers = targets
            .iter()
            .enumerate()
            .filter(|(_, (role, _))| *role == TargetRole::Consumer);
        let mut stop = self.fan_out(config, consumers, &mut outcomes).await;
        for (i, (role, target)) in targets.iter().enumerate() {
            if *role != TargetRole::Root {
                continue;
            }
            let outcome = if stop.is_some() || outcomes.iter().flatten().any(|o| !o.is_ok()) {
                SecretOutcome::NotAttempted
            } else {
                match self.reassert_target(config, target, true).await {
                    Ok(o) => o,
                    Err(e) => {
                        stop = Some(e);
                        SecretOutcome::NotAttempted
                    }
                }
            };
            info!(role = ?role, target = %target, outcome = outcome.word(), "secret reassertion");
            outcomes[i] = Some(outcome);
        }
        if let Some(e) = stop {
            return Err(e);
        }
        let results = targets
            .into_iter()
            .zip(outcomes)
            .map(|((role, target), o)| (role, target, o.unwrap_or(SecretOutcome::NotAttempted)))
            .collect();
        Ok(ReassertReport { results })
    }

    /// Writes `consumers` (index into `outcomes`, target) at most [`FANOUT_CONCURRENCY`] at a
    /// time, recording each outcome; stops starting writes at the first one that does not
    /// succeed, and lets those in flight finish. Returns the first error, if any.
    async fn fan_out<'a>(
        &self,
        config: &DockerConfig,
        consumers: impl Iterator<Item = (usize, &'a (TargetRole, SecretTarget))>,
        outcomes: &mut [Option<SecretOutcome>],
    ) -> Option<GhcrError> {
        let mut pending = consumers.peekable();
        let mut in_flight = FuturesUnordered::new();
        let mut failed = false;
        let mut succeeded = 0usize;
        let mut first_error = None;
        loop {
            while !failed && in_flight.len() < FANOUT_CONCURRENCY.min(1 + succeeded) {
                let Some((i, (role, target))) = pending.next() else {
                    break;
                };
                in_flight.push(async move {
                    (i, *role, target, self.reassert_one(config, target).await)
                });
            }
            let Some((i, role, target, result)) = in_flight.next().await else {
                break;
            };
            let outcome = match result {
                Ok(o) => o,
                Err(e) => {
                    warn!(target = %target, error = %e, "secret reassertion failed; no further write starts");
                    first_error.get_or_insert(e);
                    failed = true;
                    continue;
                }
            };
            if outcome.is_ok() {
                succeeded += 1;
            } else {
                failed = true;
            }
            info!(role = ?role, target = %target, outcome = outcome.word(), "secret reassertion");
            outcomes[i] = Some(outcome);
        }
        first_error
    }

    /// Reasserts into one Secret: read, plan, gate, one CAS write, judged from its answer.
    ///
    /// # Errors
    /// As [`Reasserter::reassert`].
    pub async fn reassert_one(
        &self,
        config: &DockerConfig,
        target: &SecretTarget,
    ) -> Result<SecretOutcome, GhcrError> {
        self.reassert_target(config, target, false).await
    }

    /// [`Reasserter::reassert_one`]; for the root (`root`), the root check runs after the
    /// gate, right before the write.
    async fn reassert_target(
        &self,
        config: &DockerConfig,
        target: &SecretTarget,
        root: bool,
    ) -> Result<SecretOutcome, GhcrError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &target.namespace);
        let observed = match api.get_opt(&target.name).await {
            Ok(o) => o,
            Err(e) => return classify_read(e, target),
        };
        let read_uid = observed.as_ref().and_then(|o| o.metadata.uid.clone());
        let decided = plan_stamped(target, config, observed.as_ref(), self.revision.as_deref());
        let (write, drift) = match decided {
            SecretPlan::Unchanged { resource_version } => {
                return Ok(SecretOutcome::Unchanged { resource_version });
            }
            SecretPlan::Refuse(r) => return Ok(SecretOutcome::Refused(r)),
            SecretPlan::Create(secret) => (Write::Create(secret), None),
            SecretPlan::Replace { drift, patch } => (Write::Patch(patch), Some(drift)),
        };
        self.gate.check().await.map_err(|source| GhcrError::Gate {
            namespace: target.namespace.clone(),
            name: target.name.clone(),
            source,
        })?;
        if root && let Some(check) = &self.root_check {
            check
                .check()
                .await
                .map_err(|source| GhcrError::PauseBroken {
                    namespace: target.namespace.clone(),
                    name: target.name.clone(),
                    source,
                })?;
        }
        let result = match &write {
            Write::Create(secret) => {
                let params = if self.dry_run {
                    flux_fence::dry_run::dry_post_params()
                } else {
                    flux_fence::api::post_params()
                };
                api.create(&params, secret).await
            }
            Write::Patch(patch) => {
                let params = if self.dry_run {
                    flux_fence::dry_run::dry_patch_params()
                } else {
                    flux_fence::api::patch_params()
                };
                api.patch(&target.name, &params, &Patch::Json::<()>(patch.clone()))
                    .await
            }
        };
        let verb = match write {
            Write::Create(_) => "create",
            Write::Patch(_) => "patch",
        };
        let written = match result {
            Ok(s) => s,
            Err(kube::Error::Api(status)) => {
                return match status.code {
                    404 if verb == "create" => Ok(SecretOutcome::NamespaceMissing),
                    // 404 on a patch: deleted since our read, also someone else's move.
                    404 | 409 | 422 => Ok(SecretOutcome::Moved),
                    403 => Ok(SecretOutcome::Forbidden { verb }),
                    _ => Err(GhcrError::Kube {
                        verb: "writing",
                        what: format!("Secret {target}"),
                        source: kube::Error::Api(status),
                    }),
                };
            }
            Err(lost) => {
                warn!(target = %target, "secret write response lost; re-reading to decide");
                return self.resolve_lost(config, target, lost).await;
            }
        };
        Ok(Self::judge_written(
            config,
            &written,
            read_uid.as_ref(),
            drift,
        ))
    }

    /// Resolves a write whose response was lost: adopt only if a re-read shows exactly the
    /// intended content, otherwise return the original transport error.
    ///
    /// # Errors
    /// The lost write's error when the re-read does not show the credential, or the re-read's.
    pub async fn resolve_lost(
        &self,
        config: &DockerConfig,
        target: &SecretTarget,
        lost: kube::Error,
    ) -> Result<SecretOutcome, GhcrError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &target.namespace);
        match api.get_opt(&target.name).await {
            Ok(Some(s)) if holds(&s, config) => Ok(SecretOutcome::Adopted {
                resource_version: s.metadata.resource_version.unwrap_or_default(),
            }),
            _ => Err(GhcrError::Kube {
                verb: "writing",
                what: format!("Secret {target}"),
                source: lost,
            }),
        }
    }

    /// Judges a write from the server's answer to it: the object exactly as that write stored
    /// it. A separate read afterwards could only add a later writer's change, which may land
    /// just after that read as well; it proves nothing more.
    fn judge_written(
        config: &DockerConfig,
        written: &Secret,
        read_uid: Option<&String>,
        drift: Option<Drift>,
    ) -> SecretOutcome {
        let same_object = read_uid.is_none_or(|uid| written.metadata.uid.as_ref() == Some(uid));
        if !same_object || !holds(written, config) {
            return SecretOutcome::ReadBackDiffers;
        }
        let resource_version = written
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        match drift {
            None => SecretOutcome::Created { resource_version },
            Some(drift) => SecretOutcome::Updated {
                drift,
                resource_version,
            },
        }
    }
}

enum Write {
    Create(Box<Secret>),
    Patch(json_patch::Patch),
}

fn classify_read(e: kube::Error, target: &SecretTarget) -> Result<SecretOutcome, GhcrError> {
    match e {
        kube::Error::Api(status) if status.code == 403 => {
            Ok(SecretOutcome::Forbidden { verb: "get" })
        }
        source => Err(GhcrError::Kube {
            verb: "reading",
            what: format!("Secret {target}"),
            source,
        }),
    }
}
