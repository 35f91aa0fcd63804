//! Running a [`Route`]: observe, [`decide`], then each step in order — direct consumers,
//! staged keys, the `PushSecret` pushed, every consumer's `ExternalSecret` pulled and its target
//! Secret verified, and only then the root Secret, last, by CAS. A failure before the root
//! leaves the root unchanged. Every write runs the reasserter's gate (the handoff Lease) first;
//! the root write runs its pause recheck.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use kube::api::ApiResource;
use serde_json::json;
use tokio::time::Instant;

use crate::credential::DockerConfig;
use crate::eso::{self, ForceOutcome};
use crate::fanout::{Decision, Route, Step, decide, synced_since};
use crate::flow::{FlowError, Progress, prove_sources, report_facts, summary};
use crate::plan::{SecretTarget, TargetRole, holds};
use crate::reassert::{Reasserter, TargetSpec};
use crate::source::{SourceRef, new_nonce};
use crate::stage::{KeyTarget, stage_key};

/// How often a wait reports what is still stale.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// The work of a reassertion along a [`Route`].
#[derive(Debug)]
#[non_exhaustive]
pub struct FanoutRun {
    /// The proven credential.
    pub config: DockerConfig,
    /// Where it goes.
    pub route: Route,
    /// Flux sources to prove afterwards.
    pub sources: Vec<SourceRef>,
    /// The bound of each wait (the push, the pull, each source).
    pub deadline: Duration,
    /// How often a wait reads again.
    pub poll: Duration,
}

impl FanoutRun {
    /// The work for `route`.
    #[must_use]
    pub fn new(
        config: DockerConfig,
        route: Route,
        sources: Vec<SourceRef>,
        deadline: Duration,
        poll: Duration,
    ) -> Self {
        Self {
            config,
            route,
            sources,
            deadline,
            poll,
        }
    }

    /// Runs the route: [`FanoutRun::preflight`], then [`FanoutRun::run_planned`].
    ///
    /// # Errors
    /// As those two.
    pub async fn run(
        &self,
        reasserter: &Reasserter,
        client: &Client,
        progress: &mut impl Progress,
    ) -> Result<(), FlowError> {
        let planned = self.preflight(reasserter, progress).await?;
        self.run_planned(&planned, reasserter, client, progress)
            .await
    }

    /// Observes the route (reads only) and decides its steps, before anything is written: a
    /// caller that pauses Flux runs this before taking the pause, so an incomplete fan-out
    /// writes not even a fence. Fact: `fanout` (complete, bootstrap, missing).
    ///
    /// # Errors
    /// [`FlowError::FanoutIncomplete`]; [`FlowError::Reassert`] when a read fails.
    pub async fn preflight(
        &self,
        reasserter: &Reasserter,
        progress: &mut impl Progress,
    ) -> Result<Planned, FlowError> {
        let externals = self.externals(reasserter).await?;
        let observed = eso::observe(reasserter.client(), &self.route, &externals)
            .await
            .map_err(FlowError::Reassert)?;
        match decide(&self.route, &observed) {
            Decision::Incomplete(missing) => {
                let names: Vec<String> = missing.iter().map(ToString::to_string).collect();
                progress.fact("fanout", json!({ "complete": false, "missing": names }));
                Err(FlowError::FanoutIncomplete(missing))
            }
            Decision::Run {
                steps,
                bootstrap,
                missing,
            } => {
                let names: Vec<String> = missing.iter().map(ToString::to_string).collect();
                // The plain route has no fan-out to report.
                if !self.route.is_plain() {
                    progress.fact(
                        "fanout",
                        json!({ "complete": missing.is_empty(), "bootstrap": bootstrap, "missing": names }),
                    );
                }
                Ok(Planned {
                    steps,
                    bootstrap,
                    externals,
                })
            }
        }
    }

