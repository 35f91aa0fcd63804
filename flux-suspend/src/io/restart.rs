use std::collections::BTreeSet;

use flux_fence::LeaseHandle;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, Patch};
use serde_json::{Value, json};

use super::{Timing, lock, poll_soon};
use crate::error::SuspendError;
use crate::retire::{PodView, RestartProgress, restart_progress};

/// Pod-template annotation whose change makes a Deployment roll its Pods (`kubectl rollout
/// restart` sets the same one).
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

/// Bounded re-read-and-decide rounds when another writer (e.g. the Deployment controller
/// updating status) moves the Deployment between our read and our patch.
const PATCH_ROUNDS: usize = 8;

/// The controller Deployment to restart (`flux-system/kustomize-controller`, see docs/design).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerRef {
    pub namespace: String,
    pub name: String,
}

impl Default for ControllerRef {
    fn default() -> Self {
        Self {
            namespace: "flux-system".into(),
            name: "kustomize-controller".into(),
        }
    }
}

impl std::fmt::Display for ControllerRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Deployment {}/{}", self.namespace, self.name)
    }
}

/// What a restart needs to know from before it: the Deployment as read and the UIDs of the
/// Pods that existed then.
#[derive(Debug, Clone)]
pub struct RestartSnapshot {
    deployment: Deployment,
    selector: String,
    before: BTreeSet<String>,
    want: usize,
}

impl RestartSnapshot {
    /// UIDs of the Pods that existed before the restart.
    #[must_use]
    pub fn pods_before(&self) -> &BTreeSet<String> {
        &self.before
    }
}

/// Reads the controller Deployment and its current Pods.
///
/// # Errors
/// [`SuspendError::Kube`], [`SuspendError::Invalid`] (no selector).
pub async fn snapshot_controller(
    client: &Client,
    controller: &ControllerRef,
) -> Result<RestartSnapshot, SuspendError> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &controller.namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &controller.namespace);
    let deployment = deployments
        .get(&controller.name)
        .await
        .map_err(SuspendError::kube("reading the controller Deployment"))?;
    let selector = selector(&deployment).ok_or_else(|| SuspendError::Invalid {
        step: "reading the controller Deployment",
        detail: format!("{controller} has no matchLabels selector"),
    })?;
    let want = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let want = usize::try_from(want).unwrap_or(1);
    let before = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(SuspendError::kube("listing the controller Pods"))?
        .items
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    Ok(RestartSnapshot {
        deployment,
        selector,
        before,
        want,
    })
}

/// Rollout-restarts the controller with a CAS patch carrying `token` as the
/// `restartedAt` value, then waits until every Pod that existed before is gone and the
/// replacements are Ready: [`snapshot_controller`], then [`execute_restart`].
///
/// # Guarantees
/// - The patch tests the uid and resourceVersion it read; a lost race re-reads and decides
///   again (bounded), never overwrites.
/// - With a `lease`, it is asserted (renewed and read back) before every patch: a lost Lease
///   sends no patch.
/// - A patch whose response was lost is adopted only if the Deployment carries `token`.
/// - Old Pods still terminating keep the proof pending: a terminating controller may still be
///   reconciling.
///
/// # Errors
/// [`SuspendError::RestartTimeout`], [`SuspendError::Kube`], [`SuspendError::Invalid`] (no
/// selector), [`SuspendError::Fence`] with [`flux_fence::FenceError::LeaseLost`].
///
/// # Caveats
/// Use a fresh `token` per restart. A Deployment that already carries `token` at the first read
/// (e.g. a run that crashed after its patch) counts the Pods of that rollout as old, so the
/// wait fails closed with a timeout.
pub async fn restart_controller(
    client: &Client,
    controller: &ControllerRef,
    token: &str,
    lease: Option<&LeaseHandle>,
    timing: Timing,
) -> Result<(), SuspendError> {
    let snapshot = snapshot_controller(client, controller).await?;
    execute_restart(client, controller, snapshot, token, lease, timing).await
}

