//! Releasing one planned fence: adopt exactly the fence the plan judged (holder and epoch,
//! re-read from the object), release it with one CAS, and record a `HandoffRecovered` Event.

use std::sync::Arc;

use kube::api::{Api, DynamicObject};

use super::run::{Recovery, words};
use crate::api::{error, get_retrying};
use crate::discover::owner_of;
use crate::events::EventKind;
use crate::outcome::ReleaseOutcome;
use crate::{Fencer, ObjectRef, OwnerValue};

impl Recovery {
    /// Adopts the recorded fence of `holder` at `epoch` on `obj` (owner re-read from the
    /// object, never assumed) and releases it with a CAS; a `HandoffRecovered` Event on it
    /// names the holder and the evidence `why`. A fence of the same holder at another epoch is
    /// a later run's (the plan was made on an older view): it is not touched.
    pub(super) async fn release_one(
        &self,
        obj: &ObjectRef,
        holder: &str,
        epoch: Option<u64>,
        why: &str,
    ) -> Result<(), String> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &obj.namespace, &obj.resource);
        let read = get_retrying(&api, &obj.name, obj, crate::api::READ_RETRY_BUDGET)
            .await
            .map_err(|e| words(&error("get", obj.resource_name(), obj.target(), e)))?
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| words(&e))?;
        let planned = match epoch {
            Some(e) => format!("{holder};{e}"),
            None => holder.to_string(),
        };
        let gone = || format!("no longer fenced by {planned}; nothing changed");
        let owner = read
            .as_ref()
            .and_then(|r| owner_of(r, &self.keys))
            .and_then(|o| o.parse::<OwnerValue>().ok())
            .filter(|o| same_fence(o, holder, epoch))
            .ok_or_else(gone)?;
        let fencer = Fencer::new(self.client.clone(), self.keys.clone(), owner.clone())
            .with_clock(Arc::clone(&self.clock));
        let guard = fencer
            .adopt_recorded(obj, &owner)
            .await
            .map_err(|e| words(&e))?
            .ok_or_else(gone)?;
        let uid = read
            .as_ref()
            .and_then(|r| r.pointer("/metadata/uid"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string();
        match fencer.release(guard).await.map_err(|e| words(&e))? {
            ReleaseOutcome::Released { .. } => {
                let msg = format!("recovered from gone holder {owner}: {why}");
                crate::events::record(&self.client, obj, &uid, EventKind::Recovered, &msg).await;
                Ok(())
            }
            ReleaseOutcome::Kept { guard, why } => {
                (*guard).leave_in_place();
                Err(format!("kept: {why:?}"))
            }
            other => Err(format!("not released: {other:?}")),
        }
    }
}

/// Whether `found` is the fence a plan judged: the same holder, and the same epoch when the
/// plan knew it. Pure.
pub(super) fn same_fence(found: &OwnerValue, holder: &str, epoch: Option<u64>) -> bool {
    found.holder.as_str() == holder && epoch.is_none_or(|e| found.epoch.0 == e)
}