    /// Runs the steps [`FanoutRun::preflight`] decided, then proves the sources. Facts:
    /// `secrets`/`secret_counts` of the direct and root writes, `staged_keys`,
    /// `external_secrets`; phases per step.
    ///
    /// # Errors
    /// [`FlowError::Staging`], [`FlowError::EsoRequest`], [`FlowError::NotConverged`],
    /// [`FlowError::Incomplete`], [`FlowError::Reassert`] at the step that failed (nothing after
    /// it, the root included, is written); [`FlowError::Source`] and
    /// [`FlowError::SourceNotProven`] for the sources.
    pub async fn run_planned(
        &self,
        planned: &Planned,
        reasserter: &Reasserter,
        client: &Client,
        progress: &mut impl Progress,
    ) -> Result<(), FlowError> {
        if planned.bootstrap {
            progress.phase("bootstrap: incomplete fan-out allowed; root, staging, root");
        }
        let mut steps = planned.steps.iter().peekable();
        while let Some(step) = steps.next() {
            match step {
                // Nothing waits between them (the plain route): one ordered write, every
                // consumer first and the root last, only once they all hold the credential.
                Step::Direct if steps.peek() == Some(&&Step::Root) => {
                    steps.next();
                    self.secrets(self.route.direct.clone(), reasserter, progress)
                        .await?;
                }
                Step::Direct => {
                    let consumers = TargetSpec {
                        root: None,
                        ..self.route.direct.clone()
                    };
                    self.secrets(consumers, reasserter, progress).await?;
                }
                Step::Stage(keys) => self.stage(keys, reasserter, client, progress).await?,
                Step::Push => self.push(reasserter, client, progress).await?,
                Step::Pull => {
                    self.pull(reasserter, client, &planned.externals, progress)
                        .await?;
                }
                Step::Root => self.root(reasserter, progress).await?,
            }
        }
        prove_sources(
            &self.sources,
            reasserter,
            client,
            self.deadline,
            self.poll,
            progress,
        )
        .await
    }

    async fn stage(
        &self,
        keys: &[KeyTarget],
        reasserter: &Reasserter,
        client: &Client,
        progress: &mut impl Progress,
    ) -> Result<(), FlowError> {
        let mut each = Vec::new();
        for key in keys {
            let outcome = stage_key(client, reasserter.gate(), &self.config, key)
                .await
                .map_err(FlowError::Reassert)?;
            each.push(json!({ "key": key.to_string(), "outcome": outcome.word() }));
            if !outcome.is_ok() {
                progress.fact("staged_keys", json!(each));
                return Err(FlowError::Staging {
                    key: key.to_string(),
                    outcome,
                });
            }
            progress.phase(&format!("staged {key}: {outcome}"));
        }
        progress.fact("staged_keys", json!(each));
        Ok(())
    }

    /// The consumers' `ExternalSecret`s, `namespace/name`, in order.
    async fn externals(&self, reasserter: &Reasserter) -> Result<Vec<SecretTarget>, FlowError> {
        let Some(route) = &self.route.eso else {
            return Ok(Vec::new());
        };
        let spec = TargetSpec {
            secret_name: route.external_secret.clone(),
            consumers: route.consumers.clone(),
            root: None,
        };
        let targets = reasserter
            .resolve(&spec)
            .await
            .map_err(FlowError::Reassert)?;
        Ok(targets.into_iter().map(|(_, t)| t).collect())
    }

    /// The Secrets of `spec`, resolved and written in one ordered write.
    async fn secrets(
        &self,
        spec: TargetSpec,
        reasserter: &Reasserter,
        progress: &mut impl Progress,
    ) -> Result<(), FlowError> {
        let targets = reasserter
            .resolve(&spec)
            .await
            .map_err(FlowError::Reassert)?;
        self.write(reasserter, targets, progress).await
    }

    async fn root(
        &self,
        reasserter: &Reasserter,
        progress: &mut impl Progress,
    ) -> Result<(), FlowError> {
        let Some(root) = &self.route.direct.root else {
            return Ok(());
        };
        self.write(reasserter, vec![(TargetRole::Root, root.clone())], progress)
            .await
    }

    async fn write(
        &self,
        reasserter: &Reasserter,
        targets: Vec<(TargetRole, SecretTarget)>,
        progress: &mut impl Progress,
    ) -> Result<(), FlowError> {
        let report = reasserter
            .reassert_ordered(&self.config, targets)
            .await
            .map_err(FlowError::Reassert)?;
        report_facts(&report, progress);
        if !report.is_complete() {
            return Err(FlowError::Incomplete(report));
        }
        progress.phase(&summary(&report));
        Ok(())
    }

    async fn push(
        &self,
        reasserter: &Reasserter,
        client: &Client,
        progress: &mut impl Progress,
    ) -> Result<(), FlowError> {
        let Some(route) = &self.route.eso else {
            return Ok(());
        };
        let res = eso::push_secret_resource();
        let nonce = new_nonce();
        let before = request(client, reasserter, &res, &route.push_secret, &nonce).await?;
        let mut pending = vec![Pending::new(route.push_secret.clone(), before)];
        self.wait(client, &res, &mut pending, false, progress)
            .await?;
        progress.phase(&format!("pushed: PushSecret {} synced", route.push_secret));
        Ok(())
    }