/// Patches `restartedAt` to `token` (CAS on the snapshot's read, adopting a lost response by
/// its token; `lease` asserted before every patch) and waits until every Pod of the snapshot is gone and the replacements are Ready.
///
/// # Errors
/// As [`restart_controller`].
pub async fn execute_restart(
    client: &Client,
    controller: &ControllerRef,
    snapshot: RestartSnapshot,
    token: &str,
    lease: Option<&LeaseHandle>,
    timing: Timing,
) -> Result<(), SuspendError> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &controller.namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &controller.namespace);
    let RestartSnapshot {
        deployment,
        selector,
        before,
        want,
    } = snapshot;
    patch_restarted_at(&deployments, controller, deployment, token, lease).await?;

    let lp = ListParams::default().labels(&selector);
    let last = std::sync::Mutex::new(RestartProgress::Pending {
        old: before.len(),
        ready: 0,
        want,
    });
    let done = poll_soon(timing, || async {
        let found = pods.list(&lp).await.ok()?;
        let views: Vec<PodView> = found
            .items
            .iter()
            .filter_map(|p| serde_json::to_value(p).ok())
            .filter_map(|v| PodView::from_json(&v))
            .collect();
        let progress = restart_progress(&before, &views, want);
        *lock(&last) = progress;
        (progress == RestartProgress::Done).then_some(())
    })
    .await;
    let last = *lock(&last);
    match (done, last) {
        (Some(()), _) | (None, RestartProgress::Done) => Ok(()),
        (None, RestartProgress::Pending { old, ready, want }) => {
            Err(SuspendError::RestartTimeout {
                waited: timing.timeout,
                old,
                ready,
                want,
            })
        }
    }
}

fn selector(deploy: &Deployment) -> Option<String> {
    let labels = deploy.spec.as_ref()?.selector.match_labels.as_ref()?;
    (!labels.is_empty()).then(|| {
        labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    })
}

fn restarted_at(deploy: &Deployment) -> Option<&str> {
    deploy
        .spec
        .as_ref()?
        .template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get(RESTARTED_AT)
        .map(String::as_str)
}

async fn patch_restarted_at(
    api: &Api<Deployment>,
    controller: &ControllerRef,
    mut deploy: Deployment,
    token: &str,
    lease: Option<&LeaseHandle>,
) -> Result<(), SuspendError> {
    for _ in 0..PATCH_ROUNDS {
        if restarted_at(&deploy) == Some(token) {
            return Ok(()); // an earlier attempt landed (lost response adopted by its token)
        }
        let has_annotations = deploy
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .is_some_and(|m| m.annotations.is_some());
        let mut ops = vec![
            json!({ "op": "test", "path": "/metadata/uid", "value": deploy.metadata.uid }),
            json!({ "op": "test", "path": "/metadata/resourceVersion",
                    "value": deploy.metadata.resource_version }),
        ];
        if !has_annotations {
            ops.push(
                json!({ "op": "add", "path": "/spec/template/metadata/annotations", "value": {} }),
            );
        }
        ops.push(json!({
            "op": "add",
            "path": "/spec/template/metadata/annotations/kubectl.kubernetes.io~1restartedAt",
            "value": token,
        }));
        let patch: json_patch::Patch =
            serde_json::from_value(Value::Array(ops)).map_err(|e| SuspendError::Invalid {
                step: "building the restart patch",
                detail: e.to_string(),
            })?;
        if let Some(lease) = lease {
            lease.assert().await.map_err(|source| SuspendError::Fence {
                step: "asserting the Lease before restarting the controller",
                source,
            })?;
        }
        match api
            .patch(
                &controller.name,
                &flux_fence::api::patch_params(),
                &Patch::Json::<()>(patch),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {}
            Err(kube::Error::Api(s)) => {
                return Err(SuspendError::Kube {
                    step: "patching the controller Deployment",
                    source: kube::Error::Api(s),
                });
            }
            // Transport error: the outcome is unknown; the re-read below decides.
            Err(e) => tracing::warn!(error = %e, "restart patch outcome unknown; re-reading"),
        }
        deploy = api
            .get(&controller.name)
            .await
            .map_err(SuspendError::kube("re-reading the controller Deployment"))?;
    }
    Err(SuspendError::Invalid {
        step: "patching the controller Deployment",
        detail: format!("{controller} kept changing under us ({PATCH_ROUNDS} rounds)"),
    })
}
