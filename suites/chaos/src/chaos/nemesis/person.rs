//! A person's edits, as the nemesis makes them: `flux resume` (`spec.suspend=false`), Flux
//! Operator's resume (`spec.suspend` removed) on a fenced member, and a held Lease's
//! `leaseDurationSeconds` shortened "to speed up recovery".

use kube::api::{Api, Patch, PatchParams};
use serde_json::Value;

use super::poll::poll_async;
use super::schedule::Fault;
use crate::chaos::cell::{LEASE, PARENT, Site, TARGET};

/// Makes the edit `fault` names once its object is in the state it edits (a member fenced
/// and suspended, the Lease held), or gives up when `until_done` resolves; whether it was made.
pub(super) async fn edit(cell: &Site, fault: &Fault, until_done: impl Future<Output = ()>) -> bool {
    match fault {
        Fault::FluxResume { member } | Fault::OperatorResume { member } => {
            let name = [PARENT, TARGET][member % 2];
            let api = Api::<kube::api::DynamicObject>::namespaced_with(
                cell.client.clone(),
                &cell.namespace,
                &testkit::fixtures::kustomization_resource(),
            );
            let fenced = poll_async(until_done, || async {
                let o = api.get(name).await.ok()?;
                let d = serde_json::to_value(&o).ok()?;
                let owner = d.pointer("/metadata/annotations/flux-handoff.io~1owner");
                (owner.is_some() && d.pointer("/spec/suspend") == Some(&Value::Bool(true)))
                    .then_some(())
            })
            .await;
            // `flux resume` sets false; Flux Operator's resume removes the field.
            let to = if matches!(fault, Fault::FluxResume { .. }) {
                Value::Bool(false)
            } else {
                Value::Null
            };
            let body = serde_json::json!({ "spec": { "suspend": to } });
            fenced.is_some()
                && api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&body))
                    .await
                    .is_ok()
        }
        Fault::LeaseEdit { seconds } => {
            let api = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
                cell.client.clone(),
                &cell.namespace,
            );
            let held = poll_async(until_done, || async {
                let l = api.get(LEASE).await.ok()?;
                l.spec?
                    .holder_identity
                    .filter(|h| !h.is_empty())
                    .map(|_| ())
            })
            .await;
            let body = serde_json::json!({ "spec": { "leaseDurationSeconds": seconds } });
            held.is_some()
                && api
                    .patch(LEASE, &PatchParams::default(), &Patch::Merge(&body))
                    .await
                    .is_ok()
        }
        _ => false,
    }
}
