//! One handoff as the CLI runs it: the Lease, the chains, the fences, and cleanup on every
//! exit path — target, parent, Lease, in that order.

use std::sync::Arc;

use flux_fence::{
    AcquireDecision, Epoch, Fencer, Holder, Lease, LeaseAcquire, LeaseGuard, LeaseRelease, Mark,
    ObjectRef, OwnerValue, Refusal, SystemClock, decide_acquire,
};
use flux_suspend::object::{get_json, kustomization};
use flux_suspend::steps::Step;
use flux_suspend::{Chain, Handoff, PauseOptions, PauseOutcome, Proof, io::Timing};
use kube::Client;

use crate::exit;
use crate::failure::Failure;
use crate::output::Output;
use crate::settings::{ParentSpec, Settings};
use crate::signals::Interrupt;

/// A handoff in progress.
pub struct Session {
    pub settings: Settings,
    pub holder: Holder,
    pub fencer: Fencer,
    pub chains: Vec<Chain>,
    lease: Option<LeaseGuard>,
    handoff: Option<Handoff>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Resolves the chains (reading each target), then acquires the Lease.
    ///
    /// # Guarantees
    /// A signal during the reads stops them at once: exit 130, nothing was written. A signal
    /// during the Lease acquire gives it [`crate::signals::GRACE`] to finish (its create may
    /// land after the request was abandoned); when it does not, exit 7 names the holder whose
    /// Lease may be held.
    pub async fn start(
        client: Client,
        settings: Settings,
        holder: Holder,
        out: &mut Output,
        interrupt: &mut Interrupt,
    ) -> Result<Self, Failure> {
        let chains = interrupt
            .cancel(async {
                lease_preflight(&client, &settings).await?;
                resolve_chains(&client, &settings, &holder).await
            })
            .await
            .ok_or_else(crate::signals::stopped_before_start)??;
        let acquired = interrupt
            .grace(Lease::acquire(
                client.clone(),
                settings.lease.clone(),
                holder.clone(),
                Arc::new(SystemClock),
            ))
            .await
            .ok_or_else(|| crate::signals::start_cut_short(&holder))?
            .map_err(Failure::from)?;
        let lease = match acquired {
            LeaseAcquire::Acquired(g) => g,
            LeaseAcquire::Held {
                holder: other,
                expired,
            } => {
                let hint = if expired {
                    " (it looks expired; `flux-handoff fences` shows it, `fences recover` releases it once its run is gone)"
                } else {
                    ""
                };
                return Err(Failure::new(
                    exit::REFUSED,
                    format!(
                        "lease {}/{} is held by {other}{hint}",
                        settings.lease.namespace, settings.lease.name
                    ),
                ));
            }
            // Contended (another party moved it on every attempt), or a later variant.
            _ => {
                return Err(Failure::new(
                    exit::REFUSED,
                    format!(
                        "lease {}/{} not acquired: another party changed it on every attempt; try again",
                        settings.lease.namespace, settings.lease.name
                    ),
                ));
            }
        };
        out.phase(&format!(
            "lease acquired: {}/{} (holder {}, epoch {})",
            settings.lease.namespace,
            settings.lease.name,
            holder,
            lease.epoch()
        ));
        let fencer = Fencer::new(client.clone(), settings.keys.clone(), lease.owner())
            .with_lease(lease.handle());
        let handoff = Handoff::new(client.clone(), fencer.clone());
        Ok(Self {
            settings,
            holder,
            fencer,
            chains,
            lease: Some(lease),
            handoff: Some(handoff),
        })
    }

    /// Fences, retires in-flight reconciles and proves the stable pause, until done or
    /// interrupted.
    pub async fn pause(
        &mut self,
        out: &mut Output,
        interrupt: &mut Interrupt,
    ) -> Result<Proof, Failure> {
        let opts = PauseOptions {
            strategy: self.settings.strategy,
            quiesce: self.settings.quiesce,
            controller: self.settings.controller.clone(),
            timing: Timing::new(self.settings.interval, self.settings.timeout),
            reason: self.settings.reason.clone(),
        };
        let handoff = self
            .handoff
            .as_mut()
            .expect("a started session has a handoff");
        let chains = self.chains.clone();
        let result = {
            let mut print = |s: Step| out.phase(&step_line(s, &chains));
            let pause = handoff.pause(&chains, &opts, &mut print);
            tokio::select! {
                r = pause => Some(r),
                () = interrupt.wait() => None,
            }
        };
        match result {
            None => Err(Failure::new(
                exit::INTERRUPTED,
                "interrupted during the pause",
            )),
            Some(Err(e)) => Err(e.into()),
            Some(Ok(PauseOutcome::Refused { object, why })) => {
                Err(Failure::new(exit::REFUSED, format!("{object}: {why}")))
            }
            Some(Ok(PauseOutcome::Proven(proof))) => Ok(proof),
        }
    }