    async fn pull(
        &self,
        reasserter: &Reasserter,
        client: &Client,
        externals: &[SecretTarget],
        progress: &mut impl Progress,
    ) -> Result<(), FlowError> {
        let res = eso::external_secret_resource();
        let nonce = new_nonce();
        let mut pending = Vec::new();
        for es in externals {
            let before = request(client, reasserter, &res, es, &nonce).await?;
            pending.push(Pending::new(es.clone(), before));
        }
        self.wait(client, &res, &mut pending, true, progress)
            .await?;
        let names: Vec<String> = externals.iter().map(ToString::to_string).collect();
        progress.fact("external_secrets", json!(names));
        progress.phase(&format!(
            "pulled: {} ExternalSecret(s) synced, every target Secret holds the credential",
            externals.len()
        ));
        Ok(())
    }

    /// Polls every pending object until each is synced after our request (and, for
    /// `ExternalSecrets`, its target Secret holds the credential), bounded by the deadline; a
    /// progress line about every [`PROGRESS_EVERY`] names what is still stale.
    async fn wait(
        &self,
        client: &Client,
        res: &ApiResource,
        pending: &mut Vec<Pending>,
        verify_target: bool,
        progress: &mut impl Progress,
    ) -> Result<(), FlowError> {
        let start = Instant::now();
        let mut last_report = start;
        loop {
            let mut still = Vec::new();
            for mut p in pending.drain(..) {
                if !self.converged(client, res, &mut p, verify_target).await? {
                    still.push(p);
                }
            }
            *pending = still;
            if pending.is_empty() {
                return Ok(());
            }
            if start.elapsed() + self.poll > self.deadline {
                return Err(FlowError::NotConverged {
                    kind: res.kind.clone(),
                    stale: pending.iter().map(Pending::describe).collect(),
                    deadline: self.deadline,
                });
            }
            if last_report.elapsed() >= PROGRESS_EVERY {
                last_report = Instant::now();
                let stale: Vec<String> = pending.iter().map(Pending::describe).collect();
                progress.phase(&format!(
                    "waiting for {} to sync ({}s): {}",
                    res.kind,
                    start.elapsed().as_secs(),
                    stale.join(", ")
                ));
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    async fn converged(
        &self,
        client: &Client,
        res: &ApiResource,
        p: &mut Pending,
        verify_target: bool,
    ) -> Result<bool, FlowError> {
        let Some(obj) = eso::read(client, res, &p.target)
            .await
            .map_err(FlowError::Reassert)?
        else {
            p.why = "deleted".into();
            return Ok(false);
        };
        let status = eso::sync_status(&obj);
        if !synced_since(p.before.as_deref(), &status) {
            p.why = status.reason.clone().unwrap_or_else(|| "not synced".into());
            return Ok(false);
        }
        if !verify_target {
            return Ok(true);
        }
        let name = eso::target_name(&obj);
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &p.target.namespace);
        let secret = secrets.get_opt(&name).await.map_err(|source| {
            FlowError::Reassert(crate::GhcrError::Kube {
                verb: "reading",
                what: format!("Secret {}/{name}", p.target.namespace),
                source,
            })
        })?;
        if secret.is_some_and(|s| holds(&s, &self.config)) {
            return Ok(true);
        }
        p.why = format!("synced, but Secret {name} does not hold the credential");
        Ok(false)
    }
}

/// Requests a sync of one object; anything but `Requested` is an [`FlowError::EsoRequest`].
async fn request(
    client: &Client,
    reasserter: &Reasserter,
    res: &ApiResource,
    target: &SecretTarget,
    nonce: &str,
) -> Result<Option<String>, FlowError> {
    match eso::force_sync(client, reasserter.gate(), res, target, nonce)
        .await
        .map_err(FlowError::Reassert)?
    {
        ForceOutcome::Requested { before } => Ok(before),
        other => Err(FlowError::EsoRequest {
            what: format!("{} {target}", res.kind),
            outcome: other,
        }),
    }
}

/// The steps [`FanoutRun::preflight`] decided, to run with [`FanoutRun::run_planned`].
#[derive(Debug, Clone)]
pub struct Planned {
    steps: Vec<Step>,
    bootstrap: bool,
    externals: Vec<SecretTarget>,
}

impl Planned {
    /// Whether this is the bootstrap order for an incomplete fan-out.
    #[must_use]
    pub fn is_bootstrap(&self) -> bool {
        self.bootstrap
    }
}

/// One object not yet converged, and why (ESO's `Ready` reason, or what differs).
struct Pending {
    target: SecretTarget,
    before: Option<String>,
    why: String,
}

impl Pending {
    fn new(target: SecretTarget, before: Option<String>) -> Self {
        Self {
            target,
            before,
            why: "not synced".into(),
        }
    }

    fn describe(&self) -> String {
        format!("{} ({})", self.target, self.why)
    }
}
