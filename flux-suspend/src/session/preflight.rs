//! The read-only preflight: every target read, its parent found, and a refusal — before the
//! Lease or any fence is written — of a chain fenced or suspended by someone else, or of a
//! live foreign Lease. Each write decides again on what it reads; this only keeps the promise
//! that a refusal changes nothing.

use flux_fence::api::{READ_RETRY_BUDGET, get_retrying};
use flux_fence::decide::AcquireDecision;
use flux_fence::decide::Refusal;
use flux_fence::decide::decide_acquire;
use flux_fence::discover::FoundState;
use flux_fence::lease::ChainRecord;
use flux_fence::lease::read_members;
use flux_fence::{AnnotationKeys, Epoch, Holder, ObjectRef, OwnerValue};
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use serde_json::Value;

use crate::flux::order::{Node, release_order};
use crate::handoff::Chain;
use crate::object::api;
use crate::session::recover::{Recovered, finished_runs};
use crate::session::{ParentSpec, SessionError, SessionOptions, TargetSpec};

/// Recovers what finished CI runs hold (when asked to), then reads the Lease and each target
/// and parent; returns the chains and what was recovered.
pub(crate) async fn preflight(
    client: &Client,
    opts: &SessionOptions,
    holder: &Holder,
) -> Result<(Vec<Chain>, Vec<Recovered>, Reads), SessionError> {
    let recovered = match &opts.recover_finished_runs {
        // Boxed: the recovery's future is large and rarely needed.
        Some(source) => Box::pin(finished_runs(client, opts, holder, source)).await?,
        None => Vec::new(),
    };
    lease(client, opts, holder).await?;
    let mut chains = Vec::new();
    let mut reads: Reads = Vec::new();
    for t in &opts.targets {
        let obj = read_once(client, &t.object, &mut reads).await?;
        let parent = parent_for(t, &obj)?;
        if let Some(p) = &parent {
            let read = read_once(client, p, &mut reads).await?;
            refuse_foreign(p, &read, &opts.keys, opts.reason.as_deref(), holder)?;
        }
        refuse_foreign(&t.object, &obj, &opts.keys, opts.reason.as_deref(), holder)?;
        chains.push(Chain {
            parent,
            target: t.object.clone(),
            replicas: t.replicas,
        });
    }
    super::autoscaler::refuse_autoscalers(client, opts).await?;
    // Several targets are fenced dependents first, so the release frees each object after the
    // objects it depends on (`spec.dependsOn`, read above: no request more).
    if chains.len() > 1 {
        let nodes: Vec<Node> = reads
            .iter()
            .filter(|(o, _)| chains.iter().any(|c| c.target == *o))
            .map(|(o, v)| Node::read(o.clone(), v))
            .collect();
        let ordered = release_order(&nodes);
        chains.sort_by_key(|c| ordered.fence_rank(&c.target));
    }
    Ok((chains, recovered, reads))
}

/// The parent to pause above target `t`, read as `obj`: as `t.parent` says, or from the labels
/// of whichever Flux object applies it ([`crate::flux::owner_of`]): a Kustomization or a
/// `HelmRelease` is paused as the parent; a `ResourceSet` is not paused at all (the target's
/// fence freezes it in the set: [`crate::flux::excluded_from_set`]), so there is no parent.
///
/// # Errors
/// A replicas gate whose Deployment no Flux object applies (no owner labels, no `--parent`):
/// nothing would keep its applier (Helm by hand, a kubectl pipeline, another `GitOps` tool) from
/// putting the count back, so it is refused with the flag that accepts it knowingly. A Flux
/// object without such labels is a top-level object (`flux-system`) and has no parent.
pub(crate) fn parent_for(t: &TargetSpec, obj: &Value) -> Result<Option<ObjectRef>, SessionError> {
    if let ParentSpec::TopLevel = &t.parent {
        return Ok(None);
    }
    if let ParentSpec::Explicit(p) = &t.parent {
        return Ok(Some(p.clone()));
    }
    if crate::flux::owner_of(obj).is_none() {
        if t.replicas.is_some() || crate::object::is_gate_kind(&t.object.resource) {
            return Err(SessionError::Invalid(format!(
                "{} has no Flux owner (no {}, {} or {} label): name the Kustomization that \
                 applies it with --parent NAMESPACE/NAME, or gate it knowingly with --parent none",
                t.object,
                crate::flux::PARENT_NAME_LABEL,
                crate::flux::HELM_NAME_LABEL,
                crate::flux::RESOURCESET_NAME_LABEL,
            )));
        }
        return Ok(None);
    }
    let Some(parent) = crate::object::parent_from_labels(obj) else {
        return Ok(None);
    };
    Ok((parent != t.object).then_some(parent))
}

/// Each object as the preflight read it, once: the pause decides its first fence CAS on it.
pub(crate) type Reads = Vec<(ObjectRef, Value)>;

/// Reads `obj` unless this preflight already did (a parent shared by several targets).
async fn read_once(
    client: &Client,
    obj: &ObjectRef,
    reads: &mut Reads,
) -> Result<Value, SessionError> {
    if let Some((_, v)) = reads.iter().find(|(o, _)| o == obj) {
        return Ok(v.clone());
    }
    let v = read(client, obj).await?;
    reads.push((obj.clone(), v.clone()));
    Ok(v)
}

