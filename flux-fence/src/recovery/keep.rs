//! `fences release --keep-moved` on an operator's word: read and decide
//! ([`crate::keep_moved::decide_keep_moved`]), then send the decided patch
//! ([`Fencer::release_keeping_moved`]). Every refusal is a [`Refused`]; nothing changed.

use std::sync::Arc;

use kube::api::{Api, DynamicObject};

use super::release::{Refused, ReleaseRefusal};
use super::run::Recovery;
use crate::api::{READ_RETRY_BUDGET, error, get_retrying};
use crate::engine::{Member, Rules, Settled, release_members};
use crate::keep_moved::{KeepMoved, KeepMovedRefusal};
use crate::{FenceError, Fencer, Holder, ObjectRef, OwnerValue};

impl Recovery {
    /// Reads `obj` and decides the settling patch of `holder`'s fence: every value other
    /// writers moved kept as found, every other mark restored, the fence removed. Read-only.
    ///
    /// # Errors
    /// A failed read.
    pub async fn prepare_keep_moved(
        &self,
        obj: &ObjectRef,
        holder: &Holder,
    ) -> Result<Result<KeepMoved, Refused>, FenceError> {
        let fencer = self.fencer(OwnerValue::new(holder.clone(), crate::Epoch(0)));
        let reason = match fencer.plan_keeping_moved(obj, holder).await? {
            Ok(plan) => match self
                .at_work(self.lease_named_on(obj).await?.as_deref(), holder)
                .await?
            {
                None => return Ok(Ok(plan)),
                Some(at_work) => at_work,
            },
            Err(KeepMovedRefusal::NotFound) => ReleaseRefusal::NotFound,
            Err(KeepMovedRefusal::NotFenced) => ReleaseRefusal::NoFence,
            Err(KeepMovedRefusal::OtherHolder { found }) => ReleaseRefusal::OtherHolder {
                found: found.to_string(),
                named: holder.to_string(),
            },
            Err(KeepMovedRefusal::NothingMoved) => ReleaseRefusal::NothingMoved,
            Err(_) => ReleaseRefusal::Malformed,
        };
        Ok(Err(Refused {
            object: obj.clone(),
            reason,
        }))
    }

    /// Sends the patch [`Recovery::prepare_keep_moved`] decided, as decided, through the
    /// release engine (`engine::Member::keeping_moved`). Returns the
    /// `resourceVersion` after it, when known.
    ///
    /// # Errors
    /// API failures.
    pub async fn release_keeping_moved(
        &self,
        obj: &ObjectRef,
        plan: &KeepMoved,
    ) -> Result<Result<Option<String>, Refused>, FenceError> {
        let fencer = self.fencer(plan.held.owner.clone());
        let child = self.child.is_child(&plan.held.marks);
        let member = Member::keeping_moved(obj.clone(), plan.clone(), child);
        let settled = release_members(&fencer, vec![member], None, Rules::one_holder()).await;
        let reason = match settled.into_iter().next() {
            Some(Settled::Released {
                resource_version, ..
            }) => return Ok(Ok(resource_version)),
            Some(Settled::NotApplied { unknown: false, .. }) => ReleaseRefusal::MovedSinceRead,
            Some(Settled::Gone { .. }) => ReleaseRefusal::Gone,
            Some(Settled::NotOurs { found, .. }) => ReleaseRefusal::NowFencedBy(found),
            Some(Settled::Failed { error, .. }) => return Err(error),
            _ => ReleaseRefusal::Kept("the answer was lost and the fence is still on it".into()),
        };
        Ok(Err(Refused {
            object: obj.clone(),
            reason,
        }))
    }

    /// The Lease (`namespace/name`) the fence on `obj` names, if any. One read.
    async fn lease_named_on(&self, obj: &ObjectRef) -> Result<Option<String>, FenceError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &obj.namespace, &obj.resource);
        let read = get_retrying(&api, &obj.name, obj, READ_RETRY_BUDGET)
            .await
            .map_err(|e| error("get", obj.resource_name(), obj.target(), e))?;
        Ok(read.and_then(|o| {
            o.metadata
                .annotations
                .and_then(|mut a| a.remove(&self.keys.lease))
        }))
    }

    fn fencer(&self, owner: OwnerValue) -> Fencer {
        Fencer::new(self.client.clone(), self.keys.clone(), owner)
            .with_clock(Arc::clone(&self.clock))
    }
}
