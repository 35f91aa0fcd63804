//! `--recover-finished-runs`: before the preflight refuses a chain held by someone else, a
//! holder whose CI run attempt is provably finished is recovered — the Lease taken over first
//! (a CAS on the version judged), its fences released children before parents, the Lease
//! released — by `flux_fence::recovery` on evidence from a
//! [`flux_fence::liveness::LivenessSource`]. Nothing is recovered on any other answer; the
//! preflight then refuses as without the option.

use std::sync::Arc;
use std::time::Duration;

use flux_fence::discover::Scope;
use flux_fence::liveness::{LivenessSource, Verdict};
use flux_fence::recovery::{
    ChildMark, HolderEvidence, RecoverOutcome, RecoverPlan, Recovery, Subject,
};
use flux_fence::{Holder, ObjectRef};
use kube::Client;

use crate::flux::{RECONCILE_ANNOTATION, RECONCILE_DISABLED};
use crate::object::{helmrelease_resource, kustomization_resource};
use crate::session::{CleanupError, ParentSpec, SessionError, SessionOptions};

/// One thing recovered, and on what evidence (serialised as `{subject, holder, evidence}`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Recovered {
    /// `lease ns/name` or `kind ns/name`.
    pub subject: String,
    /// The gone holder.
    pub holder: String,
    /// The evidence, in words (no secrets).
    pub evidence: String,
}

/// `recovered: <subject> from finished run holder <holder> (<evidence>)`.
impl std::fmt::Display for Recovered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "recovered: {} from finished run holder {} ({})",
            self.subject, self.holder, self.evidence
        )
    }
}

/// Recovers what finished CI runs left in the way of `opts`; `ours` is this session's holder.
pub(crate) async fn finished_runs(
    client: &Client,
    opts: &SessionOptions,
    ours: &Holder,
    source: &Arc<dyn LivenessSource>,
) -> Result<Vec<Recovered>, SessionError> {
    let lease_name = opts.lease.to_string();
    let recovery = recovery_for(client, opts, ours, source);
    let planned = recovery
        .plan(&mut |_| {})
        .await
        .map_err(SessionError::Lease)?;
    let lease_holder = planned
        .snapshot
        .lease
        .as_ref()
        .and_then(|l| l.found.holder.clone());
    let mut finished: Vec<(String, String)> = Vec::new();
    match &planned.evidence {
        HolderEvidence::Reported {
            holder, evidence, ..
        } => finished.push((holder.clone(), evidence.clone())),
        HolderEvidence::NotProved { holder, why } if holder != ours.as_str() => {
            return Err(SessionError::Refused {
                object: super::Subject::lease(lease_name),
                why: super::Refusal::NotProvedFinished {
                    holder: holder.clone(),
                    why: why.clone(),
                },
            });
        }
        _ => {}
    }
    // Fences of holders that no longer hold the Lease: asked too, recovered only when finished.
    let mut asked: Vec<String> = Vec::new();
    for p in &planned.plan.release {
        if Some(&p.holder) == lease_holder.as_ref()
            || p.holder == ours.as_str()
            || asked.contains(&p.holder)
        {
            continue;
        }
        asked.push(p.holder.clone());
        if let Verdict::Finished(e) = source.check(&p.holder).await {
            finished.push((p.holder.clone(), e));
        }
    }
    let is_finished = |h: &str| finished.iter().any(|(f, _)| f == h);
    let mut plan = planned.plan.clone();
    if plan
        .take_lease
        .as_ref()
        .is_some_and(|g| !is_finished(&g.holder))
    {
        plan.take_lease = None;
    }
    plan.release.retain(|p| is_finished(&p.holder));
    if plan.is_empty() {
        return Ok(Vec::new());
    }
    let outcome = recovery.execute(&plan).await.map_err(SessionError::Lease)?;
    done(&plan, outcome, &finished, &lease_name)
}

/// The recovery of everything in the chain's namespaces (and the Lease's), as `ours`.
fn recovery_for(
    client: &Client,
    opts: &SessionOptions,
    ours: &Holder,
    source: &Arc<dyn LivenessSource>,
) -> Recovery {
    let mut namespaces = vec![opts.lease.namespace.clone()];
    for t in &opts.targets {
        namespaces.push(t.object.namespace.clone());
        if let ParentSpec::Explicit(p) = &t.parent {
            namespaces.push(p.namespace.clone());
        }
    }
    namespaces.sort();
    namespaces.dedup();
    Recovery::new(
        client.clone(),
        opts.keys.clone(),
        opts.lease.clone(),
        vec![kustomization_resource(), helmrelease_resource()],
        ChildMark::annotation(RECONCILE_ANNOTATION, RECONCILE_DISABLED),
    )
    .recorded_kinds(crate::object::recorded_kinds())
    .scope(Scope::Namespaces(namespaces))
    .holder(ours.clone())
    .ci_evidence(Arc::clone(source), Some(Duration::ZERO))
}

/// What the recovery did, as [`Recovered`] entries; a lost race or an incomplete recovery as
/// the session error.
fn done(
    plan: &RecoverPlan,
    outcome: RecoverOutcome,
    finished: &[(String, String)],
    lease_name: &str,
) -> Result<Vec<Recovered>, SessionError> {
    let evidence_of = |h: &str| {
        finished
            .iter()
            .find(|(f, _)| f == h)
            .map(|(_, e)| e.clone())
            .unwrap_or_default()
    };
    match outcome {
        RecoverOutcome::LeaseRaceLost { gone, why } => Err(SessionError::Refused {
            object: super::Subject::lease(lease_name),
            why: super::Refusal::TakeoverLost { gone, why },
        }),
        RecoverOutcome::Done(report) => {
            if !report.problems.is_empty() {
                let mut held = Vec::new();
                let mut lease = None;
                let mut whys = Vec::new();
                for (s, why) in &report.problems {
                    if let Subject::Fence(o) = s {
                        whys.push(format!("{o}: {why}"));
                        held.push(o.clone());
                    } else {
                        whys.push(format!("lease {lease_name}: {why}"));
                        lease = Some(lease_name.to_string());
                    }
                }
                return Err(SessionError::Cleanup {
                    cleanup: CleanupError {
                        held,
                        lease,
                        why: format!(
                            "recovering a finished run's hold was cut short: {}",
                            whys.join("; ")
                        ),
                        withheld: Vec::new(),
                        unsettled: false,
                    },
                    after: None,
                });
            }
            let mut done = Vec::new();
            if let Some(g) = &plan.take_lease {
                done.push(Recovered {
                    subject: format!("lease {lease_name}"),
                    holder: g.holder.clone(),
                    evidence: g.evidence.clone(),
                });
            }
            for o in &report.released {
                let holder = plan
                    .release
                    .iter()
                    .find(|p| p.object == *o)
                    .map(|p| p.holder.clone())
                    .unwrap_or_default();
                done.push(Recovered {
                    subject: name(o),
                    evidence: evidence_of(&holder),
                    holder,
                });
            }
            Ok(done)
        }
        _ => Err(SessionError::Refused {
            object: super::Subject::lease(lease_name),
            why: super::Refusal::UnexpectedRecovery,
        }),
    }
}

fn name(o: &ObjectRef) -> String {
    format!("{} {}/{}", o.resource.kind, o.namespace, o.name)
}