/// Refuses while another holder has the Lease and it has not expired (the acquire decides
/// again on what it reads; a read error is left to it), and a free Lease whose chain record
/// names fences still held ([`recorded_elsewhere`]).
async fn lease(client: &Client, opts: &SessionOptions, ours: &Holder) -> Result<(), SessionError> {
    let api: kube::Api<KubeLease> = kube::Api::namespaced(client.clone(), &opts.lease.namespace);
    let Ok(Some(lease)) = api.get_opt(&opts.lease.name).await else {
        return Ok(());
    };
    // A parked pause, expired-looking or not, is named with the resume that ends it.
    if let Some(parked) = super::held::parked(client, opts, &lease, Some(ours.as_str())).await {
        return Err(parked);
    }
    let Some(spec) = lease.spec.clone() else {
        return recorded_elsewhere(client, opts, ours, &lease).await;
    };
    match spec.holder_identity.as_deref() {
        Some(other)
            if !other.is_empty() && !flux_fence::lease::is_expired(&spec, Timestamp::now()) =>
        {
            Err(SessionError::LeaseHeld {
                lease: opts.lease.to_string(),
                holder: other.to_string(),
                expired: false,
            })
        }
        Some(h) if !h.is_empty() => Ok(()),
        _ => recorded_elsewhere(client, opts, ours, &lease).await,
    }
}

/// Refuses a Lease whose chain record names another holder's fences that are still held: our
/// first record would replace it (a record of an older epoch on a Lease taken free), and
/// with it the only pointer to fences outside the namespaces anyone scans. A record whose
/// fences are all gone is stale and may be replaced. A held Lease is refused (or adopted, if
/// ours) by the Lease rules themselves.
async fn recorded_elsewhere(
    client: &Client,
    opts: &SessionOptions,
    ours: &Holder,
    lease: &KubeLease,
) -> Result<(), SessionError> {
    let refuse = |why: super::Refusal| SessionError::Refused {
        object: super::Subject::lease(&opts.lease),
        why,
    };
    let unclear = |why: String| refuse(super::Refusal::RecordUnclear(why));
    let record = ChainRecord::on_lease(lease, &opts.keys).map_err(|e| unclear(e.to_string()))?;
    let Some(record) = record else {
        return Ok(());
    };
    let owner = record.owner_value().map_err(|e| unclear(e.to_string()))?;
    if owner.holder == *ours {
        return Ok(());
    }
    let kinds = crate::object::recorded_kinds();
    let found = read_members(client, &opts.keys, &kinds, &record, Timestamp::now())
        .await
        .map_err(|e| unclear(format!("its chain record could not be checked: {e}")))?;
    let held: Vec<ObjectRef> = found
        .found
        .iter()
        .filter(
            |f| matches!(&f.state, FoundState::Fence { owner: o, .. } if o.holder == owner.holder),
        )
        .map(|f| f.object.clone())
        .collect();
    if held.is_empty() && found.unknown.is_empty() {
        return Ok(());
    }
    Err(refuse(super::Refusal::RecordsHeldFences {
        holder: owner.holder.to_string(),
        held,
        unreadable: found.unknown,
        lease: opts.lease.to_string(),
    }))
}

async fn read(client: &Client, obj: &ObjectRef) -> Result<Value, SessionError> {
    // Read again while it fails transiently, as every later read is: a restarting API server
    // or a gateway's 502 must not end a queued deploy before it has taken anything. The
    // session's cancel ends it at a signal (`unless_stopped`).
    let read = get_retrying(&api(client, obj), &obj.name, obj, READ_RETRY_BUDGET).await;
    let failed = |source| SessionError::Read {
        object: Box::new(obj.clone()),
        source,
    };
    match read {
        Ok(Some(got)) => serde_json::to_value(&got).map_err(|e| failed(kube::Error::SerdeError(e))),
        Ok(None) => Err(SessionError::NotFound(Box::new(obj.clone()))),
        Err(source) => Err(failed(source)),
    }
}

/// What the fence's decision core would answer for `read` now, without writing: another
/// owner or an exclusive mark already set is a refusal.
fn refuse_foreign(
    obj: &ObjectRef,
    read: &Value,
    keys: &AnnotationKeys,
    reason: Option<&str>,
    holder: &Holder,
) -> Result<(), SessionError> {
    let owner = OwnerValue::new(holder.clone(), Epoch(0));
    let marks = if crate::object::is_gate_kind(&obj.resource) {
        crate::handoff::gate_marks(0)
    } else {
        vec![crate::handoff::pause_mark(crate::object::is_operator_kind(
            &obj.resource,
        ))]
    };
    let decision = decide_acquire(Some(read), keys, &owner, &marks, reason, Timestamp::now())
        .map_err(|e| SessionError::Invalid(e.to_string()))?;
    let why = match decision {
        AcquireDecision::Refuse(r @ (Refusal::Owned { .. } | Refusal::AlreadyMarked { .. })) => {
            super::Refusal::of_fence(r, Some(read))
        }
        _ => return Ok(()),
    };
    Err(SessionError::Refused {
        object: obj.into(),
        why,
    })
}

#[cfg(test)]
mod tests;