    /// The Lease this session holds, to gate other writes (e.g. Secret reassertion) on it.
    pub fn lease_handle(&self) -> Option<flux_fence::LeaseHandle> {
        self.lease.as_ref().map(LeaseGuard::handle)
    }

    /// Leaves the pause in place: fences stay, and the Lease stays held by this holder and is
    /// parked (marked as a deliberate pause, so `fences recover` does not take it for a crashed
    /// run once it expires). Returns the objects left fenced.
    pub async fn leave_paused(mut self) -> Result<Vec<String>, Failure> {
        let held = self
            .handoff
            .take()
            .map(Handoff::leave_paused)
            .unwrap_or_default();
        if let Some(l) = self.lease.take() {
            match l
                .park(&self.settings.keys.parked)
                .await
                .map_err(Failure::from)?
            {
                LeaseRelease::Released => {}
                other => tracing::warn!(
                    outcome = ?other,
                    "the Lease could not be parked: once it expires, `fences recover` will treat \
                     this pause as a crashed run"
                ),
            }
        }
        Ok(held)
    }

    /// Releases everything this run holds — targets, then parents, then the Lease — including
    /// a fence whose write was in flight when the run was interrupted (found by its owner
    /// value on the chain's objects).
    pub async fn cleanup(mut self, out: &mut Output) -> Result<(), Failure> {
        let mut problems = Vec::new();
        if let Some(mut h) = self.handoff.take() {
            // A fence whose acquire was cut short (its write landed, its guard was never
            // recorded) is found by our owner value and joins the held ones first, so a single
            // resume releases everything in order: targets, then parents.
            let owner = self.fencer.owner().clone();
            let objects = self
                .chains
                .iter()
                .map(|c| &c.target)
                .chain(self.chains.iter().filter_map(|c| c.parent.as_ref()));
            let mut stray = Vec::new();
            for obj in objects {
                if !h.holds(obj)
                    && let Ok(Some(g)) = self.fencer.adopt_recorded(obj, &owner).await
                {
                    stray.push(g);
                }
            }
            h.absorb(stray);
            match h.resume(None).await {
                Ok(r) => {
                    for o in &r.released {
                        out.phase(&format!("released: {o}"));
                    }
                }
                Err(e) => problems.push(crate::failure::chain(&e)),
            }
            if h.holds_anything() {
                // Not released: leave it listed for `flux-handoff fences`.
                let _ = h.leave_paused();
            }
        }
        if let Some(lease) = self.lease.take() {
            if problems.is_empty() {
                match lease.release().await {
                    Ok(LeaseRelease::Released | LeaseRelease::Gone) => out.phase("lease released"),
                    Ok(other) => problems.push(format!("lease not released: {other}")),
                    Err(e) => problems.push(crate::failure::chain(&e)),
                }
            } else {
                // Never release the Lease while a fence is still held: it keeps others out.
                lease.leave_held();
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Failure::new(
                exit::CLEANUP,
                format!(
                    "cleanup incomplete ({}); `flux-handoff fences` lists what is still held",
                    problems.join("; ")
                ),
            ))
        }
    }
}

fn step_line(step: Step, chains: &[Chain]) -> String {
    let parents: Vec<String> = chains
        .iter()
        .filter_map(|c| c.parent.as_ref().map(ToString::to_string))
        .collect();
    let targets: Vec<String> = chains.iter().map(|c| c.target.to_string()).collect();
    match step {
        Step::QuiesceParents => format!("parent quiet: {}", parents.join(", ")),
        Step::FenceParents => format!("parent fenced: {}", parents.join(", ")),
        Step::AwaitParentAcks => "parent acknowledged the suspend".into(),
        Step::QuiesceTargets => format!("target quiet: {}", targets.join(", ")),
        Step::FenceTargets => format!("target fenced: {}", targets.join(", ")),
        Step::AwaitTargetAcks => "target acknowledged the suspend".into(),
        Step::RestartController => "controller restarted; every old pod gone".into(),
        Step::RefenceReverted => "fences checked after the restart".into(),
        Step::Prove => "pause proven".into(),
    }
}

