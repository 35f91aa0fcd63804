use kube::Client;

use super::{Timing, lock, poll_soon};
use crate::error::SuspendError;
use crate::flux;
use crate::object::get_json;
use crate::quiesce::{Blocker, blockers};
use flux_fence::ObjectRef;

/// Waits until `target` shows no `Reconciling=True` and every `dependsOn` object is Ready.
///
/// # Errors
/// [`SuspendError::QuiesceTimeout`] naming the blockers of the last read — the one place
/// conditions are printed, because nothing about the target is fenced yet.
pub async fn wait_quiet(
    client: &Client,
    target: &ObjectRef,
    timing: Timing,
) -> Result<(), SuspendError> {
    let last: std::sync::Mutex<Vec<Blocker>> = std::sync::Mutex::default();
    let quiet = poll_soon(timing, || async {
        let obj = get_json(client, target).await.ok()?;
        let mut deps = Vec::new();
        for dep in flux::depends_on(&obj) {
            let r = ObjectRef::new(target.resource.clone(), &dep.namespace, &dep.name);
            deps.push((dep, get_json(client, &r).await.ok()));
        }
        let found = blockers(&obj, &deps);
        let quiet = found.is_empty();
        *lock(&last) = found;
        quiet.then_some(())
    })
    .await;
    quiet.ok_or_else(|| SuspendError::QuiesceTimeout {
        object: Box::new(target.clone()),
        waited: timing.timeout,
        blockers: std::mem::take(&mut *lock(&last)),
    })
}