/// Reads each target (it must exist) and finds its parent; refuses, before the Lease or any
/// fence is written, a chain whose member is fenced by another holder or suspended by someone
/// else (each fence's own CAS would refuse it too, but only after the Lease was taken and the
/// parent fenced, acknowledged and released again — the exit code promises nothing changed).
async fn resolve_chains(
    client: &Client,
    settings: &Settings,
    holder: &Holder,
) -> Result<Vec<Chain>, Failure> {
    let mut chains = Vec::new();
    for t in &settings.targets {
        let obj = get_json(client, &t.object)
            .await
            .map_err(|e| read_failure(&t.object, &e))?;
        let parent = match &t.parent {
            ParentSpec::None => None,
            ParentSpec::Explicit(p) => Some(p.clone()),
            ParentSpec::FromLabels => flux_suspend::flux::parent_of(&obj)
                .map(|p| kustomization(&p.namespace, &p.name))
                .filter(|p| *p != t.object),
        };
        if let Some(p) = &parent {
            let read = get_json(client, p).await.map_err(|e| read_failure(p, &e))?;
            preflight(p, &read, settings, holder)?;
        }
        preflight(&t.object, &obj, settings, holder)?;
        chains.push(Chain {
            parent,
            target: t.object.clone(),
        });
    }
    Ok(chains)
}

/// Refuses, before anything is written, while another holder has the Lease and it has not
/// expired (the acquire decides again on what it reads; a read error is left to it).
async fn lease_preflight(client: &Client, settings: &Settings) -> Result<(), Failure> {
    let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), &settings.lease.namespace);
    let Ok(Some(lease)) = api.get_opt(&settings.lease.name).await else {
        return Ok(());
    };
    let Some(spec) = lease.spec else {
        return Ok(());
    };
    match spec.holder_identity.as_deref() {
        Some(other)
            if !other.is_empty()
                && !flux_fence::lease_decide::is_expired(
                    &spec,
                    k8s_openapi::jiff::Timestamp::now(),
                ) =>
        {
            Err(Failure::new(
                exit::REFUSED,
                format!(
                    "lease {}/{} is held by {other}",
                    settings.lease.namespace, settings.lease.name
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// What the fence's decision core would answer for `read` now, without writing: another
/// owner or an exclusive mark already set is a refusal (exit 3), bad input (the reason) a usage
/// error. The fence decides again on what it reads when it writes.
fn preflight(
    obj: &ObjectRef,
    read: &serde_json::Value,
    settings: &Settings,
    holder: &Holder,
) -> Result<(), Failure> {
    let owner = OwnerValue::new(holder.clone(), Epoch(0));
    let marks = [Mark::field("/spec/suspend", serde_json::json!(true)).exclusive()];
    let decision = decide_acquire(
        Some(read),
        &settings.keys,
        &owner,
        &marks,
        settings.reason.as_deref(),
        k8s_openapi::jiff::Timestamp::now(),
    )?;
    let why = match decision {
        AcquireDecision::Refuse(Refusal::Owned { holder }) => format!("fenced by {holder}"),
        AcquireDecision::Refuse(Refusal::AlreadyMarked { at }) => {
            format!("{at} already set by someone else")
        }
        _ => return Ok(()),
    };
    Err(Failure::new(exit::REFUSED, format!("{obj}: {why}")))
}

fn read_failure(obj: &ObjectRef, e: &kube::Error) -> Failure {
    match e {
        kube::Error::Api(s) if s.code == 404 => Failure::new(
            exit::KUBE_API,
            format!("{obj} not found (is the Flux CRD installed? `flux-handoff doctor` checks)"),
        ),
        kube::Error::Api(s) if s.code == 403 => Failure::new(
            exit::KUBE_API,
            format!("forbidden to get {obj}: {}", s.message),
        ),
        other => Failure::new(
            exit::KUBE_API,
            format!("reading {obj}: {}", crate::failure::chain(other)),
        ),
    }
}
